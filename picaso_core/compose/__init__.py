"""Composition: the PICASO methods that make one state of many contexts' states (paper sec. 3.3).

    methods     the math: Soup, CASO, PICASO-S, PICASO-R, weighted and decay mixing from states;
                Concat and PICConcat-R from tokens
    attention   a hybrid's attention layers in a composed state (keys and values joined, RoPE re-rotated)
    registry    every method's record: name, label, colour, kind, order invariance, needs (torch-free)
    build       build_state: the state any method of the registry builds

The public names below are the package's face: `from picaso_core.compose import compose`. The face is
lazy (PEP 562 `__getattr__`): a name imports its module on first use, so that the torch-free modules
reading the registry (the analyses on `--help`'s path, the figures) do not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.compose.build import build_state  # noqa: F401
    from picaso_core.compose.methods import CONV_MODES, METHODS, TOKEN_METHODS, caso_weights, compose  # noqa: F401
    from picaso_core.compose.methods import compose_tokens, composition_weights, decay_mix  # noqa: F401
    from picaso_core.compose.methods import mean_of_rotations, nested_token_states, picaso_r_weights  # noqa: F401
    from picaso_core.compose.methods import picaso_s_weights, soup_weights, weighted_sum  # noqa: F401
    from picaso_core.compose.registry import ABLATION, BASELINE, REGISTRY, Method, by_label, colour  # noqa: F401
    from picaso_core.compose.registry import label, labels, method, methods_for  # noqa: F401

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "methods": ("METHODS", "TOKEN_METHODS", "CONV_MODES", "compose", "compose_tokens", "composition_weights",
                "soup_weights", "caso_weights", "picaso_r_weights", "picaso_s_weights", "decay_mix", "weighted_sum",
                "mean_of_rotations", "nested_token_states"),
    "registry": ("REGISTRY", "Method", "ABLATION", "BASELINE", "method", "by_label", "label", "labels", "colour",
                 "methods_for"),
    "build": ("build_state",),
})

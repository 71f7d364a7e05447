"""Composition: the PICASO methods that make one state of many contexts' states (paper sec. 3.3).

    methods     the math: Soup, CASO, PICASO-S, PICASO-R, weighted and decay mixing from states;
                Concat and PICConcat-R from tokens
    attention   a hybrid's attention layers in a composed state (keys and values joined, RoPE re-rotated)

The public names below are the package's face: `from picaso_core.compose import compose`.
"""

from picaso_core.compose.attention import (ATTENTION_MODES, ROPE_MODES, check_modes, comparable_shapes,  # noqa: F401
                                           composed_kv, join_kv, rotary, shift_positions)
from picaso_core.compose.methods import *  # noqa: F401,F403
from picaso_core.compose.methods import __all__ as _methods_all

__all__ = list(_methods_all)

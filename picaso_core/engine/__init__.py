"""The engine: a language model stacked from layer kinds, whose context state is a value.

    config.py       ModelConfig, SSMConfig: typed, mamba_ssm's config.json fields (Mamba-1, Mamba-2)
    hybrid_config.py  HybridConfig: Nemotron-H, Granite-4.0-H, Bamba config.json as read
    layout.py       Layout (model.layout): family, every layer's kinds, the state's parts; each family's names
    layers/         one module per layer kind (mamba1, mamba2, attention, mlp, moe) and their registry
    model.py        LanguageModel (SSMLanguageModel, HybridLanguageModel): forward(ids, state) -> (logits,
                    new state), losses, step, generate
    scan.py         the chunked SSD scan and the selective scan (pure torch; optional kernels)
    state.py        ContextState: per-layer SSM state, conv window, accumulated log-decay (+ keys, values)
    observe.py      named stages recorded at the engine's call sites, for the lab
    decode.py       batched recurrent decoding (generate_batch) on the model's O(1) step
    graphs.py, kernels.py, triton_step.py   the GPU paths: CUDA graphs, optional kernels, Triton step
    tokenizer.py    the byte-level BPE tokenizer (demo) and the GPT-NeoX one (hub checkpoints)
    init.py         mimetic initialisation, for models trained here; losses.py  per-token NLL
    loading.py      load_model("demo" | folder | hub id), save_model, device checks
    rng.py          seeded(seed): a reproducible model build in a threaded process

The engine imports nothing of picaso_core but picaso_core.light (tests/test_architecture.py checks
it): composition, the store, retrieval, analyses, labs and the UI build on it, never the other way
round.

The face: `from picaso_core.engine import load_model, ContextState, ...` (docs/api.md lists every
name). It is lazy (PEP 562 `__getattr__`): a name imports its module on first use, because
`import picaso_core` imports engine/config.py, and so this file, and must not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.engine.config import ModelConfig, SSMConfig  # noqa: F401
    from picaso_core.engine.decode import generate_batch, score_and_generate  # noqa: F401
    from picaso_core.engine.init import mimetic_init_  # noqa: F401
    from picaso_core.engine.loading import DEMO_MODEL_DIR, check_device, load_model, load_weights  # noqa: F401
    from picaso_core.engine.loading import save_model  # noqa: F401
    from picaso_core.engine.losses import token_nll  # noqa: F401
    from picaso_core.engine.hybrid import HybridLanguageModel  # noqa: F401
    from picaso_core.engine.layout import Layout, layout_of  # noqa: F401
    from picaso_core.engine.model import LanguageModel, SSMLanguageModel  # noqa: F401
    from picaso_core.engine.rng import seeded  # noqa: F401
    from picaso_core.engine.state import ContextState  # noqa: F401
    from picaso_core.engine.tokenizer import EOS_TOKEN, HUB_TIMEOUT_S, Tokenizer, check_hub_reachable  # noqa: F401
    from picaso_core.engine.tokenizer import hub_offline, train_bpe  # noqa: F401

_FACE = {
    "config": ("ModelConfig", "SSMConfig"),
    "state": ("ContextState",),
    "model": ("SSMLanguageModel", "LanguageModel"),
    "hybrid": ("HybridLanguageModel",),
    "layout": ("Layout", "layout_of"),
    "loading": ("load_model", "save_model", "load_weights", "check_device", "DEMO_MODEL_DIR"),
    "decode": ("generate_batch", "score_and_generate"),
    "losses": ("token_nll",),
    "tokenizer": ("Tokenizer", "train_bpe", "EOS_TOKEN", "HUB_TIMEOUT_S", "hub_offline", "check_hub_reachable"),
    "rng": ("seeded",),
    "init": ("mimetic_init_",),
}
__getattr__, __dir__, __all__ = lazy_face(__name__, _FACE)

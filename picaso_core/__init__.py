"""PICASO Explorer core: an SSM language model with explicit, composable context states.

    engine/      the model, its state as a value, decoding, loading (imports nothing above it)
    compose.py   the composition methods of PICASO: Concat, Soup, CASO, PICASO-S, PICASO-R, PICConcat-R
    data/        corpora as one RetrievalSample schema: the demo world, WikiText-2, MS MARCO, .jsonl
    store/       the database of states; retrieval/  which stored contexts to compose
    analysis/    evaluation, the paper's protocol, attribution, landscapes, state soups
    finetune/    BPTC / BP2C; lab/  the primer and the COFFEE lab; plots/  figures; ui/  the app's tabs

Imports run downward only, in that order (tests/test_architecture.py; docs/architecture.md).
"""

from picaso_core.engine.config import ModelConfig, SSMConfig

__all__ = ["ModelConfig", "SSMConfig", "ContextState", "SSMLanguageModel", "load_model"]


def __getattr__(name):  # lazy: `import picaso_core` (and so the CLIs' --help) does not import torch
    if name == "ContextState":
        from picaso_core.engine.state import ContextState

        return ContextState
    if name == "SSMLanguageModel":
        from picaso_core.engine.model import SSMLanguageModel

        return SSMLanguageModel
    if name == "load_model":
        from picaso_core.engine.loading import load_model

        return load_model
    raise AttributeError(name)

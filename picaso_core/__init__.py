"""PICASO Explorer core: an SSM language model with explicit, composable context states.

The engine (config, scan, model, state, loading) imports no UI, plotting or dataset code.
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

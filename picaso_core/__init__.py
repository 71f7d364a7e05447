"""PICASO Explorer core: an SSM language model with explicit, composable context states.

The engine (config, scan, model, state, loading) imports no UI, plotting or dataset code.
"""

from picaso_core.config import ModelConfig, SSMConfig
from picaso_core.state import ContextState

__all__ = ["ModelConfig", "SSMConfig", "ContextState", "SSMLanguageModel", "load_model"]


def __getattr__(name):  # lazy: `import picaso_core` stays cheap for the data and UI modules
    if name == "SSMLanguageModel":
        from picaso_core.model import SSMLanguageModel

        return SSMLanguageModel
    if name == "load_model":
        from picaso_core.loading import load_model

        return load_model
    raise AttributeError(name)

"""HybridLanguageModel: a LanguageModel of a hybrid family's config (Nemotron-H, Granite-4.0-H, Bamba).

The model is engine/model.py's LanguageModel, stacked from the layout's kinds (Mamba-2, attention,
MLP, MoE; engine/layers/) under the family's transformers names (engine/layout.py), so a
checkpoint's state dict loads as it is and save_model writes one transformers' own class loads. Its
ContextState holds the Mamba-2 layers' SSM state, conv window and log-decay (stacked over the SSM
layers, as a pure Mamba-2's) and the attention layers' keys and values (engine/state.py). Every
sub-block is pre-norm residual: h <- h + m · f(norm(h)), m = Granite's residual_multiplier (1
elsewhere); the residual stream stays in the model dtype, as transformers keeps it.
"""

from __future__ import annotations

from picaso_core.engine.hybrid_config import HybridConfig
from picaso_core.engine.layers.common import ScaledHead  # noqa: F401 (its old home)
from picaso_core.engine.model import LanguageModel


class HybridLanguageModel(LanguageModel):
    def __init__(self, config: HybridConfig):
        if not isinstance(config, HybridConfig):
            raise TypeError(f"HybridLanguageModel reads a HybridConfig, got {type(config).__name__}; "
                            "load_model picks the class for a checkpoint")
        super().__init__(config)

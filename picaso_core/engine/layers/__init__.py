"""The layer kinds a model is stacked from, one module each, and their registry.

    mamba1      mamba_ssm's Mamba mixer (Mamba-1, Falcon-Mamba)       state part "ssm"
    mamba2      mamba_ssm's Mamba2 mixer (Mamba-2, the hybrids')      state part "ssm"
    attention   grouped-query attention, optional RoPE, through SDPA  state part "kv"
    mlp         the hybrids' dense MLPs                               no state
    moe         the hybrids' mixtures of experts                      no state
    common      what they share (RMS norms, the dt bias init); kind   the contract (LayerKind, the runs)

Adding a kind: one module here defining its classes and a `KIND` record (kind.py's contract), and one
line in KINDS below; a family that uses it names it in engine/layout.py (docs/architecture.md).
"""

from picaso_core.engine.layers import attention, mamba1, mamba2, mlp, moe
from picaso_core.engine.layers.kind import STATE_PARTS, ChunkRun, LayerKind, StepRun

KINDS: dict[str, LayerKind] = {k.name: k for k in (
    mamba1.KIND,
    mamba2.KIND,
    attention.KIND,
    mlp.KIND,
    moe.KIND,
)}

__all__ = ["KINDS", "STATE_PARTS", "LayerKind", "ChunkRun", "StepRun", "kind"]


def kind(name: str) -> LayerKind:
    """The registered kind `name`; an unknown one named with the known ones."""
    if name not in KINDS:
        raise ValueError(f"unknown layer kind {name!r}; the engine has {', '.join(KINDS)}")
    return KINDS[name]

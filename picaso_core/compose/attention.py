"""The attention layers' part of a composed hybrid state (docs/hybrid.md, "Composition").

A hybrid context's state holds, beside its Mamba layers' SSM state, the keys and values of every
position each attention layer read: keys, values [A, Hkv, T_k, dh], keys stored after RoPE at the
positions 0..T_k-1 (engine/state.py). An attention layer's cache has no fixed size to mix into:
softmax attention over a set of positions is already an average, weighted by the scores. So a
composition keeps every context's own keys and values and joins them along the positions, in the
order the method implies (compose.py's methods; the same rule for every one):

    concat, caso            presentation order (the order the contexts are read in)
    soup, picaso_s/_r       presentation order too: attention without position encoding is invariant
                            to the order of the positions it attends to, so any order gives the same
                            output; with RoPE the order decides each context's positions (below)
    weighted                the contexts whose weight is not 0, in presentation order, unweighted
                            (a weight has no counterpart in a cache the model reads: softmax
                            normalises over positions; a weight of 0 leaves a context out)

RoPE (Granite-4.0-H "rope", Bamba): rope="joined" (the default) rotates context k's keys by the
number of positions joined before it, so that they sit where they would in the joined sequence and
the next token, read at T = Σ T_k, sees every context at its distance there. A rotation by an offset
composes with the one already stored (RoPE's angles of one frequency add: R(p + o) = R(o) R(p)),
so the rotation is exact up to float rounding. rope="own" keeps each context's own positions
0..T_k-1 (no rotation), the measured alternative. Without position encoding (Nemotron-H,
Granite-4.0-H "nope") a position is only an index and both are the same.

attention="drop" is the ablation: the SSM part as composed, the keys and values of no position
(T = 0), to show what the attention layers carry.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from picaso_core.engine.layers.attention import rope as rope_rotate
from picaso_core.engine.state import VARIABLE, ContextState

__all__ = ["ATTENTION_MODES", "ROPE_MODES", "rotary", "shift_positions", "join_kv", "composed_kv",
           "comparable_shapes", "check_modes"]

ATTENTION_MODES = ("join", "drop")
ROPE_MODES = ("joined", "own")


def check_modes(attention: str, rope: str) -> None:
    if attention not in ATTENTION_MODES:
        raise ValueError(f"attention={attention!r}: valid values are {ATTENTION_MODES}")
    if rope not in ROPE_MODES:
        raise ValueError(f"rope={rope!r}: valid values are {ROPE_MODES}")


def rotary(config) -> tuple[float, int] | None:
    """(theta, rotary_dim) of the RoPE of `config` (a HybridConfig, or a model: its .config); None for
    attention without position encoding, a pure model, or no config (positions then stay as stored)."""
    cfg = getattr(config, "config", config)
    theta = getattr(cfg, "rope_theta", None)
    return None if theta is None else (float(theta), int(cfg.rotary_dim))


def shift_positions(keys: Tensor, offset: int, theta: float, dim: int) -> Tensor:
    """Keys [A, Hkv, T, dh] stored rotated to positions p -> the same keys at positions p + offset."""
    if offset == 0:
        return keys
    A, _, T, _ = keys.shape
    pos = torch.full((A, T), int(offset), dtype=torch.long, device=keys.device)
    return rope_rotate(keys, pos, theta, dim)


def join_kv(parts: Sequence[tuple[Tensor, Tensor]], rot: tuple[float, int] | None,
            rope: str = "joined") -> tuple[Tensor, Tensor]:
    """The keys and values [A, Hkv, ΣT_k, dh] of `parts` (n pairs [A, Hkv, T_k, dh]) joined in the
    given order; with RoPE (`rot`) and rope="joined", part k's keys rotated by the positions before it."""
    keys, offset = [], 0
    for k, _ in parts:
        keys.append(shift_positions(k, offset, *rot) if rot is not None and rope == "joined" else k)
        offset += k.shape[-2]
    return torch.cat(keys, dim=-2), torch.cat([v for _, v in parts], dim=-2)


def composed_kv(states: Sequence[ContextState], method: str, weights: Tensor | None, attention: str,
                rot: tuple[float, int] | None, rope: str) -> dict:
    """The keys and values of compose(method, states, ...): {} for pure states, else keys= and values=
    (see the module docstring); `weights`: method "weighted"'s n weights as a tensor."""
    first = states[0]
    if first.keys is None:
        return {}
    if attention == "drop":
        A, Hkv, _, dh = first.keys.shape
        return dict(keys=first.keys.new_zeros(A, Hkv, 0, dh), values=first.values.new_zeros(A, Hkv, 0, dh))
    kept = states if method != "weighted" else [s for s, w in zip(states, weights.tolist()) if w != 0]
    if not kept:  # every weight 0: no context is attended to
        return composed_kv(states, method, weights, "drop", rot, rope)
    keys, values = join_kv([(s.keys, s.values) for s in kept], rot, rope)
    return dict(keys=keys, values=values)


def comparable_shapes(state: ContextState) -> dict[str, tuple[int, ...]]:
    """`state.shapes` with the positions of keys and values VARIABLE: states of one model compose
    whatever number of positions each holds; a pure and a hybrid state, or other heads, do not."""
    shapes = state.shapes
    if state.keys is not None:
        if state.keys.shape != state.values.shape:
            raise ValueError(f"a state's keys {list(state.keys.shape)} and values {list(state.values.shape)} "
                             "differ in shape: it was not made by the engine (encode the context with the model)")
        for k in ("keys", "values"):
            shapes[k] = (*shapes[k][:-2], VARIABLE, shapes[k][-1])
    return shapes

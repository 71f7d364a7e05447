"""Attention layers of a hybrid: grouped-query attention through torch SDPA, RoPE optional, with the
keys and values of everything read before carried as a value (ContextState.keys / .values).

Glossary: b batch, t new tokens, T positions already held, H query heads, Hkv key-value heads
(H / Hkv queries share a key), dh head dim, A attention layers.

Positions: row i's new tokens sit at positions kv_len[i], kv_len[i] + 1, ...: RoPE rotates the
queries and keys there, and keys are stored rotated (as transformers' caches hold them). Without
position encoding (Nemotron-H, Granite-4.0-H "nope") a position is only an index into the cache.

Batches: rows may hold different numbers of positions (kv_len) and read different numbers of
tokens (right padding, `lengths`). A row's cache is its valid positions first, then padding the
masks never read; after a forward row i holds kv_len[i] + lengths[i] valid positions.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from picaso_core.engine.layers.kind import LayerKind
from picaso_core.engine.state import VARIABLE, ContextState


def rope(x: Tensor, pos: Tensor, theta: float, dim: int) -> Tensor:
    """Rotate the first `dim` channels of x [b, h, t, dh] to positions pos [b, t] (the half-split
    RoPE of Llama / transformers' rotate_half; the other channels pass through)."""
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim)
    f = pos[..., None].float() * inv  # [b, t, dim/2]
    emb = torch.cat([f, f], dim=-1)[:, None]  # [b, 1, t, dim]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    xr, rest = x[..., :dim], x[..., dim:]
    x1, x2 = xr.chunk(2, dim=-1)
    return torch.cat([xr * cos + torch.cat([-x2, x1], dim=-1) * sin, rest], dim=-1)


class KVCache:
    """Decode buffers of a batched hybrid state's keys and values: [b, A, Hkv, capacity, dh], row i
    valid up to lengths[i]; each step writes one position per row and layer, and the capacity
    doubles when full (so a token costs O(1) allocations amortised, O(T) attention)."""

    def __init__(self, st: ContextState, reserve: int = 64):
        b, A, Hkv, T, dh = st.keys.shape
        self.keys = st.keys.new_zeros(b, A, Hkv, T + reserve, dh)
        self.values = torch.zeros_like(self.keys)
        self.keys[..., :T, :], self.values[..., :T, :] = st.keys, st.values
        self.lengths = torch.tensor(st.kv_lengths, dtype=torch.long, device=st.keys.device)
        self.longest = max(st.kv_lengths, default=0)  # on the host: the positions a step must read

    def reserve(self) -> None:
        """Room for one more position in every row."""
        if self.longest + 1 > self.keys.shape[-2]:
            grow = lambda t: F.pad(t, (0, 0, 0, t.shape[-2]))  # noqa: E731
            self.keys, self.values = grow(self.keys), grow(self.values)

    def advance(self) -> None:
        """After a step: every row holds one more position."""
        self.lengths += 1
        self.longest += 1

    def state(self) -> tuple[Tensor, Tensor, tuple[int, ...]]:
        n = self.longest
        return self.keys[..., :n, :].contiguous(), self.values[..., :n, :].contiguous(), tuple(self.lengths.tolist())


class Attention(nn.Module):
    """q_proj, k_proj, v_proj, o_proj as transformers names them; scale: 1/sqrt(dh) or Granite's
    attention_multiplier; rope_theta None: no position encoding."""

    def __init__(self, d: int, n_heads: int, n_kv_heads: int, head_dim: int, bias: bool, scale: float,
                 rope_theta: float | None = None, rotary_dim: int = 0):
        super().__init__()
        self.H, self.Hkv, self.dh, self.scale = n_heads, n_kv_heads, head_dim, scale
        self.rope_theta, self.rotary_dim = rope_theta, rotary_dim
        self.q_proj = nn.Linear(d, n_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(d, n_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d, n_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * head_dim, d, bias=bias)

    def _qkv(self, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [b, t, D] at positions pos [b, t] -> q [b, H, t, dh], k, v [b, Hkv, t, dh]."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.H, self.dh).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.Hkv, self.dh).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.Hkv, self.dh).transpose(1, 2)
        if self.rope_theta is not None:
            q, k = (rope(z, pos, self.rope_theta, self.rotary_dim) for z in (q, k))
        return q, k, v

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask, scale=self.scale,
                                             enable_gqa=self.H != self.Hkv)
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.H * self.dh))

    def forward(self, x: Tensor, keys: Tensor, values: Tensor, kv_len: Tensor, aligned: bool,
                total: int) -> tuple[Tensor, Tensor, Tensor]:
        """x [b, t, D] read after keys, values [b, Hkv, T, dh] (row i valid up to kv_len[i] [b];
        `aligned`: every row holds all T). Returns out [b, t, D] and the keys and values after x,
        [b, Hkv, total, dh], row i valid up to kv_len[i] + its tokens (`total` the longest).
        A padded token (right padding) is read but never attended to by a real one."""
        b, t, _ = x.shape
        T = keys.shape[2]
        pos = kv_len[:, None] + torch.arange(t, device=x.device)  # [b, t]
        q, k, v = self._qkv(x, pos)
        K, V = torch.cat([keys, k.to(keys.dtype)], dim=2), torch.cat([values, v.to(values.dtype)], dim=2)
        old = (torch.arange(T, device=x.device) < kv_len[:, None])[:, None, None, :].expand(b, 1, t, T)
        new = torch.ones(t, t, dtype=torch.bool, device=x.device).tril().expand(b, 1, t, t)
        out = self._attend(q, K, V, torch.cat([old, new], dim=-1))
        if not aligned:  # compact: row i's new positions follow its own kv_len[i] valid ones
            j = torch.arange(total, device=x.device)[None, :]
            src = torch.where(j < kv_len[:, None], j, T + j - kv_len[:, None]).clamp(max=T + t - 1)
            src = src[:, None, :, None].expand(b, self.Hkv, total, self.dh)
            return out, K.gather(2, src), V.gather(2, src)
        return out, K[:, :, :total], V[:, :, :total]

    def step(self, x: Tensor, cache: KVCache, a: int) -> Tensor:
        """One token per row: x [b, D], written at position cache.lengths[i] of layer a's cache
        (IN PLACE; the caller reserves room first and advances the cache after every layer)."""
        b = x.shape[0]
        q, k, v = self._qkv(x[:, None], cache.lengths[:, None])
        at = cache.lengths.view(b, 1, 1, 1).expand(b, self.Hkv, 1, self.dh)
        keys, values = cache.keys[:, a], cache.values[:, a]
        keys.scatter_(2, at, k.to(keys.dtype))
        values.scatter_(2, at, v.to(values.dtype))
        n = cache.longest + 1
        mask = (torch.arange(n, device=x.device) <= cache.lengths[:, None])[:, None, None, :]
        return self._attend(q, keys[:, :, :n], values[:, :, :n], mask)[:, 0]


# ---- the kind ---------------------------------------------------------------------------------
def _build(cfg) -> Attention:
    return Attention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.attention_bias, cfg.attention_scale,
                     cfg.rope_theta, cfg.rotary_dim)


def _chunk(mods, x: Tensor, run) -> Tensor:
    a = len(run.keys)
    out, k, v = mods[0](x, run.keys_in[:, a], run.values_in[:, a], run.kv_len, run.aligned, run.total)
    run.keys.append(k)
    run.values.append(v)
    return out


def _step(mods, x: Tensor, run) -> Tensor:
    a = run.a
    run.a += 1
    return mods[0].step(x, run.cache, a)


def _part(cfg) -> dict[str, tuple[int, ...]]:
    kv = (cfg.n_kv_heads, VARIABLE, cfg.head_dim)  # the positions read: VARIABLE, they grow with the tokens
    return {"keys": kv, "values": kv}


KIND = LayerKind("attention", "attention", "kv", _build, _chunk, _step,
                 {"nemotron_h": "mixer", "granitemoehybrid": "self_attn", "bamba": "self_attn"}, _part)

"""ContextState: the state of an SSM language model after reading a context, as a value.

Glossary (paper sec. 3.1, eq. 2):  x(u) = accumulated input signal = `ssm`;
A(u) = accumulated decay = exp(`log_decay`), diagonal, so products are element-wise.

Shapes of one context (no batch dimension):
    Mamba-2  ssm [L, H, P, N]   log_decay [L, H, 1, 1]   (one scalar decay per head)
    Mamba-1  ssm [L, D, N]      log_decay [L, D, N]      (a decay per channel and state dim)
    both     conv [L, C, K-1]   the last K-1 pre-conv inputs of each layer, oldest first
A batch of B states carries a leading B on every tensor and a tuple of B token counts; the model
takes and returns batches, composition works on lists of single states.

A hybrid model's state (attention layers beside the Mamba layers, docs/hybrid.md) holds its SSM
layers' tensors as above, stacked over the SSM layers only (L = the number of SSM layers), and
per attention layer the keys and values of every position read (float32 too, whatever the model dtype):
    keys, values  [A, Hkv, T, dh]   (A attention layers, Hkv key-value heads, T positions, dh head dim)
T is the number of key positions (usually num_tokens; a composed state may hold other counts).
Keys are stored after RoPE, rotated to their positions 0..T-1; the next token is read at
position T. A batch pads every row's keys to the longest row and carries `kv_len`, each row's
number of valid positions (the first kv_len[i]); the rest is never read. A pure SSM state has
keys = values = kv_len = None and is stored exactly as before (no new tensors or metadata).

States and decays are float32 whatever the model dtype: after a few hundred tokens A(u) is below
bfloat16's resolution and the sums over contexts in composition need the mantissa.
The empty context is the identity: ssm = conv = 0, log_decay = 0 (A = 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

_FORMAT = "picaso-context-state/1"
_SSM = ("ssm", "conv", "log_decay")
_KV = ("keys", "values")
VARIABLE = -1  # a dimension of state_shapes() that grows with the tokens read (attention's T)


def _pad_positions(t: Tensor, T: int) -> Tensor:
    """keys / values [..., t, dh] zero-padded to T positions."""
    return torch.nn.functional.pad(t, (0, 0, 0, T - t.shape[-2])) if t.shape[-2] < T else t


@dataclass(frozen=True)
class ContextState:
    ssm: Tensor
    conv: Tensor
    log_decay: Tensor
    num_tokens: int | tuple[int, ...]
    keys: Tensor | None = None  # hybrid models only: [A, Hkv, T, dh] (batched: [b, A, Hkv, T, dh])
    values: Tensor | None = None
    kv_len: tuple[int, ...] | None = None  # batched hybrid states: each row's valid key positions

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def zeros(cls, shapes: dict[str, tuple[int, ...]], device=None) -> "ContextState":
        """The identity state for `shapes` (ModelConfig.state_shapes(); a hybrid's keys and values
        start with no positions)."""
        z = {k: torch.zeros([0 if d == VARIABLE else d for d in v], dtype=torch.float32, device=device)
             for k, v in shapes.items()}
        return cls(ssm=z["ssm"], conv=z["conv"], log_decay=z["log_decay"], num_tokens=0,
                   keys=z.get("keys"), values=z.get("values"))

    @classmethod
    def stack(cls, states: Sequence["ContextState"]) -> "ContextState":
        """Batch single states along a new leading dimension."""
        if not states:
            raise ValueError("cannot stack an empty list of states")
        for s in states:
            if s.batched:
                raise ValueError("stack takes single (unbatched) states")
            states[0].check_compatible(s)
        kv = {}
        if states[0].keys is not None:  # rows of different lengths: padded, kv_len says how far each is valid
            T = max(s.keys.shape[-2] for s in states)
            kv = dict(keys=torch.stack([_pad_positions(s.keys, T) for s in states]),
                      values=torch.stack([_pad_positions(s.values, T) for s in states]),
                      kv_len=tuple(s.keys.shape[-2] for s in states))
        return cls(
            ssm=torch.stack([s.ssm for s in states]),
            conv=torch.stack([s.conv for s in states]),
            log_decay=torch.stack([s.log_decay for s in states]),
            num_tokens=tuple(int(s.num_tokens) for s in states),
            **kv,
        )

    def expand(self, b: int) -> "ContextState":
        """A single state as a batch of b rows (views, no copy)."""
        f = lambda t: None if t is None else t.expand(b, *t.shape)  # noqa: E731
        kv_len = None if self.keys is None else (self.keys.shape[-2],) * b
        return ContextState(f(self.ssm), f(self.conv), f(self.log_decay), (int(self.num_tokens),) * b,
                            f(self.keys), f(self.values), kv_len)

    @property
    def has_attention(self) -> bool:
        """Whether the state holds attention keys and values (a hybrid model's; they grow with the
        tokens read). A pure SSM's state holds none: callers ask this, not `keys is None`."""
        return self.keys is not None

    # ---- batch views -----------------------------------------------------------------------
    @property
    def batched(self) -> bool:
        return self.conv.dim() == 4

    @property
    def batch_size(self) -> int | None:
        return self.conv.shape[0] if self.batched else None

    def __getitem__(self, i: int) -> "ContextState":
        if not self.batched:
            raise TypeError("indexing needs a batched state")
        if self.keys is None:
            return ContextState(self.ssm[i], self.conv[i], self.log_decay[i], int(self.num_tokens[i]))
        n = self.kv_lengths[i]
        return ContextState(self.ssm[i], self.conv[i], self.log_decay[i], int(self.num_tokens[i]),
                            self.keys[i][..., :n, :], self.values[i][..., :n, :])

    def unbind(self) -> list["ContextState"]:
        return [self[i] for i in range(self.batch_size)] if self.batched else [self]

    # ---- properties and checks -------------------------------------------------------------
    @property
    def decay(self) -> Tensor:
        """A(u) = exp(log_decay), broadcastable to `ssm`."""
        return self.log_decay.exp()

    @property
    def kv_lengths(self) -> tuple[int, ...] | None:
        """Each row's number of valid key positions (batched), or (T,) for a single state; None
        without attention layers."""
        if self.keys is None:
            return None
        if not self.batched:
            return (self.keys.shape[-2],)
        return self.kv_len if self.kv_len is not None else (self.keys.shape[-2],) * self.batch_size

    @property
    def _names(self) -> tuple[str, ...]:
        return _SSM if self.keys is None else _SSM + _KV

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        off = 1 if self.batched else 0
        return {k: tuple(getattr(self, k).shape[off:]) for k in self._names}

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, k).numel() * getattr(self, k).element_size() for k in self._names)

    def check_shapes(self, expected: dict[str, tuple[int, ...]], what: str = "state") -> None:
        """Raise ValueError naming the field if this state does not fit `expected` (a dimension
        VARIABLE there, attention's positions, fits any length)."""
        got = self.shapes
        if set(got) != set(expected):
            has, needs = ("keys and values" if "keys" in d else "no keys and values" for d in (got, expected))
            raise ValueError(f"{what}: it holds {has} but this model's state has {needs} (attention layers); "
                             "the state was made by a different model (encode the context with this one)")
        for k, v in expected.items():
            if len(got[k]) != len(v) or any(e not in (g, VARIABLE) for g, e in zip(got[k], v)):
                raise ValueError(
                    f"{what}: `{k}` has shape {list(got[k])} but this model expects {list(v)}; "
                    "the state was made by a different model (encode the context with this one)"
                )

    def check_compatible(self, other: "ContextState") -> None:
        shapes = other.shapes
        for k in set(_KV) & set(shapes):  # states of different lengths combine (stack pads them)
            shapes[k] = (*shapes[k][:-2], VARIABLE, shapes[k][-1])
        self.check_shapes(shapes, what="states to combine")

    def check_finite(self, what: str = "state") -> None:
        for name in self._names:
            t = getattr(self, name)
            if not torch.isfinite(t).all():
                raise ValueError(f"{what}: `{name}` contains NaN or inf")
        if (self.log_decay > 0).any():
            raise ValueError(f"{what}: log_decay must be <= 0 (a decay A(u) in (0, 1])")

    def _map(self, f) -> "ContextState":
        kv = {} if self.keys is None else dict(keys=f(self.keys), values=f(self.values))
        return replace(self, ssm=f(self.ssm), conv=f(self.conv), log_decay=f(self.log_decay), **kv)

    # ---- conversions -----------------------------------------------------------------------
    def to(self, device=None, dtype: torch.dtype | None = None) -> "ContextState":
        """Move to `device`. `dtype` exists for float64 tests; the default stays float32."""
        return self._map(lambda t: t.to(device=device, dtype=dtype or t.dtype))

    def detach(self) -> "ContextState":
        return self._map(Tensor.detach)

    # ---- storage (safetensors: no pickle) --------------------------------------------------
    def to_tensors(self, prefix: str = "") -> dict[str, Tensor]:
        return {prefix + k: getattr(self, k).detach().contiguous().cpu() for k in self._names}

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], num_tokens, prefix: str = "",
                     kv_len: Sequence[int] | None = None) -> "ContextState":
        """The inverse of `to_tensors`; keys and values where `tensors` hold them (half precision
        from a store comes back float32, as the SSM part). `kv_len`: a batched hybrid's rows."""
        if isinstance(num_tokens, (list, tuple)):
            num_tokens = tuple(int(n) for n in num_tokens)
        kv = {}
        if prefix + "keys" in tensors:
            kv = dict(keys=tensors[prefix + "keys"].float(), values=tensors[prefix + "values"].float(),
                      kv_len=None if kv_len is None else tuple(int(n) for n in kv_len))
        return cls(
            ssm=tensors[prefix + "ssm"].float(),
            conv=tensors[prefix + "conv"].float(),
            log_decay=tensors[prefix + "log_decay"].float(),
            num_tokens=num_tokens if isinstance(num_tokens, tuple) else int(num_tokens),
            **kv,
        )

    def save(self, path: str | Path, metadata: dict[str, str] | None = None) -> None:
        meta = {"format": _FORMAT, "num_tokens": json.dumps(self.num_tokens)}
        if self.kv_len is not None:
            meta["kv_len"] = json.dumps(self.kv_len)
        meta.update(metadata or {})
        save_file(self.to_tensors(), str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path, device=None) -> "ContextState":
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            if meta.get("format") != _FORMAT:
                raise ValueError(f"{path} is not a saved ContextState (format={meta.get('format')!r})")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        kv_len = json.loads(meta["kv_len"]) if "kv_len" in meta else None
        return cls.from_tensors(tensors, json.loads(meta["num_tokens"]), kv_len=kv_len).to(device)


def layer_major(st: ContextState) -> tuple[Tensor, Tensor, Tensor]:
    """Copies of a batched state's tensors [b, L, ...] stored layer by layer, so that each layer's
    slice [:, i] is contiguous (the decode step updates it in place through views). Always copies:
    `contiguous()` returns a one-row batch (an expanded single state) as it is, and the step would
    then update the caller's state in place."""
    return tuple(t.transpose(0, 1).clone(memory_format=torch.contiguous_format).transpose(0, 1)
                 for t in (st.ssm, st.conv, st.log_decay))

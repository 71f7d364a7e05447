"""ContextState: the state of an SSM language model after reading a context, as a value.

Glossary (paper sec. 3.1, eq. 2):  x(u) = accumulated input signal = `ssm`;
A(u) = accumulated decay = exp(`log_decay`), diagonal, so products are element-wise.

Shapes of one context (no batch dimension):
    Mamba-2  ssm [L, H, P, N]   log_decay [L, H, 1, 1]   (one scalar decay per head)
    Mamba-1  ssm [L, D, N]      log_decay [L, D, N]      (a decay per channel and state dim)
    both     conv [L, C, K-1]   the last K-1 pre-conv inputs of each layer, oldest first
A batch of B states carries a leading B on every tensor and a tuple of B token counts; the model
takes and returns batches, composition works on lists of single states.

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


@dataclass(frozen=True)
class ContextState:
    ssm: Tensor
    conv: Tensor
    log_decay: Tensor
    num_tokens: int | tuple[int, ...]

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def zeros(cls, shapes: dict[str, tuple[int, ...]], device=None) -> "ContextState":
        """The identity state for `shapes` (ModelConfig.state_shapes())."""
        z = {k: torch.zeros(v, dtype=torch.float32, device=device) for k, v in shapes.items()}
        return cls(ssm=z["ssm"], conv=z["conv"], log_decay=z["log_decay"], num_tokens=0)

    @classmethod
    def stack(cls, states: Sequence["ContextState"]) -> "ContextState":
        """Batch single states along a new leading dimension."""
        if not states:
            raise ValueError("cannot stack an empty list of states")
        for s in states:
            if s.batched:
                raise ValueError("stack takes single (unbatched) states")
            states[0].check_compatible(s)
        return cls(
            ssm=torch.stack([s.ssm for s in states]),
            conv=torch.stack([s.conv for s in states]),
            log_decay=torch.stack([s.log_decay for s in states]),
            num_tokens=tuple(int(s.num_tokens) for s in states),
        )

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
        return ContextState(self.ssm[i], self.conv[i], self.log_decay[i], int(self.num_tokens[i]))

    def unbind(self) -> list["ContextState"]:
        return [self[i] for i in range(self.batch_size)] if self.batched else [self]

    # ---- properties and checks -------------------------------------------------------------
    @property
    def decay(self) -> Tensor:
        """A(u) = exp(log_decay), broadcastable to `ssm`."""
        return self.log_decay.exp()

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        off = 1 if self.batched else 0
        return {
            "ssm": tuple(self.ssm.shape[off:]),
            "conv": tuple(self.conv.shape[off:]),
            "log_decay": tuple(self.log_decay.shape[off:]),
        }

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.ssm, self.conv, self.log_decay))

    def check_shapes(self, expected: dict[str, tuple[int, ...]], what: str = "state") -> None:
        """Raise ValueError naming the field if this state does not fit `expected`."""
        got = self.shapes
        for k, v in expected.items():
            if tuple(got[k]) != tuple(v):
                raise ValueError(
                    f"{what}: `{k}` has shape {list(got[k])} but this model expects {list(v)}; "
                    "the state was made by a different model (encode the context with this one)"
                )

    def check_compatible(self, other: "ContextState") -> None:
        self.check_shapes(other.shapes, what="states to combine")

    def check_finite(self, what: str = "state") -> None:
        for name in ("ssm", "conv", "log_decay"):
            t = getattr(self, name)
            if not torch.isfinite(t).all():
                raise ValueError(f"{what}: `{name}` contains NaN or inf")
        if (self.log_decay > 0).any():
            raise ValueError(f"{what}: log_decay must be <= 0 (a decay A(u) in (0, 1])")

    # ---- conversions -----------------------------------------------------------------------
    def to(self, device=None, dtype: torch.dtype | None = None) -> "ContextState":
        """Move to `device`. `dtype` exists for float64 tests; the default stays float32."""
        f = lambda t: t.to(device=device, dtype=dtype or t.dtype)  # noqa: E731
        return replace(self, ssm=f(self.ssm), conv=f(self.conv), log_decay=f(self.log_decay))

    def detach(self) -> "ContextState":
        return replace(self, ssm=self.ssm.detach(), conv=self.conv.detach(), log_decay=self.log_decay.detach())

    # ---- storage (safetensors: no pickle) --------------------------------------------------
    def to_tensors(self, prefix: str = "") -> dict[str, Tensor]:
        return {prefix + k: getattr(self, k).detach().contiguous().cpu() for k in ("ssm", "conv", "log_decay")}

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], num_tokens, prefix: str = "") -> "ContextState":
        if isinstance(num_tokens, (list, tuple)):
            num_tokens = tuple(int(n) for n in num_tokens)
        return cls(
            ssm=tensors[prefix + "ssm"].float(),
            conv=tensors[prefix + "conv"].float(),
            log_decay=tensors[prefix + "log_decay"].float(),
            num_tokens=num_tokens if isinstance(num_tokens, tuple) else int(num_tokens),
        )

    def save(self, path: str | Path, metadata: dict[str, str] | None = None) -> None:
        meta = {"format": _FORMAT, "num_tokens": json.dumps(self.num_tokens)}
        meta.update(metadata or {})
        save_file(self.to_tensors(), str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path, device=None) -> "ContextState":
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            if meta.get("format") != _FORMAT:
                raise ValueError(f"{path} is not a saved ContextState (format={meta.get('format')!r})")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        return cls.from_tensors(tensors, json.loads(meta["num_tokens"])).to(device)


def layer_major(st: ContextState) -> tuple[Tensor, Tensor, Tensor]:
    """Copies of a batched state's tensors [b, L, ...] stored layer by layer, so that each layer's
    slice [:, i] is contiguous (the decode step updates it in place through views)."""
    return tuple(t.transpose(0, 1).contiguous().transpose(0, 1) for t in (st.ssm, st.conv, st.log_decay))

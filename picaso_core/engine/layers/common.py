"""What the layer kinds share: RMS norms (plain and Mamba-2's gated one), the dt bias initialisation, the
language-model head (with Granite's logits scaling)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from picaso_core.engine import kernels
from picaso_core.engine.config import ModelConfig
from picaso_core.engine.scan import upcast


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        xf = upcast(x)[0]
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class GatedRMSNorm(nn.Module):
    """Mamba-2's norm(y · SiLU(z)) with one RMS per group of E/G channels (norm_before_gate=False).
    On CUDA with mamba-ssm, its fused Triton kernel (one launch instead of about ten)."""

    def __init__(self, d: int, group_size: int, eps: float):
        super().__init__()
        self.eps, self.group_size = eps, group_size
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        fn = kernels.get("norm", y)
        if fn is not None:
            out = kernels.run("norm", fn, y, self.weight, None, z=z, eps=self.eps, group_size=self.group_size,
                              norm_before_gate=False)
            if out is not None:
                return out
        dtype = y.dtype
        y = upcast(y * F.silu(z))[0]
        yg = y.unflatten(-1, (-1, self.group_size))  # [..., G, E/G]
        yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + self.eps)
        return yg.flatten(-2).to(dtype) * self.weight


def inv_softplus_dt(cfg: ModelConfig, n: int) -> Tensor:
    """dt bias so that softplus(bias) is log-uniform in [dt_min, dt_max] (mamba_ssm's init)."""
    s = cfg.ssm_cfg
    dt = torch.exp(torch.rand(n) * (math.log(s.dt_max) - math.log(s.dt_min)) + math.log(s.dt_min))
    dt = dt.clamp(min=s.dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))


class ScaledHead(nn.Linear):
    """lm_head with Granite's logits scaling (logits / logits_scaling; 1 elsewhere: no op)."""

    def __init__(self, d: int, v: int, scaling: float = 1.0):
        super().__init__(d, v, bias=False)
        self.scaling = scaling

    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x)
        return y if self.scaling == 1.0 else y / self.scaling

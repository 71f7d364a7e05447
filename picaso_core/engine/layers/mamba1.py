"""Layer kind "mamba1": mamba_ssm's Mamba "simple" mixer (a decay per channel and state dimension).

Its part of a state: ssm [E, N], conv [E, K-1], log_decay [E, N] (engine/state.py). Falcon-Mamba's
RMS-normalised dt, B and C are this kind with `bcdt_rms_eps` set.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from picaso_core.engine.config import ModelConfig
from picaso_core.engine.layers.common import inv_softplus_dt
from picaso_core.engine.layers.kind import LayerKind, ssm_chunk, ssm_step
from picaso_core.engine.observe import stage
from picaso_core.engine.scan import causal_conv, conv_step, selective_scan, state_update, upcast


class Mamba1Mixer(nn.Module):
    """mamba_ssm.modules.mamba_simple.Mamba (decay per channel and state dimension)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        s = cfg.ssm_cfg
        self.cfg = cfg
        E, N, R = cfg.d_inner, s.d_state, cfg.dt_rank
        self.in_proj = nn.Linear(cfg.d_model, 2 * E, bias=s.bias)  # -> x, z
        self.conv1d = nn.Conv1d(E, E, s.d_conv, groups=E, padding=s.d_conv - 1, bias=s.conv_bias)
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)  # -> dt (low rank), B, C
        self.dt_proj = nn.Linear(R, E, bias=True)
        with torch.no_grad():
            nn.init.uniform_(self.dt_proj.weight, -R ** -0.5, R ** -0.5)
            self.dt_proj.bias.copy_(inv_softplus_dt(cfg, E))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1))
        self.D = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, cfg.d_model, bias=s.bias)
        self.bcdt_rms_eps = s.bcdt_rms_eps  # Falcon-Mamba: dt, B, C each RMS-normalised (no weight); None: off

    def _bcdt(self, dtBC: Tensor) -> list[Tensor]:
        """x_proj's output split into dt (low rank), B, C; for Falcon-Mamba each RMS-normalised in float32."""
        N, eps = self.cfg.ssm_cfg.d_state, self.bcdt_rms_eps
        parts = dtBC.split([self.cfg.dt_rank, N, N], dim=-1)
        return list(parts) if eps is None else [(f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)).to(t.dtype)
                                                for t, f in ((t, upcast(t)[0]) for t in parts)]

    def forward(self, u: Tensor, conv_state: Tensor, ssm_state: Tensor, lengths: Tensor | None):
        """u [b, t, D]; conv_state [b, E, K-1]; ssm_state [b, E, N]; lengths [b] or None.
        Returns out [b, t, D], conv_state, ssm_state, log_decay [b, E, N]."""
        t = u.shape[1]
        x, z = self.in_proj(u).chunk(2, dim=-1)  # [b, t, E] each
        x, conv_state = stage("conv", causal_conv, x.transpose(1, 2), self.conv1d.weight, self.conv1d.bias,
                              conv_state, lengths)  # x [b, E, t]
        dt, B, C = self._bcdt(self.x_proj(x.transpose(1, 2)))
        dt = F.softplus(upcast(self.dt_proj(dt))[0])  # [b, t, E], float32 decay math
        if lengths is not None:
            dt = dt * (torch.arange(t, device=u.device)[None, :] < lengths[:, None])[..., None]
        A = -torch.exp(upcast(self.A_log)[0])  # [E, N]
        y, ssm_state, log_decay = stage("scan", selective_scan, x, dt.transpose(1, 2), A, B.transpose(1, 2),
                                        C.transpose(1, 2), ssm_state)
        y = y.to(x.dtype) + x * self.D[:, None].to(x.dtype)  # [b, E, t]
        y = y.transpose(1, 2) * F.silu(z)
        return self.out_proj(y), conv_state, ssm_state, log_decay

    def step(self, u: Tensor, conv_state: Tensor, ssm_state: Tensor, log_decay: Tensor) -> Tensor:
        """One token: u [b, D]; conv_state [b, E, K-1], ssm_state [b, E, N] and log_decay [b, E, N]
        (+= the step's dt·A) updated IN PLACE. Returns out [b, D]."""
        x, z = self.in_proj(u).chunk(2, dim=-1)  # [b, E] each
        x = conv_step(x, self.conv1d.weight, self.conv1d.bias, conv_state)
        dt, B, C = self._bcdt(self.x_proj(x))
        dt = F.softplus(upcast(self.dt_proj(dt))[0])  # [b, E]
        A = -torch.exp(upcast(self.A_log)[0])  # [E, N]
        # h = exp(dt A) h + dt B x;  y = Σ_n C h   (Mamba-1, per channel and state dimension)
        y = stage("readout", state_update, ssm_state, x, dt, A, B, C, D=self.D)  # + D x
        log_decay += (dt[..., None] * A).view(log_decay.shape)
        return self.out_proj(y * F.silu(z))


# ---- the kind ---------------------------------------------------------------------------------
def _part(cfg) -> dict[str, tuple[int, ...]]:
    m = cfg.mixer_config()
    E, s = m.d_inner, m.ssm_cfg
    return {"ssm": (E, s.d_state), "conv": (m.conv_dim, s.d_conv - 1), "log_decay": (E, s.d_state)}


def _build(cfg) -> Mamba1Mixer:
    return Mamba1Mixer(cfg.mixer_config())


KIND = LayerKind("mamba1", "Mamba", "ssm", _build, ssm_chunk, ssm_step,
                 {"Mamba1": "mixer"}, _part)

"""Layer kind "mamba2": mamba_ssm's Mamba2 mixer (ngroups, gated RMSNorm, a scalar decay per head).

Its part of a state: ssm [H, P, N], conv [C, K-1], log_decay [H, 1, 1] (engine/state.py). `forward`
reads a chunk from that part and returns the new one; `step` reads one token in place.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from picaso_core.engine import kernels
from picaso_core.engine.config import ModelConfig
from picaso_core.engine.layers.common import GatedRMSNorm, inv_softplus_dt
from picaso_core.engine.layers.kind import LayerKind, ssm_chunk, ssm_step
from picaso_core.engine.observe import stage
from picaso_core.engine.scan import (causal_conv, conv_step, dt_softplus, ssd_scan, state_update, step_sizes, unlimited,
                                     upcast)


class Mamba2Mixer(nn.Module):
    """mamba_ssm.modules.mamba2.Mamba2 (ngroups, gated RMSNorm, scalar decay per head)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        s = cfg.ssm_cfg
        self.cfg = cfg
        E, H, GN = cfg.d_inner, cfg.nheads, s.ngroups * s.d_state
        self.in_proj = nn.Linear(cfg.d_model, 2 * E + 2 * GN + H, bias=s.bias)  # -> z, xBC, dt
        self.conv1d = nn.Conv1d(cfg.conv_dim, cfg.conv_dim, s.d_conv, groups=cfg.conv_dim,
                                padding=s.d_conv - 1, bias=s.conv_bias)
        self.dt_bias = nn.Parameter(inv_softplus_dt(cfg, H))
        self.A_log = nn.Parameter(torch.log(torch.empty(H).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(H))
        self.norm = GatedRMSNorm(E, E // s.ngroups, eps=getattr(cfg, "gated_norm_eps", 1e-5))  # a hybrid's: its RMS epsilon
        self.out_proj = nn.Linear(E, cfg.d_model, bias=s.bias)

    def forward(self, u: Tensor, conv_state: Tensor, ssm_state: Tensor, lengths: Tensor | None):
        """u [b, t, D]; conv_state [b, C, K-1]; ssm_state [b, H, P, N]; lengths [b] or None.
        Returns out [b, t, D], conv_state, ssm_state, log_decay [b, H]."""
        b, t, _ = u.shape
        s, E, H = self.cfg.ssm_cfg, self.cfg.d_inner, self.cfg.nheads
        GN = s.ngroups * s.d_state
        # 1. project: z (gate) [b,t,E], xBC (conv input) [b,t,E+2GN], dt [b,t,H]
        z, xBC, dt = self.in_proj(u).split([E, E + 2 * GN, H], dim=-1)
        # 2. causal conv over [carried K-1 inputs ++ xBC], SiLU
        xBC, conv_state = stage("conv", causal_conv, xBC.transpose(1, 2), self.conv1d.weight, self.conv1d.bias,
                                conv_state, lengths)
        x, B, C = xBC.transpose(1, 2).split([E, GN, GN], dim=-1)
        # 3. step sizes; dt = 0 on padding makes the step the identity (decay 1, nothing written)
        dt = stage("dt", dt_softplus, dt, self.dt_bias, s.dt_limit)  # float32 decay math
        if lengths is not None:
            dt = dt * (torch.arange(t, device=u.device)[None, :] < lengths[:, None])[..., None]
        A = -torch.exp(upcast(self.A_log)[0])  # [H]
        # 4. SSD scan from the given state: y [b,t,H,P]
        y, ssm_state, log_decay = stage(
            "scan", ssd_scan, x.reshape(b, t, H, s.headdim), dt, A, B.reshape(b, t, s.ngroups, s.d_state),
            C.reshape(b, t, s.ngroups, s.d_state), s.chunk_size, ssm_state)
        # 5. skip connection D, gated group norm, output projection
        y = y.to(x.dtype) + x.reshape(b, t, H, s.headdim) * self.D[:, None].to(x.dtype)
        y = self.norm(y.reshape(b, t, E), z)
        return self.out_proj(y), conv_state, ssm_state, log_decay

    def step(self, u: Tensor, conv_state: Tensor, ssm_state: Tensor, log_decay: Tensor) -> Tensor:
        """One token, the recurrence in closed form: u [b, D]; conv_state [b, C, K-1],
        ssm_state [b, H, P, N] and log_decay [b, H, 1, 1] are updated IN PLACE (decode buffers; the
        log-decay gains the step's dt·A). Returns out [b, D]. The twin of `forward` for t = 1, with
        no scan and no chunks."""
        b = u.shape[0]
        s, E, H = self.cfg.ssm_cfg, self.cfg.d_inner, self.cfg.nheads
        GN = s.ngroups * s.d_state
        z, xBC, dt = self.in_proj(u).split([E, E + 2 * GN, H], dim=-1)
        fusable = unlimited(s.dt_limit) and log_decay.dtype == torch.float32  # as step_sizes' dt_step
        fn = kernels.get("conv_dt", u) if fusable else None  # the conv and the step sizes in one launch
        fused = kernels.run("conv_dt", fn, xBC, conv_state, self.conv1d.weight, self.conv1d.bias, dt, self.dt_bias,
                            self.A_log, log_decay) if fn is not None else None
        if fused is not None:
            xBC, dt, A = fused
        else:
            xBC = conv_step(xBC, self.conv1d.weight, self.conv1d.bias, conv_state)
            dt, A = step_sizes(dt, self.dt_bias, self.A_log, s.dt_limit, log_decay)
        x, B, C = xBC.split([E, GN, GN], dim=-1)
        # h = exp(dt A) h + dt B x;  y = C h   (Mamba-2 paper eq. 1, a scalar A per head)
        y = stage("readout", state_update, ssm_state, x.view(b, H, s.headdim), dt, A, B.view(b, s.ngroups, s.d_state),
                  C.view(b, s.ngroups, s.d_state), D=self.D)  # + D x
        return self.out_proj(self.norm(y.reshape(b, E), z))


# ---- the kind ---------------------------------------------------------------------------------
def _build(cfg) -> Mamba2Mixer:
    return Mamba2Mixer(cfg.mixer_config())  # a hybrid's: d_inner = heads x headdim, its RMS epsilon


def _part(cfg) -> dict[str, tuple[int, ...]]:
    m = cfg.mixer_config()
    s = m.ssm_cfg
    return {"ssm": (m.nheads, s.headdim, s.d_state), "conv": (m.conv_dim, s.d_conv - 1), "log_decay": (m.nheads, 1, 1)}


KIND = LayerKind("mamba2", "Mamba-2", "ssm", _build, ssm_chunk, ssm_step,
                 {"Mamba2": "mixer", "nemotron_h": "mixer", "granitemoehybrid": "mamba", "bamba": "mamba"}, _part)

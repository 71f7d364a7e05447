"""SSMLanguageModel: a Mamba-1 / Mamba-2 language model whose state is a value.

Reads top to bottom: norms -> Mamba-2 mixer -> Mamba-1 mixer -> block -> language model.
Weight names and numerics follow mamba_ssm (MambaLMHeadModel, Mamba2, Mamba "simple"), so its
checkpoints load as they are; transformers' names are mapped in loading.py.

Glossary (shapes):  b batch, t time, D d_model, E d_inner = expand·D, H heads, P headdim,
N d_state, G ngroups, C conv channels, K d_conv, L n_layer, V padded vocabulary.

Unlike mamba_ssm (whose prefill ignores a given state) every forward here starts from a state
and returns the new one, together with log A(u), the accumulated decay that composition needs
(PICASO eq. 2). Nothing is mutated in place: `forward(ids, state) -> (logits, new_state)`.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from picaso_core.light.deadline import check
from picaso_core.engine import graphs, kernels
from picaso_core.engine.config import ModelConfig
from picaso_core.engine.decode import generate_batch
from picaso_core.engine.losses import token_nll
from picaso_core.engine.scan import (causal_conv, conv_step, dt_softplus, selective_scan, ssd_scan, state_update,
                                     step_sizes, unlimited, upcast)
from picaso_core.engine.state import ContextState, layer_major


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


def _inv_softplus_dt(cfg: ModelConfig, n: int) -> Tensor:
    """dt bias so that softplus(bias) is log-uniform in [dt_min, dt_max] (mamba_ssm's init)."""
    s = cfg.ssm_cfg
    dt = torch.exp(torch.rand(n) * (math.log(s.dt_max) - math.log(s.dt_min)) + math.log(s.dt_min))
    dt = dt.clamp(min=s.dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))


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
        self.dt_bias = nn.Parameter(_inv_softplus_dt(cfg, H))
        self.A_log = nn.Parameter(torch.log(torch.empty(H).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(H))
        self.norm = GatedRMSNorm(E, E // s.ngroups, eps=1e-5)
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
        xBC, conv_state = causal_conv(xBC.transpose(1, 2), self.conv1d.weight, self.conv1d.bias,
                                      conv_state, lengths)
        x, B, C = xBC.transpose(1, 2).split([E, GN, GN], dim=-1)
        # 3. step sizes; dt = 0 on padding makes the step the identity (decay 1, nothing written)
        dt = dt_softplus(dt, self.dt_bias, s.dt_limit)  # float32 decay math
        if lengths is not None:
            dt = dt * (torch.arange(t, device=u.device)[None, :] < lengths[:, None])[..., None]
        A = -torch.exp(upcast(self.A_log)[0])  # [H]
        # 4. SSD scan from the given state: y [b,t,H,P]
        y, ssm_state, log_decay = ssd_scan(
            x.reshape(b, t, H, s.headdim), dt, A, B.reshape(b, t, s.ngroups, s.d_state),
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
        y = state_update(ssm_state, x.view(b, H, s.headdim), dt, A, B.view(b, s.ngroups, s.d_state),
                         C.view(b, s.ngroups, s.d_state), D=self.D)  # + D x
        return self.out_proj(self.norm(y.reshape(b, E), z))


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
            self.dt_proj.bias.copy_(_inv_softplus_dt(cfg, E))
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
        x, conv_state = causal_conv(x.transpose(1, 2), self.conv1d.weight, self.conv1d.bias,
                                    conv_state, lengths)  # x [b, E, t]
        dt, B, C = self._bcdt(self.x_proj(x.transpose(1, 2)))
        dt = F.softplus(upcast(self.dt_proj(dt))[0])  # [b, t, E], float32 decay math
        if lengths is not None:
            dt = dt * (torch.arange(t, device=u.device)[None, :] < lengths[:, None])[..., None]
        A = -torch.exp(upcast(self.A_log)[0])  # [E, N]
        y, ssm_state, log_decay = selective_scan(x, dt.transpose(1, 2), A, B.transpose(1, 2),
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
        y = state_update(ssm_state, x, dt, A, B, C, D=self.D)  # + D x
        log_decay += (dt[..., None] * A).view(log_decay.shape)
        return self.out_proj(y * F.silu(z))


def _add_norm(norm: nn.Module, out: Tensor | None, residual: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """A block's pre-norm: residual += out (the previous mixer's output; None before the first
    block), then norm(residual) in `dtype`. Returns (normed, residual).
    On CUDA with mamba-ssm (RMSNorm), one fused kernel as mamba_ssm's fused_add_norm: it normalises
    the float32 residual itself, where the reference (as transformers' Mamba2) rounds it to `dtype`
    first: the same up to that rounding (none in float32)."""
    fn = kernels.get("addnorm", residual) if isinstance(norm, RMSNorm) else None
    if fn is not None:
        if out is None:
            y = kernels.run("addnorm", fn, residual.to(dtype), norm.weight, None, eps=norm.eps)
            if y is not None:
                return y, residual
        else:
            r = kernels.run("addnorm", fn, out, norm.weight, None, residual=residual, eps=norm.eps, prenorm=True,
                            residual_in_fp32=residual.dtype == torch.float32)
            if r is not None:
                return r
    if out is not None:
        residual = residual + out.to(residual.dtype)
    return norm(residual.to(dtype)), residual


class Block(nn.Module):
    """Pre-norm residual block: h <- h + mixer(norm(h)) (mamba_ssm's Block with add+norm fused)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, cfg.norm_epsilon) if cfg.rms_norm else nn.LayerNorm(cfg.d_model, cfg.norm_epsilon)
        self.mixer = Mamba2Mixer(cfg) if cfg.family == "Mamba2" else Mamba1Mixer(cfg)


class SSMLanguageModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = cfg = config
        self.tokenizer = None  # set by load_model
        self.backbone = nn.Module()
        self.backbone.embedding = nn.Embedding(cfg.padded_vocab_size, cfg.d_model)
        self.backbone.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.backbone.norm_f = (RMSNorm(cfg.d_model, cfg.norm_epsilon) if cfg.rms_norm
                                else nn.LayerNorm(cfg.d_model, cfg.norm_epsilon))
        self.lm_head = nn.Linear(cfg.d_model, cfg.padded_vocab_size, bias=False)
        self._init_weights()
        if cfg.tie_embeddings:
            self.lm_head.weight = self.backbone.embedding.weight
        self._fingerprint: str | None = None

    def _init_weights(self) -> None:
        """mamba_ssm's _init_weights: N(0, 0.02) embeddings, zero biases, out_proj / sqrt(n_layer)."""
        nn.init.normal_(self.backbone.embedding.weight, std=0.02)
        for layer in self.backbone.layers:
            with torch.no_grad():
                nn.init.kaiming_uniform_(layer.mixer.out_proj.weight, a=math.sqrt(5))
                layer.mixer.out_proj.weight /= math.sqrt(self.config.n_layer)
                for lin in (layer.mixer.in_proj, layer.mixer.out_proj):
                    if lin.bias is not None:
                        nn.init.zeros_(lin.bias)

    # ---- states ----------------------------------------------------------------------------
    @property
    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.config.state_shapes()

    @property
    def device(self) -> torch.device:
        return self.backbone.embedding.weight.device

    def empty_state(self) -> ContextState:
        return ContextState.zeros(self.state_shapes, device=self.device)

    def _state_dtype(self) -> torch.dtype:
        return torch.float64 if self.backbone.embedding.weight.dtype == torch.float64 else torch.float32

    def _batched_state(self, state: ContextState | None, b: int) -> ContextState:
        """Validate `state` and return it as a batch of b rows on this model's device."""
        if state is None:
            state = ContextState.zeros(self.state_shapes, device=self.device).to(dtype=self._state_dtype())
        if not isinstance(state, ContextState):
            raise TypeError(f"state must be a ContextState, got {type(state).__name__}")
        state.check_shapes(self.state_shapes)
        state = state.to(self.device)
        if not state.batched:
            return state.expand(b)
        if state.batch_size != b:
            raise ValueError(f"batched state has {state.batch_size} rows but ids have {b}")
        return state

    # ---- forward ---------------------------------------------------------------------------
    @torch.compiler.disable  # runs eagerly: traced, its int() reads would recompile per value
    def _check_ids(self, ids: Tensor) -> Tensor:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            raise ValueError("ids must be a LongTensor of shape [batch, time]")
        if ids.shape[1] == 0:
            raise ValueError("ids are empty: give at least one token (an empty context is model.empty_state())")
        if ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"ids must be integer token ids, got {ids.dtype}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.config.vocab_size:
            raise ValueError(f"token id {hi if hi >= self.config.vocab_size else lo} is outside the "
                             f"vocabulary [0, {self.config.vocab_size}): was it made by another tokenizer?")
        return ids.to(self.device, torch.long)

    def hidden_states(self, ids: Tensor, state: ContextState | None = None,
                      lengths: Tensor | None = None) -> tuple[Tensor, ContextState]:
        """Final-norm hidden states [b, t, D] and the new batched state. `lengths` marks right padding.
        On CUDA, short forwards replay a CUDA graph (engine/graphs.py) instead of launching each op."""
        ids = self._check_ids(ids)
        b, t = ids.shape
        st = self._batched_state(state, b)
        out = graphs.forward(self, ids, st, lengths)
        if out is None:
            out = self._hidden_core(ids, st.ssm, st.conv, st.log_decay, lengths)
        hidden, ssm, conv, log_decay = out
        n_new = lengths.tolist() if lengths is not None else [t] * b
        new = ContextState(ssm=ssm, conv=conv, log_decay=log_decay,
                           num_tokens=tuple(int(a) + int(n) for a, n in zip(st.num_tokens, n_new)))
        return hidden, new

    def _hidden_core(self, ids: Tensor, ssm_in: Tensor, conv_in: Tensor, log_decay_in: Tensor,
                     lengths: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The forward on validated ids [b, t] from batched state tensors [b, L, ...]: the hidden
        states and the new ssm, conv and log_decay tensors. No host synchronisation, so a CUDA
        graph can capture it (engine/graphs.py)."""
        b = ids.shape[0]
        cfg = self.config
        hidden = self.backbone.embedding(ids)  # [b, t, D]
        residual = hidden.float() if cfg.residual_in_fp32 and hidden.dtype != torch.float64 else hidden
        ssm, conv, decay, out = [], [], [], None
        for i, layer in enumerate(self.backbone.layers):
            check()  # a served job past its time limit stops here (picaso_core.light.deadline); nothing when none is set
            normed, residual = _add_norm(layer.norm, out, residual, hidden.dtype)  # residual += the last out
            out, c, s, ld = layer.mixer(normed, conv_in[:, i], ssm_in[:, i], lengths)
            conv.append(c)
            ssm.append(s.to(c.dtype))
            decay.append(ld.view(b, -1, 1, 1) if cfg.family == "Mamba2" else ld)
        hidden = _add_norm(self.backbone.norm_f, out, residual, hidden.dtype)[0]
        log_decay = log_decay_in + torch.stack(decay, 1).to(log_decay_in.dtype)  # A(u u') = A(u') A(u)
        return hidden, torch.stack(ssm, 1), torch.stack(conv, 1), log_decay

    def forward(self, ids: Tensor, state: ContextState | None = None) -> tuple[Tensor, ContextState]:
        """ids [b, t] from `state` (None: empty; single: shared by all rows; batched: one per row).
        Returns logits [b, t, V] (float32) and the new batched state."""
        hidden, new = self.hidden_states(ids, state)
        return upcast(self.lm_head(hidden))[0], new

    # ---- contexts --------------------------------------------------------------------------
    @staticmethod
    def _as_ids(ids) -> Tensor:
        t = torch.as_tensor(ids, dtype=torch.long)
        if t.dim() != 1:
            raise ValueError("context ids must be a list of ints or a 1-D tensor")
        return t

    @torch.no_grad()
    def encode_context(self, ids, state: ContextState | None = None) -> ContextState:
        """State after reading `ids` (list[int] | 1-D tensor) from `state` (None: the empty state)."""
        ids = self._as_ids(ids)
        if ids.numel() == 0:
            return (state if state is not None else self.empty_state())
        return self.hidden_states(ids[None], state)[1][0]

    @torch.no_grad()
    def encode_contexts(self, contexts: Sequence, batch_size: int = 32,
                        progress: Callable[[int, int], None] | None = None,
                        states: Sequence[ContextState] | None = None) -> list[ContextState]:
        """Batched `encode_context` of many contexts, equal to encoding each alone.

        Contexts are sorted by length and right-padded per batch; at pad positions dt = 0 (decay
        1, nothing written) and conv states are gathered from each row's own last inputs, so
        padding never leaks into a state. `states` (one per context): read each context from its
        own state instead of the empty one (`encode_context(c, state)`); an empty context returns
        its state."""
        seqs = [self._as_ids(c) for c in contexts]
        if states is not None and len(states) != len(seqs):
            raise ValueError(f"{len(states)} start states for {len(seqs)} contexts")
        out: list[ContextState | None] = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: -seqs[i].numel())
        done = 0
        for start in range(0, len(order), batch_size):
            idx = [i for i in order[start:start + batch_size] if seqs[i].numel() > 0]
            for i in order[start:start + batch_size]:
                if seqs[i].numel() == 0:
                    out[i] = self.empty_state() if states is None else states[i]
            if idx:
                lengths = torch.tensor([seqs[i].numel() for i in idx], device=self.device)
                ids = torch.zeros(len(idx), int(lengths.max()), dtype=torch.long)
                for r, i in enumerate(idx):
                    ids[r, : seqs[i].numel()] = seqs[i]
                start_st = None if states is None else ContextState.stack([states[i].to(self.device) for i in idx])
                _, st = self.hidden_states(ids, start_st, lengths)
                for r, i in enumerate(idx):
                    out[i] = st[r]
            done += len(order[start:start + batch_size])
            if progress is not None:
                progress(done, len(seqs))
        return out

    # ---- scoring and generation ------------------------------------------------------------
    def _continuation_nll(self, query, continuation, state: ContextState | None, b: int) -> Tensor:
        q, c = self._as_ids(query), self._as_ids(continuation)
        if q.numel() == 0 or c.numel() == 0:
            raise ValueError("query and continuation must each have at least one token")
        ids = torch.cat([q, c])[None].expand(b, -1)
        hidden, _ = self.hidden_states(ids, state)
        logits = upcast(self.lm_head(hidden[:, q.numel() - 1: -1]))[0]  # positions predicting c
        target = c.to(self.device)[None].expand(b, -1)
        return token_nll(logits, target).mean(-1)  # [b]

    @torch.no_grad()
    def continuation_loss(self, query_ids, continuation_ids, state: ContextState | None = None) -> float:
        """Mean NLL per continuation token of `continuation` after `query`, starting from `state`."""
        return float(self._continuation_nll(query_ids, continuation_ids, state, 1)[0])

    @torch.no_grad()
    def continuation_losses(self, query_ids, continuation_ids, states: Sequence[ContextState],
                            batch_size: int = 16) -> list[float]:
        """`continuation_loss` for many states in batched forwards."""
        out: list[float] = []
        for i in range(0, len(states), batch_size):
            chunk = list(states[i:i + batch_size])
            st = ContextState.stack([s.to(self.device) for s in chunk])
            out += self._continuation_nll(query_ids, continuation_ids, st, len(chunk)).tolist()
        return out

    # ---- recurrent decode (picaso_core/engine/decode.py drives the loop) ---------------------------
    def _step_(self, ids: Tensor, ssm: Tensor, conv: Tensor, log_decay: Tensor) -> Tensor:
        """One token per row, updating the batched state tensors IN PLACE; logits [b, V] float32.
        ssm, conv, log_decay [b, L, ...] with every layer's slice contiguous (`layer_major`)."""
        cfg = self.config
        hidden = self.backbone.embedding(ids)  # [b, D]
        residual = hidden.float() if cfg.residual_in_fp32 and hidden.dtype != torch.float64 else hidden
        out = None
        for i, layer in enumerate(self.backbone.layers):
            check()  # as in _hidden_core: a job past its time limit stops at the next layer
            normed, residual = _add_norm(layer.norm, out, residual, hidden.dtype)  # residual += the last out
            out = layer.mixer.step(normed, conv[:, i], ssm[:, i], log_decay[:, i])
        return upcast(self.lm_head(_add_norm(self.backbone.norm_f, out, residual, hidden.dtype)[0]))[0]

    @torch.no_grad()
    def step(self, token_ids: Tensor, state: ContextState | None = None) -> tuple[Tensor, ContextState]:
        """One recurrent step: token_ids [b] (one token per row) read from `state` (None: empty;
        single: shared; batched: one per row). Returns logits [b, V] (float32) and the new batched
        state, equal to `forward(token_ids[:, None], state)`'s last position and state, in O(1)
        of the tokens before: the conv window rolls, the SSM state is updated in closed form."""
        if not isinstance(token_ids, Tensor) or token_ids.dim() != 1:
            raise ValueError("token_ids must be a LongTensor of shape [batch] (one token per row)")
        ids = self._check_ids(token_ids[:, None])[:, 0]
        st = self._batched_state(state, ids.shape[0])
        ssm, conv, log_decay = layer_major(st)
        logits = self._step_(ids, ssm, conv, log_decay)
        return logits, ContextState(ssm.contiguous(), conv.contiguous(), log_decay.contiguous(),  # batch-major
                                    tuple(int(n) + 1 for n in st.num_tokens))

    @torch.no_grad()
    def generate_batch(self, prompt_ids, states: Sequence[ContextState | None] | ContextState,
                       max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
                       seed: int | None = None, stop_at_eos: bool = True) -> list[list[int]]:
        """Continue `prompt_ids` from every state at once; see `picaso_core.engine.decode.generate_batch`."""
        return generate_batch(self, prompt_ids, states, max_new_tokens, temperature, top_k, seed, stop_at_eos)

    @torch.no_grad()
    def generate(self, prompt_ids, state: ContextState | None = None, max_new_tokens: int = 32,
                 temperature: float = 1.0, top_k: int | None = None, seed: int | None = None,
                 stop_at_eos: bool = True) -> list[int]:
        """Sample up to `max_new_tokens` after `prompt_ids` from `state`: the one-row case of
        `generate_batch` (temperature 0 is greedy; EOS ends it and is not returned)."""
        return self.generate_batch(prompt_ids, [state], max_new_tokens, temperature, top_k, seed, stop_at_eos)[0]

    # ---- identity --------------------------------------------------------------------------
    def kernel_path(self) -> str:
        """Which path this model's ops run where it is now: pure torch, or which GPU kernels
        (engine/kernels.py), and whether short forwards replay CUDA graphs (engine/graphs.py)."""
        dev = self.device
        path = kernels.describe(dev, self.config.family)
        if dev.type == "cuda":
            path += "; short forwards: " + ("CUDA graphs" if graphs.ENABLED else "eager (PICASO_CUDA_GRAPHS=0)")
        return path

    def extra_repr(self) -> str:
        return f"{self.config.family}, {self.config.n_layer} layers, d_model {self.config.d_model}; {self.kernel_path()}"

    def fingerprint(self, refresh: bool = False) -> str:
        """sha256 of the config and every weight: states stored by one model are refused by another.
        Cached; pass refresh=True after changing the weights."""
        if self._fingerprint is None or refresh:
            h = hashlib.sha256(json.dumps(self.config.to_dict(), sort_keys=True).encode())
            for name, t in sorted(self.state_dict().items()):
                h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
                h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

"""Layer kind "moe": mixtures of experts, in each family's weight names.

    GraniteMoE   Granite's routed experts: softmax over the top-k router logits, gated SiLU experts
                 (summed with the layer's shared_mlp, kind "mlp", in the same sub-block)
    NemotronMoE  Nemotron-H's: sigmoid router with a score-correction bias and group-limited top-k,
                 non-gated relu² experts, a shared expert, optional latent projections
Like the MLPs they carry no state: a token's output depends on that token alone.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from picaso_core.engine.layers.kind import LayerKind, stateless_chunk
from picaso_core.engine.layers.mlp import ACT, UpDownMLP


def _run_experts(x: Tensor, idx: Tensor, weights: Tensor, expert) -> Tensor:
    """Σ_k weights[:, k] · expert(idx[:, k], x): each expert runs once on the tokens routed to it.
    x [n, D]; idx, weights [n, k]; expert(e, rows) -> [rows, D_out]."""
    out = None
    for e in idx.unique().tolist():
        tok, slot = torch.where(idx == e)
        y = expert(e, x[tok]) * weights[tok, slot, None].to(x.dtype)
        out = torch.zeros(x.shape[0], y.shape[-1], dtype=x.dtype, device=x.device) if out is None else out
        out.index_add_(0, tok, y)
    return out


class GraniteMoE(nn.Module):
    """block_sparse_moe: router.weight [E, D], experts.gate_up_proj [E, 2I, D], experts.down_proj [E, D, I]."""

    def __init__(self, d: int, inner: int, n_experts: int, top_k: int, act: str):
        super().__init__()
        self.top_k, self.act = top_k, ACT[act]
        self.router, self.experts = nn.Module(), nn.Module()
        self.router.weight = nn.Parameter(torch.randn(n_experts, d) * 0.02)
        self.experts.gate_up_proj = nn.Parameter(torch.randn(n_experts, 2 * inner, d) * 0.02)
        self.experts.down_proj = nn.Parameter(torch.randn(n_experts, d, inner) * 0.02)

    def _expert(self, e: int, x: Tensor) -> Tensor:
        g, u = F.linear(x, self.experts.gate_up_proj[e]).chunk(2, dim=-1)
        return F.linear(self.act(g) * u, self.experts.down_proj[e])

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        top, idx = F.linear(flat, self.router.weight).float().topk(self.top_k, dim=-1)
        return _run_experts(flat, idx, torch.softmax(top, dim=-1), self._expert).view(x.shape)


class NemotronMoE(nn.Module):
    """mixer.gate.{weight [E, D], e_score_correction_bias [E]}, mixer.experts.{up_proj [E, I, d], down_proj
    [E, d, I]} (d: moe_latent_size or D), mixer.shared_experts (an UpDownMLP), fc1/fc2_latent_proj."""

    def __init__(self, d: int, inner: int, n_experts: int, top_k: int, act: str, moe: dict, bias: bool = False):
        super().__init__()
        self.top_k, self.act = top_k, ACT[act]
        self.n_group, self.topk_group = moe.get("n_group", 1), moe.get("topk_group", 1)
        self.norm_topk_prob, self.scale = moe.get("norm_topk_prob", True), float(moe.get("routed_scaling_factor", 1.0))
        latent = moe.get("moe_latent_size")
        dl = latent or d
        self.gate, self.experts = nn.Module(), nn.Module()
        self.gate.weight = nn.Parameter(torch.randn(n_experts, d) * 0.02)
        self.gate.register_buffer("e_score_correction_bias", torch.zeros(n_experts))
        self.experts.up_proj = nn.Parameter(torch.randn(n_experts, inner, dl) * 0.02)
        self.experts.down_proj = nn.Parameter(torch.randn(n_experts, dl, inner) * 0.02)
        self.shared_experts = UpDownMLP(d, moe.get("moe_shared_expert_intermediate_size", inner), act, bias)
        if latent:
            self.fc1_latent_proj, self.fc2_latent_proj = nn.Linear(d, dl, bias=bias), nn.Linear(dl, d, bias=bias)
        self.latent = bool(latent)

    def _route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The top-k experts of each token and their weights (DeepSeek-V3's router: float32)."""
        scores = F.linear(x.float(), self.gate.weight.float()).sigmoid()  # [n, E]
        choice = scores + self.gate.e_score_correction_bias
        E = scores.shape[-1]
        groups = choice.view(-1, self.n_group, E // self.n_group).topk(2, dim=-1)[0].sum(-1)  # [n, groups]
        keep = torch.zeros_like(groups).scatter_(1, groups.topk(self.topk_group, dim=-1)[1], 1)
        keep = keep[..., None].expand(-1, -1, E // self.n_group).reshape(-1, E).bool()
        idx = choice.masked_fill(~keep, float("-inf")).topk(self.top_k, dim=-1)[1]
        w = scores.gather(1, idx)
        if self.norm_topk_prob:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * self.scale

    def _expert(self, e: int, x: Tensor) -> Tensor:
        return F.linear(self.act(F.linear(x, self.experts.up_proj[e])), self.experts.down_proj[e])

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        idx, w = self._route(flat)
        h = self.fc1_latent_proj(flat) if self.latent else flat
        y = _run_experts(h, idx, w, self._expert)
        y = self.fc2_latent_proj(y) if self.latent else y
        return y.view(x.shape) + self.shared_experts(x)


# ---- the kind ---------------------------------------------------------------------------------
def _build(cfg) -> nn.Module:
    if cfg.model_type == "granitemoehybrid":
        return GraniteMoE(cfg.d_model, cfg.moe_intermediate_size, cfg.n_experts, cfg.experts_per_token, cfg.mlp_act)
    return NemotronMoE(cfg.d_model, cfg.moe_intermediate_size, cfg.n_experts, cfg.experts_per_token, cfg.mlp_act,
                       cfg.moe, cfg.mlp_bias)


KIND = LayerKind("moe", "MoE", None, _build, stateless_chunk, stateless_chunk,
                 {"nemotron_h": "mixer", "granitemoehybrid": "block_sparse_moe"})

"""HybridLanguageModel: Mamba-2 and attention layers (with MLPs) in a family's transformers layout.

A subclass of SSMLanguageModel with the same public API (encode_context(s), forward, hidden_states,
continuation_loss(es), step, generate_batch, fingerprint): it overrides what differs, the per-layer
loops, the state's shapes and the empty state. Its ContextState holds the Mamba-2 layers' SSM
state, conv window and log-decay (stacked over the SSM layers, as a pure Mamba-2's) and the
attention layers' keys and values (engine/state.py, engine/attention.py).

Layers are built with each family's module names, so a checkpoint's state dict loads as it is and
save_model writes one transformers' own class loads:
    nemotron_h        model.embeddings, model.layers.i.{norm, mixer}, model.norm_f, lm_head
    granitemoehybrid  model.embed_tokens, model.layers.i.{input_layernorm, mamba | self_attn,
                      post_attention_layernorm, shared_mlp, block_sparse_moe}, model.norm, lm_head
    bamba             model.embed_tokens, model.layers.i.{input_layernorm, mamba | self_attn,
                      pre_ff_layernorm, feed_forward}, model.final_layernorm, lm_head
Every sub-block is pre-norm residual: h <- h + m · f(norm(h)), m = Granite's residual_multiplier
(1 elsewhere); the residual stream stays in the model dtype, as transformers keeps it.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from picaso_core.light.deadline import check
from picaso_core.engine.attention import Attention, KVCache
from picaso_core.engine.hybrid_config import HybridConfig
from picaso_core.engine.mlp import GatedMLP, GraniteMLP, GraniteMoE, NemotronMoE, UpDownMLP
from picaso_core.engine.model import Mamba2Mixer, RMSNorm, SSMLanguageModel
from picaso_core.engine.scan import upcast
from picaso_core.engine.state import ContextState, layer_major


class ScaledHead(nn.Linear):
    """lm_head with Granite's logits scaling (logits / logits_scaling; 1 elsewhere: no op)."""

    def __init__(self, d: int, v: int, scaling: float):
        super().__init__(d, v, bias=False)
        self.scaling = scaling

    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x)
        return y if self.scaling == 1.0 else y / self.scaling


class HybridLayer(nn.Module):
    """One checkpoint layer: its sub-blocks (norm name, kind, module names) in order; kind "mamba"
    and "attention" carry state, "ffn" sums its modules' outputs."""

    def __init__(self):
        super().__init__()
        self.plan: list[tuple[str, str, tuple[str, ...]]] = []

    def add(self, norm: tuple[str, nn.Module], kind: str, **modules: nn.Module) -> None:
        setattr(self, *norm)
        for name, m in modules.items():
            setattr(self, name, m)
        self.plan.append((norm[0], kind, tuple(modules)))


def _build_layer(cfg: HybridConfig, kind: str) -> HybridLayer:
    D, mt = cfg.d_model, cfg.model_type
    norm = lambda: RMSNorm(D, cfg.norm_epsilon)  # noqa: E731
    mix = None
    if kind == "mamba":
        mix = Mamba2Mixer(cfg.mixer_config())
        mix.norm.eps = cfg.norm_epsilon  # the gated norm's epsilon is the family's RMS epsilon
    elif kind == "attention":
        mix = Attention(D, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.attention_bias, cfg.attention_scale,
                        cfg.rope_theta, cfg.rotary_dim)
    layer = HybridLayer()
    if mt == "nemotron_h":
        if kind == "mlp":
            mix = UpDownMLP(D, cfg.intermediate_size, cfg.mlp_act, cfg.mlp_bias)
        elif kind == "moe":
            mix = NemotronMoE(D, cfg.moe_intermediate_size, cfg.n_experts, cfg.experts_per_token, cfg.mlp_act,
                              cfg.moe, cfg.mlp_bias)
        layer.add(("norm", norm()), kind if kind in ("mamba", "attention") else "ffn", mixer=mix)
        return layer
    layer.add(("input_layernorm", norm()), kind, **{"mamba" if kind == "mamba" else "self_attn": mix})
    if mt == "granitemoehybrid":
        ffn = {"block_sparse_moe": GraniteMoE(D, cfg.moe_intermediate_size, cfg.n_experts, cfg.experts_per_token,
                                              cfg.mlp_act)} if cfg.n_experts else {}
        layer.add(("post_attention_layernorm", norm()), "ffn", **ffn,
                  shared_mlp=GraniteMLP(D, cfg.intermediate_size, cfg.mlp_act))
    else:  # bamba
        layer.add(("pre_ff_layernorm", norm()), "ffn",
                  feed_forward=GatedMLP(D, cfg.intermediate_size, cfg.mlp_act, cfg.mlp_bias))
    return layer


_NAMES = {"nemotron_h": ("embeddings", "norm_f"), "granitemoehybrid": ("embed_tokens", "norm"),
          "bamba": ("embed_tokens", "final_layernorm")}


class HybridLanguageModel(SSMLanguageModel):
    def __init__(self, config: HybridConfig):
        nn.Module.__init__(self)  # SSMLanguageModel's own layers are not built: ours follow the family's layout
        self.config = cfg = config
        self.tokenizer = None  # set by load_model
        self._emb, self._norm_f = _NAMES[cfg.model_type]
        self.model = nn.Module()
        setattr(self.model, self._emb, nn.Embedding(cfg.vocab_size, cfg.d_model))
        self.model.layers = nn.ModuleList(_build_layer(cfg, kind) for kind in cfg.layer_types)
        setattr(self.model, self._norm_f, RMSNorm(cfg.d_model, cfg.norm_epsilon))
        self.lm_head = ScaledHead(cfg.d_model, cfg.vocab_size, cfg.logits_scaling)
        nn.init.normal_(self.embedding.weight, std=0.02)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embedding.weight
        self._fingerprint: str | None = None

    @property
    def embedding(self) -> nn.Embedding:
        return getattr(self.model, self._emb)

    @property
    def device(self) -> torch.device:
        return self.embedding.weight.device

    def _state_dtype(self) -> torch.dtype:
        return torch.float64 if self.embedding.weight.dtype == torch.float64 else torch.float32

    def kernel_path(self) -> str:
        return super().kernel_path() + "; attention: torch SDPA"

    def _embed(self, ids: Tensor) -> Tensor:
        h = self.embedding(ids)
        m = self.config.embedding_multiplier
        return h if m == 1.0 else h * m

    def _residual(self, h: Tensor, out: Tensor) -> Tensor:
        m = self.config.residual_multiplier
        return h + (out if m == 1.0 else out * m)

    # ---- forward ---------------------------------------------------------------------------
    def hidden_states(self, ids: Tensor, state: ContextState | None = None,
                      lengths: Tensor | None = None) -> tuple[Tensor, ContextState]:
        """Final-norm hidden states [b, t, D] and the new batched state (`lengths`: right padding)."""
        ids = self._check_ids(ids)
        b, t = ids.shape
        st = self._batched_state(state, b)
        n_new = lengths.tolist() if lengths is not None else [t] * b
        kv_len = st.kv_lengths
        after = tuple(int(a) + int(n) for a, n in zip(kv_len, n_new))
        hidden, ssm, conv, log_decay, keys, values = self._hidden_core(ids, st, lengths, max(after))
        return hidden, ContextState(ssm, conv, log_decay, tuple(int(a) + int(n) for a, n in zip(st.num_tokens, n_new)),
                                    keys, values, after)

    def _hidden_core(self, ids: Tensor, st: ContextState, lengths: Tensor | None, total: int):
        """The layers on validated ids [b, t] from the batched state `st`; `total`: the positions the
        longest row holds after. Returns hidden, ssm, conv, log_decay, keys, values (batched)."""
        b = ids.shape[0]
        T = st.keys.shape[-2]
        kv_len = torch.tensor(st.kv_lengths, dtype=torch.long, device=ids.device)
        aligned = all(n == T for n in st.kv_lengths)
        h = self._embed(ids)
        ssm, conv, decay, keys, values = [], [], [], [], []
        for layer in self.model.layers:
            check()  # a served job past its time limit stops here (picaso_core.light.deadline)
            for norm, kind, names in layer.plan:
                x = getattr(layer, norm)(h)
                if kind == "mamba":
                    i = len(ssm)
                    out, c, s, ld = getattr(layer, names[0])(x, st.conv[:, i], st.ssm[:, i], lengths)
                    conv.append(c)
                    ssm.append(s.to(c.dtype))
                    decay.append(ld.view(b, -1, 1, 1))
                elif kind == "attention":
                    a = len(keys)
                    out, k, v = getattr(layer, names[0])(x, st.keys[:, a], st.values[:, a], kv_len, aligned, total)
                    keys.append(k)
                    values.append(v)
                else:
                    out = sum(getattr(layer, n)(x) for n in names)
                h = self._residual(h, out)
        hidden = getattr(self.model, self._norm_f)(h)
        stack = lambda parts, empty: torch.stack(parts, 1) if parts else empty  # noqa: E731 (none: a layer-less part)
        kv0 = st.keys.new_zeros(b, 0, self.config.n_kv_heads, total, self.config.head_dim)
        log_decay = st.log_decay + stack(decay, st.log_decay).to(st.log_decay.dtype)  # A(u u') = A(u') A(u)
        return (hidden, stack(ssm, st.ssm), stack(conv, st.conv), log_decay, stack(keys, kv0), stack(values, kv0))

    # ---- recurrent decode ------------------------------------------------------------------
    def _step_(self, ids: Tensor, ssm: Tensor, conv: Tensor, log_decay: Tensor, cache: KVCache) -> Tensor:
        """One token per row, updating the SSM buffers [b, L_ssm, ...] (`layer_major`) and the key-value
        cache IN PLACE; logits [b, V] float32."""
        cache.reserve()
        h = self._embed(ids)
        i = a = 0
        for layer in self.model.layers:
            check()
            for norm, kind, names in layer.plan:
                x = getattr(layer, norm)(h)
                m = getattr(layer, names[0])
                if kind == "mamba":
                    out = m.step(x, conv[:, i], ssm[:, i], log_decay[:, i])
                    i += 1
                elif kind == "attention":
                    out = m.step(x, cache, a)
                    a += 1
                else:
                    out = sum(getattr(layer, n)(x) for n in names)
                h = self._residual(h, out)
        cache.advance()
        return upcast(self.lm_head(getattr(self.model, self._norm_f)(h)))[0]

    @torch.no_grad()
    def step(self, token_ids: Tensor, state: ContextState | None = None) -> tuple[Tensor, ContextState]:
        """One recurrent step (see SSMLanguageModel.step): the SSM layers in O(1), each attention
        layer appends one position to its keys and values."""
        if not isinstance(token_ids, Tensor) or token_ids.dim() != 1:
            raise ValueError("token_ids must be a LongTensor of shape [batch] (one token per row)")
        ids = self._check_ids(token_ids[:, None])[:, 0]
        st = self._batched_state(state, ids.shape[0])
        ssm, conv, log_decay = layer_major(st)
        cache = KVCache(st, reserve=1)
        logits = self._step_(ids, ssm, conv, log_decay, cache)
        keys, values, kv_len = cache.state()
        return logits, ContextState(ssm.contiguous(), conv.contiguous(), log_decay.contiguous(),
                                    tuple(int(n) + 1 for n in st.num_tokens), keys, values, kv_len)

    def extra_repr(self) -> str:
        c = self.config
        return (f"{c.family}, {c.n_layer} layers ({c.n_ssm_layers} Mamba-2, {c.n_attn_layers} attention), "
                f"d_model {c.d_model}; {self.kernel_path()}")

"""HybridConfig: the transformers config.json of a hybrid Mamba-2 + attention checkpoint, typed.

Families read (transformers `model_type`; docs/hybrid.md has each one's block layout):
    nemotron_h        NVIDIA Nemotron-H: one block per layer, Mamba-2 | attention (no position encoding) |
                      MLP (relu²) | MoE, in `hybrid_override_pattern` ("M", "*", "-", "E") or `layers_block_type`
    granitemoehybrid  IBM Granite-4.0-H: Mamba-2 or attention (RoPE or none) then a gated MLP (+ MoE), with
                      Granite's embedding / residual / attention multipliers and logits scaling
    bamba             IBM Bamba: Mamba-2, attention at `attn_layer_indices` (RoPE on half of each head), gated MLP
Falcon-H1 (attention and Mamba-2 side by side in every layer, µP multipliers on every projection) is
refused in one line (`UNSUPPORTED`). Falcon-Mamba is a pure Mamba-1: ModelConfig reads it.

The same face as ModelConfig where the app reads one: family, n_layer, d_model, vocab_size, ssm_cfg
(of the Mamba-2 layers), state_shapes(), state_nbytes(num_tokens), to_dict(). `hf` keeps the
config.json as read: save_model writes it back, so transformers' own class loads what we save.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from picaso_core.engine.config import ModelConfig, SSMConfig, _json_float
from picaso_core.engine.state import VARIABLE

HYBRID_FAMILIES = ("nemotron_h", "granitemoehybrid", "bamba")
UNSUPPORTED = {"falcon_h1": "Falcon-H1 runs attention and Mamba-2 side by side in every layer with µP multipliers "
                            "on every projection (mup_vector), which this engine does not implement yet"}
# each family's names for a layer's kind -> ours: "mamba", "attention", "mlp", "moe"
_KINDS = {"M": "mamba", "mamba": "mamba", "linear_attention": "mamba", "*": "attention", "attention": "attention",
          "full_attention": "attention", "-": "mlp", "mlp": "mlp", "E": "moe", "moe": "moe"}
ACTIVATIONS = ("silu", "relu2", "relu", "gelu", "gelu_pytorch_tanh")


@dataclass
class MixerConfig(ModelConfig):
    """ModelConfig for a hybrid's Mamba-2 layers (Mamba2Mixer reads one): d_inner = heads x headdim,
    which Nemotron-H does not tie to expand x d_model."""

    inner: int = 0
    gated_norm_eps: float = 1e-5  # the gated norm's epsilon: the family's RMS epsilon

    @property
    def d_inner(self) -> int:
        return self.inner or self.ssm_cfg.expand * self.d_model


@dataclass
class HybridConfig:
    model_type: str
    d_model: int
    vocab_size: int
    layer_types: list[str]  # per layer: "mamba" | "attention" (| "mlp" | "moe": Nemotron-H's own blocks)
    ssm_cfg: SSMConfig  # the Mamba-2 layers
    mamba_heads: int
    norm_epsilon: float
    n_heads: int
    n_kv_heads: int
    head_dim: int
    attention_bias: bool
    attention_scale: float
    rope_theta: float | None  # None: no position encoding
    rotary_dim: int  # RoPE rotates the first rotary_dim channels of each head (Bamba: half)
    intermediate_size: int  # the dense MLP's width
    mlp_act: str
    mlp_bias: bool = False
    n_experts: int = 0  # MoE: routed experts (0: none)
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    moe: dict = field(default_factory=dict)  # Nemotron-H's router: n_group, topk_group, norm_topk_prob, ...
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    logits_scaling: float = 1.0
    tie_embeddings: bool = False
    hf: dict = field(default_factory=dict)  # the config.json as read

    def __post_init__(self) -> None:
        if self.mlp_act not in ACTIVATIONS:
            raise ValueError(f"activation {self.mlp_act!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"num_attention_heads={self.n_heads} must be a multiple of "
                             f"num_key_value_heads={self.n_kv_heads}")
        if self.d_inner % self.ssm_cfg.headdim or self.mamba_heads % self.ssm_cfg.ngroups:
            raise ValueError(f"mamba heads {self.mamba_heads} x head dim {self.ssm_cfg.headdim} do not fit "
                             f"{self.ssm_cfg.ngroups} groups")

    # ---- the face the app reads (as ModelConfig's) -------------------------------------------
    @property
    def family(self) -> str:
        return self.model_type

    @property
    def n_layer(self) -> int:
        """The checkpoint's layers (num_hidden_layers); the state stacks `n_ssm_layers` and `n_attn_layers`."""
        return len(self.layer_types)

    @property
    def n_ssm_layers(self) -> int:
        return self.layer_types.count("mamba")

    @property
    def n_attn_layers(self) -> int:
        return self.layer_types.count("attention")

    @property
    def d_inner(self) -> int:
        return self.mamba_heads * self.ssm_cfg.headdim

    @property
    def nheads(self) -> int:
        return self.mamba_heads

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.ssm_cfg.ngroups * self.ssm_cfg.d_state

    @property
    def padded_vocab_size(self) -> int:
        return self.vocab_size

    def mixer_config(self) -> MixerConfig:
        return MixerConfig(d_model=self.d_model, n_layer=self.n_ssm_layers, vocab_size=self.vocab_size,
                           ssm_cfg=self.ssm_cfg, norm_epsilon=self.norm_epsilon, inner=self.d_inner,
                           gated_norm_eps=self.norm_epsilon)

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of one context's state (engine/state.py): the SSM layers' as a pure Mamba-2's, and
        per attention layer keys and values of VARIABLE length (the positions read)."""
        L, A, s = self.n_ssm_layers, self.n_attn_layers, self.ssm_cfg
        kv = (A, self.n_kv_heads, VARIABLE, self.head_dim)
        return {"ssm": (L, self.nheads, s.headdim, s.d_state), "conv": (L, self.conv_dim, s.d_conv - 1),
                "log_decay": (L, self.nheads, 1, 1), "keys": kv, "values": kv}

    def kv_nbytes_per_token(self) -> int:
        """Bytes the attention layers' keys and values add per token read (float32)."""
        return 4 * 2 * self.n_attn_layers * self.n_kv_heads * self.head_dim

    def state_nbytes(self, num_tokens: int = 0) -> int:
        """Bytes of one stored context of `num_tokens` tokens in float32: the SSM part (fixed) and
        the attention part (grows with the tokens)."""
        fixed = 4 * sum(math.prod(v) for k, v in self.state_shapes().items() if k not in ("keys", "values"))
        return fixed + num_tokens * self.kv_nbytes_per_token()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ssm_cfg"]["dt_limit"] = list(self.ssm_cfg.dt_limit)
        return d

    # ---- reading transformers' config.json -----------------------------------------------------
    @classmethod
    def from_transformers(cls, d: dict[str, Any]) -> "HybridConfig":
        mt = d.get("model_type")
        if mt not in HYBRID_FAMILIES:
            raise ValueError(f"model_type {mt!r} is not a hybrid family ({', '.join(HYBRID_FAMILIES)})")
        return {"nemotron_h": _nemotron_h, "granitemoehybrid": _granite, "bamba": _bamba}[mt](cls, d)


def _kinds(types, key: str, allowed: tuple[str, ...]) -> list[str]:
    bad = [t for t in types if _KINDS.get(t) not in allowed]
    if bad:
        raise ValueError(f"{key} has layer kinds {sorted(set(map(str, bad)))}; this family's are {', '.join(allowed)}")
    return [_KINDS[t] for t in types]


def _limit(d: dict, default=(0.0, float("inf"))) -> tuple[float, float]:
    return tuple(_json_float(v) for v in (d.get("time_step_limit") or default))


def _rope(d: dict, head_dim: int, partial: float = 1.0) -> tuple[float, int]:
    rp = d.get("rope_parameters") or {}
    if rp.get("rope_type", "default") != "default" or d.get("rope_scaling"):
        raise ValueError(f"RoPE type {rp.get('rope_type') or d.get('rope_scaling')!r} is not supported "
                         "(only 'default')")
    theta = float(rp.get("rope_theta", d.get("rope_theta", 10000.0)))
    return theta, int(head_dim * rp.get("partial_rotary_factor", d.get("partial_rotary_factor", partial)))


def _common(d: dict, **kw) -> dict:
    heads = d["num_attention_heads"]
    return dict(model_type=d["model_type"], d_model=d["hidden_size"], vocab_size=d["vocab_size"], n_heads=heads,
                n_kv_heads=d.get("num_key_value_heads") or heads, tie_embeddings=d.get("tie_word_embeddings", False),
                hf=dict(d), **kw)


def _nemotron_h(cls, d: dict) -> HybridConfig:
    # softplus(dt)'s clamp: the config's time_step_limit where it says one (transformers' NemotronH reads it
    # since 5.2x, its default (0, inf)); else below at time_step_min, as the mixer's own clamp was before
    kinds = ("mamba", "attention", "mlp", "moe")
    if d.get("hybrid_override_pattern"):
        types = _kinds(list(d["hybrid_override_pattern"]), "hybrid_override_pattern", kinds)
    else:
        types = _kinds(d.get("layers_block_type") or d.get("layer_types") or [], "layers_block_type", kinds)
    g = d.get("n_groups", d.get("mamba_n_groups", 8))
    ssm = SSMConfig(layer="Mamba2", d_state=d.get("ssm_state_size", 128),
                    d_conv=d.get("conv_kernel", d.get("mamba_d_conv", 4)),
                    headdim=d.get("mamba_head_dim", 64), ngroups=g, chunk_size=d.get("chunk_size", 128),
                    conv_bias=d.get("use_conv_bias", True), bias=d.get("use_bias", False),
                    dt_limit=_limit(d, (_json_float(d.get("time_step_min", 0.001)), float("inf"))))
    hd = d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]
    moe = {k: d[k] for k in ("n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor", "moe_latent_size",
                             "moe_shared_expert_intermediate_size") if k in d}
    return cls(**_common(d, layer_types=types), ssm_cfg=ssm, mamba_heads=d.get("mamba_num_heads", 128),
               norm_epsilon=d.get("layer_norm_epsilon", 1e-5), head_dim=hd, attention_bias=False,
               attention_scale=hd ** -0.5, rope_theta=None, rotary_dim=0,
               intermediate_size=d.get("intermediate_size", 0), mlp_act=d.get("mlp_hidden_act", "relu2"),
               mlp_bias=d.get("mlp_bias", False), n_experts=d.get("n_routed_experts", 0) if "moe" in types else 0,
               experts_per_token=d.get("num_experts_per_tok", 0),
               moe_intermediate_size=d.get("moe_intermediate_size", 0),
               moe=moe)


def _mamba_of(d: dict) -> tuple[SSMConfig, int]:
    """Granite's and Bamba's `mamba_*` fields: the SSMConfig and the number of heads."""
    heads, inner = d.get("mamba_n_heads", 128), d.get("mamba_expand", 2) * d["hidden_size"]
    head = d.get("mamba_d_head", "auto")
    head = inner // heads if head == "auto" else head
    if head * heads != inner:
        raise ValueError(f"mamba_n_heads={heads} x mamba_d_head={head} != mamba_expand x hidden_size = {inner}")
    return SSMConfig(layer="Mamba2", d_state=d.get("mamba_d_state", 256), d_conv=d.get("mamba_d_conv", 4),
                     expand=d.get("mamba_expand", 2), headdim=head, ngroups=d.get("mamba_n_groups", 1),
                     chunk_size=d.get("mamba_chunk_size", 256), conv_bias=d.get("mamba_conv_bias", True),
                     bias=d.get("mamba_proj_bias", False), dt_limit=_limit(d)), heads


def _granite(cls, d: dict) -> HybridConfig:
    n = d["num_hidden_layers"]
    types = _kinds(d.get("layer_types") or d.get("layers_block_type") or ["mamba"] * n, "layer_types",
                   ("mamba", "attention"))
    if len(types) != n:
        raise ValueError(f"layer_types has {len(types)} entries but num_hidden_layers is {n}")
    ssm, heads = _mamba_of(d)
    hd = d["hidden_size"] // d["num_attention_heads"]
    pe = d.get("position_embedding_type")
    if pe not in (None, "nope", "rope"):
        raise ValueError(f"position_embedding_type {pe!r} is not 'rope' or 'nope'")
    theta, rot = _rope(d, hd) if pe == "rope" else (None, 0)
    return cls(**_common(d, layer_types=types), ssm_cfg=ssm, mamba_heads=heads,
               norm_epsilon=d.get("rms_norm_eps", 1e-6),
               head_dim=hd, attention_bias=d.get("attention_bias", False),
               attention_scale=float(d.get("attention_multiplier", 1.0)), rope_theta=theta, rotary_dim=rot,
               intermediate_size=d.get("shared_intermediate_size", 1024), mlp_act=d.get("hidden_act", "silu"),
               n_experts=d.get("num_local_experts", 0) or 0, experts_per_token=d.get("num_experts_per_tok", 0) or 0,
               moe_intermediate_size=d.get("intermediate_size", 0),
               embedding_multiplier=float(d.get("embedding_multiplier", 1.0)),
               residual_multiplier=float(d.get("residual_multiplier", 1.0)),
               logits_scaling=float(d.get("logits_scaling", 1.0)))


def _bamba(cls, d: dict) -> HybridConfig:
    n, attn = d["num_hidden_layers"], set(d.get("attn_layer_indices") or [])
    if not attn <= set(range(n)):
        raise ValueError(f"attn_layer_indices {sorted(attn)} are not all layers of num_hidden_layers={n}")
    ssm, heads = _mamba_of(d)
    hd = d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]
    theta, rot = _rope(d, hd, partial=0.5)  # transformers' Bamba rotates half of each head
    return cls(**_common(d, layer_types=["attention" if i in attn else "mamba" for i in range(n)]), ssm_cfg=ssm,
               mamba_heads=heads, norm_epsilon=d.get("rms_norm_eps", 1e-5), head_dim=hd,
               attention_bias=d.get("attention_bias", False), attention_scale=hd ** -0.5, rope_theta=theta,
               rotary_dim=rot, intermediate_size=d["intermediate_size"], mlp_act=d.get("hidden_act", "silu"),
               mlp_bias=d.get("mlp_bias", False))

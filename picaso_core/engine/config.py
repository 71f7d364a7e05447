"""Model configuration: the schema of mamba_ssm's config.json, for Mamba-1 and Mamba-2.

A checkpoint folder in the mamba_ssm layout (state-spaces/mamba2-130m, ...) has a config.json like
    {"d_model": 768, "n_layer": 24, "vocab_size": 50277, "ssm_cfg": {"layer": "Mamba2"},
     "rms_norm": true, "residual_in_fp32": true, "fused_add_norm": true,
     "pad_vocab_size_multiple": 16, "tie_embeddings": true}
Missing fields take mamba_ssm's defaults. `ModelConfig.from_transformers` reads the transformers
layout (`model_type` "mamba" / "mamba2") into the same dataclass.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


def _json_float(v: Any) -> float:
    """transformers >= 5 writes non-finite floats as {"__float__": "Infinity"}; older ones as strings."""
    if isinstance(v, dict) and "__float__" in v:
        v = v["__float__"]
    return float(v)


@dataclass
class SSMConfig:
    """The `ssm_cfg` block: arguments of mamba_ssm's Mamba / Mamba2 mixer."""

    layer: str = "Mamba1"  # "Mamba1" or "Mamba2"; mamba_ssm's default when absent is Mamba1
    d_state: int | None = None  # N, state size per channel; None -> 128 (Mamba2) / 16 (Mamba1)
    d_conv: int = 4  # K, width of the depthwise causal conv; the state keeps its last K-1 inputs
    expand: int = 2  # d_inner = expand * d_model
    headdim: int = 64  # P, Mamba2 channels per head; H = d_inner / P
    ngroups: int = 1  # G, Mamba2 groups sharing B and C (like GQA's kv heads)
    chunk_size: int = 256  # Mamba2 SSD chunk length (a speed knob, not a numerics one)
    dt_rank: int | str = "auto"  # Mamba1 rank of the dt projection; "auto" -> ceil(d_model / 16)
    conv_bias: bool = True
    bias: bool = False  # bias of in_proj / out_proj
    dt_min: float = 0.001  # dt initialisation range (training from scratch only)
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    dt_limit: tuple[float, float] = (0.0, float("inf"))  # Mamba2 clamp of softplus(dt)
    bcdt_rms_eps: float | None = None  # Falcon-Mamba: RMS-normalise dt (low rank), B and C; None: off

    def __post_init__(self) -> None:
        if self.layer not in ("Mamba1", "Mamba2"):
            raise ValueError(f"ssm_cfg.layer must be 'Mamba1' or 'Mamba2', got {self.layer!r}")
        if self.d_state is None:
            self.d_state = 128 if self.layer == "Mamba2" else 16
        self.dt_limit = tuple(float(v) for v in self.dt_limit)


@dataclass
class ModelConfig:
    """mamba_ssm's MambaConfig, typed. Shapes derived from it are properties below."""

    d_model: int = 2560  # D_model, residual stream width
    n_layer: int = 64  # L, number of mixer blocks
    vocab_size: int = 50277  # tokenizer vocabulary; the embedding is padded (see below)
    ssm_cfg: SSMConfig = field(default_factory=SSMConfig)
    d_intermediate: int = 0  # MLP width after each mixer; 0 in every released Mamba checkpoint
    rms_norm: bool = True  # RMSNorm (True) or LayerNorm (False) before each mixer and at the end
    norm_epsilon: float = 1e-5
    residual_in_fp32: bool = True  # keep the residual stream in float32 under half precision
    fused_add_norm: bool = True  # kernel choice upstream; numerically the same add + norm here
    pad_vocab_size_multiple: int = 8  # embedding rows rounded up to a multiple of this
    tie_embeddings: bool = True  # lm_head shares the embedding matrix

    def __post_init__(self) -> None:
        if isinstance(self.ssm_cfg, dict):
            self.ssm_cfg = SSMConfig(**self.ssm_cfg)
        if self.d_intermediate:
            raise ValueError("d_intermediate > 0 (MLP blocks) is not supported: no released Mamba uses it")
        s = self.ssm_cfg
        if s.layer == "Mamba2":
            if self.d_inner % s.headdim:
                raise ValueError(f"d_inner={self.d_inner} must be a multiple of headdim={s.headdim}")
            if self.nheads % s.ngroups:
                raise ValueError(f"nheads={self.nheads} must be a multiple of ngroups={s.ngroups}")

    # ---- derived sizes ---------------------------------------------------------------------
    @property
    def family(self) -> str:
        return self.ssm_cfg.layer

    @property
    def d_inner(self) -> int:
        return self.ssm_cfg.expand * self.d_model

    @property
    def nheads(self) -> int:
        """H: Mamba2 heads. For Mamba1 every channel has its own decay, so H = d_inner."""
        return self.d_inner // self.ssm_cfg.headdim if self.family == "Mamba2" else self.d_inner

    @property
    def dt_rank(self) -> int:
        r = self.ssm_cfg.dt_rank
        return math.ceil(self.d_model / 16) if r == "auto" else int(r)

    @property
    def conv_dim(self) -> int:
        """C: channels through the causal conv (Mamba2 convolves x, B and C together)."""
        if self.family == "Mamba2":
            return self.d_inner + 2 * self.ssm_cfg.ngroups * self.ssm_cfg.d_state
        return self.d_inner

    @property
    def padded_vocab_size(self) -> int:
        m = self.pad_vocab_size_multiple
        return self.vocab_size + (m - self.vocab_size % m) % m

    def mixer_config(self) -> "ModelConfig":
        """The config a Mamba mixer reads (engine/layers): a pure model's is its own."""
        return self

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of one context's state (see picaso_core.engine.state)."""
        L, s = self.n_layer, self.ssm_cfg
        if self.family == "Mamba2":
            ssm = (L, self.nheads, s.headdim, s.d_state)
            decay = (L, self.nheads, 1, 1)
        else:
            ssm = decay = (L, self.d_inner, s.d_state)
        return {"ssm": ssm, "conv": (L, self.conv_dim, s.d_conv - 1), "log_decay": decay}

    def state_nbytes(self, num_tokens: int = 0) -> int:
        """Bytes of one stored context state in float32 (ssm + conv + log_decay), whatever
        `num_tokens` (a hybrid's grows with it: HybridConfig)."""
        return 4 * sum(math.prod(v) for v in self.state_shapes().values())

    # ---- (de)serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ssm_cfg"]["dt_limit"] = list(self.ssm_cfg.dt_limit)
        if self.ssm_cfg.bcdt_rms_eps is None:  # absent unless set: the config (and fingerprint) as before
            del d["ssm_cfg"]["bcdt_rms_eps"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """Read a mamba_ssm config.json dict; unknown keys (attn_cfg, ...) are checked, then dropped."""
        if d.get("attn_layer_idx"):
            raise ValueError("hybrid checkpoints with attention layers (attn_layer_idx) are not supported")
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        ssm = dict(kw.pop("ssm_cfg", None) or {})
        sknown = {f.name for f in dataclasses.fields(SSMConfig)}
        unknown = set(ssm) - sknown
        if unknown:
            raise ValueError(f"unsupported ssm_cfg keys {sorted(unknown)}")
        return cls(ssm_cfg=SSMConfig(**ssm), **kw)

    @classmethod
    def from_transformers(cls, d: dict[str, Any]) -> "ModelConfig":
        """Read a transformers MambaConfig / Mamba2Config / FalconMambaConfig dict (`model_type`
        mamba, mamba2 or falcon_mamba: Mamba-1 with RMS-normalised dt, B and C)."""
        mt = d.get("model_type")
        if mt not in ("mamba", "mamba2", "falcon_mamba"):
            raise ValueError(f"transformers config has model_type={mt!r}; expected 'mamba', 'mamba2' or 'falcon_mamba'")
        common = dict(
            d_model=d["hidden_size"],
            n_layer=d["num_hidden_layers"],
            vocab_size=d["vocab_size"],
            norm_epsilon=d.get("layer_norm_epsilon", 1e-5),
            residual_in_fp32=d.get("residual_in_fp32", True),
            pad_vocab_size_multiple=1,  # transformers stores the (already padded) vocab as is
            tie_embeddings=d.get("tie_word_embeddings", True),
        )
        if mt == "mamba2":
            limit = [_json_float(v) for v in d.get("time_step_limit", (0.0, float("inf")))]
            ssm = SSMConfig(
                layer="Mamba2", d_state=d.get("state_size", 128), d_conv=d.get("conv_kernel", 4),
                expand=d.get("expand", 2), headdim=d.get("head_dim", 64), ngroups=d.get("n_groups", 1),
                chunk_size=d.get("chunk_size", 256), conv_bias=d.get("use_conv_bias", True),
                bias=d.get("use_bias", False), dt_limit=tuple(limit),
            )
            cfg = cls(ssm_cfg=ssm, **common)
            if "num_heads" in d and d["num_heads"] != cfg.nheads:
                raise ValueError(f"num_heads={d['num_heads']} != expand*hidden_size/head_dim={cfg.nheads}")
            if not d.get("rms_norm", True):
                raise ValueError("Mamba2 with rms_norm=False (ungated norm) is not supported")
            return cfg
        ssm = SSMConfig(
            layer="Mamba1", d_state=d.get("state_size", 16), d_conv=d.get("conv_kernel", 4),
            expand=d.get("expand", 2), dt_rank=d.get("time_step_rank", "auto"),
            conv_bias=d.get("use_conv_bias", True), bias=d.get("use_bias", False),
            bcdt_rms_eps=_json_float(d.get("mixer_rms_eps", 1e-6)) if mt == "falcon_mamba" else None,
        )
        cfg = cls(ssm_cfg=ssm, **common)
        inter = d.get("intermediate_size")
        if inter is not None and inter != cfg.d_inner:
            raise ValueError(f"intermediate_size={inter} != expand*hidden_size={cfg.d_inner}")
        return cfg

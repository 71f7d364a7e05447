"""A model's layout: its family, the kinds of its layers, what its state holds. Read from a config
once, frozen, and public as `model.layout`: callers ask it instead of re-deriving "hybrid or pure".

    family          the config's family: "Mamba1", "Mamba2" (mamba_ssm), "nemotron_h",
                    "granitemoehybrid", "bamba" (transformers' model_type)
    name            how the app names it: "Mamba", "Mamba-2", "Nemotron-H", "Granite-4.0-H", "Bamba"
    layers          per checkpoint layer, the kinds of its sub-blocks in order (engine/layers):
                    ("mamba2",) · ("attention",) · ("mamba2", "mlp") · ("attention", "moe", "mlp") ...
    state_layers    (checkpoint layer, kind) of every layer that holds state, in order
    ssm_layers      the checkpoint layers behind the state's SSM axis (state.ssm[i] is layer ssm_layers[i])
    attention_layers  the checkpoint layers behind the state's keys and values
    position        "none" or "rope" (the attention layers' position encoding); rope: (theta, rotary_dim)
    state_shapes    one context's state (engine/state.py); VARIABLE marks the positions axis of keys/values
    state_bytes     one context's fixed part in float32; bytes_per_token what each token read adds

Each family's weight names (so a checkpoint's state dict loads as it is, and save_model writes what
the family's own class loads):
    Mamba1, Mamba2    backbone.embedding, backbone.layers.i.{norm, mixer}, backbone.norm_f, lm_head
    nemotron_h        model.embeddings, model.layers.i.{norm, mixer}, model.norm_f, lm_head
    granitemoehybrid  model.embed_tokens, model.layers.i.{input_layernorm, mamba | self_attn,
                      post_attention_layernorm, shared_mlp, block_sparse_moe}, model.norm, lm_head
    bamba             model.embed_tokens, model.layers.i.{input_layernorm, mamba | self_attn,
                      pre_ff_layernorm, feed_forward}, model.final_layernorm, lm_head
Adding a family: a Family record below (its names and how a layer's sub-blocks are laid out), its
config reader (engine/config.py, hybrid_config.py) and its loader names (engine/loading.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from picaso_core.engine.hybrid_config import HybridConfig
from picaso_core.engine.layers import KINDS, STATE_PARTS

# A sub-block: (its norm's name, ((module name, kind), ...)); the first module's kind runs it
SubBlock = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Family:
    key: str
    name: str
    root: str  # the module holding embedding, layers and final norm: mamba_ssm's "backbone", transformers' "model"
    embedding: str
    final_norm: str
    sub_blocks: Callable[[object, str], list[SubBlock]]  # (config, the layer's mixer kind) -> its sub-blocks
    mamba_ssm: bool = False  # mamba_ssm's layout: its weight init, its residual add + RMSNorm fused on CUDA


def _one(cfg, k: str) -> list[SubBlock]:
    """One sub-block a layer: its norm ("norm"), then its mixer (mamba_ssm's Block, Nemotron-H's layer)."""
    return [("norm", ((KINDS[k].weights[cfg.family], k),))]


def _granite(cfg, k: str) -> list[SubBlock]:
    ffn = (("block_sparse_moe", "moe"),) if cfg.n_experts else ()
    return [("input_layernorm", ((KINDS[k].weights[cfg.family], k),)),
            ("post_attention_layernorm", ffn + (("shared_mlp", "mlp"),))]


def _bamba(cfg, k: str) -> list[SubBlock]:
    return [("input_layernorm", ((KINDS[k].weights[cfg.family], k),)), ("pre_ff_layernorm", (("feed_forward", "mlp"),))]


FAMILIES: dict[str, Family] = {f.key: f for f in (
    Family("Mamba1", "Mamba", "backbone", "embedding", "norm_f", _one, mamba_ssm=True),
    Family("Mamba2", "Mamba-2", "backbone", "embedding", "norm_f", _one, mamba_ssm=True),
    Family("nemotron_h", "Nemotron-H", "model", "embeddings", "norm_f", _one),
    Family("granitemoehybrid", "Granite-4.0-H", "model", "embed_tokens", "norm", _granite),
    Family("bamba", "Bamba", "model", "embed_tokens", "final_layernorm", _bamba),
)}

_HYBRID_KIND = {"mamba": "mamba2", "attention": "attention", "mlp": "mlp", "moe": "moe"}  # HybridConfig's names


def mixer_kinds(config) -> list[str]:
    """Each checkpoint layer's first kind (its mixer; Nemotron-H's MLP and MoE layers are their own)."""
    if isinstance(config, HybridConfig):
        return [_HYBRID_KIND[t] for t in config.layer_types]
    return [config.family.lower()] * config.n_layer


def sub_blocks(config) -> list[list[SubBlock]]:
    """Every checkpoint layer's sub-blocks, as its family lays them out."""
    fam = FAMILIES[config.family]
    return [fam.sub_blocks(config, k) for k in mixer_kinds(config)]


@dataclass(frozen=True)
class Layout:
    family: str
    name: str
    layers: tuple[tuple[str, ...], ...]
    position: str
    rope: tuple[float, int] | None
    state_shapes: tuple[tuple[str, tuple[int, ...]], ...]
    state_bytes: int
    bytes_per_token: int

    @cached_property  # the fields are frozen: asked on every forward and step, computed once
    def state_layers(self) -> tuple[tuple[int, str], ...]:
        return tuple((i, k) for i, kinds in enumerate(self.layers) for k in kinds if KINDS[k].state)

    def _layers_holding(self, part: str) -> tuple[int, ...]:
        return tuple(i for i, k in self.state_layers if KINDS[k].state == part)

    @cached_property
    def ssm_layers(self) -> tuple[int, ...]:
        return self._layers_holding("ssm")

    @cached_property
    def attention_layers(self) -> tuple[int, ...]:
        return self._layers_holding("kv")

    @cached_property
    def ssm_kind(self) -> str | None:
        """The kind of the SSM layers ("mamba1" | "mamba2"; None without any)."""
        return next((k for _, k in self.state_layers if KINDS[k].state == "ssm"), None)

    @cached_property
    def n_state_layers(self) -> int:
        """The layers a state's SSM part stacks (state.ssm's layer axis): a tab's layer slider's size."""
        return len(self.ssm_layers)

    @cached_property
    def has_attention(self) -> bool:
        """Whether a state holds attention keys and values (they grow with the tokens read)."""
        return bool(self.attention_layers)

    @cached_property
    def pure_ssm(self) -> bool:
        """Whether every layer is one SSM mixer and nothing else (a view that walks every layer as a
        Mamba block needs this)."""
        return all(len(kinds) == 1 and KINDS[kinds[0]].state == "ssm" for kinds in self.layers)

    @cached_property
    def parts(self) -> tuple[str, ...]:
        """The tensors of a state: ssm, conv, log_decay (+ keys, values with attention layers)."""
        return tuple(n for n, _ in self.state_shapes)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self.state_shapes)

    def nbytes(self, num_tokens: int = 0) -> int:
        """One stored context of `num_tokens` tokens in float32."""
        return self.state_bytes + num_tokens * self.bytes_per_token

    def line(self) -> str:
        """How the header names the model: a pure SSM by its family ("Mamba2"), a model with other
        layers by its layers' kinds ("Nemotron-H hybrid: 4 Mamba-2 + 1 attention layers")."""
        if self.pure_ssm:
            return self.family
        counts: dict[str, int] = {}
        for _, k in self.state_layers:
            if KINDS[k].state != "kv":
                counts[k] = counts.get(k, 0) + 1
        parts = [f"{n} {KINDS[k].label}" for k, n in counts.items()] + [f"{len(self.attention_layers)} attention"]
        return f"{self.name} hybrid: " + " + ".join(parts) + " layers"


def _stacked_parts(config, layers) -> dict[str, tuple[int, ...]]:
    """One context's state shapes, as the kinds declare their parts (kind.part) stacked over their
    layers; checked against the config's own account (config.state_shapes()), which also names the
    parts a family declares but no layer of this checkpoint holds (a hybrid without attention: keys
    of 0 layers)."""
    parts: dict[str, list[tuple[int, ...]]] = {}
    for kinds in layers:
        for k in kinds:
            for name, shape in KINDS[k].part(config).items():
                parts.setdefault(name, []).append(tuple(shape))
    declared = config.state_shapes()
    shapes = {}
    for name, per_layer in parts.items():
        if len(set(per_layer)) != 1:
            raise ValueError(f"{config.family}: the layers holding {name!r} disagree on its shape: {sorted(set(per_layer))}")
        shapes[name] = (len(per_layer), *per_layer[0])
    for name, shape in declared.items():
        if name not in shapes and shape[0] == 0:
            shapes[name] = tuple(shape)
    if shapes != dict(declared):
        raise ValueError(f"{config.family}: the layer kinds' state parts {shapes} are not the config's {dict(declared)}")
    return {name: shapes[name] for name in declared}


def layout_of(config) -> Layout:
    """The Layout of a config (ModelConfig or HybridConfig)."""
    fam = FAMILIES.get(config.family)
    if fam is None:
        raise ValueError(f"no layout for family {config.family!r}; the engine reads {', '.join(FAMILIES)}")
    layers = tuple(tuple(k for _, mods in blocks for _, k in mods) for blocks in sub_blocks(config))
    shapes = _stacked_parts(config, layers)
    fixed = {k: v for k, v in shapes.items() if k not in STATE_PARTS["kv"]}
    theta = getattr(config, "rope_theta", None)
    rope = None if theta is None else (float(theta), int(config.rotary_dim))
    per_token = config.kv_nbytes_per_token() if isinstance(config, HybridConfig) else 0
    return Layout(family=config.family, name=fam.name, layers=layers, position="none" if rope is None else "rope",
                  rope=rope, state_shapes=tuple(shapes.items()),
                  state_bytes=4 * sum(math.prod(v) for v in fixed.values()), bytes_per_token=per_token)


__all__ = ["Layout", "Family", "FAMILIES", "layout_of", "sub_blocks", "mixer_kinds"]

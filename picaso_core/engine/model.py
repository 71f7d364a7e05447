"""LanguageModel: a language model stacked from layer kinds, whose state is a value.

One class for every family the engine reads (engine/layout.py): the config gives a Layout (the kind
of every layer), the family gives the weight names, and the layers come from engine/layers/ (Mamba-1
and Mamba-2 mixers, attention, MLP, MoE). The forward runs every layer's sub-blocks in order,
norm -> kind -> residual add, without asking which kind it runs: each kind reads and writes its own
part of the state (kind.py's runs). `SSMLanguageModel` (a pure Mamba-1 / Mamba-2, mamba_ssm's names)
and `HybridLanguageModel` (engine/hybrid.py) are this class under the names docs/api.md shows.

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
from torch import Tensor

from picaso_core.light.deadline import check
from picaso_core.engine import graphs, kernels
from picaso_core.engine.decode import generate_batch
from picaso_core.engine.layers import ChunkRun, StepRun, kind
from picaso_core.engine.layers.attention import KVCache
from picaso_core.engine.layers.common import GatedRMSNorm, RMSNorm, ScaledHead  # noqa: F401 (GatedRMSNorm: its old home)
from picaso_core.engine.layers.mamba1 import Mamba1Mixer  # noqa: F401 (its old home: scripts and tests import it here)
from picaso_core.engine.layers.mamba2 import Mamba2Mixer  # noqa: F401
from picaso_core.engine.layout import FAMILIES, Layout, layout_of, sub_blocks
from picaso_core.engine.losses import token_nll
from picaso_core.engine.scan import upcast
from picaso_core.engine.state import ContextState, layer_major


def _add_norm(norm: nn.Module, out: Tensor | None, residual: Tensor, dtype: torch.dtype,
              fuse: bool = True) -> tuple[Tensor, Tensor]:
    """A block's pre-norm: residual += out (the previous mixer's output; None before the first
    block), then norm(residual) in `dtype`. Returns (normed, residual).
    On CUDA with mamba-ssm (RMSNorm), one fused kernel as mamba_ssm's fused_add_norm: it normalises
    the float32 residual itself, where the reference (as transformers' Mamba2) rounds it to `dtype`
    first: the same up to that rounding (none in float32). fuse=False: never (the families whose
    reference does not fuse, engine/layout.py's add_norm_kernel)."""
    fn = kernels.get("addnorm", residual) if fuse and isinstance(norm, RMSNorm) else None
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


class Layer(nn.Module):
    """One checkpoint layer: its sub-blocks in order, each (norm name, kind, module names); the
    modules are attributes under the family's weight names (engine/layout.py)."""

    def __init__(self, config, blocks):
        super().__init__()
        self.plan: list[tuple[str, object, tuple[str, ...]]] = []
        for norm, mods in blocks:
            built = {name: kind(k).build(config) for name, k in mods}  # in order: the same random init as before
            setattr(self, norm, _norm(config))
            for name, m in built.items():
                setattr(self, name, m)
            self.plan.append((norm, kind(mods[0][1]), tuple(built)))


def _norm(config) -> nn.Module:
    rms = getattr(config, "rms_norm", True)  # every hybrid family: RMSNorm
    return RMSNorm(config.d_model, config.norm_epsilon) if rms else nn.LayerNorm(config.d_model, config.norm_epsilon)


class LanguageModel(nn.Module):
    """A language model stacked from `layout_of(config)`'s layer kinds under its family's weight names."""

    def __init__(self, config):
        super().__init__()
        self.config = cfg = config
        self._layout = layout_of(config)
        self.tokenizer = None  # set by load_model
        self._family = fam = FAMILIES[self._layout.family]
        self._fuse = fam.mamba_ssm  # mamba_ssm's fused residual add + RMSNorm on CUDA (engine/kernels.py)
        self._emb_mult = float(getattr(cfg, "embedding_multiplier", 1.0))  # Granite's multipliers; 1 elsewhere
        self._res_mult = float(getattr(cfg, "residual_multiplier", 1.0))
        self._res_fp32 = bool(getattr(cfg, "residual_in_fp32", False))  # mamba_ssm keeps the residual in float32
        root = nn.Module()
        setattr(self, fam.root, root)
        setattr(root, fam.embedding, nn.Embedding(cfg.padded_vocab_size, cfg.d_model))
        root.layers = nn.ModuleList(Layer(cfg, blocks) for blocks in sub_blocks(cfg))
        setattr(root, fam.final_norm, _norm(cfg))
        self.lm_head = ScaledHead(cfg.d_model, cfg.padded_vocab_size, float(getattr(cfg, "logits_scaling", 1.0)))
        self._init_weights()
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embedding.weight
        self._fingerprint: str | None = None

    def _init_weights(self) -> None:
        """N(0, 0.02) embeddings; a pure Mamba's as mamba_ssm's _init_weights: zero biases and
        out_proj / sqrt(n_layer) too (a hybrid's layers keep their modules' own init)."""
        nn.init.normal_(self.embedding.weight, std=0.02)
        if not self._family.mamba_ssm:
            return
        for layer in self.layers:
            with torch.no_grad():
                nn.init.kaiming_uniform_(layer.mixer.out_proj.weight, a=math.sqrt(5))
                layer.mixer.out_proj.weight /= math.sqrt(self.config.n_layer)
                for lin in (layer.mixer.in_proj, layer.mixer.out_proj):
                    if lin.bias is not None:
                        nn.init.zeros_(lin.bias)

    @property
    def layout(self) -> Layout:
        """The model's family, layer kinds and state parts (engine/layout.py): what callers ask."""
        return self._layout

    @property
    def embedding(self) -> nn.Embedding:
        return getattr(getattr(self, self._family.root), self._family.embedding)

    @property
    def layers(self) -> nn.ModuleList:
        return getattr(self, self._family.root).layers

    @property
    def final_norm(self) -> nn.Module:
        return getattr(getattr(self, self._family.root), self._family.final_norm)

    # ---- states ----------------------------------------------------------------------------
    @property
    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.config.state_shapes()

    @property
    def device(self) -> torch.device:
        return self.embedding.weight.device

    def empty_state(self) -> ContextState:
        return ContextState.zeros(self.state_shapes, device=self.device)

    def _state_dtype(self) -> torch.dtype:
        return torch.float64 if self.embedding.weight.dtype == torch.float64 else torch.float32

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
        On CUDA, short forwards of a model without attention layers replay a CUDA graph
        (engine/graphs.py) instead of launching each op."""
        ids = self._check_ids(ids)
        b, t = ids.shape
        st = self._batched_state(state, b)
        n_new = lengths.tolist() if lengths is not None else [t] * b
        num_tokens = tuple(int(a) + int(n) for a, n in zip(st.num_tokens, n_new))
        if not self.layout.has_attention:
            out = graphs.forward(self, ids, st, lengths)
            if out is None:
                out = self._hidden_core(ids, st.ssm, st.conv, st.log_decay, lengths)
            hidden, ssm, conv, log_decay = out
            return hidden, ContextState(ssm=ssm, conv=conv, log_decay=log_decay, num_tokens=num_tokens)
        after = tuple(int(a) + int(n) for a, n in zip(st.kv_lengths, n_new))
        hidden, ssm, conv, log_decay, keys, values = self._hidden_core(
            ids, st.ssm, st.conv, st.log_decay, lengths, (st.keys, st.values, st.kv_lengths, max(after)))
        return hidden, ContextState(ssm, conv, log_decay, num_tokens, keys, values, after)

    def _embed(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """The embedding (Granite's multiplier applied) and the residual stream it starts (float32
        where the family keeps it so)."""
        h = self.embedding(ids)
        if self._emb_mult != 1.0:
            h = h * self._emb_mult
        return h, (h.float() if self._res_fp32 and h.dtype != torch.float64 else h)

    def _hidden_core(self, ids: Tensor, ssm_in: Tensor, conv_in: Tensor, log_decay_in: Tensor,
                     lengths: Tensor | None, kv: tuple | None = None) -> tuple[Tensor, ...]:
        """The layers on validated ids [b, t] from batched state tensors [b, L, ...]: the hidden
        states and the new ssm, conv and log_decay tensors; with `kv` (keys, values, kv_lengths, the
        positions the longest row holds after: a model with attention layers), its new keys and values
        after them. Without kv no host synchronisation, so a CUDA graph can capture it (engine/graphs.py)."""
        run = ChunkRun(ssm_in, conv_in, log_decay_in, lengths, kv)
        h, residual = self._embed(ids)  # [b, t, D]
        out = None
        for layer in self.layers:
            check()  # a served job past its time limit stops here (picaso_core.light.deadline); nothing when none is set
            for norm, k, names in layer.plan:
                normed, residual = _add_norm(getattr(layer, norm), out, residual, h.dtype, self._fuse)  # += the last out
                out = k.chunk([getattr(layer, n) for n in names], normed, run)
                if self._res_mult != 1.0:
                    out = out * self._res_mult
        hidden = _add_norm(self.final_norm, out, residual, h.dtype, self._fuse)[0]
        stack = lambda parts, empty: torch.stack(parts, 1) if parts else empty  # noqa: E731 (none: a layer-less part)
        log_decay = log_decay_in + stack(run.decay, log_decay_in).to(log_decay_in.dtype)  # A(u u') = A(u') A(u)
        core = (hidden, stack(run.ssm, ssm_in), stack(run.conv, conv_in), log_decay)
        if kv is None:
            return core
        cfg = self.config
        kv0 = run.keys_in.new_zeros(ids.shape[0], 0, cfg.n_kv_heads, run.total, cfg.head_dim)
        return (*core, stack(run.keys, kv0), stack(run.values, kv0))

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
    def _step_(self, ids: Tensor, ssm: Tensor, conv: Tensor, log_decay: Tensor,
               cache: KVCache | None = None) -> Tensor:
        """One token per row, updating the batched state tensors IN PLACE; logits [b, V] float32.
        ssm, conv, log_decay [b, L, ...] with every layer's slice contiguous (`layer_major`); `cache`:
        the attention layers' keys and values (a model with attention layers), also updated in place."""
        if cache is not None:
            cache.reserve()
        run = StepRun(ssm, conv, log_decay, cache)
        h, residual = self._embed(ids)  # [b, D]
        out = None
        for layer in self.layers:
            check()  # as in _hidden_core: a job past its time limit stops at the next layer
            for norm, k, names in layer.plan:
                normed, residual = _add_norm(getattr(layer, norm), out, residual, h.dtype, self._fuse)
                out = k.step([getattr(layer, n) for n in names], normed, run)
                if self._res_mult != 1.0:
                    out = out * self._res_mult
        if cache is not None:
            cache.advance()
        return upcast(self.lm_head(_add_norm(self.final_norm, out, residual, h.dtype, self._fuse)[0]))[0]

    @torch.no_grad()
    def step(self, token_ids: Tensor, state: ContextState | None = None) -> tuple[Tensor, ContextState]:
        """One recurrent step: token_ids [b] (one token per row) read from `state` (None: empty;
        single: shared; batched: one per row). Returns logits [b, V] (float32) and the new batched
        state, equal to `forward(token_ids[:, None], state)`'s last position and state, in O(1)
        of the tokens before: the conv window rolls, the SSM state is updated in closed form; each
        attention layer appends one position to its keys and values."""
        if not isinstance(token_ids, Tensor) or token_ids.dim() != 1:
            raise ValueError("token_ids must be a LongTensor of shape [batch] (one token per row)")
        ids = self._check_ids(token_ids[:, None])[:, 0]
        st = self._batched_state(state, ids.shape[0])
        ssm, conv, log_decay = layer_major(st)
        cache = KVCache(st, reserve=1) if self.layout.has_attention else None
        logits = self._step_(ids, ssm, conv, log_decay, cache)
        num_tokens = tuple(int(n) + 1 for n in st.num_tokens)
        if cache is None:
            return logits, ContextState(ssm.contiguous(), conv.contiguous(), log_decay.contiguous(),  # batch-major
                                        num_tokens)
        keys, values, kv_len = cache.state()
        return logits, ContextState(ssm.contiguous(), conv.contiguous(), log_decay.contiguous(), num_tokens,
                                    keys, values, kv_len)

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
        if self.layout.has_attention:
            path += "; attention: torch SDPA"
        return path

    def extra_repr(self) -> str:
        lay, c = self.layout, self.config
        kinds = "" if lay.pure_ssm else f" ({lay.n_state_layers} Mamba-2, {len(lay.attention_layers)} attention)"
        return f"{c.family}, {c.n_layer} layers{kinds}, d_model {c.d_model}; {self.kernel_path()}"

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


class SSMLanguageModel(LanguageModel):
    """A pure Mamba-1 / Mamba-2 language model in mamba_ssm's names (backbone.*): a LanguageModel of a
    ModelConfig. Its checkpoints load as they are; transformers' names are mapped in loading.py."""

    def __init__(self, config):
        if getattr(config, "family", None) not in ("Mamba1", "Mamba2"):
            raise TypeError(f"SSMLanguageModel reads a ModelConfig (Mamba1 / Mamba2), got {type(config).__name__}; "
                            "load_model picks the class for a checkpoint")
        super().__init__(config)

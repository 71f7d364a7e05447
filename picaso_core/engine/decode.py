"""Batched recurrent decoding: one prefill of a prompt from many states, then O(1) steps.

An SSM's decode step costs the same whatever came before (the slides' complexity table, seed 004):
the state carries everything, so a token is a closed-form update of the conv window and the SSM
state (`SSMLanguageModel.step`, `Mamba2Mixer.step`, `Mamba1Mixer.step`), not a forward through the
chunked scan. Compose & compare continues one query from 7 composed states: here they are one batch,
so a token costs one pass over the weights for all of them instead of one each.

    prefill   hidden_states(prompt repeated b times, the b states stacked): one batched forward;
              the states may hold different numbers of tokens (the count only labels a state)
    decode    max_new_tokens - 1 calls of SSMLanguageModel._step_ on the same state buffers

Memory: the decode buffers are allocated once, before the first step: the batched state (b x the
model's state bytes, updated in place) and a [b, max_new_tokens] token table. Each step's activations
are [b, layer width] and do not grow with the tokens generated or with the prompt. The peak is the
prefill's (weights + b x prompt length x the widest activation of a layer); bench/decode_speed.py
prints the buffer sizes.

EOS: with stop_at_eos, a row stops at the tokenizer's end-of-text token, which is NOT returned (the
ids are the text before it); the other rows go on. Finished rows keep being stepped (the batch keeps
its shape and buffers) and their extra tokens are dropped; the loop ends when every row is done.

Sampling: every row draws from its own generator seeded with `seed`, so row i equals `generate` on
state i alone with that seed, and methods compared side by side share their random numbers.

CUDA graphs: on a GPU a step is ~20 small kernels per layer, and launching them costs more than
running them (~1,100 launches per forward). With CUDA_GRAPHS (default on; environment
PICASO_CUDA_GRAPHS=0 turns it off) the step is captured once per model and batch size on static
buffers and replayed per token. Off CUDA it is never used.
"""

from __future__ import annotations

import numbers
import os
import secrets
import time
from typing import Callable, Sequence

import torch
from torch import Tensor

from picaso_core.engine import kernels
from picaso_core.engine.layers.attention import KVCache
from picaso_core.engine.graphs import capture
from picaso_core.engine.losses import token_nll
from picaso_core.engine.scan import upcast
from picaso_core.engine.state import ContextState, layer_major


def _stacked_states(model, states) -> ContextState:
    """The given states as one batched state on the model's device (None: the empty state)."""
    if isinstance(states, ContextState):
        states = states.unbind()
    states = list(states) if states is not None else []
    if not states:
        raise ValueError("generate_batch needs at least one state (None or model.empty_state() for no context)")
    rows = []
    for i, s in enumerate(states):
        s = model.empty_state() if s is None else s
        if not isinstance(s, ContextState):
            raise ValueError(f"state {i} is a {type(s).__name__}, not a ContextState")
        if s.batched:
            raise ValueError(f"state {i} is batched; give single states (or one batched ContextState)")
        s.check_shapes(model.state_shapes, what=f"state {i}")
        rows.append(s.to(model.device))
    return ContextState.stack(rows)


CUDA_GRAPHS = os.environ.get("PICASO_CUDA_GRAPHS", "1") != "0"


class _GraphStep:
    """`model._step_` for b rows captured as one CUDA graph on static ids and state buffers."""

    def __init__(self, model, st: ContextState):
        self.ids = torch.zeros(st.batch_size, dtype=torch.long, device=model.device)
        self.bufs = list(layer_major(st))  # static: `load` copies each call's state into them
        scratch = [t.clone() for t in self.bufs]  # the warm-up steps update their state in place
        self.graph, self.logits = capture(model.device, model._step_, self.ids, *self.bufs,
                                          warmup_args=(self.ids, *scratch))

    def load(self, st: ContextState) -> "_GraphStep":
        for buf, t in zip(self.bufs, (st.ssm, st.conv, st.log_decay)):
            buf.copy_(t)
        return self

    def __call__(self, ids: Tensor) -> Tensor:
        self.ids.copy_(ids)
        self.graph.replay()
        return self.logits  # overwritten by the next replay: read before stepping again


def _stepper(model, st: ContextState) -> Callable[[Tensor], Tensor]:
    """ids [b] -> logits [b, V]: a step on buffers holding `st`, replayed as a CUDA graph on a GPU."""
    if model.layout.has_attention:  # its attention layers' keys and values grow by one position per token
        bufs, cache = layer_major(st), KVCache(st)
        return lambda ids: model._step_(ids, *bufs, cache)
    if CUDA_GRAPHS and model.device.type == "cuda":
        w = model.embedding.weight
        cache = model.__dict__.setdefault("_decode_graphs", {})
        # moved or cast weights, or the kernels switched: a new capture
        key = (st.batch_size, st.ssm.dtype, w.data_ptr(), w.dtype, kernels.setting())
        if key not in cache:
            cache[key] = _GraphStep(model, st)
        return cache[key].load(st)
    bufs = layer_major(st)  # the decode buffers, allocated once
    return lambda ids: model._step_(ids, *bufs)


def _pick(logits: Tensor, temperature: float, top_k: int | None, gens: list[torch.Generator]) -> Tensor:
    """Next token per row from logits [b, V]: argmax at temperature 0, else a draw per row."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, -1)
    return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(gens)])


def _check_budget(prompt: Tensor, max_new_tokens, temperature: float, top_k: int | None) -> None:
    if prompt.numel() == 0:
        raise ValueError("generate needs a prompt of at least one token")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, got {max_new_tokens!r}")
    if temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError("temperature must be >= 0 and top_k >= 1")


def _prefill(model, prompt: Tensor, st: ContextState) -> tuple[Tensor, Tensor, ContextState]:
    """The one batched forward of the prompt from every row's state: the hidden states [b, t, D],
    the next-token logits [b, lm_head's width] and the states after the prompt."""
    hidden, after = model.hidden_states(prompt[None].expand(st.batch_size, -1), st)
    return hidden, upcast(model.lm_head(hidden[:, -1]))[0], after


def _decode(model, st: ContextState, logits: Tensor, max_new_tokens: int, temperature: float,
            top_k: int | None, seed: int | None, stop_at_eos: bool) -> list[list[int]]:
    """The decode loop from the states after the prompt and their next-token logits."""
    b, V = st.batch_size, model.config.vocab_size
    logits = logits[:, :V]
    step = _stepper(model, st)
    del st
    gens = []
    if temperature > 0:  # greedy draws nothing; a seed drawn here must not reseed torch's global RNG
        base = seed if seed is not None else secrets.randbits(63)
        gens = [torch.Generator(device=model.device).manual_seed(base) for _ in range(b)]
    eos = getattr(model.tokenizer, "eos_id", None) if stop_at_eos else None
    max_new_tokens = int(max_new_tokens)
    out = torch.empty(b, max_new_tokens, dtype=torch.long, device=model.device)
    length = torch.full((b,), max_new_tokens, dtype=torch.long, device=model.device)
    done = torch.zeros(b, dtype=torch.bool, device=model.device)
    for t in range(max_new_tokens):
        nxt = _pick(logits, temperature, top_k, gens)
        out[:, t] = nxt
        if eos is not None:
            hit = (nxt == eos) & ~done
            length.masked_fill_(hit, t)
            done |= hit
            if bool(done.all()):
                break
        if t + 1 < max_new_tokens:
            logits = step(nxt)[:, :V]
    out, length = out.cpu(), length.tolist()
    return [out[i, :length[i]].tolist() for i in range(b)]


@torch.no_grad()
def generate_batch(model, prompt_ids, states: Sequence[ContextState | None] | ContextState,
                   max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
                   seed: int | None = None, stop_at_eos: bool = True) -> list[list[int]]:
    """Continue `prompt_ids` after each of `states` (single states, None for the empty state, or one
    batched ContextState): one batched prefill, then batched recurrent steps.

    temperature 0 is greedy (token-identical to `model.generate` on each state alone); > 0 samples,
    each row from a generator seeded with `seed` (None: one fresh random seed for all rows).
    Returns one list of new token ids per state, EOS excluded (see the module docstring)."""
    prompt = model._as_ids(prompt_ids)
    _check_budget(prompt, max_new_tokens, temperature, top_k)
    st = _stacked_states(model, states)
    if max_new_tokens == 0:
        model._check_ids(prompt[None])  # bad ids fail the same with or without a budget
        return [[] for _ in range(st.batch_size)]
    hidden, logits, st = _prefill(model, prompt, st)
    del hidden  # the prefill's activations are the peak; free them before decoding
    return _decode(model, st, logits, max_new_tokens, temperature, top_k, seed, stop_at_eos)


@torch.no_grad()
def score_and_generate(model, prompt_ids, continuation_ids, states: Sequence[ContextState | None] | ContextState,
                       max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
                       seed: int | None = None, stop_at_eos: bool = True,
                       timings: dict | None = None) -> tuple[list[float], list[list[int]]]:
    """`model.continuation_losses(prompt, continuation, states)` and `generate_batch(prompt, states,
    ...)` with the prompt read once: both start by reading the prompt from every state, so the
    prefill's states and last logits serve the generation, and the scoring forward reads only the
    continuation from the states after the prompt (the state-passing invariant: reading a ⧺ b
    equals reading b from the state after a). Compose & compare's click does this for 7 states.

    Returns (the mean NLL per continuation token of each state, the generated ids of each state);
    the losses equal `continuation_losses`' up to float rounding, the generations are identical.
    `timings`, if given, gets "score_s": the seconds until the losses were known (the same reading
    of prompt and continuation that scoring alone does) and "generate_s": the rest."""
    prompt, cont = model._as_ids(prompt_ids), model._as_ids(continuation_ids)
    _check_budget(prompt, max_new_tokens, temperature, top_k)
    if cont.numel() == 0:
        raise ValueError("query and continuation must each have at least one token")
    st = _stacked_states(model, states)
    b = st.batch_size
    t0 = time.perf_counter()
    hidden, logits, st = _prefill(model, prompt, st)
    del hidden
    c_hidden, _ = model.hidden_states(cont[None].expand(b, -1), st)
    # position i predicts continuation token i: the prompt's last logits, then the continuation's own
    pred = torch.cat([logits[:, None], upcast(model.lm_head(c_hidden[:, :-1]))[0]], 1)
    del c_hidden
    target = cont.to(model.device)[None].expand(b, -1)
    losses = token_nll(pred, target).mean(-1).tolist()
    t1 = time.perf_counter()
    gens = _decode(model, st, logits, max_new_tokens, temperature, top_k, seed, stop_at_eos) if max_new_tokens \
        else [[] for _ in range(b)]
    if timings is not None:
        timings.update(score_s=t1 - t0, generate_s=time.perf_counter() - t1)
    return losses, gens

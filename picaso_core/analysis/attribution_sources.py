"""Attribution to sources (contexts, sentences, words) for any span of the answer.

The same leave-one-out, leave-one-in and ablation surrogate as picaso_core.analysis.attribution,
over a keep-mask of sources instead of contexts (ContextCite, Cohen-Wang et al. 2024). The state of
one ablation (a row of the mask) is built in two steps:
    1. each context with at least one kept source becomes a state, `way`:
       states    the kept sources' stored states composed (sources.compose_kept: CASO in document
                 order); no forward pass over any context token
       reencode  the kept text of that context re-encoded (the exact reference, ContextCite's way)
       A context whose sources are all dropped is dropped.
    2. the contexts' states are composed with `method` (soup, caso, picaso_s, picaso_r), as at
       context grain. concat and picconcat_r re-read the kept text of every context whatever the
       way: they are re-encoding by definition (concat of the kept text = ContextCite's ablation).
At context grain each context is one source, and both ways give the stored states: the numbers
are those of attribution.py.

A span of the answer: the answer's characters [start, end) select the answer tokens that overlap
them; every score is then the mean loss change over those tokens only (ContextCite attributes any
selected span of the response the same way).

Glossary: N sources, T_a answer tokens, m ablations; masks [m, N] 0/1; losses [m, T_a] nats.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from picaso_core.analysis.attribution import (LOO_METHODS, STATE_METHODS, LeaveOneOut, SurrogateResult,
                                              ablation_surrogate, token_nll)
from picaso_core.analysis.sources import WAYS, WITHIN, Source, SourceError, compose_kept, kept_ids, sources_of
from picaso_core.compose import compose, mean_of_rotations
from picaso_core.engine.state import ContextState


class SpanError(ValueError):
    """A span that selects no answer token: its message names the fix."""


def token_offsets(tokenizer, answer_ids: Sequence[int]) -> list[int]:
    """Character offset of each answer token in decode(answer_ids), plus the end: [T_a + 1]."""
    return [len(tokenizer.decode(list(answer_ids[:i]))) for i in range(len(answer_ids) + 1)]


def span_tokens(tokenizer, answer_ids: Sequence[int], start=None, end=None) -> tuple[int, int]:
    """Answer tokens [t0, t1) overlapping the characters [start, end) of the decoded answer.

    None for both: the whole answer. Raises SpanError for an empty span, one that is reversed, or
    one outside the answer's characters."""
    offsets = token_offsets(tokenizer, answer_ids)
    n_chars, n_tok = offsets[-1], len(answer_ids)
    if start is None and end is None:
        return 0, n_tok
    start = 0 if start is None else int(start)
    end = n_chars if end is None else int(end)
    if not 0 <= start < end <= n_chars:
        if start == end:
            raise SpanError(f"the span [{start}, {end}) is empty: select at least one character of the answer")
        raise SpanError(f"the span [{start}, {end}) is outside the answer's {n_chars} characters: "
                        f"give 0 <= span_start < span_end <= {n_chars}")
    t0 = max(i for i in range(n_tok) if offsets[i] <= start)
    t1 = min(i for i in range(1, n_tok + 1) if offsets[i] >= end)
    return t0, max(t1, t0 + 1)


# --------------------------------------------------------------------------------------------
# The states of ablations, and their per-token answer losses
# --------------------------------------------------------------------------------------------
def ablated_states(model, sources: Sequence[Source], states: Sequence[ContextState], masks, method: str = "picaso_r",
                   way: str = "states", within: str = "caso") -> list[ContextState]:
    """One state per mask row (see the module docstring): masks [m, N] -> m single states."""
    check(sources, states, method, way, within)
    masks = np.asarray(masks, dtype=bool)
    n_ctx = max(s.context for s in sources) + 1
    per = sources_of(sources, n_ctx)
    rows = [[tuple(i for i in per[j] if row[i]) for j in range(n_ctx)] for row in masks]
    out: list[ContextState | None] = [None] * len(rows)
    if method not in STATE_METHODS:  # concat / picconcat_r: the kept text, re-read
        seqs: list[list[int]] = []
        owner: list[int] = []
        for r, kept in enumerate(rows):
            parts = [kept_ids(sources, k) for k in kept if k]
            if not parts:
                out[r] = model.empty_state()
                continue
            rots = [parts] if method == "concat" else [parts[j:] + parts[:j] for j in range(len(parts))]
            for rot in rots:
                seqs.append([t for p in rot for t in p])
                owner.append(r)
        encoded = model.encode_contexts(seqs, batch_size=32) if seqs else []
        for r in dict.fromkeys(owner):
            mine = [e for o, e in zip(owner, encoded) if o == r]
            if len(mine) == 1:
                out[r] = mine[0]
            else:  # as compose_tokens("picconcat_r"): the mean of the rotations' states
                out[r] = mean_of_rotations(mine, config=model)
        return out
    ctx: dict[tuple[int, ...], ContextState] = {}
    need = list(dict.fromkeys(k for kept in rows for k in kept if k))
    if way == "reencode":
        ctx.update(zip(need, model.encode_contexts([kept_ids(sources, k) for k in need], batch_size=32)))
    else:
        ctx.update((k, compose_kept([states[i] for i in k], within, config=model)) for k in need)
    for r, kept in enumerate(rows):
        parts = [ctx[k] for k in kept if k]
        out[r] = (model.empty_state() if not parts else parts[0] if len(parts) == 1
                  else compose(method, parts, config=model))
    return out


def ablation_losses(model, query_ids, answer_ids, sources: Sequence[Source], states: Sequence[ContextState], masks,
                    method: str = "picaso_r", way: str = "states", within: str = "caso",
                    batch_size: int = 32) -> np.ndarray:
    """Per-token answer NLL [m, T_a] from the state of each ablation (mask row), scored in batched
    forwards of `batch_size` rows; the states are built `batch_size` rows at a time too."""
    if len(query_ids) == 0 or len(answer_ids) == 0:
        raise ValueError("the query and the answer each need at least one token")
    masks = np.asarray(masks, dtype=bool)
    if masks.ndim != 2 or masks.shape[1] != len(sources):
        raise ValueError(f"masks must be [m, {len(sources)}] (one 0/1 column per source), got {list(masks.shape)}")
    out = []
    with torch.no_grad():
        for r0 in range(0, len(masks), batch_size):
            st = ablated_states(model, sources, states, masks[r0:r0 + batch_size], method, way, within)
            batch = ContextState.stack([s.to(model.device) for s in st])
            out.append(token_nll(model, query_ids, answer_ids, batch).cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, len(answer_ids)))


def loo_masks(n: int) -> np.ndarray:
    """[n + 1, n]: all kept, then each source left out in turn."""
    m = np.ones((n + 1, n), dtype=bool)
    m[1:] &= ~np.eye(n, dtype=bool)
    return m


@dataclass
class SourceScores:
    """Every method's scores over N sources for one answer span (nats per span token; higher =
    the source matters more), with what made them."""

    method_scores: dict[str, list[float]]
    token_deltas: dict[str, np.ndarray]  # LOO methods: [N, T_a] loss rise per answer token
    full_loss: dict[str, float]  # LOO methods: loss of the span with every source kept
    empty_loss: float  # loss of the span from the empty state
    seconds: dict[str, float]
    ablations: dict[str, int]  # states built and scored per method
    surrogate: SurrogateResult | None = None
    span_tokens: tuple[int, int] = (0, 0)


def score_sources(model, query_ids, answer_ids, sources: Sequence[Source], states: Sequence[ContextState],
                  methods: Sequence[str], way: str = "states", within: str = "caso", span: tuple[int, int] | None = None,
                  surrogate_method: str = "picaso_r", n_ablations: int = 64, seed: int = 0,
                  progress=None) -> SourceScores:
    """LOI ("loi"), LOO per method (LOO_METHODS) and the surrogate ("surrogate") over the sources.

    span: answer tokens [t0, t1) (span_tokens); None: the whole answer. Every method's score is
    the mean over the span's tokens: a span attribution is the full answer's per-token losses
    restricted to the span. LOI = L(empty) - L(source alone), so that higher = more important."""
    n = len(sources)
    t0, t1 = span if span is not None else (0, len(answer_ids))
    cut = slice(t0, t1)
    empty = float(token_nll(model, query_ids, answer_ids, model.empty_state())[0, cut].mean())
    scores, deltas, full, seconds, counts = {}, {}, {}, {}, {}
    sur = None
    for j, m in enumerate(methods):
        if progress is not None:
            progress(j, len(methods), m)
        t = time.perf_counter()
        if m == "loi":
            # each source alone: its own state (an identity mask row holds one source)
            nll = ablation_losses(model, query_ids, answer_ids, sources, states, np.eye(n, dtype=bool), "soup", way,
                                  within)
            scores[m] = (empty - nll[:, cut].mean(1)).tolist()
            counts[m] = n
        elif m == "surrogate":
            def score(masks):
                return ablation_losses(model, query_ids, answer_ids, sources, states, masks, surrogate_method, way,
                                       within)[:, cut].mean(1)
            sur = ablation_surrogate(score, n, n_ablations, seed=seed)
            scores[m] = sur.scores
            counts[m] = len(sur.masks) + len(sur.heldout_masks)
        elif m in LOO_METHODS:
            nll = ablation_losses(model, query_ids, answer_ids, sources, states, loo_masks(n), m, way, within)
            loo = LeaveOneOut(m, nll[0, cut], nll[1:, cut], 0.0)
            scores[m], full[m] = loo.scores, loo.full_loss
            deltas[m] = nll[1:] - nll[0][None]
            counts[m] = n + 1
        else:
            raise ValueError(f"unknown attribution method {m!r}; valid: loi, surrogate, {', '.join(LOO_METHODS)}")
        seconds[m] = time.perf_counter() - t
    return SourceScores(scores, deltas, full, empty, seconds, counts, sur, (t0, t1))


def topk_drop(model, query_ids, answer_ids, sources, states, scores: Sequence[float], ks=(1, 3),
              method: str = "picaso_r", way: str = "states", within: str = "caso",
              span: tuple[int, int] | None = None) -> dict[int, float]:
    """ContextCite's top-k drop: L(the k highest-scored sources removed) - L(all kept), per k
    (nats per span token; larger = the scores found what the answer rests on)."""
    n = len(sources)
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    masks = np.ones((1 + len(ks), n), dtype=bool)
    for r, k in enumerate(ks, 1):
        masks[r, order[:k]] = False
    t0, t1 = span if span is not None else (0, len(answer_ids))
    nll = ablation_losses(model, query_ids, answer_ids, sources, states, masks, method, way, within)[:, t0:t1].mean(1)
    return {k: float(nll[r] - nll[0]) for r, k in enumerate(ks, 1)}


def check(sources, states, method: str, way: str, within: str) -> None:
    if method not in LOO_METHODS:
        raise ValueError(f"unknown attribution method {method!r}; valid: {', '.join(LOO_METHODS)}")
    if way not in WAYS:
        raise SourceError(f"unknown way {way!r}: use one of {', '.join(WAYS)}")
    if within not in WITHIN:
        raise SourceError(f"unknown within-context composition {within!r}: use one of {', '.join(WITHIN)}")
    if not sources:
        raise ValueError("no sources to attribute: give at least one context")
    if len(states) != len(sources):
        raise ValueError(f"{len(states)} states for {len(sources)} sources: one state per source")

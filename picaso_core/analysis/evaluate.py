"""Per-method losses and timings of context composition (paper sec. 6.2-6.3, fig. 3, table 1).

    none         no context: the model reads the query from the empty state (the paper's baseline)
    concat       the contexts' tokens processed after the first context's stored state (sec. 6.2)
    soup, caso, picaso_s, picaso_r   compositions of the stored states, no forward pass (sec. 3.3)
    picconcat_r  the mean state of the n cyclic concatenations, one batched forward (sec. 3.3)

Contexts are given in presentation order, most relevant LAST (Retriever.retrieve(best_last=True)).
A method's cost is split as the paper's fig. 3 does: `compose_s`, the time to build the state the
query starts from (state methods: composing precomputed context states; concat / picconcat_r:
their forward passes), and `process_s`, the time to score query + continuation from that state.
Encoding the contexts into states is the database build (sec. 3.2), charged to no method.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from picaso_core.compose.build import build_state
from picaso_core.compose.registry import label, methods_for, names

if TYPE_CHECKING:
    from picaso_core.engine.state import ContextState

# the registry's rows of a model (compose/registry.py): none, concat, soup, caso, picaso_s, picaso_r, picconcat_r
METHODS = names(methods_for())
METHOD_NAMES = {m: label(m, "short") for m in METHODS}  # the tables' labels ("None" for the baseline)
STATE_METHODS = names(methods_for(), kind="state")
NEEDS_STATES = tuple(m.name for m in methods_for() if "states" in m.needs)  # concat too: it starts from the first stored state

Progress = Callable[[int, int], None]


@dataclass
class MethodResult:
    method: str  # a key of METHOD_NAMES
    loss: float  # mean NLL per continuation token (nats)
    ppl: float  # exp(loss)
    compose_s: float | None  # seconds to build the state the query starts from (None: prebuilt)
    process_s: float  # seconds to score query + continuation from that state
    generation: list[int] | None = None  # sampled continuation ids (generate_tokens > 0)
    note: str = ""  # how the figures were obtained, for the UI

    @property
    def name(self) -> str:
        return METHOD_NAMES[self.method]


def _check_methods(methods: Sequence[str]) -> tuple[str, ...]:
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ValueError(f"unknown methods {bad or '(none given)'}; valid: {', '.join(METHODS)}")
    return tuple(methods)


def run_methods(model, query_ids, continuation_ids, context_ids, context_states=None, methods=METHODS,
                generate_tokens: int = 0, seed: int = 0, temperature: float = 0.0,
                prebuilt: dict[str, ContextState] | None = None) -> list[MethodResult]:
    """Score `continuation_ids` after `query_ids` from the state each method builds.

    Args:
        model: an SSMLanguageModel.
        query_ids, continuation_ids: token ids (lists of ints), each at least one token.
        context_ids: n token-id lists, most relevant last; [] runs every method from the empty state.
        context_states: the n contexts' stored states (a StateStore's `get_many`); None: encoded
            here once with `model.encode_contexts` (the database build, charged to no method and
            reported in each result's `note`).
        methods: a subset of METHODS, in the order of the results.
        generate_tokens: > 0 also generates up to that many tokens after the query from each state
            (all methods in one `decode.score_and_generate`: the query's batched prefill serves the
            scoring and the generation, then batched steps; EOS ends a row and is not returned),
            with the same `seed` for every method; `temperature` 0 (the default) is greedy, so
            methods differ only by their states.
        prebuilt: method -> its state, already built elsewhere (the experiments' shared prefixes,
            `compose.nested_token_states`); those methods get compose_s None (not timed here).
    Returns:
        one MethodResult per method. Each state is built and timed on its own (`compose_s`); the
        states are then scored together in one batched call, 1.2-2.4x faster on CPU than one
        call per state (bench/compose_speed.py: mamba2-130m shape, 7 states, 64 tokens). Every
        method's scoring is the same forward over the same tokens, so `process_s` is that call's
        time (the scoring part of it when generating too) divided by the number of methods, and
        the note says so.
    """
    methods = _check_methods(methods)
    context_ids = [list(map(int, c)) for c in context_ids]
    built_here = ""
    if context_states is None and context_ids and any(m in NEEDS_STATES for m in methods):
        t0 = time.perf_counter()
        context_states = model.encode_contexts(context_ids)
        built_here = f"context states encoded here in {time.perf_counter() - t0:.3f} s (database build, not charged)"
    if context_states is not None and len(context_states) != len(context_ids):
        raise ValueError(f"{len(context_states)} context states for {len(context_ids)} contexts")

    states, compose_s = [], []
    for method in methods:
        if prebuilt and method in prebuilt and context_ids:
            states.append(prebuilt[method])
            compose_s.append(None)
            continue
        t0 = time.perf_counter()
        states.append(build_state(model, method, context_ids, context_states))
        compose_s.append(time.perf_counter() - t0 if method != "none" else 0.0)
    if generate_tokens > 0:
        # every method scored and generated in one batch: the query is read once from each state
        # (its states and last logits serve both), then the continuation, then batched recurrent
        # steps (decode.score_and_generate)
        from picaso_core.engine.decode import score_and_generate  # torch on first use, as in build_state

        timings: dict = {}
        losses, gens = score_and_generate(model, query_ids, continuation_ids, states, generate_tokens,
                                          temperature=temperature, seed=seed, timings=timings)
        process_s = timings["score_s"] / len(methods)
    else:
        t0 = time.perf_counter()
        losses = model.continuation_losses(query_ids, continuation_ids, states)
        process_s = (time.perf_counter() - t0) / len(methods)
        gens = [None] * len(methods)
    results = []
    for method, loss, c_s, gen in zip(methods, losses, compose_s, gens):
        notes = [f"scored with the other {len(methods) - 1} methods in one batched call; process_s = its time "
                 f"/ {len(methods)}"] if len(methods) > 1 else []
        if method in NEEDS_STATES and built_here:
            notes.append(built_here)
        if method == "concat" and context_ids:
            notes.append("started from the first context's stored state (sec. 6.2)")
        if c_s is None:
            notes.append("state built with shared prefixes (not timed)")
        if not context_ids and method != "none":
            notes.append("no contexts: the empty state")
        results.append(MethodResult(method, loss, math.exp(loss), c_s, process_s, gen, "; ".join(notes)))
    return results


# --------------------------------------------------------------------------------------------
# Many samples
# --------------------------------------------------------------------------------------------
@dataclass
class EvalSummary:
    """Per-method results over many samples at one k (the number of contexts used)."""

    methods: tuple[str, ...]
    k: int | None  # None: every context of each sample
    losses: dict[str, list[float]]  # per sample, in sample order
    compose_s: dict[str, float]  # mean over samples
    process_s: dict[str, float]
    database_s: float  # seconds encoding the distinct contexts so far (once for all methods and k)
    n_samples: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_samples = len(next(iter(self.losses.values()), []))

    @property
    def mean_loss(self) -> dict[str, float]:
        return {m: sum(v) / len(v) if v else math.nan for m, v in self.losses.items()}

    @property
    def gain_vs_none(self) -> dict[str, float]:
        """Loss reduction over the no-context baseline, in nats (positive = better)."""
        ml = self.mean_loss
        return {m: ml["none"] - ml[m] for m in self.methods} if "none" in ml else {}

    @property
    def concat_gain_recovered(self) -> dict[str, float]:
        """(none - m) / (none - concat): the fraction of Concat's gain each method recovers."""
        ml = self.mean_loss
        if "none" not in ml or "concat" not in ml:
            return {}
        ref = ml["none"] - ml["concat"]
        return {m: (ml["none"] - ml[m]) / ref if ref else math.nan for m in self.methods}

    def table(self) -> str:
        """A markdown table, one row per method."""
        gain, rec, ml = self.gain_vs_none, self.concat_gain_recovered, self.mean_loss
        rows = ["| method | loss | ppl | gain vs none | of Concat's gain | compose ms | process ms |",
                "|---|---|---|---|---|---|---|"]
        for m in self.methods:
            g = f"{gain[m]:+.3f}" if m in gain else "-"
            r = f"{100 * rec[m]:.0f}%" if m in rec and math.isfinite(rec[m]) else "-"
            rows.append(f"| {METHOD_NAMES[m]} | {ml[m]:.3f} | {math.exp(ml[m]):.2f} | {g} | {r} | "
                        f"{1e3 * self.compose_s[m]:.1f} | {1e3 * self.process_s[m]:.1f} |")
        return "\n".join(rows)


def _ids(model, x, suffix: str = "") -> list[int]:
    """Text -> ids with the model's tokenizer; ids pass through (the tokenizer-free path)."""
    if isinstance(x, str):
        if getattr(model, "tokenizer", None) is None:
            raise ValueError("samples hold text but the model has no tokenizer: load it with load_model, "
                             "or give token ids")
        return model.tokenizer.encode(x + suffix)
    return [int(t) for t in x]


class _ContextCache:
    """Token ids and states of contexts by id, encoded in one batched call per new set."""

    def __init__(self, model, suffix: str):
        self.model, self.suffix = model, suffix
        self.ids: dict[str, list[int]] = {}
        self.states: dict[str, ContextState] = {}
        self.seconds = 0.0

    def add(self, contexts: Sequence[tuple[str, object]]) -> None:
        new = {cid: _ids(self.model, c, self.suffix) for cid, c in contexts if cid not in self.ids}
        if not new:
            return
        t0 = time.perf_counter()
        states = self.model.encode_contexts(list(new.values()))
        self.seconds += time.perf_counter() - t0
        self.ids.update(new)
        self.states.update(zip(new, states))


def _used(sample, k: int | None) -> list:
    """The contexts of `sample` used at k: the LAST k, most relevant last."""
    ctx = list(sample.contexts)
    if k is None:
        return ctx
    if k < 0:
        raise ValueError(f"k must be >= 0 (or None for all contexts), got {k}")
    return ctx[max(0, len(ctx) - k):] if k > 0 else []


def _evaluate(model, samples, k, methods, progress, cache: _ContextCache) -> EvalSummary:
    methods = _check_methods(methods)
    losses = {m: [] for m in methods}
    comp = {m: 0.0 for m in methods}
    proc = {m: 0.0 for m in methods}
    cache.add([c for s in samples for c in _used(s, k)])
    for i, s in enumerate(samples):
        used = [cid for cid, _ in _used(s, k)]
        res = run_methods(model, _ids(model, s.query), _ids(model, s.continuation),
                          [cache.ids[c] for c in used], [cache.states[c] for c in used], methods)
        for r in res:
            losses[r.method].append(r.loss)
            comp[r.method] += r.compose_s
            proc[r.method] += r.process_s
        if progress is not None:
            progress(i + 1, len(samples))
    n = max(1, len(samples))
    return EvalSummary(methods, k, losses, {m: v / n for m, v in comp.items()},
                       {m: v / n for m, v in proc.items()}, cache.seconds)


def evaluate_samples(model, samples, k: int | None = None, methods=METHODS, progress: Progress | None = None,
                     context_suffix: str = "") -> EvalSummary:
    """Run every method on every sample and summarise (mean loss, gain vs none, share of
    Concat's gain).

    Args:
        samples: objects with `query`, `continuation` (text, or token ids) and `contexts`, a list of
            (id, text or token ids) in presentation order, most relevant last (RetrievalSample).
        k: use each sample's last k contexts (None: all; 0: none, every method = the baseline).
        context_suffix: appended to each context text before tokenising: the separator the
            model expects between contexts (a StateStore's `suffix`), so states and Concat agree.
        progress: progress(i, n) after each sample.
    Distinct context ids are encoded once (the database build, `database_s`).
    """
    return _evaluate(model, list(samples), k, methods, progress, _ContextCache(model, context_suffix))


def k_sweep(model, samples, ks: Sequence[int], methods=METHODS, progress: Progress | None = None,
            context_suffix: str = "") -> list[EvalSummary]:
    """`evaluate_samples` at each k in `ks` (paper fig. 3: loss vs number of contexts); contexts
    are encoded once for all k. progress(i, n) counts samples over all k."""
    samples, cache = list(samples), _ContextCache(model, context_suffix)
    out = []
    for j, k in enumerate(ks):
        step = None if progress is None else (lambda i, n, j=j: progress(j * n + i, len(ks) * n))
        out.append(_evaluate(model, samples, k, methods, step, cache))
    return out

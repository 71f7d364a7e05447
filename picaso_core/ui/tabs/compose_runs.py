"""The Compose tab's runs and their caches: what a click computes, kept so a repeat costs nothing.

    CACHE        composed states under a byte budget (--compose-cache-mb), keyed as each method's
                 invariance allows (analysis/compose_cache.py)
    RESULTS      scored runs: a repeated click, the example every visitor opens on
    RETRIEVALS   retrieval hits per (retriever, query, k, exclusions, order)
    FIGURES      a run's figure by the figures' numbers

`run_methods_cached` is `analysis.evaluate.run_methods` through these caches. `cache_stats` is the
app's /cache_stats endpoint. The budget is set once at start (`set_budget`, app.py's
--compose-cache-mb); serving (picaso_core.ui.server) knows nothing of these caches.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from picaso_core.light import memory
from picaso_core.analysis.compose_cache import DEFAULT_BUDGET, ComposeCache, ResultCache, cached_states
from picaso_core.analysis.evaluate import run_methods
from picaso_core.compose.build import build_state
from picaso_core.compose.registry import ABLATION  # a hybrid's extra row: PICASO-R, attention keys and values dropped
from picaso_core.ui.server.serving import check_cache_mb, rotation_threads

CACHE = ComposeCache(int(float(os.environ.get("PICASO_COMPOSE_CACHE_MB", DEFAULT_BUDGET / 2**20)) * 2**20))
RESULTS = ResultCache(64)  # scored runs: a repeated click, the example every visitor opens on
FROM_RESULTS = "results from cache"


def set_budget(cache_mb: float) -> None:
    """The composed-state cache's byte budget, in MiB (0: keep nothing)."""
    check_cache_mb(cache_mb)
    CACHE.budget = int(cache_mb * 2**20)


def cache_stats() -> dict:
    """The composed-state cache's counters: hits, misses, hit_rate, bytes, entries, evictions and
    miss reasons, per method and in total; the byte budget; the scored-run cache's; and "memory":
    what each of the app's caches holds now, with its bound (picaso_core/light/memory.py)."""
    return {**CACHE.stats(), "results": RESULTS.stats(), "memory": memory.report()}


ABLATION_NOTE = "SSM part composed by PICASO-R; the attention layers' keys and values dropped"
RETRIEVALS = ResultCache(256)  # (retriever, query, k, exclusions, order) -> hits: a query embedding each
FIGURES = ResultCache(64)  # a run's figure by its figures (the plot of a repeated click)


memory.register("compose: composed states", lambda: CACHE, "--compose-cache-mb (default 256 MiB)")
memory.register("compose: scored runs", lambda: RESULTS, "64 runs")
memory.register("compose: retrievals", lambda: RETRIEVALS, "256 retrievals")
memory.register("compose: figures", lambda: FIGURES, "64 figures")


def memo(cache: ResultCache, key, make):
    """cache's value for key, made (and kept) by make() on a miss."""
    out = cache.get(key)
    if out is None:
        out = make()
        cache.put(key, out)
    return out


def retrieve(retriever, query: str, k: int, exclude=(), best_last: bool = True) -> list:
    """retriever.retrieve, remembered: a repeated click does not embed its query again."""
    return memo(RETRIEVALS, (id(retriever), query, k, tuple(exclude), best_last),
                lambda: retriever.retrieve(query, k, exclude=exclude, best_last=best_last))


def dropped_attention(model, query_ids, continuation_ids, context_ids, states, max_new_tokens: int):
    """The ablation row of a hybrid (method ABLATION): PICASO-R's SSM part with the attention layers'
    keys and values dropped (build_state(..., ABLATION, ...)), scored and generated from as the others."""
    t0 = time.perf_counter()
    state = build_state(model, ABLATION, context_ids, states)
    compose_s = time.perf_counter() - t0
    (r,) = run_methods(model, query_ids, continuation_ids, context_ids, context_states=states, methods=("picaso_r",),
                       generate_tokens=max_new_tokens, seed=0, prebuilt={"picaso_r": state})
    return replace(r, method=ABLATION, compose_s=compose_s, note=ABLATION_NOTE)


def store_fingerprint(res) -> str:
    """What the stored states depend on besides the model: which store, and the text appended to
    each context before encoding."""
    return f"{res.store.url}|{res.store.suffix!r}"


def run_methods_cached(res, query_ids: list[int], continuation_ids: list[int], ids: list[str], methods,
                       max_new_tokens: int, progress=lambda *a, **kw: None) -> list:
    """`run_methods` for contexts `ids` of `res`, through the caches: a run scored before (same
    model, store, tokens, contexts in order, tokens to generate) comes back as it was; otherwise
    each method's state comes from CACHE where its key allows. Each result's `note` says which:
    "state from cache", "composed (<why it missed>)" or FROM_RESULTS. Compose times are the
    methods' own (measured when the state was composed), so the table compares the methods
    whether or not this click recomposed them. ABLATION among `methods` (a hybrid) adds its row
    last (`dropped_attention`, composed each time: it is not in CACHE)."""
    fps = dict(model_fp=res.model.fingerprint(), store_fp=store_fingerprint(res))
    key = (fps["model_fp"], fps["store_fp"], tuple(query_ids), tuple(continuation_ids), tuple(ids),
           tuple(methods), int(max_new_tokens))
    hit = RESULTS.get(key)
    if hit is not None:
        return [replace(r, note=FROM_RESULTS) for r in hit]
    ablation = ABLATION in methods
    methods = tuple(m for m in methods if m != ABLATION)
    new = sum(cid not in res.store for cid in ids)
    progress(0.15, desc=f"encoding {new} new contexts into the store" if new else f"loading {len(ids)} stored states")
    states = res.states(ids)
    context_ids = [res.token_ids(cid) for cid in ids]
    progress(0.3, desc=f"composing with {len(methods)} methods, generating {max_new_tokens} tokens each")
    built, looked = cached_states(CACHE, res.model, methods, ids, context_ids, states, **fps,
                                  threads=rotation_threads(device=res.model.device.type))
    results = run_methods(res.model, query_ids, continuation_ids, context_ids, context_states=states,
                          methods=methods, generate_tokens=max_new_tokens, seed=0, prebuilt=built)
    results = [replace(r, compose_s=looked[r.method].compose_s, note=looked[r.method].label)
               if r.method in looked else r for r in results]
    if ablation:
        results.append(dropped_attention(res.model, query_ids, continuation_ids, context_ids, states, max_new_tokens))
    RESULTS.put(key, results)
    return results

"""The paper's experiments over a corpus, in one command (PICASO sec. 6.1-6.3, figs. 3, 5-9, table 1).

    python -m picaso_core.experiments --model demo --corpus demo --samples 200 --ks 0-10 --out runs/demo

Protocol (sec. 6.1). For each query the contexts are the top-k chunks of a retriever, presented most
relevant LAST (Concat's best-case order, sec. 6.2):
    retrieval samples (WikiText, the demo's retrieval set): top-k of the whole chunk database, the
        sample's own chunks (`exclude_ids`: its two halves) never returned;
    QA samples (MS MARCO, the demo's QA set): the sample's own passages, ranked by the retriever.
Every method of picaso_core.evaluate runs on every (sample, k); k = 0 is the baseline for all.

Parts of a run (each can be turned off; all write to one records.jsonl):
    main        k-sweep (`--ks`, fig. 3 left; timings: fig. 3 right, fig. 5), all-MiniLM-L6-v2
    qa          the QA set with all its passages (table 1 row 1); demo: the demo's QA samples
    long        k up to 50 without PICConcat-R (fig. 6: Concat past the training length)
    retrievers  PICASO-R and the baseline per retriever (fig. 8): MiniLM, BM25 (rank-bm25), random
                offline; all-mpnet-base-v2 and GloVe averages (sentence-transformers) when online
    timing      processing n tokens vs generating 32 tokens from the state, n up to 8k (fig. 7)
    lengths     chunk lengths in tokens and characters (fig. 9)

Records are keyed by (retriever, sample_id, k, method) and appended as each (sample, k) finishes:
an interrupted run resumes where it stopped, and a part that needs a record another part already
made (the QA pass at k = all passages, the MiniLM curve of the ablation) reuses it. Outputs in
--out: records.jsonl, summary.json, report.html (self-contained, opens offline), paper_vs_ours.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from picaso_core.compose import nested_token_states
from picaso_core.evaluate import METHOD_NAMES, METHODS, run_methods

CONTEXT_SUFFIX = "\n\n"  # the separator the demo model saw between contexts (= the app's store suffix)
GAIN_KS = tuple(range(1, 11))  # the paper averages gains over 1..10 retrieved chunks (sec. 6.3.1)
LONG_METHODS = ("none", "concat", "soup", "caso", "picaso_s", "picaso_r")  # fig. 6: no PICConcat-R (n² tokens)
ABLATION_METHODS = ("none", "picaso_r")  # fig. 8 ablates PICASO-R
RECORD_KEY = ("retriever", "sample_id", "k", "method")

# name -> (label, sentence-transformers id or None, needs the hub)
RETRIEVERS = {
    "minilm": ("all-MiniLM-L6-v2", None, False),
    "bm25": ("BM25 (rank-bm25)", None, False),
    "random": ("random", None, False),
    "mpnet": ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2", True),
    "glove": ("GloVe 6B.300d word average", "sentence-transformers/average_word_embeddings_glove.6B.300d", True),
}

# The paper's numbers (Mamba-2 2.7B, zero-shot). Gains: % lower loss than the baseline, averaged
# over k = 1..10 on WikiText (sec. 6.3.1, fig. 3); MS MARCO: table 1 row 1 (loss, all passages).
PAPER = {
    "model": "Mamba-2 2.7B (zero-shot)",
    "wikitext_gain_pct": {"soup": 8.5, "caso": 9.2, "picaso_r": 10.1, "picaso_s": 10.1, "concat": 11.1,
                          "picconcat_r": 12.0},
    "msmarco_loss": {"none": 2.42, "concat": 1.42, "soup": 2.04, "caso": 1.56, "picaso_r": 1.52, "picaso_s": 1.52},
    "concat_over_picaso_r_time": 5.4,  # fig. 3 right, on an A100
    "max_k_long": 50,  # fig. 6
    "retriever_order": ["glove", "minilm", "mpnet"],  # fig. 8: better embedder, lower PICASO-R loss
}
TOKEN_BUILT = {"concat", "picconcat_r"}  # built from tokens: shared prefixes for untimed samples
TABLE_METHODS = ("none", "soup", "caso", "picaso_r", "picaso_s", "concat", "picconcat_r")


# --------------------------------------------------------------------------------------------
# k lists
# --------------------------------------------------------------------------------------------
def parse_ks(text: str | Sequence[int]) -> list[int]:
    """'0-10' -> [0..10]; '0,2,5' -> [0, 2, 5]; '0-3,20' -> [0, 1, 2, 3, 20]; sorted, unique.
    'none' or '' -> []."""
    if not isinstance(text, str):
        ks = [int(k) for k in text]
    elif text.strip().lower() in ("", "none"):
        return []
    else:
        ks = []
        for part in text.replace(" ", "").split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not m:
                raise ValueError(f"bad k list {text!r}: use a range like 0-10, a list like 0,2,5, or both (0-3,20)")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise ValueError(f"bad k range {part!r}: the end is below the start")
            ks.extend(range(lo, hi + 1))
    if any(k < 0 for k in ks):
        raise ValueError(f"k must be >= 0, got {ks}")
    return sorted(set(ks))


# --------------------------------------------------------------------------------------------
# Retrievers: rank chunk ids for a query, most relevant first
# --------------------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class EmbeddingRanker:
    """A picaso_core.retrieval.Retriever (sentence embeddings, cosine) as a ranker."""

    def __init__(self, retriever, name: str = "minilm"):
        self.retriever, self.name = retriever, name

    def top(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[str]:
        return [cid for cid, _ in self.retriever.retrieve(query, k, exclude=exclude)]

    def among(self, query: str, ids: Sequence[str]) -> list[str]:
        sims = self.retriever.similarity(query, ids)
        return [ids[i] for i in sorted(range(len(ids)), key=lambda i: -sims[i])]


class BM25Ranker:
    """Okapi BM25 (rank-bm25) over lower-cased word tokens."""

    name = "bm25"

    def __init__(self, database: dict[str, str]):
        from rank_bm25 import BM25Okapi

        self.ids = list(database)
        self._row = {cid: i for i, cid in enumerate(self.ids)}
        self.bm25 = BM25Okapi([_words(database[c]) or [""] for c in self.ids])

    def top(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[str]:
        scores = self.bm25.get_scores(_words(query))
        skip = set(exclude)
        order = sorted(range(len(self.ids)), key=lambda i: -scores[i])
        return [self.ids[i] for i in order if self.ids[i] not in skip][:k]

    def among(self, query: str, ids: Sequence[str]) -> list[str]:
        scores = self.bm25.get_scores(_words(query))
        return sorted(ids, key=lambda c: -scores[self._row[c]])


class RandomRanker:
    """A random order per query (seeded by the query text, so a rerun retrieves the same chunks)."""

    name = "random"

    def __init__(self, database: dict[str, str], seed: int = 0):
        self.ids, self.seed = list(database), seed

    def _rng(self, query: str) -> random.Random:
        return random.Random(f"{self.seed}:{query}")

    def top(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[str]:
        skip = set(exclude)
        pool = [c for c in self.ids if c not in skip]
        return self._rng(query).sample(pool, min(k, len(pool)))

    def among(self, query: str, ids: Sequence[str]) -> list[str]:
        ids = list(ids)
        self._rng(query).shuffle(ids)
        return ids


def make_ranker(name: str, database: dict[str, str], minilm=None, cache_dir: Path | None = None):
    """The ranker `name` of RETRIEVERS. `minilm`: a ready Retriever for "minilm" (else built).
    Raises RuntimeError for the hub embedders offline (the message says how to get them)."""
    from picaso_core.retrieval import Retriever, SentenceEmbedder, embeddings_path

    if name not in RETRIEVERS:
        raise ValueError(f"unknown retriever {name!r}; valid: {', '.join(RETRIEVERS)}")
    if name == "bm25":
        return BM25Ranker(database)
    if name == "random":
        return RandomRanker(database)
    if name == "minilm":
        return EmbeddingRanker(minilm or Retriever.cached(database, SentenceEmbedder()), "minilm")
    from picaso_core.tokenizer import hub_offline

    hub_id = RETRIEVERS[name][1]
    if hub_offline():
        raise RuntimeError(f"skipped {name} ({hub_id}): the hub is offline (HF_HUB_OFFLINE); "
                           "online, it downloads through sentence-transformers")
    try:
        emb = SentenceEmbedder(hub_id)
    except Exception as e:  # no network, or the download failed: the ablation goes on without it
        raise RuntimeError(f"skipped {name} ({hub_id}): could not load it ({type(e).__name__}: {e})") from e
    path = embeddings_path(cache_dir, emb.name) if cache_dir else None
    return EmbeddingRanker(Retriever.cached(database, emb, path), name)


def rank_sample(ranker, sample, k_max: int | None) -> list[str]:
    """The context ids a sample may use, most relevant FIRST, at most `k_max` (None: all).

    QA samples (MS MARCO, demo QA) rank their own passages; retrieval samples (WikiText, demo
    retrieval) rank the database without their own chunks (`exclude_ids`, sec. 6.1).
    """
    if sample.kind == "qa" and sample.contexts:
        ranked = ranker.among(sample.query, sample.context_ids)
        return ranked if k_max is None else ranked[:k_max]
    if k_max is None:
        raise ValueError(f"sample {sample.sample_id}: 'all contexts' needs a QA sample with its own passages")
    return ranker.top(sample.query, k_max, exclude=sample.exclude_ids)


def presented(ranking: Sequence[str], k: int) -> list[str]:
    """The top k of a most-relevant-first ranking, in presentation order: most relevant LAST."""
    return list(ranking[:k])[::-1]


def own_passages(retriever, query: str, ids: Sequence[str], k: int, best_last: bool = True) -> list[tuple[str, float]]:
    """The top k of a QA sample's own passages `ids` for `query` as (id, cosine), most relevant last
    when `best_last` (the app's MS MARCO path: each question retrieves from its own passages)."""
    sims = retriever.similarity(query, list(ids))
    top = sorted(zip(ids, sims), key=lambda x: -x[1])[: max(0, int(k))]
    return top[::-1] if best_last else top


# --------------------------------------------------------------------------------------------
# Records: one JSON line per (retriever, sample, k, method), appended as they finish
# --------------------------------------------------------------------------------------------
def record_key(r: dict) -> tuple:
    return tuple(r[f] for f in RECORD_KEY)


class RecordLog:
    """records.jsonl: read what a previous run wrote, append new records as they finish.

    A line torn by an interrupt (no final newline, or not JSON) is cut off on open.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: dict[tuple, dict] = {}
        if self.path.is_file():
            raw = self.path.read_bytes()
            keep = raw[: raw.rfind(b"\n") + 1]
            good = []
            for line in keep.decode().splitlines():
                try:
                    r = json.loads(line)
                    self.records[record_key(r)] = r
                    good.append(line)
                except (json.JSONDecodeError, KeyError):
                    break  # a torn line: everything after it is rewritten
            text = "".join(x + "\n" for x in good)
            if text.encode() != raw:
                self.path.write_text(text)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __contains__(self, key: tuple) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, records: Sequence[dict]) -> None:
        with open(self.path, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
            f.flush()
        for r in records:
            self.records[record_key(r)] = r


class MemoryLog(RecordLog):
    """The same interface without a file (the app's live sweep)."""

    def __init__(self):
        self.records = {}

    def append(self, records: Sequence[dict]) -> None:
        for r in records:
            self.records[record_key(r)] = r


# --------------------------------------------------------------------------------------------
# Running a sweep
# --------------------------------------------------------------------------------------------
@dataclass
class ContextSource:
    """Where states and token ids of context ids come from (a StateStore, or the app's Resources).

    states(ids) -> [ContextState]; token_ids(cid) -> [int] (text + CONTEXT_SUFFIX); prepare(ids)
    encodes what is missing, once, before a sweep (the database build, charged to no method).
    """

    states: Callable[[list[str]], list]
    token_ids: Callable[[str], list[int]]
    prepare: Callable[[list[str]], None] | None = None

    @classmethod
    def from_store(cls, store, database: dict[str, str], progress=True) -> "ContextSource":
        return cls(store.get_many, store.token_ids,
                   lambda ids: store.ensure([(c, database[c]) for c in ids], progress=progress))


def run_sweep(model, samples, ranker, source: ContextSource, ks: Sequence[int | None], log: RecordLog,
              methods: Sequence[str] = METHODS, part: str = "main",
              progress: Callable[[int, int], None] | None = None, timed: int | None = None) -> int:
    """Every method on every (sample, k) not in `log` yet; records appended per (sample, k).

    Args:
        samples: RetrievalSamples (retrieval or QA kind).
        ranker: EmbeddingRanker / BM25Ranker / RandomRanker (its `name` keys the records).
        ks: numbers of contexts; None means all of a QA sample's own passages (recorded as k = n).
        part: a tag saved with the records (which part of the run made them).
        timed: None: every sample builds each method's state on its own, timed (compose_s). An
            int: only the first `timed` samples do; the others build Concat and PICConcat-R for
            all their k at once from shared prefixes (`compose.nested_token_states`: the same
            states, about half the forward work) and record compose_s None for those two, so
            the timing figures come from the timed samples alone.
    Returns:
        how many (sample, k) groups were computed (0 when everything was already in `log`).
    """
    tok = model.tokenizer
    samples = list(samples)
    k_max = None if None in ks else max(ks, default=0)
    plan, rankings = [], {}
    for s in samples:
        if all((ranker.name, s.sample_id, k, m) in log for k in ks if k is not None for m in methods) \
                and None not in ks:
            continue  # done: do not even rank it again
        ranking = rank_sample(ranker, s, k_max)
        rankings[s.sample_id] = ranking
        for k in ks:
            kk = len(ranking) if k is None else k
            missing = [m for m in methods if (ranker.name, s.sample_id, kk, m) not in log]
            if missing:
                plan.append((s, kk, presented(ranking, kk), missing))
    if not plan:
        return 0
    if source.prepare is not None:
        source.prepare(sorted({c for _, _, ids, _ in plan for c in ids}))
    texts: dict[str, tuple[list[int], list[int]]] = {}
    untimed = set() if timed is None else {s.sample_id for s in samples[timed:]}
    nested: dict[str, dict] = {}  # sample_id -> nested_token_states of its ranking (untimed samples)
    for i, (s, k, ids, missing) in enumerate(plan):
        if s.sample_id not in texts:
            texts[s.sample_id] = (tok.encode(s.query), tok.encode(s.continuation))
        q, c = texts[s.sample_id]
        ctx = [source.token_ids(cid) for cid in ids]
        states = source.states(ids) if ids else None
        prebuilt = None
        if s.sample_id in untimed and ids and TOKEN_BUILT & set(missing):
            if s.sample_id not in nested:  # a sample's plan entries are contiguous: build them all
                nested.clear()
                mine = [(kk, m) for ss, kk, _, m in plan if ss.sample_id == s.sample_id and kk > 0]
                want = [kk for kk, m in mine if TOKEN_BUILT & set(m)]
                ranked = rankings[s.sample_id][:max(want)]
                nested[s.sample_id] = nested_token_states(
                    model, [source.token_ids(cid) for cid in ranked], source.states(ranked), want,
                    picconcat=any("picconcat_r" in m for _, m in mine))
            prebuilt = nested[s.sample_id].get(k)
        results = run_methods(model, q, c, ctx, states, methods=missing, prebuilt=prebuilt)
        gold = set(s.gold_ids)
        log.append([{
            "retriever": ranker.name, "sample_id": s.sample_id, "k": k, "method": r.method, "loss": r.loss,
            "compose_s": r.compose_s, "process_s": r.process_s, "context_ids": ids,
            "n_contexts": len(ids), "context_tokens": sum(map(len, ctx)), "query_tokens": len(q),
            "continuation_tokens": len(c), "gold_retrieved": sum(cid in gold for cid in ids),
            "n_gold": len(gold), "part": part,
        } for r in results])
        if progress is not None:
            progress(i + 1, len(plan))
    return len(plan)


# --------------------------------------------------------------------------------------------
# Summaries (plain dicts: summary.json, the report, the Benchmarks tab)
# --------------------------------------------------------------------------------------------
def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _se(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0


def curves(records: Iterable[dict], sample_ids: Iterable[str] | None = None, retriever: str = "minilm",
           ks: Iterable[int] | None = None) -> dict:
    """Per method, per k: mean loss, its standard error, n, mean compose / process ms, mean context
    tokens and gold chunks retrieved, over the records of `retriever` (and `sample_ids`, `ks`).

    Returns {"ks": [...], "methods": [...], "<stat>": {method: [value per k]}}; a k where a method
    has no record holds None.
    """
    want = None if sample_ids is None else set(sample_ids)
    kset = None if ks is None else set(ks)
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        if r["retriever"] != retriever or (want is not None and r["sample_id"] not in want) \
                or (kset is not None and r["k"] not in kset):
            continue
        groups.setdefault((r["method"], r["k"]), []).append(r)
    all_ks = sorted({k for _, k in groups})
    methods = [m for m in METHODS if any(mm == m for mm, _ in groups)]
    out = {"ks": all_ks, "methods": methods}
    stats = {
        "loss": lambda g: _mean([r["loss"] for r in g]),
        "loss_se": lambda g: _se([r["loss"] for r in g]),
        "n": lambda g: len(g),
        "compose_ms": lambda g: 1e3 * _mean([r["compose_s"] for r in g if r["compose_s"] is not None]),
        "process_ms": lambda g: 1e3 * _mean([r["process_s"] for r in g]),
        "context_tokens": lambda g: _mean([r["context_tokens"] for r in g]),
        "gold_recall": lambda g: _mean([r["gold_retrieved"] / r["n_gold"] for r in g if r.get("n_gold")]),
    }
    for name, f in stats.items():
        out[name] = {m: [_round(f(groups[m, k])) if (m, k) in groups else None for k in all_ks] for m in methods}
    return out


def _round(x, digits: int = 5):
    if isinstance(x, float):
        return None if not math.isfinite(x) else round(x, digits)
    return x


def gains(curve: dict, gain_ks: Sequence[int] = GAIN_KS) -> dict:
    """% lower loss than the baseline ("none") at each k, and its average over `gain_ks` present
    (the paper's figure: "an average of 10.1% across 1-10 retrieved chunks", sec. 6.3.1).

    gain_m(k) = 100 * (L_none(k) - L_m(k)) / L_none(k), with L the mean loss over samples at k.
    Returns {"per_k": {m: [gain per k]}, "avg": {m: mean over gain_ks}, "ks_averaged": [...]}.
    """
    ks = curve["ks"]
    none = curve["loss"].get("none")
    if none is None:
        return {"per_k": {}, "avg": {}, "ks_averaged": []}
    per_k, avg = {}, {}
    use = [i for i, k in enumerate(ks) if k in set(gain_ks)]
    for m, losses in curve["loss"].items():
        g = [None if (lo is None or none[i] in (None, 0)) else 100 * (none[i] - lo) / none[i]
             for i, lo in enumerate(losses)]
        per_k[m] = [_round(x, 3) for x in g]
        vals = [g[i] for i in use if g[i] is not None]
        avg[m] = _round(_mean(vals), 3) if vals else None
    return {"per_k": per_k, "avg": avg, "ks_averaged": [ks[i] for i in use]}


def time_ratio(curve: dict, num: str = "concat", den: str = "picaso_r", gain_ks: Sequence[int] = GAIN_KS) -> dict:
    """Mean over k in `gain_ks` of num's time / den's time: compose only, and compose + process."""
    out = {}
    for what, f in (("compose", lambda m, i: curve["compose_ms"][m][i]),
                    ("total", lambda m, i: curve["compose_ms"][m][i] + curve["process_ms"][m][i])):
        rs = []
        for i, k in enumerate(curve["ks"]):
            if k in set(gain_ks) and num in curve["compose_ms"] and den in curve["compose_ms"] \
                    and curve["compose_ms"][num][i] is not None and curve["compose_ms"][den][i] is not None:
                d = f(den, i)
                if d > 0:
                    rs.append(f(num, i) / d)
        out[what] = _round(_mean(rs), 2) if rs else None
    return out


def method_table(records: Iterable[dict], keys: set[tuple[str, int]], retriever: str = "minilm") -> dict:
    """Mean loss (and SE, n, ms) per method over the records whose (sample_id, k) is in `keys`
    (the QA pass: each sample at k = all its passages)."""
    by: dict[str, list[dict]] = {}
    for r in records:
        if r["retriever"] == retriever and (r["sample_id"], r["k"]) in keys:
            by.setdefault(r["method"], []).append(r)
    return {m: {"loss": _round(_mean([r["loss"] for r in g])), "loss_se": _round(_se([r["loss"] for r in g])),
                "n": len(g), "compose_ms": _round(1e3 * _mean([r["compose_s"] for r in g if r["compose_s"] is not None])),
                "process_ms": _round(1e3 * _mean([r["process_s"] for r in g]))}
            for m, g in ((m, by[m]) for m in METHODS if m in by)}


def histogram(values: Sequence[float], bins: int = 30) -> dict:
    """{"edges": [bins + 1], "counts": [bins], "mean", "median", "min", "max"} of `values`."""
    if not values:
        return {"edges": [], "counts": [], "mean": None, "median": None, "min": None, "max": None}
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {"edges": [_round(lo + i * width, 2) for i in range(bins + 1)], "counts": counts,
            "mean": _round(_mean(values), 2), "median": statistics.median(values), "min": lo, "max": hi}


def chunk_lengths(model, texts: Sequence[str], bins: int = 30) -> dict:
    """Fig. 9: histograms of the chunks' lengths in characters and tokens (text + CONTEXT_SUFFIX)."""
    return {"chars": histogram([len(t) for t in texts], bins),
            "tokens": histogram([len(model.tokenizer.encode(t + CONTEXT_SUFFIX)) for t in texts], bins),
            "n_chunks": len(texts)}


def process_vs_generate(model, lengths: Sequence[int], new_tokens: int = 32, repeats: int = 3,
                        text: str = "", seed: int = 0) -> dict:
    """Fig. 7 / appendix B.3: seconds to process n context tokens (one forward from the empty
    state) vs to generate `new_tokens` from the resulting state, median of `repeats`.

    The tokens are `text` tokenised and repeated to length n (random ids when `text` is empty).
    """
    import torch

    base = model.tokenizer.encode(text) if text else []
    if not base:
        g = torch.Generator().manual_seed(seed)
        base = torch.randint(0, model.config.vocab_size, (max(lengths, default=1),), generator=g).tolist()
    out = {"tokens": [], "process_s": [], "generate_s": [], "new_tokens": new_tokens}
    for n in lengths:
        ids = (base * (n // len(base) + 1))[:n]
        proc, gen = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            with torch.no_grad():
                st = model.encode_context(ids)
            proc.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            model.generate(ids[-1:], st, max_new_tokens=new_tokens, temperature=0, stop_at_eos=False)
            gen.append(time.perf_counter() - t0)
        out["tokens"].append(n)
        out["process_s"].append(_round(statistics.median(proc)))
        out["generate_s"].append(_round(statistics.median(gen)))
    return out


def summarize(records: Sequence[dict], plan: dict, extra: dict | None = None) -> dict:
    """summary.json from the records and the run's plan.

    plan: {"main": {"samples": [ids], "ks": [...]}, "qa": {"keys": [[sample_id, k], ...]},
           "long": {"samples", "ks"}, "retrievers": {"samples", "ks", "names": [...]}}; absent parts
    are skipped. `extra` (meta, timing, lengths, skipped) is merged in.
    """
    records = list(records)
    out: dict = {"paper": PAPER}
    if plan.get("main"):
        main = curves(records, plan["main"]["samples"], "minilm", plan["main"]["ks"])
        out["main"] = {**main, "gains": gains(main), "concat_over_picaso_r": time_ratio(main),
                       "picconcat_over_picaso_r": time_ratio(main, "picconcat_r"),
                       "n_samples": len(plan["main"]["samples"])}
    if plan.get("qa"):
        keys = {tuple(x) for x in plan["qa"]["keys"]}
        table = method_table(records, keys)
        none = table.get("none", {}).get("loss")
        for m, row in table.items():
            row["gain_pct"] = _round(100 * (none - row["loss"]) / none, 3) if none else None
        out["qa"] = {"corpus": plan["qa"].get("corpus"), "n_samples": len(keys), "methods": table,
                     "mean_contexts": _round(_mean([k for _, k in keys]), 2)}
    if plan.get("long"):
        long = curves(records, plan["long"]["samples"], "minilm", plan["long"]["ks"])
        out["long"] = {**long, "n_samples": len(plan["long"]["samples"])}
    if plan.get("retrievers"):
        p = plan["retrievers"]
        per = {}
        for name in p["names"]:
            c = curves(records, p["samples"], name, p["ks"])
            if "picaso_r" in c["loss"]:
                per[name] = {"label": RETRIEVERS[name][0], "ks": c["ks"], "loss": c["loss"]["picaso_r"],
                             "loss_se": c["loss_se"]["picaso_r"], "none": c["loss"].get("none"),
                             "gold_recall": c["gold_recall"]["picaso_r"],
                             "gain_avg": gains(c)["avg"].get("picaso_r")}
        out["retrievers"] = {"n_samples": len(p["samples"]), "curves": per}
    out.update(extra or {})
    return out


# --------------------------------------------------------------------------------------------
# Paper vs ours
# --------------------------------------------------------------------------------------------
def _fmt(x, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def _order(values: dict[str, float], methods: Sequence[str]) -> list[str]:
    return sorted((m for m in methods if values.get(m) is not None), key=lambda m: values[m])


def paper_vs_ours(summary: dict) -> str:
    """paper_vs_ours.md: the paper's numbers beside ours, same rows and columns, and where they differ."""
    meta = summary.get("meta", {})
    main, qa = summary.get("main"), summary.get("qa")
    corpus = meta.get("corpus", "?")
    qa_name = (qa or {}).get("corpus") or "QA"
    lines = [
        f"# Paper vs ours\n",
        f"Paper: {PAPER['model']}, WikiText-V2 and MS MARCO. Ours: model `{meta.get('model', '?')}`, "
        f"corpus `{corpus}` ({(main or {}).get('n_samples', 0)} samples, k = "
        f"{', '.join(map(str, (main or {}).get('ks', [])))}), QA `{qa_name}` ({(qa or {}).get('n_samples', 0)} samples, "
        f"all their passages, {(qa or {}).get('mean_contexts') or '–'} on average).\n",
        "Gain: % lower loss than the baseline (no context), averaged over k = 1..10 (sec. 6.3.1). "
        "QA loss: mean NLL per answer token with all the question's passages (table 1 row 1).\n",
        f"| method | gain, paper (WikiText) | gain, ours ({corpus}) | QA loss, paper (MS MARCO) | "
        f"QA loss, ours ({qa_name}) | QA gain, paper | QA gain, ours |",
        "|---|---|---|---|---|---|---|",
    ]
    ours_gain = (main or {}).get("gains", {}).get("avg", {})
    ours_qa = {m: r["loss"] for m, r in ((qa or {}).get("methods") or {}).items()}
    ours_qa_gain = {m: r.get("gain_pct") for m, r in ((qa or {}).get("methods") or {}).items()}
    pl = PAPER["msmarco_loss"]
    for m in TABLE_METHODS:
        pg = PAPER["wikitext_gain_pct"].get(m)
        pqg = None if m not in pl else 100 * (pl["none"] - pl[m]) / pl["none"]
        lines.append(
            f"| {METHOD_NAMES[m] if m != 'none' else 'Baseline (none)'} | {_fmt(pg, '.1f', '%')} | "
            f"{_fmt(ours_gain.get(m), '.1f', '%') if m != 'none' else '0%'} | {_fmt(pl.get(m))} | "
            f"{_fmt(ours_qa.get(m))} | {_fmt(pqg, '.1f', '%')} | {_fmt(ours_qa_gain.get(m), '.1f', '%')} |")
    ratio = (main or {}).get("concat_over_picaso_r", {})
    pc = (main or {}).get("picconcat_over_picaso_r", {})
    lines += [
        "",
        f"| time | paper | ours |",
        "|---|---|---|",
        f"| Concat / PICASO-R, compose + process, mean over k = 1..10 | {PAPER['concat_over_picaso_r_time']}x (A100) | "
        f"{_fmt(ratio.get('total'), '.1f', 'x')} |",
        f"| Concat / PICASO-R, compose only | – | {_fmt(ratio.get('compose'), '.0f', 'x')} |",
        f"| PICConcat-R / PICASO-R, compose + process | ≫ (fig. 5) | {_fmt(pc.get('total'), '.1f', 'x')} |",
        "",
        "## Where ours differs from the paper",
        "",
    ]
    lines += differences(summary)
    return "\n".join(lines) + "\n"


def differences(summary: dict) -> list[str]:
    """Plain sentences on where our order and sizes differ from the paper's."""
    out = []
    main, qa = summary.get("main"), summary.get("qa")
    comp = ("soup", "caso", "picaso_r", "picaso_s", "concat", "picconcat_r")
    if main:
        ours = main["gains"]["avg"]
        paper_order = _order(PAPER["wikitext_gain_pct"], comp)
        our_order = _order(ours, comp)
        names = lambda ms: " < ".join(METHOD_NAMES[m] for m in ms)  # noqa: E731
        same = paper_order == our_order or (set(paper_order[2:4]) == set(our_order[2:4])
                                            and paper_order[:2] + paper_order[4:] == our_order[:2] + our_order[4:])
        out.append(f"- Order of the average gains: paper {names(paper_order)} (PICASO-R = PICASO-S); ours "
                   f"{names(our_order)}" + (" — the same order." if same else " — a different order."))
        if ours.get("concat") is not None:
            size = ours["concat"] / PAPER["wikitext_gain_pct"]["concat"]
            why = (" The demo world's continuations restate facts that only its chunks hold (by construction), "
                   "so context matters far more than for WikiText's second halves." if summary.get("meta", {}).get("corpus") == "demo" else "")
            out.append(f"- Sizes: Concat gains {ours['concat']:.1f}% here vs 11.1% in the paper ({size:.1f}x).{why}")
        if ours.get("caso") is not None and ours.get("soup") is not None and ours["caso"] < ours["soup"]:
            out.append(f"- CASO ({ours['caso']:.1f}%) is below Soup ({ours['soup']:.1f}%) here; in the paper it is above "
                       "(9.2% vs 8.5%).")
        r = main.get("concat_over_picaso_r", {})
        if r.get("total"):
            out.append(f"- Time: Concat takes {r['total']:.1f}x PICASO-R's compose + process time here (CPU, small model) "
                       f"vs 5.4x in the paper (A100, 2.7B); composition alone is {r.get('compose') or 0:.0f}x faster.")
    if qa:
        t = {m: r["loss"] for m, r in qa["methods"].items()}
        po = _order(PAPER["msmarco_loss"], list(PAPER["msmarco_loss"]))
        oo = _order(t, list(PAPER["msmarco_loss"]))
        nm = lambda ms: " < ".join(METHOD_NAMES[m] for m in ms)  # noqa: E731
        out.append(f"- QA losses, lowest first: paper {nm(po)}; ours {nm(oo)}.")
    if summary.get("long"):
        lg = summary["long"]
        if "concat" in lg["loss"] and "none" in lg["loss"]:
            worse = [k for k, c, n in zip(lg["ks"], lg["loss"]["concat"], lg["loss"]["none"])
                     if c is not None and n is not None and c > n and k > 10]
            out.append("- Fig. 6: beyond 10 chunks Concat's loss rises above the baseline at k = " + ", ".join(map(str, worse))
                       + " (the paper: past the training length, up to 50 chunks)." if worse else
                       "- Fig. 6: Concat stays below the baseline up to k = " + str(max(lg["ks"], default=0))
                       + " (in the paper it blows up past the training length).")
    for s in summary.get("skipped", []):
        out.append(f"- Not run: {s}")
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def write_report(summary: dict, path: str | Path) -> None:
    """report.html: every figure of the run, the paper-vs-ours table, self-contained (plotly.js
    inline: it opens offline)."""
    import html as _html

    from plotly.offline import get_plotlyjs

    from picaso_core.plots import experiments as P

    meta = summary.get("meta", {})
    parts = []
    for fig_id, title, caption, fig in P.all_figures(summary):
        parts.append(f'<section><h2>{_html.escape(title)}</h2><p class="cap">{_html.escape(caption)}</p>'
                     + fig.to_html(full_html=False, include_plotlyjs=False, div_id=fig_id,
                                   config={"displaylogo": False}) + "</section>")
    md = paper_vs_ours(summary)
    head = (f"model <b>{_html.escape(str(meta.get('model')))}</b> · corpus <b>{_html.escape(str(meta.get('corpus')))}"
            f"/{_html.escape(str(meta.get('split')))}</b> · {meta.get('samples')} samples · k = "
            f"{_html.escape(str(meta.get('ks')))} · {meta.get('seconds', 0):.0f} s on {meta.get('threads')} CPU "
            f"thread(s) · {_html.escape(str(meta.get('date', '')))}")
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>PICASO experiments report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1150px;margin:24px auto;padding:0 16px;color:#1f2937}}
h1{{margin-bottom:4px}} .cap{{color:#4b5563}} section{{margin:28px 0}} table{{border-collapse:collapse;font-size:14px}}
td,th{{border:1px solid #d1d5db;padding:4px 8px;text-align:right}} td:first-child,th:first-child{{text-align:left}}
pre{{white-space:pre-wrap}}</style>
<script type="text/javascript">{get_plotlyjs()}</script></head><body>
<h1>PICASO experiments</h1><p>{head}</p>
<p>Reproduces PICASO (Liu et al., ICLR 2025) sec. 6 and appendix B on this model and corpus:
contexts retrieved per query (the sample's own chunks excluded; QA questions use their own passages), most
relevant last; every method at every k; k = 0 is the baseline for all.</p>
<section id="paper-vs-ours"><h2>Paper vs ours</h2>{markdown_table_html(md)}</section>
{''.join(parts)}
</body></html>"""
    Path(path).write_text(doc, encoding="utf-8")


def markdown_table_html(md: str) -> str:
    """The markdown of `paper_vs_ours` as HTML: pipe tables become <table>s, bullets <li>s."""
    import html as _html

    out, rows = [], []

    def flush():
        if rows:
            head, *body = [r for r in rows if not set(r.replace("|", "").strip()) <= set("-")]
            cell = lambda tag, r: "".join(f"<{tag}>{_html.escape(c.strip())}</{tag}>" for c in r.strip("|").split("|"))  # noqa: E731
            out.append("<table><tr>" + cell("th", head) + "</tr>" + "".join(f"<tr>{cell('td', r)}</tr>" for r in body) + "</table>")
            rows.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            rows.append(line)
            continue
        flush()
        if line.startswith("# "):
            continue
        if line.startswith("## "):
            out.append(f"<h3>{_html.escape(line[3:])}</h3>")
        elif line.startswith("- "):
            out.append(f"<li>{_html.escape(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_html.escape(line)}</p>")
    flush()
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _tqdm(desc: str):
    from tqdm.auto import tqdm

    bar = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True)
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()

    return update


def default_store_dir(corpus: str, split: str, fingerprint: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "picaso_explorer" / "experiments"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{Path(corpus).stem if corpus.endswith('.jsonl') else corpus}-{split}")
    return base / f"{slug}-{fingerprint}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m picaso_core.experiments", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="'demo', a checkpoint folder, or a hub id")
    p.add_argument("--corpus", default="demo", help="demo | wikitext | msmarco | a .jsonl file")
    p.add_argument("--split", default="test")
    p.add_argument("--samples", type=int, default=200, help="samples of the main sweep and the QA pass")
    p.add_argument("--ks", default="0-10", help="k values of the main sweep: 0-10, or a list such as 0,2,5")
    p.add_argument("--methods", default=",".join(METHODS), help=f"subset of {','.join(METHODS)}")
    p.add_argument("--out", default="runs/demo", help="output folder (a rerun resumes what is in it)")
    p.add_argument("--qa", default="auto", help="QA pass (table 1): auto (demo: the demo's QA set; msmarco: "
                   "itself), none, or a corpus name")
    p.add_argument("--timed-samples", type=int, default=20,
                   help="the first N samples build every state on its own and time it (fig. 3 right, fig. 5); "
                   "the rest build Concat and PICConcat-R for all k from shared prefixes (the same states, about "
                   "half the work) and record no compose time for them; -1: time every sample")
    p.add_argument("--long-ks", default="20,30,40,50", help="fig. 6 sweep beyond 10 chunks ('none' to skip)")
    p.add_argument("--long-samples", type=int, default=20)
    p.add_argument("--retrievers", default="minilm,bm25,random,mpnet,glove",
                   help="fig. 8 ablation (mpnet and glove need the hub; skipped offline); 'none' to skip")
    p.add_argument("--ablation-samples", type=int, default=50)
    p.add_argument("--timing-tokens", default="256,512,1024,2048,4096,8192",
                   help="fig. 7: context lengths for processing vs generating 32 tokens ('none' to skip)")
    p.add_argument("--store", default=None, help="state store folder (default: ~/.cache/picaso_explorer/experiments/...)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--device", default=None)
    p.add_argument("--ship", default=None, help="also write summary.json here (the app's Benchmarks tab reads "
                   "assets/benchmarks_summary.json)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None, embedder=None) -> dict:
    """Run the CLI; returns the summary. `embedder`: the MiniLM stand-in (tests pass a tiny one)."""
    args = parse_args(argv)
    import torch

    from picaso_core.data import load_corpus
    from picaso_core.loading import load_model
    from picaso_core.retrieval import Retriever, SentenceEmbedder, embeddings_path
    from picaso_core.store import StateStore

    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    ks = parse_ks(args.ks)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    bad = [m for m in methods if m not in METHODS]
    if bad or not ks:
        sys.exit(f"error: unknown methods {bad} (valid: {', '.join(METHODS)})" if bad else "error: --ks is empty")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = RecordLog(out / "records.jsonl")
    print(f"{len(log)} records already in {out / 'records.jsonl'}" if len(log) else f"writing to {out}")

    model = load_model(args.model, device=args.device)
    model.name_or_path = args.model
    # records are keyed without the model: a folder holds one model's run on one corpus split
    ident = {"fingerprint": model.fingerprint(), "corpus": args.corpus, "split": args.split}
    run_file = out / "run.json"
    if run_file.is_file() and json.loads(run_file.read_text()) != ident:
        sys.exit(f"error: {out} holds a run of {json.loads(run_file.read_text())}, not {ident}; "
                 "pass another --out (or delete the folder) so its records are not reused")
    run_file.write_text(json.dumps(ident))
    corpus = load_corpus(args.corpus, args.split)
    qa_name = args.qa
    if qa_name == "auto":
        qa_name = "demo" if args.corpus == "demo" else ("msmarco" if args.corpus == "msmarco" else "none")
    qa_corpus = None
    if qa_name != "none":
        qa_corpus = corpus if qa_name == args.corpus and corpus.samples and corpus.samples[0].kind == "qa" \
            else load_corpus(qa_name, args.split, kind="qa")
    database = dict(corpus.database)
    if qa_corpus is not None:
        database.update(qa_corpus.database)

    store_dir = Path(args.store) if args.store else default_store_dir(args.corpus, args.split, model.fingerprint())
    store = StateStore.open(store_dir, model) if (store_dir / "store.json").exists() else \
        StateStore.build(model, [], store_dir, suffix=CONTEXT_SUFFIX, progress=False)
    if store.suffix != CONTEXT_SUFFIX:
        sys.exit(f"error: {store_dir} was built with suffix {store.suffix!r}; delete it or pass another --store")
    source = ContextSource.from_store(store, database, progress=_tqdm("encoding contexts (database build)"))

    embedder = embedder or SentenceEmbedder()
    seeds = []
    if args.corpus == "demo" or qa_name == "demo":
        from picaso_core.data import DEMO_DATA_DIR

        seeds = [DEMO_DATA_DIR / f"{args.split}_database.{embedder.name}.safetensors"]
    minilm = Retriever.cached(database, embedder, embeddings_path(store_dir, embedder.name), seeds=seeds,
                              progress=_tqdm("embedding chunks for retrieval"))
    rankers = {"minilm": make_ranker("minilm", database, minilm)}

    samples = corpus.samples[: args.samples]
    timed = None if args.timed_samples < 0 else args.timed_samples
    plan: dict = {"main": {"samples": [s.sample_id for s in samples], "ks": ks}}
    print(f"main k-sweep: {len(samples)} samples x k = {args.ks} x {len(methods)} methods")
    run_sweep(model, samples, rankers["minilm"], source, ks, log, methods, "main", _tqdm("main k-sweep"),
              timed=timed)

    if qa_corpus is not None:
        qa_samples = qa_corpus.samples[: args.samples]
        print(f"QA pass (table 1): {len(qa_samples)} {qa_corpus.name} questions with all their passages")
        run_sweep(model, qa_samples, rankers["minilm"], source, [None], log, methods, "qa", _tqdm("QA pass"),
                  timed=timed)
        plan["qa"] = {"corpus": f"{qa_corpus.name} QA" if qa_corpus.name == "demo" else qa_corpus.name,
                      "keys": [[s.sample_id, len(s.contexts)] for s in qa_samples]}

    long_ks = parse_ks(args.long_ks)
    retrieval_kind = bool(samples) and samples[0].kind == "retrieval"
    if long_ks and retrieval_kind:
        long_samples = samples[: args.long_samples]
        long_methods = tuple(m for m in methods if m in LONG_METHODS)
        print(f"long sweep (fig. 6): {len(long_samples)} samples x k = {args.long_ks}, no PICConcat-R")
        run_sweep(model, long_samples, rankers["minilm"], source, long_ks, log, long_methods, "long",
                  _tqdm("long sweep"))
        plan["long"] = {"samples": [s.sample_id for s in long_samples], "ks": sorted(set(long_ks) | set(ks))}

    skipped = []
    names = [n.strip() for n in args.retrievers.split(",") if n.strip() and n.strip() != "none"]
    if names:
        abl = samples[: args.ablation_samples]
        done = []
        for name in names:
            try:
                ranker = rankers.get(name) or make_ranker(name, database, cache_dir=store_dir)
            except RuntimeError as e:
                print(e)
                skipped.append(str(e))
                continue
            print(f"retriever ablation (fig. 8): {RETRIEVERS[name][0]}, {len(abl)} samples")
            run_sweep(model, abl, ranker, source, ks, log, ABLATION_METHODS, "retrievers", _tqdm(f"retriever {name}"))
            done.append(name)
        plan["retrievers"] = {"samples": [s.sample_id for s in abl], "ks": ks, "names": done}

    timing = None
    timing_tokens = parse_ks(args.timing_tokens)
    if timing_tokens:
        tpath = out / "timing.json"
        want = {"tokens": timing_tokens, "fingerprint": model.fingerprint()}
        old = json.loads(tpath.read_text()) if tpath.is_file() else {}
        if {k: old.get(k) for k in want} == want:
            timing = old
        else:
            print(f"fig. 7: processing vs generating 32 tokens at {timing_tokens} tokens")
            timing = {**process_vs_generate(model, timing_tokens, text=" ".join(list(database.values())[:200])),
                      **want}
            tpath.write_text(json.dumps(timing))

    texts = [database[c] for c in (corpus.database if retrieval_kind else database)]
    extra = {
        "meta": {"model": args.model, "fingerprint": model.fingerprint(), "corpus": args.corpus, "split": args.split,
                 "samples": len(samples), "ks": args.ks, "methods": list(methods),
                 "threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - t_start, 1),
                 "records": len(log), "date": time.strftime("%Y-%m-%d %H:%M"),
                 "command": "python -m picaso_core.experiments " + " ".join(sys.argv[1:] if argv is None else argv),
                 "training_tokens": _training_tokens(args.model)},
        "timing": timing, "lengths": chunk_lengths(model, texts), "skipped": skipped,
    }
    summary = summarize(log.records.values(), plan, extra)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if args.ship:
        Path(args.ship).parent.mkdir(parents=True, exist_ok=True)
        Path(args.ship).write_text(json.dumps(summary, indent=1) + "\n")
    md = paper_vs_ours(summary)
    (out / "paper_vs_ours.md").write_text(md)
    write_report(summary, out / "report.html")
    print(md)
    print(f"done in {time.perf_counter() - t_start:.0f} s: {out}/records.jsonl, summary.json, report.html, paper_vs_ours.md")
    return summary


def _training_tokens(model: str) -> int | None:
    """The demo model's training sequence length (its train_log.json), to mark on fig. 6."""
    from picaso_core.loading import DEMO_MODEL_DIR

    folder = DEMO_MODEL_DIR if model == "demo" else Path(model)
    try:
        return int(json.loads((folder / "train_log.json").read_text())["args"]["seq_len"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


if __name__ == "__main__":
    main()

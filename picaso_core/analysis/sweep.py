"""The k-sweep of the paper's protocol (PICASO sec. 6.1), shared by the experiments CLI
(picaso_core.experiments), the app's live sweeps and the fine-tuning evaluation: k lists, the
record log (one JSON line per (retriever, sample, k, method), appended as each (sample, k)
finishes, so an interrupted sweep resumes where it stopped) and `run_sweep`, which runs every method
of picaso_core.analysis.evaluate on the (sample, k) pairs a log lacks.

For each query the contexts are the top-k chunks of a retriever, presented most relevant LAST
(Concat's best-case order, sec. 6.2); k = 0 is the baseline for all methods.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from picaso_core.analysis.evaluate import METHODS, run_methods
from picaso_core.compose.registry import names
from picaso_core.retrieval.rankers import presented, rank_sample

CONTEXT_SUFFIX = "\n\n"  # the separator the demo model saw between contexts (= the app's store suffix)
RECORD_KEY = ("retriever", "sample_id", "k", "method")

TOKEN_BUILT = set(names(kind="tokens"))  # concat, picconcat_r: built from tokens, shared prefixes for untimed samples


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
        ranker: a picaso_core.retrieval.rankers ranker (its `name` keys the records).
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
    from picaso_core.compose import nested_token_states  # torch on first use: not on the experiments CLI's --help

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

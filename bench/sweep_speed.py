"""The experiments' main sweep, every state built on its own vs shared prefixes, side by side.

`python -m picaso_core.analysis.experiments` builds, for each sample and k = 1..10, Concat (k - 1 contexts
after the first one's stored state) and PICConcat-R (k rotations of all k contexts: k² contexts).
With `--timed-samples N` only the first N samples do so (their times feed fig. 3 right and fig.
5); the others build both for all their k at once from shared prefixes
(`compose.nested_token_states`: the same states, ~165 contexts of forward work per sample
instead of ~430). This runs `run_sweep` both ways on the same samples, interleaved, and prints
the time per sample x k step and the ratio; it also checks that the losses agree.

    python bench/sweep_speed.py                 # demo model, 6 samples, k = 0..10, BM25 ranking
    python bench/sweep_speed.py --samples 3 --threads 1
Shared machines are noisy: the claim is the ratio of medians taken in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from picaso_core.analysis import experiments as E  # noqa: E402
from picaso_core.retrieval import rankers as R  # noqa: E402
from picaso_core.data import load_corpus  # noqa: E402
from picaso_core.engine.loading import load_model  # noqa: E402
from picaso_core.store.store import StateStore  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--ks", default="0-10")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model("demo")
    corpus = load_corpus("demo", "test")
    samples = corpus.samples[: args.samples]
    ks = E.parse_ks(args.ks)
    ranker = R.make_ranker("bm25", corpus.database)
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore.build(model, [], Path(tmp) / "store", suffix=E.CONTEXT_SUFFIX, progress=False)
        source = E.ContextSource.from_store(store, corpus.database, progress=False)
        ids = {c for s in samples for c in R.rank_sample(ranker, s, max(ks))}
        source.prepare(sorted(ids))  # the database build: not timed, as in the CLI
        times: dict[str, list[float]] = {"every state on its own": [], "shared prefixes": []}
        logs = {}
        for _ in range(args.repeats):
            for name, timed in (("every state on its own", None), ("shared prefixes", 0)):
                log = E.MemoryLog()
                t = time.perf_counter()
                n = E.run_sweep(model, samples, ranker, source, ks, log, timed=timed)
                times[name].append((time.perf_counter() - t) / n)
                logs[name] = log
    a, b = logs.values()
    worst = max(abs(r["loss"] - b.records[key]["loss"]) for key, r in a.records.items())
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"demo model, {len(samples)} samples x k = {args.ks}, 7 methods, {args.threads} thread(s), "
          f"median of {args.repeats} interleaved repeats")
    print("| sweep | s per sample x k | steps/s |\n|---|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.3f} | {1 / v:.2f} |")
    print(f"\nshared prefixes: {med['every state on its own'] / med['shared prefixes']:.2f}x faster; "
          f"largest loss difference {worst:.1e}")


if __name__ == "__main__":
    main()

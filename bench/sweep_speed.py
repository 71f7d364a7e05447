"""The experiments' main sweep, every state built on its own vs shared prefixes, side by side.

`python -m picaso_core.experiments` builds, for each sample and k = 1..10, Concat (k - 1 contexts
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
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness import interleaved, medians, parse, parser, ratios, table, write_json  # noqa: E402

from picaso_core.analysis import sweep as S  # noqa: E402
from picaso_core.retrieval import rankers as R  # noqa: E402
from picaso_core.data import load_corpus  # noqa: E402
from picaso_core.light.defaults import count  # noqa: E402


def k_list(text: str) -> str:
    """argparse `type=` of --ks (S.parse_ks's forms, at least one k): a bad one is one `error:` line."""
    try:
        ks = S.parse_ks(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not ks:
        raise argparse.ArgumentTypeError(f"{text!r} names no k (e.g. 0-10)")
    return text


def main(argv=None) -> None:
    ap = parser(__doc__, threads=2, repeats=3)
    ap.add_argument("--samples", type=count(1), default=6)
    ap.add_argument("--ks", type=k_list, default="0-10")
    args = parse(ap, argv)
    # after the arguments: --help and a bad value answer without importing torch (issue 48)
    from picaso_core.engine.loading import load_model
    from picaso_core.store.store import StateStore

    model = load_model("demo")
    corpus = load_corpus("demo", "test")
    samples = corpus.samples[: args.samples]
    ks = S.parse_ks(args.ks)
    ranker = R.make_ranker("bm25", corpus.database)
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore.build(model, [], Path(tmp) / "store", suffix=S.CONTEXT_SUFFIX, progress=False)
        source = S.ContextSource.from_store(store, corpus.database, progress=False)
        ids = {c for s in samples for c in R.rank_sample(ranker, s, max(ks))}
        source.prepare(sorted(ids))  # the database build: not timed, as in the CLI
        logs, steps = {}, {}

        def sweep(name: str, timed: int | None):
            def run():
                logs[name] = S.MemoryLog()
                steps[name] = S.run_sweep(model, samples, ranker, source, ks, logs[name], timed=timed)
            return run

        times = interleaved({"every state on its own": sweep("every state on its own", None),
                             "shared prefixes": sweep("shared prefixes", 0)}, args.repeats, warmup=False)
    a, b = logs.values()
    worst = max(abs(r["loss"] - b.records[key]["loss"]) for key, r in a.records.items())
    med = {k: v / steps[k] for k, v in medians(times).items()}  # seconds per sample x k step
    print(f"demo model, {len(samples)} samples x k = {args.ks}, 7 methods, {args.threads} thread(s), "
          f"median of {args.repeats} interleaved repeats")
    print(table([[k, f"{v:.3f}", f"{1 / v:.2f}"] for k, v in med.items()], ["sweep", "s per sample x k", "steps/s"]))
    vs = ratios(med, "shared prefixes")
    print(f"\nshared prefixes: {vs['every state on its own']:.2f}x faster; largest loss difference {worst:.1e}")
    write_json(args, {"s_per_step": med, "steps": steps, "largest_loss_difference": worst}, vs)


if __name__ == "__main__":
    main()

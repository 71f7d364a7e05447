"""How often the composed-state cache hits: over the experiments protocol's k-sweep and over random
visitor clicks on the demo's examples. Only the keys are exercised (picaso_core.analysis.
compose_cache with a stand-in state of the model's state size), so it runs in seconds; the
contexts are the ones the app and the experiments retrieve.

    python bench/cache_hits.py                       # demo: 200 samples x k = 1-10, 200 clicks
    python bench/cache_hits.py --budget-mb 64        # a smaller cache

k-sweep: for every sample, the top-k retrieved contexts (its own chunks excluded), most relevant
last, for each k (the experiments CLI's `--ks 1-10`); every cached method looks its state up.
Clicks: an example from the Compose tab's list (uniform), k = 5 (the default) with probability
0.6 else uniform in 1-10, "most relevant last" on with probability 0.8; a click whose settings were
seen among the last 64 is served whole by the scored-run cache (counted apart).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import parse, parser, write_json  # noqa: E402

from picaso_core.light.defaults import count, number  # noqa: E402

METHODS = ("concat", "soup", "caso", "picaso_s", "picaso_r", "picconcat_r")


def hit_rates(cache, lookups) -> dict:
    """Feed (method, ids) lookups to `cache` (every miss "composes" STATE); the hit rate in all
    and per method."""
    for method, ids in lookups:
        cache.state(method, ids, [None] * len(ids), lambda order, sts: STATE, model_fp="m", store_fp="s")
    s = cache.stats()
    return {"hit_rate": s["hit_rate"], "lookups": s["hits"] + s["misses"], "evictions": s["evictions"],
            "per_method": {m: v["hit_rate"] for m, v in s["methods"].items()}}


STATE = None  # a stand-in composed state of the model's state size


def main() -> None:
    global STATE
    p = parser(__doc__)
    p.add_argument("--model", default="demo")
    p.add_argument("--corpus", default="demo")
    p.add_argument("--split", default="test")
    p.add_argument("--samples", type=count(1), default=200)
    p.add_argument("--clicks", type=count(1), default=200)
    p.add_argument("--budget-mb", type=number(0), default=256)
    p.add_argument("--seed", type=int, default=0)
    args = parse(p)

    import torch

    from picaso_core.analysis.compose_cache import ComposeCache, ResultCache
    from picaso_core.engine.state import ContextState
    from picaso_core.ui.pickers import EXAMPLES_SHOWN
    from picaso_core.session import load_resources

    res = load_resources(args.model, args.corpus, args.split, log=lambda m: None)
    shapes = res.model.config.state_shapes()
    STATE = ContextState.zeros(shapes)  # the model's state size: what the budget counts
    budget = int(args.budget_mb * 2**20)

    def top(query, k, exclude):
        return [c for c, _ in res.retriever.retrieve(query, k, exclude=exclude, best_last=True)]

    samples = res.corpus.samples[: args.samples]
    sweep = []
    for s in samples:
        ranking = top(s.query, 10, s.exclude_ids)  # most relevant last
        for k in range(1, 11):
            sweep += [(m, ranking[len(ranking) - k:]) for m in METHODS if k <= len(ranking)]
    k_sweep = hit_rates(ComposeCache(budget), sweep)

    rng = random.Random(args.seed)
    shown = res.corpus.samples[:EXAMPLES_SHOWN]
    runs = ResultCache(64)  # the app's scored-run cache (ui/tabs/compose_runs.RESULTS)
    clicks, whole = [], 0
    for _ in range(args.clicks):
        s = rng.choice(shown)
        k = 5 if rng.random() < 0.6 else rng.randint(1, 10)
        last = rng.random() < 0.8
        key = (s.sample_id, k, last)
        if runs.get(key) is not None:
            whole += 1  # the scored-run cache answers; no state is looked up
            continue
        runs.put(key, True)
        ids = top(s.query, k, s.exclude_ids)
        ids = ids if last else ids[::-1]
        clicks += [(m, ids) for m in METHODS]
    visitors = hit_rates(ComposeCache(budget), clicks)
    visitors.update(clicks=args.clicks, served_whole=whole, served_whole_rate=round(whole / args.clicks, 3))
    state_mib = sum(t.numel() * t.element_size() for t in (STATE.ssm, STATE.conv, STATE.log_decay)) / 2**20
    print(f"state size {state_mib:.2f} MiB, budget {args.budget_mb:.0f} MiB")
    print(f"k-sweep ({len(samples)} samples x k = 1-10, {k_sweep['lookups']} lookups): hit rate "
          f"{k_sweep['hit_rate']:.1%}  per method {k_sweep['per_method']}")
    print(f"{args.clicks} visitor clicks: {whole} served whole by the scored-run cache ({whole / args.clicks:.0%}); "
          f"of the rest's {visitors['lookups']} state lookups {visitors['hit_rate']:.1%} hit "
          f"(per method {visitors['per_method']}); evictions {visitors['evictions']}")
    write_json(args, {"k_sweep": k_sweep, "clicks": visitors}, torch_version=torch.__version__)


if __name__ == "__main__":
    main()

"""Composition vs processing: the speed claim of PICASO (paper fig. 1, 3: PICASO-R 5.4x faster
than Concat on GPU), measured side by side in one run on the mamba2-130m shape (random weights,
float32, CPU).

For n = 1, 2, 5, 10, 20 contexts of ~100 tokens, encoded once beforehand (the database build):
  - the time to compose their states with Soup, CASO, PICASO-S, PICASO-R, and to process their
    tokens with Concat (from the first context's stored state, sec. 6.2) and PICConcat-R (n
    rotations of all n contexts in one batched forward; only for small n, it costs n^2 contexts);
  - the weighted sum's effective memory bandwidth (bytes it must read + write / time) against
    a plain copy of the stacked states, the physical limit of a memory-bound op;
  - scoring several states in one batched call vs one call each (evaluate.run_methods' choice).
Shared machines are noisy: every figure is the median of interleaved repeats, and the claims are
ratios of figures taken in the same run. Prints markdown tables.

    python bench/compose_speed.py            # ~3-5 minutes on 2 CPU cores
    python bench/compose_speed.py --quick    # n = 1, 2, 5 and shorter contexts, ~1 minute
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from picaso_core import ModelConfig, SSMLanguageModel  # noqa: E402
from picaso_core.compose import compose, compose_tokens, composition_weights, weighted_sum  # noqa: E402

STATE_METHODS = {"soup": "Soup", "caso": "CASO", "picaso_s": "PICASO-S", "picaso_r": "PICASO-R"}


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_interleaved(fns: dict, repeats: int, warmup: bool = True) -> dict[str, float]:
    """Median seconds of each fn, the fns run in turn each repeat so that load hits all alike."""
    for fn in fns.values() if warmup else ():  # allocator, first-call paths
        fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(seconds(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 1, 2, 5, 50-token contexts, fewer repeats")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--picconcat-max-n", type=int, default=5, help="largest n for PICConcat-R (n^2 contexts)")
    args = ap.parse_args()
    ns = (1, 2, 5) if args.quick else (1, 2, 5, 10, 20)
    ctx_len = 50 if args.quick else 100
    repeats = 5 if args.quick else 9

    torch.manual_seed(args.seed)
    cfg = ModelConfig(d_model=768, n_layer=24, vocab_size=50277, ssm_cfg=dict(layer="Mamba2"),
                      pad_vocab_size_multiple=16)
    model = SSMLanguageModel(cfg).eval()
    g = torch.Generator().manual_seed(args.seed)
    contexts = [torch.randint(0, cfg.vocab_size, (ctx_len,), generator=g).tolist() for _ in range(max(ns))]
    t0 = time.perf_counter()
    states = model.encode_contexts(contexts)
    db_s = time.perf_counter() - t0
    state_mb = cfg.state_nbytes() / 2**20
    print(f"# compose_speed: mamba2-130m shape, float32, CPU, {torch.get_num_threads()} threads, "
          f"{max(ns)} contexts x {ctx_len} tokens")
    print(f"state: {state_mb:.1f} MiB per context; database build (encode_contexts of all): {db_s:.1f} s\n")

    # 1. composition from stored states (no forward pass)
    comp = {n: median_interleaved({m: (lambda m=m, n=n: compose(m, states[:n])) for m in STATE_METHODS}, repeats)
            for n in ns}

    # 2. composition from tokens (forward passes); fewer repeats, these take seconds each
    concat, picconcat = {}, {}
    for n in ns:
        reps = 1 if (n - 1) * ctx_len > 500 else 2
        concat[n] = statistics.median(
            seconds(lambda n=n: compose_tokens(model, contexts[:n], "concat", states=states[:n])) for _ in range(reps))
        if n <= args.picconcat_max_n:
            picconcat[n] = seconds(lambda n=n: compose_tokens(model, contexts[:n], "picconcat_r"))

    print("## Time to build the query's starting state (ms; median of repeats)\n")
    print("| n | tokens | " + " | ".join(STATE_METHODS.values())
          + " | Concat | PICConcat-R | Concat / PICASO-R | PICASO-S / PICASO-R |")
    print("|---" * 10 + "|")
    for n in ns:
        c = comp[n]
        pic = f"{1e3 * picconcat[n]:.0f}" if n in picconcat else "not run"
        print(f"| {n} | {n * ctx_len} | " + " | ".join(f"{1e3 * c[m]:.2f}" for m in STATE_METHODS)
              + f" | {1e3 * concat[n]:.0f} | {pic} | {concat[n] / c['picaso_r']:.0f}x"
              f" | {c['picaso_s'] / c['picaso_r']:.2f} |")
    print("\nConcat at n = 1 is the stored state itself (no token to process).")

    print("\n## Growth with n\n")
    print("| n | PICASO-R ms per state | PICASO-S ms per state | Concat ms per 100 tokens processed |")
    print("|---|---|---|---|")
    for n in ns:
        per_tok = f"{1e3 * concat[n] / ((n - 1) * ctx_len / 100):.0f}" if n > 1 else "-"
        print(f"| {n} | {1e3 * comp[n]['picaso_r'] / n:.2f} | {1e3 * comp[n]['picaso_s'] / n:.2f} | {per_tok} |")

    # 3. the weighted sum against a plain copy of the same states
    n = 10 if 10 in ns else max(ns)
    ssms = [s.ssm for s in states[:n]]
    W = composition_weights("picaso_r", torch.stack([s.log_decay for s in states[:n]]))
    stacked = torch.stack(ssms)
    buf = torch.empty_like(stacked)
    t = median_interleaved({"wsum": lambda: weighted_sum(W, ssms), "clone": stacked.clone,
                            "copy_": lambda: buf.copy_(stacked)}, repeats)
    S = ssms[0].numel() * ssms[0].element_size()
    bw = {"wsum": (n + 1) * S / t["wsum"], "clone": 2 * n * S / t["clone"], "copy_": 2 * n * S / t["copy_"]}
    print(f"\n## Memory bandwidth of the weighted sum (ssm of n = {n} states, {n * S / 2**20:.0f} MiB)\n")
    print("| op | bytes read + written | ms | GB/s |")
    print("|---|---|---|---|")
    print(f"| weighted sum Σ W_k x_k | (n+1)·state | {1e3 * t['wsum']:.1f} | {bw['wsum'] / 1e9:.1f} |")
    print(f"| clone of the stacked states | 2n·state | {1e3 * t['clone']:.1f} | {bw['clone'] / 1e9:.1f} |")
    print(f"| copy_ into a preallocated buffer | 2n·state | {1e3 * t['copy_']:.1f} | {bw['copy_'] / 1e9:.1f} |")
    print(f"\nweighted sum / clone: {bw['wsum'] / bw['clone']:.0%}; / copy_: {bw['wsum'] / bw['copy_']:.0%} "
          "(clone also pays page faults on a fresh allocation; copy_ is the stricter limit)")

    # 4. scoring: one batched call vs one call per state (evaluate.run_methods)
    if not args.quick:
        q, c = contexts[0][:32], contexts[1][:32]
        few = states[:7]
        t = median_interleaved({"batched": lambda: model.continuation_losses(q, c, few),
                                "one by one": lambda: [model.continuation_loss(q, c, s) for s in few]},
                               repeats=1, warmup=False)
        print(f"\n## Scoring 7 states (32 + 32 tokens each): batched {t['batched']:.2f} s, "
              f"one by one {t['one by one']:.2f} s ({t['one by one'] / t['batched']:.1f}x)")

    n = 10 if 10 in ns else max(ns)
    print("\n## Targets")
    print(f"- PICASO-R vs Concat at n = {n}: {concat[n] / comp[n]['picaso_r']:.0f}x faster (target >= 20x; "
          "paper 5.4x on GPU)")
    print(f"- PICASO-S / PICASO-R at n = {n}: {comp[n]['picaso_s'] / comp[n]['picaso_r']:.2f} (target <= 2)")
    print(f"- weighted sum bandwidth / copy: {bw['wsum'] / max(bw['clone'], bw['copy_']):.0%} (target >= 50%)")


if __name__ == "__main__":
    main()

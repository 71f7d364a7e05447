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

    python bench/compose_speed.py               # ~1 minute on an idle 2-core CPU, ~4 when shared
    python bench/compose_speed.py --threads 1   # on a shared machine: stable figures (see below)
    python bench/compose_speed.py --quick       # n = 1, 2, 5 and shorter contexts
    python bench/compose_speed.py --device cuda # GPU: the weighted sum next to the bandwidth floor
On an oversubscribed machine (other jobs on the same cores) a multi-threaded op can wait a whole
scheduler slice for its second thread, and everything slows down 2-5x at random; one thread per
process gives reproducible medians.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interleaved, limits, medians, ms, parse, parser, seconds, table, write_json  # noqa: E402

from picaso_core import ModelConfig  # noqa: E402
from picaso_core.compose.registry import label  # noqa: E402
from picaso_core.light.defaults import count  # noqa: E402

STATE_METHODS = {m: label(m) for m in ("soup", "caso", "picaso_s", "picaso_r")}


def main() -> None:
    ap = parser(__doc__, device="cpu", repeats=None, quick="n = 1, 2, 5, 50-token contexts, fewer repeats",
                limit_flags=True, helps={"repeats": "rounds of the state methods (default 9, 5 with --quick)"})
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--picconcat-max-n", type=count(1), default=5, help="largest n for PICConcat-R (n^2 contexts)")
    args = parse(ap)
    ns = (1, 2, 5) if args.quick else (1, 2, 5, 10, 20)
    ctx_len = 50 if args.quick else 100
    repeats = args.repeats or (5 if args.quick else 9)
    # after the arguments: --help and a bad value answer without importing torch (issue 48)
    import torch

    from picaso_core import SSMLanguageModel
    from picaso_core.compose import compose, compose_tokens, composition_weights, weighted_sum

    torch.manual_seed(args.seed)
    cfg = ModelConfig(d_model=768, n_layer=24, vocab_size=50277, ssm_cfg=dict(layer="Mamba2"),
                      pad_vocab_size_multiple=16)
    model = SSMLanguageModel(cfg).eval().to(args.device)
    g = torch.Generator().manual_seed(args.seed)
    contexts = [torch.randint(0, cfg.vocab_size, (ctx_len,), generator=g).tolist() for _ in range(max(ns))]
    t0 = time.perf_counter()
    states = model.encode_contexts(contexts)
    db_s = time.perf_counter() - t0
    state_mb = cfg.state_nbytes() / 2**20
    peak_bw, _, label = limits(args.device, "float32", args)
    print(f"# compose_speed: mamba2-130m shape, float32, {args.device}, {torch.get_num_threads()} threads, "
          f"{max(ns)} contexts x {ctx_len} tokens; limits: {label}")
    print(f"state: {state_mb:.1f} MiB per context; database build (encode_contexts of all): {db_s:.1f} s\n")

    # 1. composition from stored states (no forward pass): every (n, method) in each round
    comp = interleaved({(n, m): (lambda m=m, n=n: compose(m, states[:n])) for n in ns for m in STATE_METHODS},
                       repeats)
    med = medians(comp)

    # 2. composition from tokens (forward passes): seconds each, so 2 rounds, PICConcat-R once
    concat = interleaved({n: (lambda n=n: compose_tokens(model, contexts[:n], "concat", states=states[:n]))
                          for n in ns}, 2, warmup=False)
    picconcat = {n: seconds(lambda n=n: compose_tokens(model, contexts[:n], "picconcat_r"))
                 for n in ns if n <= args.picconcat_max_n}
    cmed = medians(concat)
    vs_r = {n: {"concat": cmed[n] / med[n, "picaso_r"], "picaso_s": med[n, "picaso_s"] / med[n, "picaso_r"]} for n in ns}

    print("## Time to build the query's starting state: ms, median (min) of rounds\n")
    print(table([[n, n * ctx_len, *(ms(comp[n, m]) for m in STATE_METHODS), ms(concat[n]),
                  f"{1e3 * picconcat[n]:.0f}" if n in picconcat else "not run", f"{vs_r[n]['concat']:.0f}x",
                  f"{vs_r[n]['picaso_s']:.2f}"] for n in ns],
                ["n", "tokens", *STATE_METHODS.values(), "Concat", "PICConcat-R", "Concat / PICASO-R",
                 "PICASO-S / PICASO-R"]))
    print(f"\n{repeats} rounds for the state methods, 2 for Concat, 1 for PICConcat-R (n^2 contexts: "
          f"run up to n = {args.picconcat_max_n}). Concat at n = 1 is the stored state itself.")

    print("\n## Growth with n (medians)\n")
    print(table([[n, f"{1e3 * med[n, 'picaso_r'] / n:.2f}", f"{1e3 * med[n, 'picaso_s'] / n:.2f}",
                  f"{1e3 * cmed[n] / ((n - 1) * ctx_len / 100):.0f}" if n > 1 else "-"] for n in ns],
                ["n", "PICASO-R ms per state", "PICASO-S ms per state", "Concat ms per 100 tokens processed"]))

    # 3. the weighted sum against a plain copy of the same states
    n = 10 if 10 in ns else max(ns)
    ssms = [s.ssm for s in states[:n]]
    W = composition_weights("picaso_r", torch.stack([s.log_decay for s in states[:n]]))
    stacked = torch.stack(ssms)
    buf = torch.empty_like(stacked)
    t = interleaved({"wsum": lambda: weighted_sum(W, ssms), "clone": stacked.clone,
                     "copy_": lambda: buf.copy_(stacked)}, 3 * repeats)
    S = ssms[0].numel() * ssms[0].element_size()
    moved = {"wsum": (n + 1) * S, "clone": 2 * n * S, "copy_": 2 * n * S}
    bw = {k: moved[k] / v for k, v in medians(t).items()}
    bw_min = {k: moved[k] / min(v) for k, v in t.items()}
    print(f"\n## Memory bandwidth of the weighted sum (ssm of n = {n} states, {n * S / 2**20:.0f} MiB)\n")
    print(table([[label, b, ms(t[k]), f"{bw[k] / 1e9:.1f}"]
                 for k, label, b in (("wsum", "weighted sum Σ W_k x_k", "(n+1)·state"),
                                     ("clone", "clone of the stacked states", "2n·state"),
                                     ("copy_", "copy_ into a preallocated buffer", "2n·state"))],
                ["op", "bytes read + written", "ms, median (min)", "GB/s at the median"]))
    if peak_bw:
        print(f"\nagainst the device's bandwidth ({peak_bw / 1e9:.0f} GB/s): weighted sum "
              f"{bw['wsum'] / peak_bw:.0%}, copy_ {bw['copy_'] / peak_bw:.0%} at the medians")
    print(f"\nweighted sum / clone: {bw['wsum'] / bw['clone']:.0%} at the medians, "
          f"{bw_min['wsum'] / bw_min['clone']:.0%} at the minima; / copy_: {bw['wsum'] / bw['copy_']:.0%} "
          f"and {bw_min['wsum'] / bw_min['copy_']:.0%}. clone pays page faults on its fresh allocation; "
          "copy_ into a warm buffer is the stricter limit. The weighted sum is n ops (copy_: one), "
          "and on an oversubscribed machine every parallel op can wait a scheduler slice: "
          "compare --threads 1.")

    # 4. scoring: one batched call vs one call per state (evaluate.run_methods)
    scoring = {}
    if not args.quick:
        q, c = contexts[0][:32], contexts[1][:32]
        few = states[:7]
        t = interleaved({"batched": lambda: model.continuation_losses(q, c, few),
                         "one by one": lambda: [model.continuation_loss(q, c, s) for s in few]},
                        repeats=1, warmup=False)
        scoring = {k: v[0] for k, v in t.items()}
        print(f"\n## Scoring 7 states (32 + 32 tokens each): batched {t['batched'][0]:.2f} s, "
              f"one by one {t['one by one'][0]:.2f} s ({t['one by one'][0] / t['batched'][0]:.1f}x)")

    n = 10 if 10 in ns else max(ns)
    print("\n## Targets")
    print(f"- PICASO-R vs Concat at n = {n}: {cmed[n] / med[n, 'picaso_r']:.0f}x faster (target >= 20x; "
          "paper 5.4x on GPU)")
    print(f"- PICASO-S / PICASO-R at n = {n}: {med[n, 'picaso_s'] / med[n, 'picaso_r']:.2f} (target <= 2)")
    print(f"- weighted sum bandwidth (medians): {bw['wsum'] / bw['clone']:.0%} of a clone, "
          f"{bw['wsum'] / bw['copy_']:.0%} of a copy_ (target >= 50%)")
    write_json(args, {"state_mib": state_mb, "database_build_s": db_s,
                      "state_methods_s": {n: {m: med[n, m] for m in STATE_METHODS} for n in ns},
                      "concat_s": cmed, "picconcat_r_s": picconcat, "bandwidth_gbs": {k: v / 1e9 for k, v in bw.items()},
                      "scoring_7_states_s": scoring},
               {"over_picaso_r": vs_r, "weighted_sum_bandwidth": {"vs_clone": bw["wsum"] / bw["clone"],
                                                                  "vs_copy_": bw["wsum"] / bw["copy_"]},
                "scoring_one_by_one_over_batched": scoring["one by one"] / scoring["batched"] if scoring else None})


if __name__ == "__main__":
    main()

"""Attribution from stored states vs by re-processing contexts, side by side in one run.

Leave-one-out of n = 10 contexts of ~100 tokens (query ~12 tokens, answer ~20 tokens):
  - LOO with PICASO-R (and the other state methods): the n + 1 states (all, all but one) are
    weighted sums of the stored states, then one batched forward over query + answer;
  - LOO with Concat: each subset's concatenation is processed from its first context's stored
    state (paper sec. 6.2), all subsets in one batched forward, then the same scoring;
  - the ablation surrogate (ContextCite): 64 random keep-masks, composed from states (PICASO-R)
    vs each kept subset's concatenation processed (Concat), then the same scoring and LASSO.
Encoding the contexts into states is the database build, done once before and charged to no one.
Models: the mamba2-130m shape with random weights (float32), then the bundled demo model.
Everything runs on the CPU with one torch thread (torch.set_num_threads(1)): on the shared 2-core
machines two threads wait on each other at random; one thread gives reproducible ratios.
Times are median (min) of `--repeats` interleaved rounds; the claims are the ratios.

    python bench/attribution_speed.py             # ~15 minutes on one shared core
    python bench/attribution_speed.py --quick     # n = 5, 50-token contexts, the 130m shape only
    python bench/attribution_speed.py --sentences --repeats 3   # per ablation, at sentence grain

--sentences: one demo QA sample (5 passages, 24 sentences), 64 random keep-masks over its
sentences; per ablation, the time to build its state (a) composed from the sentences' stored states
(CASO within each passage, PICASO-R across), (b) each ablated passage re-encoded then PICASO-R,
(c) ContextCite's way: all the kept text re-encoded (Concat), and (d) to score a state (query +
answer, batched): picaso_core.analysis.attribution_sources.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interleaved, medians, ms, parse, parser, ratios, table, write_json  # noqa: E402

from picaso_core import ModelConfig  # noqa: E402
from picaso_core.light.defaults import count  # noqa: E402

LOO = {"picaso_r": "PICASO-R", "picaso_s": "PICASO-S", "caso": "CASO", "soup": "Soup", "concat": "Concat"}


def measure(name: str, model, contexts: list[list[int]], query: list[int], answer: list[int], repeats: int,
            n_ablations: int) -> tuple[list[str], dict]:
    """The markdown lines of one model's table, and its figures (seconds, ratios to PICASO-R-LOO)."""
    from picaso_core.analysis.attribution import leave_one_out_tokens, surrogate  # imports torch: after parsing

    t0 = time.perf_counter()
    states = model.encode_contexts(contexts)
    build = time.perf_counter() - t0
    fns = {m: (lambda m=m: leave_one_out_tokens(model, query, answer, states, m, context_ids=contexts)) for m in LOO}
    fns["surrogate picaso_r"] = lambda: surrogate(model, query, answer, states, "picaso_r", n_ablations=n_ablations,
                                                  n_heldout=0, context_ids=contexts)
    fns["surrogate concat"] = lambda: surrogate(model, query, answer, states, "concat", n_ablations=n_ablations,
                                                n_heldout=0, context_ids=contexts)
    for k, fn in fns.items():  # warm-up (allocator, first-call paths) of the fast ones; Concat's take minutes
        if "concat" not in k:
            fn()
    # ~n_ablations concatenations: one round of the Concat surrogate is enough (minutes on one core)
    times = interleaved(fns, repeats, warmup=False, rounds={"surrogate concat": 1},
                        progress=lambda r, k, s: print(f"  [{name}] round {r + 1}: {k} {s:.2f} s", file=sys.stderr,
                                                       flush=True))
    n, tok = len(contexts), sum(map(len, contexts))
    med = medians(times)
    vs = ratios(med, "picaso_r")
    lines = [
        f"### {name}: n = {n} contexts, {tok} context tokens (mean {tok / n:.0f}), query {len(query)} "
        f"tokens, answer {len(answer)} tokens; database build (encoding the {n} states, not charged) "
        f"{1e3 * build:.0f} ms",
        "",
        table([[f"LOO {LOO[k]}" if k in LOO else
                f"surrogate, {n_ablations} ablations, {'PICASO-R' if 'picaso' in k else 'Concat'}",
                ms(times[k], 0), f"{vs[k]:.2f}x"] for k in fns],
              ["attribution", "ms, median (min)", "vs PICASO-R-LOO"]),
        "",
        f"- **Concat-LOO / PICASO-R-LOO = {med['concat'] / med['picaso_r']:.1f}x** (target >= 20x)",
        f"- **surrogate ({n_ablations} ablations) by concatenation / from states = "
        f"{med['surrogate concat'] / med['surrogate picaso_r']:.1f}x**",
        "",
    ]
    return lines, {"contexts": n, "context_tokens": tok, "database_build_s": build, "seconds": med,
                   "ratios": {"over_picaso_r_loo": vs,
                              "surrogate_concat_over_states": med["surrogate concat"] / med["surrogate picaso_r"]}}


def demo_inputs(target_tokens: int, n: int):
    """The demo model and n contexts of ~target_tokens tokens (consecutive held-out chunks joined),
    with the first held-out QA sample's question and answer."""
    from picaso_core.data import load_corpus
    from picaso_core.engine.loading import load_model

    model = load_model("demo")
    tok = model.tokenizer
    corpus = load_corpus("demo", "test", kind="qa")
    chunks = iter(corpus.database.values())
    contexts = []
    while len(contexts) < n:
        ids: list[int] = []
        while len(ids) < target_tokens:
            ids += tok.encode(next(chunks) + "\n\n")
        contexts.append(ids)
    s = corpus.samples[0]
    return model, contexts, tok.encode(s.query), tok.encode(s.continuation)


def sentence_grain(repeats: int, n_masks: int = 64, seed: int = 0) -> tuple[list[str], dict]:
    """Per-ablation times at sentence grain on the demo model (see --sentences above)."""
    import numpy as np

    from picaso_core.analysis.attribution import token_nll
    from picaso_core.analysis.attribution_sources import ablated_states
    from picaso_core.analysis.sources import encode_sources, make_sources
    from picaso_core.data import load_corpus
    from picaso_core.engine.loading import load_model
    from picaso_core.engine.state import ContextState

    model = load_model("demo")
    tok = model.tokenizer
    s = next(x for x in load_corpus("demo", "test", kind="qa").samples if x.sample_id == "demo-test-q0035")
    q, a = tok.encode(s.query), tok.encode(s.continuation)
    sources = make_sources(tok, list(s.contexts), "sentence", suffix="\n\n")
    states = encode_sources(model, sources)
    masks = np.random.default_rng(seed).random((n_masks, len(sources))) < 0.5
    built = ablated_states(model, sources, states, masks, "picaso_r", "states")
    batch = ContextState.stack(built)
    fns = {"compose (states)": lambda: ablated_states(model, sources, states, masks, "picaso_r", "states"),
           "re-encode passages, PICASO-R": lambda: ablated_states(model, sources, states, masks, "picaso_r", "reencode"),
           "re-encode all kept text (Concat)": lambda: ablated_states(model, sources, states, masks, "concat", "reencode"),
           "score (query + answer)": lambda: token_nll(model, q, a, batch)}
    times = interleaved(fns, repeats)
    med = medians(times)
    per = {k: v / n_masks for k, v in med.items()}
    base = per["compose (states)"]
    tokens = sum(len(x.ids) for x in sources)
    lines = [f"### sentence grain, demo model: {len(s.contexts)} passages, {len(sources)} sentences, {tokens} tokens; "
             f"{n_masks} random ablations (keep 1/2)", "",
             table([[k, f"{1e3 * v:.2f}", f"{v / base:.1f}x"] for k, v in per.items()],
                   ["per ablation", "ms, median", "vs compose"]), "",
             f"- **re-encoding (Concat) / composing = {per['re-encode all kept text (Concat)'] / base:.1f}x** to build "
             f"an ablated state; with scoring: {(per['re-encode all kept text (Concat)'] + per['score (query + answer)']) / (base + per['score (query + answer)']):.1f}x", ""]
    return lines, {"ms_per_ablation": {k: 1e3 * v for k, v in per.items()}}


def main() -> None:
    ap = parser(__doc__, threads=1, repeats=2, quick="n = 5, 50-token contexts, 130m shape only",
                helps={"threads": "torch threads (default 1: see above)"})
    ap.add_argument("--ablations", type=count(2), default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sentences", action="store_true", help="per-ablation times at sentence grain only")
    args = parse(ap)
    # after the arguments: --help and a bad value answer without importing torch (issue 48)
    import torch

    from picaso_core import SSMLanguageModel

    if args.sentences:
        out, figures = sentence_grain(args.repeats, seed=args.seed)
        print("\n".join(out))
        write_json(args, figures)
        return
    n, ctx_len = (5, 50) if args.quick else (10, 100)
    torch.manual_seed(args.seed)
    cfg = ModelConfig(d_model=768, n_layer=24, vocab_size=50277, ssm_cfg=dict(layer="Mamba2"),
                      pad_vocab_size_multiple=16)
    model = SSMLanguageModel(cfg).eval()
    g = torch.Generator().manual_seed(args.seed)
    rand = lambda k: torch.randint(0, cfg.vocab_size, (k,), generator=g).tolist()  # noqa: E731
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), float32, CPU\n")
    out, figures = measure("mamba2-130m shape, random weights", model, [rand(ctx_len) for _ in range(n)], rand(12),
                           rand(20), args.repeats, args.ablations)
    print("\n".join(out), flush=True)
    results = {"mamba2-130m shape": figures}
    if not args.quick:
        dm, contexts, q, a = demo_inputs(ctx_len, n)
        out, results["demo model"] = measure("demo model", dm, contexts, q, a, args.repeats, args.ablations)
        print("\n".join(out))
    write_json(args, {k: {f: v for f, v in r.items() if f != "ratios"} for k, r in results.items()},
               {k: r["ratios"] for k, r in results.items()})


if __name__ == "__main__":
    main()

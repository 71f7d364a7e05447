"""Attribution precision on the held-out demo QA split (PICASO table 4's protocol), beside the paper.

For every sample (a question, its answer and its 3-5 candidate passages, one labelled gold, in the
order the corpus gives them, as MS MARCO's), each method scores the passages and its top one is
compared with the gold label:
    LOI          the answer's loss from each passage's state alone (lowest wins)
    LOO <method> the answer's loss rise when the passage is left out of the composition (highest wins)
    Surrogate    ContextCite's LASSO over 64 random ablations composed with PICASO-R (+16 held out)
Also: the mean per-sample Spearman correlation of each method's scores with Concat-LOO's, how
often its top-1 is Concat-LOO's, its time per sample, and chance (1 / number of passages).
Prints the table and writes the model card section assets/demo_model/card_attribution.md.

    python scripts/measure_attribution.py                          # demo model, 200 held-out samples
    python scripts/measure_attribution.py --samples 50 --no-card   # quicker, prints only
    python scripts/measure_attribution.py --model state-spaces/mamba2-2.7b --corpus msmarco --split validation --no-card
    python scripts/measure_attribution.py --all-kept --samples 50 [--conv-window 0]

--all-kept: how far every sentence kept, each passage composed (CASO) from its sentences' states,
is from the passages' own states: |L(PICASO-R of the composed passages) - L(PICASO-R of the stored
passages)| per sample (nats per answer token). --conv-window 0 encodes each sentence from the empty
state instead of after the previous sentence's conv window (picaso_core.analysis.sources).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picaso_core.analysis.evaluate import METHODS  # noqa: E402
from picaso_core.light.assets import ASSETS  # noqa: E402
from picaso_core.data import load_corpus  # noqa: E402
from picaso_core.light.defaults import count, number  # noqa: E402

# torch, the model, picaso_core.analysis.attribution and the session are imported where they run, after
# the arguments are read (--help and a bad value answer at once, issue 48); so the names the flags need:
LOO_METHODS = METHODS[1:]  # attribution.LOO_METHODS (tests/scripts/test_cli_startup.py checks they agree)
ALL_METHODS = ("loi", *LOO_METHODS, "surrogate")


def method_list(text: str) -> str:
    """argparse `type=` of --methods: a comma list of ALL_METHODS."""
    if set(text.split(",")) - set(ALL_METHODS):  # main splits it as written: no empty name
        raise argparse.ArgumentTypeError(f"{text!r}: a comma list of {','.join(ALL_METHODS)}")
    return text


def all_kept(args) -> None:
    """Print the |ΔL| of every sentence kept vs the passages' own states (see --all-kept)."""
    import numpy as np
    import torch

    from picaso_core import load_model
    from picaso_core.analysis.attribution_sources import ablation_losses
    from picaso_core.analysis.sources import encode_sources, make_sources
    from picaso_core.session import CONTEXT_SUFFIX

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    tok = model.tokenizer
    window = model.config.ssm_cfg.d_conv - 1 if args.conv_window is None else args.conv_window
    gaps = []
    for s in [s for s in load_corpus(args.corpus, args.split, kind="qa").samples if s.contexts][: args.samples]:
        q, a = tok.encode(s.query), tok.encode(s.continuation)
        losses = []
        for grain in ("context", "sentence"):
            src = make_sources(tok, list(s.contexts), grain, suffix=CONTEXT_SUFFIX, conv_window=window)
            losses.append(float(ablation_losses(model, q, a, src, encode_sources(model, src),
                                                np.ones((1, len(src)))).mean()))
        gaps.append(losses[1] - losses[0])
    g = np.abs(gaps)
    print(f"{len(g)} samples, conv window {window}: |dL| median {np.median(g):.3f}, mean {g.mean():.3f}, "
          f"90th percentile {np.quantile(g, 0.9):.3f}, max {g.max():.3f}; signed mean {np.mean(gaps):+.3f} nats/token")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="demo")
    ap.add_argument("--corpus", default="demo", help="demo | msmarco (online) | a .jsonl with gold ids")
    ap.add_argument("--split", default="test")
    ap.add_argument("--samples", type=count(1), default=200)
    ap.add_argument("--no-surrogate", action="store_true", help="skip the 64-ablation surrogate")
    ap.add_argument("--no-card", action="store_true", help="print only; do not write the card section")
    ap.add_argument("--json", default=None, help="also write every per-sample score here")
    ap.add_argument("--threads", type=count(1), default=1)
    ap.add_argument("--methods", type=method_list, default=None,
                    help="comma-separated subset of: loi," + ",".join(LOO_METHODS)
                    + ",surrogate (default: all)")
    ap.add_argument("--minutes", type=number(above=0), default=None,
                    help="stop after this many minutes and report the samples done (they are taken in order)")
    ap.add_argument("--all-kept", action="store_true", help="sentences composed vs the passages' states (see above)")
    ap.add_argument("--conv-window", type=count(0), default=None,
                    help="--all-kept: tokens of conv window (default d_conv-1)")
    args = ap.parse_args()
    if args.all_kept:
        return all_kept(args)
    import torch
    from tqdm import tqdm

    from picaso_core import load_model
    from picaso_core.analysis.attribution import PAPER_TABLE4, attribution_precision, summarize_precision
    from picaso_core.session import CONTEXT_SUFFIX

    torch.set_num_threads(args.threads)

    model = load_model(args.model)
    corpus = load_corpus(args.corpus, args.split, kind="qa") if args.corpus in ("demo", "msmarco") \
        else load_corpus(args.corpus, args.split)
    samples = [s for s in corpus.samples if s.gold_ids][: args.samples]
    methods = tuple(args.methods.split(",")) if args.methods else \
        ("loi",) + LOO_METHODS + (() if args.no_surrogate else ("surrogate",))
    bar = tqdm(total=len(samples), desc="attribution precision", unit="sample")
    t0 = time.perf_counter()
    records = []
    for i in range(0, len(samples), 5):  # 5 samples at a time, so that --minutes can stop between them
        part = attribution_precision(model, samples[i:i + 5], methods, context_suffix=CONTEXT_SUFFIX,
                                     progress=lambda i, n: bar.update(1), surrogate_kw=dict(n_ablations=64, seed=0))
        records += part.records
        if args.minutes is not None and time.perf_counter() - t0 > 60 * args.minutes:
            break
    bar.close()
    res = summarize_precision(records, methods)
    samples = samples[: len(records)]
    minutes = (time.perf_counter() - t0) / 60
    chance = sum(len(s.gold_ids) / len(s.contexts) for s in samples) / len(samples)
    ns = sorted({len(s.contexts) for s in samples})
    order = sorted((m for m in methods if m != "surrogate"), key=lambda m: -res.precision[m])
    from picaso_core.analysis.attribution import NAMES

    order_line = " > ".join(f"{'LOI' if m == 'loi' else NAMES[m]} {res.precision[m]:.3f}" for m in order)
    pr, pc = res.precision.get("picaso_r"), res.precision.get("concat")
    verdict = ("at least as precise as" if pr >= pc else "less precise than") if pr is not None and pc is not None else "?"
    cmd = "python scripts/measure_attribution.py" + (f" --model {args.model}" if args.model != "demo" else "") + \
        (f" --corpus {args.corpus} --split {args.split}" if args.corpus != "demo" else "") + \
        (f" --samples {args.samples}" if args.samples != 200 else "") + \
        (f" --methods {args.methods}" if args.methods else "") + (f" --minutes {args.minutes:g}" if args.minutes else "")
    text = (
        f"## Attribution (PICASO appendix C, table 4)\n\n"
        f"`{cmd}` ({minutes:.1f} min on one CPU thread): {len(samples)} held-out {corpus.name}/{corpus.split} QA "
        f"samples, {'/'.join(map(str, ns))} candidate passages each with one gold, in the corpus's order "
        f"(the gold one anywhere); precision = how often the top-scored passage is the gold one. "
        f"Chance: **{chance:.3f}**. The paper's column: MS MARCO with Mamba2-2.7B.\n\n"
        f"{res.table()}\n"
        f"| chance (1 / passages) | {chance:.3f} | - | - | - | - |\n\n"
        f"Order found: {order_line}. LOO with PICASO-R is **{verdict}** LOO with Concat here "
        f"({pr:.3f} vs {pc:.3f}; the paper: 0.732 vs 0.690). Spearman: per sample, between a method's "
        f"scores and Concat-LOO's, averaged over samples where both vary.\n"
    )
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"precision": res.precision, "spearman": res.spearman_vs_concat,
                                               "top1": res.top1_agrees_with_concat, "seconds": res.seconds,
                                               "chance": chance, "records": res.records, "paper": PAPER_TABLE4}))
    if not args.no_card:
        if args.model != "demo":
            print("not writing the demo card for another model (pass --no-card)", file=sys.stderr)
            return
        out = ASSETS / "demo_model" / "card_attribution.md"  # loading.DEMO_MODEL_DIR
        out.write_text(text)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Faithfulness of attribution, state composition vs re-encoding, at context and sentence grain.

    python -m picaso_core.analysis.attribution_eval --corpus demo --samples 50 --grain sentence \\
        --ablations 32,64,256

For each sample (its query, its answer, its candidate contexts in the corpus's order), each grain
and each way:
    states    every ablation composed from stored states: sources.compose_kept (CASO of the kept
              sentences) per context, then PICASO-R across contexts; no context token read
    reencode  ContextCite's ablation: the kept text of every context read again in one pass
              (Concat from the empty state)
it draws max(--ablations) + --heldout random keep-masks (each source kept with p = 1/2, one seed
per sample, the same masks for both ways), scores the answer from each, and reports
    LDS@n     Spearman(surrogate prediction, actual loss) on the held-out masks, for a LASSO fitted
              on the first n masks (ContextCite's linear datamodeling score)
    top-k     the answer loss with the k highest-scored sources removed minus the loss with all
              kept (k = 1, 3), for the surrogate's scores at the largest n and for leave-one-out;
              measured with the way's own loss and with the exact one (re-encoding)
    s / abl.  seconds to build and score one ablation (distinct masks only)
Records go to <out>/records.jsonl as each sample finishes (a rerun skips the samples done), the
table to <out>/summary.json and <out>/table.md, rewritten after each sample; progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from picaso_core.light.defaults import count

# The analyses (torch) are imported by the functions that run them: a command's work, after its
# arguments, so that `--help` and a bad value answer at once.

SUFFIX = "\n\n"  # every context is stored as text + "\n\n" (data/demo_world.py CONTEXT_SEP; the app's store)
WAYS = {"states": ("picaso_r", "states"), "reencode": ("concat", "reencode")}  # way -> (method, way)
KS = (1, 3)


def scorer(model, q, a, sources, states, method: str, way: str):
    """masks [m, N] -> (mean answer loss [m], seconds per distinct mask): each distinct row once."""
    from picaso_core.analysis.attribution_sources import ablation_losses  # torch: the run's, not --help's

    def score(masks: np.ndarray):
        uniq, inverse = np.unique(np.asarray(masks, dtype=bool), axis=0, return_inverse=True)
        t0 = time.perf_counter()
        loss = ablation_losses(model, q, a, sources, states, uniq, method, way).mean(1)
        return loss[np.asarray(inverse).reshape(-1)], (time.perf_counter() - t0) / len(uniq)
    return score


def evaluate_sample(model, sample, grain: str, counts: Sequence[int], heldout: int, seed: int,
                    ways: Sequence[str] = tuple(WAYS)) -> dict:
    """One sample's record: per way, LDS per ablation count, top-k drops, seconds per ablation."""
    from picaso_core.analysis.attribution import fit_surrogate  # torch: the run's, not --help's
    from picaso_core.analysis.attribution_sources import loo_masks
    from picaso_core.analysis.sources import encode_sources, make_sources

    tok = model.tokenizer
    q, a = tok.encode(sample.query), tok.encode(sample.continuation)
    contexts = [(cid, text) for cid, text in sample.contexts]
    k = model.config.ssm_cfg.d_conv - 1
    sources = make_sources(tok, contexts, grain, suffix=SUFFIX, conv_window=k)
    t0 = time.perf_counter()
    states = encode_sources(model, sources)
    encode_s = time.perf_counter() - t0
    n, big = len(sources), max(counts)
    rng = np.random.default_rng(seed)
    masks = (rng.random((big + heldout, n)) < 0.5)
    gold = set(sample.gold_ids or ())
    rec = {"sample_id": sample.sample_id, "grain": grain, "n_sources": n, "n_contexts": len(contexts),
           "encode_sources_s": encode_s, "ways": {}}
    exact = scorer(model, q, a, sources, states, *WAYS["reencode"])
    for name in ways:
        score = scorer(model, q, a, sources, states, *WAYS[name])
        losses, per_abl = score(masks)
        lds = {}
        for c in counts:
            fit = fit_surrogate(masks[:c], losses[:c], masks[big:], losses[big:])
            lds[c] = fit.lds
        sur_scores = fit.scores  # the largest count's
        loo_loss, _ = score(loo_masks(n))
        loo_scores = (loo_loss[1:] - loo_loss[0]).tolist()
        drops = {}
        for label, sc in (("surrogate", sur_scores), ("loo", loo_scores)):
            order = np.argsort(-np.asarray(sc), kind="stable")
            rows = np.ones((1 + len(KS), n), dtype=bool)
            for r, kk in enumerate(KS, 1):
                rows[r, order[:kk]] = False
            own, _ = score(rows)
            ref, _ = exact(rows) if name != "reencode" else (own, 0)
            drops[label] = {"own": {kk: float(own[r] - own[0]) for r, kk in enumerate(KS, 1)},
                            "exact": {kk: float(ref[r] - ref[0]) for r, kk in enumerate(KS, 1)},
                            "top_in_gold": sources[int(order[0])].context_id in gold if gold else None}
        rec["ways"][name] = {"lds": lds, "drops": drops, "s_per_ablation": per_abl, "full_loss": float(loo_loss[0]),
                             "loo": loo_scores, "surrogate": sur_scores}
    return rec


def summarize(records: list[dict], counts: Sequence[int]) -> dict:
    """Means over samples per (grain, way): LDS per count, top-k drops, seconds per ablation."""
    out: dict = {}
    for rec in records:
        for way, r in rec["ways"].items():
            row = out.setdefault(f"{rec['grain']}/{way}", {"grain": rec["grain"], "way": way, "n": 0, "_": []})
            row["n"] += 1
            row["_"].append(r)
    for row in out.values():
        rs = row.pop("_")
        mean = lambda xs: float(np.nanmean(xs)) if len(xs) and not all(map(math.isnan, xs)) else math.nan  # noqa: E731
        row["lds"] = {c: mean([r["lds"][c] if c in r["lds"] else r["lds"][str(c)] for r in rs]) for c in counts}
        for label in ("surrogate", "loo"):
            for src in ("own", "exact"):
                for kk in KS:
                    row[f"{label}_top{kk}_{src}"] = mean([_get(r["drops"][label][src], kk) for r in rs])
            tops = [r["drops"][label]["top_in_gold"] for r in rs if r["drops"][label]["top_in_gold"] is not None]
            row[f"{label}_top_in_gold"] = float(np.mean(tops)) if tops else math.nan
        row["s_per_ablation"] = mean([r["s_per_ablation"] for r in rs])
        row["full_loss"] = mean([r["full_loss"] for r in rs])
    return out


def _get(d: dict, k):
    return d[k] if k in d else d[str(k)]


def table(summary: dict, counts: Sequence[int]) -> str:
    """Markdown: one row per (grain, way)."""
    head = ("| grain | way | samples | " + " | ".join(f"LDS@{c}" for c in counts) +
            " | top-1 drop (sur / LOO) | top-3 drop (sur / LOO) | top-1 drop, exact loss (sur / LOO) | "
            "ms / ablation | loss, all kept |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for key in sorted(summary):
        r = summary[key]
        f = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"  # noqa: E731
        rows.append(f"| {r['grain']} | {r['way']} | {r['n']} | " + " | ".join(f(r['lds'][c]) for c in counts) +
                    f" | {f(r['surrogate_top1_own'])} / {f(r['loo_top1_own'])}"
                    f" | {f(r['surrogate_top3_own'])} / {f(r['loo_top3_own'])}"
                    f" | {f(r['surrogate_top1_exact'])} / {f(r['loo_top1_exact'])}"
                    f" | {1e3 * r['s_per_ablation']:.1f} | {f(r['full_loss'])} |")
    return "\n".join(rows)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m picaso_core.analysis.attribution_eval",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="demo, a local folder or a hub id (online)")
    p.add_argument("--corpus", default="demo", help="demo, msmarco, or a .jsonl with gold-labelled QA samples")
    p.add_argument("--split", default="test")
    p.add_argument("--samples", type=count(0), default=50)
    p.add_argument("--first", type=count(0), default=0, help="index of the first sample (split a run across processes)")
    p.add_argument("--grain", type=_among(("context", "sentence", "word"), "grains"), default="sentence",
                   help="context, sentence, word, or a comma list (context,sentence)")
    p.add_argument("--ablations", type=_ablations, default="32,64,256", help="surrogate sizes, comma-separated")
    p.add_argument("--heldout", type=count(0), default=64, help="held-out masks for the LDS")
    p.add_argument("--ways", type=_among(WAYS, "ways"), default="states,reencode")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/attribution_eval")
    return p.parse_args(argv)




def _among(valid: Sequence[str], what: str):
    def check(text: str) -> str:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in valid]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} are {', '.join(valid)} (a comma list)")
        return text
    return check


def _ablations(text: str) -> str:
    try:
        counts = {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        counts = set()
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers of at least 2 separated by commas, "
                                         "e.g. 32,64,256")
    return text


def main(argv=None) -> dict:
    args = parse_args(argv)
    # after the arguments: --help answers without loading the corpora and engine.model
    from picaso_core.data import load_corpus
    from picaso_core.engine.loading import load_model

    counts = sorted({int(x) for x in args.ablations.split(",") if x.strip()})  # checked by parse_args
    grains = [g.strip() for g in args.grain.split(",") if g.strip()]
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    model = load_model(args.model)
    kind = "qa" if args.corpus == "demo" else None
    samples = [s for s in load_corpus(args.corpus, args.split, kind=kind).samples if s.contexts]
    samples = list(enumerate(samples))[args.first: args.first + args.samples]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    done = {(r["sample_id"], r["grain"]) for r in records}
    t_start = time.perf_counter()
    todo = [(g, j, s) for g in grains for j, s in samples if (s.sample_id, g) not in done]
    for i, (g, j, s) in enumerate(todo, 1):
        t0 = time.perf_counter()
        rec = evaluate_sample(model, s, g, counts, args.heldout, args.seed + j, ways)
        records.append(rec)
        with path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        summary = summarize(records, counts)
        (out / "summary.json").write_text(json.dumps({"args": vars(args), "rows": summary}, indent=1))
        (out / "table.md").write_text(table(summary, counts) + "\n")
        print(f"[{i}/{len(todo)}] {g} {s.sample_id}: {rec['n_sources']} sources, {time.perf_counter() - t0:.1f} s "
              f"({time.perf_counter() - t_start:.0f} s in all)", file=sys.stderr, flush=True)
    summary = summarize(records, counts)
    (out / "summary.json").write_text(json.dumps({"args": vars(args), "rows": summary}, indent=1))
    (out / "table.md").write_text(table(summary, counts) + "\n")
    print(table(summary, counts))
    return summary


if __name__ == "__main__":
    main()

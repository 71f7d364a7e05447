"""PICASO on a hybrid: `demo` (pure Mamba-2) vs `demo-hybrid` (Nemotron-H layout) side by side, in one run.

    python scripts/measure_hybrid.py                                   # 200 held-out samples, k = 0..10 (docs/hybrid.md)
    python scripts/measure_hybrid.py --samples 20 --ks 0,5,10 --out /tmp/hy   # a quick look

For each model, the experiments' protocol (picaso_core.analysis.sweep.run_sweep: MiniLM top-k of the demo
test database, most relevant last, every method of the paper) plus, on a hybrid, the ablation: PICASO-R's
SSM part with the attention layers' keys and values dropped (compose(..., attention="drop")). Prints one
table (loss at --table-k per method and model, PICASO-R's share of Concat's gain, compose time against
Concat's forward time, bytes per stored context against its tokens) and writes <out>/hybrid.json and
<out>/loss_vs_k.html (loss against k, both models; scripts/screenshots-style PNG with --png).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picaso_core.light.defaults import count  # noqa: E402  (light: no torch before the arguments are read)

from picaso_core.compose.registry import ABLATION, colour, label  # noqa: E402  (the methods' one home; torch-free)

NAMES = {m: label(m, "short") for m in ("none", "concat", "soup", "caso", "picaso_s", "picaso_r", "picconcat_r", ABLATION)}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="demo,demo-hybrid", help="comma-separated: bundled names or folders")
    ap.add_argument("--samples", type=count(1), default=200, help="held-out demo retrieval samples (test split)")
    ap.add_argument("--ks", default="0-10", help="numbers of contexts: 0-10, or a list such as 0,2,5")
    ap.add_argument("--table-k", type=count(1), default=10, help="the k of the table")
    ap.add_argument("--timed", type=count(0), default=20, help="samples whose states are each built and timed alone")
    ap.add_argument("--threads", type=count(0), default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default="runs/hybrid", help="folder for hybrid.json and loss_vs_k.html")
    ap.add_argument("--png", default=None, help="also save the figure as this PNG (headless Chromium)")
    ap.add_argument("--merge", default=None, help="comma-separated --out folders of earlier runs (one model each, run "
                    "side by side): their table and figure instead of a new run")
    args = ap.parse_args(argv)
    from picaso_core.analysis.sweep import parse_ks  # light (no torch)
    try:
        args.ks = parse_ks(args.ks)
    except ValueError as e:
        ap.error(str(e))
    if args.table_k not in args.ks:
        ap.error(f"--table-k {args.table_k} is not in --ks {args.ks}")
    return args


def measure(name: str, args, corpus, database, minilm) -> dict:
    """One model: the sweep's records, the ablation's losses and the bytes of every stored context."""
    import torch  # after the arguments are read

    from picaso_core.analysis.evaluate import METHODS
    from picaso_core.analysis.sweep import CONTEXT_SUFFIX, ContextSource, MemoryLog, run_sweep
    from picaso_core.compose import compose
    from picaso_core.engine.loading import load_model
    from picaso_core.retrieval.rankers import make_ranker, presented, rank_sample

    model = load_model(name, dtype=torch.float32)
    tok = model.tokenizer
    hybrid = getattr(model.config, "n_attn_layers", 0) > 0
    ids_of, states = {}, {}

    def token_ids(cid):
        if cid not in ids_of:
            ids_of[cid] = tok.encode(database[cid] + CONTEXT_SUFFIX)
        return ids_of[cid]

    def prepare(cids):
        new = [c for c in cids if c not in states]
        for c, st in zip(new, model.encode_contexts([token_ids(c) for c in new])):
            states[c] = st

    ranker = make_ranker("minilm", database, minilm)
    samples = corpus.samples[: args.samples]
    log = MemoryLog()
    t0 = time.perf_counter()
    run_sweep(model, samples, ranker, ContextSource(lambda cids: [states[c] for c in cids], token_ids, prepare),
              args.ks, log, METHODS, timed=args.timed)
    sweep_s = time.perf_counter() - t0
    records = list(log.records.values())
    if hybrid:  # the ablation beside the methods: same rankings, same states
        for s in samples:
            q, c = tok.encode(s.query), tok.encode(s.continuation)
            ranking = rank_sample(ranker, s, max(args.ks))
            for k in args.ks:
                cids = presented(ranking, k)
                if not cids:
                    continue
                t1 = time.perf_counter()
                st = compose("picaso_r", [states[x] for x in cids], attention="drop", config=model)
                dt = time.perf_counter() - t1
                records.append({"sample_id": s.sample_id, "k": k, "method": ABLATION, "compose_s": dt,
                                "loss": model.continuation_loss(q, c, st)})
    sizes = [(int(st.num_tokens), int(st.nbytes)) for st in states.values()]
    return {"model": Path(name).name, "hybrid": hybrid, "family": getattr(model.config, "model_type", model.config.family),
            "layers": getattr(model.config, "layer_types", None), "records": records, "sizes": sizes,
            "sweep_s": sweep_s}


def summarise(run: dict, ks, table_k: int) -> dict:
    """Mean loss per (method, k); compose time at table_k; bytes = a + b * tokens (least squares)."""
    by: dict = {}
    for r in run["records"]:
        by.setdefault((r["method"], r["k"]), []).append(r)
    loss = {m: {k: sum(x["loss"] for x in by[(m, k)]) / len(by[(m, k)]) for k in ks if (m, k) in by}
            for m in {m for m, _ in by}}
    for m in loss:  # k = 0 is the empty state for every method
        if 0 in ks and 0 not in loss[m] and ("none", 0) in by:
            loss[m][0] = loss["none"][0]
    times = {}
    for m in loss:
        t = [x["compose_s"] for x in by.get((m, table_k), []) if x.get("compose_s") is not None]
        if t:
            times[m] = sum(t) / len(t)
    n = len(run["sizes"])
    mx = sum(t for t, _ in run["sizes"]) / n
    my = sum(b for _, b in run["sizes"]) / n
    var = sum((t - mx) ** 2 for t, _ in run["sizes"])
    slope = sum((t - mx) * (b - my) for t, b in run["sizes"]) / var if var else 0.0
    none, concat, pr = (loss.get(m, {}).get(table_k) for m in ("none", "concat", "picaso_r"))
    share = (none - pr) / (none - concat) if None not in (none, concat, pr) and none != concat else None
    return {"loss": loss, "compose_s": times, "share": share, "bytes_fixed": my - slope * mx,
            "bytes_per_token": slope, "mean_tokens": mx}


def table(runs: list[dict], sums: list[dict], k: int) -> str:
    methods = [m for m in NAMES if any(m in s["loss"] for s in sums)]
    head = "| method | " + " | ".join(f"{r['model']}: loss at k={k} | compose ms" for r in runs) + " |"
    rows = [head, "|---|" + "---|---|" * len(runs)]
    for m in methods:
        cells = []
        for s in sums:
            lk = s["loss"].get(m, {}).get(k)
            t = s["compose_s"].get(m)
            cells.append(f"{lk:.3f}" if lk is not None else "n/a")
            cells.append(f"{1e3 * t:.1f}" if t is not None else "")
        rows.append(f"| {NAMES[m]} | " + " | ".join(cells) + " |")
    rows.append("| PICASO-R's share of Concat's gain | " + " | ".join(
        (f"{100 * s['share']:.0f}%" if s["share"] is not None else "n/a") + " | " for s in sums) + "|")
    rows.append("| bytes per stored context | " + " | ".join(
        f"{s['bytes_fixed'] / 1e3:,.0f} KB + {s['bytes_per_token'] / 1e3:,.2f} KB per token | " for s in sums) + "|")
    return "\n".join(rows)


def figure(runs, sums, ks):
    import plotly.graph_objects as go  # only for the figure

    fig = go.Figure()
    # one colour per method on both models (solid: the pure model, dashed: the hybrid); the ablation is
    # PICASO-R's colour, dotted, so that the gap to PICASO-R is what the attention layers carry
    colours = {m: colour(m) for m in NAMES} | {ABLATION: colour("picaso_r")}
    for run, s in zip(runs, sums):
        for m in ("none", "concat", "caso", "picaso_r", "picconcat_r", ABLATION):
            if m in s["loss"]:
                xs = [k for k in ks if k in s["loss"][m]]
                dash = "dot" if m == ABLATION else "dash" if run["hybrid"] else "solid"
                fig.add_trace(go.Scatter(x=xs, y=[s["loss"][m][k] for k in xs], mode="lines+markers",
                                         name=f"{run['model']}: {NAMES[m]}", line=dict(dash=dash, color=colours[m],
                                                                                       width=2.5),
                                         marker=dict(symbol="circle" if not run["hybrid"] else "diamond", size=8)))
    fig.update_layout(title="Loss vs number of contexts k: demo (solid) and demo-hybrid (dashed)",
                      xaxis_title="k (retrieved contexts, most relevant last)", yaxis_title="loss (nats per token)",
                      width=1000, height=560, font=dict(size=15), template="plotly_white")
    return fig


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch  # after the arguments are read

    from picaso_core.data import DEMO_DATA_DIR, load_corpus
    from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder

    if args.threads:
        torch.set_num_threads(args.threads)
    corpus = load_corpus("demo", "test", kind="retrieval")
    database = dict(corpus.database)
    emb = SentenceEmbedder()
    minilm = Retriever.cached(database, emb, None, seeds=[DEMO_DATA_DIR / f"test_database.{emb.name}.safetensors"])
    runs = []
    for name in [] if args.merge else [m.strip() for m in args.models.split(",") if m.strip()]:
        print(f"{name}: {args.samples} samples x k in {args.ks} ...", flush=True)
        runs.append(measure(name, args, corpus, database, minilm))
        print(f"  {runs[-1]['sweep_s']:.0f} s", flush=True)
    for folder in (args.merge or "").split(","):
        if folder.strip():
            runs += json.loads((Path(folder.strip()) / "runs.json").read_text())
    sums = [summarise(r, args.ks, args.table_k) for r in runs]
    text = table(runs, sums, args.table_k)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(runs))
    (out / "hybrid.json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items()}, "summaries": [
        {"model": r["model"], "family": r["family"], "layers": r["layers"], **s} for r, s in zip(runs, sums)],
        "table": text}, indent=1, default=str))
    fig = figure(runs, sums, args.ks)
    fig.write_html(out / "loss_vs_k.html", include_plotlyjs="cdn" if not args.png else True,
                   config={"displayModeBar": False})
    if args.png:
        import subprocess  # headless Chromium draws the HTML (no kaleido needed)

        subprocess.run(["chromium", "--headless", "--no-sandbox", "--hide-scrollbars", "--window-size=1000,560",
                        f"--screenshot={Path(args.png).resolve()}", (out / "loss_vs_k.html").resolve().as_uri()],
                       check=True, capture_output=True)
    print(f"wrote {out / 'hybrid.json'} and {out / 'loss_vs_k.html'}" + (f" and {args.png}" if args.png else ""))


if __name__ == "__main__":
    main()

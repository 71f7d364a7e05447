"""Figures of the experiments (PICASO fig. 3, 5-9, table 1) from a summary dict
(`picaso_core.experiments.summarize`; summary.json). Shared by report.html and the Benchmarks tab.

Pure functions of plain data: no Gradio, no model. Each returns a plotly Figure with axis titles
and units, a legend and hover text.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from picaso_core.analysis.summaries import TABLE_METHODS, ks_text
from picaso_core.compose.registry import REGISTRY, label

# the methods' labels and colours: the registry's (picaso_core/compose/registry.py)
NAMES = {m.name: label(m.name, "plot") for m in REGISTRY}
COLORS = {m.name: m.colour for m in REGISTRY}
DASH = {"none": "dot", "picaso_s": "dash"}  # PICASO-S overlaps PICASO-R (paper fig. 3): dash it
RETRIEVER_COLORS = {"minilm": "#ea580c", "bm25": "#16a34a", "random": "#6b7280", "mpnet": "#7c3aed", "glove": "#0ea5e9"}
HEIGHT = 430


def _layout(fig: go.Figure, title: str, x: str, y: str, **kw) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=15)), height=HEIGHT, template="plotly_white",
                      margin=dict(l=70, r=20, t=55, b=60), legend=dict(title_text=""), hovermode="closest", **kw)
    fig.update_xaxes(title_text=x)
    fig.update_yaxes(title_text=y)
    return fig


def _integer_ks(fig: go.Figure, ks) -> go.Figure:
    """Whole-number ticks on a k axis, and its range from the data (plotly's autorange also makes room
    for annotations: the long sweep's k axis ran from -27.6 to 55)."""
    if ks:
        pad = max(0.3, 0.03 * (max(ks) - min(ks)))
        fig.update_xaxes(range=[min(ks) - pad, max(ks) + pad])
        if max(ks) <= 12:
            fig.update_xaxes(dtick=1)
    return fig


def log_ticks(values) -> list[float]:
    """Tick values for a log axis over `values`: 1, 2, 5 times each power of ten (decades only past
    three decades), from the tick at or below the smallest value to the one at or above the largest,
    so there are always two or more. Plotly's own log ticks label every minor step ("2 3 4 ... 9 100 2 3")."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return [1, 10]
    lo, hi = min(vals), max(vals)
    steps = (1,) if math.log10(hi / lo) > 3 else (1, 2, 5)
    ticks = [m * 10 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1) for m in steps]
    ticks = [float(f"{t:.6g}") for t in ticks]
    first = max(t for t in ticks if t <= lo * (1 + 1e-9))
    last = min(t for t in ticks if t >= hi * (1 - 1e-9))
    return [t for t in ticks if first <= t <= last]


def _log_axis(fig: go.Figure, values, axis: str = "y") -> go.Figure:
    """A log axis with labels at log_ticks only, spanning them (a small margin either side)."""
    ticks = log_ticks(values)
    lo, hi = math.log10(ticks[0]), math.log10(ticks[-1])
    pad = 0.03 * (hi - lo)
    (fig.update_yaxes if axis == "y" else fig.update_xaxes)(
        type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks], minor=dict(showgrid=False, ticks=""),
        range=[lo - pad, hi + pad])
    return fig


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, "", "")


def loss_vs_k(curve: dict | None, title: str = "Loss vs number of retrieved chunks (fig. 3 left)") -> go.Figure:
    """Mean continuation loss per method vs k, ± one standard error."""
    if not curve or not curve.get("ks"):
        return _empty(title, "no k-sweep in this run")
    fig = go.Figure()
    ks = curve["ks"]
    for m in curve["methods"]:
        loss, se, n = curve["loss"][m], curve["loss_se"][m], curve["n"][m]
        tok = curve.get("context_tokens", {}).get(m, [None] * len(ks))
        fig.add_trace(go.Scatter(
            x=ks, y=loss, name=NAMES[m], mode="lines+markers", line=dict(color=COLORS[m], dash=DASH.get(m, "solid")),
            error_y=dict(type="data", array=[s or 0 for s in se], visible=True, thickness=1),
            customdata=list(zip(n, tok)),
            hovertemplate=f"<b>{NAMES[m]}</b><br>k = %{{x}}<br>loss %{{y:.3f}} nats/token<br>"
                          "%{customdata[0]} samples · %{customdata[1]:.0f} context tokens<extra></extra>"))
    return _integer_ks(_layout(fig, title, "retrieved chunks k (most relevant last)",
                               "continuation loss (nats / token, lower is better)"), ks)


def time_vs_k(curve: dict | None, include_picconcat: bool = False,
              title: str = "Time to compose + process vs k (fig. 3 right)") -> go.Figure:
    """Mean ms per query (compose the state + score from it) per method vs k, log scale."""
    if not curve or not curve.get("ks"):
        return _empty(title, "no k-sweep in this run")
    fig = go.Figure()
    ks = [k for k in curve["ks"] if k > 0]
    idx = [i for i, k in enumerate(curve["ks"]) if k > 0]
    for m in curve["methods"]:
        if m == "none" or (m == "picconcat_r" and not include_picconcat):
            continue
        comp = [curve["compose_ms"][m][i] for i in idx]
        proc = [curve["process_ms"][m][i] for i in idx]
        total = [None if c is None or p is None else c + p for c, p in zip(comp, proc)]
        fig.add_trace(go.Scatter(
            x=ks, y=total, name=NAMES[m], mode="lines+markers", line=dict(color=COLORS[m], dash=DASH.get(m, "solid")),
            customdata=list(zip(comp, proc)),
            hovertemplate=f"<b>{NAMES[m]}</b><br>k = %{{x}}<br>total %{{y:.1f}} ms<br>compose %{{customdata[0]:.2f}} ms"
                          "<br>process %{customdata[1]:.1f} ms<extra></extra>"))
    _log_axis(fig, [y for t in fig.data for y in t.y])
    return _integer_ks(_layout(fig, title, "retrieved chunks k", "ms per query (compose + process, log scale)"), ks)


def cost_vs_loss(curve: dict | None, title: str | None = None) -> go.Figure:
    """One point per method: mean time per query (log x) against mean loss, PICConcat-R included."""
    idx = [i for i, k in enumerate((curve or {}).get("ks") or []) if 1 <= k <= 10]
    over = ks_text([curve["ks"][i] for i in idx]) if idx else "k = 1..10"
    title = title or f"Cost vs loss, mean over {over} (fig. 5)"
    if not curve or not curve.get("ks"):
        return _empty(title, "no k-sweep in this run")
    fig = go.Figure()
    for m in curve["methods"]:
        pts = [(curve["compose_ms"][m][i] + curve["process_ms"][m][i], curve["loss"][m][i]) for i in idx
               if None not in (curve["loss"][m][i], curve["compose_ms"][m][i], curve["process_ms"][m][i])]
        if not pts:
            continue
        t = sum(p[0] for p in pts) / len(pts)
        lo = sum(p[1] for p in pts) / len(pts)
        fig.add_trace(go.Scatter(x=[t], y=[lo], name=NAMES[m], mode="markers", marker=dict(size=13, color=COLORS[m]),
                                 hovertemplate=f"<b>{NAMES[m]}</b><br>%{{x:.1f}} ms per query<br>loss %{{y:.3f}}<extra></extra>"))
    _log_axis(fig, [x for t in fig.data for x in t.x], "x")
    return _layout(fig, title, "ms per query (compose + process, log scale)", f"mean loss over {over} (nats / token)")


def long_sweep(long: dict | None, training_tokens: int | None = None,
               title: str = "Beyond 10 chunks: Concat past the training length (fig. 6)") -> go.Figure:
    """Loss vs k up to 50 chunks; the top axis reads the mean context tokens at each k."""
    if not long or not long.get("ks"):
        return _empty(title, "no long sweep in this run")
    fig = loss_vs_k(long, title)
    tok = long.get("context_tokens", {}).get("concat") or next(iter(long.get("context_tokens", {}).values()), None)
    if training_tokens and tok:
        past = [k for k, t in zip(long["ks"], tok) if t is not None and t > training_tokens]
        if past:
            fig.add_vline(x=past[0], line=dict(color="#9ca3af", dash="dash"),
                          annotation_text=f"contexts > {training_tokens} training tokens",
                          annotation_position="top right", annotation_bgcolor="rgba(255,255,255,0.8)")
    return fig


def long_caption(long: dict | None, training_tokens: int | None = None) -> str:
    """What the long sweep shows at its largest k, beside what the paper's fig. 6 shows."""
    paper = "In the paper (fig. 6) Concat blows up past the training length while PICASO stays below the baseline."
    if not long or not long.get("ks") or "none" not in long.get("loss", {}):
        return "Loss as k grows to 50 chunks, past the model's training length. " + paper
    i = len(long["ks"]) - 1
    k, base = long["ks"][i], long["loss"]["none"][i]
    at = {m: long["loss"][m][i] for m in long["methods"] if m != "none" and long["loss"][m][i] is not None}
    tok = (long.get("context_tokens") or {}).get("concat") or [None] * (i + 1)
    where = (f" (about {tok[i]:.0f} context tokens, {tok[i] / training_tokens:.1f}× the model's {training_tokens} "
             "training tokens)") if tok[i] and training_tokens else ""
    above = [NAMES[m] for m in at if at[m] > base]
    best = min(at, key=at.get) if at else None
    parts = [f"Loss as k grows to {k} chunks; the dashed line marks where the contexts pass the training length. "
             f"At k = {k}{where}: baseline {base:.3f}"]
    parts += [f", {NAMES[m]} {at[m]:.3f}" for m in at]
    text = "".join(parts) + ". "
    if best:
        text += f"Lowest: {NAMES[best]}; "
        text += (f"above the baseline: {', '.join(above)}. " if above else "every method stays below the baseline. ")
    return text + paper


def retriever_ablation(retrievers: dict | None, title: str = "PICASO-R by retriever (fig. 8)") -> go.Figure:
    """PICASO-R's loss vs k for each retriever, the baseline dotted."""
    if not retrievers or not retrievers.get("curves"):
        return _empty(title, "no retriever ablation in this run")
    fig = go.Figure()
    base = None
    for name, c in retrievers["curves"].items():
        fig.add_trace(go.Scatter(
            x=c["ks"], y=c["loss"], name=c["label"], mode="lines+markers",
            line=dict(color=RETRIEVER_COLORS.get(name, "#111827")),
            error_y=dict(type="data", array=[s or 0 for s in c["loss_se"]], visible=True, thickness=1),
            customdata=[[g if g is not None else float("nan")] for g in c["gold_recall"]],
            hovertemplate=f"<b>{c['label']}</b><br>k = %{{x}}<br>PICASO-R loss %{{y:.3f}}<br>"
                          "gold chunks retrieved %{customdata[0]:.0%}<extra></extra>"))
        base = base or c.get("none")
        ks = c["ks"]
    if base:
        fig.add_trace(go.Scatter(x=ks, y=base, name=NAMES["none"], mode="lines", line=dict(color=COLORS["none"], dash="dot"),
                                 hovertemplate="baseline %{y:.3f}<extra></extra>"))
    return _integer_ks(_layout(fig, title, "retrieved chunks k", "PICASO-R loss (nats / token)"), ks)


def chunk_lengths(lengths: dict | None, title: str = "Chunk lengths (fig. 9)") -> go.Figure:
    """Histograms of the database chunks' lengths in characters (left) and tokens (right)."""
    if not lengths or not lengths.get("chars", {}).get("counts"):
        return _empty(title, "no lengths in this run")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("characters", "tokens"), horizontal_spacing=0.1)
    for col, key, color in ((1, "chars", "#2563eb"), (2, "tokens", "#ea580c")):
        h = lengths[key]
        mids = [(a + b) / 2 for a, b in zip(h["edges"], h["edges"][1:])]
        width = (h["edges"][1] - h["edges"][0]) if len(h["edges"]) > 1 else 1
        fig.add_trace(go.Bar(x=mids, y=h["counts"], width=width, marker_color=color, name=key, showlegend=False,
                             hovertemplate=f"%{{x:.0f}} {key}: %{{y}} chunks<extra></extra>"), row=1, col=col)
    _layout(fig, f"{title}: {lengths.get('n_chunks')} chunks", "", "chunks", bargap=0.05)
    for col, key in ((1, "chars"), (2, "tokens")):
        h = lengths[key]
        unit = "characters" if key == "chars" else "tokens"
        fig.update_xaxes(title_text=f"{unit} per chunk (mean {h['mean']:.0f}, median {h['median']:.0f})", row=1, col=col)
    return fig


def process_vs_generate(timing: dict | None,
                        title: str = "Processing the context vs generating 32 tokens (fig. 7)") -> go.Figure:
    """Seconds to process n context tokens and to generate 32 tokens after them, stacked per n."""
    if not timing or not timing.get("tokens"):
        return _empty(title, "no timing in this run")
    x = [str(n) for n in timing["tokens"]]
    fig = go.Figure([
        go.Bar(x=x, y=timing["process_s"], name="process the context", marker_color="#ea580c",
               hovertemplate="%{x} tokens: process %{y:.3f} s<extra></extra>"),
        go.Bar(x=x, y=timing["generate_s"], name=f"generate {timing.get('new_tokens', 32)} tokens", marker_color="#2563eb",
               hovertemplate="%{x} tokens: generate %{y:.3f} s<extra></extra>"),
    ])
    return _layout(fig, title, "context length (tokens)", "seconds (median)", barmode="stack")


def gains_vs_paper(summary: dict, title: str | None = None) -> go.Figure:
    """Bars: % lower loss than no context per method, the paper's (WikiText) beside ours."""
    main = summary.get("main")
    title = title or f"Gain over the baseline, mean over {_gain_ks(summary)}: paper vs ours"
    if not main:
        return _empty(title, "no k-sweep in this run")
    paper = summary.get("paper", {}).get("wikitext_gain_pct", {})
    ours = main["gains"]["avg"]
    ms = [m for m in TABLE_METHODS if m != "none" and (m in ours or m in paper)]  # the paper's order
    fig = go.Figure([
        go.Bar(x=[NAMES[m] for m in ms], y=[paper.get(m) for m in ms], name="paper (Mamba-2 2.7B, WikiText)",
               marker_color="#9ca3af", hovertemplate="paper %{x}: %{y:.1f}%<extra></extra>"),
        go.Bar(x=[NAMES[m] for m in ms], y=[ours.get(m) for m in ms], name="ours", marker_color=[COLORS[m] for m in ms],
               hovertemplate="ours %{x}: %{y:.1f}%<extra></extra>"),
    ])
    return _layout(fig, title, "method", "% lower loss than no context", barmode="group")


def qa_losses(qa: dict | None, paper: dict | None = None,
              title: str = "QA with all passages: loss per method (table 1 row 1)") -> go.Figure:
    if not qa or not qa.get("methods"):
        return _empty(title, "no QA pass in this run")
    ms = list(qa["methods"])
    pl = (paper or {}).get("msmarco_loss", {})
    fig = go.Figure([
        go.Bar(x=[NAMES[m] for m in ms], y=[pl.get(m) for m in ms], name="paper (MS MARCO)", marker_color="#9ca3af",
               hovertemplate="paper %{x}: %{y:.2f}<extra></extra>"),
        go.Bar(x=[NAMES[m] for m in ms], y=[qa["methods"][m]["loss"] for m in ms], name=f"ours ({qa.get('corpus')})",
               marker_color=[COLORS[m] for m in ms], hovertemplate="ours %{x}: %{y:.3f}<extra></extra>"),
    ])
    return _layout(fig, title, "method", "answer loss (nats / token)", barmode="group")


def _gain_ks(summary: dict) -> str:
    """The k values the run's gains were averaged over ("k = 1..10" for the paper's protocol)."""
    ks = ((summary.get("main") or {}).get("gains") or {}).get("ks_averaged")
    return ks_text(ks) if ks else "k = 1..10"


def all_figures(summary: dict) -> list[tuple[str, str, str, go.Figure]]:
    """(element id, title, caption, figure) for every figure of a run, in report order."""
    main, meta = summary.get("main"), summary.get("meta", {})
    over = _gain_ks(summary)
    return [
        ("bench-loss-vs-k", "Loss vs k", "Mean loss per method as more retrieved chunks are composed (± one "
         "standard error). Look at the gap between the state compositions and Concat, and PICASO-R on PICASO-S.",
         loss_vs_k(main)),
        ("bench-gains", "Gain over the baseline", f"Mean % lower loss than no context over {over}, beside the "
         "paper's WikiText figures (sec. 6.3.1).", gains_vs_paper(summary)),
        ("bench-time-vs-k", "Time vs k", "Composition is arithmetic on stored states; Concat processes every "
         "token again. PICConcat-R is left out here, as in the paper (see the cost figure).", time_vs_k(main)),
        ("bench-cost", "Cost vs loss", f"Mean over {over} of time per query against loss; PICConcat-R buys "
         "its accuracy with n times Concat's tokens (fig. 5).", cost_vs_loss(main)),
        ("bench-qa", "QA, all passages", "Each question composes all its own passages (table 1 row 1).",
         qa_losses(summary.get("qa"), summary.get("paper"))),
        ("bench-long", "Up to 50 chunks", long_caption(summary.get("long"), meta.get("training_tokens")),
         long_sweep(summary.get("long"), meta.get("training_tokens"))),
        ("bench-retrievers", "Retriever ablation", "PICASO-R with each retriever; in the paper a better "
         "retriever gives a lower loss (fig. 8). Hover for the share of gold chunks retrieved.",
         retriever_ablation(summary.get("retrievers"))),
        ("bench-process-vs-generate", "Processing vs generating", "Processing grows with the context; generating "
         "32 tokens from a state does not (fig. 7).", process_vs_generate(summary.get("timing"))),
        ("bench-lengths", "Chunk lengths", "The database chunks' lengths (fig. 9).", chunk_lengths(summary.get("lengths"))),
    ]

"""Attribution figures from plain data (picaso_core.analysis.attribution's scores): per-method bars, a
sources x methods heatmap, a sources x answer-tokens heatmap, precision beside the paper. A source
is a whole context or a sentence / word of one (picaso_core.analysis.sources).

Every score is in nats per answer token with one sign: higher = the context matters more
(LOO: loss rise when it is left out; LOI: loss drop from the empty state to that context alone;
surrogate: minus its LASSO weight). One diverging colour scale, centred at 0, for every heatmap.
"""

from __future__ import annotations

import math
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

GOLD = "#ca8a04"
OTHER = "#94a3b8"
SCALE = "RdBu_r"  # red: the context supports the answer (positive), blue: it hurts
TEMPLATE = "plotly_white"


def _short(cid: str, n: int = 18) -> str:
    return cid if len(cid) <= n else cid[: n - 1] + "…"


def _row_height(n: int) -> int:
    """Pixels per heatmap row: 42 for a few contexts, down to 16 for a hundred sentences."""
    return 42 if n <= 12 else max(16, 504 // n)


def _labels(context_ids: Sequence[str], gold: Sequence[bool]) -> list[str]:
    """Context axis labels: position, id, a star on the gold ones (unique even for repeated ids)."""
    return [f"{i + 1}. {_short(c)}{' ★' if g else ''}" for i, (c, g) in enumerate(zip(context_ids, gold))]


def score_bars(context_ids: Sequence[str], gold: Sequence[bool], scores: dict[str, Sequence[float]],
               names: dict[str, str], seconds: dict[str, float] | None = None) -> go.Figure:
    """One panel per method: a bar per context (gold ones in gold, ★), the top-scored one outlined."""
    methods = list(scores)
    cols = min(4, max(1, len(methods)))
    rows = math.ceil(len(methods) / cols)
    titles = []
    for m in methods:
        # the time on a second line: one line ("Surrogate (PICASO-R) · 679 ms") outgrew a panel at 800 px
        t = f"<br>{1e3 * seconds[m]:.0f} ms" if seconds and m in seconds else ""
        titles.append(f"{names.get(m, m)}{t}")
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.06,
                        vertical_spacing=0.28 / max(1, rows - 1) if rows > 1 else 0.1)
    labels = _labels(context_ids, gold)
    for j, m in enumerate(methods):
        r, c = j // cols + 1, j % cols + 1
        vals = list(scores[m])
        top = max(range(len(vals)), key=lambda i: vals[i]) if vals else -1
        fig.add_bar(
            x=labels, y=vals, row=r, col=c, showlegend=False,
            marker_color=[GOLD if g else OTHER for g in gold],
            marker_line_color=["#111827" if i == top else "rgba(0,0,0,0)" for i in range(len(vals))],
            marker_line_width=2,
            hovertemplate="%{x}<br>score %{y:.3f} nats/token<extra>" + names.get(m, m) + "</extra>",
        )
        fig.update_yaxes(title_text="nats / token" if c == 1 else None, zeroline=True, zerolinecolor="#64748b",
                         row=r, col=c)
        # a bar per sentence: past a dozen the tick labels overlap; the hover names each bar
        fig.update_xaxes(tickangle=-35, tickfont=dict(size=10), showticklabels=len(vals) <= 12, row=r, col=c)
    for name, color in (("gold context ★ (labelled)", GOLD), ("other context", OTHER)):  # legend entries only
        fig.add_bar(x=[None], y=[None], name=name, marker_color=color, row=1, col=1)
    fig.update_annotations(font_size=12)  # the subplot titles
    fig.update_layout(height=300 * rows + 80, template=TEMPLATE, margin=dict(l=50, r=20, t=75, b=40),
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.0 + 0.12 / rows, yanchor="bottom"),
                      title=dict(text="Score per context (higher = matters more; outlined: the top one)",
                                 x=0, font=dict(size=14)))
    return fig


def method_heatmap(context_ids: Sequence[str], gold: Sequence[bool], scores: dict[str, Sequence[float]],
                   names: dict[str, str]) -> go.Figure:
    """Contexts (rows) x methods (columns), nats per answer token, one colour scale centred at 0."""
    methods = list(scores)
    z = [[scores[m][i] for m in methods] for i in range(len(context_ids))]
    zmax = max((abs(v) for row in z for v in row if v is not None and math.isfinite(v)), default=1.0) or 1.0
    fig = go.Figure(go.Heatmap(
        z=z, x=[names.get(m, m) for m in methods], y=_labels(context_ids, gold), colorscale=SCALE,
        zmid=0, zmin=-zmax, zmax=zmax, text=[[f"{v:+.2f}" for v in row] for row in z], texttemplate="%{text}",
        colorbar=dict(title=dict(text="nats per token", side="right")),
        hovertemplate="%{y}<br>%{x}: %{z:.3f} nats/token<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="context (★ gold)")
    fig.update_xaxes(title="attribution method")
    fig.update_layout(height=140 + _row_height(len(context_ids)) * len(context_ids), template=TEMPLATE,
                      margin=dict(l=40, r=20, t=50, b=40),
                      title=dict(text="All methods side by side (same scale)", x=0, font=dict(size=14)))
    return fig


def token_heatmap(context_ids: Sequence[str], gold: Sequence[bool], tokens: Sequence[str],
                  deltas: Sequence[Sequence[float]], method_name: str, span: tuple[int, int] | None = None) -> go.Figure:
    """Sources (rows) x answer tokens (columns): each token's loss rise when the source is left out.
    span: answer tokens [t0, t1) the scores are taken over, outlined when it is not the whole answer."""
    z = [list(map(float, row)) for row in deltas]
    zmax = max((abs(v) for row in z for v in row), default=1.0) or 1.0
    shown = [repr(t)[1:-1] or "∅" for t in tokens]
    x = [f"{i}:{t}" for i, t in enumerate(shown)]  # unique column keys, even for repeated tokens
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=_labels(context_ids, gold), colorscale=SCALE, zmid=0, zmin=-zmax, zmax=zmax,
        colorbar=dict(title=dict(text="nats", side="right")),
        hovertemplate="%{y}<br>token %{x}<br>loss rise when left out: %{z:.3f} nats<extra></extra>"))
    fig.update_xaxes(tickvals=x, ticktext=shown, tickangle=-45, title=f"answer token (LOO with {method_name})")
    fig.update_yaxes(autorange="reversed", title="source left out (★ in a gold context)")
    if span is not None and tuple(span) != (0, len(tokens)):
        fig.add_vrect(x0=span[0] - 0.5, x1=span[1] - 0.5, line=dict(color="#111827", width=2), fillcolor="rgba(0,0,0,0)",
                      annotation_text="selected span", annotation_position="top left")
    fig.update_layout(height=170 + _row_height(len(context_ids)) * len(context_ids), template=TEMPLATE,
                      margin=dict(l=40, r=20, t=50, b=70),
                      title=dict(text=f"Which answer tokens each context supports ({method_name})", x=0,
                                 font=dict(size=14)))
    return fig


def precision_bars(methods: Sequence[str], ours: dict[str, float], paper: dict[str, float], names: dict[str, str],
                   chance: float | None = None, n_samples: int | None = None) -> go.Figure:
    """Precision per method: this model on this corpus beside the paper's table 4."""
    labels = [names.get(m, m) for m in methods]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[ours[m] for m in methods], name=f"this model{f' ({n_samples} samples)' if n_samples else ''}",
                marker_color="#ea580c", text=[f"{ours[m]:.2f}" for m in methods], textposition="outside")
    fig.add_bar(x=labels, y=[paper.get(m) for m in methods], name="paper, table 4 (MS MARCO, Mamba2-2.7B)",
                marker_color="#94a3b8", text=[f"{paper[m]:.2f}" if m in paper else "" for m in methods],
                textposition="outside")
    if chance is not None:
        fig.add_hline(y=chance, line_dash="dot", line_color="#64748b", annotation_text=f"chance {chance:.2f}")
    fig.update_yaxes(range=[0, 1.08], title="precision (top-1 is gold)")
    fig.update_layout(barmode="group", height=360, template=TEMPLATE, margin=dict(l=50, r=20, t=40, b=40),
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.02, yanchor="bottom"))
    return fig

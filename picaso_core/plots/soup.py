"""Figures of the State Soup lab (picaso_core.analysis.soup, soup_mixing), from its plain data. No Gradio, no model calls.

    state_map          the library projected to 2-D / 3-D, colour = task, open markers = shuffled
                       labels, hover = the demonstration (paper fig. 1 left, 4, 5)
    quality_figure     1-NN task accuracy and silhouette per layer, SSM vs conv
    retrieval_figure   top-1 task retrieval accuracy vs k, one line per layer (fig. 1 right)
    mixing_figure      accuracy and loss vs k: k shots, soup of m states, all shots, and the
                       retrieved mix (fig. 2)
    two_task_figure    answer losses as the weight w of task A moves from 0 to 1
    decay_figure       loss on the test chunk per sequential-mixing method (fig. 3)
"""

from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from picaso_core.compose.registry import colour

SHUFFLED = "_shuffled"
PALETTE = qualitative.Plotly + qualitative.Dark24
TEMPLATE = "plotly_white"
MIX_LABEL = {"k_shots": "k shots alone", "soup": "soup of m = total/k states of k shots",
             "all_shots": "one state of all m·k shots", "query": "query state alone (k shots)",
             "retrieved_mix": "query state + retrieved library state (soup)"}
MIX_COLOR = {"k_shots": "#9ca3af", "soup": colour("soup"), "all_shots": "#ea580c", "query": "#6b7280",
             "retrieved_mix": "#16a34a"}
MIX_DASH = {"query": "dot", "retrieved_mix": "dot"}
DECAY_LABEL = {"concat": "concat(c1, c2)", "a_decay": "A-decay mix", "mean": "mean of states", "c2_only": "c2 alone"}
# the methods these are, in the registry's colours: A-decay mixing is CASO of two states, their mean is Soup
DECAY_COLOR = {"concat": colour("concat"), "a_decay": colour("caso"), "mean": colour("soup"), "c2_only": "#9ca3af"}


def base(task: str) -> str:
    return task[: -len(SHUFFLED)] if task.endswith(SHUFFLED) else task


def task_colors(tasks: Sequence[str]) -> dict[str, str]:
    """One colour per base task; a shuffled twin shares its base task's colour."""
    bases = list(dict.fromkeys(base(t) for t in tasks))
    return {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(bases)}


def _hover(text: str, lines: int = 6) -> str:
    rows = text.strip("\n").split("\n")
    more = f"<br>… ({len(rows) - lines} more lines)" if len(rows) > lines else ""
    return "<br>".join(html.escape(r) for r in rows[:lines]) + more


def state_map(coords: np.ndarray, tasks: Sequence[str], texts: Sequence[str], title: str,
              axis: str = "component", query: dict | None = None) -> go.Figure:
    """Scatter of the library. coords [n, 2|3]; query: {"xy": [2|3 numbers], "text", "label"}
    marks a typed demonstration with a star."""
    coords = np.asarray(coords)
    dim = coords.shape[1]
    colors = task_colors(tasks)
    fig = go.Figure()
    for task in dict.fromkeys(tasks):
        idx = [i for i, t in enumerate(tasks) if t == task]
        shuffled = task.endswith(SHUFFLED)
        marker = dict(color=colors[base(task)], size=5 if dim == 3 else 9,
                      symbol="circle-open" if shuffled else "circle", line=dict(width=2 if shuffled else 0.5,
                                                                                     color=colors[base(task)] if shuffled else "white"))
        # One legend entry per base task (its shuffled twin shares the entry: a click toggles both), so
        # the 20 tasks' legend fits below the map at 800 px too, not cut off at the right.
        common = dict(name=task, mode="markers", marker=marker, legendgroup=base(task), showlegend=not shuffled,
                      text=[_hover(texts[i]) for i in idx], customdata=[[task]] * len(idx),
                      hovertemplate="<b>%{customdata[0]}</b><br>%{text}<extra></extra>")
        if dim == 3:
            fig.add_trace(go.Scatter3d(x=coords[idx, 0], y=coords[idx, 1], z=coords[idx, 2], **common))
        else:
            fig.add_trace(go.Scatter(x=coords[idx, 0], y=coords[idx, 1], **common))
    if any(t.endswith(SHUFFLED) for t in tasks):  # the key to the open markers, a legend entry of its own
        key = dict(name="open circle: labels shuffled", mode="markers", hoverinfo="skip",
                   marker=dict(symbol="circle-open", color="#6b7280", size=9, line=dict(width=2)))
        fig.add_trace(go.Scatter3d(x=[None], y=[None], z=[None], **key) if dim == 3 else go.Scatter(x=[None], y=[None], **key))
    if query is not None:
        q = list(query["xy"])
        common = dict(name=query.get("label", "your demonstration"), mode="markers",
                      marker=dict(symbol="diamond" if dim == 3 else "star", size=10 if dim == 3 else 20,
                                  color="black", line=dict(width=1, color="white")),
                      text=[_hover(query.get("text", ""))], hovertemplate="<b>your demonstration</b><br>%{text}<extra></extra>")
        if dim == 3:
            fig.add_trace(go.Scatter3d(x=[q[0]], y=[q[1]], z=[q[2]], **common))
        else:
            fig.add_trace(go.Scatter(x=[q[0]], y=[q[1]], **common))
    labels = [f"{axis} 1", f"{axis} 2", f"{axis} 3"]
    fig.update_layout(title=dict(text=title, x=0.01), template=TEMPLATE, height=680, margin=dict(l=50, r=10, t=60, b=40),
                      legend=dict(orientation="h", x=0, y=-0.1, yanchor="top", itemsizing="constant", font=dict(size=11)))
    if dim == 3:
        fig.update_layout(scene=dict(xaxis_title=labels[0], yaxis_title=labels[1], zaxis_title=labels[2]))
    else:
        fig.update_xaxes(title=labels[0], zeroline=False)
        fig.update_yaxes(title=labels[1], zeroline=False)
    return fig


def quality_figure(q: dict, layer: int | None = None) -> go.Figure:
    """q = soup.cluster_quality(...): two panels over layers, SSM and conv lines."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("1-NN task accuracy (full state, cosine)", "Silhouette by task (cosine)"))
    for part, color in (("ssm", "#2563eb"), ("conv", "#ea580c")):
        if part not in q:
            continue
        for col, key, fmt in ((1, "nn_accuracy", ".0%"), (2, "silhouette", ".2f")):
            fig.add_scatter(x=q["layers"], y=q[part][key], mode="lines+markers", name=f"{part.upper()} state",
                            line=dict(color=color), legendgroup=part, showlegend=col == 1, row=1, col=col,
                            hovertemplate=f"layer %{{x}}: %{{y:{fmt}}}<extra>{part}</extra>")
    fig.add_hline(y=q["chance"], line_dash="dash", line_color="#9ca3af", row=1, col=1,
                  annotation_text="chance", annotation_position="top left")
    fig.add_hline(y=0, line_color="#d1d5db", row=1, col=2)
    if layer is not None:
        for col in (1, 2):
            fig.add_vline(x=layer, line_dash="dot", line_color="#6b7280", row=1, col=col)
    fig.update_xaxes(title="layer", dtick=1)
    fig.update_yaxes(title="accuracy", tickformat=".0%", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(title="silhouette (-1..1)", row=1, col=2)
    fig.update_layout(template=TEMPLATE, height=380, margin=dict(l=50, r=10, t=64, b=40),
                      legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.22))
    return fig


def retrieval_figure(r: dict) -> go.Figure:
    """r = soup.retrieval_accuracy(...): accuracy vs k, one line per layer."""
    fig = go.Figure()
    for i, layer in enumerate(r["layers"]):
        fig.add_scatter(x=r["ks"], y=r["accuracy"][i], mode="lines+markers", name=f"layer {layer}",
                        hovertemplate=f"layer {layer}, k = %{{x}}: %{{y:.0%}}<extra></extra>")
    fig.add_hline(y=r["chance"], line_dash="dash", line_color="#9ca3af", annotation_text="chance")
    fig.update_xaxes(title="k (demonstrations in the query)", type="log", tickvals=r["ks"], ticktext=[str(k) for k in r["ks"]])
    fig.update_yaxes(title="top-1 task retrieval accuracy", tickformat=".0%", range=[0, 1.02])
    fig.update_layout(title=dict(text=f"Task retrieval by {r['part'].upper()}-state cosine similarity "
                                 f"({r['queries']} queries per task and k)", x=0.01),
                      template=TEMPLATE, height=380, margin=dict(l=60, r=10, t=50, b=50), legend=dict(title="layer"))
    return fig


def mixing_figure(rows: Sequence[dict], rmix: Sequence[dict] = ()) -> go.Figure:
    """Rows of soup_mixing.mixing_table (and soup_mixing.retrieval_mixing): accuracy (left) and loss (right) vs k."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("Answer accuracy (greedy exact match)", "Answer loss (nats / token)"))
    for data in (rows, rmix):
        for method in dict.fromkeys(r["method"] for r in data):
            rs = sorted((r for r in data if r["method"] == method), key=lambda r: r["k"])
            ks = [r["k"] for r in rs]
            for col, key, fmt in ((1, "accuracy", ".0%"), (2, "loss", ".3f")):
                fig.add_scatter(x=ks, y=[r[key] for r in rs], mode="lines+markers", name=MIX_LABEL.get(method, method),
                                line=dict(color=MIX_COLOR.get(method), dash=MIX_DASH.get(method, "solid")),
                                legendgroup=method, showlegend=col == 1, row=1, col=col,
                                hovertemplate=f"k = %{{x}}: %{{y:{fmt}}} (n = {rs[0]['n']})<extra>{method}</extra>")
    all_k = sorted({r["k"] for r in list(rows) + list(rmix)})
    fig.update_xaxes(title="k (shots per state)", type="log", tickvals=all_k, ticktext=[str(k) for k in all_k])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=400, margin=dict(l=50, r=10, t=50, b=40),
                      legend=dict(orientation="h", y=-0.22))
    return fig


def two_task_figure(rows: Sequence[dict], w: float | None = None, task_a: str = "A", task_b: str = "B") -> go.Figure:
    """Rows of soup_mixing.two_task_mix: the loss of each answer vs w; hover shows the generation."""
    ws = [r["w"] for r in rows]
    gens = [html.escape(r["generation"]) or "(nothing)" for r in rows]
    fig = go.Figure()
    for i, answer in enumerate(rows[0]["losses"] if rows else []):
        fig.add_scatter(x=ws, y=[r["losses"][answer] for r in rows], mode="lines+markers", name=f"loss of “{answer}”",
                        line=dict(color=PALETTE[i % len(PALETTE)]), text=gens,
                        hovertemplate="w = %{x}: loss %{y:.3f}<br>generates: %{text}<extra></extra>")
    if w is not None:
        fig.add_vline(x=w, line_dash="dot", line_color="#6b7280")
    fig.update_xaxes(title=f"w  (state = w·x[{task_a}] + (1 − w)·x[{task_b}])", range=[-0.03, 1.03])
    fig.update_yaxes(title="answer loss (nats / token)")
    fig.update_layout(template=TEMPLATE, height=400, margin=dict(l=60, r=10, t=40, b=50),
                      legend=dict(orientation="h", x=0, y=-0.25, yanchor="top"),
                      title=dict(text=f"Mixing two skills: w = 0 is {task_b} alone, w = 1 is {task_a} alone", x=0.01))
    return fig


def decay_figure(mean_loss: dict[str, float], n: int, wins: dict | None = None) -> go.Figure:
    """Bars of the loss on the test chunk per method (soup_mixing.decay_table's mean_loss)."""
    methods = list(mean_loss)
    vals = [mean_loss[m] for m in methods]
    fig = go.Figure(go.Bar(x=[DECAY_LABEL.get(m, m) for m in methods], y=vals,
                           marker_color=[DECAY_COLOR.get(m, "#6b7280") for m in methods],
                           text=[f"{v:.3f}" for v in vals], textposition="outside",
                           hovertemplate="%{x}: %{y:.4f} nats / token<extra></extra>"))
    lo, hi = min(vals), max(vals)
    pad = 0.25 * (hi - lo + 1e-3)
    fig.update_yaxes(title="loss on the test chunk (nats / token)", range=[max(0.0, lo - pad), hi + pad])
    fig.update_xaxes(title="state the test chunk is read from")
    fig.update_layout(template=TEMPLATE, height=360, margin=dict(l=60, r=10, t=50, b=50),
                      title=dict(text=f"Sequential chunks c1, c2 → test chunk ({n} windows; lower is better)", x=0.01))
    return fig

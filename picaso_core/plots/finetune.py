"""Figures of BPTC / BP2C fine-tuning (PICASO fig. 4, table 1): loss vs k before and after, the
training loss curve, and a before/after comparison. Pure functions of plain data (the report of
`picaso_core.finetune.evaluate`, a trainer history); no Gradio, no model."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from picaso_core.plots.experiments import COLORS, NAMES, _empty, _integer_ks, _layout

MODEL_DASH = {"base": "dot", "bp2c-retrieval": "dash", "bptc-retrieval": "solid", "bp2c-qa": "dash", "bptc-qa": "solid"}
MODEL_NAMES = {"base": "base", "bp2c-retrieval": "BP2C", "bptc-retrieval": "BPTC", "bp2c-qa": "BP2C (QA)",
               "bptc-qa": "BPTC (QA)", "tuned": "fine-tuned"}


def loss_vs_k_before_after(models: dict[str, dict], methods: Sequence[str] = ("concat", "picaso_r"),
                           title: str = "Loss vs k before and after fine-tuning (fig. 4)") -> go.Figure:
    """Per model (line style) and method (colour): mean continuation loss vs k.
    models: name -> {"fig4": summaries.curves(...)}."""
    fig = go.Figure()
    ks_all: list[int] = []
    for name, r in models.items():
        curve = r.get("fig4") or {}
        ks = curve.get("ks") or []
        ks_all = ks or ks_all
        for m in methods:
            if m not in curve.get("loss", {}):
                continue
            fig.add_trace(go.Scatter(
                x=ks, y=curve["loss"][m], mode="lines+markers", name=f"{NAMES[m]}, {MODEL_NAMES.get(name, name)}",
                line=dict(color=COLORS[m], dash=MODEL_DASH.get(name, "solid"), width=2.5 if name != "base" else 1.8),
                hovertemplate=f"<b>{NAMES[m]}</b>, {MODEL_NAMES.get(name, name)}<br>k = %{{x}}<br>"
                              "loss %{y:.3f} nats/token<extra></extra>"))
    if not fig.data:
        return _empty(title, "no evaluation yet")
    return _integer_ks(_layout(fig, title, "retrieved chunks k (held-out retrieval split)",
                               "continuation loss (nats / token, lower is better)"), ks_all)


def training_curve(history: Sequence[dict], total: int | None = None, title: str = "Training loss") -> go.Figure:
    """Loss per optimizer step (composition loss and LM loss where recorded), and a moving mean."""
    if not history:
        return _empty(title, "no steps yet: press Start")
    steps = [h["step"] for h in history]
    fig = go.Figure()
    for key, name, color in (("composition_loss", "composition loss (from the composed state)", "#ea580c"),
                             ("lm_loss", "plain LM loss", "#6b7280")):
        ys = [h.get(key) for h in history]
        if any(y is not None for y in ys):
            fig.add_trace(go.Scatter(x=steps, y=ys, mode="lines", name=name, line=dict(color=color, width=1),
                                     opacity=0.55, hovertemplate="step %{x}<br>%{y:.3f}<extra></extra>"))
    w = max(1, len(history) // 10)
    total_loss = [h["loss"] for h in history]
    smooth = [sum(total_loss[max(0, i - w + 1): i + 1]) / len(total_loss[max(0, i - w + 1): i + 1])
              for i in range(len(total_loss))]
    fig.add_trace(go.Scatter(x=steps, y=smooth, mode="lines", name=f"loss, mean of {w} steps",
                             line=dict(color="#1d4ed8", width=3), hovertemplate="step %{x}<br>%{y:.3f}<extra></extra>"))
    fig = _layout(fig, title, "optimizer step", "loss (nats / token)")
    if total:
        fig.update_xaxes(range=[0, total])
    return fig


def before_after_bars(rows: dict[str, dict[str, float]], methods: Sequence[str],
                      title: str = "Held-out loss before and after") -> go.Figure:
    """Grouped bars: rows = model name -> method -> loss."""
    if not rows:
        return _empty(title, "nothing to compare yet")
    fig = go.Figure()
    for name, losses in rows.items():
        fig.add_trace(go.Bar(x=[NAMES[m] for m in methods], y=[losses.get(m) for m in methods],
                             name=MODEL_NAMES.get(name, name), text=[f"{losses.get(m, 0):.3f}" for m in methods],
                             textposition="outside", hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig = _layout(fig, title, "", "continuation loss (nats / token, lower is better)", barmode="group")
    return fig

"""Figures of the COFFEE lab (picaso_core.lab): live training curves of COFFEE vs S6 and the IH0
state trajectories of the paper's fig. 2, animated over time steps. Pure functions of plain data
(the records of `training.train_iter`, the dict of `training.ih0_trajectories`); no Gradio."""

from __future__ import annotations

import plotly.graph_objects as go

COLORS = {"coffee": "#ea580c", "s6": "#2563eb"}
NAMES = {"coffee": "COFFEE", "s6": "S6"}
REGION_COLORS = ["#fde68a", "#bfdbfe", "#fecaca", "#bbf7d0"]
SEQ_COLORS = ["#1d4ed8", "#0891b2", "#7c3aed", "#0f766e", "#dc2626", "#ea580c", "#be185d", "#a16207"]


def curves_figure(histories: dict[str, list[dict]], metric: str = "accuracy", paper: dict | None = None,
                  title: str | None = None, height: int = 380) -> go.Figure:
    """Validation `metric` ('accuracy' or 'loss') against training step, one line per model.

    histories: model -> records of train_iter; paper: model -> the paper's value (a dashed line)."""
    if metric not in ("accuracy", "loss"):
        raise ValueError(f"metric must be 'accuracy' or 'loss', got {metric!r}")
    fig = go.Figure()
    for model, recs in histories.items():
        if not recs:
            continue
        fig.add_trace(go.Scatter(
            x=[r["step"] for r in recs], y=[r[metric] for r in recs], mode="lines+markers", marker=dict(size=4),
            name=f"{NAMES[model]} ({recs[-1]['params']} parameters)", line=dict(color=COLORS[model], width=2.5),
            customdata=[r["seconds"] for r in recs],
            hovertemplate=f"{NAMES[model]}<br>step %{{x}}<br>{metric} %{{y:.3f}}<br>%{{customdata:.1f}} s training<extra></extra>"))
    for model, value in (paper or {}).items():
        fig.add_hline(y=value, line=dict(color=COLORS[model], dash="dash", width=1.5),
                      annotation_text=f"paper {NAMES[model]} {value:g}", annotation_position="bottom right",
                      annotation_font=dict(color=COLORS[model], size=11))
    yaxis = dict(title=metric, range=[0, 1.02]) if metric == "accuracy" else dict(title="cross-entropy", rangemode="tozero")
    fig.update_layout(title=title or f"Validation {metric}", xaxis_title="training step", yaxis=yaxis,
                      height=height, margin=dict(l=55, r=15, t=65 if title and "<br>" in title else 45, b=95),
                      template="plotly_white",
                      legend=dict(orientation="h", yanchor="top", y=-0.25, x=0, xanchor="left"))
    return fig


def ih0_figure(t: dict, height: int = 540) -> go.Figure:
    """Fig. 2 of the paper, animated: the nearest-embedding regions (the output symbol a final state
    gives), the embeddings (grey), and one state trajectory per IH0 sequence, drawn up to step k in
    frame k. Solid lines: the first trigger comes first (1xy1); dashed: noise first (x1y1)."""
    g = t["grid"]
    syms = t["symbols"]
    z = [[syms.index(s) for s in row] for row in g["region"]]
    scale = [[(i + f) / len(syms), REGION_COLORS[i]] for i in range(len(syms)) for f in (0, 1)]
    background = go.Heatmap(x=g["xs"], y=g["ys"], z=z, zmin=0, zmax=len(syms) - 1, colorscale=scale, showscale=False,
                            opacity=0.55, hoverinfo="skip")
    emb = t["embedding"]
    emb_trace = go.Scatter(
        x=[e[0] for e in emb], y=[e[1] for e in emb], mode="markers+text", text=[f"emb({s})" for s in syms],
        textposition="bottom center", marker=dict(size=11, color="#6b7280", symbol="diamond"), name="embeddings",
        hovertemplate="%{text}: (%{x:.2f}, %{y:.2f})<extra></extra>")
    n_steps = len(t["outputs"][0])

    def seq_traces(k: int) -> list[go.Scatter]:
        out = []
        for i, (label, pts) in enumerate(zip(t["sequences"], t["outputs"])):
            right = t["prediction"][i] == t["target"][i]
            out.append(go.Scatter(
                x=[p[0] for p in pts[:k + 1]], y=[p[1] for p in pts[:k + 1]], mode="lines+markers",
                name=f"{label} → {t['prediction'][i]}{'' if right else ' ✗'}",
                line=dict(color=SEQ_COLORS[i % len(SEQ_COLORS)], width=2.5,
                          dash="solid" if t["first_trigger"][i] == 0 else "dash"),
                marker=dict(size=[6] * k + [11]), legendgroup=label,
                hovertemplate=f"{label}<br>k=%{{pointNumber}}: (%{{x:.2f}}, %{{y:.2f}})<extra></extra>"))
        return out

    frames = [go.Frame(data=seq_traces(k), traces=list(range(2, 2 + len(t["sequences"]))), name=str(k))
              for k in range(n_steps)]
    fig = go.Figure(data=[background, emb_trace] + seq_traces(n_steps - 1), frames=frames)
    steps = [dict(method="animate", label="start" if k == 0 else f"k={k - 1}",
                  args=[[str(k)], dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))])
             for k in range(n_steps)]
    fig.update_layout(
        title=f"IH0 state trajectories, accuracy {t['accuracy']:.0%} (colours: the output region of each embedding)",
        xaxis=dict(title="z₁ = x⁽⁰⁾", zeroline=True, range=[g["xs"][0], g["xs"][-1]], constrain="domain"),
        yaxis=dict(title="z₂ = x⁽¹⁾", zeroline=True, range=[g["ys"][0], g["ys"][-1]], scaleanchor="x", constrain="domain"),
        height=height, margin=dict(l=55, r=15, t=50, b=40), template="plotly_white",
        legend=dict(title="sequence → output"),
        updatemenus=[dict(type="buttons", showactive=False, x=0.0, y=-0.12, xanchor="left", yanchor="top",
                          buttons=[dict(label="▶ play", method="animate",
                                        args=[None, dict(frame=dict(duration=700, redraw=True), fromcurrent=False,
                                                         transition=dict(duration=300))])])],
        sliders=[dict(active=n_steps - 1, steps=steps, x=0.12, len=0.88, y=-0.08, currentvalue=dict(prefix="time step: "))])
    return fig

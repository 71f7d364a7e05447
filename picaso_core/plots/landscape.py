"""Figures of loss landscapes between states (PICASO fig. 2), from `Landscape.to_dict()` /
`Line.to_dict()` data: a plane as a contour map or a 3-D surface with its anchors, mean and
projected states marked, and the 1-D interpolation lines. No model calls, no Gradio."""

from __future__ import annotations

import math

import plotly.graph_objects as go

COLORSCALE = "Viridis"  # low loss dark, high loss yellow; one scale for both planes
MARK_STYLE = {  # mark name -> (symbol, colour)
    "Soup": ("star", "#ef4444"), "PICASO-R": ("star", "#ef4444"), "mean": ("star", "#ef4444"),
    "Concat": ("diamond", "#f97316"),
}
LINE_COLORS = {"soup": "#2563eb", "caso": "#0d9488"}


def zrange(*planes: dict) -> tuple[float, float]:
    """One colour range for several planes: the min and max of all their grids and marks."""
    vals = [v for p in planes for row in p["loss"] for v in row]
    vals += [v for p in planes for v in p["anchor_loss"]] + [m["loss"] for p in planes for m in p["marks"]]
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return (min(vals), max(vals)) if vals else (0.0, 1.0)


def _hover_mark(m: dict) -> str:
    text = f"<b>{m['name']}</b><br>loss {m['loss']:.3f}"
    if m.get("off_plane"):
        text += (f"<br>projection onto the plane; the state itself is {m['off_plane']:.3g} away"
                 f"<br>loss of the state itself {m['state_loss']:.3f}")
    return text


def plane_figure(p: dict, title: str, view: str = "contour", z: tuple[float, float] | None = None,
                 showscale: bool = True, height: int = 470) -> go.Figure:
    """The loss over one plane: `view` "contour" (2-D, equal axis scales) or "surface" (3-D).

    p: Landscape.to_dict(); z: the colour range shared with the other plane (`zrange`)."""
    if view not in ("contour", "surface"):
        raise ValueError(f"view must be 'contour' or 'surface', got {view!r}")
    zmin, zmax = z or zrange(p)
    xs, ys, loss = p["xs"], p["ys"], p["loss"]
    ax = [a[0] for a in p["anchor_xy"]] + [p["anchor_xy"][0][0]]
    ay = [a[1] for a in p["anchor_xy"]] + [p["anchor_xy"][0][1]]
    anchor_hover = [f"<b>{n}</b><br>loss {l:.3f}" for n, l in zip(p["anchor_names"], p["anchor_loss"])]
    colorbar = dict(title=dict(text="loss<br>(nats/token)", side="right"), len=0.85)
    fig = go.Figure()
    if view == "contour":
        fig.add_trace(go.Contour(
            x=xs, y=ys, z=loss, zmin=zmin, zmax=zmax, colorscale=COLORSCALE, showscale=showscale,
            colorbar=colorbar, contours=dict(coloring="heatmap", showlabels=True, labelfont=dict(size=9, color="white")),
            ncontours=18, name="loss", hovertemplate="x %{x:.3g}<br>y %{y:.3g}<br>loss %{z:.3f}<extra></extra>"))
        fig.add_trace(go.Scatter(x=ax, y=ay, mode="lines", line=dict(color="white", width=1.5, dash="dash"),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(
            x=ax[:3], y=ay[:3], mode="markers+text", text=list(p["anchor_names"]), textposition="top center",
            textfont=dict(color="white", size=11), marker=dict(size=10, color="white", line=dict(color="black", width=1.5)),
            name="anchors", hovertext=anchor_hover, hoverinfo="text"))
        for m in p["marks"]:
            symbol, color = MARK_STYLE.get(m["name"], ("x", "#e11d48"))
            label = m["name"] + (" (projected)" if m.get("off_plane") else "")
            fig.add_trace(go.Scatter(x=[m["x"]], y=[m["y"]], mode="markers", name=label,
                                     marker=dict(size=15 if symbol == "star" else 12, symbol=symbol, color=color,
                                                 line=dict(color="black", width=1)),
                                     hovertext=[_hover_mark(m)], hoverinfo="text"))
        fig.update_xaxes(title_text="e₁: distance in state space (along the first two anchors)", range=[xs[0], xs[-1]])
        # equal scales: a distance on screen is the same distance in state space in every direction
        fig.update_yaxes(title_text="e₂: distance in state space", range=[ys[0], ys[-1]], scaleanchor="x",
                         scaleratio=1)
    else:
        fig.add_trace(go.Surface(x=xs, y=ys, z=loss, cmin=zmin, cmax=zmax, colorscale=COLORSCALE,
                                 showscale=showscale, colorbar=colorbar, opacity=0.92, name="loss",
                                 hovertemplate="x %{x:.3g}<br>y %{y:.3g}<br>loss %{z:.3f}<extra></extra>"))
        fig.add_trace(go.Scatter3d(
            x=ax[:3], y=ay[:3], z=list(p["anchor_loss"]), mode="markers+text", text=list(p["anchor_names"]),
            marker=dict(size=5, color="white", line=dict(color="black", width=1)), name="anchors",
            hovertext=anchor_hover, hoverinfo="text"))
        for m in p["marks"]:
            symbol, color = MARK_STYLE.get(m["name"], ("x", "#e11d48"))
            fig.add_trace(go.Scatter3d(x=[m["x"]], y=[m["y"]], z=[m["loss"]], mode="markers", name=m["name"],
                                       marker=dict(size=6, symbol="diamond" if symbol == "diamond" else "circle",
                                                   color=color), hovertext=[_hover_mark(m)], hoverinfo="text"))
        fig.update_layout(scene=dict(xaxis_title="e₁ (state space)", yaxis_title="e₂ (state space)",
                                     zaxis_title="loss (nats/token)", zaxis=dict(range=[zmin, zmax]),
                                     aspectmode="manual", aspectratio=dict(x=1, y=1, z=0.6)))
    fig.update_layout(title=dict(text=title, font=dict(size=14)), height=height, template="plotly_white",
                      margin=dict(l=60, r=20, t=70, b=50),
                      legend=dict(orientation="h", x=0, y=-0.18 if view == "contour" else 0, font=dict(size=11)))
    return fig


def plane_title(p: dict, name: str) -> str:
    """'<name>: mean side 1.23, loss at <mean> 2.34' (+ 'average of n samples')."""
    mean = p["marks"][0]
    side = sum(p["sides"]) / 3
    avg = f" · average of {p['n_samples']} samples" if p["n_samples"] > 1 else ""
    return f"<b>{name}</b>{avg}<br><sup>mean side {side:.3g} · loss at {mean['name']} {mean['loss']:.3f}</sup>"


def line_figure(soup_line: dict, caso_line: dict, height: int = 360) -> go.Figure:
    """Loss along the two lines (Line.to_dict()): independent states and the two CASO orders.

    x is the distance from the first state along the line (state-space units), so the CASO
    segment is visibly shorter (prop. 4); the two states are marked."""
    fig = go.Figure()
    for key, ln in (("soup", soup_line), ("caso", caso_line)):
        d = ln["distance"]
        a, b = ln["names"]
        x = [t * d for t in ln["ts"]]
        fig.add_trace(go.Scatter(
            x=x, y=ln["loss"], mode="lines", line=dict(color=LINE_COLORS[key], width=2.5),
            name=f"{a} → {b} (distance {d:.3g})", customdata=ln["ts"],
            hovertemplate="t %{customdata:.2f}<br>distance %{x:.3g}<br>loss %{y:.3f}<extra></extra>"))
        ends = [i for i, t in enumerate(ln["ts"]) if t in (0.0, 1.0)]
        fig.add_trace(go.Scatter(x=[x[i] for i in ends], y=[ln["loss"][i] for i in ends], mode="markers+text",
                                 text=[a, b][: len(ends)], showlegend=False,
                                 textposition="top center" if key == "soup" else "bottom center",
                                 marker=dict(size=9, color=LINE_COLORS[key], line=dict(color="black", width=1)),
                                 hoverinfo="skip"))
    avg = soup_line["n_samples"]
    fig.update_layout(
        title=dict(text="1-D interpolation: loss along the line through two states"
                   + (f" (average of {avg} samples)" if avg > 1 else ""), font=dict(size=14)),
        xaxis_title="distance from the first state along the line (state space; the ends are marked)",
        yaxis_title="loss (nats/token)", height=height, template="plotly_white",
        margin=dict(l=60, r=20, t=60, b=50), legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"))
    return fig

"""Figures of loss landscapes between states (PICASO fig. 2), from `Landscape.to_dict()` /
`Line.to_dict()` data: a plane as a contour map or a 3-D surface with its anchors, mean and
projected states marked, and the 1-D interpolation lines. No model calls, no Gradio."""

from __future__ import annotations

import bisect
import math
from itertools import product

import plotly.graph_objects as go

from picaso_core.compose.registry import colour

COLORSCALE = "Viridis"  # low loss dark, high loss yellow; one scale for both planes
MARK_STYLE = {  # mark name -> (symbol, colour): a method's mark in the registry's colour, black-edged
    "Soup": ("star", colour("soup")), "PICASO-R": ("star", colour("picaso_r")), "mean": ("star", "#ef4444"),
    "Concat": ("diamond", colour("concat")),
}
LINE_COLORS = {m: colour(m) for m in ("soup", "caso")}  # the line through independent states / the CASO line
N_LEVELS = 64  # quantiles of the shared colour scale
N_BANDS = 16  # contour bands: each holds 1/16 of the two planes' grid points
N_TICKS = 6  # colour bar ticks
BADGE = 52  # px at the top of a gr.Plot under its label (plotly puts a title's top ~13 px above y)
TOP = BADGE + 45  # top margin: the label, then a title and its subtitle line


def zrange(*planes: dict) -> tuple[float, float]:
    """One loss range for several planes: the min and max of all their grids and marks."""
    vals = _values(*planes)
    return (vals[0], vals[-1]) if vals else (0.0, 1.0)


def _values(*planes: dict) -> list[float]:
    vals = [v for p in planes for row in p["loss"] for v in row]
    vals += [v for p in planes for v in p["anchor_loss"]] + [m["loss"] for p in planes for m in p["marks"]]
    return sorted(v for v in vals if v is not None and math.isfinite(v))


def colour_scale(*planes: dict) -> dict:
    """One colour scale for several planes, by quantile: a loss's colour is its rank among the planes'
    grid values (read off N_LEVELS quantiles, linear between them). The CASO plane's loss spans a few
    hundredths where Soup's spans a nat (fig. 2: its states sit where the loss is flat), so a linear
    scale paints it one dark colour; by rank each plane keeps its structure and the same colour is
    still the same loss on both. {"levels": losses, "at": colour positions in [0, 1], "tickvals",
    "ticktext": the colour bar read in loss}."""
    vals = _values(*planes) or [0.0, 1.0]
    n = len(vals) - 1
    levels, at = [], []
    for i in range(N_LEVELS + 1):
        v = vals[round(i * n / N_LEVELS)]
        if not levels or v > levels[-1]:  # strictly increasing for the interpolation
            levels.append(v)
            at.append(i / N_LEVELS)
    at[-1] = 1.0
    if len(levels) == 1:
        levels, at = [levels[0], levels[0] + 1e-9], [0.0, 1.0]
    ticks = [vals[round(i * n / (N_TICKS - 1))] for i in range(N_TICKS)]
    digits = next((d for d in range(3, 6) if len({f"{t:.{d}f}" for t in ticks}) == len(set(ticks))), 6)
    scale = {"levels": levels, "at": at}
    tickvals = [colour(t, scale) for t in ticks]
    return {**scale, "tickvals": tickvals, "ticktext": [f"{t:.{digits}f}" for t in ticks]}


def colour(loss: float, scale: dict) -> float:
    """The colour position in [0, 1] of a loss on `colour_scale`'s scale (None stays None)."""
    if loss is None or not math.isfinite(loss):
        return None
    lv, at = scale["levels"], scale["at"]
    if loss <= lv[0]:
        return 0.0
    if loss >= lv[-1]:
        return 1.0
    j = bisect.bisect_right(lv, loss)
    return at[j - 1] + (at[j] - at[j - 1]) * (loss - lv[j - 1]) / (lv[j] - lv[j - 1])


def colour_share(p: dict, scale: dict) -> float:
    """The fraction of the colour scale one plane's grid spans (how much of its structure shows)."""
    vals = _values({**p, "anchor_loss": [], "marks": []})
    return colour(vals[-1], scale) - colour(vals[0], scale) if vals else 0.0


def _hover_mark(m: dict) -> str:
    text = f"<b>{m['name']}</b><br>loss {m['loss']:.3f}"
    if m.get("off_plane"):
        text += (f"<br>projection onto the plane; the state itself is {m['off_plane']:.3g} away"
                 f"<br>loss of the state itself {m['state_loss']:.3f}")
    return text


LABEL_PX = 6.5, 15  # an anchor label's width per character and its height, at 11 px text
PLOT_PX = 250  # the narrowest a plane's plot area is drawn (two planes side by side at 800-1280 px)


def _label_positions(xs: list[float], ys: list[float], names: list[str] | None = None,
                     xrange: tuple[float, float] | None = None, yrange: tuple[float, float] | None = None) -> list[str]:
    """Each anchor's textposition: the labels apart from each other and from the anchors, inside the
    plot's ranges, away from the triangle's middle where that is free. Two anchors at one height with
    labels pointing to each other ran into each other (the CASO plane's two orders); so each label's
    box is estimated (LABEL_PX at PLOT_PX wide: the plot's equal axis scales make it one box per
    data unit in both directions) and the placement with the least overlap is taken."""
    names = list(names) if names is not None else ["x" * 8] * len(xs)
    xrange = xrange or (min(xs), max(xs))
    yrange = yrange or (min(ys), max(ys))
    unit = max(xrange[1] - xrange[0], yrange[1] - yrange[0], 1e-9) / PLOT_PX  # data units per pixel
    cy = sum(ys) / len(ys)
    r = 7 * unit  # the marker's radius and a gap

    def box(i, pos):
        v, h = pos.split()
        w, t = len(names[i]) * LABEL_PX[0] * unit, LABEL_PX[1] * unit
        x0 = {"center": xs[i] - w / 2, "right": xs[i] + r / 2, "left": xs[i] - r / 2 - w}[h]
        y0 = ys[i] + r if v == "top" else ys[i] - r - t
        return x0, y0, x0 + w, y0 + t

    def overlap(a, b):
        return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))

    def outside(b):
        return (max(0.0, xrange[0] - b[0]) + max(0.0, b[2] - xrange[1])) * (b[3] - b[1]) + \
            (max(0.0, yrange[0] - b[1]) + max(0.0, b[3] - yrange[1])) * (b[2] - b[0])

    options = [f"{v} {h}" for v in ("top", "bottom") for h in ("center", "right", "left")]
    dots = [(x - r, y - r, x + r, y + r) for x, y in zip(xs, ys)]

    def cost(choice):
        boxes = [box(i, pos) for i, pos in enumerate(choice)]
        clash = sum(overlap(a, b) for k, a in enumerate(boxes) for b in boxes[k + 1:])
        clash += sum(overlap(b, d) for k, b in enumerate(boxes) for j, d in enumerate(dots) if j != k)
        inward = sum(1 for i, pos in enumerate(choice) if (pos.startswith("top")) != (ys[i] >= cy))
        off_centre = sum(1 for pos in choice if not pos.endswith("center"))
        return (clash + sum(outside(b) for b in boxes)) / unit ** 2 + 40 * inward + 5 * off_centre

    return list(min(product(options, repeat=len(xs)), key=cost))


def plane_figure(p: dict, title: str, view: str = "contour", scale: dict | None = None,
                 showscale: bool = True, height: int = 470, z: tuple[float, float] | None = None) -> go.Figure:
    """The loss over one plane: `view` "contour" (2-D, equal axis scales) or "surface" (3-D).

    p: Landscape.to_dict(); scale: the colour scale shared with the other plane (`colour_scale`);
    z: the loss axis range of the surface view shared with the other plane (`zrange`)."""
    if view not in ("contour", "surface"):
        raise ValueError(f"view must be 'contour' or 'surface', got {view!r}")
    scale = scale or colour_scale(p)
    zmin, zmax = z or zrange(p)
    xs, ys, loss = p["xs"], p["ys"], p["loss"]
    shade = [[colour(v, scale) for v in row] for row in loss]
    text = [[f"{v:.4f}" for v in row] for row in loss]
    ax = [a[0] for a in p["anchor_xy"]] + [p["anchor_xy"][0][0]]
    ay = [a[1] for a in p["anchor_xy"]] + [p["anchor_xy"][0][1]]
    anchor_hover = [f"<b>{n}</b><br>loss {l:.3f}" for n, l in zip(p["anchor_names"], p["anchor_loss"])]
    colorbar = dict(title=dict(text="loss", side="top"), len=0.8, thickness=14, tickvals=scale["tickvals"],
                    ticktext=scale["ticktext"], tickfont=dict(size=10))
    hover = "x %{x:.3g}<br>y %{y:.3g}<br>loss %{text}<extra></extra>"
    fig = go.Figure()
    if view == "contour":
        fig.add_trace(go.Contour(
            x=xs, y=ys, z=shade, text=text, zmin=0, zmax=1, autocontour=False, colorscale=COLORSCALE,
            showscale=showscale, colorbar=colorbar, contours=dict(coloring="heatmap", start=0, end=1, size=1 / N_BANDS),
            line=dict(width=0.6, color="rgba(255,255,255,0.45)"), name="loss", hovertemplate=hover))
        fig.add_trace(go.Scatter(x=ax, y=ay, mode="lines", line=dict(color="white", width=1.5, dash="dash"),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(
            x=ax[:3], y=ay[:3], mode="markers+text", text=list(p["anchor_names"]),
            textposition=_label_positions(ax[:3], ay[:3], p["anchor_names"], (xs[0], xs[-1]), (ys[0], ys[-1])),
            cliponaxis=False,
            textfont=dict(color="white", size=11), marker=dict(size=10, color="white", line=dict(color="black", width=1.5)),
            name="anchors", hovertext=anchor_hover, hoverinfo="text"))
        for m in p["marks"]:
            symbol, color = MARK_STYLE.get(m["name"], ("x", "#e11d48"))
            label = m["name"] + (" (projected)" if m.get("off_plane") else "")
            fig.add_trace(go.Scatter(x=[m["x"]], y=[m["y"]], mode="markers", name=label,
                                     marker=dict(size=15 if symbol == "star" else 12, symbol=symbol, color=color,
                                                 line=dict(color="black", width=1)),
                                     hovertext=[_hover_mark(m)], hoverinfo="text"))
        fig.update_xaxes(title_text="e₁ (distance in state space)", range=[xs[0], xs[-1]], constrain="domain",
                         automargin=True)
        # equal scales: a distance on screen is the same distance in state space in every direction
        fig.update_yaxes(title_text="e₂ (distance in state space)", range=[ys[0], ys[-1]], scaleanchor="x",
                         scaleratio=1, constrain="domain", automargin=True)
        margin = dict(l=50, r=10, t=TOP, b=40)
    else:
        fig.add_trace(go.Surface(x=xs, y=ys, z=loss, surfacecolor=shade, text=text, cmin=0, cmax=1,
                                 colorscale=COLORSCALE, showscale=showscale, colorbar=colorbar, opacity=0.92,
                                 name="loss", hovertemplate=hover))
        fig.add_trace(go.Scatter3d(
            x=ax[:3], y=ay[:3], z=list(p["anchor_loss"]), mode="markers",
            marker=dict(size=5, color="white", line=dict(color="black", width=1)), name="anchors",
            hovertext=anchor_hover, hoverinfo="text"))
        # the labels float above the surface: at the anchor's own loss the surface hides half of them
        lift = 0.08 * ((zmax - zmin) or 1.0)
        fig.add_trace(go.Scatter3d(
            x=ax[:3], y=ay[:3], z=[v + lift for v in p["anchor_loss"]], mode="text", text=list(p["anchor_names"]),
            textposition="top center", textfont=dict(size=11, color="#111827"), hoverinfo="skip", showlegend=False))
        for m in p["marks"]:
            symbol, color = MARK_STYLE.get(m["name"], ("x", "#e11d48"))
            fig.add_trace(go.Scatter3d(x=[m["x"]], y=[m["y"]], z=[m["loss"]], mode="markers", name=m["name"],
                                       marker=dict(size=6, symbol="diamond" if symbol == "diamond" else "circle",
                                                   color=color), hovertext=[_hover_mark(m)], hoverinfo="text"))
        axis = dict(tickfont=dict(size=10), title_font=dict(size=12))
        fig.update_layout(scene=dict(
            xaxis=dict(title_text="e₁", nticks=5, **axis), yaxis=dict(title_text="e₂", nticks=5, **axis),
            zaxis=dict(title_text="loss", range=[zmin, zmax + 2 * lift], nticks=4, tickformat=".2f", **axis),
            aspectmode="manual", aspectratio=dict(x=1, y=1, z=0.6), domain=dict(x=[0, 1], y=[0, 1]),
            camera=dict(eye=dict(x=1.1, y=1.1, z=0.65), center=dict(x=0, y=0, z=-0.1))))
        margin = dict(l=0, r=0, t=TOP, b=10)
    # the title starts BADGE px down, below the label Gradio lays over the plot's top left corner
    fig.update_layout(title=dict(text=title, font=dict(size=14), x=0.02, xanchor="left", yref="container",
                                 y=1 - BADGE / height, yanchor="top"),
                      height=height, template="plotly_white", margin=margin,
                      legend=dict(orientation="h", x=0, y=-0.14 if view == "contour" else 0, font=dict(size=11)))
    return fig


def plane_title(p: dict, name: str) -> str:
    """'<b>name</b>' over 'mean side 1.23 · <mean> 2.345 · loss 2.1–3.4 on the plane · n samples',
    short enough for a 440 px wide plot."""
    mean = p["marks"][0]
    side = sum(p["sides"]) / 3
    grid = _values({**p, "anchor_loss": [], "marks": []}) or [math.nan]
    avg = f" · mean of {p['n_samples']} samples" if p["n_samples"] > 1 else ""
    return (f"<b>{name}</b><br><sup>mean side {side:.3g} · {mean['name']} {mean['loss']:.3f} · "
            f"loss {grid[0]:.3f}–{grid[-1]:.3f} on the plane{avg}</sup>")


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
        title=dict(text="Loss along the line through two states" + (f" (mean of {avg} samples)" if avg > 1 else ""),
                   font=dict(size=14)),
        xaxis_title="distance from the first state (state space; the ends are marked)",
        yaxis_title="loss (nats/token)", height=height, template="plotly_white",
        margin=dict(l=60, r=20, t=60, b=50), legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"))
    return fig

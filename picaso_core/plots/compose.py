"""Compose & compare's figure: the continuation loss per method beside the time to compose and to
process per method (log scale).

Built as plain figure data and wrapped without plotly's validation: the figure is drawn on every
click, and validating it (make_subplots, update_layout, the template's expansion) cost 30-75 ms of
a click that must stay under half a second, against ~2 ms here. The data is what plotly's validated
API produces for the same figure (tests/plots/test_compose_figure.py builds that reference with
make_subplots and compares).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import plotly.graph_objects as go
import plotly.io as pio

TEMPLATE = "plotly_white"
GAP = 0.1  # horizontal space between the two panels, a fraction of the width
# time to compose: each method's own colour (compose/registry.py), as in the loss panel; time to process:
# one light grey, hatched, so that no bar of the time panel reads as another method (the compose bars
# were one teal, CASO's colour since the registry)
PROCESS_COLOR, PROCESS_PATTERN = "#cbd5e1", "/"


@functools.cache
def _template() -> dict:
    """The template's full data: plotly.js knows no templates by name, so a figure carries it."""
    return pio.templates[TEMPLATE].to_plotly_json()


def _title(text: str, x: float) -> dict:
    # the subplot title annotation make_subplots writes (centred above its panel)
    return dict(font=dict(size=16), showarrow=False, text=text, x=x, xanchor="center", xref="paper", y=1.0,
                yanchor="bottom", yref="paper")


def method_figure(labels: Sequence[str], colors: Sequence[str], losses: Sequence[float] | None,
                  compose_ms: Sequence[float], process_ms: Sequence[float]) -> go.Figure:
    """Loss per method (left; None: nothing was scored) and milliseconds to compose and to process
    per method (right, log scale, one tick per decade; a zero time has no bar).

    Args:
        labels, colors: one per method, in the table's order.
        losses: nats per continuation token, one per method, or None.
        compose_ms, process_ms: one per method.
    """
    half = (1 - GAP) / 2
    scored = losses is not None
    data = []
    yaxis: dict = dict(anchor="x", domain=[0.0, 1.0])
    if scored:
        data.append(dict(type="bar", x=list(labels), y=[float(v) for v in losses],
                         marker=dict(color=list(colors)), showlegend=False,
                         text=[f"{v:.3f}" for v in losses], textposition="outside", xaxis="x", yaxis="y"))
        finite = [float(v) for v in losses if math.isfinite(v)]
        if finite:
            lo, hi = min(finite), max(finite)
            yaxis["range"] = [max(0.0, lo - 0.25 * (hi - lo + 1e-3)), hi + 0.15 * (hi - lo + 1e-3)]
    for name, values, marker in (("compose", compose_ms, dict(color=list(colors))),
                                 ("process", process_ms, dict(color=PROCESS_COLOR,
                                                              pattern=dict(shape=PROCESS_PATTERN, fgcolor="#64748b")))):
        data.append(dict(type="bar", x=list(labels), y=[float(v) if v else None for v in values],
                         name=f"time to {name}", marker=marker, xaxis="x2", yaxis="y2"))
    layout = dict(
        template=_template(),
        xaxis=dict(anchor="y", domain=[0.0, half]), yaxis=yaxis,
        xaxis2=dict(anchor="y2", domain=[1 - half, 1.0]), yaxis2=dict(anchor="x2", domain=[0.0, 1.0], type="log", dtick=1),
        annotations=[_title("Continuation loss (nats / token, lower is better)" if scored else "No continuation to score",
                            half / 2),
                     _title("Time per method (ms, log scale)", 1 - half / 2)],
        barmode="group", height=400,
        # t=80: the subplot titles sit below the label Gradio lays over a plot's top left
        margin=dict(l=40, r=20, t=80, b=40),
        legend=dict(orientation="h", x=1, xanchor="right", y=-0.15),
    )
    return go.Figure(dict(data=data, layout=layout), _validate=False)

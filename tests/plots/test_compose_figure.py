"""Compose & compare's figure is built as plain data without plotly's validation (for speed); it must
be the figure plotly's validated API builds, and valid plotly."""

import json
import math

import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from picaso_core.plots.compose import method_figure

LABELS = ["No context", "Concat", "Soup", "CASO"]
COLORS = ["#9ca3af", "#1d4ed8", "#93c5fd", "#14b8a6"]
LOSSES = [1.25, 0.61, 0.83, 0.7]
COMPOSE = [0.0, 23.5, 0.9, 1.4]
PROCESS = [41.0, 40.0, 42.5, 39.0]


def reference(losses):
    """The same figure through make_subplots and the validating setters."""
    scored = losses is not None
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("Continuation loss (nats / token, lower is better)" if scored
                                        else "No continuation to score", "Time per method (ms, log scale)"))
    if scored:
        fig.add_bar(x=LABELS, y=losses, marker_color=COLORS, showlegend=False,
                    text=[f"{v:.3f}" for v in losses], textposition="outside", row=1, col=1)
        lo, hi = min(losses), max(losses)
        fig.update_yaxes(range=[max(0.0, lo - 0.25 * (hi - lo + 1e-3)), hi + 0.15 * (hi - lo + 1e-3)], row=1, col=1)
    fig.add_bar(x=LABELS, y=[v or None for v in COMPOSE], name="time to compose", marker_color=COLORS, row=1, col=2)
    fig.add_bar(x=LABELS, y=[v or None for v in PROCESS], name="time to process", marker_color="#cbd5e1",
                marker_pattern_shape="/", marker_pattern_fgcolor="#64748b", row=1, col=2)
    fig.update_yaxes(type="log", dtick=1, row=1, col=2)
    fig.update_layout(barmode="group", height=400, margin=dict(l=40, r=20, t=80, b=40), template="plotly_white",
                      legend=dict(orientation="h", x=1, xanchor="right", y=-0.15))
    return fig


def canonical(fig) -> dict:
    # plotly writes whole-number floats either way (0.0 / 0); compare numbers by value
    def norm(x):
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items()}
        if isinstance(x, list):
            return [norm(v) for v in x]
        if isinstance(x, float) and math.isfinite(x):
            return round(x, 9)
        return x
    return norm(json.loads(fig.to_json()))


@pytest.mark.parametrize("losses", [LOSSES, None], ids=["scored", "unscored"])
def test_figure_equals_the_validated_api(losses):
    fast = method_figure(LABELS, COLORS, losses, COMPOSE, PROCESS)
    assert canonical(fast) == canonical(reference(losses))


def test_figure_is_valid_plotly():
    """Every property of the unvalidated figure passes plotly's validation unchanged."""
    fast = method_figure(LABELS, COLORS, LOSSES, COMPOSE, PROCESS)
    validated = go.Figure(fast.to_dict())  # raises on an unknown property or a bad value
    assert canonical(validated) == canonical(fast)
    assert [t.type for t in validated.data] == ["bar", "bar", "bar"]
    assert validated.layout.yaxis2.type == "log"
    assert validated.data[1].y[0] is None  # a zero time has no bar on the log axis


def test_no_time_bar_reads_as_another_method():
    """The time panel's compose bars wear each method's own colour, and the process bars a hatched grey
    that is no method's colour (compose/registry.py): a room never reads a time bar as another method."""
    from picaso_core.compose.registry import REGISTRY

    fast = method_figure(LABELS, COLORS, LOSSES, COMPOSE, PROCESS)
    compose, process = fast.data[1], fast.data[2]
    assert list(compose.marker.color) == COLORS
    assert process.marker.color not in {m.colour for m in REGISTRY} and process.marker.pattern.shape

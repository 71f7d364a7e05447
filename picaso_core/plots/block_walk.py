"""The block walk's figure for the tour's bar (picaso_core.lab.block_walk): one head's state after a few
tokens, on one colour scale, so that a room sees the state fill as the text is read. The walk itself is
drawn in the page (picaso_core.ui.tabs.primer_block_js). No model calls, no Gradio."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def snapshot_tokens(T: int) -> list[int]:
    """The tokens (0-based) whose state is shown: the first, the middle and the last."""
    return sorted({0, (T - 1) // 2, T - 1})


def state_snapshots_figure(states, tokens: list[str], title: str, height: int = 330) -> go.Figure:
    """states: the head's state after each token, [T, P, N] (a tensor or nested lists); one heatmap per
    snapshot token, rows p (or channels), columns n, one shared symmetric colour scale with its bar."""
    T = len(states)
    picks = snapshot_tokens(T)
    # three significant digits: the colours and the hover need no more, and the tour's cache keeps the figure
    rows = [[[float(f"{v:.3g}") for v in r] for r in (states[t].tolist() if hasattr(states[t], "tolist") else states[t])]
            for t in picks]
    top = max((abs(v) for m in rows for r in m for v in r), default=1.0) or 1.0
    names = [f"after token {t + 1} “{tokens[t][:12]}”" for t in picks]
    fig = make_subplots(1, len(picks), subplot_titles=names, horizontal_spacing=0.05)
    for i, z in enumerate(rows, 1):
        fig.add_trace(go.Heatmap(z=z, coloraxis="coloraxis", hovertemplate="p %{y}, n %{x}: %{z:.4g}<extra></extra>"),
                      1, i)
        fig.update_xaxes(title_text="n (state dim)", row=1, col=i)
        fig.update_yaxes(autorange="reversed", row=1, col=i, title_text="p" if i == 1 else None)
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=15)), height=height, template="plotly_white",
                      margin=dict(l=50, r=20, t=70, b=45),
                      coloraxis=dict(colorscale="RdBu", reversescale=True, cmin=-top, cmax=top,
                                     colorbar=dict(title=dict(text="h", side="right"), thickness=12)))
    return fig

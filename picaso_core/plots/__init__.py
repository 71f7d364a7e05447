"""Plotly figure builders, one module per analysis (soup, landscape, attribution, experiments).

They take the plain data the analysis modules return (lists, numpy arrays, small dataclasses) and
return `plotly.graph_objects.Figure`s, so the same figure serves a tab, a script and the HTML
report. No Gradio here, and no model calls: a figure is a pure function of its data.

The face (docs/api.md lists every name) is eager: plotly and numpy only, no torch, and any tab
or script that draws one of these figures has paid for plotly already.
"""

from picaso_core.plots.attribution import method_heatmap, precision_bars, score_bars, token_heatmap
from picaso_core.plots.coffee import curves_figure, ih0_figure
from picaso_core.plots.compose import method_figure
from picaso_core.plots.experiments import all_figures, cost_vs_loss, gains_vs_paper, loss_vs_k, qa_losses, time_vs_k
from picaso_core.plots.finetune import before_after_bars, loss_vs_k_before_after, training_curve
from picaso_core.plots.landscape import line_figure, plane_figure
from picaso_core.plots.primer import (attention_view_figure, complexity_figure, delta_tokens_figure, eigen_figure,
                                      kernel_figure, memory_figure, selective_figure)
from picaso_core.plots.report import write_report
from picaso_core.plots.soup import (decay_figure, mixing_figure, quality_figure, retrieval_figure, state_map,
                                    two_task_figure)

__all__ = [
    "score_bars", "method_heatmap", "token_heatmap", "precision_bars",
    "curves_figure", "ih0_figure",
    "method_figure",
    "all_figures", "loss_vs_k", "time_vs_k", "cost_vs_loss", "gains_vs_paper", "qa_losses",
    "loss_vs_k_before_after", "training_curve", "before_after_bars",
    "plane_figure", "line_figure",
    "kernel_figure", "eigen_figure", "memory_figure", "selective_figure", "delta_tokens_figure",
    "attention_view_figure", "complexity_figure",
    "write_report",
    "state_map", "quality_figure", "retrieval_figure", "mixing_figure", "two_task_figure", "decay_figure",
]

"""The analyses: pure functions of (model, token ids, states) that return plain data.

    evaluate.py         every composition method on one sample: loss, generation, timings
    sweep.py            the protocol's k-sweep: k lists, the record log, run_sweep
    measurements.py     process vs generate (fig. 7) and chunk lengths (fig. 9)
    summaries.py        tables and the HTML report from experiment records
    attribution.py      leave-one-in / leave-one-out / surrogate attribution, precision (table 4)
    landscape.py        loss over the plane through three states and the line between two (fig. 2)
    landscape_fig2.py   fig. 2: the Soup and CASO planes and lines of samples, prop. 4 distances
    soup.py             the skill library: state features per layer, task retrieval
    soup_projection.py  the library's maps: PCA / t-SNE / UMAP
    soup_mixing.py      mixing states: soup vs shots, retrieval + mixing, two skills, A-decay
    skill_eval.py       in-context skill accuracy from composed states

They import the engine, compose, the store, retrieval and data; figures are built from their
results in picaso_core.plots, never here. The paper's protocol over a corpus, which writes the report
through picaso_core.plots, is the command above both: `python -m picaso_core.experiments`.

The face (docs/api.md lists every name) is lazy (PEP 562 `__getattr__`): a name imports its
module on first use, because evaluate.py, sweep.py and summaries.py are torch-free and on
`python -m picaso_core.experiments --help`'s path, while most modules here import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.analysis.attribution import LOO_METHODS, LeaveOneOut, PrecisionResult  # noqa: F401
    from picaso_core.analysis.attribution import SurrogateResult, ablation_surrogate  # noqa: F401
    from picaso_core.analysis.attribution import attribution_precision, fit_surrogate, leave_one_in  # noqa: F401
    from picaso_core.analysis.attribution import leave_one_out, leave_one_out_tokens  # noqa: F401
    from picaso_core.analysis.attribution import summarize_precision, surrogate  # noqa: F401
    from picaso_core.analysis.attribution_sources import SourceScores, SpanError, ablation_losses  # noqa: F401
    from picaso_core.analysis.attribution_sources import score_sources, span_tokens  # noqa: F401
    from picaso_core.analysis.compose_cache import ComposeCache, ResultCache, cached_states  # noqa: F401
    from picaso_core.analysis.evaluate import METHODS, METHOD_NAMES, EvalSummary, MethodResult  # noqa: F401
    from picaso_core.analysis.evaluate import evaluate_samples, k_sweep, run_methods  # noqa: F401
    from picaso_core.analysis.landscape import Landscape, Line, PlaneGeometry, PlaneInput, average_lines  # noqa: F401
    from picaso_core.analysis.landscape import average_planes, line, plane  # noqa: F401
    from picaso_core.analysis.landscape_fig2 import Fig2, fig2, prop4_distances  # noqa: F401
    from picaso_core.analysis.measurements import chunk_lengths, process_vs_generate  # noqa: F401
    from picaso_core.analysis.skill_eval import mean_accuracy, skill_accuracy, skill_outcomes  # noqa: F401
    from picaso_core.analysis.soup import SkillLibrary, cluster_quality, features, retrieval_accuracy  # noqa: F401
    from picaso_core.analysis.soup import skill_tasks, task_names  # noqa: F401
    from picaso_core.analysis.soup_mixing import DecayComparison, decay_comparison, mixing_table  # noqa: F401
    from picaso_core.analysis.soup_mixing import retrieval_mixing, two_task_mix  # noqa: F401
    from picaso_core.analysis.soup_projection import PROJECTIONS, project, warm_up_umap  # noqa: F401
    from picaso_core.analysis.sources import GRAINS, Source, SourceError, SourceStore, encode_sources  # noqa: F401
    from picaso_core.analysis.sources import make_sources, source_states  # noqa: F401
    from picaso_core.analysis.summaries import curves, gains, ks_text, paper_vs_ours, summarize  # noqa: F401
    from picaso_core.analysis.sweep import CONTEXT_SUFFIX, ContextSource, MemoryLog, RecordLog, parse_ks  # noqa: F401
    from picaso_core.analysis.sweep import run_sweep  # noqa: F401

_FACE = {
    "evaluate": ("METHODS", "METHOD_NAMES", "MethodResult", "EvalSummary", "run_methods", "evaluate_samples",
                 "k_sweep"),
    "sweep": ("CONTEXT_SUFFIX", "parse_ks", "RecordLog", "MemoryLog", "ContextSource", "run_sweep"),
    "summaries": ("summarize", "paper_vs_ours", "curves", "gains", "ks_text"),
    "measurements": ("chunk_lengths", "process_vs_generate"),
    "attribution": ("LOO_METHODS", "leave_one_in", "leave_one_out", "leave_one_out_tokens", "surrogate",
                    "ablation_surrogate", "fit_surrogate", "attribution_precision", "summarize_precision",
                    "LeaveOneOut", "SurrogateResult", "PrecisionResult"),
    "attribution_sources": ("score_sources", "span_tokens", "ablation_losses", "SourceScores", "SpanError"),
    "sources": ("GRAINS", "Source", "SourceError", "SourceStore", "make_sources", "encode_sources", "source_states"),
    "compose_cache": ("ComposeCache", "ResultCache", "cached_states"),
    "landscape": ("Landscape", "PlaneGeometry", "PlaneInput", "Line", "plane", "line", "average_planes",
                  "average_lines"),
    "landscape_fig2": ("Fig2", "fig2", "prop4_distances"),
    "soup": ("SkillLibrary", "skill_tasks", "task_names", "features", "cluster_quality", "retrieval_accuracy"),
    "soup_projection": ("PROJECTIONS", "project", "warm_up_umap"),
    "soup_mixing": ("DecayComparison", "mixing_table", "retrieval_mixing", "two_task_mix", "decay_comparison"),
    "skill_eval": ("skill_accuracy", "skill_outcomes", "mean_accuracy"),
}
__getattr__, __dir__, __all__ = lazy_face(__name__, _FACE)

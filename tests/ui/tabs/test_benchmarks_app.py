"""The Benchmarks tab: the shipped demo run, the live sweep handler (no server), and /benchmarks
through gradio_client on the launched app (tiny random model, facts corpus: test_app.app_url)."""

from __future__ import annotations

import json
import math

import gradio as gr
import pytest

from picaso_core.analysis.evaluate import METHODS
from picaso_core.ui.tabs import benchmarks as B


def test_the_shipped_demo_run_is_small_and_complete():
    summary = B.load_shipped()
    assert summary is not None, f"missing {B.SHIPPED}: {B.SHIPPED_COMMAND}"
    assert B.SHIPPED.stat().st_size < 100_000
    main = summary["main"]
    n = summary["meta"]["samples"]
    assert main["ks"] == list(range(11)) and main["methods"] == list(METHODS) and main["n_samples"] == n >= 5
    assert all(x == n for ns in main["n"].values() for x in ns)  # every sample at every k and method
    k0 = main["ks"].index(0)
    assert max(main["loss"][m][k0] for m in METHODS) - min(main["loss"][m][k0] for m in METHODS) < 1e-4
    assert summary["qa"]["methods"].keys() >= {"none", "concat", "picaso_r"}
    table = B.paper_table(summary)
    assert list(table["Method"])[0] == "Baseline (none)" and len(table) == 7
    assert table.loc[table["Method"] == "PICASO-R", "Gain, paper (WikiText)"].item() == "10.1%"
    assert "Look at" in B.intro(summary)
    ids = [f[0] for f in B.P.all_figures(summary)]
    assert "bench-loss-vs-k" in ids and len(ids) == len(set(ids))


def test_live_sweep_yields_after_each_sample_with_the_baseline_at_k0(res):  # noqa: F811
    steps = list(B.run_live(res, samples=2, ks="0,1,2", methods=list(METHODS), retriever="minilm"))
    assert len(steps) == 2  # one update per sample
    loss_fig, time_fig, status, summary, py, cl = steps[-1]
    assert summary["ks"] == [0, 1, 2] and summary["n_samples"] == 2
    assert all(n == [2, 2, 2] for n in summary["n"].values())
    at0 = [summary["loss"][m][0] for m in METHODS]
    assert max(at0) - min(at0) < 1e-5  # k = 0: every method is the baseline
    assert {t.name for t in loss_fig.data} >= {"Concat", "PICASO-R", "None (baseline)"}
    assert "2 of 2 samples" in status and "k = 0, 1, 2" in status and "mean over k = 1, 2:" in status and "api_name='/benchmarks'" in cl and "run_sweep" in py
    json.dumps(summary)  # plain data for the gr.JSON output
    assert all(math.isfinite(x) for x in summary["loss"]["picaso_r"])


@pytest.mark.parametrize("retriever", ["bm25", "random"])
def test_live_sweep_with_other_retrievers_adds_the_baseline(res, retriever):  # noqa: F811
    *_, (_, _, _, summary, _, _) = B.run_live(res, samples=1, ks="1", methods=["picaso_r"], retriever=retriever)
    assert summary["methods"] == ["none", "picaso_r"] and summary["retriever"] == retriever


@pytest.mark.parametrize("kw, message", [
    (dict(ks="a"), "k list"), (dict(ks="0,20"), "k up to 10"), (dict(ks=""), "at least one k"),
    (dict(samples=0), "samples must be"), (dict(methods=[]), "pick methods"), (dict(methods=["nope"]), "unknown"),
    (dict(retriever="tfidf"), "retriever must be one of minilm, bm25, random"),
])
def test_live_sweep_rejects_bad_input_with_a_message(res, kw, message):  # noqa: F811
    args = dict(samples=1, ks="0,1", methods=["none", "picaso_r"], retriever="minilm") | kw
    with pytest.raises(gr.Error, match=message):
        next(B.run_live(res, **args))


def test_benchmarks_endpoint_through_gradio_client(app_url):  # noqa: F811
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/benchmarks"]
    labels = [r["label"] for r in api["returns"]]
    assert len(labels) == 6 and not any(lbl.startswith("value_") for lbl in labels)
    out = client.predict(samples=2, ks="0,1", methods=["none", "picaso_r"], retriever="bm25", api_name="/benchmarks")
    summary = out[3]
    assert summary["ks"] == [0, 1] and summary["methods"] == ["none", "picaso_r"] and summary["retriever"] == "bm25"
    assert summary["n"]["picaso_r"] == [2, 2]
    with pytest.raises(Exception, match="k up to 10"):
        client.predict(samples=1, ks="0,50", methods=["none"], retriever="minilm", api_name="/benchmarks")


# ---- talk-ready figures ------------------------------------------------------------------------------
def _decade_step(t: float) -> float:
    return round(t / 10 ** math.floor(math.log10(t) + 1e-9), 6)


@pytest.mark.parametrize("values, ticks", [
    ([12, 15], [10, 20]), ([12, 90], [10, 20, 50, 100]), ([3, 4], [2, 5]), ([0.5, 30000], [0.1, 1, 10, 100, 1e3, 1e4, 1e5]),
])
def test_log_ticks_are_1_2_5_steps_covering_the_data(values, ticks):
    assert B.P.log_ticks(values) == pytest.approx(ticks)


def test_the_shipped_figures_have_sane_axes_and_a_caption_that_matches_the_data():
    summary = B.load_shipped()
    figs = {f[0]: f for f in B.P.all_figures(summary)}
    # log axes: labels at 1-2-5 steps only, at least two, spanning every point
    for eid, axis in (("bench-time-vs-k", "yaxis"), ("bench-cost", "xaxis")):
        fig = figs[eid][3]
        ax = fig.layout[axis]
        vals = [v for t in fig.data for v in (t.y if axis == "yaxis" else t.x) if v is not None]
        assert ax.type == "log" and len(ax.tickvals) >= 2 and ax.ticktext
        assert all(_decade_step(t) in (1, 2, 5) for t in ax.tickvals)
        assert ax.tickvals[0] <= min(vals) and ax.tickvals[-1] >= max(vals)
        assert 10 ** ax.range[0] <= min(vals) and 10 ** ax.range[1] >= max(vals)
    # the long sweep's k axis: the data's range, not -27.6 to 55
    long = summary["long"]
    rng = figs["bench-long"][3].layout.xaxis.range
    assert min(long["ks"]) - 3 <= rng[0] < min(long["ks"]) and max(long["ks"]) < rng[1] <= max(long["ks"]) + 3
    # its caption says what the figure shows at the largest k, then what the paper shows
    caption = figs["bench-long"][2]
    i = len(long["ks"]) - 1
    assert f"At k = {long['ks'][i]}" in caption and f"baseline {long['loss']['none'][i]:.3f}" in caption
    above = [B.P.NAMES[m] for m in long["methods"][1:] if (long["loss"][m][i] or 0) > long["loss"]["none"][i]]
    assert (f"above the baseline: {', '.join(above)}." if above else "every method stays below") in caption
    assert caption.index("At k =") < caption.index("In the paper")


def test_the_live_time_axis_reads_1_2_5_too(res):  # noqa: F811
    *_, (_, time_fig, status, _, _, _) = B.run_live(res, samples=1, ks="0,2,3", methods=["concat", "picaso_r"],
                                                    retriever="bm25")
    assert all(_decade_step(t) in (1, 2, 5) for t in time_fig.layout.yaxis.tickvals)
    assert "mean over k = 2, 3" in status  # the k actually run, not 1..10


def test_shipped_figures_have_sane_k_ranges_and_uncluttered_log_axes():
    """A k axis spans the k that were run (not, say, -27.6 to 55 for k up to 50),
    and log axes label 1-2-5 ticks only (not plotly's '2 3 4 5 6 7 8 9 100 2 3 4')."""
    from picaso_core.plots import experiments as P

    summary = B.load_shipped()
    checked = 0
    for elem_id, _, _, fig in P.all_figures(summary):
        lay = fig.layout
        for ax in (lay.xaxis, lay.yaxis):
            if ax.type == "log":
                assert ax.tickvals, elem_id
                mantissas = {round(v / 10 ** math.floor(math.log10(v)), 6) for v in ax.tickvals}
                assert mantissas <= {1, 2, 5} or len(ax.tickvals) == 2, (elem_id, ax.tickvals)
                checked += 1
        xs = [x for tr in fig.data for x in (tr.x or []) if isinstance(x, (int, float)) and x is not None]
        if lay.xaxis.range and xs and lay.xaxis.type != "log":
            lo, hi = lay.xaxis.range
            assert lo >= min(xs) - 0.1 * (max(xs) - min(xs)) - 1 and hi <= max(xs) + 0.1 * (max(xs) - min(xs)) + 1, \
                (elem_id, lay.xaxis.range, min(xs), max(xs))
            checked += 1
    assert checked >= 3

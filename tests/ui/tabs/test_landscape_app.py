"""The Loss landscape tab: handlers without a server (tiny model, facts corpus of test_app), then
the launched app's /landscape endpoint through gradio_client."""

from __future__ import annotations

import json
import math

import re

import gradio as gr
import numpy as np
import pytest

from picaso_core.compose import compose
from picaso_core.plots import landscape as P
from picaso_core.ui.tabs import landscape as landscape_tab


def test_handler_one_sample(res):  # noqa: F811
    summary, soup, caso, line, table, data, py, client = landscape_tab.landscape(res, "q-velmora", 5, "u2-u3", "contour")
    assert np.array(data["soup"]["loss"]).shape == (5, 5) and np.isfinite(data["caso"]["loss"]).all()
    assert data["sample_ids"] == ["q-velmora"] and data["n_samples"] == 1
    assert "CASO triangle" in summary and "PICASO-R" in summary
    assert list(table["Layer"]) == list(range(res.model.config.n_layer))
    assert (table["holds"] == "yes").all()
    # the PICASO-R mark is PICASO-R's loss on the sample's retrieved contexts, most relevant last
    (q, c, ids, states), = landscape_tab.load_samples(res, ["q-velmora"])
    ref = res.model.continuation_loss(q, c, compose("picaso_r", states))
    assert data["caso"]["marks"][0]["name"] == "PICASO-R"
    assert data["caso"]["marks"][0]["loss"] == pytest.approx(ref, abs=1e-4)
    # both planes share one colour scale; each figure has the grid, triangle, anchors and marks
    assert soup.data[0].colorbar.tickvals == caso.data[0].colorbar.tickvals
    assert soup.data[0].colorbar.ticktext == caso.data[0].colorbar.ticktext
    assert [t.type for t in caso.data][:3] == ["contour", "scatter", "scatter"]
    assert len(line.data) == 4 and "fig2(" in py and "/landscape" in client
    json.dumps(data)  # plain data
    # the surface view redraws the same data in 3-D
    s3d, c3d, _ = landscape_tab.figures(data, "surface")
    assert c3d.data[0].type == "surface"


def test_default_is_computed_once_and_cached(res, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setattr(landscape_tab, "SHIPPED", tmp_path / "none.json")
    landscape_tab._memo.clear()
    calls = []
    real = landscape_tab.compute
    monkeypatch.setattr(landscape_tab, "compute", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    out = landscape_tab.landscape(res)  # the default settings: average of the first samples, 21 x 21
    d = out[5]
    assert d["n_samples"] == len(res.corpus.samples[:landscape_tab.AVERAGE_N]) and len(d["soup"]["loss"]) == 21
    path = landscape_tab._cache_file(res)
    assert json.loads(path.read_text())["key"] == landscape_tab.cache_key(res)
    landscape_tab._memo.clear()  # a restart: read from the cache file, not recomputed
    again = landscape_tab.landscape(res)[5]
    assert calls == [1] and again["soup"]["loss"] == d["soup"]["loss"]
    # a shipped file with another model's key is ignored
    landscape_tab._memo.clear()
    shipped = tmp_path / "shipped.json"
    shipped.write_text(json.dumps({**d, "key": "another model", "n_samples": 99}))
    monkeypatch.setattr(landscape_tab, "SHIPPED", shipped)
    assert landscape_tab.default_result(res)["n_samples"] == d["n_samples"]


def test_bad_input_and_degenerate_anchors(res, monkeypatch):  # noqa: F811
    with pytest.raises(gr.Error, match="must be a whole number from 5 to 41"):
        landscape_tab.landscape(res, "q-velmora", 100)
    with pytest.raises(gr.Error, match="no sample"):
        landscape_tab.landscape(res, "nope", 5)
    with pytest.raises(gr.Error, match="view"):
        landscape_tab.landscape(res, "q-velmora", 5, view="pie")
    # the same context retrieved twice: two equal anchors, a message instead of a crash
    real = res.retriever.retrieve
    monkeypatch.setattr(res.retriever, "retrieve", lambda q, k, **kw: [real(q, k, **kw)[0]] * 2 + real(q, k, **kw)[1:2])
    with pytest.raises(gr.Error, match="same state"):
        landscape_tab.landscape(res, "q-velmora", 5)


def test_landscape_endpoint_through_gradio_client(app_url):  # noqa: F811
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    out = client.predict(sample="q-tarrix", steps=5, pair="u1-u2", view="contour", api_name="/landscape")
    assert len(out) == 8  # summary, soup, caso, line, table, data, python, client
    data = out[5]
    assert np.array(data["soup"]["loss"]).shape == (5, 5) and np.array(data["caso"]["loss"]).shape == (5, 5)
    assert all(math.isfinite(v) for row in data["caso"]["loss"] for v in row)
    assert data["pair"] == "u1-u2" and len(data["soup"]["anchor_xy"]) == 3
    assert data["summary"]["caso_mean_side"] > 0
    with pytest.raises(Exception, match="must be a whole number from 5 to 41"):  # the handler checks the raw value
        client.predict(sample="q-tarrix", steps=1, pair="u2-u3", view="contour", api_name="/landscape")
    with pytest.raises(Exception, match="not in the list of choices|no sample"):
        client.predict(sample="nope", steps=5, pair="u2-u3", view="contour", api_name="/landscape")
    again = client.predict(sample="q-velmora", steps=5, pair="u2-u3", view="surface", api_name="/landscape")
    assert again[5]["sample_ids"] == ["q-velmora"]  # still serving


# ---- talk-ready layout: on the shipped default view, no model needed -------------------------------
def _shipped() -> dict:
    return json.loads(landscape_tab.SHIPPED.read_text())


def test_the_caso_plane_shows_its_structure_on_the_shared_colour_scale():
    d = _shipped()
    scale = P.colour_scale(d["soup"], d["caso"])
    lo, hi = P.zrange(d["soup"], d["caso"])
    caso = [v for row in d["caso"]["loss"] for v in row]
    # a linear scale over both planes gave the CASO plane 3% of the colours (one dark square)
    assert (max(caso) - min(caso)) / (hi - lo) < 0.05
    assert P.colour_share(d["caso"], scale) > 0.3 and P.colour_share(d["soup"], scale) > 0.3
    # one scale: a loss has the same colour on both planes, and a higher loss is never darker
    grid = np.linspace(lo, hi, 200)
    shades = [P.colour(v, scale) for v in grid]
    assert shades[0] == 0.0 and shades[-1] == 1.0 and all(a <= b for a, b in zip(shades, shades[1:]))
    soup_fig, caso_fig, _ = landscape_tab.figures(d)
    for fig, plane in ((soup_fig, d["soup"]), (caso_fig, d["caso"])):
        c = fig.data[0]
        assert c.type == "contour" and (c.zmin, c.zmax) == (0, 1) and c.colorbar.ticktext == tuple(scale["ticktext"])
        assert np.allclose(c.z, [[P.colour(v, scale) for v in row] for row in plane["loss"]])
        assert c.text[0][0] == f"{plane['loss'][0][0]:.4f}"  # hover reads the loss, not the colour position
    # the colour bar's labels are losses, increasing and distinct
    ticks = [float(t) for t in scale["ticktext"]]
    assert ticks == sorted(set(ticks)) and ticks[0] == pytest.approx(lo, abs=1e-3) and ticks[-1] == pytest.approx(hi, abs=1e-3)


@pytest.mark.parametrize("view", ["contour", "surface"])
def test_plane_figures_fit_a_narrow_plot(view):
    """At 800 px the planes stack (about 700 px each) and at 1400 px they sit side by side (600 px):
    the titles are short, start below Gradio's label, and the axis titles and labels stay inside."""
    for fig in landscape_tab.figures(_shipped(), view)[:2]:
        lay = fig.layout
        head, sub = lay.title.text.split("<br>")
        assert len(re.sub("<[^>]+>", "", head)) <= 40 and len(re.sub("<[^>]+>", "", sub)) <= 90
        assert lay.title.yref == "container" and (1 - lay.title.y) * lay.height == pytest.approx(P.BADGE)
        assert lay.margin.t >= P.BADGE + 40 and lay.margin.t == P.TOP
        anchors = next(t for t in fig.data if t.name == "anchors")
        if view == "contour":
            for axis in (lay.xaxis, lay.yaxis):
                assert len(axis.title.text) <= 30 and axis.automargin and axis.constrain == "domain"
            # labels of anchors on the plot's edge point inwards and are not clipped by the axes
            assert anchors.cliponaxis is False
            for x, pos in zip(anchors.x, anchors.textposition):
                if x == min(anchors.x):
                    assert not pos.endswith("left")
                if x == max(anchors.x):
                    assert not pos.endswith("right")
        else:
            scene = lay.scene
            assert scene.zaxis.nticks <= 4 and scene.zaxis.tickformat == ".2f"  # no overlapping z ticks
            assert tuple(scene.domain.x) == (0, 1) and lay.margin.l == lay.margin.r == 0  # the scene fills the plot
            eye = scene.camera.eye
            assert (eye.x ** 2 + eye.y ** 2 + eye.z ** 2) ** 0.5 < 1.8  # closer than plotly's default (2.17)
            labels = next(t for t in fig.data if getattr(t, "mode", None) == "text")  # above the surface, not half inside it
            assert all(z > a for z, a in zip(labels.z, anchors.z)) and max(labels.z) <= scene.zaxis.range[1]


@pytest.mark.parametrize("caso, soup, printed", [
    (0.76954878, 0.76739709, ("0.770", "0.767", "higher by 0.003")),  # the shipped default: 0.770 - 0.767, not the unrounded 0.0022
    (0.7671, 0.7674, ("0.7671", "0.7674", "lower by 0.0003")),  # equal at 3 digits: more digits
    (0.5, 0.75, ("0.500", "0.750", "lower by 0.250")),
])
def test_the_finding_difference_agrees_with_its_printed_numbers(caso, soup, printed):
    d = _shipped()
    d = {**d, "summary": {**d["summary"], "caso_loss_at_mean": caso, "soup_loss_at_mean": soup}}
    text = landscape_tab.summary_md(d)
    m = re.search(r"PICASO-R, is ([\d.]+)\*\* vs \*\*([\d.]+) at Soup\*\* \((lower|higher) by ([\d.]+)", text)
    assert m, text
    a, b, word, diff = m.groups()
    assert (a, b, f"{word} by {diff}") == printed
    digits = len(diff.split(".")[1])
    assert round(abs(float(b) - float(a)), digits) == float(diff)


def test_the_prop4_table_and_the_pair_control_fit_800px():
    table = landscape_tab.prop4_frame(_shipped())
    assert list(table.columns) == landscape_tab.PROP4_COLUMNS and max(map(len, table.columns)) <= 26
    assert "(I−A(u′))x(u)" in landscape_tab.PROP4_NOTE  # the bound, written out below the table

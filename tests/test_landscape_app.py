"""The Loss landscape tab: handlers without a server (tiny model, facts corpus of test_app), then
the launched app's /landscape endpoint through gradio_client."""

from __future__ import annotations

import json
import math

import gradio as gr
import numpy as np
import pytest

from picaso_core.compose import compose
from picaso_core.ui import landscape_tab
from test_app import app_url, corpus_file, res  # noqa: F401  (fixtures)


def test_handler_one_sample(res):  # noqa: F811
    summary, soup, caso, line, table, data, py, client = landscape_tab.landscape(res, "q-velmora", 5, "u2-u3", "contour")
    assert np.array(data["soup"]["loss"]).shape == (5, 5) and np.isfinite(data["caso"]["loss"]).all()
    assert data["sample_ids"] == ["q-velmora"] and data["n_samples"] == 1
    assert "CASO triangle" in summary and "PICASO-R" in summary
    assert list(table["Layer"]) == list(range(res.model.config.n_layer))
    assert (table["bound holds"] == "yes").all()
    # the PICASO-R mark is PICASO-R's loss on the sample's retrieved contexts, most relevant last
    (q, c, ids, states), = landscape_tab.load_samples(res, ["q-velmora"])
    ref = res.model.continuation_loss(q, c, compose("picaso_r", states))
    assert data["caso"]["marks"][0]["name"] == "PICASO-R"
    assert data["caso"]["marks"][0]["loss"] == pytest.approx(ref, abs=1e-4)
    # both planes share one colour range; each figure has the grid, triangle, anchors and marks
    assert soup.data[0].zmin == caso.data[0].zmin and soup.data[0].zmax == caso.data[0].zmax
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

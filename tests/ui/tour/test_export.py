"""Exports (picaso_core.ui.tour.exports and the tabs' Export handler): each file parses back to what was on
screen: the CSV's columns are the table's, the Projector's TSVs hold one row per point (metadata one
more, its header), a standalone HTML page holds the figure's data and loads nothing from a network,
the landscape grid is every (alpha, beta, loss) of the plane."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from picaso_core.light.assets import ASSETS
from picaso_core.ui.tour import exports as export
from picaso_core.ui.tour.controls import _export_choices, export_files
from picaso_core.ui.tour.downloads import Exports, file_stem


def _frame():
    return pd.DataFrame({"Method": ["Concat", "PICASO-R"], "Loss": [0.489, 0.686], "Compose (ms)": [243.5, 0.9],
                         "note, with comma": ['a "quoted", text', None]})


def test_table_csv_has_the_tables_columns_and_rows(tmp_path):
    frame = _frame()
    text = export.table_csv(frame, tmp_path / "t.csv")
    back = pd.read_csv(io.StringIO(text), keep_default_na=False)
    assert list(back.columns) == list(frame.columns)
    assert len(back) == len(frame) and back["Loss"].tolist() == [0.489, 0.686]
    assert back["note, with comma"][0] == 'a "quoted", text'
    assert (tmp_path / "t.csv").read_text() == text
    with pytest.raises(TypeError, match="DataFrame"):
        export.table_csv([[1, 2]])


def test_figure_html_is_standalone_and_holds_the_figures_data(tmp_path):
    fig = go.Figure(go.Bar(x=["Concat", "PICASO-R"], y=[0.4891234, 0.6861234]), layout=dict(title="Loss per method"))
    html = export.figure_html(fig, tmp_path / "f.html", title="Loss")
    assert "0.4891234" in html and "0.6861234" in html and "Loss per method" in html
    # plotly.js inlined: no <script src=...> (no CDN), so the page opens offline
    assert not re.search(r"<script[^>]+src=", html)
    assert "Plotly.newPlot" in html and len(html) > 1_000_000
    assert "<title>Loss</title>" in html


def test_projector_tsv_one_row_per_point_and_a_header_in_metadata(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 5))
    tasks = ["antonym", "counting", "first\tletter", "a", "b", "c", "d"]
    vec, meta = export.projector_tsv(x, tasks, layer=3, shots=16, folder=tmp_path, stem="soup")
    rows = [r.split("\t") for r in vec.strip("\n").split("\n")]
    assert len(rows) == 7 and all(len(r) == 5 for r in rows)
    np.testing.assert_allclose(np.array(rows, dtype=float), x, rtol=1e-5)
    m = list(csv.reader(io.StringIO(meta), delimiter="\t"))
    assert m[0] == ["task", "layer", "shots"] and len(m) == 8
    assert m[3] == ["first letter", "3", "16"]  # a tab inside a label would shift the columns
    assert (tmp_path / "soup_vectors.tsv").read_text() == vec and (tmp_path / "soup_metadata.tsv").read_text() == meta
    with pytest.raises(ValueError, match="one row per task"):
        export.projector_tsv(x, tasks[:3], 0, 16)
    with pytest.raises(ValueError, match="NaN"):
        export.projector_tsv(np.full((2, 2), np.nan), ["a", "b"], 0, 16)


def test_landscape_csv_is_every_grid_point_of_the_plane():
    data = json.loads((ASSETS / "demo_data" / "landscape_default.json").read_text())
    plane = data["caso"]
    text = export.landscape_csv(plane)
    rows = list(csv.DictReader(io.StringIO(text)))
    s = len(plane["xs"])
    assert list(rows[0]) == ["alpha", "beta", "loss"] and len(rows) == s * len(plane["ys"])
    # loss[i][j] is at (xs[j], ys[i]) (analysis/landscape.py): spot-check corners and a middle point
    for i, j in ((0, 0), (0, s - 1), (s - 1, 0), (s // 2, s // 3)):
        r = rows[i * s + j]
        assert float(r["alpha"]) == pytest.approx(plane["xs"][j], rel=1e-5)
        assert float(r["beta"]) == pytest.approx(plane["ys"][i], rel=1e-5)
        assert float(r["loss"]) == pytest.approx(plane["loss"][i][j], rel=1e-5)
    with pytest.raises(ValueError, match="xs"):
        export.landscape_csv({"loss": []})
    with pytest.raises(ValueError, match="grid"):
        export.landscape_csv({"xs": [0, 1], "ys": [0, 1], "loss": [[1.0, 2.0]]})


class _Plot:  # what gr.Plot hands a handler: its plotly JSON in .plot
    def __init__(self, fig):
        self.plot = fig.to_json()


def test_the_tabs_export_handler_writes_what_is_on_screen(tmp_path):
    frame = _frame()
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3.14159, 2.71828]))
    store = Exports(tmp_path / "exports")
    [csv_path] = export_files(None, "compose", "table:0", [], [frame], None, "demo-test-r0003", store)
    assert list(pd.read_csv(csv_path).columns) == list(frame.columns)
    assert csv_path.endswith(f"{file_stem('compose', 'demo-test-r0003')}-table.csv")
    [html_path] = export_files(None, "compose", "plot:0", [_Plot(fig)], [], None, store=store, what="loss")
    assert "3.14159" in open(html_path).read() and html_path.endswith(f"{file_stem('compose')}-figure-loss.html")
    data = json.loads((ASSETS / "demo_data" / "landscape_default.json").read_text())
    paths = export_files(None, "landscape", "grid", [], [], data, "average", store)
    assert [p.rsplit("/", 1)[1] for p in paths] == [f"{file_stem('landscape', 'average')}-landscape-{p}.csv"
                                                    for p in ("soup", "caso")]
    import gradio as gr

    with pytest.raises(gr.Error, match="run the tab first"):
        export_files(None, "compose", "table:0", [], [pd.DataFrame(columns=["a"])], None, store=store)
    with pytest.raises(gr.Error, match="Compute the landscape first"):
        export_files(None, "landscape", "grid", [], [], None, store=store)
    with pytest.raises(gr.Error, match="Draw the skill map first"):
        export_files(None, "soup", "projector", [], [], {}, store=store)
    plot, table = gr.Plot(label="Skill map", render=False), gr.Dataframe(label="Runs", render=False)
    choices = dict((v, k) for k, v in _export_choices("soup", [plot], [table, table]))
    assert list(choices)[0] == "projector" and {"table:0", "table:1", "plot:0"} <= set(choices)
    assert choices["plot:0"] == "Plot · Skill map (HTML)" and choices["table:1"] == "Table · Runs (CSV)"


def test_projector_export_of_the_soup_map_on_screen(tiny_model_dir, tmp_path):
    """The State soup tab's map (the tiny model's skill library) exported: one vectors row per point
    on the map, the metadata file one more (its header), each row's task the map's."""
    from picaso_core.session import load_resources
    from picaso_core.ui.tabs.soup_handlers import soup_map
    from conftest import BagOfWords, write_corpus

    res = load_resources(str(tiny_model_dir), str(write_corpus(tmp_path / "facts.jsonl")), cache_dir=tmp_path / "c",
                         embedder=BagOfWords(), log=lambda s: None)
    *_, data, _, _ = soup_map(res, layer=1, part="ssm", method="pca", dim=2)
    vec_path, meta_path = sorted(export_files(res, "soup", "projector", [], [], data), reverse=True)
    stem = file_stem("soup", "layer1-ssm")
    assert vec_path.endswith(f"{stem}-projector_vectors.tsv") and meta_path.endswith(f"{stem}-projector_metadata.tsv")
    assert vec_path.startswith(str(tmp_path / "c" / "exports"))  # under the app's cache folder
    vectors = [line.split("\t") for line in open(vec_path).read().strip("\n").split("\n")]
    meta = list(csv.reader(open(meta_path), delimiter="\t"))
    assert len(vectors) == len(data["coords"]) and len(meta) == len(data["coords"]) + 1
    assert meta[0] == ["task", "layer", "shots"] and [m[0] for m in meta[1:]] == data["tasks"]
    assert {m[1] for m in meta[1:]} == {"1"} and len({len(v) for v in vectors}) == 1 and len(vectors[0]) > 2

"""The tour's last step, "the same question on a hybrid model" (issue 49): the Compose question of steps
1-2 on the bundled demo-hybrid, every method and the ablation (attention keys and values dropped),
beside the app's own model's numbers; on a hybrid app, the app's model alone. The bar shows the table;
the tab's own outputs are filled only with the app's own model's results. Its cache entry is keyed by
the bundled hybrid's files: retraining it rebuilds that step alone.
"""

from __future__ import annotations

import shutil

import pytest

from conftest import BagOfWords, tiny_nemotron_h_dir, write_corpus
from picaso_core.ui.tour import cache as tour
from picaso_core.ui.tour import runs
from picaso_core.ui.tour.steps import STEPS

LAST = len(STEPS)


def _rows(entry) -> dict:
    t = entry["tables"][0]
    return {r[0]: dict(zip(t["columns"][1:], r[1:])) for r in t["data"]}


@pytest.mark.skipif(runs.hybrid_fingerprint() == "absent", reason="the bundled demo-hybrid is not built")
def test_last_step_sets_the_hybrid_beside_the_apps_model(tour_res):
    assert STEPS[-1].run == "compose_hybrid" and STEPS[-1].tab == "compose" and STEPS[-1].inputs == STEPS[1].inputs
    memo = {}
    methods = tour.compute(tour_res, 2, memo)  # step 2: the same question, every method, on the app's model
    entry = tour.compute(tour_res, LAST, memo)
    f = entry["facts"]
    assert f["own"] is False and f["model"] == "demo-hybrid" and f["pure"] == methods["facts"]
    assert entry["outputs"] is None and entry["endpoint"] is None  # the tab keeps the app's own results
    rows = _rows(entry)
    pure_col, hy_col = entry["tables"][0]["columns"][1:]
    assert list(rows)[-1] == "PICASO-R, attention dropped" and rows["PICASO-R, attention dropped"][pure_col] is None
    for m, loss in f["hybrid"].items():
        assert rows[runs.C.LABEL[m]][hy_col] == round(loss, 3)
    h = f["hybrid"]
    assert f"**{h['picaso_r']:.3f}**" in entry["text"]
    assert ("carry part" in entry["text"]) == (h["picaso_r_drop"] - h["picaso_r"] > 0.005)


@pytest.fixture(scope="module")
def hybrid_res(tmp_path_factory):
    """Resources over a tiny random Nemotron-H (the app serving a hybrid) and the facts corpus."""
    pytest.importorskip("transformers")
    from picaso_core.session import load_resources

    tmp = tmp_path_factory.mktemp("hybrid_tour")
    tiny_nemotron_h_dir(tmp / "model", "M-M*-M-")
    return load_resources(str(tmp / "model"), str(write_corpus(tmp / "facts.jsonl")), cache_dir=tmp / "cache",
                          embedder=BagOfWords(), log=lambda s: None)


def test_on_a_hybrid_app_the_step_reads_the_apps_model(hybrid_res, monkeypatch):
    def no_second_model(*a):
        raise AssertionError("the step loaded a second model")

    monkeypatch.setattr(runs, "_hybrid_model", no_second_model)
    entry = tour.compute(hybrid_res, LAST)
    f = entry["facts"]
    assert f["own"] is True and f["pure"] is None and f["fingerprint"] == hybrid_res.model.fingerprint()
    assert entry["endpoint"] == "compose" and entry["outputs"] is not None  # its own results fill the tab
    data = entry["outputs"][6]["json"]  # /compose's plain data, the tab's own run
    assert {m: r["loss"] for m, r in data["methods"].items()} == f["hybrid"] and "picaso_r_drop" in f["hybrid"]
    assert "the tab below shows its results" in entry["text"]


def test_the_step_key_follows_the_bundled_hybrids_files(tmp_path, monkeypatch):
    folder = tmp_path / "demo_hybrid_model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "nemotron_h"}')
    (folder / "model.safetensors").write_bytes(b"weights, version 1")
    monkeypatch.setitem(runs.BUNDLED, "demo-hybrid", (folder, "scripts/train_demo.py --arch hybrid"))
    keys = [tour.step_key(s) for s in STEPS]
    first = runs.hybrid_fingerprint()
    (folder / "model.safetensors").write_bytes(b"weights, version 2 (retrained)")
    assert runs.hybrid_fingerprint() != first
    again = [tour.step_key(s) for s in STEPS]
    assert again[:-1] == keys[:-1] and again[-1] != keys[-1]  # the last step alone is rebuilt
    shutil.rmtree(folder)
    assert runs.hybrid_fingerprint() == "absent"

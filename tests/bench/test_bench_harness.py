"""bench/harness.py, which every benchmark's figures go through: competitors timed round-robin (so a
change in load hits all alike), the caps on slow competitors, ratios of medians, the --json output,
and every bench script answering --help from its shared parser."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402


def _recorder(calls: list):
    return {k: (lambda k=k: calls.append(k)) for k in ("a", "b", "c")}


def test_interleaved_runs_every_competitor_once_per_round_in_turn():
    calls: list = []
    times = harness.interleaved(_recorder(calls), repeats=3, warmup=1)
    assert calls == ["a", "b", "c"] * 4  # one warm-up round, then three timed rounds, round-robin
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t >= 0 for v in times.values() for t in v)


def test_interleaved_alternates_and_caps_rounds():
    calls: list = []
    times = harness.interleaved(_recorder(calls), repeats=3, warmup=0, rounds={"c": 1}, alternate=True)
    assert calls == ["a", "b", "c", "b", "a", "a", "b"]  # round 1 reversed; c timed once only
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 1}


def test_ratios_are_medians_over_the_baseline():
    r = harness.ratios({"concat": [3.0, 30.0, 4.0], "picaso_r": [1.0, 2.0, 100.0], "fixed": 8.0}, "picaso_r")
    assert r == {"concat": 2.0, "picaso_r": 1.0, "fixed": 4.0}


def test_table_is_markdown():
    assert harness.table([[1, "x"]], ["n", "s"]).splitlines() == ["| n | s |", "|---|---|", "| 1 | x |"]


def test_json_is_written_only_when_asked(tmp_path):
    ap = harness.parser("doc", repeats=3)
    harness.write_json(harness.parse(ap, []), {"t": [1.0]})  # no --json: nothing written, no error
    out = tmp_path / "r.json"
    args = harness.parse(ap, ["--json", str(out), "--repeats", "5"])
    harness.write_json(args, {"t": [1.0]}, {"t": 1.0}, script="demo")
    data = json.loads(out.read_text())
    assert data["script"] == "demo" and data["args"]["repeats"] == 5
    assert data["figures"] == {"t": [1.0]} and data["ratios"] == {"t": 1.0}


def test_device_cuda_without_a_gpu_stops_with_a_message():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(SystemExit, match="no CUDA device"):
        harness.parse(harness.parser("doc", device="cpu"), ["--device", "cuda"])


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if p.name != "harness.py"))
def test_every_bench_script_answers_help(script, tmp_path):
    r = subprocess.run([sys.executable, str(BENCH / script), "--help"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--json" in r.stdout and "--threads" in r.stdout

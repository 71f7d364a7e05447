"""The tour's cache is the same on every machine (issue 48): every step is budgeted in steps and
samples, not seconds, so two builds of it, in two processes running side by side (each slowed by the
other, as a busy machine slows a build), write the same file byte for byte but for the timings they
measured. And an entry whose step definition or budget changed is rebuilt, the others kept.

The builds run the real build code (`cache.build` over the real runners) on the tiny model, with
each step's budget made tiny (TINY below) so that they take seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from picaso_core.ui.tour import cache as tour
from picaso_core.ui.tour import steps as tour_steps
from conftest import ROOT

TESTS = Path(__file__).resolve().parents[2]
# each costly step's budget, tiny: 2 turns of COFFEE training, a 5 x 5 landscape grid on one sample, the
# skill map by PCA (t-SNE is seeded, but slow on a busy machine), attribution to whole contexts
TINY = {"coffee": dict(steps=100), "landscape": dict(sample="q-velmora", steps=5), "soup_map": dict(method="pca"),
        "attribution": dict(grain="context")}

BUILD = """
import sys
sys.path[:0] = [{tests!r}, {here!r}]
from conftest import BagOfWords
from test_tour_determinism import tiny_steps
from picaso_core.session import load_resources
from picaso_core.ui.tour import cache as tour

tiny_steps(tour)
res = load_resources({model!r}, {corpus!r}, cache_dir={cache!r}, embedder=BagOfWords(), log=lambda s: None)
tour.build(res, log=lambda s: None)
print(tour.cache_file(res))
"""


def tiny_steps(module, budgets: dict = TINY) -> None:
    """Replace the steps (and the tabs' openings) of `module` (tour.cache) with their tiny-budget twins
    (a step that is also an opening stays one object: its entry is shared)."""
    twins = {}

    def twin(s):
        if id(s) not in twins:
            twins[id(s)] = tour_steps.Step(s.title, s.tab, s.run, {**s.inputs, **budgets.get(s.run, {})})
        return twins[id(s)]

    module.STEPS = tuple(twin(s) for s in module.STEPS)
    module.OPENINGS = {k: tuple(twin(s) for s in v) for k, v in module.OPENINGS.items()}


# ---- what a timing is (an independent reading of the file: its units and names) -------------------
TIMED_KEY = re.compile(r"(^|_)(ms|seconds)$|^(compose|process)_ms$")
TIMED_COLUMN = re.compile(r"\(ms\)|ms /|seconds|Training \(ours\)")
TIMED_TEXT = re.compile(r"\d[\d,.]*\s?(ms|s)\b|\d[\d,.]*\s?[x×]")


def without_timings(x, key: str = ""):
    """The cache's JSON with every measured time (and what is read off one: a speed-up) replaced by "T"."""
    if isinstance(x, dict):
        if set(x) >= {"columns", "data"}:  # a table: its timed columns
            cols = [i for i, c in enumerate(x["columns"]) if TIMED_COLUMN.search(str(c))]
            x = {**x, "data": [["T" if i in cols else v for i, v in enumerate(row)] for row in x["data"]]}
        if x.get("yaxis") in ("y2",) or x.get("xaxis") in ("x2",):  # the time panel of the compose plot
            return {**x, "x": "T", "y": "T", "text": "T", "customdata": "T", "hovertext": "T"}
        if re.search(r"%\{customdata[^}]*\} ?(s|ms)\b", str(x.get("hovertemplate", ""))):  # a time in the hover
            x = {**x, "customdata": "T"}
        return {k: "T" if TIMED_KEY.search(k) or k == "timed_on" else without_timings(v, k) for k, v in x.items()}
    if isinstance(x, list):
        return [without_timings(v, key) for v in x]
    if isinstance(x, str):
        return TIMED_TEXT.sub("T", x)
    return x


def _build_twice(tiny_model_dir, tmp_path) -> tuple[Path, Path]:
    from conftest import write_corpus

    corpus = write_corpus(tmp_path / "facts.jsonl")
    procs = [subprocess.Popen([sys.executable, "-c", BUILD.format(
        tests=str(TESTS), here=str(Path(__file__).parent), model=str(tiny_model_dir), corpus=str(corpus),
        cache=str(tmp_path / name))],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return tuple(Path(out.strip().splitlines()[-1]) for out, _ in outs)


@pytest.fixture(scope="module")
def two_builds(tiny_model_dir, tmp_path_factory):
    return _build_twice(tiny_model_dir, tmp_path_factory.mktemp("determinism"))


def test_two_builds_side_by_side_write_the_same_cache_but_for_timings(two_builds):
    a, b = (json.loads(p.read_text()) for p in two_builds)
    assert a["key"] == b["key"] and set(a["steps"]) == {str(n) for n in range(1, len(tour.STEPS) + 1)}
    assert set(a["openings"]) == set(tour_steps.OPENINGS)
    for n in a["steps"]:  # one step at a time, so that a failure names it
        assert json.dumps(without_timings(a["steps"][n]), sort_keys=True) == \
            json.dumps(without_timings(b["steps"][n]), sort_keys=True), f"step {n} differs between two builds"
    assert json.dumps(without_timings(a), sort_keys=True) == json.dumps(without_timings(b), sort_keys=True)
    # every step ran to its budget: COFFEE's steps, not a time
    coffee = next(e for n, e in a["steps"].items() if tour.STEPS[int(n) - 1].run == "coffee")
    assert coffee["facts"]["steps"] == TINY["coffee"]["steps"]
    assert a["timed_on"] == tour.machine()


def test_a_changed_budget_rebuilds_that_step_alone(tour_res, tmp_path, monkeypatch):
    """The step's definition (its inputs: a budget is one) is in its key: the changed step is rebuilt,
    the others are served from the file as they were."""
    from conftest import fake_view
    from picaso_core.ui.tour import runs as tour_runs

    calls = []
    for name in list(tour_runs.RUNNERS):
        fake = fake_view(name)
        monkeypatch.setitem(tour_runs.RUNNERS, name, lambda res, memo=None, _f=fake, _n=name, **kw: (
            calls.append((_n, kw)), _f(res, memo, **kw))[1])
    monkeypatch.setattr(tour, "STEPS", tour.STEPS)
    monkeypatch.setattr(tour, "OPENINGS", tour.OPENINGS)
    tiny_steps(tour)
    tour.build(tour_res, tmp_path, log=lambda s: None)
    before = json.loads(tour.cache_file(tour_res, tmp_path).read_text())
    n = next(i for i, s in enumerate(tour.STEPS, 1) if s.run == "coffee")
    calls.clear()
    tiny_steps(tour, {"coffee": dict(steps=150)})
    assert n not in tour.load_cache(tour_res, tmp_path)  # stale: never served
    tour.build(tour_res, tmp_path, log=lambda s: None)
    assert [c for c, _ in calls] == ["coffee"] and calls[0][1]["steps"] == 150  # the step, and its opening shares it
    after = json.loads(tour.cache_file(tour_res, tmp_path).read_text())
    assert after["steps"][str(n)]["step_key"] != before["steps"][str(n)]["step_key"]
    assert {k: v for k, v in after["steps"].items() if k != str(n)} == \
        {k: v for k, v in before["steps"].items() if k != str(n)}
    assert len(tour.load_cache(tour_res, tmp_path)) == len(tour.STEPS)
    assert set(tour.load_openings(tour_res, tmp_path)) == set(tour_steps.OPENINGS)

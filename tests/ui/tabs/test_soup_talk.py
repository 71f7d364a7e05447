"""State soup, talk-ready: every sentence of the tab is read off the data
it shows, malformed input gets one line, the map's legend fits, the first UMAP map is honest about
its wait. Handler level, no server; the two-skill default runs on the bundled demo model."""

from __future__ import annotations

import time
import types

import numpy as np
import pytest

from picaso_core import load_model

from picaso_core.analysis import soup, soup_projection
from picaso_core.plots import soup as plots
from picaso_core.ui.tabs import soup_handlers
from picaso_core.ui.tabs import soup_lab
from picaso_core.ui.tabs import soup as soup_tab
from picaso_core.ui.tabs import soup_text
from tests.conftest import bare_resources


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def res(tiny_model_dir, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setattr(soup_lab, "SHOTS", 4)
    monkeypatch_module.setattr(soup_lab, "PER_TASK", 2)
    monkeypatch_module.setattr(soup_lab, "WARM_UMAP", False)
    folder = tmp_path_factory.mktemp("cache") / "corpus"
    return bare_resources(load_model(str(tiny_model_dir)), "tiny", folder)


def _rows(gens, losses):
    ws = [round(w, 1) for w in np.linspace(0, 1, len(gens))]
    return [{"w": w, "generation": g, "losses": {a: v[i] for a, v in losses.items()}} for i, (w, g) in enumerate(zip(ws, gens))]


# ---- sentences that agree with what is shown ----------------------------------------------------
def test_two_task_story_reads_the_switch_and_the_never_preferred_answer_off_the_rows():
    rows = _rows(["doors"] * 5 + ["porte"] * 6, {"porte": np.linspace(5, 0, 11), "doors": np.linspace(0, 5, 11) + 0.1 * (np.arange(11) > 4),
                                                 "portes": np.full(11, 15.0)})
    rows[4]["losses"]["doors"] = 1.0  # lowest at 0..0.4, then porte
    s = soup_text.two_task_story(rows, 0.5, "english_french", "singular_plural", "door →")
    assert "writes **porte** after `door →`" in s
    assert "**doors** (w = 0–0.4), then **porte** (w = 0.5–1)" in s
    assert "“doors” (w = 0–0.4), then “porte” (w = 0.5–1)" in s and "never the lowest: “portes” (loss ≥ 15.00)" in s
    same = soup_text.two_task_story(_rows(["x"] * 3, {"x": [1, 1, 1]}), 0, "a", "b", "q →")
    assert "at every w" in same and "never" not in same


def test_default_two_skill_demo_shows_what_its_text_says_on_the_demo_model(tmp_path):
    """The default (English→French and singular→plural on 'door'): the demo model writes B's answer
    at w = 0 and A's at w = 1, and the summary says exactly where it switches and which answer never wins."""
    model = load_model("demo")
    demo = bare_resources(model, "demo", tmp_path / "c")
    assert soup_handlers.DEFAULT_PROMPT == "door →" and soup_handlers.DEFAULT_ANSWERS.split("\n") == ["porte", "doors", "portes"]
    fig, summary, table, data, *_ = soup_handlers.two_task(demo)
    rows = data["rows"]
    gens = [r["generation"] for r in rows]
    best = [min(r["losses"], key=r["losses"].get) for r in rows]
    assert gens[0] == "doors" and gens[-1] == "porte"  # B's answer alone, A's answer alone
    assert best[0] == "doors" and best[-1] == "porte" and "portes" not in best
    switch = next(r["w"] for r in rows if r["generation"] == "porte")
    last_b = max(r["w"] for r in rows if r["w"] < switch)
    assert f"**doors** (w = 0–{last_b:g}), then **porte** (w = {switch:g}–1)" in summary
    assert "never the lowest: “portes”" in summary
    at = next(r for r in rows if r["w"] == 0.5)
    assert f"writes **{at['generation']}**" in summary
    assert [t.name for t in fig.data] == ["loss of “porte”", "loss of “doors”", "loss of “portes”"]


def test_best_layer_sentence_names_the_layer_the_numbers_show(res):
    q = {"layers": [0, 1, 2, 3], "ssm": {"nn_accuracy": [0.56, 0.49, 0.53, 0.64]}}
    s = soup_text.best_layer_sentence(q)
    assert "layer **3** of 0–3" in s and "64%" in s and "the last layer here" in s
    q = {"layers": [0, 1, 2], "ssm": {"nn_accuracy": [0.3, 0.7, 0.5]}}
    assert "layer **1**" in soup_text.best_layer_sentence(q) and "a middle layer here" in soup_text.best_layer_sentence(q)
    assert "middle layers separate" not in soup_tab.LOOK_AT  # the claim the demo model contradicted
    fig, quality, summary, table, data, *_ = soup_handlers.soup_map(res, 1, "ssm", "pca", 2)
    assert soup_text.best_layer_sentence(data["quality"]) in summary
    best = int(np.argmax(data["quality"]["ssm"]["nn_accuracy"]))
    assert f"layer **{data['quality']['layers'][best]}**" in summary


def test_mixing_summary_is_a_table_and_sentences_computed_from_the_rows():
    acc = {1: (0.82, 0.72), 2: (0.85, 0.80), 4: (0.88, 0.90), 8: (0.90, 0.91), 16: (0.91, 0.91)}
    rows = [{"k": k, "method": m, "accuracy": a, "loss": 0.1, "n": 3}
            for k, (sp, ks) in acc.items() for m, a in (("soup", sp), ("k_shots", ks), ("all_shots", 0.91))]
    rmix = [{"k": k, "method": m, "accuracy": a} for k in (1, 4) for m, a in (("query", 0.6), ("retrieved_mix", 0.7))]
    s = soup_text.mixing_summary(rows, rmix)
    assert "| soup of 16/k states | 82% | 85% | 88% | 90% |" in s
    assert "| one k-shot state alone | 72% | 80% | 90% | 91% |" in s
    assert "One state of all 16 shots: **91%**" in s and "beats one k-shot state at k = 1, 2;" in s
    assert "3 points below all 16 shots" in s and "k = 1 60% → 70%, k = 4 60% → 70%" in s
    assert "shots 72%" not in s  # the figures are in the table, not run together as "soup of 16 82% vs 1 shots 72%"


# ---- malformed input, one line each ---------------------------------------------------------------
@pytest.mark.parametrize("demos, line", [("no arrow here at all", 1), ("cat → cats\ndog dogs\n", 2), ("→ cats", 1)])
def test_malformed_demonstrations_are_refused_with_one_line_naming_the_line(res, demos, line):
    import gradio as gr

    for call in (lambda: soup_handlers.soup_map(res, 1, "ssm", "pca", 2, demos, require_demos=True),
                 lambda: soup_handlers.soup_map(res, 1, "ssm", "pca", 2, demos),  # "Draw" with the box filled
                 lambda: soup_handlers.retrieve(res, demos, 1, "ssm", 3)):
        with pytest.raises(gr.Error) as e:
            call()
        msg = str(e.value)
        assert f"line {line}" in msg and "question → answer" in msg and "\n" not in msg and len(msg) < 200


def test_empty_answers_to_score_are_refused_with_a_message(res):
    import gradio as gr

    for answers in ("", "  \n \n"):
        with pytest.raises(gr.Error, match="'Answers to score' is empty"):
            soup_handlers.two_task(res, "counting", "antonym", "one →", answers, 0.5)


def test_one_long_answer_to_score_is_refused_before_it_becomes_a_legend_entry(res, caplog):
    """An answer is a legend entry and a table header: one over 100 characters (the box takes 1,000)
    is refused, naming the answer and the cap, and logged with the endpoint's name as other tabs do."""
    import gradio as gr

    long = "Portes " * 15  # 105 characters
    with caplog.at_level("WARNING", logger="picaso_explorer"):
        with pytest.raises(gr.Error, match=f"answer 2 to score is 104 characters long; at most {soup_handlers.MAX_ANSWER_CHARS}"):
            soup_handlers.two_task(res, "counting", "antonym", "one →", f"portes\n{long}\ndoors", 0.5)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["rejected input to /soup_two_task"]


def test_map_legend_has_one_entry_per_task_below_the_map():
    tasks = soup.task_names()  # 10 skills and their shuffled twins
    assert len(tasks) == 20
    labels = [t for t in tasks for _ in range(3)]
    fig = plots.state_map(np.random.default_rng(0).normal(size=(60, 2)), labels, ["a → b\n"] * 60, "map",
                          query={"xy": [0, 0], "text": "x → y\n"})
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert shown == [t for t in tasks if not t.endswith("_shuffled")] + ["open circle: labels shuffled", "your demonstration"]
    assert all(t.legendgroup == t.name.replace("_shuffled", "") for t in fig.data if t.name in tasks)
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0  # below the map, wraps with the width


# ---- the first UMAP map --------------------------------------------------------------------------
def test_umap_numba_code_is_kept_in_the_disk_cache(monkeypatch):
    pytest.importorskip("umap")
    from numba.core.caching import NullCache
    from umap import umap_

    monkeypatch.setattr(soup_projection, "_UMAP_CACHED", False)
    soup_projection._cache_umap_numba()
    assert not isinstance(umap_.smooth_knn_dist._cache, NullCache)
    assert not isinstance(umap_.compute_membership_strengths._cache, NullCache)


def test_first_umap_map_shows_progress_against_the_measured_estimate(tmp_path, monkeypatch):
    monkeypatch.setattr(soup_lab, "WARM_UMAP", True)
    monkeypatch.setattr(soup_projection, "warm_up_umap", lambda: time.sleep(1.2))
    fake = types.SimpleNamespace(store=types.SimpleNamespace(folder=str(tmp_path / "corpus")), cache_dir=tmp_path)
    seen = []
    lab = soup_lab.Lab(fake)
    assert lab.umap_estimate() == (soup_lab.UMAP_WARM_S, False)
    lab.wait_for_umap(lambda f, desc: seen.append((f, desc)))
    assert seen and all(0 <= f < 1 for f, _ in seen) and [f for f, _ in seen] == sorted(f for f, _ in seen)
    assert "compiling UMAP's numba code" in seen[0][1] and f"of about {soup_lab.UMAP_WARM_S:.0f} s" in seen[0][1]
    est, measured = soup_lab.Lab(fake).umap_estimate()  # the next server start: the measured seconds
    assert measured and 1.0 <= est < 5
    seen.clear()
    soup_lab.Lab(fake).wait_for_umap(lambda f, desc: seen.append((f, desc)))
    assert "loading UMAP's compiled numba code" in seen[0][1] and f"of about {est:.0f} s" in seen[0][1]

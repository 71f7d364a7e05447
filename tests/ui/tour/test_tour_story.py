"""The tour's story holds (issue 48): each step's text says what its numbers show. A claim ("the
contexts hold what the answer needs", "the answer rests on the gold context", "COFFEE separates from
S6 as in the paper") is made only where the numbers bear it out; elsewhere the text says what they
do show. Checked twice: each text function on numbers on both sides of its claim, and real steps
computed on the tiny model, their text against the tab's own outputs (its plain data).
"""

from __future__ import annotations

import re

import pytest

from picaso_core.ui.tour import cache as tour
from picaso_core.ui.tour import runs
from picaso_core.ui.tour.steps import STEPS, Step

LOSSES = {"none": 1.2, "concat": 0.49, "soup": 0.73, "caso": 0.70, "picaso_s": 0.69, "picaso_r": 0.686,
          "picconcat_r": 0.51}


def test_step_1_says_the_contexts_help_only_when_concat_lowers_the_loss():
    helps = runs.none_vs_concat_text({"none": 1.221, "concat": 0.489, "contexts": 5, "tokens": 292})
    assert "**1.221**" in helps and "**0.489**" in helps and "lowers its loss by **0.732**" in helps
    hurts = runs.none_vs_concat_text({"none": 0.4, "concat": 0.489, "contexts": 5, "tokens": 292})
    assert "hold what the answer needs" not in hurts and "does not lower" in hurts


def test_step_2_names_the_best_state_method_and_which_side_of_concat_it_is():
    text = runs.methods_text(LOSSES)
    assert "**PICASO-R at 0.686**" in text and "0.196 above Concat" in text
    assert "below Concat" in runs.methods_text({**LOSSES, "caso": 0.40})
    assert "**CASO at 0.400**" in runs.methods_text({**LOSSES, "caso": 0.40})


def test_step_3_says_picaso_s_is_unmoved_only_when_its_loss_is():
    changes = {"concat": 0.0534, "caso": 0.0969, "picaso_s": 0.0, "picaso_r": 0.02, "soup": 0.0, "picconcat_r": 0.01}
    same = runs.order_text(changes)
    assert "its state is the same" in same and "**0.0200**, less than CASO" in same
    moved = runs.order_text({**changes, "picaso_s": 0.05, "picaso_r": 0.2})
    assert "its state is the same" not in moved and "yet its loss moves by 0.0500" in moved
    assert "no less than CASO" in moved


def test_step_4_says_less_or_more_as_the_times_are():
    ms = {"concat": 460.9, "picaso_r": 5.17, "soup": 1.0, "caso": 6.0, "picaso_s": 20.0, "picconcat_r": 900.0}
    fast = runs.time_text({"tokens": 589, "contexts": 10, "ms": ms})
    assert "**89x** less" in fast and "(1.00 ms with Soup, the fastest)" in fast
    slow = runs.time_text({"tokens": 589, "contexts": 10, "ms": {**ms, "picaso_r": 900.0}})
    assert "less" not in slow.split("PICASO-R,")[1].split(".")[0] and "2.0x more" in slow


def test_step_5_claims_clusters_only_above_chance_and_explains_a_shuffled_twin():
    from picaso_core.ui.tabs.soup_text import shuffled_twin_sentence

    assert "64% of the time against 5% by chance" in runs.soup_map_text({"nn_accuracy": 0.64, "chance": 0.05})
    assert "barely cluster" in runs.soup_map_text({"nn_accuracy": 0.08, "chance": 0.05})
    # the tab's summary, which the step shows after its lead: where the demonstration lands, and why
    twin = shuffled_twin_sentence("english_french_shuffled", ["english_french_shuffled", "english_french"])
    assert "label-shuffled twin" in twin and "english_french itself is rank 2" in twin
    assert shuffled_twin_sentence("english_french", ["english_french", "english_french_shuffled"]) == ""


def test_step_8_claims_the_gold_context_only_for_a_majority_of_methods():
    clear = runs.attribution_text({"gold": ["c1"], "gold_top": 7, "methods": 8, "none": 1.3, "all": 0.4})
    assert "rests on the gold context, **7 of 8**" in clear
    split = runs.attribution_text({"gold": ["c1"], "gold_top": 1, "methods": 8, "none": 1.304, "all": 1.1})
    assert "rests on the gold" not in split and "disagree, only **1 of 8**" in split and "changes little" in split
    assert "no gold context" in runs.attribution_text({"gold": [], "gold_top": 0, "methods": 8, "none": 1, "all": 1})


def test_step_9_says_whether_fine_tuning_narrows_the_gap():
    f = {"base": {"picaso_r": 0.686, "concat": 0.489}, "bptc": {"picaso_r": 0.489, "concat": 0.452}}
    assert "**+0.197**" in runs.finetuned_text(f) and "closes most of it" in runs.finetuned_text(f)
    worse = {"base": f["base"], "bptc": {"picaso_r": 0.9, "concat": 0.452}}
    assert "does not narrow it" in runs.finetuned_text(worse)


def test_step_11_claims_the_papers_separation_only_when_the_run_shows_it():
    shown = runs.coffee_text({"coffee": 0.927, "s6": 0.335, "steps": 2000})
    assert "as in the paper" in shown and "**0.93**" in shown and "**0.34**" in shown
    short = runs.coffee_text({"coffee": 0.300, "s6": 0.212, "steps": 150})
    assert "as in the paper" not in short and "too short" in short and "ahead of S6" in short


# ---- real steps, computed on the tiny model: the text against the tab's own numbers -------------------
def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+\.\d+", text))


@pytest.fixture(scope="module")
def real(tour_res):
    """Steps 1-3, 8 and 11 computed by their real runners (COFFEE for 100 steps), as cache entries."""
    memo, out = {}, {}
    for n, step in enumerate(STEPS, 1):
        if step.run in ("compose_none_vs_concat", "compose_methods", "compose_order", "attribution", "coffee"):
            tiny = {"steps": 100} if step.run == "coffee" else {}
            s = Step(step.title, step.tab, step.run, {**step.inputs, **tiny})
            out[step.run] = tour.compute(tour_res, s, memo)
    return out


def test_real_compose_steps_read_their_losses_off_the_tabs_own_data(real):
    data = real["compose_none_vs_concat"]["outputs"][6]["json"]  # /compose's `results`
    loss = {m: r["loss"] for m, r in data["methods"].items()}
    text = real["compose_none_vs_concat"]["text"]
    assert {f"{loss['none']:.3f}", f"{loss['concat']:.3f}"} <= _numbers(text)
    assert ("hold what the answer needs" in text) == (loss["concat"] < loss["none"])
    best = min(runs.STATE_METHODS, key=loss.get)
    assert f"at {loss[best]:.3f}**" in real["compose_methods"]["text"]
    order = real["compose_order"]
    rows = {r[0]: r for r in order["tables"][0]["data"]}  # Method, last, first, change
    assert f"{abs(rows['CASO'][3]):.4f}" in order["text"]
    assert ("its state is the same" in order["text"]) == (abs(rows["PICASO-S"][3]) < 1e-3)


def test_real_attribution_step_counts_the_methods_that_put_gold_on_top(real):
    entry = real["attribution"]
    data = entry["outputs"][-1]["json"]  # /attribute's plain data
    gold = {c["id"] for c in data["contexts"] if c["gold"]}
    hits, n = sum(t in gold for t in data["top"].values()), len(data["top"])
    assert gold and f"**{hits} of {n}**" in entry["text"]
    assert ("rests on the gold context" in entry["text"]) == (hits * 2 > n)


def test_real_coffee_step_reads_its_last_accuracies(real):
    entry = real["coffee"]
    hist = entry["outputs"][4]["json"]["history"]
    c, s = hist["coffee"][-1]["accuracy"], hist["s6"][-1]["accuracy"]
    assert hist["coffee"][-1]["step"] == 100 and f"**{c:.2f}**" in entry["text"] and f"**{s:.2f}**" in entry["text"]
    assert ("as in the paper" in entry["text"]) == (c >= 0.9 and s <= 0.7)


HYBRID = {"none": 1.30, "concat": 0.50, "soup": 0.80, "caso": 0.75, "picaso_s": 0.72, "picaso_r": 0.70,
          "picconcat_r": 0.55, "picaso_r_drop": 0.90}
ON_PURE = {"model": "demo-hybrid", "family": "Nemotron-H hybrid: 4 Mamba-2 + 1 attention layers", "own": False,
           "app_model": "demo", "hybrid": HYBRID, "pure": LOSSES}


def test_last_step_says_what_the_attention_layers_carry_only_where_dropping_them_raises_the_loss():
    text = runs.hybrid_text(ON_PURE)
    # PICASO-R's share of Concat's gain: (1.30 - 0.70) / (1.30 - 0.50) on the hybrid, (1.2 - 0.686) / 0.71 pure
    assert "**0.700**, **75%** of Concat's gain" in text and "**0.686**, **72%** of Concat's gain" in text
    assert "raises PICASO-R's loss to **0.900**" in text and "carry part" in text
    assert "the tab below keeps the results of the app's own model, demo" in text
    flat = runs.hybrid_text({**ON_PURE, "hybrid": {**HYBRID, "picaso_r_drop": 0.702}})
    assert "carry part" not in flat and "about where it is (0.702)" in flat
    lower = runs.hybrid_text({**ON_PURE, "hybrid": {**HYBRID, "picaso_r_drop": 0.60}})
    assert "carry part" not in lower and "lowers PICASO-R's loss to 0.600" in lower
    none = runs.hybrid_text({**ON_PURE, "hybrid": {**HYBRID, "concat": 1.35}})
    assert "no gain to recover" in none and "75%" not in none
    worse = runs.hybrid_text({**ON_PURE, "hybrid": {**HYBRID, "picaso_r": 1.40, "picaso_r_drop": 1.40}})
    assert "recovers none of that gain" in worse
    own = runs.hybrid_text({**ON_PURE, "own": True, "pure": None})
    assert "On the pure" not in own and "the tab below shows its results" in own

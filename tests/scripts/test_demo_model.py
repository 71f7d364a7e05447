"""The bundled demo model (assets/demo_model): loads offline, and uses its contexts (its load time is
bench/'s to measure, not a test's)."""

import json

import pytest

from picaso_core import load_model
from picaso_core.data import load_corpus
from picaso_core.analysis.evaluate import evaluate_samples
from picaso_core.engine.loading import DEMO_MODEL_DIR


@pytest.fixture(scope="module")
def demo():
    return load_model("demo")


def test_loads_offline_with_its_card(demo, monkeypatch):
    model = demo
    card = (DEMO_MODEL_DIR / "README.md").read_text()
    ev = json.loads((DEMO_MODEL_DIR / "eval.json").read_text())
    cfg = model.config
    assert f"d_state {cfg.ssm_cfg.d_state}" in card and f"{cfg.n_layer} layers" in card
    assert set(ev) >= {"retrieval", "qa", "skills"}


def test_concat_and_picaso_lower_the_held_out_continuation_loss(demo):
    """On the first 12 held-out retrieval samples (the card reports 200): the contexts help a lot
    (card: Concat -3x%), and PICASO-R keeps most of Concat's gain."""
    model = demo
    samples = load_corpus("demo", "test").samples[:12]
    s = evaluate_samples(model, samples, methods=("none", "concat", "soup", "picaso_r"), context_suffix="\n\n")
    rel = {m: s.gain_vs_none[m] / s.mean_loss["none"] for m in s.methods}
    assert rel["concat"] > 0.15, rel
    assert rel["picaso_r"] > 0.6 * rel["concat"], rel


def test_knows_its_skills_from_demonstrations_on_held_out_items(demo):
    """The first 5 held-out items of each of the 10 base tasks (50 queries), greedy exact match:
    16 demonstrations (drawn from train items only) reach at least 40% (the card reports every
    test item), and 1 demonstration reaches fewer."""
    from picaso_core.analysis.skill_eval import mean_accuracy, skill_accuracy

    model = demo
    acc = mean_accuracy(skill_accuracy(model, ks=(1, 16), max_items=5))
    assert acc[16] >= 0.40, acc
    assert acc[1] < acc[16], acc

"""picaso_core.analysis.evaluate on tiny random models, mostly through the tokenizer-free path (ids)."""

import math
from types import SimpleNamespace

import pytest
import torch

from conftest import tiny_model
from picaso_core.analysis.evaluate import METHOD_NAMES, METHODS, evaluate_samples, k_sweep, run_methods


def _ids(n, seed):
    return torch.randint(0, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module", params=["Mamba2", "Mamba1"])
def model(request):
    return tiny_model(request.param)


QUERY, CONT = _ids(7, 1), _ids(6, 2)
CONTEXTS = [_ids(9, 3), _ids(12, 4), _ids(5, 5)]


def _by_method(results):
    return {r.method: r for r in results}


def test_all_methods_finite_with_reference_values(model):
    res = _by_method(run_methods(model, QUERY, CONT, CONTEXTS))
    assert list(res) == list(METHODS)
    for r in res.values():
        assert math.isfinite(r.loss) and r.ppl == pytest.approx(math.exp(r.loss))
        assert r.compose_s >= 0 and r.process_s > 0 and r.generation is None
        assert r.name == METHOD_NAMES[r.method]
    assert res["none"].loss == pytest.approx(model.continuation_loss(QUERY, CONT, None), abs=1e-6)
    flat = [t for c in CONTEXTS for t in c]
    assert res["concat"].loss == pytest.approx(
        model.continuation_loss(QUERY, CONT, model.encode_context(flat)), abs=1e-5)
    assert "database build" in res["picaso_r"].note and "database build" not in res["none"].note
    assert "stored state" in res["concat"].note
    assert len({round(r.loss, 6) for r in res.values()}) > 3  # the methods do differ


def test_one_context_all_state_methods_agree(model):
    res = _by_method(run_methods(model, QUERY, CONT, CONTEXTS[:1]))
    ref = model.continuation_loss(QUERY, CONT, model.encode_context(CONTEXTS[0]))
    for m in ("soup", "caso", "picaso_s", "picaso_r", "concat", "picconcat_r"):
        assert res[m].loss == pytest.approx(ref, abs=1e-5), m


def test_given_states_equal_encoded_here_and_are_not_charged(model):
    states = model.encode_contexts(CONTEXTS)
    a = run_methods(model, QUERY, CONT, CONTEXTS, context_states=states)
    b = run_methods(model, QUERY, CONT, CONTEXTS)
    for ra, rb in zip(a, b):
        assert ra.loss == pytest.approx(rb.loss, abs=1e-6)
        assert "database build" not in ra.note
    with pytest.raises(ValueError, match="2 context states for 3 contexts"):
        run_methods(model, QUERY, CONT, CONTEXTS, context_states=states[:2])


def test_no_contexts_every_method_is_the_baseline(model):
    res = run_methods(model, QUERY, CONT, [])
    assert all(r.loss == pytest.approx(res[0].loss, abs=1e-6) for r in res)


def test_generation_is_seeded_and_per_method(model):
    res = _by_method(run_methods(model, QUERY, CONT, CONTEXTS, methods=("none", "picaso_r"),
                                 generate_tokens=4, seed=3))
    assert res["none"].generation == model.generate(QUERY, None, max_new_tokens=4, temperature=0)  # greedy default
    sampled = run_methods(model, QUERY, CONT, CONTEXTS, methods=("none",), generate_tokens=4, seed=3, temperature=1.0)
    assert sampled[0].generation == model.generate(QUERY, None, max_new_tokens=4, temperature=1.0, seed=3)
    again = run_methods(model, QUERY, CONT, CONTEXTS, methods=("picaso_r",), generate_tokens=4, seed=3)
    assert again[0].generation == res["picaso_r"].generation and len(again[0].generation) <= 4


def test_unknown_method_is_refused(model):
    with pytest.raises(ValueError, match="valid: none, concat"):
        run_methods(model, QUERY, CONT, CONTEXTS, methods=("none", "picaso"))


# ---- many samples ----------------------------------------------------------------------------
def _samples():
    return [SimpleNamespace(query=_ids(6, 10 + i), continuation=_ids(5, 20 + i),
                            contexts=[(f"c{j}", _ids(8, 30 + j)) for j in (i, i + 1, i + 2)])
            for i in range(3)]  # contexts overlap between samples: c1, c2 are shared


def test_evaluate_samples_summary(model):
    samples = _samples()
    calls, seen = [], []
    encode = model.encode_contexts
    model.encode_contexts = lambda ids, **kw: (calls.append(len(ids)), encode(ids, **kw))[1]
    try:
        summary = evaluate_samples(model, samples, progress=lambda i, n: seen.append((i, n)))
    finally:
        del model.encode_contexts
    # the 5 distinct contexts encoded once; then each sample's PICConcat-R forward (3 rotations)
    assert calls == [5, 3, 3, 3] and seen == [(1, 3), (2, 3), (3, 3)]
    assert summary.n_samples == 3 and summary.k is None and summary.database_s > 0
    for i, s in enumerate(samples):
        per = _by_method(run_methods(model, s.query, s.continuation, [c for _, c in s.contexts]))
        for m in METHODS:
            assert summary.losses[m][i] == pytest.approx(per[m].loss, abs=1e-6)
    ml = summary.mean_loss
    assert ml["caso"] == pytest.approx(sum(summary.losses["caso"]) / 3)
    assert summary.gain_vs_none["none"] == 0
    assert summary.gain_vs_none["soup"] == pytest.approx(ml["none"] - ml["soup"])
    rec = summary.concat_gain_recovered
    assert rec["none"] == 0 and rec["concat"] == pytest.approx(1)
    assert rec["picaso_r"] == pytest.approx((ml["none"] - ml["picaso_r"]) / (ml["none"] - ml["concat"]))
    table = summary.table()
    assert table.count("\n") == 1 + len(METHODS) and "PICASO-R" in table


def assert_same_losses(a, b):
    assert a.losses.keys() == b.losses.keys()
    for m in b.losses:  # per method: pytest >= 9 approx() refuses nested dicts
        assert a.losses[m] == pytest.approx(b.losses[m]), m


def test_k_uses_the_last_contexts_and_k_sweep_matches(model):
    samples = _samples()
    sweep = k_sweep(model, samples, [0, 1, 3], methods=("none", "concat", "picaso_r"))
    assert [s.k for s in sweep] == [0, 1, 3]
    k0, k1, k3 = sweep
    assert k0.losses["picaso_r"] == pytest.approx(k0.losses["none"], abs=1e-6)
    for i, s in enumerate(samples):  # k = 1: the last (most relevant) context only
        ref = model.continuation_loss(s.query, s.continuation, model.encode_context(s.contexts[-1][1]))
        assert k1.losses["picaso_r"][i] == pytest.approx(ref, abs=1e-5)
    full = evaluate_samples(model, samples, methods=("none", "concat", "picaso_r"))
    assert_same_losses(k3, full)
    more = evaluate_samples(model, samples, k=7, methods=("none", "concat", "picaso_r"))  # k > available: all
    assert_same_losses(more, full)
    with pytest.raises(ValueError, match="k must be >= 0"):
        evaluate_samples(model, samples, k=-1)


def test_text_samples_through_the_tokenizer(tiny_model_dir):
    from picaso_core import load_model
    from picaso_core.data.schema import RetrievalSample

    model = load_model(str(tiny_model_dir))
    sample = RetrievalSample("s0", "Velmora is a city", " in the northern province of Tarrix.",
                             contexts=[("a", "The main export of Velmora is blue glass."),
                                       ("b", "Records show that Velmora was founded in 1423.")])
    summary = evaluate_samples(model, [sample], methods=("none", "concat", "picaso_s"), context_suffix="\n")
    q, c = model.tokenizer.encode(sample.query), model.tokenizer.encode(sample.continuation)
    ctx = [model.tokenizer.encode(t + "\n") for t in sample.context_texts]
    ref = model.continuation_loss(q, c, model.encode_context(ctx[0] + ctx[1]))
    assert summary.losses["concat"][0] == pytest.approx(ref, abs=1e-5)

"""Attribution (picaso_core/analysis/attribution.py) against brute-force references on tiny random models.

LOO with a state method = compose each subset with `compose` and score it alone with
`continuation_loss`; Concat-LOO = each subset's concatenation processed from scratch; LOI = each
state scored alone. The surrogate on a synthetic additive scorer; precision on hand-built samples.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import tiny_model
from picaso_core.analysis.attribution import (LOO_METHODS, STATE_METHODS, ablation_surrogate, attribution_precision,
                                     compose_subsets, leave_one_in, leave_one_out, leave_one_out_tokens, surrogate)
from picaso_core.compose import compose, compose_tokens


def _contexts(n: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [2, 7, 5, 11, 3, 9][:n]  # 2 < d_conv - 1 + ... exercises short windows too
    return [torch.randint(1, 300, (L,), generator=g).tolist() for L in lengths]


QUERY, ANSWER = [7, 8, 9], [10, 11, 12, 13, 14]


@pytest.fixture(scope="module", params=["Mamba2", "Mamba1"])
def model(request):
    return tiny_model(request.param, seed=3)


def _brute_state(model, method, ids, states, keep):
    """The state of the kept contexts, built the slow obvious way."""
    if not keep:
        return model.empty_state()
    if method in STATE_METHODS:
        return compose(method, [states[i] for i in keep])
    if method == "concat":  # from scratch: the whole concatenation read from the empty state
        return model.encode_context([t for i in keep for t in ids[i]])
    return compose_tokens(model, [ids[i] for i in keep], method)


@pytest.mark.parametrize("method", LOO_METHODS)
@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_leave_one_out_equals_brute_force_subsets(model, method, n):
    ids = _contexts(n)
    states = model.encode_contexts(ids)
    full = model.continuation_loss(QUERY, ANSWER, _brute_state(model, method, ids, states, list(range(n))))
    want = [model.continuation_loss(QUERY, ANSWER, _brute_state(model, method, ids, states,
                                                                [j for j in range(n) if j != i])) - full
            for i in range(n)]
    got = leave_one_out(model, QUERY, ANSWER, states, method, context_ids=ids)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
    assert len(set(np.round(got, 6))) > 1 or n == 1  # contexts do differ: not a vacuous equality


def test_leave_one_out_at_n_4_and_5_for_every_state_method(model):
    for n in (4, 5):
        ids = _contexts(n, seed=n)
        states = model.encode_contexts(ids)
        for method in STATE_METHODS:
            full = model.continuation_loss(QUERY, ANSWER, compose(method, states))
            want = [model.continuation_loss(QUERY, ANSWER, compose(method, states[:i] + states[i + 1:])) - full
                    for i in range(n)]
            np.testing.assert_allclose(leave_one_out(model, QUERY, ANSWER, states, method), want, atol=2e-5)


def test_one_context_left_out_is_the_empty_state(model):
    (s,) = model.encode_contexts(_contexts(1))
    empty = model.continuation_loss(QUERY, ANSWER, model.empty_state())
    for method in ("picaso_r", "soup"):
        (score,) = leave_one_out(model, QUERY, ANSWER, [s], method)
        assert score == pytest.approx(empty - model.continuation_loss(QUERY, ANSWER, s), abs=2e-5)


def test_leave_one_in_scores_each_state_alone(model):
    ids = _contexts(5)
    states = model.encode_contexts(ids)
    want = [model.continuation_loss(QUERY, ANSWER, s) for s in states]
    np.testing.assert_allclose(leave_one_in(model, QUERY, ANSWER, states, batch_size=2), want, atol=2e-5)


def test_composed_subsets_equal_compose_row_by_row(model):
    ids = _contexts(5)
    states = model.encode_contexts(ids)
    masks = np.array([[1, 1, 1, 1, 1], [0, 1, 0, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 1, 1, 0]])
    for method in STATE_METHODS:
        batch = compose_subsets(method, states, masks)
        for r, row in enumerate(masks):
            kept = [states[i] for i in np.flatnonzero(row)]
            want = compose(method, kept) if kept else model.empty_state()
            got = batch[r]
            for name in ("ssm", "conv", "log_decay"):
                torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-5, atol=1e-6)
            assert int(got.num_tokens) == int(want.num_tokens)


def test_per_token_deltas_average_to_the_scores(model):
    ids = _contexts(4)
    states = model.encode_contexts(ids)
    loo = leave_one_out_tokens(model, QUERY, ANSWER, states, "picaso_r")
    assert loo.token_deltas.shape == (4, len(ANSWER))
    np.testing.assert_allclose(loo.token_deltas.mean(1), loo.scores, atol=1e-6)
    # each row is the per-token NLL of that subset: its mean is continuation_loss of that subset
    assert loo.without[2].mean() == pytest.approx(
        model.continuation_loss(QUERY, ANSWER, compose("picaso_r", states[:2] + states[3:])), abs=2e-5)


# ---- the surrogate ---------------------------------------------------------------------------------
def test_surrogate_recovers_the_weights_of_an_additive_scorer():
    true_w = np.array([-0.8, 0.0, 0.3, 0.0, -0.2, 0.0, 0.0, 0.5])
    noise = np.random.default_rng(1)

    def score(masks):
        return 2.0 + masks @ true_w + noise.normal(0, 0.01, len(masks))

    res = ablation_surrogate(score, n=8, n_ablations=64, keep=0.5, seed=0, alpha=1e-3)
    np.testing.assert_allclose(res.weights, true_w, atol=0.03)
    assert res.intercept == pytest.approx(2.0, abs=0.03)
    assert res.lds > 0.95 and len(res.heldout_losses) == 16
    assert res.scores[0] == pytest.approx(0.8, abs=0.03)  # the most supportive context scores highest
    # LASSO is sparse: a larger alpha zeroes the small and the absent weights
    sparse = ablation_surrogate(lambda m: 2.0 + m @ true_w, n=8, seed=0, alpha=0.05)
    assert sparse.weights[1] == 0 and sparse.weights[3] == 0 and sparse.weights[0] < -0.5


def test_surrogate_is_deterministic_per_seed_and_matches_composed_subsets(model):
    ids = _contexts(5)
    states = model.encode_contexts(ids)
    a = surrogate(model, QUERY, ANSWER, states, n_ablations=12, seed=3, alpha=1e-6)
    b = surrogate(model, QUERY, ANSWER, states, n_ablations=12, seed=3, alpha=1e-6)
    c = surrogate(model, QUERY, ANSWER, states, n_ablations=12, seed=4, alpha=1e-6)
    assert a.weights == b.weights and np.array_equal(a.masks, b.masks)
    assert not np.array_equal(a.masks, c.masks)
    for row, loss in list(zip(a.masks, a.losses))[:4]:  # the actual losses are those of the composed subsets
        kept = [states[i] for i in np.flatnonzero(row)]
        want = model.continuation_loss(QUERY, ANSWER, compose("picaso_r", kept) if kept else model.empty_state())
        assert loss == pytest.approx(want, abs=2e-5)
    by_concat = surrogate(model, QUERY, ANSWER, states, "concat", n_ablations=12, seed=3, context_ids=ids)
    assert np.array_equal(by_concat.masks, a.masks)


# ---- precision (table 4's protocol) ---------------------------------------------------------------
def test_precision_on_a_hand_built_three_sample_case(model):
    """Three samples whose gold context is chosen against a brute-force top-1: sample 0 and 2 make
    their LOI-top the gold one, sample 1 another, so LOI precision is exactly 2/3; every LOO
    method's precision equals the brute-force count the same way."""
    samples, tops = [], []
    for j in range(3):
        ids = _contexts(3 + j, seed=10 + j)
        states = model.encode_contexts(ids)
        loi = [model.continuation_loss(QUERY, ANSWER, s) for s in states]
        top = int(np.argmin(loi))
        gold = top if j != 1 else (top + 1) % len(ids)
        tops.append({m: int(np.argmax(leave_one_out(model, QUERY, ANSWER, states, m, context_ids=ids)))
                     for m in ("concat", "picaso_r")})
        samples.append(SimpleNamespace(sample_id=f"s{j}", query=QUERY, continuation=ANSWER,
                                       contexts=[(f"s{j}-c{i}", c) for i, c in enumerate(ids)],
                                       gold_ids=[f"s{j}-c{gold}"]))
        tops[-1]["gold"] = gold
    seen = []
    res = attribution_precision(model, samples, methods=("loi", "concat", "picaso_r"),
                                progress=lambda i, n: seen.append((i, n)))
    assert res.precision["loi"] == pytest.approx(2 / 3)
    for m in ("concat", "picaso_r"):
        assert res.precision[m] == pytest.approx(np.mean([t[m] == t["gold"] for t in tops]))
    assert res.spearman_vs_concat["concat"] == pytest.approx(1.0) and res.top1_agrees_with_concat["concat"] == 1.0
    assert -1 <= res.spearman_vs_concat["picaso_r"] <= 1
    assert seen == [(1, 3), (2, 3), (3, 3)] and res.n_samples == 3
    assert "| LOI | 0.667 | 0.699 |" in res.table()


# ---- bad input -------------------------------------------------------------------------------------
def test_bad_input_raises_clear_value_errors(model):
    states = model.encode_contexts(_contexts(2))
    with pytest.raises(ValueError, match="no contexts"):
        leave_one_out(model, QUERY, ANSWER, [], "picaso_r")
    with pytest.raises(ValueError, match="no contexts"):
        leave_one_in(model, QUERY, ANSWER, [])
    with pytest.raises(ValueError, match="answer is empty"):
        leave_one_out(model, QUERY, [], states, "picaso_r")
    with pytest.raises(ValueError, match="unknown attribution method 'nope'"):
        leave_one_out(model, QUERY, ANSWER, states, "nope")
    with pytest.raises(ValueError, match="pass context_ids"):
        leave_one_out(model, QUERY, ANSWER, states, "concat")
    with pytest.raises(ValueError, match="unknown attribution methods"):
        attribution_precision(model, [], methods=("loo",))
    with pytest.raises(ValueError, match="labelled samples"):
        attribution_precision(model, [SimpleNamespace(sample_id="x", query=QUERY, continuation=ANSWER,
                                                      contexts=[("a", [1, 2])], gold_ids=[])])

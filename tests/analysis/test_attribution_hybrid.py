"""Attribution on a hybrid (issue 49): leave-one-out and the ablation surrogate compose each subset of
stored states through compose itself (analysis.attribution.compose_subsets), so the kept contexts'
attention keys and values are joined (re-rotated to their offsets under RoPE, config=model) beside
the SSM part. Each LOO row equals composing the kept contexts directly; the scores are finite and
tell the contexts apart.

The model: a tiny random Granite-4.0-H with RoPE attention after a Mamba-2 layer (weights x 3, norms and
biases perturbed, as in tests/test_compose_hybrid.py).
"""

import math

import numpy as np
import pytest
from conftest import granite_rope_hybrid
import torch

from picaso_core.analysis.attribution import (STATE_METHODS, compose_subsets, leave_one_out_tokens, surrogate,
                                              token_nll)
from picaso_core.compose import compose

transformers = pytest.importorskip("transformers")

V = 300


@pytest.fixture(scope="module")
def setup(one_thread):
    model = granite_rope_hybrid(V)
    g = torch.Generator().manual_seed(3)
    ids = [torch.randint(1, V, (n,), generator=g).tolist() for n in (8, 12, 5, 10)]
    query = torch.randint(1, V, (5,), generator=g).tolist()
    answer = torch.randint(1, V, (4,), generator=g).tolist()
    return model, model.encode_contexts(ids), query, answer


def _direct(model, states, kept, method, q, a) -> np.ndarray:
    """Per-token answer NLL from compose(method, the kept states, config=model): the reference."""
    st = compose(method, [states[i] for i in kept], config=model) if kept else model.empty_state()
    return token_nll(model, q, a, st)[0].numpy()


@pytest.mark.parametrize("method", STATE_METHODS)
def test_leave_one_out_on_a_hybrid_equals_composing_the_kept_contexts(setup, method):
    model, states, q, a = setup
    n = len(states)
    loo = leave_one_out_tokens(model, q, a, states, method)
    assert all(math.isfinite(s) for s in loo.scores) and len(loo.scores) == n
    assert np.ptp(loo.scores) > 1e-3, loo.scores  # the contexts are told apart
    np.testing.assert_allclose(loo.full, _direct(model, states, list(range(n)), method, q, a), atol=2e-5)
    for i in range(n):
        rest = [j for j in range(n) if j != i]
        np.testing.assert_allclose(loo.without[i], _direct(model, states, rest, method, q, a), atol=2e-5,
                                   err_msg=f"{method} without context {i}")


def test_subsets_of_a_hybrid_join_the_kept_keys_and_an_empty_row_is_the_empty_state(setup):
    model, states, q, a = setup
    masks = [[1, 0, 1, 1], [0, 0, 0, 0], [0, 1, 0, 0]]
    got = compose_subsets("picaso_r", states, masks, config=model)
    lengths = [sum(int(s.num_tokens) for s, k in zip(states, row) if k) for row in masks]
    assert got.kv_lengths == tuple(lengths) and got.num_tokens == tuple(lengths)
    nll = token_nll(model, q, a, got).numpy()
    for r, row in enumerate(masks):
        kept = [i for i, k in enumerate(row) if k]
        np.testing.assert_allclose(nll[r], _direct(model, states, kept, "picaso_r", q, a), atol=2e-5)


def test_surrogate_on_a_hybrid_is_finite(setup):
    model, states, q, a = setup
    res = surrogate(model, q, a, states, "picaso_r", n_ablations=16, seed=0)
    assert len(res.weights) == len(states) and all(math.isfinite(w) for w in res.weights)
    assert np.isfinite(res.losses).all() and np.ptp(res.losses) > 0

"""The surrogate's LDS (linear datamodeling score) is a RANK correlation (Spearman) between the
surrogate's predictions and the actual held-out losses: a monotone but non-linear relation scores
1, and ties take their average rank. The rank correlation is computed here, independently."""

from __future__ import annotations

import numpy as np
import pytest

from picaso_core.analysis.attribution import fit_surrogate

N = 6
WEIGHTS = 0.1 * 2.0 ** np.arange(N)  # binary weights: every distinct mask has its own m @ w


def average_ranks(x) -> np.ndarray:
    """Ranks 1..n, ties sharing the mean of the ranks they span."""
    x = np.asarray(x, dtype=np.float64)
    ranks = np.empty(len(x))
    for i, v in enumerate(x):
        below, equal = np.sum(x < v), np.sum(x == v)
        ranks[i] = below + (equal + 1) / 2
    return ranks


def pearson(x, y) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    return float((dx @ dy) / np.sqrt((dx @ dx) * (dy @ dy)))


def rank_correlation(x, y) -> float:
    return pearson(average_ranks(x), average_ranks(y))


def masks(count: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random((count, N)) < 0.5).astype(np.int8)


def fit(heldout_loss):
    """A surrogate fitted on exactly linear losses (so its predictions order the held-out masks as
    m @ w does), scored on held-out losses `heldout_loss(m @ w)`."""
    X, Xh = masks(64, 0), masks(24, 1)
    res = fit_surrogate(X, X @ WEIGHTS, Xh, heldout_loss(Xh @ WEIGHTS), alpha=1e-6)
    # the fit is what it should be: predictions in the order of m @ w
    assert np.array_equal(np.argsort(res.heldout_predictions, kind="stable"), np.argsort(Xh @ WEIGHTS, kind="stable"))
    return res


def test_ranks_helper_is_what_a_rank_correlation_needs():
    assert average_ranks([10, 30, 20, 20]).tolist() == [1.0, 4.0, 2.5, 2.5]
    assert rank_correlation([1, 2, 3], [1, 8, 27]) == pytest.approx(1.0)


def test_lds_of_a_monotone_nonlinear_relation_is_one():
    res = fit(lambda s: np.exp(2.0 * s))  # strictly increasing, far from linear
    pred, actual = res.heldout_predictions, res.heldout_losses
    assert pearson(pred, actual) < 0.97  # a linear correlation would not give 1 here ...
    assert rank_correlation(pred, actual) == pytest.approx(1.0)
    assert res.lds == pytest.approx(1.0, abs=1e-12)  # ... the LDS, a rank correlation, does


def test_lds_of_a_decreasing_nonlinear_relation_is_minus_one():
    res = fit(lambda s: 1.0 / (0.05 + s))  # strictly decreasing in s >= 0, convex
    assert pearson(res.heldout_predictions, res.heldout_losses) > -0.97
    assert res.lds == pytest.approx(-1.0, abs=1e-12)


def test_lds_with_ties_uses_average_ranks():
    # the held-out losses are a step function of the prediction: many ties among the actual losses
    res = fit(lambda s: np.floor(s / 1.5) ** 3)
    pred, actual = res.heldout_predictions, res.heldout_losses
    assert len(set(actual.tolist())) < len(actual)  # there are ties
    want = rank_correlation(pred, actual)
    assert 0.5 < want < 0.999
    assert abs(pearson(pred, actual) - want) > 0.01  # the two correlations tell apart here
    assert res.lds == pytest.approx(want, abs=1e-12)

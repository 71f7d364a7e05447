"""Loss landscapes between states (picaso_core.analysis.landscape): planes, lines, prop. 4, on tiny models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import tiny_model
from picaso_core.compose import compose
from picaso_core.analysis.landscape import PlaneGeometry, PlaneInput, average_planes, line, plane, score_weights
from picaso_core.analysis.landscape_fig2 import fig2_anchors, prop4_distances, prop4_table

QUERY = [5, 17, 40, 3, 99]
CONT = [12, 7, 250, 31]


def contexts(seed: int = 0, n: int = 3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 300, (int(L),), generator=g).tolist() for L in torch.randint(6, 20, (n,), generator=g)]


@pytest.fixture
def setup(family, one_thread):
    model = tiny_model(family, seed=3)
    states = model.encode_contexts(contexts())
    return model, states


def assert_state_equal(a, b, **tol):
    for f in ("ssm", "conv", "log_decay"):
        torch.testing.assert_close(getattr(a, f), getattr(b, f), **tol)


def test_anchors_and_grid_losses_match_the_model(setup):
    model, states = setup
    land = plane(model, QUERY, CONT, states, steps=7, margin=0.3)
    assert land.loss.shape == (7, 7) and land.xs.shape == (7,) and land.ys.shape == (7,)
    for k in range(3):
        assert_state_equal(land.state_at(*land.anchor_xy[k]), states[k])
        assert land.anchor_loss[k] == pytest.approx(model.continuation_loss(QUERY, CONT, states[k]), abs=1e-5)
    for i, j in [(0, 0), (6, 6), (2, 5), (5, 1), (3, 3)]:  # loss[i, j] is at (xs[j], ys[i])
        ref = model.continuation_loss(QUERY, CONT, land.state_at(land.xs[j], land.ys[i]))
        assert land.loss[i, j] == pytest.approx(ref, abs=1e-5)
    assert np.isfinite(land.loss).all()
    # the grid is not flat: the plane really moves the state
    assert land.loss.max() - land.loss.min() > 1e-4


def test_plot_distances_are_state_distances(setup):
    model, states = setup
    geo = PlaneGeometry.of(states)
    ref = [float((states[i].ssm.double() - states[j].ssm.double()).norm()) for i, j in ((0, 1), (1, 2), (0, 2))]
    np.testing.assert_allclose(geo.sides, ref, rtol=1e-9)
    np.testing.assert_allclose(geo.anchor_xy.mean(0), 0, atol=1e-9)  # origin at the anchors' mean
    # points along the axes are unit steps in state space
    land = plane(model, QUERY, CONT, states, steps=3)
    s0, s1 = land.state_at(0.0, 0.0), land.state_at(1.0, 0.0)
    s2 = land.state_at(0.0, 1.0)
    assert float((s1.ssm - s0.ssm).double().norm()) == pytest.approx(1.0, rel=1e-4)
    assert float((s2.ssm - s0.ssm).double().norm()) == pytest.approx(1.0, rel=1e-4)
    assert float(((s1.ssm - s0.ssm) * (s2.ssm - s0.ssm)).double().sum()) == pytest.approx(0.0, abs=1e-4)


def test_caso_plane_mean_is_picaso_r_and_soup_plane_mean_is_soup(setup):
    model, states = setup
    anchors = fig2_anchors(states)
    caso = plane(model, QUERY, CONT, anchors["caso"], steps=3, mean_name="PICASO-R")
    m = caso.mark("PICASO-R")
    assert_state_equal(caso.state_at(m.x, m.y), compose("picaso_r", states), atol=1e-5, rtol=1e-5)
    assert m.loss == pytest.approx(model.continuation_loss(QUERY, CONT, compose("picaso_r", states)), abs=1e-5)
    soup = plane(model, QUERY, CONT, anchors["soup"], steps=3, mean_name="Soup")
    ms = soup.mark("Soup")
    ref = compose("soup", states)
    got = soup.state_at(ms.x, ms.y)
    torch.testing.assert_close(got.ssm, ref.ssm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.conv, ref.conv, atol=1e-5, rtol=1e-5)
    assert ms.loss == pytest.approx(model.continuation_loss(QUERY, CONT, ref), abs=1e-5)
    # CASO(u1 u2 u3) for the first rotation: the last context is u3
    assert_state_equal(anchors["caso"][0], compose("caso", states))


def test_projected_state_mark(setup):
    model, states = setup
    inside = compose("weighted", states, weights=[0.2, 0.5, 0.3])
    outside = model.encode_contexts(contexts(seed=9, n=1))[0]
    land = plane(model, QUERY, CONT, states, steps=3, project_states={"in": inside, "out": outside})
    m_in, m_out = land.mark("in"), land.mark("out")
    np.testing.assert_allclose(m_in.weights, [0.2, 0.5, 0.3], atol=1e-5)
    assert m_in.off_plane < 1e-4 * float(inside.ssm.norm())
    assert m_in.loss == pytest.approx(m_in.state_loss, abs=1e-4)
    assert m_out.off_plane > 0.01
    assert m_out.state_loss == pytest.approx(model.continuation_loss(QUERY, CONT, outside), abs=1e-5)
    foot = land.state_at(m_out.x, m_out.y)  # the residual is orthogonal to the plane
    r = (outside.ssm - foot.ssm).double().reshape(-1)
    assert float(r.norm()) == pytest.approx(m_out.off_plane, rel=1e-4)
    for k in range(1, 3):
        d = (states[k].ssm - states[0].ssm).double().reshape(-1)
        assert abs(float(r @ d)) < 1e-4 * float(r.norm()) * float(d.norm())


def test_batched_scoring_equals_one_state_at_a_time(setup):
    model, states = setup
    W = np.array([[1, 0, 0], [0.3, 0.3, 0.4], [-0.5, 1.2, 0.3], [0, 0, 1], [2, -1, 0]], float)
    batched = score_weights(model, QUERY, CONT, states, W)
    chunked = score_weights(model, QUERY, CONT, states, W, chunk=2)
    land = plane(model, QUERY, CONT, states, steps=2)
    one = [model.continuation_loss(QUERY, CONT, land.state_at(*land.geometry.xy(w))) for w in W]
    np.testing.assert_allclose(batched, one, atol=1e-5)
    np.testing.assert_allclose(chunked, batched, atol=1e-6)
    seen = []
    score_weights(model, QUERY, CONT, states, W, chunk=2, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(2, 5), (4, 5), (5, 5)]


def test_line_ends_are_its_states(setup):
    model, states = setup
    ln = line(model, QUERY, CONT, states[0], states[1], steps=9, margin=0.5)
    assert ln.ts[0] == -0.5 and ln.ts[-1] == 1.5
    i0, i1 = list(ln.ts).index(0.0), list(ln.ts).index(1.0)
    assert_state_equal(ln.state_at(0.0), states[0])
    assert_state_equal(ln.state_at(1.0), states[1])
    assert ln.loss[i0] == pytest.approx(model.continuation_loss(QUERY, CONT, states[0]), abs=1e-5)
    assert ln.loss[i1] == pytest.approx(model.continuation_loss(QUERY, CONT, states[1]), abs=1e-5)
    assert ln.loss[3] == pytest.approx(model.continuation_loss(QUERY, CONT, ln.state_at(ln.ts[3])), abs=1e-5)
    assert ln.distance == pytest.approx(float((states[0].ssm.double() - states[1].ssm.double()).norm()), rel=1e-9)


def test_degenerate_anchors_raise(setup):
    model, states = setup
    with pytest.raises(ValueError, match="anchors 0 and 2 are the same state"):
        plane(model, QUERY, CONT, [states[0], states[1], states[0]], steps=3)
    collinear = compose("weighted", states[:2], weights=[-1.0, 2.0])  # on the line through 0 and 1
    with pytest.raises(ValueError, match="lie on one line"):
        plane(model, QUERY, CONT, [states[0], states[1], collinear], steps=3)
    with pytest.raises(ValueError, match="exactly 3"):
        plane(model, QUERY, CONT, states[:2], steps=3)
    with pytest.raises(ValueError, match="steps must be >= 2"):
        plane(model, QUERY, CONT, states, steps=1)
    with pytest.raises(ValueError, match="same"):
        line(model, QUERY, CONT, states[0], states[0])
    other = tiny_model("Mamba1" if model.config.family == "Mamba2" else "Mamba2").encode_context([1, 2, 3])
    with pytest.raises(ValueError, match="different model"):
        plane(model, QUERY, CONT, [states[0], states[1], other], steps=3)


def test_average_is_the_mean_over_samples_in_barycentric_coordinates(setup):
    model, states = setup
    states2 = model.encode_contexts(contexts(seed=5))
    q2, c2 = [8, 9, 10], [11, 12]
    inputs = [PlaneInput(QUERY, CONT, states), PlaneInput(q2, c2, states2)]
    avg = average_planes(model, inputs, steps=4, margin=0.2)
    assert avg.n_samples == 2
    np.testing.assert_allclose(avg.anchor_xy, (PlaneGeometry.of(states).anchor_xy
                                               + PlaneGeometry.of(states2).anchor_xy) / 2, atol=1e-9)
    i, j = 1, 3
    w = avg.geometry.weights(avg.xs[j], avg.ys[i])
    ref = np.mean([score_weights(model, q, c, s, w[None])[0] for q, c, s in ((QUERY, CONT, states), (q2, c2, states2))])
    assert avg.loss[i, j] == pytest.approx(ref, abs=1e-5)
    with pytest.raises(ValueError, match="average"):
        avg.state_at(0.0, 0.0)
    one = average_planes(model, inputs[:1], steps=4, margin=0.2)
    np.testing.assert_allclose(one.loss, plane(model, QUERY, CONT, states, steps=4, margin=0.2).loss, atol=1e-6)


def test_prop4_unsquared_bound_per_layer(setup):
    model, states = setup
    rows = prop4_distances(states[0], states[1])
    assert len(rows) == model.config.n_layer
    u, v = states[0], states[1]
    for r in rows:
        lyr = r["layer"]
        gap = (v.decay[lyr] * u.ssm[lyr] + v.ssm[lyr]) - (u.decay[lyr] * v.ssm[lyr] + u.ssm[lyr])
        assert r["caso_gap"] == pytest.approx(float(gap.double().norm()), rel=1e-5)
        assert r["state_gap"] == pytest.approx(float((u.ssm[lyr] - v.ssm[lyr]).double().norm()), rel=1e-6)
        assert r["caso_gap"] <= r["bound"] * (1 + 1e-6)
    table = prop4_table(states)
    assert [r["layer"] for r in table] == list(range(model.config.n_layer)) and all(r["holds"] for r in table)


def test_fig2_average_and_summary(setup):
    from picaso_core.analysis.landscape_fig2 import fig2

    model, states = setup
    ids = contexts()
    seen = []
    one = fig2(model, [(QUERY, CONT, ids, states)], steps=3, line_steps=5, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1][0] == seen[-1][1] and all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    s = one.summary()
    assert s["soup_loss_at_mean"] == pytest.approx(model.continuation_loss(QUERY, CONT, compose("soup", states)), abs=1e-5)
    assert s["caso_loss_at_mean"] == pytest.approx(model.continuation_loss(QUERY, CONT, compose("picaso_r", states)), abs=1e-5)
    assert s["soup_mean_side"] == pytest.approx(np.mean(PlaneGeometry.of(states).sides), rel=1e-9)
    d = one.to_dict()
    assert len(d["soup"]["loss"]) == 3 and [m["name"] for m in d["caso"]["marks"]] == ["PICASO-R", "Concat"]
    two = fig2(model, [(QUERY, CONT, ids, states), ([8, 9, 10], [11, 12], ids[::-1], states[::-1])], steps=3,
               line_steps=5)
    assert two.n_samples == 2 and two.soup.n_samples == 2
    with pytest.raises(ValueError, match="3 contexts"):
        fig2(model, [(QUERY, CONT, ids[:2], states[:2])], steps=3)


def test_chunk_rows_bounds_state_bytes_and_positions_per_forward():
    from picaso_core.analysis.landscape import STATE_BUDGET, TOKEN_BUDGET, chunk_rows

    model = tiny_model("Mamba2")
    by_bytes = STATE_BUDGET // model.config.state_nbytes()
    assert chunk_rows(model) == by_bytes
    assert chunk_rows(model, tokens=71) == min(by_bytes, TOKEN_BUDGET // 71)
    assert chunk_rows(model, tokens=10 * TOKEN_BUDGET) == 1  # never zero rows
    assert chunk_rows(model, budget=1) == 1

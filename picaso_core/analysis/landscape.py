"""Loss landscapes between SSM states: the plane through three states (PICASO fig. 2), the line
through two (1-D interpolation), and the distances of prop. 4.

The loss-landscapes library (planar_interpolation, linear_interpolation) and Li et al. 2018 walk
the loss over planes in WEIGHT space; here the space is the model's STATE, the weights are fixed.

Glossary (paper sec. 4, fig. 2 -> code):
    a_k       the three anchor states of a plane (ContextStates), k = 0, 1, 2
    w         affine ("barycentric") weights, w_0 + w_1 + w_2 = 1; the state at a point of the plane
              is Σ_k w_k a_k, and ssm, conv windows and log-decays are ALL interpolated with these
              same weights (log_decay does not change the model's outputs, only a later
              composition; it is carried along so that every point is a complete state)
    (x, y)    plot coordinates: an orthonormal basis of the plane in the space of the ssm states
              x(u) (all layers flattened), origin at the anchors' mean, e_1 along a_1 - a_0, e_2
              toward a_2. Distances on the plot are Euclidean distances between ssm states; the
              conv windows (raw inputs) are not part of the metric, they follow the weights.
    S         grid steps: the grid is S x S and `loss[i, j]` is the loss at (xs[j], ys[i])
              (plotly's z[row][col])
    loss      mean NLL per continuation token (nats) of `continuation` after `query` read from the
              state, `model.continuation_loss`

Fig. 2's two planes for a sample with contexts u_1, u_2, u_3 (`fig2_anchors`):
    Soup plane   anchors x(u_1), x(u_2), x(u_3) (the independent states); their mean is Soup
    CASO plane   anchors CASO of the 3 cyclic orders; their mean is PICASO-R (prop. 3)
Prop. 4 (single layer): ||CASO(u,u') - CASO(u',u)|| <= ||(I - A(u'))x(u)|| + ||(I - A(u))x(u')||.
The paper prints it with every norm squared, which does not hold (tests/test_compose.py); the
unsquared form, the triangle inequality, is what `prop4_distances` checks per layer.

The grid is scored batched (`score_weights`): each chunk of grid points becomes one batched
ContextState (one state per row) and the query + continuation is read from every row in one
forward; chunks bound the memory to ~`STATE_BUDGET` bytes of states.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from picaso_core.compose import compose, compose_tokens
from picaso_core.engine.state import ContextState

Progress = Callable[[int, int], None]  # progress(done, total) in scored states
STATE_BUDGET = 256 << 20  # bytes of grid states materialised at once
TOKEN_BUDGET = 4096  # positions (rows x tokens) per scoring forward (chunk_rows)
REL_TOL = 1e-6  # anchors closer than this (relative to their size) are "the same state"


# --------------------------------------------------------------------------------------------
# Geometry of a plane through three states
# --------------------------------------------------------------------------------------------
def _flat(s: ContextState) -> torch.Tensor:
    return s.ssm.detach().reshape(-1).double()


@dataclass(frozen=True)
class PlaneGeometry:
    """Plot coordinates of the plane through three ssm states (float64 numpy).

    anchor_xy [3, 2]: the anchors' (x, y); `to_weights` [3, 3] maps (x, y, 1) to w."""

    anchor_xy: np.ndarray
    to_weights: np.ndarray

    @classmethod
    def of(cls, anchors: Sequence[ContextState]) -> "PlaneGeometry":
        if len(anchors) != 3:
            raise ValueError(f"a plane needs exactly 3 anchor states, got {len(anchors)}")
        for i, s in enumerate(anchors):
            if not isinstance(s, ContextState) or s.batched:
                raise ValueError(f"anchor {i} must be a single (unbatched) ContextState")
            anchors[0].check_compatible(s)
            s.check_finite(what=f"anchor {i}")
        X = [_flat(s) for s in anchors]
        scale = max(float(x.norm()) for x in X) or 1.0
        for i, j in ((0, 1), (0, 2), (1, 2)):
            if float((X[i] - X[j]).norm()) <= REL_TOL * scale:
                raise ValueError(f"anchors {i} and {j} are the same state: a plane needs three distinct "
                                 "states (pick three different contexts)")
        d1, d2 = X[1] - X[0], X[2] - X[0]
        n1 = float(d1.norm())
        e1 = d1 / n1
        along = float(d2 @ e1)
        h = float((d2 - along * e1).norm())  # computed directly: no cancellation of squared norms
        if h <= REL_TOL * max(n1, float(d2.norm())):
            raise ValueError("the three anchor states lie on one line (no plane through them); use "
                             "`line` for two states, or pick another third state")
        P = np.array([[0.0, 0.0], [n1, 0.0], [along, h]])
        P -= P.mean(0)  # origin at the anchors' mean
        M = np.vstack([P.T, np.ones(3)])  # [x; y; 1] = M w
        return cls(P, np.linalg.inv(M))

    def weights(self, x, y) -> np.ndarray:
        """Affine weights of points (x, y) (arrays of one shape) -> [..., 3]."""
        x, y = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
        pts = np.stack([x, y, np.ones_like(x)], -1)  # [..., 3]
        return pts @ self.to_weights.T

    def xy(self, w: np.ndarray) -> np.ndarray:
        """(x, y) of affine weights w [..., 3]."""
        return np.asarray(w) @ self.anchor_xy

    @property
    def sides(self) -> list[float]:
        """Distances |a_0 a_1|, |a_1 a_2|, |a_0 a_2| between the anchors (ssm state units)."""
        P = self.anchor_xy
        return [float(np.linalg.norm(P[i] - P[j])) for i, j in ((0, 1), (1, 2), (0, 2))]


def project(anchors: Sequence[ContextState], state: ContextState) -> tuple[np.ndarray, float]:
    """Orthogonal projection of `state`'s ssm onto the plane of `anchors`: (affine weights [3] of
    the foot, distance from the plane)."""
    X = [_flat(s) for s in anchors]
    d = torch.stack([X[1] - X[0], X[2] - X[0]])  # [2, D]
    r = _flat(state) - X[0]
    ab = torch.linalg.solve(d @ d.T, d @ r)  # least squares: G [α, β] = [r·d1, r·d2]
    off = float((r - ab @ d).norm())
    a, b = float(ab[0]), float(ab[1])
    return np.array([1 - a - b, a, b]), off


def combine(anchors: ContextState, W: torch.Tensor) -> ContextState:
    """Σ_k W[b, k] a_k for every row b: anchors batched [K, ...], W [B, K] -> a batch of B states.
    ssm, conv and log_decay alike (one matmul each); num_tokens is the weighted count, rounded."""
    k = anchors.batch_size
    W = W.to(anchors.ssm.dtype)
    f = lambda t: (W @ t.reshape(k, -1)).view(W.shape[0], *t.shape[1:])  # noqa: E731  [B, K] @ [K, D]
    n = np.asarray(anchors.num_tokens, float)
    counts = tuple(max(0, int(round(float(v)))) for v in W.double().cpu().numpy() @ n)
    return ContextState(f(anchors.ssm), f(anchors.conv), f(anchors.log_decay), counts)


# --------------------------------------------------------------------------------------------
# Batched scoring
# --------------------------------------------------------------------------------------------
def chunk_rows(model, budget: int = STATE_BUDGET, tokens: int | None = None) -> int:
    """States per forward: a chunk's states take at most `budget` bytes, and with `tokens` (query +
    continuation length) a forward holds at most TOKEN_BUDGET positions. On CPU a forward's cost per
    position grows once rows x tokens passes a few thousand (memory-bound): one 21 x 21 plane of
    71-token queries on the demo model takes 8.7 s as one 441-row forward and 4.1 s in 64-row chunks."""
    rows = max(1, budget // model.config.state_nbytes())
    return rows if not tokens else max(1, min(rows, TOKEN_BUDGET // max(1, tokens)))


@torch.no_grad()
def score_weights(model, query_ids, continuation_ids, anchors: Sequence[ContextState], W: np.ndarray,
                  chunk: int | None = None, progress: Progress | None = None, done: int = 0,
                  total: int | None = None) -> np.ndarray:
    """Loss of `continuation` after `query` from each state Σ_k W[m, k] a_k -> [M] (float64).

    Chunks of `chunk` rows (default `chunk_rows`) are combined into one batched state and scored
    in one forward, the query read from each row's own state; `progress(done + m, total)` after
    each chunk. Equal to `model.continuation_loss` one state at a time (tests)."""
    A = ContextState.stack([s.to(model.device) for s in anchors])
    W = torch.as_tensor(np.asarray(W, float), dtype=torch.float64).reshape(-1, len(anchors))
    rows = chunk or chunk_rows(model, tokens=len(query_ids) + len(continuation_ids))
    total = total if total is not None else done + len(W)
    out = []
    for i in range(0, len(W), rows):
        batch = combine(A, W[i:i + rows].to(model.device))
        # the model's own scoring path (continuation_loss is its b = 1 case)
        out.append(model._continuation_nll(query_ids, continuation_ids, batch, batch.batch_size).double().cpu())
        if progress is not None:
            progress(done + min(i + rows, len(W)), total)
    return torch.cat(out).numpy() if out else np.zeros(0)


# --------------------------------------------------------------------------------------------
# Planes
# --------------------------------------------------------------------------------------------
@dataclass
class Mark:
    """A point worth marking on a plane: its coordinates and the loss there. For a state projected
    onto the plane (e.g. Concat), `off_plane` is its distance from the plane and `state_loss` the
    loss of the state itself (the plane's loss is the projection's)."""

    name: str
    x: float
    y: float
    loss: float
    weights: tuple[float, float, float]
    off_plane: float = 0.0
    state_loss: float | None = None


@dataclass
class Landscape:
    """The loss over a plane through three states.

    xs [S], ys [S]: grid coordinates; loss [S, S]: loss[i, j] at (xs[j], ys[i]); anchor_xy [3, 2];
    anchor_loss [3]; marks: the anchors' mean ("mean") and projected states; n_samples: 1, or the
    number of samples averaged (then there is no single state: `state_at` raises)."""

    xs: np.ndarray
    ys: np.ndarray
    loss: np.ndarray
    anchor_xy: np.ndarray
    anchor_loss: np.ndarray
    marks: list[Mark]
    anchor_names: tuple[str, str, str] = ("a0", "a1", "a2")
    n_samples: int = 1
    geometry: PlaneGeometry | None = field(default=None, repr=False)
    anchors: tuple[ContextState, ...] | None = field(default=None, repr=False)

    def weights_at(self, x: float, y: float) -> np.ndarray:
        return self.geometry.weights(x, y)

    def state_at(self, x: float, y: float) -> ContextState:
        """The state at (x, y): Σ_k w_k a_k for ssm, conv and log_decay."""
        if self.anchors is None:
            raise ValueError("this landscape is an average over samples: it has no single state at a point")
        W = torch.as_tensor(self.weights_at(x, y), dtype=torch.float64)[None]
        return combine(ContextState.stack(list(self.anchors)), W)[0]

    def mark(self, name: str) -> Mark:
        for m in self.marks:
            if m.name == name:
                return m
        raise KeyError(f"no mark {name!r}; marks: {[m.name for m in self.marks]}")

    @property
    def sides(self) -> list[float]:
        P = self.anchor_xy
        return [float(np.linalg.norm(P[i] - P[j])) for i, j in ((0, 1), (1, 2), (0, 2))]

    def to_dict(self) -> dict:
        """Plain data (JSON-ready)."""
        return {
            "xs": _r(self.xs), "ys": _r(self.ys), "loss": _r(self.loss),
            "anchor_xy": _r(self.anchor_xy), "anchor_loss": _r(self.anchor_loss),
            "anchor_names": list(self.anchor_names), "sides": _r(self.sides), "n_samples": self.n_samples,
            "marks": [{"name": m.name, "x": _r(m.x), "y": _r(m.y), "loss": _r(m.loss), "weights": _r(m.weights),
                       "off_plane": _r(m.off_plane), "state_loss": _r(m.state_loss)} for m in self.marks],
        }


def _r(v, digits: int = 8):
    """Round floats inside nested lists / arrays for JSON."""
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [_r(x, digits) for x in v]
    return float(f"{float(v):.{digits}g}")


def grid(anchor_xy: np.ndarray, steps: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """xs, ys: a square box (equal scales on both axes) around the anchors, widened by `margin`
    times its side on every edge."""
    if steps < 2:
        raise ValueError(f"steps must be >= 2, got {steps}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    lo, hi = anchor_xy.min(0), anchor_xy.max(0)
    side = float((hi - lo).max())
    c = (lo + hi) / 2
    half = side * (0.5 + margin)
    return (np.linspace(c[0] - half, c[0] + half, steps), np.linspace(c[1] - half, c[1] + half, steps))


@dataclass
class PlaneInput:
    """One sample's plane: query, continuation, the three anchors, the states to project."""

    query_ids: list[int]
    continuation_ids: list[int]
    anchors: list[ContextState]
    project_states: dict[str, ContextState] = field(default_factory=dict)


def plane(model, query_ids, continuation_ids, anchors: Sequence[ContextState], steps: int = 21,
          margin: float = 0.25, project_states: Mapping[str, ContextState] | None = None,
          anchor_names: Sequence[str] = ("a0", "a1", "a2"), mean_name: str = "mean",
          chunk: int | None = None, progress: Progress | None = None) -> Landscape:
    """The loss over the plane through three anchor states (PICASO fig. 2, one sample).

    Args:
        model: an SSMLanguageModel; query_ids, continuation_ids: token ids (>= 1 token each).
        anchors: three distinct, non-collinear single states of that model.
        steps: S, the grid is S x S; margin: the box around the anchors widened by this fraction
            of its side on every edge.
        project_states: states to mark on the plane by their orthogonal projection (e.g.
            {"Concat": concat_state}); the mark carries the distance from the plane and the loss
            both at the projection and of the state itself.
        anchor_names: labels of the anchors; mean_name: the label of their mean ("Soup", ...).
        chunk: states per forward (default: ~STATE_BUDGET bytes of states); progress(done, total).
    Returns:
        a Landscape; the state at every point is Σ_k w_k a_k (ssm, conv and log_decay alike).
    Raises:
        ValueError for equal or collinear anchors, anchors of another model, bad steps / margin.
    """
    inp = PlaneInput(list(query_ids), list(continuation_ids), list(anchors), dict(project_states or {}))
    out = average_planes(model, [inp], steps, margin, anchor_names, mean_name, chunk, progress)
    out.anchors = tuple(anchors)
    return out


@torch.no_grad()
def average_planes(model, inputs: Sequence[PlaneInput], steps: int = 21, margin: float = 0.25,
                   anchor_names: Sequence[str] = ("a0", "a1", "a2"), mean_name: str = "mean",
                   chunk: int | None = None, progress: Progress | None = None) -> Landscape:
    """The loss averaged over samples in barycentric coordinates (fig. 2 averages 10 samples).

    Every sample's plane has its own triangle; the average is drawn on the mean triangle (the mean
    of the samples' anchor_xy: each is centred on its mean with e_1 along a_1 - a_0, so the mean
    triangle keeps the typical size and shape). A grid point with affine weights w with respect to
    the mean triangle is the state Σ_k w_k a_k of each sample, and its loss is the mean over
    samples. A projected mark sits at the mean of its weights; its loss, distance from the plane
    and state loss are means over samples. With one sample this is `plane` (less `state_at`)."""
    if not inputs:
        raise ValueError("no samples to average")
    geos = [PlaneGeometry.of(list(p.anchors)) for p in inputs]
    names = list(inputs[0].project_states)
    if any(list(p.project_states) != names for p in inputs):
        raise ValueError("every sample must project the same named states")
    P = np.mean([g.anchor_xy for g in geos], 0)
    geo = geos[0] if len(geos) == 1 else PlaneGeometry(P, np.linalg.inv(np.vstack([P.T, np.ones(3)])))
    xs, ys = grid(geo.anchor_xy, steps, margin)
    X, Y = np.meshgrid(xs, ys)  # [S, S]: row i is ys[i], column j is xs[j]
    W_grid = np.concatenate([geo.weights(X, Y).reshape(-1, 3), np.eye(3), np.full((1, 3), 1 / 3)])
    n_grid = steps * steps
    per_sample = len(W_grid) + len(names)
    total = per_sample * len(inputs)
    loss = np.zeros(len(W_grid))
    mark_w = np.zeros((len(names), 3))
    mark_loss, mark_off, state_loss = np.zeros(len(names)), np.zeros(len(names)), np.zeros(len(names))
    for s, p in enumerate(inputs):
        proj = [project(p.anchors, p.project_states[n]) for n in names]
        W = np.concatenate([W_grid] + [w[None] for w, _ in proj])
        L = score_weights(model, p.query_ids, p.continuation_ids, p.anchors, W, chunk, progress,
                          done=s * per_sample, total=total)
        loss += L[: len(W_grid)]
        if names:
            mark_w += np.stack([w for w, _ in proj])
            mark_off += [off for _, off in proj]
            mark_loss += L[len(W_grid):]
            state_loss += model.continuation_losses(p.query_ids, p.continuation_ids,
                                                    [p.project_states[n] for n in names])
    n = len(inputs)
    loss, mark_w, mark_loss, mark_off, state_loss = (v / n for v in (loss, mark_w, mark_loss, mark_off, state_loss))
    marks = [Mark(mean_name, 0.0, 0.0, float(loss[n_grid + 3]), (1 / 3, 1 / 3, 1 / 3))]
    for k, name in enumerate(names):
        x, y = geo.xy(mark_w[k])
        marks.append(Mark(name, float(x), float(y), float(mark_loss[k]), tuple(map(float, mark_w[k])),
                          float(mark_off[k]), float(state_loss[k])))
    mx, my = geo.xy(np.full(3, 1 / 3))
    marks[0].x, marks[0].y = float(mx), float(my)
    return Landscape(xs, ys, loss[:n_grid].reshape(steps, steps), geo.anchor_xy, loss[n_grid:n_grid + 3],
                     marks, tuple(anchor_names), n, geo)


# --------------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------------
@dataclass
class Line:
    """The loss along the line through two states: the state at t is (1 - t) a + t b.

    ts [T] (t = 0 is a, t = 1 is b, both on the grid), loss [T], distance ||a - b|| (ssm)."""

    ts: np.ndarray
    loss: np.ndarray
    distance: float
    names: tuple[str, str] = ("a", "b")
    n_samples: int = 1
    ends: tuple[ContextState, ContextState] | None = field(default=None, repr=False)

    def state_at(self, t: float) -> ContextState:
        if self.ends is None:
            raise ValueError("this line is an average over samples: it has no single state at a point")
        W = torch.tensor([[1 - t, t]], dtype=torch.float64)
        return combine(ContextState.stack(list(self.ends)), W)[0]

    def to_dict(self) -> dict:
        return {"ts": _r(self.ts), "loss": _r(self.loss), "distance": _r(self.distance),
                "names": list(self.names), "n_samples": self.n_samples}


def line_ts(steps: int, margin: float) -> np.ndarray:
    """steps values of t from -margin to 1 + margin, with 0 and 1 exactly on the grid when the
    spacing allows (steps - 1 a multiple of the segment count)."""
    if steps < 2 or margin < 0:
        raise ValueError(f"need steps >= 2 and margin >= 0, got steps={steps}, margin={margin}")
    ts = np.linspace(-margin, 1 + margin, steps)
    for end in (0.0, 1.0):
        i = int(np.argmin(np.abs(ts - end)))
        if abs(ts[i] - end) < 1e-9:
            ts[i] = end
    return ts


def line(model, query_ids, continuation_ids, a: ContextState, b: ContextState, steps: int = 41,
         margin: float = 0.5, names: tuple[str, str] = ("a", "b"), chunk: int | None = None,
         progress: Progress | None = None) -> Line:
    """The loss along the line through states a and b (1-D interpolation), t in [-margin, 1 +
    margin]; ssm, conv and log_decay interpolated alike. E.g. x(u) to x(u'), or CASO(u, u') to
    CASO(u', u) (prop. 4: the latter are closer). Raises ValueError when a and b are equal."""
    out = average_lines(model, [(list(query_ids), list(continuation_ids), a, b)], steps, margin, names,
                        chunk, progress)
    out.ends = (a, b)
    return out


@torch.no_grad()
def average_lines(model, inputs: Sequence[tuple], steps: int = 41, margin: float = 0.5,
                  names: tuple[str, str] = ("a", "b"), chunk: int | None = None,
                  progress: Progress | None = None) -> Line:
    """The loss along lines averaged over samples at equal t; inputs: (query_ids,
    continuation_ids, a, b) per sample; `distance` is the mean ||a - b||."""
    ts = line_ts(steps, margin)
    W = np.stack([1 - ts, ts], 1)
    loss, dist = np.zeros(steps), 0.0
    for s, (q, c, a, b) in enumerate(inputs):
        a.check_compatible(b)
        d = float((_flat(a) - _flat(b)).norm())
        if d <= REL_TOL * max(float(_flat(a).norm()), float(_flat(b).norm()), 1e-30):
            raise ValueError("the two states are the same: a line needs two distinct states")
        A = ContextState.stack([a.to(model.device), b.to(model.device)])
        rows = chunk or chunk_rows(model, tokens=len(q) + len(c))
        for i in range(0, steps, rows):
            batch = combine(A, torch.as_tensor(W[i:i + rows]).to(model.device))
            loss[i:i + rows] += model._continuation_nll(q, c, batch, batch.batch_size).double().cpu().numpy()
        dist += d
        if progress is not None:
            progress(s + 1, len(inputs))
    n = len(inputs)
    return Line(ts, loss / n, dist / n, tuple(names), n)


# --------------------------------------------------------------------------------------------
# Fig. 2 anchors and prop. 4 distances
# --------------------------------------------------------------------------------------------
def rotations(states: Sequence) -> list[list]:
    """The n cyclic orders of `states`: rotation r starts at state r."""
    s = list(states)
    return [s[r:] + s[:r] for r in range(len(s))]


def fig2_anchors(context_states: Sequence[ContextState]) -> dict[str, list[ContextState]]:
    """{"soup": the 3 independent states, "caso": CASO of the 3 cyclic orders} (fig. 2 left /
    right). The mean of the first is Soup, of the second PICASO-R (prop. 3)."""
    if len(context_states) != 3:
        raise ValueError(f"fig. 2 uses 3 contexts, got {len(context_states)}")
    return {"soup": list(context_states), "caso": [compose("caso", r) for r in rotations(context_states)]}


def concat_state(model, context_ids: Sequence[Sequence[int]], context_states: Sequence[ContextState]) -> ContextState:
    """Concat's state (the contexts' tokens after the first one's stored state, sec. 6.2)."""
    return compose_tokens(model, context_ids, "concat", states=list(context_states))


def _layer_norms(t: torch.Tensor) -> list[float]:
    """Per-layer Euclidean norms of a [L, ...] tensor."""
    return t.detach().double().reshape(t.shape[0], -1).norm(dim=1).tolist()


def prop4_distances(u: ContextState, v: ContextState) -> list[dict]:
    """Prop. 4 per layer for two contexts' states u = x(u), v = x(u'):
        caso_gap   ||CASO(u, u') - CASO(u', u)||
        state_gap  ||x(u) - x(u')||          (the two independent states: Soup's anchors)
        bound      ||(I - A(u'))x(u)|| + ||(I - A(u))x(u')||  (unsquared; the squared form
                   printed in the paper does not hold)
    Returns one dict per layer (layer, caso_gap, state_gap, bound)."""
    u.check_compatible(v)
    gap = compose("caso", [u, v]).ssm - compose("caso", [v, u]).ssm
    bound = [p + q for p, q in zip(_layer_norms((1 - v.decay) * u.ssm), _layer_norms((1 - u.decay) * v.ssm))]
    return [{"layer": l, "caso_gap": g, "state_gap": s, "bound": b}
            for l, (g, s, b) in enumerate(zip(_layer_norms(gap), _layer_norms(u.ssm - v.ssm), bound))]


def prop4_table(context_states: Sequence[ContextState]) -> list[dict]:
    """`prop4_distances` averaged over every pair of the contexts, per layer, with `holds`: the
    bound held for every pair."""
    pairs = [prop4_distances(a, b) for a, b in itertools.combinations(context_states, 2)]
    rows = []
    for l in range(len(pairs[0])):
        r = {k: float(np.mean([p[l][k] for p in pairs])) for k in ("caso_gap", "state_gap", "bound")}
        r["holds"] = all(p[l]["caso_gap"] <= p[l]["bound"] * (1 + 1e-6) for p in pairs)
        rows.append({"layer": l, **r})
    return rows


# --------------------------------------------------------------------------------------------
# Fig. 2 for one sample or an average
# --------------------------------------------------------------------------------------------
@dataclass
class Fig2:
    """Fig. 2 and its companions for one sample or the average of several.

    soup / caso: the two planes; soup_line: x(u_a) -> x(u_b); caso_line: CASO(u_a, u_b) ->
    CASO(u_b, u_a) (the pair `pair`, 0-based); prop4: per-layer distances (`prop4_table`), means
    over samples; seconds: wall time of the whole computation."""

    soup: Landscape
    caso: Landscape
    soup_line: Line
    caso_line: Line
    prop4: list[dict]
    pair: tuple[int, int]
    n_samples: int
    seconds: float = 0.0

    def summary(self) -> dict:
        """The fig. 2 finding in numbers: triangle sizes, loss at each mean and at the anchors."""
        s, c = self.soup, self.caso
        out = {
            "soup_mean_side": float(np.mean(s.sides)), "caso_mean_side": float(np.mean(c.sides)),
            "soup_loss_at_mean": s.marks[0].loss, "caso_loss_at_mean": c.marks[0].loss,
            "soup_anchor_loss": float(np.mean(s.anchor_loss)), "caso_anchor_loss": float(np.mean(c.anchor_loss)),
        }
        out["side_ratio"] = out["caso_mean_side"] / out["soup_mean_side"]
        out["mean_loss_gain"] = out["soup_loss_at_mean"] - out["caso_loss_at_mean"]  # > 0: PICASO-R lower
        concat = [m for m in s.marks if m.name == "Concat"]
        if concat:
            out["concat_loss"] = concat[0].state_loss
            out["concat_off_soup_plane"] = concat[0].off_plane
            out["concat_off_caso_plane"] = c.mark("Concat").off_plane
        return out

    def to_dict(self) -> dict:
        return {"n_samples": self.n_samples, "pair": list(self.pair), "seconds": _r(self.seconds, 4),
                "soup": self.soup.to_dict(), "caso": self.caso.to_dict(),
                "soup_line": self.soup_line.to_dict(), "caso_line": self.caso_line.to_dict(),
                "prop4": [{k: (_r(v) if isinstance(v, float) else v) for k, v in r.items()} for r in self.prop4],
                "summary": {k: _r(v) for k, v in self.summary().items()}}


def fig2(model, samples: Sequence[tuple], steps: int = 21, margin: float = 0.25, pair: tuple[int, int] = (1, 2),
         line_steps: int = 41, line_margin: float = 0.5, chunk: int | None = None,
         progress: Progress | None = None) -> Fig2:
    """PICASO fig. 2 over `samples`, each (query_ids, continuation_ids, context_ids [3 lists],
    context_states [3]) with its contexts in presentation order (most relevant last).

    Both planes mark their mean (Soup / PICASO-R) and the Concat state projected onto them; with
    several samples everything is averaged (planes in barycentric coordinates, lines at equal t,
    distances per layer). progress(done, total) counts scored states."""
    import time

    t0 = time.perf_counter()
    if not samples:
        raise ValueError("no samples")
    if len(set(pair)) != 2 or not all(0 <= p < 3 for p in pair):
        raise ValueError(f"pair must be two different context indices in 0..2, got {pair}")
    soup_in, caso_in, soup_lines, caso_lines, tables = [], [], [], [], []
    for q, c, ids, states in samples:
        anchors = fig2_anchors(states)
        proj = {"Concat": concat_state(model, ids, states)}
        soup_in.append(PlaneInput(list(q), list(c), anchors["soup"], proj))
        caso_in.append(PlaneInput(list(q), list(c), anchors["caso"], proj))
        a, b = states[pair[0]], states[pair[1]]
        soup_lines.append((q, c, a, b))
        caso_lines.append((q, c, compose("caso", [a, b]), compose("caso", [b, a])))
        tables.append(prop4_table(states))
    n = len(samples)
    per_plane = (steps * steps + 5) * n
    total = 2 * per_plane + 2 * line_steps * n

    def phase(offset: int, unit: int = 1):  # progress of one stage, offset into the whole
        return None if progress is None else (lambda d, t: progress(offset + d * unit, total))

    names = [f"u{i + 1}" for i in range(3)]
    soup = average_planes(model, soup_in, steps, margin, tuple(f"x({u})" for u in names), "Soup", chunk, phase(0))
    caso = average_planes(model, caso_in, steps, margin,
                          tuple("CASO(" + ",".join(r) + ")" for r in rotations(names)), "PICASO-R", chunk,
                          phase(per_plane))
    ua, ub = names[pair[0]], names[pair[1]]
    done = 2 * per_plane
    soup_line = average_lines(model, soup_lines, line_steps, line_margin, (f"x({ua})", f"x({ub})"), chunk,
                              phase(done, line_steps))
    done += n * line_steps
    caso_line = average_lines(model, caso_lines, line_steps, line_margin, (f"CASO({ua},{ub})", f"CASO({ub},{ua})"),
                              chunk, phase(done, line_steps))
    prop4 = [{"layer": l,
              **{k: float(np.mean([t[l][k] for t in tables])) for k in ("caso_gap", "state_gap", "bound")},
              "holds": all(t[l]["holds"] for t in tables)} for l in range(len(tables[0]))]
    return Fig2(soup, caso, soup_line, caso_line, prop4, tuple(pair), n, time.perf_counter() - t0)

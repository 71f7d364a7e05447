"""Loss landscapes between SSM states: the plane through three states (PICASO fig. 2), the line
through two (1-D interpolation). Fig. 2 itself (its two planes, lines and the distances of prop. 4)
is built from them in landscape_fig2.

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

The grid is scored batched (`score_weights`): each chunk of grid points becomes one batched
ContextState (one state per row) and the query + continuation is read from every row in one
forward; chunks bound the memory to ~`STATE_BUDGET` bytes of states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

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

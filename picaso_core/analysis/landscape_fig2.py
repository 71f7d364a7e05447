"""PICASO fig. 2 from the loss landscapes of picaso_core.analysis.landscape: for each sample, the Soup
plane and the CASO plane with the Concat state projected onto both, the lines between two contexts'
states and between their two CASO orders, and the distances of prop. 4; one sample or an average.

Fig. 2's two planes for a sample with contexts u_1, u_2, u_3 (`fig2_anchors`):
    Soup plane   anchors x(u_1), x(u_2), x(u_3) (the independent states); their mean is Soup
    CASO plane   anchors CASO of the 3 cyclic orders; their mean is PICASO-R (prop. 3)
Prop. 4 (single layer): ||CASO(u,u') - CASO(u',u)|| <= ||(I - A(u'))x(u)|| + ||(I - A(u))x(u')||.
The paper prints it with every norm squared, which does not hold (tests/test_compose.py); the
unsquared form, the triangle inequality, is what `prop4_distances` checks per layer.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from picaso_core.analysis.landscape import Landscape, Line, PlaneInput, Progress, _r, average_lines, average_planes
from picaso_core.compose import compose, compose_tokens
from picaso_core.engine.state import ContextState


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

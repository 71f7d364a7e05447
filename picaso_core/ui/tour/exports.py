"""Exports of what a tab shows, as files a speaker can take away: a table as CSV, a figure as a
standalone HTML page (plotly.js inlined, so it opens offline; plotly's own PNG button stays on
the plot), the state-soup map as the two TSV files the TensorFlow Embedding Projector loads
(projector.tensorflow.org, "Load": vectors, then metadata), and a loss-landscape plane's grid
as CSV (alpha, beta, loss).

Each function takes the object on screen and returns text (or writes it to `path` when given), so
the handlers that offer the downloads stay one line each.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

PROJECTOR_COLUMNS = ("task", "layer", "shots")  # the metadata file's header row


def _write(text: str, path: str | Path | None) -> str:
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def table_csv(frame: pd.DataFrame, path: str | Path | None = None) -> str:
    """A table as CSV, its columns (and their order) as shown, no index column."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"table_csv takes a pandas DataFrame, got {type(frame).__name__}")
    return _write(frame.to_csv(index=False), path)


def figure_html(fig: go.Figure | dict, path: str | Path | None = None, title: str | None = None) -> str:
    """A figure as one HTML page that opens with no network: plotly.js is inlined (~4.6 MB), not
    fetched from a CDN."""
    fig = fig if isinstance(fig, go.Figure) else go.Figure(fig)
    html = fig.to_html(include_plotlyjs=True, full_html=True, config={"displaylogo": False})
    if title:
        html = html.replace("<head>", f"<head><title>{_escape(title)}</title>", 1)
    return _write(html, path)


def figure_div(fig: go.Figure | dict, div_id: str | None = None) -> str:
    """A figure as a <div> for a page that loads plotly.js once itself (the static tour)."""
    fig = fig if isinstance(fig, go.Figure) else go.Figure(fig)
    return fig.to_html(include_plotlyjs=False, full_html=False, div_id=div_id, config={"displaylogo": False})


def projector_tsv(vectors: np.ndarray, tasks: list[str], layer: int, shots: int | list[int],
                  folder: str | Path | None = None, stem: str = "soup") -> tuple[str, str]:
    """The Embedding Projector's two files: vectors (one tab-separated row per point, no header) and
    metadata (a header row `task layer shots`, then one row per point, in the same order).

    vectors: [N, D] float, the features the map projects (one row per point on the map).
    shots: the demonstration's shots, one for all points or one per point.
    Returns (vectors_tsv, metadata_tsv); with `folder`, also writes <stem>_vectors.tsv and
    <stem>_metadata.tsv there.
    """
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(tasks):
        raise ValueError(f"vectors must be [N, D] with one row per task label: got shape {x.shape} for {len(tasks)} labels")
    if not np.isfinite(x).all():
        raise ValueError("vectors hold NaN or inf: the Projector cannot load them")
    shots = [shots] * len(tasks) if isinstance(shots, int) else list(shots)
    vec = "".join("\t".join(f"{v:.6g}" for v in row) + "\n" for row in x)
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(PROJECTOR_COLUMNS)
    # a tab or newline inside a label would shift the Projector's columns: written as spaces
    w.writerows([" ".join(str(t).split()), layer, s] for t, s in zip(tasks, shots))
    meta = buf.getvalue()
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        _write(vec, Path(folder) / f"{stem}_vectors.tsv")
        _write(meta, Path(folder) / f"{stem}_metadata.tsv")
    return vec, meta


LANDSCAPE_COLUMNS = ("alpha", "beta", "loss")


def landscape_csv(plane: dict, path: str | Path | None = None) -> str:
    """A loss plane's grid as CSV, one row per grid point: alpha, beta (the plane's coordinates, its
    x and y axes) and the loss there. `plane` is one plane of the landscape tab's data
    (Fig2.to_dict()["soup"] or ["caso"]: `xs` [S], `ys` [S], `loss` [S][S] with loss[i][j] at
    (xs[j], ys[i]), analysis/landscape.py)."""
    try:
        xs, ys, z = plane["xs"], plane["ys"], plane["loss"]
    except (KeyError, TypeError):
        raise ValueError("a landscape plane needs 'xs', 'ys' and 'loss' (the tab's data['soup'] or data['caso'])") from None
    if len(z) != len(ys) or any(len(row) != len(xs) for row in z):
        raise ValueError(f"loss grid is {len(z)}x{len(z[0]) if z else 0}, expected {len(ys)}x{len(xs)} (ys x xs)")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LANDSCAPE_COLUMNS)
    for i, beta in enumerate(ys):
        for j, alpha in enumerate(xs):
            loss = z[i][j]
            w.writerow([f"{alpha:.6g}", f"{beta:.6g}", "" if loss is None or not math.isfinite(loss) else f"{loss:.6g}"])
    return _write(buf.getvalue(), path)


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

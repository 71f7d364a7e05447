"""The tabs' Export menus: what a visitor downloads, written under the app's cache folder, served by
the app's own route and removed a few minutes later.

    render_exports(res, key, tab)   inside a tab, after its own layout: the menu, the button, the links
    export_files(...)               one export's files (the handler, testable without a server)
    routes()                        the download route, /px-export/<token>/<name>, for launch's app

Each export is a folder <cache>/exports/<token>/ (a random token) holding its files, named after the
tab, its example and the date (picaso-compose-demo-test-r0003-2026-11-27-table-methods.csv). The
reply is a link per file, its size said: no server path. Nothing stays: a folder older than
PICASO_EXPORT_TTL_S (600) is removed on every export, by a background sweep, and at start-up (what
a previous run left); an export larger than PICASO_EXPORT_MAX_MB (128) is refused before anything
is written, estimated from what the client sent, and so is one that would take the folder past
four times that.

Why not a gr.File output: Gradio copies a returned file into its own cache (GRADIO_TEMP_DIR,
<sha256>/<name>), names that copy's absolute path in the reply (FileData.path and its
/gradio_api/file= URL) and keeps it until `demo.delete_cache`'s sweep (an hour here).

The export event's inputs are one hidden gr.JSON that the page fills from the tab's components
(PACK_JS): a Dataframe or Plot input is validated by Gradio's pydantic models before any handler
runs, and a malformed payload got a multi-line validation text and a traceback in the log. Here
every part of the payload is checked by `export_files`, and refused in one line.
"""

from __future__ import annotations

import html
import logging
import math
import os
import re
import secrets
import shutil
import threading
import time
from datetime import date
from pathlib import Path

import gradio as gr
import pandas as pd
import plotly.io as pio
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse
from starlette.routing import Route

from picaso_core.analysis.soup import PARTS, task_names
from picaso_core.session import Resources
from picaso_core.ui.errors import bad_input
from picaso_core.ui.server.serving import LIGHT, STOP, in_background
from picaso_core.ui.tabs.soup_lab import PER_TASK, SHOTS, lab_for
from picaso_core.ui.tour.exports import figure_html, landscape_csv, projector_tsv, table_csv
from picaso_core.ui.tour.links import TABS, descendants, find

log = logging.getLogger("picaso_explorer")
ROUTE = "px-export"  # the download route's first segment: <page>/px-export/<token>/<name>
TTL_S, MAX_MB, TOTAL_FACTOR = 600.0, 128.0, 4  # defaults of PICASO_EXPORT_TTL_S / _MAX_MB; the folder's bound
PLOTLY_JS_BYTES = 4_700_000  # a standalone figure inlines plotly.js (exports.figure_html)
TSV_BYTES_PER_VALUE = 12  # "%.6g" of a unit-norm feature and its tab: measured 11.8 on the demo's map
CSV_BYTES_PER_GRID_POINT = 36  # "alpha,beta,loss" of one landscape grid point, at most
MAX_CELLS = 2_000_000  # a table's cells checked one by one; more is refused before looking
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")
EXPORT = "the export"  # how bad_input names the endpoint in the log


def settings(env=None) -> tuple[float, float]:
    """(TTL in seconds, cap in MB) from PICASO_EXPORT_TTL_S and PICASO_EXPORT_MAX_MB."""
    env = os.environ if env is None else env
    out = []
    for name, default in (("PICASO_EXPORT_TTL_S", TTL_S), ("PICASO_EXPORT_MAX_MB", MAX_MB)):
        try:
            value = float(env.get(name) or default)
        except ValueError:
            raise ValueError(f"{name}={env[name]!r}: expected a number") from None
        if not value > 0:
            raise ValueError(f"{name} must be more than 0, got {value:g}")
        out.append(value)
    return out[0], out[1]


def megabytes(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB" if n >= 1e3 else f"{n:.0f} bytes"


class Exports:
    """<folder>/<token>/...: one folder per export, removed `ttl_s` seconds after it was written."""

    def __init__(self, folder: Path | str, ttl_s: float = TTL_S, max_bytes: float = MAX_MB * 1e6):
        self.folder, self.ttl_s, self.max_bytes = Path(folder), float(ttl_s), float(max_bytes)
        self._lock = threading.Lock()
        _LIVE.append(self)

    def sweep(self, everything: bool = False) -> int:
        """Remove the exports older than the TTL (all of them with `everything`); how many."""
        if not self.folder.is_dir():
            return 0
        cutoff, gone = time.time() - self.ttl_s, 0
        for d in self.folder.iterdir():
            try:
                if everything or d.stat().st_mtime < cutoff:
                    shutil.rmtree(d) if d.is_dir() and not d.is_symlink() else d.unlink()
                    gone += 1
            except FileNotFoundError:  # a concurrent sweep got there first
                pass
        return gone

    def start(self) -> "Exports":
        """At start-up: remove what a previous run left, then sweep in the background."""
        self.sweep(everything=True)
        in_background(self._sweep_every, max(0.5, min(self.ttl_s / 2, 60.0)))
        return self

    def _sweep_every(self, seconds: float) -> None:
        while not STOP.wait(seconds):
            self.sweep()

    def used(self) -> int:
        return sum(f.stat().st_size for f in self.folder.glob("*/*") if f.is_file()) if self.folder.is_dir() else 0

    def new(self, estimate: float) -> Path:
        """A fresh folder for an export of about `estimate` bytes; refused in one line over the caps."""
        cap = self.max_bytes
        if estimate > cap:
            raise bad_input(f"this export would be about {megabytes(estimate)}, over the {megabytes(cap)} an export "
                            "may take (PICASO_EXPORT_MAX_MB): export a smaller table", EXPORT)
        with self._lock:
            self.sweep()
            if self.used() + estimate > TOTAL_FACTOR * cap:
                raise bad_input(f"busy: the exports of the last {self.ttl_s:.0f} s fill the space kept for them; "
                                f"try again in about {self.ttl_s:.0f} s", EXPORT)
            path = self.folder / secrets.token_urlsafe(16)
            path.mkdir(parents=True)
        return path

    def find(self, token: str, name: str) -> Path | None:
        """The file of a download link, if it is still there (never a path outside the folder)."""
        if not TOKEN.fullmatch(token) or "/" in name or "\\" in name or name.startswith("."):
            return None
        path = self.folder / token / name
        return path if path.is_file() and not path.is_symlink() and path.parent.parent == self.folder else None


_LIVE: list[Exports] = []  # the stores of this process, which the download route serves


def exports_for(res: Resources) -> Exports:
    """The app's exports store, <cache>/exports, started (swept) once per Resources."""
    def make():
        ttl, cap = settings()
        return Exports(Path(res.cache_dir) / "exports", ttl, cap * 1e6).start()

    return res.derived("exports", make)


async def _download(request: Request):
    token, name = request.path_params["token"], request.path_params["name"]
    path = next((p for p in (e.find(token, name) for e in list(_LIVE)) if p is not None), None)
    if path is None:
        return PlainTextResponse("This export has expired (exports are kept a few minutes): export it again.\n",
                                 status_code=404)
    return FileResponse(path, filename=name)


def routes() -> list[Route]:
    """The download route, for the FastAPI app launch() makes (app_kwargs["routes"])."""
    return [Route(f"/{ROUTE}/{{token}}/{{name}}", _download, methods=["GET"])]


# ---- the menu -----------------------------------------------------------------------------------
def projector_bytes(res: Resources, part: str = "ssm") -> int:
    """The Projector's vectors TSV of the skill map, in bytes (estimated from the map's shape:
    points x state features of one layer x TSV_BYTES_PER_VALUE), without building the map."""
    shape = res.model.config.state_shapes()[part]
    return len(task_names()) * PER_TASK * math.prod(shape[1:]) * TSV_BYTES_PER_VALUE


def _export_choices(key: str, plots: list, tables: list, res: Resources | None = None) -> list[tuple[str, str]]:
    out = [(f"Table · {t.label or t.elem_id or i} (CSV)", f"table:{i}") for i, t in enumerate(tables)]
    out += [(f"Plot · {p.label or p.elem_id or i} (HTML)", f"plot:{i}") for i, p in enumerate(plots)]
    if key == "soup":
        size = f", about {megabytes(projector_bytes(res))} for the SSM state" if res is not None else ""
        out.insert(0, (f"Skill map · Embedding Projector (vectors + metadata TSV{size})", "projector"))
    if key == "landscape":
        out.insert(0, ("Landscape grids · Soup and CASO planes (CSV: alpha, beta, loss)", "grid"))
    return out


def _slug(text, n: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", str(text or "")).strip("-.")[:n].strip("-.")


def file_stem(key: str, example=None, day: date | None = None) -> str:
    """picaso-<tab>[-<example>]-<date>: what each of an export's files is named after."""
    parts = ["picaso", key, _slug(example), (day or date.today()).isoformat()]
    return "-".join(p for p in parts if p)


# ---- the payload, checked -----------------------------------------------------------------------
def _frame(value, what: str) -> pd.DataFrame:
    """A Dataframe's payload ({"headers": [...], "data": [[...], ...]}) as a DataFrame, or refused."""
    if isinstance(value, pd.DataFrame):
        return value
    if not isinstance(value, dict) or not all(isinstance(value.get(k), list) for k in ("headers", "data")):
        raise bad_input(f"{what} is not a table (headers and rows): export from the page", EXPORT)
    headers, rows = value["headers"], value["data"]
    if len(headers) * max(len(rows), 1) > MAX_CELLS:
        raise bad_input(f"{what} has {len(rows):,} rows of {len(headers)} columns, more than an export takes", EXPORT)
    scalar = (str, int, float, bool, type(None))
    if not all(isinstance(h, scalar) for h in headers) or not all(
            isinstance(r, list) and len(r) == len(headers) and all(isinstance(c, scalar) for c in r) for r in rows):
        raise bad_input(f"{what}'s rows must each hold one plain value per column", EXPORT)
    return pd.DataFrame(rows, columns=[str(h) for h in headers])


def _table_bytes(frame: pd.DataFrame) -> int:
    head = frame.head(50)
    per_row = len(head.to_csv(index=False)) / max(len(head), 1)
    return int(per_row * max(len(frame), 1))


def _plot_json(value, what: str) -> str | None:
    plot = value.get("plot") if isinstance(value, dict) else getattr(value, "plot", None)
    if plot is not None and not isinstance(plot, str):
        raise bad_input(f"{what} is not a plotly figure: export from the page", EXPORT)
    return plot or None


def _layer_part(data, res: Resources) -> tuple[int, str]:
    layer, part = data.get("layer"), data.get("part")
    n_layer = res.model.config.n_layer
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layer or part not in PARTS:
        raise bad_input(f"the map's layer must be 0..{n_layer - 1} and its part one of {', '.join(PARTS)}: "
                        "draw the skill map again", EXPORT)
    return layer, part


def export_files(res: Resources, key: str, which, plots: list, tables: list, data, example=None,
                 store: Exports | None = None, what: str = "") -> list[str]:
    """Write what `which` names (from the tab's own values on screen: raw payloads or the objects
    Gradio makes of them) into a fresh folder of `store` (default: the app's, `exports_for(res)`);
    the files' paths, named `file_stem(key, example)` and `what` (the table's or plot's label).
    Anything malformed is refused in one line, and nothing is written."""
    if key not in TABS:
        raise bad_input(f"no tab {str(key)[:40]!r} exports", EXPORT)
    kind, _, i = which.partition(":") if isinstance(which, str) else ("", "", "")
    store = store or exports_for(res)
    stem = file_stem(key, example)
    if which == "projector" and key == "soup":
        if not isinstance(data, dict) or "layer" not in data:
            raise bad_input("Draw the skill map first: the export is the map on screen.", EXPORT)
        layer, part = _layer_part(data, res)
        folder = store.new(projector_bytes(res, part))
        lib = lab_for(res).library()
        projector_tsv(lib.unit_features(layer, part), lib.tasks, layer, SHOTS, folder,
                      stem=f"{file_stem(key, f'layer{layer}-{part}')}-projector")
        return sorted(str(p) for p in folder.iterdir())
    if which == "grid" and key == "landscape":
        if not isinstance(data, dict) or not all(isinstance(data.get(p), dict) for p in ("soup", "caso")):
            raise bad_input("Compute the landscape first: the export is the grid on screen.", EXPORT)
        planes = {p: data[p] for p in ("soup", "caso")}
        try:
            size = sum(len(q["xs"]) * len(q["ys"]) for q in planes.values()) * CSV_BYTES_PER_GRID_POINT
            texts = {p: landscape_csv(q) for p, q in planes.items()} if size <= store.max_bytes else {}
        except (KeyError, TypeError, ValueError) as e:
            raise bad_input(f"the landscape's grid is malformed ({str(e)[:80]}): compute it again", EXPORT) from None
        folder = store.new(size)
        paths = [folder / f"{stem}-landscape-{p}.csv" for p in planes]
        for path, text in zip(paths, texts.values()):
            path.write_text(text, encoding="utf-8")
        return [str(p) for p in paths]
    if kind in ("table", "plot") and i.isdigit() and int(i) < len(tables if kind == "table" else plots):
        comp_value = (tables if kind == "table" else plots)[int(i)]
        if kind == "table":
            frame = _frame(comp_value, "this table") if comp_value is not None else None
            if frame is None or frame.empty:
                raise bad_input("This table is empty: run the tab first.", EXPORT)
            folder = store.new(_table_bytes(frame))
            path = folder / f"{stem}-{_slug(f'table-{what}' if what else 'table')}.csv"
            table_csv(frame, path)
            return [str(path)]
        plot = _plot_json(comp_value, "this plot")
        if not plot:
            raise bad_input("This plot is empty: run the tab first.", EXPORT)
        try:
            fig = pio.from_json(plot, skip_invalid=True)
        except (ValueError, TypeError):
            raise bad_input("this plot is not a plotly figure: export from the page", EXPORT) from None
        folder = store.new(len(plot) + PLOTLY_JS_BYTES)
        path = folder / f"{stem}-{_slug(f'figure-{what}' if what else 'figure')}.html"
        figure_html(fig, path)
        return [str(path)]
    raise bad_input(f"nothing to export as {str(which)[:40]!r}: pick one of the menu's entries", EXPORT)


def links_html(paths: list[str], ttl_s: float) -> str:
    """The download links of an export's files, each with its size: no server path, only
    <route>/<token>/<name>, relative to the page."""
    items = "".join(
        f'<li><a href="{html.escape(f"{ROUTE}/{p.parent.name}/{p.name}")}" download="{html.escape(p.name)}">'
        f"{html.escape(p.name)}</a> · {megabytes(p.stat().st_size)}</li>" for p in map(Path, paths))
    kept = f"{ttl_s / 60:.0f} min" if ttl_s >= 60 else f"{ttl_s:.0f} s"
    return f'<ul class="px-export-links">{items}</ul><small>kept {kept} on the server: download it now</small>'


# The page packs what the tab shows into the one JSON the export event takes (see the docstring).
PACK_JS = "(which, example, ...values) => ({which: which, example: example, values: values})"
PACK_JS_NO_EXAMPLE = "(which, ...values) => ({which: which, example: null, values: values})"


def render_exports(res: Resources, key: str, tab_block) -> None:
    """An Export accordion at the end of a tab: every table as CSV, every plot as standalone HTML."""
    comps = list(descendants(tab_block))
    plots = [c for c in comps if isinstance(c, gr.Plot)]
    tables = [c for c in comps if isinstance(c, gr.Dataframe)]
    data = None
    if key == "soup":
        data = next((c for c in comps if isinstance(c, gr.JSON) and c.label == "Map data"), None)
    if key == "landscape":
        data = next((c for c in comps if isinstance(c, gr.JSON) and c.label == "Landscape data"), None)
    found = find(tab_block, key) if key in TABS else {}
    example = found.get("example") or found.get("sample")  # its value names the files
    choices = _export_choices(key, plots, tables, res)
    if not choices:
        return
    store = exports_for(res)
    with gr.Accordion("Export: tables as CSV, plots as HTML", open=False, elem_id=f"{key}-export"):
        with gr.Row():
            which = gr.Dropdown(choices, value=choices[0][1], label="What", scale=3, elem_id=f"{key}-export-what")
            button = gr.Button("Export", scale=0, min_width=100, elem_id=f"{key}-export-run")
        files = gr.HTML(elem_id=f"{key}-export-files")
        packed = gr.JSON(visible=False)
    n_plots, n_tables = len(plots), len(tables)
    labels = {f"{kind}:{i}": _slug(c.label or c.elem_id, 30).lower()
              for kind, comps_ in (("plot", plots), ("table", tables)) for i, c in enumerate(comps_)}

    def run(payload):
        if not isinstance(payload, dict) or not isinstance(payload.get("values"), list):
            raise bad_input("an export takes the tab's values as the page sends them", EXPORT)
        values = payload["values"]
        if len(values) != n_plots + n_tables + (data is not None):
            raise bad_input(f"an export of this tab takes {n_plots + n_tables + (data is not None)} values, "
                            f"got {len(values)}", EXPORT)
        paths = export_files(res, key, payload.get("which"), values[:n_plots], values[n_plots:n_plots + n_tables],
                             values[-1] if data is not None else None, _slug(payload.get("example")), store,
                             labels.get(payload.get("which") if isinstance(payload.get("which"), str) else "", ""))
        return links_html(paths, store.ttl_s)

    inputs = [which, *([example] if example is not None else []), *plots, *tables, *([data] if data else [])]
    # packed in the page (no server call), then serialised: no model work, so never behind the model pool
    button.click(None, inputs, packed, js=PACK_JS if example is not None else PACK_JS_NO_EXAMPLE).then(
        run, packed, files, api_visibility="private", preprocess=False, **LIGHT)

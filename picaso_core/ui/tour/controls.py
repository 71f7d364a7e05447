"""The tour bar, the "Copy link" button and the per-tab exports, laid out and wired.

    render_controls(res)        the header's row: Start the tour, Copy link, Large text, and the tour bar
    render_exports(res, key, tab)  inside a tab, after its own layout: download its tables and plots
    wire(demo, res, ui, tabs)   the events: steps, links read on page load (`?step=N`, `?tab=...`), /tour_step

The handlers are plain functions of their inputs (tested without a server); the tour's content
comes from picaso_core.ui.tour.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from gradio.components.plot import PlotData

from picaso_core.session import Resources
from picaso_core.ui.server.serving import LIGHT, MODEL
from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.ui.tabs.soup_lab import SHOTS, lab_for
from picaso_core.ui.tour import cache as tour
from picaso_core.ui.tour.exports import figure_html, landscape_csv, projector_tsv, table_csv
from picaso_core.ui.tour.links import FROM_EXAMPLE, TABS, coerce, descendants, find, link_query
from picaso_core.ui.tour.runs import resolve

N_FIGS = 2  # figures a step shows side by side
BAR_ON, BAR_OFF = ["px-tour"], ["px-tour", "px-off"]  # the tour bar's classes, shown and hidden
PLACEHOLDER = go.Figure(layout={"height": 40})


@dataclass
class Controls:
    start: gr.Button
    copy: gr.Button
    link: gr.Textbox
    bar: gr.Column
    title: gr.Markdown
    prev: gr.Button
    next: gr.Button
    live: gr.Button
    close: gr.Button
    text: gr.Markdown
    figs: list
    table: gr.Dataframe
    step: gr.State
    current: gr.State  # the key of the tab on screen (tour.links.TABS)
    press: gr.Textbox  # elem_id of a run button the page presses after a link is restored


def render_controls(res: Resources) -> Controls:
    with gr.Row(elem_id="px-talk", elem_classes="px-talk"):
        start = gr.Button("▶ Start the tour", variant="primary", size="sm", elem_id="tour-start", scale=0, min_width=150)
        copy = gr.Button("Copy link", size="sm", elem_id="copy-link", scale=0, min_width=110)
        link = gr.Textbox(show_label=False, container=False, interactive=False, elem_id="copy-link-url", scale=3,
                          placeholder="a link to this tab with its inputs appears here (and in the clipboard)")
        large = gr.Checkbox(False, label="Large text", elem_id="large-text", scale=0, min_width=120,
                            container=False)
    # a projector's audience reads from the back of the room: the page scales, plots included
    large.change(None, large, None, js="(on) => { document.body.classList.toggle('px-large', on); "
                 "window.dispatchEvent(new Event('resize')); }")
    # On the page from the start and hidden by a class (px-off), not visible=False (not rendered at
    # all): its plots get an empty figure on page load (wire's restore), so plotly.js loads with the
    # page and the first step draws at once
    with gr.Column(elem_id="tour-bar", elem_classes=BAR_OFF) as bar:
        with gr.Row(equal_height=True):
            title = gr.Markdown(elem_id="tour-title")
            prev = gr.Button("← Previous", size="sm", elem_id="tour-prev", scale=0, min_width=110)
            nxt = gr.Button("Next →", size="sm", elem_id="tour-next", scale=0, min_width=90, variant="primary")
            live = gr.Button("Run it live", size="sm", elem_id="tour-live", scale=0, min_width=110)
            close = gr.Button("Close", size="sm", elem_id="tour-close", scale=0, min_width=80)
        text = gr.Markdown(elem_id="tour-text")
        with gr.Row(equal_height=False):
            figs = [gr.Plot(show_label=False, elem_id=f"tour-fig-{i}", min_width=420) for i in range(N_FIGS)]
        table = gr.Dataframe(headers=["the step's table"], interactive=False, wrap=True, elem_id="tour-table", visible=False)
    press = gr.Textbox(visible=False)
    return Controls(start, copy, link, bar, title, prev, nxt, live, close, text, figs, table, gr.State(0),
                    gr.State("compose"), press)


# ---- handlers -----------------------------------------------------------------------------------
def example_fill(res: Resources, key: str, example: str | None) -> dict:
    """The inputs a tab's example fills in (compose: query, continuation; attribution: query, answer)."""
    if key == "compose":
        q, c = compose_tab.pick_example(res, example)
        return {"query": q, "continuation": c}
    if key == "attribution":
        q, a, _ = attribution_tab.pick_example(res, example)
        return {"query": q, "answer": a}
    return {}


def step_values(res: Resources, n: int) -> tuple[str, dict]:
    """(tab key, the values step n sets on that tab's inputs), the example's own text included."""
    step = tour.step_at(n)
    values = resolve(res, step.tab, step.inputs)
    if step.tab in FROM_EXAMPLE and values.get("example"):
        values.update(example_fill(res, step.tab, values["example"]))
    return step.tab, values


def step_outputs(res: Resources, n, live: bool = False) -> dict:
    """Everything the bar shows for step n (1-based, clamped to the tour): a dict of plain values."""
    n = min(max(int(n or 1), 1), len(tour.STEPS))
    step, view, meta = tour.show(res, n, live=live, raw=True)
    how = ("computed live just now" if live else "precomputed" if meta["cached"] else "not precomputed yet")
    secs = f", {meta['compute_seconds']:.1f} s to compute" if meta.get("compute_seconds") is not None else ""
    key, values = step_values(res, n)
    return {"n": n, "tab": key, "values": values,
            "title": f"**Step {n} of {len(tour.STEPS)} · {step.title}**  \n<small>{TABS[key].title} tab · {how}{secs}"
                     f" · ← → keys step through</small>",
            "text": view.text, "figures": view.figures, "table": view.tables[0] if view.tables else None}


def _fig_updates(figures) -> list:
    """The step's figures (plotly JSON text) for the bar's plots, the unused ones hidden."""
    return [gr.update(value=PlotData(type="plotly", plot=figures[i]), visible=True) if i < len(figures) else gr.update(value=None, visible=False)
            for i in range(N_FIGS)]


def _table_update(table):
    if table is None:
        return gr.update(value=None, visible=False)
    title, frame = table
    return gr.update(value=frame, label=title, visible=True)


def copy_link(res: Resources, key: str, names: list[str], *values) -> str:
    """The Copy link handler: `?tab=...` for the tab on screen with its current inputs."""
    if key not in TABS:
        raise gr.Error(f"no link for tab {key!r}")
    own = dict(zip(names, values))
    return link_query(key, own, lambda ex: example_fill(res, key, ex))


def parse_link(params: dict, comps: dict[str, dict]) -> tuple[int | None, str | None, dict, list[str]]:
    """A page address's query parameters as (tour step or None, tab key or None, {name: value},
    problems): a parameter that names no input or holds a value its input cannot take is skipped
    and said."""
    problems = []
    if "step" in params:
        try:
            return tour.STEPS.index(tour.step_at(params["step"])) + 1, None, {}, []
        except ValueError as e:
            return None, None, {}, [str(e)]
    key = params.get("tab")
    if key is None:
        return None, None, {}, []
    if key not in TABS:
        return None, None, {}, [f"no tab {key!r} (one of {', '.join(TABS)})"]
    values = {}
    for name, raw in params.items():
        if name in ("tab", "__theme"):
            continue
        comp = comps[key].get(name)
        if comp is None:
            problems.append(f"{key} has no input {name!r}")
            continue
        try:
            values[name] = coerce(comp, raw)
        except ValueError as e:
            problems.append(f"{name}: {e}")
    return None, key, values, problems


# ---- exports ------------------------------------------------------------------------------------
def _export_choices(key: str, plots: list, tables: list) -> list[tuple[str, str]]:
    out = [(f"Table · {t.label or t.elem_id or i} (CSV)", f"table:{i}") for i, t in enumerate(tables)]
    out += [(f"Plot · {p.label or p.elem_id or i} (HTML)", f"plot:{i}") for i, p in enumerate(plots)]
    if key == "soup":
        out.insert(0, ("Skill map · Embedding Projector (vectors + metadata TSV)", "projector"))
    if key == "landscape":
        out.insert(0, ("Landscape grids · Soup and CASO planes (CSV: alpha, beta, loss)", "grid"))
    return out


def export_files(res: Resources, key: str, which: str, plots: list, tables: list, data) -> list[str]:
    """Write what `which` names (from the tab's own values on screen) into a fresh folder; the paths."""
    folder = Path(tempfile.mkdtemp(prefix=f"picaso-{key}-"))
    if which == "projector":
        if not isinstance(data, dict) or "layer" not in data:
            raise gr.Error("Draw the skill map first: the export is the map on screen.")
        lib = lab_for(res).library()
        x = lib.unit_features(int(data["layer"]), data["part"])
        projector_tsv(x, lib.tasks, int(data["layer"]), SHOTS, folder, stem=f"soup_layer{data['layer']}_{data['part']}")
        return sorted(str(p) for p in folder.iterdir())
    if which == "grid":
        if not isinstance(data, dict) or "soup" not in data:
            raise gr.Error("Compute the landscape first: the export is the grid on screen.")
        return [landscape_csv(data[p], folder / f"landscape_{p}.csv") and str(folder / f"landscape_{p}.csv")
                for p in ("soup", "caso")]
    kind, _, i = which.partition(":")
    if kind == "table":
        frame = tables[int(i)]
        if not isinstance(frame, pd.DataFrame) or frame.empty:
            raise gr.Error("This table is empty: run the tab first.")
        path = folder / "table.csv"
        table_csv(frame, path)
        return [str(path)]
    if kind == "plot":
        value = plots[int(i)]
        plot = getattr(value, "plot", None) if value is not None else None
        if not plot:
            raise gr.Error("This plot is empty: run the tab first.")
        path = folder / "figure.html"
        figure_html(pio.from_json(plot, skip_invalid=True), path)
        return [str(path)]
    raise gr.Error(f"nothing to export as {which!r}")


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
    choices = _export_choices(key, plots, tables)
    if not choices:
        return
    with gr.Accordion("Export: tables as CSV, plots as HTML", open=False, elem_id=f"{key}-export"):
        with gr.Row():
            which = gr.Dropdown(choices, value=choices[0][1], label="What", scale=3, elem_id=f"{key}-export-what")
            button = gr.Button("Export", scale=0, min_width=100, elem_id=f"{key}-export-run")
        files = gr.File(label="Download", file_count="multiple", interactive=False, elem_id=f"{key}-export-files")

    def run(which, *values):
        p, t = values[:len(plots)], values[len(plots):len(plots) + len(tables)]
        d = values[-1] if data is not None else None
        return export_files(res, key, which, list(p), list(t), d)

    # serialising what is on screen: no model work, so it never waits behind the model pool
    button.click(run, [which, *plots, *tables, *([data] if data is not None else [])], files,
                 api_visibility="private", **LIGHT)


# ---- wiring -------------------------------------------------------------------------------------
def wire(demo: gr.Blocks, res: Resources, ui: Controls, tabs: gr.Tabs, tab_blocks: dict) -> None:
    """The tour's, the links' and the API's events. tab_blocks: tab key -> its rendered gr.Tab."""
    comps = {key: find(block, key) for key, block in tab_blocks.items()}
    flat = [(key, name, c) for key, found in comps.items() for name, c in found.items()]
    outs = [ui.bar, ui.title, ui.text, *ui.figs, ui.table, ui.step, tabs, ui.current, *(c for _, _, c in flat)]

    def tab_updates(key: str | None, values: dict) -> list:
        return [gr.update(value=values[name]) if k == key and name in values else gr.update() for k, name, _ in flat]

    def show(n, live=False):
        o = step_outputs(res, n, live)
        return [gr.update(elem_classes=BAR_ON), o["title"], o["text"], *_fig_updates(o["figures"]), _table_update(o["table"]),
                o["n"], gr.Tabs(selected=o["tab"]), o["tab"], *tab_updates(o["tab"], o["values"])]

    ev = dict(api_visibility="private", show_progress="minimal", **LIGHT)
    ui.start.click(lambda: show(1), None, outs, **ev)
    ui.next.click(lambda n: show(n + 1), ui.step, outs, **ev)
    ui.prev.click(lambda n: show(n - 1), ui.step, outs, **ev)
    # a live run computes: it waits its turn in the model pool with the tabs' model-bound work
    ui.live.click(lambda n: show(n, live=True), ui.step, outs, api_visibility="private", **MODEL)
    ui.close.click(lambda: gr.update(elem_classes=BAR_OFF), None, ui.bar, **ev)
    for key, block in tab_blocks.items():
        block.select(lambda k=key: k, None, ui.current, **ev)

    def copy(key, *values):
        mine = [(n, v) for (k, n, _), v in zip(flat, values) if k == key]
        return copy_link(res, key, [n for n, _ in mine], *[v for _, v in mine])

    ui.copy.click(copy, [ui.current, *(c for _, _, c in flat)], ui.link, **ev).then(
        None, ui.link, ui.link, js=COPY_JS)

    def restore(request: gr.Request):
        params = dict(request.query_params) if request is not None else {}
        step, key, values, problems = parse_link(params, comps)
        for p in problems:
            gr.Warning(f"Link: {p}")
        if step is not None:
            return [*show(step), ""]
        # the hidden bar's plots get an empty figure: plotly.js loads with the page, not on the first step
        blank = [PLACEHOLDER] * N_FIGS
        if key is None:
            return [gr.skip(), gr.skip(), gr.skip(), *blank] + [gr.skip()] * (len(outs) - 3 - N_FIGS) + [""]
        return ([gr.skip(), gr.skip(), gr.skip(), *blank, gr.skip(), gr.skip(),
                 gr.Tabs(selected=key), key, *tab_updates(key, values)] + [TABS[key].run or ""])

    def reapply(request: gr.Request):
        """The restored text boxes again, after the tabs' own load events (which fill in their example)."""
        params = dict(request.query_params) if request is not None else {}
        _, key, values, _ = parse_link(params, comps)
        return tab_updates(key, values)

    demo.load(restore, None, [*outs, ui.press], **ev).then(
        reapply, None, [c for _, _, c in flat], **ev).then(None, ui.press, None, js=PRESS_JS)

    def tour_step(step: int) -> dict:
        """One step of the guided tour (1-based) as plain data: title, tab, inputs, text, cached, seconds."""
        return tour.tour_step(res, step)

    # a read of the cache: answered at once, not behind the queue's model-bound jobs
    gr.api(tour_step, api_name="tour_step", queue=False)


# Copy the link (query string from the server) as a full address, and show it.
COPY_JS = """
(q) => {
  if (!q) return q;
  const url = location.origin + location.pathname + q;
  if (navigator.clipboard) navigator.clipboard.writeText(url).catch(() => {});
  return url;
}
"""
# After a link is restored: press the tab's run button, once the inputs have settled.
PRESS_JS = """
(id) => { if (id) setTimeout(() => { const b = document.getElementById(id); if (b) b.click(); }, 400); }
"""

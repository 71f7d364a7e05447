"""The tour bar, the "Copy link" button and the per-tab exports, laid out and wired.

    render_controls(res)        the header's row: Start the tour, Copy link, Large text, and the tour bar
    render_exports(res, key, tab)  inside a tab, after its own layout: download its tables and plots
                                (picaso_core.ui.tour.downloads)
    wire(demo, res, ui, tabs)   the events: steps, links read on page load (`?step=N`, `?tab=...`), /tour_step

The handlers are plain functions of their inputs (tested without a server); the tour's content
comes from picaso_core.ui.tour.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr
import plotly.graph_objects as go
from gradio.components.plot import PlotData
from gradio.data_classes import GradioModel, GradioRootModel

from picaso_core.session import Resources
from picaso_core.ui.errors import bad_input
from picaso_core.ui.server.gradio_compat import skip_unchanged_postprocess
from picaso_core.ui.server.serving import LIGHT, MODEL
from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.ui.tour import cache as tour
from picaso_core.ui.tour.downloads import _export_choices, export_files, render_exports  # noqa: F401  (the exports)
from picaso_core.ui.tour.downloads import routes as download_routes  # noqa: F401  (app.py: the download route)
from picaso_core.ui.tour.links import (FROM_EXAMPLE, PAGE_PARAMS, TABS, coerce, copy_inputs_js, find, link_query,
                                      press_target, raw_value)
from picaso_core.ui.tour.runs import resolve

N_FIGS = 2  # figures a step shows side by side
LANDING = "compose"  # the tab the page opens on
# the tab events (api_name) whose outputs a runner's view fills (tour.runs.View.endpoint)
ENDPOINTS = {"compose_none_vs_concat": ("compose",), "compose_methods": ("compose",), "compose_order": ("compose",),
             "compose_time": ("compose",), "compose_finetuned": ("compose",), "soup_map": ("soup_map",),
             "soup_two_task": ("soup_two_task",), "landscape": ("landscape",), "attribution": ("attribute",),
             "coffee": ("coffee_train",), "block_walk": ("block_walk_view",),
             "compose_hybrid": ("compose",)}  # on a hybrid app only: elsewhere its view fills no output
BAR_ON, BAR_OFF = ["px-tour"], ["px-tour", "px-off"]  # the tour bar's classes, shown and hidden (bar_classes)
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
    table_title: gr.Markdown
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
        # shown or hidden with the bar's classes (bar_classes: px-figs-N, px-notable; layout.CSS), not
        # visible=...: a visibility is a prop update, which Gradio answers by building the component again
        table_title = gr.Markdown(elem_id="tour-table-title")
        table = gr.Dataframe(headers=["the step's table"], interactive=False, wrap=True, elem_id="tour-table",
                             show_label=False)
    press = gr.Textbox(visible=False)
    return Controls(start, copy, link, bar, title, prev, nxt, live, close, text, figs, table_title, table,
                    gr.State(0), gr.State("compose"), press)


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
    """Everything the bar shows for step n (1-based, clamped to the tour): a dict of plain values;
    "endpoint" / "outputs": the tab's own event and its outputs' values for the step (tour.runs.View)."""
    n = min(max(int(n or 1), 1), len(tour.STEPS))
    step, view, meta = tour.show(res, n, live=live, raw=True)
    how = ("computed live just now" if live else f"precomputed on {meta['built']} (timings: {meta['timed_on']})"
           if meta["cached"] else "not precomputed yet")
    secs = f", {meta['compute_seconds']:.1f} s to compute" if meta.get("compute_seconds") is not None else ""
    key, values = step_values(res, n)
    return {"n": n, "tab": key, "values": values,
            "title": f"**Step {n} of {len(tour.STEPS)} · {step.title}**  \n<small>{TABS[key].title} tab · {how}{secs}"
                     f" · ← → keys step through</small>",
            "text": view.text, "figures": view.figures, "table": view.tables[0] if view.tables else None,
            "endpoint": view.endpoint, "outputs": view.outputs, "cached": bool(meta["cached"]) and not live,
            "marker": (f"Tour step {n}, computed live just now" if live else
                       f"Tour step {n}, precomputed on {meta['built']} (timings: {meta['timed_on']})"
                       if meta["cached"] else None)}


def opening_values(res: Resources, key: str) -> tuple[list[tuple[str, tuple]], str | None]:
    """What tab `key` opens on: [(endpoint, its outputs' values)] from the tour's cache, and the
    precomputed marker's words; ([], a note) while the cache is being built, ([], None) for a tab
    that opens on nothing precomputed."""
    if key not in tour.OPENINGS:
        return [], None
    entries = tour.load_openings(res).get(key)
    if entries is None:
        if not tour.building(res):  # app.py --no-tour-prebuild: nothing will come
            return [], "This server keeps no precomputed result for this tab: press its button to compute it."
        return [], ("The precomputed result appears here once the tour's results are built (in the background "
                    "on a new model or corpus; `python -m picaso_core.ui.tour build`).")
    info = tour.cache_info(res)
    views = [tour.entry_view(e, raw=True) for e in entries]
    return ([(v.endpoint, v.outputs) for v in views if v.outputs is not None],
            f"Precomputed on {info['built']} (timings: {info['timed_on']})")


def endpoint_outputs(demo: gr.Blocks, names) -> dict[str, tuple[list, str]]:
    """The output components of each named event (api_name), in its handler's order, and the label of
    the button that runs it: where a step or a tab's opening puts the tab's own results."""
    out = {}
    for fn in demo.fns.values():
        if fn.api_name in names and fn.api_name not in out:
            button = next((demo.blocks[t].value for t, _ in fn.targets if t is not None and t in demo.blocks
                           and isinstance(demo.blocks[t], gr.Button)), "Run")
            out[fn.api_name] = (list(fn.outputs), button)
    return out


def ready(comp, value):
    """`value` as the page takes it for `comp`: what Gradio's postprocessing makes of it. The tour's
    events run with postprocess=False and their values made here (a cached step's once, in wire's
    show), so Gradio does nothing per output; an update keeps its props, its value made ready."""
    if isinstance(value, dict) and value.get("__type__") == "update":
        return {**value, "value": ready(comp, value["value"])} if "value" in value else value
    if comp.stateful:
        return value
    out = comp.postprocess(value)
    return out.model_dump() if isinstance(out, (GradioModel, GradioRootModel)) else out


def fill_outputs(filled: list, spots: dict[str, tuple[list, str]], results, marker: str | None) -> list:
    """Values (ready) for the components `filled` from [(endpoint, values)]: each value on its
    endpoint's output (None, a gr.State, or an endpoint not on the page: left as is, gr.skip());
    `marker` opens the first Markdown output of each, with the button that computes it live."""
    updates = {}
    for endpoint, values in results:
        comps, button = spots.get(endpoint, ([], ""))
        said = False
        for comp, value in zip(comps, values or ()):
            if value is None or isinstance(comp, gr.State):
                continue
            if isinstance(comp, gr.Plot):
                value = PlotData(type="plotly", plot=value)
            elif isinstance(comp, gr.Markdown) and marker and not said:
                value, said = f"<small>{marker} · press **{button}** to compute it live</small>\n\n{value}", True
            updates[comp._id] = ready(comp, value)
    return [updates[c._id] if c._id in updates else gr.skip() for c in filled]


def bar_classes(figures: int, table: bool) -> list[str]:
    """The shown bar's classes: which of its plots and whether its table show (layout.CSS hides the
    rest), so that a step sets values alone and no component's visibility."""
    return BAR_ON + [f"px-figs-{min(figures, N_FIGS)}"] + ([] if table else ["px-notable"])


def bar_values(ui: Controls, o: dict) -> list:
    """Ready values of the bar's outputs [bar, title, text, *figs, table_title, table] for step_outputs' `o`."""
    figs, table = o["figures"], o["table"]
    return [gr.update(elem_classes=bar_classes(len(figs), table is not None)), ready(ui.title, o["title"]),
            ready(ui.text, o["text"]),
            *(ready(f, PlotData(type="plotly", plot=figs[i]) if i < len(figs) else None)
              for i, f in enumerate(ui.figs)),
            ready(ui.table_title, f"**{table[0]}**" if table else ""), ready(ui.table, table[1] if table else None)]


def cache_stamp(res: Resources):
    """(mtime, size) of the tour's cache file, None without one: a step made from it is made again
    once it changes (a build in the background writes it step by step)."""
    try:
        st = tour.cache_file(res).stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


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
        if name == "tab" or name in PAGE_PARAMS:
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


# ---- wiring -------------------------------------------------------------------------------------
def wire(demo: gr.Blocks, res: Resources, ui: Controls, tabs: gr.Tabs, tab_blocks: dict):
    """The tour's, the links' and the API's events. tab_blocks: tab key -> its rendered gr.Tab. Returns
    the links' gate: the page-load event that ends once a link's figure is drawn (layout.defer_loads)."""
    before = set(demo.fns)  # the events registered below: their unchanged outputs cost nothing (skip_unchanged)
    comps = {key: find(block, key) for key, block in tab_blocks.items()}
    flat = [(key, name, c) for key, found in comps.items() for name, c in found.items()]
    # the tabs' own outputs a step or a tab's opening fills (tour.runs.View.endpoint)
    spots = endpoint_outputs(demo, {e for names in ENDPOINTS.values() for e in names})
    filled = list({id(c): c for comps_, _ in spots.values() for c in comps_ if not isinstance(c, gr.State)}.values())
    opened = gr.State([])  # the tabs this visitor has seen filled (by their opening, a step or a link)
    outs = [ui.bar, ui.title, ui.text, *ui.figs, ui.table_title, ui.table, ui.step, tabs, ui.current,
            *(c for _, _, c in flat), *filled, opened]

    blank = [ready(f, PLACEHOLDER) for f in ui.figs]

    def tab_updates(key: str | None, values: dict) -> list:
        return [ready(c, values[name]) if k == key and name in values else gr.skip() for k, name, c in flat]

    # step n -> (cache_stamp, its values but the last, its tab): a cached step's values are made once
    # and every visitor's click is served from here (bench/room.py: 100 visitors stepping at once)
    made: dict[int, tuple] = {}

    def show(n, live=False, seen=()):
        n = min(max(int(n or 1), 1), len(tour.STEPS))
        stamp = None if live else cache_stamp(res)
        hit = made.get(n)
        if hit is None or stamp is None or hit[0] != stamp:
            o = step_outputs(res, n, live)
            fills = fill_outputs(filled, spots, [(o["endpoint"], o["outputs"])] if o["outputs"] else [], o["marker"])
            hit = (stamp, [*bar_values(ui, o), o["n"], gr.update(selected=o["tab"]), o["tab"],
                           *tab_updates(o["tab"], o["values"]), *fills], o["tab"])
            if o["cached"] and stamp is not None:
                made[n] = hit
        # Gradio changes an update's dict as it reads it: each click gets its own copies
        return [dict(v) if isinstance(v, dict) and v.get("__type__") == "update" else v for v in hit[1]] + [
            sorted({*(seen or ()), hit[2]})]

    def opening(key: str, seen) -> list:
        """Tab `key`'s opening values, once per visitor (a tab already filled keeps what it shows)."""
        if key in (seen or ()) or key not in tour.OPENINGS:
            return [gr.skip()] * (len(filled) + 1)
        results, marker = opening_values(res, key)
        if not results and marker:  # not built yet: said where the result will appear, asked again next time
            comps_ = [c for e in ENDPOINTS.get(tour.OPENINGS[key][0].run, ()) for c in spots.get(e, ([], ""))[0]]
            first = next((c for c in comps_ if isinstance(c, gr.Markdown)), None)
            return [ready(c, f"<small>{marker}</small>") if c is first else gr.skip() for c in filled] + [gr.skip()]
        return fill_outputs(filled, spots, results, marker) + [sorted({*(seen or ()), key})]

    # the handlers return ready values (`ready`): Gradio's postprocessing has nothing left to do
    ev = dict(api_visibility="private", show_progress="minimal", postprocess=False, **LIGHT)
    # A step is a read of the cache: answered on its request (queue=False), not joined on the queue and
    # streamed back; a room of 100 visitors' first clicks waited seconds on the queue's machinery
    quick = dict(ev, queue=False)
    ui.start.click(lambda seen: show(1, seen=seen), opened, outs, **quick)
    ui.next.click(lambda n, seen: show(n + 1, seen=seen), [ui.step, opened], outs, **quick)
    ui.prev.click(lambda n, seen: show(n - 1, seen=seen), [ui.step, opened], outs, **quick)
    # a live run computes: it waits its turn in the model pool with the tabs' model-bound work
    ui.live.click(lambda n, seen: show(n, live=True, seen=seen), [ui.step, opened], outs, api_visibility="private",
                  postprocess=False, **MODEL)
    ui.close.click(lambda: gr.update(elem_classes=BAR_OFF), None, ui.bar, **quick)
    # a tab opens on its precomputed result the first time it is shown (not with the page: its load stays light)
    for key, block in tab_blocks.items():
        block.select(lambda seen, k=key: [k, *opening(k, seen)], opened, [ui.current, *filled, opened], **ev)

    def copy(key, *values):
        if key not in TABS or len(values) != len(flat):
            raise bad_input("Copy link takes the inputs of the tab on screen, as the page sends them", "Copy link")
        mine = []
        for (k, n, c), v in zip(flat, values):
            try:
                mine += [(n, raw_value(c, v))] if k == key else []
            except ValueError as e:  # one line, not Gradio's traceback and its list of every choice
                raise bad_input(f"Copy link: {n} must be {e}", "Copy link") from None
        return ready(ui.link, copy_link(res, key, [n for n, _ in mine], *[v for _, v in mine]))

    # the page's raw values, checked by raw_value (preprocess=False)
    # (the page-held inputs, e.g. the block walk's token and stage, are read from their view by the js)
    ui.copy.click(copy, [ui.current, *(c for _, _, c in flat)], ui.link, preprocess=False,
                  js=copy_inputs_js([n for _, n, _ in flat]), **ev).then(
        None, ui.link, ui.link, js=COPY_JS)

    def restore(request: gr.Request):
        params = dict(request.query_params) if request is not None else {}
        step, key, values, problems = parse_link(params, comps)
        for p in problems:
            gr.Warning(f"Link: {p}")
        if step is not None:
            return [*show(step), ""]
        # the hidden bar's plots get an empty figure: plotly.js loads with the page, not on the first step
        if key is None:  # the landing tab (Compose) opens on its precomputed result
            head = [gr.skip(), gr.skip(), gr.skip(), *blank] + [gr.skip()] * (len(outs) - 3 - N_FIGS - len(filled) - 1)
            return head + opening(LANDING, []) + [""]
        # a link's tab: its run button is pressed with the link's inputs
        return ([gr.skip(), gr.skip(), gr.skip(), *blank, gr.skip(), gr.skip(), gr.skip(),
                 gr.update(selected=key), key, *tab_updates(key, values)] + [gr.skip()] * len(filled) + [[key]]
                + [press_target(key)])

    def reapply(request: gr.Request):
        """The restored text boxes again, after the tabs' own load events (which fill in their example)."""
        params = dict(request.query_params) if request is not None else {}
        _, key, values, _ = parse_link(params, comps)
        return tab_updates(key, values)

    # the link's figure is the page's first work: the page's other load events wait for the gate, the
    # last of these (layout.defer_loads)
    gate = demo.load(restore, None, [*outs, ui.press], **ev).then(
        reapply, None, [c for _, _, c in flat], **ev).then(None, ui.press, None, js=PRESS_JS)

    answered: dict[int, tuple] = {}  # step n -> (cache_stamp, its answer): a cached step's answer made once

    def tour_step(step: int) -> dict:
        """One step of the guided tour (1-based) as plain data: title, tab, inputs, text, cached, seconds."""
        t = time.perf_counter()
        try:
            n = tour.STEPS.index(tour.step_at(step)) + 1
        except ValueError:
            return tour.tour_step(res, step)  # its one-line error
        stamp, hit = cache_stamp(res), answered.get(n)
        if hit is None or stamp is None or hit[0] != stamp:
            out = tour.tour_step(res, n)
            if out["cached"] and stamp is not None:
                answered[n] = (stamp, out)
            return out
        return {**hit[1], "seconds": round(time.perf_counter() - t, 3)}

    # a read of the cache: answered at once, not behind the queue's model-bound jobs. LIGHT too: an API
    # call (gradio_client, /call) still goes through the queue, where "default" was a group of its own
    # limited to --workers at once (a room of visitors stepping the tour waited two at a time)
    gr.api(tour_step, api_name="tour_step", queue=False, **LIGHT)
    skip_unchanged(demo, [fn for i, fn in demo.fns.items() if i not in before])
    return gate


def skip_unchanged(demo: gr.Blocks, fns) -> None:
    """Postprocess `fns`' outputs without their unchanged ones (gr.update() with no props, gr.skip()):
    the Gradio seam's skip_unchanged_postprocess, which says why (a tour step returns ~80 of them)."""
    skip_unchanged_postprocess(demo, fns)


# Copy the link (query string from the server) as a full address, and show it.
COPY_JS = """
(q) => {
  if (!q) return q;
  const url = location.origin + location.pathname + q;
  if (navigator.clipboard) navigator.clipboard.writeText(url).catch(() => {});
  return url;
}
"""
# After a link is restored: press the tab's run button, once the inputs have settled ("run-id figure-id",
# links.press_target); then wait (at most GATE_S) for the link's figure, the tour bar's or the run's,
# to be drawn (layout.JS stamps window.__pxDrawn), so that the page's other load events come after it.
GATE_S = 8
PRESS_JS = """
(press) => new Promise((done) => {
  const [run, fig] = (press || '').split(' '), t0 = performance.now();
  const bar = document.getElementById('tour-bar');
  const step = bar && !bar.classList.contains('px-off') && document.getElementById('tour-fig-0');
  const target = step ? 'tour-fig-0' : fig, since = step ? 0 : t0;
  if (run) setTimeout(() => { const b = document.getElementById(run); if (b) b.click(); }, 400);
  if (!target) { done(); return; }
  const wait = () => ((window.__pxDrawn || {})[target] > since || performance.now() - t0 > GATE_MS)
    ? done() : setTimeout(wait, 50);
  wait();
})
""".replace("GATE_MS", str(GATE_S * 1000))

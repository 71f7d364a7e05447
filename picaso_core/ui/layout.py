"""Page header, theme and CSS shared by every tab (colours come from Gradio's CSS variables, so the
page follows the light / dark setting)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gradio as gr
import plotly.io as pio

from picaso_core.session import Resources
from picaso_core.ui.server.gradio_compat import run_after
from picaso_core.ui.server.serving import LIGHT, POOL


@dataclass(frozen=True)
class PageLoad:
    """An event a tab wants run when the page loads (its opening values): a tab's `render` returns
    them and the page registers them with `page_loads` (Blocks.load, Gradio's public API; a tab has
    no handle on the page's Blocks)."""

    fn: Callable
    inputs: list
    outputs: list


def page_loads(demo: gr.Blocks, loads) -> None:
    """Register the tabs' PageLoad events on the page (inside `with demo:`), each light and private."""
    for load in loads or ():
        demo.load(load.fn, load.inputs, load.outputs, api_visibility="private", **LIGHT)


def defer_loads(demo: gr.Blocks, after) -> int:
    """Make the page-load events that draw plots or take a model worker run after `after` (the event
    that draws a link's figure and resolves once it is drawn: tour.controls.wire's gate), so that
    a `?step=N` or copied link is the page's first and only work. Gradio sends every load event at
    once: the link's figure waited for ~800 kB of other tabs' results and for their model work
    (docs/tour.md, "Link timings"). The light ones that fill text boxes stay with the page's load,
    as the link's own events expect. Returns how many moved."""
    gate = root = after["id"] if isinstance(after, dict) else after
    while demo.fns[root].trigger_after is not None:  # the link's own load event, which starts the chain
        root = demo.fns[root].trigger_after
    moved = 0
    for fn in demo.fns.values():
        if [event for _, event in fn.targets] != ["load"] or fn._id == root:
            continue
        if fn.concurrency_id == POOL or any(isinstance(o, gr.Plot) for o in fn.outputs):
            run_after(fn, gate)  # what .then() makes (the Gradio seam)
            moved += 1
    return moved

THEME = gr.themes.Soft(primary_hue="orange", secondary_hue="blue", neutral_hue="slate")

CSS = """
.px-flow {display:flex; flex-wrap:wrap; align-items:center; gap:6px; margin:4px 0 2px}
.px-step {padding:4px 10px; border-radius:999px; background:var(--block-background-fill);
  border:1px solid var(--border-color-primary); font-size:0.9em}
.px-step b {color:var(--color-accent)}
.px-arrow {color:var(--body-text-color-subdued); font-weight:bold; align-self:center}
.px-empty {color:var(--body-text-color-subdued); font-style:italic; padding:8px 0}
.px-order {display:flex; flex-wrap:wrap; gap:6px; align-items:stretch}
.px-ctx {flex:1 1 180px; max-width:260px; border:1px solid var(--border-color-primary);
  border-radius:8px; padding:6px 8px; background:var(--block-background-fill); font-size:0.85em}
.px-ctx-head {display:flex; gap:6px; align-items:center; flex-wrap:wrap; margin-bottom:3px}
.px-ctx-text {color:var(--body-text-color-subdued); line-height:1.3}
.px-query {flex:0 0 auto; border-color:var(--color-accent); border-width:2px}
.px-num {display:inline-block; min-width:1.5em; text-align:center; border-radius:999px;
  background:var(--color-accent); color:white; font-weight:bold; padding:0 4px}
.px-gold {background:#facc15; color:#422006; border-radius:4px; padding:0 4px; font-size:0.85em}
.px-meta {color:var(--body-text-color-subdued); font-size:0.85em; margin-left:auto}
.px-gens {display:grid; grid-template-columns:repeat(auto-fill, minmax(170px, 1fr)); gap:8px}
.px-gen {border:1px solid var(--border-color-primary); border-top:4px solid; border-radius:8px;
  padding:6px 8px; background:var(--block-background-fill)}
.px-gen-head {display:flex; align-items:center; margin-bottom:4px}
.px-gen-text {white-space:pre-wrap; font-size:0.9em; line-height:1.35}
.px-note {color:var(--body-text-color-subdued); font-size:0.85em}
/* A rejected input is said once, in its toast: the outputs keep the last run's values, with no red
   "Error" badge and no translucent cover over each (gradio's status tracker in its error state). */
[data-testid="status-tracker"]:has(> .error) {display:none !important}
/* talk mode: the tour bar, the header's row, large text for a projector, a plot in full screen */
.px-talk {align-items:center; gap:8px}
.px-off {display:none !important}
/* the tour bar's plots and table a step leaves unused (controls.bar_classes): hidden by a class, no update */
#tour-bar.px-figs-0 #tour-fig-0, #tour-bar:is(.px-figs-0, .px-figs-1) #tour-fig-1,
#tour-bar.px-notable :is(#tour-table, #tour-table-title) {display:none !important}
.px-tour {border:2px solid var(--color-accent); border-radius:10px; padding:8px 12px !important;
  background:var(--block-background-fill)}
#tour-text {font-size:1.05em}
body.px-large .gradio-container {--text-xxs:12px; --text-xs:14px; --text-sm:16px; --text-md:19px; --text-lg:22px;
  --text-xl:27px; --text-xxl:32px; --block-label-text-size:16px; --block-info-text-size:16px;
  --block-title-text-size:19px; --input-text-size:19px; --button-small-text-size:17px;
  --button-large-text-size:20px; --prose-text-size:19px; --section-header-text-size:19px}
body.px-large .gradio-container .prose {font-size:19px}
.block:fullscreen {background:var(--body-background-fill); overflow:auto; padding:12px}
/* plotly's toolbar in a strip of its own above each figure (28 px, layout.JS's STRIP): never over a title or legend */
.js-plotly-plot .plot-container .svg-container {margin-top:28px}
.js-plotly-plot .modebar-container {top:-28px !important}
#px-busy {display:none; position:fixed; top:8px; left:50%; transform:translateX(-50%); z-index:1000;
  padding:8px 16px; border-radius:8px; background:var(--color-accent); color:white; font-weight:600}
/* #px-head holds the header, the controls and the tour bar, one per line; in talk mode (body.px-talkmode:
   the tour on screen or ?talk=1) the header folds to one line, the title and the model beside the controls */
#px-head {flex-wrap:wrap; align-items:center; gap:4px 14px}
#px-head > * {flex:1 1 100% !important; min-width:0 !important}
#px-title h1 {margin-bottom:0.2em}
body.px-talkmode #px-head > #px-header {flex:1 1 0 !important; flex-direction:row; flex-wrap:nowrap;
  align-items:baseline; gap:14px}
body.px-talkmode #px-head > #px-talk {flex:0 0 600px !important; width:600px !important; flex-wrap:nowrap}
body.px-talkmode #px-talk > #copy-link-url {width:170px !important}
body.px-talkmode #large-text label {white-space:nowrap}
body.px-talkmode #px-intro, body.px-talkmode #px-flow, body.px-talkmode #px-status small,
  body.px-talkmode #px-status br {display:none !important}
body.px-talkmode #px-title, body.px-talkmode #px-talk > * {flex:0 0 auto !important; width:auto !important}
body.px-talkmode #px-title h1 {font-size:1.35em; margin:0; white-space:nowrap}
body.px-talkmode #px-status {flex:1 1 auto; width:auto !important; min-width:0; overflow:hidden; white-space:nowrap;
  text-overflow:ellipsis; font-size:0.85em}
body.px-talkmode #px-status * {display:inline; margin:0; overflow:hidden !important}
body.px-talkmode .gradio-container {padding-top:4px !important}
body.px-talkmode #tour-text p {margin:0.2em 0}
/* a long step text scrolls in its own box, not the figure off the screen (Large text at 1280x720) */
body.px-talkmode #tour-text {max-height:24vh; overflow-y:auto}
"""

# Run on page load (launch(js=...)): a new run closes the toasts of the last one, so an error toast
# never sits over the next result. A run starts with a click on a button, Enter in a text box, or a
# slider / radio change; clicks inside a toast (its own close button) are left alone.
JS = """
() => {
  // A refused job (the queue is full: HTTP 503 from the busy gate, picaso_core/ui/server/busy.py) shows
  // the app's own words, "busy: N jobs ahead, try again in about S s", above Gradio's generic toast.
  const fetch0 = window.fetch;
  window.fetch = async (...args) => {
    const r = await fetch0(...args);
    const url = String((args[0] && args[0].url) || args[0] || '');
    if (r.status === 503 && url.includes('/queue/join')) {
      r.clone().json().then((body) => {
        if (!body || typeof body.detail !== 'string') return;
        let note = document.getElementById('px-busy');
        if (!note) {
          note = document.createElement('div');
          note.id = 'px-busy';
          note.setAttribute('role', 'status');
          document.body.appendChild(note);
        }
        note.textContent = body.detail;
        note.style.display = 'block';
        clearTimeout(note._hide);
        note._hide = setTimeout(() => { note.style.display = 'none'; }, 10000);
      }).catch(() => {});
    }
    return r;
  };
  const closeToasts = (e) => {
    if (e.target.closest && e.target.closest('[data-testid=toast-body]')) return;
    document.querySelectorAll('[data-testid=toast-body] .toast-close').forEach((b) => b.click());
  };
  document.addEventListener('click', (e) => { if (e.target.closest && e.target.closest('button')) closeToasts(e); }, true);
  document.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) closeToasts(e); }, true);
  document.addEventListener('change', (e) => {
    if (e.target.matches && e.target.matches('input[type=range], input[type=radio]')) closeToasts(e);
  }, true);
  // The tour: the arrow keys press Previous / Next while the tour bar shows and no input has focus.
  document.addEventListener('keydown', (e) => {
    if ((e.key !== 'ArrowRight' && e.key !== 'ArrowLeft') || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
    const t = e.target;
    if (t.closest && t.closest('input, textarea, select, [contenteditable=true], [role=slider], [role=listbox]')) return;
    const bar = document.getElementById('tour-bar');
    if (!bar || bar.offsetParent === null) return;
    const b = document.getElementById(e.key === 'ArrowRight' ? 'tour-next' : 'tour-prev');
    if (b) { e.preventDefault(); b.click(); }
  });
  // Talk mode (the tour bar on screen, or ?talk=1): the header folds to one line (CSS: body.px-talkmode),
  // a step's figures are fitted to the screen's height and the page scrolls to the step.
  const TALK = ['1', 'true'].includes(new URLSearchParams(location.search).get('talk'));
  const PLOTLY_CHUNK = __PLOTLY_CHUNK__, STAGE_MIN = 240, STRIP = 28;  // STRIP: the toolbar's, above a figure (CSS)
  const touring = () => {
    const b = document.getElementById('tour-bar');
    return !!b && !b.classList.contains('px-off');
  };
  const talk = () => TALK || touring();
  const room = (gd) => {  // the height left under the step's title and text, the bar at the screen's top
    const bar = document.getElementById('tour-bar');
    const above = gd.getBoundingClientRect().top - bar.getBoundingClientRect().top;
    return Math.max(STAGE_MIN, Math.floor(window.innerHeight - above - STRIP - 14));
  };
  const stage = () => {
    document.body.classList.toggle('px-talkmode', talk());
    if (!touring() || !plotly || document.fullscreenElement) return;
    const bar = document.getElementById('tour-bar');
    const figs = [...bar.querySelectorAll('.js-plotly-plot')].filter((g) => g.offsetParent && g._fullLayout);
    if (!figs.length) return;
    Promise.all(figs.map((g) => {  // drawn again from its own layout where the room changed (text size, window)
      const want = Math.min(g.__pxOwnH || g._fullLayout.height, room(g));
      return g.__px0 && Math.abs(g._fullLayout.height - want) > 1 ? plotly.react(g, g.data, ...g.__px0) : null;
    })).then(() => {
      const b = bar.getBoundingClientRect(), bottom = Math.max(...figs.map((g) => g.getBoundingClientRect().bottom));
      if (b.top < 0 || bottom > window.innerHeight) window.scrollBy({top: b.top - 4, behavior: 'instant'});
    }, () => {});
  };
  // when each plot was last drawn (performance.now(), by its block's id): a link's gate waits for its figure
  window.__pxDrawn = window.__pxDrawn || {};
  const drawn = (gd) => {
    const host = gd && gd.closest ? gd.closest('.block[id]') : null;
    if (host) window.__pxDrawn[host.id] = performance.now();
    if (host && host.closest('#tour-bar')) requestAnimationFrame(stage);
  };
  // Every plotly figure, as Gradio draws it: the dark template on a dark page (?__theme=dark), larger
  // fonts with "Large text", and a full-screen button beside plotly's own (its PNG button stays).
  const DARK = __DARK_TEMPLATE__;
  const isDark = () => document.body.classList.contains('dark') || document.documentElement.classList.contains('dark')
    || !!document.querySelector('gradio-app.dark, .gradio-container.dark');
  const large = () => document.body.classList.contains('px-large');
  const FULL = {name: 'full screen', title: 'Full screen',
    icon: {width: 1000, height: 1000, path: 'M0 0h400v100H100v300H0zM600 0h400v400H900V100H600zM0 600h100v300h300v100H0zM900 600h100v400H600V900h300z'},
    click: (gd) => {
      if (document.fullscreenElement) { document.exitFullscreen(); return; }
      (gd.closest('.block') || gd).requestFullscreen();
    }};
  const dress = (layout, config, gd) => {
    const given = layout;
    layout = Object.assign({}, layout || {});
    if (gd && gd.closest && gd.closest('#tour-bar')) {  // a step's figure: no taller than the screen has room for
      gd.__px0 = [given, config];
      const own = gd.__pxOwnH = layout.height || 450, h = talk() ? Math.min(own, room(gd)) : own;
      const m = layout.margin || {}, lg = layout.legend || {}, inner = (H) => H - (m.t ?? 100) - (m.b ?? 80);
      if (h < own && lg.y < 0 && lg.yref !== 'container' && inner(h) > 40) {  // a legend below keeps its distance
        layout.legend = Object.assign({}, lg, {y: lg.y * inner(own) / inner(h)});
      }
      if (h < own) layout.height = h;
    }
    if (isDark()) Object.assign(layout, {template: DARK, paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: 'rgba(0,0,0,0)'});
    if (large()) layout.font = Object.assign({}, layout.font || {}, {size: 17});
    config = Object.assign({}, config || {});
    config.modeBarButtonsToAdd = [...(config.modeBarButtonsToAdd || []), FULL];
    return [layout, config];
  };
  const patch = (P) => {
    if (!P || P.__px) return P;
    for (const name of ['react', 'newPlot']) {
      const orig = P[name];
      P[name] = function (gd, data, layout, config) {
        const [l, c] = dress(layout, config, gd);
        const out = orig.call(this, gd, data, l, c);
        Promise.resolve(out).then(() => drawn(gd), () => {});
        return out;
      };
    }
    P.__px = true;
    return P;
  };
  // Gradio's plot component sets window.Plotly when it first loads: patch it as it is set.
  let plotly = patch(window.Plotly);
  Object.defineProperty(window, 'Plotly', {configurable: true, get: () => plotly, set: (v) => { plotly = patch(v); }});
  document.addEventListener('fullscreenchange', () => {
    document.querySelectorAll('.js-plotly-plot').forEach((gd) => {
      if (!plotly) return;
      const full = document.fullscreenElement && document.fullscreenElement.contains(gd);
      if (full && gd.__pxHeight === undefined) {
        gd.__pxHeight = gd.layout.height;
        plotly.relayout(gd, {height: window.innerHeight - 60});
      } else if (!full && gd.__pxHeight !== undefined) {
        plotly.relayout(gd, {height: gd.__pxHeight});
        gd.__pxHeight = undefined;
      }
    });
  });
  new MutationObserver(() => {
    if (!plotly) return;
    document.querySelectorAll('.js-plotly-plot').forEach((gd) => {
      const want = large() ? 17 : null;
      if ((gd.__pxFont || null) !== want && gd.layout) {
        gd.__pxFont = want;
        plotly.relayout(gd, {'font.size': want || 12});
      }
    });
    requestAnimationFrame(stage);  // larger text leaves the step's figure less room
  }).observe(document.body, {attributes: true, attributeFilter: ['class']});
  new MutationObserver((changes) => {
    if (changes.some((m) => m.target.id === 'tour-bar')) requestAnimationFrame(stage);
  }).observe(document.documentElement, {attributes: true, attributeFilter: ['class'], subtree: true});
  window.addEventListener('resize', () => requestAnimationFrame(stage));
  stage();
  // plotly.js (Gradio's chunk of it, ~4.6 MB) loads with the page, not once the first figure has arrived
  const main = document.querySelector('script[type=module][src*="/assets/index-"]');
  if (PLOTLY_CHUNK && main) import(new URL(PLOTLY_CHUNK, main.src).href).catch(() => {});
}
"""


def _dark_template() -> str:
    """plotly's own dark template, its backgrounds left to the page's (JSON for the page's script)."""
    t = pio.templates["plotly_dark"].to_plotly_json()
    t.get("layout", {}).update(paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)")
    return json.dumps(t, separators=(",", ":"))


def _plotly_chunk() -> str:
    """The file name of Gradio's plotly.js chunk (assets/PlotlyPlot-<hash>.js), '' where this Gradio has none."""
    found = sorted((Path(gr.__file__).parent / "templates" / "frontend" / "assets").glob("PlotlyPlot-*.js"))
    return found[0].name if found else ""


JS = JS.replace("__DARK_TEMPLATE__", _dark_template()).replace("__PLOTLY_CHUNK__", json.dumps(_plotly_chunk()))


def header(res: Resources) -> None:
    """Title, the idea in one line and a flow diagram, and what is loaded. In talk mode (the tour on
    screen, or `?talk=1`) the page's CSS folds it to one line with the tour's controls beside it
    (app.py renders both in one row, #px-head): the title and the model, nothing else."""
    with gr.Column(elem_id="px-header", min_width=0):
        gr.Markdown("# PICASO Explorer", elem_id="px-title")
        gr.Markdown(
            "An SSM reads a context into a fixed-size **state**. Store every context's state once, a "
            "**database of states**; for a query, retrieve *k* states and **compose** them into one "
            "(CASO, PICASO: arithmetic on states, no context tokens processed), then **generate** from it. "
            "Compare with processing the concatenated text (Concat). "
            "*(PICASO: Permutation-Invariant Context Composition with State Space Models, Liu et al.)*",
            elem_id="px-intro")
        steps = ["<b>contexts</b>", "encode once", "<b>state store</b>", "retrieve top-k", "<b>compose</b>", "generate"]
        gr.HTML('<div class="px-flow">' + '<span class="px-arrow">→</span>'.join(
            f'<span class="px-step">{s}</span>' for s in steps) + "</div>", elem_id="px-flow")
        # Refreshed on every page load and then on a timer: the store's count grows as requests (from
        # any tab or user) encode contexts on first use. Neither event is part of the API.
        status = gr.Markdown(status_md(res), elem_id="px-status")
    timer = gr.Timer(STATUS_REFRESH_S)
    gr.on([timer.tick], lambda: status_md(res), None, status, api_visibility="private", concurrency_limit=None,
          show_progress="hidden")
    gr.on(None, lambda: status_md(res), None, status, api_visibility="private", concurrency_limit=None)


STATUS_REFRESH_S = 5.0  # seconds between refreshes of the header's "store N of M states" line


def status_md(res: Resources) -> str:
    """What is loaded, and how many contexts the state store holds now."""
    loaded = " · ".join(f"{k} {v:.1f}s" for k, v in res.load_s.items())
    return f"{res.describe()}  \n<small>loaded in: {loaded}</small>"

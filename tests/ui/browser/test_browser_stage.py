"""The tour on a projector, in Chromium: at 1280x720 and 1920x1080, with and without Large text (and
in the dark theme), a `?step=N` link folds the header to one line and shows the step's figures whole
inside the screen, the page scrolled to the step; a `?step=N` and a copied link draw their figure
within 2 s of navigation on an idle 2-core machine (BUSY_BOUND_S on a loaded one, said in the
output), and no page-load event that draws another tab's plots or takes a model worker is sent
before that figure is drawn.

The app runs in this process over the tiny model, its tour cache built by runners that return
views shaped like the real steps' (figures 400-680 px tall, a paragraph of text, two figures side by
side on the soup and landscape steps), so what is checked is the page's layout, not the runners.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import served_app
from picaso_core.ui.tour.steps import STEPS

SIZES = [(1280, 720), (1920, 1080)]
CHECKED = [1, 5, 7]  # a Compose step, the skill map (two figures), the loss landscape (two figures)
assert [STEPS[n - 1].tab for n in CHECKED] == ["compose", "soup", "landscape"]
IDLE_BOUND_S = 2.0  # issue 48: a link's figure within 2 s of the page's load on an idle 2-core machine
# With other work on the machine (load average over its cores) the page gets a share of them: 4.0-4.5 s
# were seen at a load of 21 on 2 cores (docs/tour.md, "Link timings").
BUSY_BOUND_S = 8.0
TEXT = ("**Look at** the clusters: one colour per skill; a state's nearest neighbour is of its own skill 53% of "
        "the time against 5% by chance. The star, the tab's example demonstrations, lands nearest "
        "english_french: its own task. Layer 2, SSM state: silhouette **0.10**. Tasks separate best at layer "
        "**3** of 0-3 (SSM state, 64%), the last layer here; the paper found the middle layers best.")


def tall_view(name: str):
    """A runner returning what a real step shows: figures as tall as the real ones, a paragraph."""
    heights = {"soup_map": [680, 380], "landscape": [470, 470], "attribution": [680]}.get(name, [400])

    def run(res, memo=None, **inputs):
        import pandas as pd
        import plotly.graph_objects as go

        from picaso_core.ui.tour import runs as tour_runs

        # as the real ones: a long title from the left edge (the skill map's), a legend at the top right
        # (the attribution plot's), a legend below (most others)
        titles = [f"{name}: 240 skill states (16-shot demonstrations), SSM state of layer 2, t-SNE",
                  f"{name}: figure 1"]
        legends = [dict(orientation="h", y=-0.15),
                   dict(orientation="h", x=1, xanchor="right", y=1.02, yanchor="bottom")]
        figs = [go.Figure([go.Scatter(x=list(range(12)), y=[(i * 7 + k) % 5 for i in range(12)], mode="markers",
                                      name=f"series {k}") for k in range(2)],
                          layout=dict(title=dict(text=titles[j], x=0.01), height=h, template="plotly_white",
                                      margin=dict(t=60, b=60), legend=legends[j]))
                for j, h in enumerate(heights)]
        table = pd.DataFrame({"Method": ["Concat", "PICASO-R"], "Loss": [0.489, 0.686]})
        return tour_runs.View(f"{TEXT} ({name})", figs, [(f"{name} table", table)])
    return run


@pytest.fixture(scope="module")
def stage_app(tour_res):
    import app
    from picaso_core.ui.layout import CSS, JS, THEME
    from picaso_core.ui.tour import cache as tour
    from picaso_core.ui.tour import runs as tour_runs

    mp = pytest.MonkeyPatch()
    for name in list(tour_runs.RUNNERS):
        mp.setitem(tour_runs.RUNNERS, name, tall_view(name))
    tour.build(tour_res, log=lambda s: None)
    try:
        with served_app(app.build_app(tour_res).queue(), server_name="127.0.0.1", theme=THEME, css=CSS, js=JS) as url:
            yield url
    finally:
        mp.undo()


def _screen(driver, width: int, height: int):
    """The page's viewport exactly width x height (a window's size includes its frame)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


def _wait(driver, cond, timeout: float):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(cond)


BOXES_JS = """
const box = (e) => {
  if (!e) return null;
  const b = e.getBoundingClientRect();
  return [b.left, b.top, b.right, b.bottom];
};
const shown = (id) => { const e = document.getElementById(id); return !!e && e.offsetParent !== null; };
return {figs: [...document.querySelectorAll('#tour-bar .js-plotly-plot')]
          .filter((g) => g.offsetParent && g.querySelector('.main-svg')).map((g) => box(g.querySelector('.main-svg'))),
        title: box(document.getElementById('px-title')), start: box(document.getElementById('tour-start')),
        intro: shown('px-intro'), flow: shown('px-flow'), screen: [innerWidth, innerHeight],
        step: (document.getElementById('tour-title') || {}).textContent || ''};
"""


def _settled(driver, n: int, want_figs: int, timeout: float = 60) -> dict:
    """The page's boxes once step n's figures are drawn and stopped moving (fitted, scrolled)."""
    last = [None]

    def still(d):
        b = d.execute_script(BOXES_JS)
        if f"Step {n} of" not in b["step"] or len(b["figs"]) != want_figs or not b["title"] or not b["start"]:
            return False
        same = b == last[0]
        last[0] = b
        return b if same else False

    def poll(d):
        time.sleep(0.4)
        return still(d)
    return _wait(driver, poll, timeout)


def _inside(b: dict) -> list:
    w, h = b["screen"]
    return [f for f in b["figs"] if f[0] < -1 or f[1] < -1 or f[2] > w + 1 or f[3] > h + 1]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_step_link_shows_its_figures_whole_on_a_projector(browser, stage_app, size):
    from selenium.webdriver.common.by import By

    width, height = size
    _screen(browser, width, height)
    for n in CHECKED:
        figs = {"soup": 2, "landscape": 2}.get(STEPS[n - 1].tab, 1)
        browser.get(f"{stage_app}?step={n}" + ("&__theme=dark" if n == 7 else ""))
        b = _settled(browser, n, figs)
        # the header is one line: no paragraph, no pipeline chips, the title beside the tour's controls
        assert not b["intro"] and not b["flow"], (n, b)
        assert abs((b["title"][1] + b["title"][3]) - (b["start"][1] + b["start"][3])) / 2 < 30, (n, b)
        assert not _inside(b), f"step {n} at {width}x{height}: figures {b['figs']} leave the screen {b['screen']}"
        browser.find_element(By.CSS_SELECTOR, "#large-text input").click()
        _wait(browser, lambda d: d.execute_script("return document.body.classList.contains('px-large')"), 10)
        time.sleep(0.5)
        b = _settled(browser, n, figs)
        assert not _inside(b), f"step {n} at {width}x{height}, large text: {b['figs']} leave the screen {b['screen']}"
        if width == 1280:
            browser.save_screenshot(os.path.join(os.environ.get("PICASO_SCREENSHOTS", "/tmp"),
                                                 f"picaso_stage_{n}_{width}_large.png"))


# Timed in the page from navigation (performance.now() counts from it) to the link's figure drawn:
# the step's figure in the tour bar, or the plot a copied link's run draws after the page presses its
# button. Every queue join the page makes is logged with its time and event.
HOOK_JS = """
window.__stage = {joins: [], fig: null};
const now = () => performance.now();
const fetch0 = window.fetch;
window.fetch = function (input, init) {
  const url = String((input && input.url) || input);
  if (url.includes('/queue/join')) {
    try { window.__stage.joins.push([now(), JSON.parse(init.body).fn_index]); } catch (e) {}
  }
  return fetch0.apply(this, arguments);
};
const [plot, press, title] = __ARGS__;
let before;
document.addEventListener('click', (e) => {
  if (press && e.target.closest && e.target.closest('#' + press)) {
    const g = document.querySelector('#' + plot + ' .js-plotly-plot');
    before = g ? g.data : null;
  }
}, true);
const poll = () => {
  const g = document.querySelector('#' + plot + ' .js-plotly-plot');
  const svg = g && g.querySelector('.main-svg');
  const ok = svg && (press ? before !== undefined && g.data !== before
                           : !title || [...g.querySelectorAll('.gtitle')].some((t) => t.textContent.includes(title)));
  if (ok) window.__stage.fig = now(); else requestAnimationFrame(poll);
};
requestAnimationFrame(poll);
"""


def _load_rooted_drawers(config: dict) -> set[int]:
    """The page-load events (and the events chained after them) that draw a plot outside the tour bar:
    what a link's figure must not wait for. The link's own event (it fills the bar) is not one."""
    deps = {d["id"]: d for d in config["dependencies"]}
    plots = {c["id"] for c in config["components"] if c["type"] == "plot"
             and not str(c["props"].get("elem_id") or "").startswith("tour-fig")}
    bar = {c["id"] for c in config["components"] if c["props"].get("elem_id") == "tour-bar"}

    def root(d):
        while d.get("trigger_after") is not None:
            d = deps[d["trigger_after"]]
        return d
    out = set()
    for d in deps.values():
        r = root(d)
        if [t[1] for t in r["targets"]] == ["load"] and not bar & set(d["outputs"]) and plots & set(d["outputs"]):
            out.add(d["id"])
    return out


def _timed(browser, url: str, plot: str, press: str | None, title: str = "") -> tuple[float, list]:
    hook = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                   {"source": HOOK_JS.replace("__ARGS__", json.dumps([plot, press, title]))})
    try:
        browser.get(url)
        ms = _wait(browser, lambda d: d.execute_script("return window.__stage && window.__stage.fig"), 90)
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", hook)
    joins = browser.execute_script("return window.__stage.joins")
    config = browser.execute_script("return window.gradio_config")
    drawers = _load_rooted_drawers(config)
    assert drawers, "no page-load event draws a plot: the check below would check nothing"
    early = [fn for t, fn in joins if t < ms and fn in drawers]
    assert not early, f"page-load events {early} that draw other plots were sent before the link's figure"
    return ms / 1000, joins


def test_links_draw_their_figure_first_and_within_the_bound(browser, stage_app):
    from selenium.webdriver.common.by import By

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0]
    bound = IDLE_BOUND_S if load <= cores else BUSY_BOUND_S
    _screen(browser, 1280, 720)
    browser.get(stage_app)  # the browser's first visit: Gradio's scripts cached, as a visitor's second page
    _wait(browser, lambda d: d.execute_script("return !!window.Plotly"), 90)
    step_s, _ = _timed(browser, f"{stage_app}?step=5", "tour-fig-0", None, STEPS[4].run)
    # a copied link of the Compose tab: its query edited, so the link carries it and the page presses Run
    link = f"{stage_app}?tab=compose&query=Who+climbed+Tarrix+first%3F&k=3"
    link_s, _ = _timed(browser, link, "compose-plot", "compose-run")
    assert "Who climbed Tarrix first?" == browser.find_element(
        By.CSS_SELECTOR, "#compose-query textarea").get_attribute("value")
    print(f"\n?step=5: {step_s:.2f} s, copied link: {link_s:.2f} s from navigation to the figure drawn "
          f"(load {load:.1f} on {cores} cores: bound {bound:.1f} s, {IDLE_BOUND_S:.0f} s idle)")
    assert step_s < bound and link_s < bound, (step_s, link_s, bound)


# plotly's toolbar against each figure's title, legend and subplot titles; the anchors' labels of a
# landscape plane against each other: [plot id, what] for each overlap
COVERED_JS = """
const box = (e) => e.getBoundingClientRect();
const hit = (a, b) => a.width && b.width && a.left < b.right && b.left < a.right
  && a.top < b.bottom && b.top < a.bottom;
const out = [];
let plots = 0;
document.querySelectorAll('.js-plotly-plot').forEach((g) => {
  if (!g.offsetParent) return;
  const id = (g.closest('.block[id]') || {}).id || '?';
  const bar = g.querySelector('.modebar');
  if (bar) {
    plots += 1;
    g.querySelectorAll('.gtitle, .legend, .annotation-text').forEach((t) => {
      if (hit(box(bar), box(t))) out.push([id, 'toolbar over ' + (t.textContent || 'the legend').slice(0, 40)]);
    });
  }
});
const labels = [...document.querySelectorAll(arguments[0] + ' .textpoint text')].filter((t) => t.textContent);
labels.forEach((a, i) => labels.slice(i + 1).forEach((b) => {
  if (hit(box(a), box(b))) out.push([arguments[0], a.textContent + ' over ' + b.textContent]);
}));
return [plots, labels.length, out];
"""


def test_no_toolbar_over_a_title_or_legend_and_apart_anchor_labels(browser, stage_app):
    from conftest import open_tab

    _screen(browser, 1280, 720)
    browser.get(f"{stage_app}?step=5")  # the tour bar's figures (two, side by side) are checked too
    _settled(browser, 5, 2)
    problems, checked = [], {}
    for tab, plane in (("Loss landscape", "#landscape-caso"), ("Benchmarks", "#none"), ("Primer", "#none")):
        open_tab(browser, tab)
        # the tab's figures, drawn by the page's load events (the landscape computes its default)
        found = _wait(browser, lambda d: (lambda r: r if r[0] and (plane == "#none" or r[1] >= 3) else False)(
            d.execute_script(COVERED_JS, plane)), 120)
        time.sleep(1.0)
        plots, labels, out = browser.execute_script(COVERED_JS, plane)
        checked[tab] = (plots, labels)
        problems += out
        browser.save_screenshot(os.path.join(os.environ.get("PICASO_SCREENSHOTS", "/tmp"),
                                             f"picaso_stage_{tab[:5]}.png"))
        assert found
    assert not problems, problems
    assert checked["Loss landscape"][1] >= 3, checked  # the CASO plane's three anchors were labelled and checked


def caso_plane():
    """The CASO plane as the demo's step 7 drew it: the two bottom anchors at one height, 21 apart on
    a 32-wide plane, each with a 14-character label (the labels ran into each other there)."""
    from picaso_core.plots.landscape import plane_figure

    xs = [-16.05 + 32.58 * i / 20 for i in range(21)]
    ys = [-12.67 + 32.58 * i / 20 for i in range(21)]
    marks = [dict(name="PICASO-R", x=0.0, y=0.0, loss=0.770),
             dict(name="Concat", x=-9.0, y=-5.0, loss=0.721, off_plane=38.5, state_loss=0.721)]
    p = dict(xs=xs, ys=ys, loss=[[0.77 + 0.001 * ((x + 0.5) ** 2 + y ** 2) for x in xs] for y in ys],
             anchor_xy=[(-10.3, -7.2), (10.8, -7.2), (-0.5, 14.5)], anchor_loss=[0.78, 0.78, 0.79], marks=marks,
             anchor_names=["CASO(u1,u2,u3)", "CASO(u2,u3,u1)", "CASO(u3,u1,u2)"])
    return plane_figure(p, "<b>CASO plane: the CASO states</b><br><sup>mean side 23.2 · PICASO-R 0.770 · loss "
                           "0.767-0.799 on the plane · mean of 10 samples</sup>")


GAP = 6  # px between two labels' boxes


def test_the_caso_planes_anchor_labels_stay_apart(browser, stage_app):
    _screen(browser, 1280, 720)
    browser.get(stage_app)
    _wait(browser, lambda d: d.execute_script("return !!window.Plotly"), 90)
    fig = caso_plane().to_json()
    for width in (580, 420, 800):  # the plane beside the Soup plane at 1280 px, at 800 px, alone
        out = browser.execute_async_script("""
          const [fig, width, done] = arguments, f = JSON.parse(fig);
          const div = document.createElement('div');
          div.id = 'px-test-plane'; div.style.width = width + 'px';
          document.body.prepend(div);
          window.Plotly.newPlot(div, f.data, f.layout).then(() => {
            const found = [...div.querySelectorAll('.textpoint text')].map((t) => t.getBoundingClientRect());
            div.remove();
            done(found.map((b) => [b.left, b.top, b.right, b.bottom]));
          });""", fig, width)
        assert len(out) == 3, out
        # apart by a gap a reader sees (labels that touched read as one: "CASO(u1,u2,u3)CASO(u2,u3,u1)")
        clash = [(a, b) for i, a in enumerate(out) for b in out[i + 1:]
                 if a[0] < b[2] + GAP and b[0] < a[2] + GAP and a[1] < b[3] + GAP and b[1] < a[3] + GAP]
        assert not clash, f"at {width} px the anchors' labels are closer than {GAP} px: {clash}"

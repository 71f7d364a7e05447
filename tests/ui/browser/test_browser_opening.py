"""Every tab opens on a result (issue 48): before anything is pressed, Compose & compare (the landing
tab), State soup, Attribution and COFFEE show their default example's result from the tour's
precomputed results, marked as precomputed with the button that computes it live (the loss
landscape opens on its own shipped default view: tests/ui/browser/test_browser_landscape.py). And a
tour step fills its tab's own outputs, not only the bar. Leaves a screenshot of the State soup tab at
$PICASO_SCREENSHOT_OPENING (default: <tmp>/picaso_opening.png).

The app is served in this process over the tiny model, its tour cache built first by the real
runners with tiny budgets (as tests/ui/tour/test_tour_determinism.py's, written out here: no test
file imports another).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from picaso_core.ui.tour import steps as tour_steps
from conftest import served_app

TINY = {"coffee": dict(steps=100), "landscape": dict(sample="q-velmora", steps=5), "soup_map": dict(method="pca"),
        "attribution": dict(grain="context")}
# tab title -> (the result's elements: a table (rows) or a plot (data), the element carrying the marker)
TABS = {
    "Compose & compare": (["#compose-results", "#compose-plot"], "#compose-run"),
    "State soup": (["#soup-map", "#soup-retrieved", "#soup-two"], "#soup-run"),
    "Attribution": (["#attribution-bars"], "#attribution-run"),
    "COFFEE lab": (["#coffee-acc", "#coffee-table"], "#coffee-run"),
}
FILLED_JS = """
const el = document.querySelector(arguments[0]);
if (!el) return false;
const plot = el.querySelector('.js-plotly-plot');
if (plot) return !!(plot.data && plot.data.length && plot.data.some(t => (t.x || t.y || t.z || []).length));
const rows = [...el.querySelectorAll('tbody tr')].filter(r => r.textContent.trim());
return rows.length > 0;
"""


@pytest.fixture(scope="module")
def opening_app(tour_res):
    import app
    from picaso_core.ui.layout import CSS, JS, THEME
    from picaso_core.ui.tour import cache as tour

    twins = {}

    def twin(s):
        if id(s) not in twins:
            twins[id(s)] = tour_steps.Step(s.title, s.tab, s.run, {**s.inputs, **TINY.get(s.run, {})})
        return twins[id(s)]

    mp = pytest.MonkeyPatch()
    mp.setattr(tour, "STEPS", tuple(twin(s) for s in tour.STEPS))
    mp.setattr(tour, "OPENINGS", {k: tuple(twin(s) for s in v) for k, v in tour.OPENINGS.items()})
    try:
        tour.build(tour_res, log=lambda s: None)
        assert set(tour.load_openings(tour_res)) == set(tour_steps.OPENINGS)
        with served_app(app.build_app(tour_res).queue(), server_name="127.0.0.1", theme=THEME, css=CSS, js=JS) as url:
            yield url
    finally:
        mp.undo()


def _wait(driver, cond, timeout):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(cond)


def _marker(driver, tab_title: str) -> str:
    """The text of the tab panel on screen (where its precomputed marker is)."""
    return driver.execute_script(
        "const p = [...document.querySelectorAll('[role=tabpanel]')].find(p => p.offsetParent !== null);"
        "return p ? p.innerText : ''")


def test_each_tab_opens_on_its_precomputed_result(browser, opening_app):
    from conftest import open_tab

    browser.set_window_size(1400, 1400)
    browser.get(opening_app)
    for title, (parts, button) in TABS.items():
        if title != "Compose & compare":  # the landing tab is on screen already
            open_tab(browser, title)
        for css in parts:
            _wait(browser, lambda d, c=css: d.execute_script(FILLED_JS, c), 30)
        text = _marker(browser, title)
        label = browser.execute_script(f"return document.querySelector('{button}').innerText").strip()
        assert "Precomputed on" in text and f"press {label} to compute it live" in text, (title, text[:300])
        if title == "State soup":  # what a visitor sees: $PICASO_SCREENSHOT_OPENING (default: <tmp>/picaso_opening.png)
            browser.save_screenshot(os.environ.get("PICASO_SCREENSHOT_OPENING",
                                                   str(Path(tempfile.gettempdir()) / "picaso_opening.png")))


def test_a_tour_step_fills_its_tabs_own_outputs(browser, opening_app):
    from selenium.webdriver.common.by import By

    n = next(i for i, s in enumerate(tour_steps.STEPS, 1) if s.run == "compose_order")
    browser.set_window_size(1400, 1400)
    browser.get(opening_app + f"?step={n}")
    _wait(browser, lambda d: f"Step {n} of" in d.find_element(By.ID, "tour-title").text, 30)
    _wait(browser, lambda d: f"Tour step {n}, precomputed on" in _marker(d, "Compose & compare"), 30)
    assert browser.execute_script(FILLED_JS, "#compose-results")
    # the step's order is the tab's: most relevant first
    assert not browser.find_element(By.XPATH, "//label[normalize-space(.)='Most relevant last']//input").is_selected()


def test_each_opening_is_computed_with_the_inputs_its_tab_opens_with(tour_res):
    """What a tab opens on is its own default run: the opening steps' inputs (as resolved for the loaded
    model and corpus) are the values the tab's inputs hold when the page opens."""
    import gradio as gr

    import app
    from picaso_core.ui.tour import runs
    from picaso_core.ui.tour.links import find

    demo = app.build_app(tour_res)
    tabs = {b.id: b for b in demo.blocks.values() if isinstance(b, gr.Tab)}
    for key, openers in tour_steps.OPENINGS.items():
        comps = find(tabs[key], key)
        for step in openers:
            inputs = runs.resolve(tour_res, step.tab, step.inputs)
            shared = sorted(set(inputs) & set(comps))
            assert shared, (key, step.title)
            for name in shared:
                assert inputs[name] == comps[name].value, (key, step.title, name, inputs[name], comps[name].value)

"""A real browser: headless Chromium loads the app, runs a query, and sees the results table.

Needs Debian's `chromium` and `chromium-driver` packages (/usr/bin/chromium, /usr/bin/chromedriver)
and the `selenium` pip package; skips, saying which is missing, without them. Leaves a screenshot
at $PICASO_SCREENSHOT (default: <tmp>/picaso_browser.png) to look at.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from test_app import METHODS, app_url  # noqa: F401  (app_url: the launched app, a session fixture)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


# each rendered plot title / axis title against its own svg, and against the Gradio label laid over
# the plot's top left corner: [plot id, what, text] for each one cut or covered
LAYOUT_PROBLEMS_JS = """
const out = [], box = e => e.getBoundingClientRect();
const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
for (const id of arguments[0]) {
  document.querySelectorAll(`#${id} .js-plotly-plot`).forEach(p => {
    const svg = box(p.querySelector('.main-svg'));
    const label = p.closest('.block').querySelector('[data-testid=block-label]');
    p.querySelectorAll('.gtitle, .g-xtitle, .g-ytitle, .g-x2title, .g-y2title, .annotation-text').forEach(t => {
      const b = box(t);
      if (!b.width) return;
      if (b.left < svg.left - 1 || b.right > svg.right + 1 || b.top < svg.top - 1 || b.bottom > svg.bottom + 1)
        out.push([id, 'clipped', t.textContent]);
      if (label && hit(b, box(label))) out.push([id, 'under the label', t.textContent]);
    });
  });
}
return out;
"""


def layout_problems(driver, ids) -> list:
    """Plot titles, axis titles and annotations cut by their figure or covered by Gradio's label."""
    return driver.execute_script(LAYOUT_PROBLEMS_JS, list(ids))


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        pytest.skip("headless Chromium not installed: `apt-get install -y chromium chromium-driver`")
    webdriver = pytest.importorskip("selenium.webdriver", reason="`pip install selenium`")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,2000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_page_runs_a_query_and_shows_the_results_table(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 60)
    wait.until(EC.element_to_be_clickable((By.ID, "compose-run")))
    assert "PICASO Explorer" in browser.find_element(By.TAG_NAME, "h1").text
    # the tab opens on an example (the page's load event fills it in): wait for it before picking another
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#compose-query textarea").get_attribute("value"))
    # pick a corpus example: it fills in the query and the continuation to score
    browser.find_element(By.CSS_SELECTOR, "#compose-example input").click()
    option = wait.until(EC.element_to_be_clickable(
        (By.CSS_SELECTOR, "[data-testid=dropdown-option][aria-label^='q-velmora']")))
    option.click()
    query = browser.find_element(By.CSS_SELECTOR, "#compose-query textarea")
    wait.until(lambda d: query.get_attribute("value") == "Velmora, the city of blue glass, was founded")
    assert browser.find_element(By.CSS_SELECTOR, "#compose-continuation textarea").get_attribute("value") \
        == " in 1423 by Osric Dallen."
    browser.find_element(By.ID, "compose-run").click()

    table = browser.find_element(By.ID, "compose-results")
    WebDriverWait(browser, 120).until(lambda d: all(m in table.text for m in METHODS))
    assert "Loss" in table.text and "Compose (ms)" in table.text
    order = browser.find_elements(By.CSS_SELECTOR, ".px-ctx")
    assert len(order) == 5 + 1  # k = 5 by default, then the query
    assert browser.find_elements(By.CSS_SELECTOR, ".px-gold")  # the example's gold context was retrieved
    assert len(browser.find_elements(By.CSS_SELECTOR, ".px-gen")) == len(METHODS)
    # the chart renders after the table arrives (plotly draws client-side): wait for it
    assert WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"))
    assert layout_problems(browser, ["compose-plot"]) == []  # the subplot titles clear the label
    shot = os.environ.get("PICASO_SCREENSHOT", str(Path(tempfile.gettempdir()) / "picaso_browser.png"))
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(shot)
    assert_fits_at_800px(browser, ["compose-plot"])


def assert_fits_at_800px(driver, ids, timeout: float = 15):
    """At 800 px wide, the plots `ids` (drawn by a run) are there and none of their titles, axis
    titles or annotations is cut or under Gradio's label (plotly redraws after the resize)."""
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        driver.set_window_size(800, 2000)
        missing = [i for i in ids if not driver.find_elements("css selector", f"#{i} .js-plotly-plot .main-svg")]
        assert not missing, f"no plot drawn in {missing}"
        problems = []

        def fits(d):
            problems[:] = layout_problems(d, ids)
            return not problems
        try:
            WebDriverWait(driver, timeout).until(fits)
        except Exception:
            raise AssertionError(f"at 800 px: {problems}") from None
    finally:
        driver.set_window_size(1400, 2000)

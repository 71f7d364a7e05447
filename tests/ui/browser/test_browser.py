"""A real browser: headless Chromium loads the app, runs a query, and sees the results table.

Needs Debian's `chromium` and `chromium-driver` packages (/usr/bin/chromium, /usr/bin/chromedriver)
and the `selenium` pip package; skips, saying which is missing, without them. Leaves a screenshot
at $PICASO_SCREENSHOT (default: <tmp>/picaso_browser.png) to look at.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from conftest import assert_fits_at_800px, layout_problems
from picaso_core.ui.tabs import compose as compose_tab

METHODS = [label for _, label, _, _ in compose_tab.METHODS]


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

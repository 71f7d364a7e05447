"""The Attribution tab in headless Chromium: open the tab, run the example, see the bar chart drawn
and the contexts' sentences shaded; select words of the answer and see that span attributed.

Reuses conftest's `browser` fixture (skips without chromium / selenium) and conftest's launched
app (`app_url`). Leaves a screenshot at $PICASO_SCREENSHOT_ATTRIBUTION (default
<tmp>/picaso_attribution.png).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from conftest import assert_fits_at_800px, open_tab


def test_attribution_tab_runs_and_draws_the_bar_chart(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 60)
    open_tab(browser, "Attribution", timeout=60)
    run = wait.until(EC.element_to_be_clickable((By.ID, "attribution-run")))
    # the tab opens on a labelled example: query, answer and its contexts already filled in
    # (the page's load event fills it in: wait for it, the CI machine can be slow to answer it)
    query = browser.find_element(By.CSS_SELECTOR, "#attribution-query textarea")
    WebDriverWait(browser, 60).until(lambda d: query.get_attribute("value"))
    assert query.get_attribute("value") == "Velmora, the city of blue glass, was founded"
    run.click()
    bars = browser.find_element(By.ID, "attribution-bars")
    WebDriverWait(browser, 180).until(lambda d: bars.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg"))
    assert len(bars.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg g.trace.bars")) >= 8  # a panel per method
    assert "PICASO-R-LOO" in bars.text and "Concat-LOO" in bars.text
    heat = browser.find_element(By.ID, "attribution-heatmap")
    WebDriverWait(browser, 60).until(lambda d: heat.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"))
    assert browser.find_elements(By.CSS_SELECTOR, ".px-gold")  # the gold context is marked
    # the page opens on sentences (this corpus: one per context): each is shaded, with a legend in nats
    sources = browser.find_element(By.ID, "attribution-sources")
    assert len(sources.find_elements(By.CSS_SELECTOR, "[id^='px-src-']")) >= len(browser.find_elements(
        By.CSS_SELECTOR, "#attribution-sources .px-ctx")) >= 1 and "nats per answer token" in sources.text
    assert "sources (sentences)" in browser.page_source
    # selecting words of the answer (mouse selection: the textarea's select event) re-attributes that span
    answer = browser.find_element(By.CSS_SELECTOR, "#attribution-answer textarea")
    word = "Osric Dallen"
    i = answer.get_attribute("value").index(word)
    browser.execute_script("const t = arguments[0]; t.focus(); t.setSelectionRange(arguments[1], arguments[2]);"
                           "t.dispatchEvent(new Event('select', {bubbles: true}));", answer, i, i + len(word))
    WebDriverWait(browser, 180).until(lambda d: "scoring the span" in d.page_source)
    assert re.search(rf"scoring the span\s*<code[^>]*>\s*{word}\s*</code>", browser.page_source)
    shot = os.environ.get("PICASO_SCREENSHOT_ATTRIBUTION", str(Path(tempfile.gettempdir()) / "picaso_attribution.png"))
    browser.save_screenshot(shot)
    # at 800 px the panel titles (time on a second line) stay whole and the two heatmaps stack
    tokens = browser.find_element(By.ID, "attribution-tokens")
    WebDriverWait(browser, 60).until(lambda d: tokens.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"))
    assert_fits_at_800px(browser, ["attribution-bars", "attribution-heatmap", "attribution-tokens"])

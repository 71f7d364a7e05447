"""Headless Chromium opens the State soup tab, draws the skill map and sees plotly draw it, its
legend inside the figure at 1400 and 800 px, and a malformed demonstration refused then a good one placed.

Reuses conftest's `browser` fixture (skips without Chromium / selenium) and conftest's
`app_url`. Leaves a screenshot at $PICASO_SOUP_SCREENSHOT (default <tmp>/picaso_soup.png)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("PICASO_WARM_UMAP", "0")

from conftest import assert_fits_at_800px, open_tab  # noqa: E402


def test_soup_tab_draws_the_skill_map(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 60)
    open_tab(browser, "State soup", timeout=60)
    wait.until(EC.element_to_be_clickable((By.ID, "soup-run"))).click()
    # the figure is drawn client-side by plotly inside the map's element, with one trace per task
    plot = WebDriverWait(browser, 180).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#soup-map .js-plotly-plot"))
    assert plot
    WebDriverWait(browser, 60).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#soup-map .scatterlayer .trace")) >= 20)
    legend = browser.find_element(By.CSS_SELECTOR, "#soup-map .legend").text
    assert "antonym" in legend and "labels shuffled" in legend and "your demonstration" in legend
    summary = browser.find_element(By.ID, "soup-summary").text
    assert "nearest neighbour" in summary and "Tasks separate best at layer" in summary
    shot = os.environ.get("PICASO_SOUP_SCREENSHOT", str(Path(tempfile.gettempdir()) / "picaso_soup.png"))
    browser.save_screenshot(shot)
    # the 20 tasks' legend fits inside the figure, at 1400 px and at 800 px, not cut off
    try:
        for width in (1400, 800):
            browser.set_window_size(width, 2000)
            WebDriverWait(browser, 10).until(lambda d: _legend_inside(d))
    finally:
        browser.set_window_size(1400, 2000)
    # a malformed demonstration gets a one-line message naming the line, then a good one is placed
    box = browser.find_element(By.CSS_SELECTOR, "#soup-demos textarea")
    box.clear()
    box.send_keys("no arrow here at all")
    browser.find_element(By.ID, "soup-place").click()
    # the toast's element appears before its text, and its text empties as it fades: keep the text the
    # wait saw (reading the element again later raced with the fade)
    toast = WebDriverWait(browser, 60).until(
        lambda d: [x for x in (t.text for t in d.find_elements(By.CSS_SELECTOR, ".toast-body")) if "line 1" in x])
    assert "question → answer" in toast[0]
    box.clear()
    box.send_keys("cat → cats\ndog → dogs")
    browser.find_element(By.ID, "soup-place").click()
    WebDriverWait(browser, 120).until(lambda d: not d.find_elements(By.CSS_SELECTOR, ".toast-body")
                                      and "Your demonstration's state" in d.find_element(By.ID, "soup-summary").text)
    # mix the two skills, then the map, the per-layer panel and the mixing plot fit at 800 px
    two = browser.find_element(By.ID, "soup-two-run")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", two)
    two.click()
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#soup-two .js-plotly-plot .main-svg"))
    assert_fits_at_800px(browser, ["soup-map", "soup-quality", "soup-two"])


def _legend_inside(driver) -> bool:
    return driver.execute_script("""
        const l = document.querySelector('#soup-map .legend'), p = document.querySelector('#soup-map .main-svg');
        if (!l || !p) return false;
        const a = l.getBoundingClientRect(), b = p.getBoundingClientRect();
        return a.width > 0 && a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1
               && a.bottom <= b.bottom + 1 && !document.querySelector('#soup-map .legend .scrollbar[height]:not([height="0"])');
    """)

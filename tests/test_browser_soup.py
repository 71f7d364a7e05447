"""Headless Chromium opens the State soup tab, draws the skill map and sees plotly draw it.

Reuses test_browser's `browser` fixture (skips without Chromium / selenium) and test_app's
`app_url`. Leaves a screenshot at $PICASO_SOUP_SCREENSHOT (default <tmp>/picaso_soup.png)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("PICASO_WARM_UMAP", "0")

from test_browser import app_url, browser  # noqa: E402,F401


def test_soup_tab_draws_the_skill_map(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 60)
    tab = wait.until(EC.element_to_be_clickable(
        (By.XPATH, "//button[@role='tab' and normalize-space()='State soup']")))
    tab.click()
    wait.until(EC.element_to_be_clickable((By.ID, "soup-run"))).click()
    # the figure is drawn client-side by plotly inside the map's element, with one trace per task
    plot = WebDriverWait(browser, 180).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#soup-map .js-plotly-plot"))
    assert plot
    WebDriverWait(browser, 60).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#soup-map .scatterlayer .trace")) >= 20)
    legend = browser.find_element(By.CSS_SELECTOR, "#soup-map .legend").text
    assert "antonym_shuffled" in legend and "your demonstration" in legend
    summary = browser.find_element(By.ID, "soup-summary").text
    assert "nearest neighbour" in summary
    shot = os.environ.get("PICASO_SOUP_SCREENSHOT", str(Path(tempfile.gettempdir()) / "picaso_soup.png"))
    browser.save_screenshot(shot)

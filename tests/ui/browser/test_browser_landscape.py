"""Headless Chromium: the Loss landscape tab shows its default view (both planes drawn) on opening,
and a run on one sample redraws both planes; at 800 px wide the planes stack and no plot title,
axis title or table column is cut. Skips without chromium / chromedriver / selenium.
Leaves a screenshot at $PICASO_SCREENSHOT_LANDSCAPE (default: <tmp>/picaso_landscape.png)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from conftest import layout_problems, open_tab


def _text_fits(d, eid: str) -> bool:
    """The dropdown's shown choice is not cut off (its text fits its input box)."""
    return d.execute_script(f"const i = document.querySelector('#{eid} input'); return i.scrollWidth <= i.clientWidth")


def _plots_drawn(d):
    from selenium.webdriver.common.by import By

    return all(d.find_elements(By.CSS_SELECTOR, f"#{eid} .js-plotly-plot") for eid in ("landscape-soup", "landscape-caso"))


def test_landscape_tab_draws_both_planes(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 120)
    open_tab(browser, "Loss landscape", timeout=120)
    wait.until(EC.element_to_be_clickable((By.ID, "landscape-run")))
    wait.until(_plots_drawn)  # the default view arrives without a click
    summary = browser.find_element(By.ID, "landscape-summary")
    assert "CASO triangle" in summary.text and "average of" in summary.text
    # one sample: pick it, run, and wait until the summary names it
    browser.find_element(By.CSS_SELECTOR, "#landscape-sample input").click()
    wait.until(EC.element_to_be_clickable(
        (By.CSS_SELECTOR, "[data-testid=dropdown-option][aria-label^='q-velmora']"))).click()
    browser.find_element(By.ID, "landscape-run").click()
    wait.until(lambda d: "sample q-velmora" in d.find_element(By.ID, "landscape-summary").text)
    wait.until(_plots_drawn)
    for eid in ("landscape-soup", "landscape-caso"):
        # the contour and the marks are drawn (plotly's SVG layers)
        assert browser.find_elements(By.CSS_SELECTOR, f"#{eid} .js-plotly-plot .contourlayer, #{eid} .js-plotly-plot .hm")
        assert browser.find_elements(By.CSS_SELECTOR, f"#{eid} .js-plotly-plot .scatterlayer .point")
    assert browser.find_elements(By.CSS_SELECTOR, "#landscape-line .js-plotly-plot")
    plots = ("landscape-soup", "landscape-caso", "landscape-line")
    assert layout_problems(browser, plots) == []
    assert _text_fits(browser, "landscape-pair")
    shot = os.environ.get("PICASO_SCREENSHOT_LANDSCAPE", str(Path(tempfile.gettempdir()) / "picaso_landscape.png"))
    browser.save_screenshot(shot)

    # 800 px: the planes stack at full width (side by side they would be squeezed to 344 px), titles whole
    browser.set_window_size(800, 2000)
    width = lambda eid: browser.find_element(By.CSS_SELECTOR, f"#{eid} .main-svg").size["width"]  # noqa: E731
    wait.until(lambda d: width("landscape-soup") > 600)
    soup, caso = (browser.find_element(By.ID, eid).rect for eid in ("landscape-soup", "landscape-caso"))
    assert caso["y"] >= soup["y"] + soup["height"] - 1  # one below the other
    wait.until(lambda d: not layout_problems(d, plots))  # plotly redraws after the resize
    assert _text_fits(browser, "landscape-pair")
    # the prop. 4 table fits: its last column ("holds") is inside the table's box, no scrolling
    table = browser.find_element(By.ID, "landscape-distances")
    last = [h for h in table.find_elements(By.CSS_SELECTOR, "th") if h.text.strip() == "holds"]
    assert last and last[0].rect["x"] + last[0].rect["width"] <= table.rect["x"] + table.rect["width"] + 1

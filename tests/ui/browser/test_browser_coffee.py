"""Headless Chromium: the COFFEE lab tab draws the IH0 trajectories on opening, trains COFFEE and S6
side by side with live curves, and Stop cancels a run. Skips without chromium / chromedriver /
selenium. Leaves a screenshot at $PICASO_SCREENSHOT_COFFEE (default: <tmp>/picaso_coffee.png)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from conftest import layout_problems, open_tab


def _set_number(browser, elem_id: str, value) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = browser.find_element(By.CSS_SELECTOR, f"#{elem_id} input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value))
    box.send_keys(Keys.TAB)


def test_coffee_tab_trains_both_models_live(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 90)
    open_tab(browser, "COFFEE lab", timeout=90)
    wait.until(EC.element_to_be_clickable((By.ID, "coffee-run")))
    # the IH0 trajectories arrive without a click: 8 sequences + embeddings drawn in the plane
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#coffee-ih0 .js-plotly-plot .scatterlayer .trace"))
    assert "IH0 sequences right" in browser.find_element(By.ID, "coffee-ih0-summary").text
    paper = browser.find_element(By.ID, "coffee-paper-table").text
    assert "0.68" in paper and "0.99+" in paper and "0.966" in paper   # tables 1 and 7 of the paper
    # a short run: both curves appear and the status says Done
    _set_number(browser, "coffee-steps", 150)
    browser.find_element(By.ID, "coffee-run").click()
    wait.until(lambda d: "Done: COFFEE" in d.find_element(By.ID, "coffee-status").text)
    for eid in ("coffee-loss", "coffee-acc"):
        traces = browser.find_elements(By.CSS_SELECTOR, f"#{eid} .js-plotly-plot .scatterlayer .trace")
        assert len(traces) >= 2, eid
    assert "COFFEE" in browser.find_element(By.ID, "coffee-table").text
    shot = os.environ.get("PICASO_SCREENSHOT_COFFEE", str(Path(tempfile.gettempdir()) / "picaso_coffee.png"))
    browser.save_screenshot(shot)
    # at 800 px the two curves stack instead of clipping their titles side by side
    browser.set_window_size(800, 2000)
    wait.until(lambda d: not layout_problems(d, ["coffee-loss", "coffee-acc"]))
    loss_box, acc_box = (browser.find_element(By.ID, e).rect for e in ("coffee-loss", "coffee-acc"))
    assert acc_box["y"] >= loss_box["y"] + loss_box["height"] - 1, "the curves should stack at 800 px"
    browser.set_window_size(1400, 2000)
    # a long run, stopped, then a new one
    _set_number(browser, "coffee-steps", 20000)
    browser.find_element(By.ID, "coffee-run").click()
    wait.until(lambda d: "Training: COFFEE" in d.find_element(By.ID, "coffee-status").text)
    def steps_shown(d):
        m = re.search(r"Training: .* after (\d+) steps", d.find_element(By.ID, "coffee-status").text)
        return int(m.group(1)) if m else 0

    wait.until(lambda d: steps_shown(d) > 50)   # past the 50 steps the next run stops at
    browser.find_element(By.ID, "coffee-stop").click()
    _set_number(browser, "coffee-steps", 50)
    browser.find_element(By.ID, "coffee-run").click()   # at once: the stopped run may still be winding down
    # the stopped run says so, then the new run (Stop freed the session) reaches its 50 steps
    wait.until(lambda d: "Done: COFFEE" in (t := d.find_element(By.ID, "coffee-status").text) and "after 50 steps" in t)

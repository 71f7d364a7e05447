"""Headless Chromium: the Primer tab draws every figure on opening, a slider redraws the LTI view,
and "Measure on this machine" fills the complexity table. Skips without chromium / chromedriver /
selenium. Leaves a screenshot at $PICASO_SCREENSHOT_PRIMER (default: <tmp>/picaso_primer.png)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from conftest import open_tab

PLOTS = ("primer-kernel", "primer-eigen", "primer-memory", "primer-selective", "primer-delta", "primer-attention")


def _drawn(ids):
    from selenium.webdriver.common.by import By

    return lambda d: all(d.find_elements(By.CSS_SELECTOR, f"#{eid} .js-plotly-plot") for eid in ids)


def test_primer_tab_draws_moves_and_measures(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 120)
    open_tab(browser, "Primer", timeout=120)
    wait.until(EC.element_to_be_clickable((By.ID, "primer-measure")))
    wait.until(_drawn(PLOTS))  # every figure arrives without a click
    assert "agree to" in browser.find_element(By.ID, "primer-lti-md").text
    assert "equals" in browser.find_element(By.ID, "primer-attention-md").text
    # type a magnitude into the slider's number box: the LTI view follows
    box = browser.find_element(By.CSS_SELECTOR, "#primer-magnitude input[type=number]")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("0.5", Keys.ENTER)
    wait.until(lambda d: "|λ| = 0.500" in d.find_element(By.ID, "primer-lti-md").text)
    # measure on short lengths
    lengths = browser.find_element(By.CSS_SELECTOR, "#primer-lengths textarea, #primer-lengths input")
    lengths.clear()
    lengths.send_keys("64, 128, 256")
    # the shipped measurement is shown until the live one replaces it (checked before the click: the
    # short lengths can be measured before a check after it runs)
    assert "Shown until you measure" in browser.find_element(By.ID, "primer-complexity-md").text
    browser.find_element(By.ID, "primer-measure").click()
    wait.until(lambda d: "Shown until" not in (t := d.find_element(By.ID, "primer-complexity-md").text)
               and "Measured slopes" in t)
    wait.until(lambda d: "log-log slope" in d.find_element(By.ID, "primer-complexity-table").text)
    wait.until(_drawn(["primer-complexity"]))
    assert "T" in browser.find_element(By.ID, "primer-complexity-table").text
    shot = os.environ.get("PICASO_SCREENSHOT_PRIMER", str(Path(tempfile.gettempdir()) / "picaso_primer.png"))
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(shot)

"""Headless Chromium: the Benchmarks tab shows the shipped run's figures at once and runs a live
sweep; an experiments report.html opens offline with every figure drawn. Screenshots are left in
$PICASO_SCREENSHOT_DIR (default: the temp folder) to look at."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from picaso_core.plots.report import write_report
from picaso_core.ui.tabs import benchmarks as B
from conftest import layout_problems, open_tab

SHOTS = Path(os.environ.get("PICASO_SCREENSHOT_DIR", tempfile.gettempdir()))


def test_benchmarks_tab_shows_the_demo_run_and_runs_a_sweep(browser, app_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 90)
    open_tab(browser, B.TITLE, timeout=90)
    # the shipped run's figures are drawn without any click
    assert wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#bench-loss-vs-k .js-plotly-plot"))
    assert "Look at" in browser.find_element(By.ID, "bench-intro").text
    assert "PICASO-R" in browser.find_element(By.ID, "bench-paper-vs-ours").text
    run = browser.find_element(By.ID, "bench-run")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", run)
    run.click()
    WebDriverWait(browser, 180).until(lambda d: "samples** done" in d.find_element(By.ID, "bench-status").text
                                      or "samples done" in d.find_element(By.ID, "bench-status").text)
    assert wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#bench-live-loss .js-plotly-plot"))
    browser.save_screenshot(str(SHOTS / "picaso_benchmarks_tab.png"))
    # the status names the k values run (0, 1, 2, 5 by default: the mean is over k = 1, 2, 5)
    assert "mean over k = 1, 2, 5" in browser.find_element(By.ID, "bench-status").text
    # 800 px: every figure full width, no title, axis title or annotation cut or under Gradio's label
    ids = [f[0] for f in B.P.all_figures(B.load_shipped())] + ["bench-live-loss", "bench-live-time"]
    browser.set_window_size(800, 2000)
    width = lambda eid: browser.find_element(By.CSS_SELECTOR, f"#{eid} .main-svg").size["width"]  # noqa: E731
    wait.until(lambda d: all(width(eid) > 600 for eid in ids))
    wait.until(lambda d: not layout_problems(d, ids))
    # log axes label 1-2-5 steps only (plotly's own labels every minor step: "2 3 4 ... 9 100 2 3")
    ticks = browser.execute_script(
        "return [...document.querySelectorAll('#bench-time-vs-k .ytick text')].map(t => t.textContent)")
    assert ticks and all(t.lstrip("0.").rstrip("0") in ("1", "2", "5") for t in ticks), ticks


def test_report_html_opens_offline_with_every_figure(browser, tmp_path):  # noqa: F811
    from selenium.webdriver.support.ui import WebDriverWait

    summary = B.load_shipped()
    path = tmp_path / "report.html"
    write_report(summary, path)
    browser.get(path.as_uri())
    n_figs = len(B.P.all_figures(summary))
    drawn = WebDriverWait(browser, 60).until(
        lambda d: d.execute_script("return document.querySelectorAll('.js-plotly-plot .main-svg').length >= "
                                   f"{n_figs} ? document.querySelectorAll('.js-plotly-plot').length : 0"))
    assert drawn == n_figs
    assert "Paper vs ours" in browser.page_source and "10.1%" in browser.page_source
    browser.save_screenshot(str(SHOTS / "picaso_report.png"))

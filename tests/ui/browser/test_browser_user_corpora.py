"""Headless Chromium on the app over a database file alone (no samples, no labels): every
tab opens without an error and shows, at its top, what it cannot show on this corpus. Screenshots
are left in $PICASO_SCREENSHOT_DIR (default: the temp folder) to look at."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import app
from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import benchmarks as benchmarks_tab
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.ui.tabs import landscape as landscape_tab
from picaso_core.ui.tabs import soup as soup_tab
from picaso_core.session import load_resources
from conftest import BagOfWords, corpus_args, open_tab, served_app

SHOTS = Path(os.environ.get("PICASO_SCREENSHOT_DIR", tempfile.gettempdir()))
NOTES = {compose_tab.TITLE: "compose-limits", soup_tab.TITLE: "soup-decay-limits",
         landscape_tab.TITLE: "landscape-limits", attribution_tab.TITLE: "attribution-limits",
         benchmarks_tab.TITLE: "bench-limits"}


def test_every_tab_opens_on_a_database_file_alone_and_says_what_it_cannot_show(browser, tiny_model_dir,  # noqa: F811
                                                                                tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, database = corpus_args("database file only", tmp_path / "data")
    res = load_resources(str(tiny_model_dir), None, cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                         log=lambda msg: None, database=database)
    with served_app(app.build_app(res).queue()) as url:
        browser.get(url)
        wait = WebDriverWait(browser, 60)
        for title, note_id in NOTES.items():
            open_tab(browser, title, timeout=60)
            note = wait.until(lambda d: [e for e in d.find_elements(By.ID, note_id) if e.is_displayed()])
            assert "On this corpus" in note[0].text, title
            time.sleep(1)  # a page-load event that failed would show its error toast by now
            assert not [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".toast-body")], title
            browser.save_screenshot(str(SHOTS / f"picaso_user_corpus_{note_id}.png"))
        assert "No samples in the corpus" in browser.find_element(By.ID, "bench-limits").text

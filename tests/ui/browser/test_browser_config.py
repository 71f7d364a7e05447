"""Headless Chromium: the page built from the slimmed /config (picaso_core.ui.server.page_config) is the page
built from the full config Gradio embeds in `/`: on every tab the same text and the same visible
elements, and no error in the browser's console. The frontend fetches /config when the page carries
no config of its own (an embedded app, a page that reconnects), so the second load hides it.
Skips without chromium / chromedriver / selenium."""

from __future__ import annotations

import time

import pytest

from conftest import CHROMEDRIVER, CHROMIUM, open_tab

HIDE_EMBEDDED = ("Object.defineProperty(window, 'gradio_config', "
                 "{configurable: true, get() { return undefined; }, set(v) {}});")
# the visible page: its text, and each visible element's tag, id and classes (plotly's drawing by
# its tags alone, its ids are random; generated ids and Svelte's scoped classes left out; a hidden
# progress indicator keeps the kind of the last event that reached it, whichever of the page's load
# events that was)
SNAPSHOT_JS = """
const root = document.querySelector('.gradio-container'), out = [];
const plain = (s) => !/[0-9]/.test(s) && !/^(svelte|html)-/.test(s);
root.querySelectorAll('*').forEach(e => {
  if (e.offsetParent === null && !(e instanceof SVGElement) || e.closest('.hide')) return;
  if (e.closest('.js-plotly-plot')) { out.push(e.tagName); return; }
  out.push(`${e.tagName}#${plain(e.id) ? e.id : ''}.${[...e.classList].filter(plain).sort().join('.')}`);
});
return [root.innerText, out];
"""


def _page(url: str, hide_embedded: bool) -> tuple[dict, list]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="`pip install selenium`")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,2000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        if hide_embedded:
            driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HIDE_EMBEDDED})
        driver.get(url)
        WebDriverWait(driver, 120).until(EC.element_to_be_clickable((By.ID, "compose-run")))
        assert driver.execute_script("return !!window.gradio_config") is not hide_embedded
        pages = {}
        for name in [t.text for t in driver.find_elements(By.CSS_SELECTOR, "button[role=tab]")]:
            open_tab(driver, name)
            pages[name] = _settled(driver)
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        return pages, errors
    finally:
        driver.quit()


def _settled(driver, timeout: float = 60):
    """The tab's snapshot once two taken a second apart agree (its load events and figures done)."""
    last, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = driver.execute_script(SNAPSHOT_JS)
        if now == last:
            return now
        last = now
    return last


def test_the_page_from_the_slim_config_is_the_page_from_the_full_one(app_url):  # noqa: F811
    from pathlib import Path

    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        pytest.skip("headless Chromium not installed: `apt-get install -y chromium chromium-driver`")
    full, full_errors = _page(app_url, hide_embedded=False)
    slim, slim_errors = _page(app_url, hide_embedded=True)
    assert len(full) == 8 and list(slim) == list(full)
    assert slim_errors == full_errors == []
    for tab, (text, elements) in full.items():
        assert slim[tab][0] == text, tab
        assert slim[tab][1] == elements, tab

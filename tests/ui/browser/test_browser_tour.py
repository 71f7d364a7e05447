"""Talk mode in a real browser: walk the whole tour with Next (1400 px) and with the arrow keys
(800 px): each step's result shows within 2 s of the click, with no error toast and no clipped plot
title; `?step=5` opens step 5; a copied link of the Compose and the State soup tabs, opened in a
new page, restores their inputs.

The app runs in this process (conftest's tour_app: the tiny model, the facts corpus, the tour's
cache built by fake runners), so the walk measures the bar, not the runners.
"""

from __future__ import annotations

import time

import pytest

from picaso_core.ui.tour.steps import STEPS
from conftest import layout_problems

FIGS = ["tour-fig-0", "tour-fig-1"]


def _wait(driver, cond, timeout):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(cond)


def _title(driver) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return driver.find_element(By.ID, "tour-title").text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def _shown(driver, n: int) -> bool:
    """Step n's title, and its figure drawn (plotly's svg with the step's runner in its title)."""
    from selenium.webdriver.common.by import By

    if f"Step {n} of {len(STEPS)}" not in _title(driver):
        return False
    titles = driver.execute_script(
        "return [...document.querySelectorAll('#tour-fig-0 .gtitle')].map(t => t.textContent)")
    return any(STEPS[n - 1].run in t for t in titles) and driver.find_element(By.ID, "tour-text").is_displayed()


def _toasts(driver) -> list[str]:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    out = []
    for t in driver.find_elements(By.CSS_SELECTOR, "[data-testid=toast-body]"):
        try:
            if t.is_displayed():
                out.append(t.text)
        except StaleElementReferenceException:  # closing as we look: not shown
            pass
    return out


# Timed in the page, from the click (or key press) to step n's title and figure drawn: selenium's
# own round trips are not counted.
ARM_JS = """
const n = arguments[0], run = arguments[1];
window.__px = {t0: null, t1: null};
const start = () => { if (window.__px.t0 === null) window.__px.t0 = performance.now(); };
document.addEventListener('keydown', start, {capture: true, once: true});
document.addEventListener('click', start, {capture: true, once: true});
const check = () => {
  const title = document.getElementById('tour-title');
  const ok = title && title.textContent.includes('Step ' + n + ' of') &&
    [...document.querySelectorAll('#tour-fig-0 .gtitle')].some(t => t.textContent.includes(run));
  if (ok && window.__px.t0 !== null) window.__px.t1 = performance.now(); else requestAnimationFrame(check);
};
requestAnimationFrame(check);
"""


def _timed(driver, n: int, act) -> float:
    """Seconds from `act` (a click or a key press) to step n on screen; fails past 2 s."""
    driver.execute_script(ARM_JS, n, STEPS[n - 1].run)
    act()
    ms = _wait(driver, lambda d: d.execute_script("return window.__px.t1 !== null && window.__px.t1 - window.__px.t0"),
               15)
    assert ms < 2000, f"step {n} took {ms:.0f} ms to show"
    assert _shown(driver, n)
    return ms / 1000


def _walk(driver, step_forward) -> list[float]:
    seconds = []
    for n in range(2, len(STEPS) + 1):
        seconds.append(_timed(driver, n, step_forward))
        assert not _toasts(driver), (n, _toasts(driver))
        assert layout_problems(driver, FIGS) == [], n
    return seconds


@pytest.mark.parametrize("width", [1400, 800])
def test_walk_the_tour_with_next_and_the_arrow_keys(browser, tour_app, width):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.set_window_size(width, 1400)
    browser.get(tour_app)
    start = _wait(browser, lambda d: d.find_element(By.ID, "tour-start"), 60)
    _wait(browser, lambda d: start.is_enabled(), 30)
    # the page has loaded (its load events drew the first figures, so plotly.js is in): a speaker's
    # first click comes after that
    _wait(browser, lambda d: d.execute_script("return !!window.Plotly"), 60)
    first = _timed(browser, 1, start.click)  # one click from the page header
    if width == 1400:
        seconds = _walk(browser, lambda: browser.find_element(By.ID, "tour-next").click())
        _timed(browser, len(STEPS) - 1, browser.find_element(By.ID, "tour-prev").click)
    else:
        from selenium.webdriver.common.action_chains import ActionChains

        key = lambda k: ActionChains(browser).send_keys(k).perform()  # noqa: E731  (to the focused element)
        seconds = _walk(browser, lambda: key(Keys.ARROW_RIGHT))
        _timed(browser, len(STEPS) - 1, lambda: key(Keys.ARROW_LEFT))
        # with focus in a text box the arrows move its caret, not the tour (the second-to-last step opens COFFEE)
        assert STEPS[len(STEPS) - 2].tab == "coffee"
        box = browser.find_element(By.CSS_SELECTOR, "#coffee-seq-len input")
        browser.execute_script("arguments[0].scrollIntoView(); arguments[0].focus()", box)
        key(Keys.ARROW_RIGHT)
        time.sleep(0.5)
        assert f"Step {len(STEPS) - 1} of" in _title(browser)
    print(f"\n{width} px: first step {first:.2f} s, then " + " ".join(f"{s:.2f}" for s in seconds))


def test_step_link_and_copied_links_restore_the_view(browser, tour_app, tour_res):  # noqa: F811
    from selenium.webdriver.common.by import By

    browser.set_window_size(1400, 1400)
    browser.get(tour_app + "?step=5&__theme=dark")
    _wait(browser, lambda d: _shown(d, 5), 30)
    assert STEPS[4].title in _title(browser)
    # a dark page draws its plots with plotly's dark template, and every plot has a full-screen button
    font, button = browser.execute_script(
        "const g = document.querySelector('#tour-fig-0 .js-plotly-plot');"
        "return [g._fullLayout.font.color, !!g.querySelector('.modebar-btn[data-title=\"Full screen\"]')]")
    assert font.lower() == "#f2f5fa" and button  # plotly_dark's font colour

    # Compose: another example, k = 3, then Copy link
    browser.get(tour_app)
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#compose-query textarea").get_attribute("value"), 60)
    box = browser.find_element(By.CSS_SELECTOR, "#compose-query textarea")
    box.clear()
    box.send_keys("Who climbed Tarrix first?")
    link = _copy(browser)
    assert "tab=compose" in link and "query=Who+climbed+Tarrix+first%3F" in link and "example=" not in link
    browser.get(link)
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#compose-query textarea").get_attribute("value")
          == "Who climbed Tarrix first?", 15)
    time.sleep(1.0)  # the tab's own load event has run: the link's text still stands
    assert browser.find_element(By.CSS_SELECTOR, "#compose-query textarea").get_attribute("value") == \
        "Who climbed Tarrix first?"

    # State soup: layer 0, 3-D, then Copy link; a new page opens the soup tab with them
    browser.get(tour_app + "?tab=soup&layer=0&dim=3&demos=cat+%E2%86%92+cats")
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#soup-demos textarea").get_attribute("value")
          == "cat → cats", 15)
    link = _copy(browser)
    assert "tab=soup" in link and "layer=0" in link and "dim=3" in link
    browser.get(link)
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#soup-demos textarea").get_attribute("value")
          == "cat → cats", 15)
    assert browser.find_element(By.CSS_SELECTOR, "#soup-layer input[type=number]").get_attribute("value") == "0"
    three_d = browser.find_element(By.XPATH, "//label[normalize-space(.)='3-D']//input")
    assert three_d.is_selected()
    assert not _toasts(browser), _toasts(browser)


def _copy(browser) -> str:
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, "copy-link").click()
    return _wait(browser, lambda d: (d.find_element(By.CSS_SELECTOR, "#copy-link-url textarea, #copy-link-url input")
                                     .get_attribute("value") or "").startswith("http") and
                 d.find_element(By.CSS_SELECTOR, "#copy-link-url textarea, #copy-link-url input").get_attribute("value"),
                 10)

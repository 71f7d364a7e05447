"""The exported static tour (picaso_core/ui/tour/static.py) opened from file:// in Chromium opens the
step a link names, in the app's syntax `?step=N` as in its own `#step-N`, and says so when a link
names no step instead of silently showing step 1 (issue 48, item 7)."""

from __future__ import annotations

import pytest

from picaso_core.ui.tour.static import write_site
from picaso_core.ui.tour.steps import STEPS


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Three steps, each with its text and no figure (nothing to draw: the step switching is tested)."""
    steps = [(step, {"text": f"Text of step {n}.", "figures": [], "tables": []}) for n, step in enumerate(STEPS[:3], 1)]
    return write_site(tmp_path_factory.mktemp("static_site"), steps).as_uri()


def shown(driver) -> tuple[str, str]:
    """(the id of the step on screen, the notice's text when it is shown)."""
    on = driver.execute_script("return document.querySelector('.step.on').id")
    notice = driver.execute_script("const n = document.getElementById('notice'); return n.hidden ? '' : n.textContent")
    return on, notice


def test_a_link_opens_its_step_and_a_link_to_no_step_says_so(browser, site):
    """One browser for every case (a Chromium start is seconds on a busy machine)."""
    for suffix, step in (("?step=2", "step-2"), ("?step=3", "step-3"), ("#step-2", "step-2"), ("", "step-1")):
        browser.get(site + suffix)
        assert shown(browser) == (step, ""), suffix
    for suffix, asked in (("?step=7", "7"), ("?step=x", "x"), ("?step=0", "0"), ("#step-9", "9")):
        browser.get("about:blank")  # a new document: only the hash differs from the last address
        browser.get(site + suffix)
        on, notice = shown(browser)
        assert on == "step-1", suffix
        assert f'No step "{asked}"' in notice and "from 1 to 3" in notice, (suffix, notice)

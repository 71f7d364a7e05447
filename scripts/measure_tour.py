"""Time every step of the tour in a real browser, from the click to the step's result on screen:
cached (Start / Next) and live (Run it live), and save a screenshot of chosen steps.

    python app.py --port 7881 &                       # the app, its tour built (python -m picaso_core.ui.tour build)
    python scripts/measure_tour.py http://127.0.0.1:7881/ [--width 1400] [--shots 1,5,7 --shot-dir docs/img]

Needs headless Chromium and chromedriver (as the browser tests). Prints one row per step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picaso_core.light.defaults import count  # noqa: E402
from picaso_core.ui.tour.steps import STEPS  # noqa: E402

# Timed in the page: from the click to the title of step n (for a live run: saying "computed live")
# with its figure drawn: plotly's afterplot event on the bar's first plot, a new plot element, or a
# figure present under a changed title.
ARM_JS = """
const n = arguments[0], live = arguments[1];
const gd = () => document.querySelector('#tour-fig-0 .js-plotly-plot');
const before = gd();
const old = (document.getElementById('tour-title') || {}).textContent || '';
window.__px = {t0: null, t1: null, drawn: false};
if (before && before.on) before.on('plotly_afterplot', () => { if (window.__px.t0 !== null) window.__px.drawn = true; });
document.addEventListener('click', () => { window.__px.t0 = performance.now(); }, {capture: true, once: true});
const check = () => {
  const t = document.getElementById('tour-title'), g = gd();
  // plotly skips an identical figure (steps 1 and 2 share theirs; a live run may give the cached
  // numbers), so a drawn figure counts too once the title, sent in the same update, has changed
  const drawn = window.__px.drawn || (g && g !== before && g.data) || (g && g.data && t && !t.textContent.includes(old));
  const ok = t && t.textContent.includes('Step ' + n + ' of') && (!live || t.textContent.includes('computed live'))
    && drawn;
  if (ok && window.__px.t0 !== null) window.__px.t1 = performance.now(); else requestAnimationFrame(check);
};
requestAnimationFrame(check);
"""


def step_list(text: str) -> str:
    """argparse `type=` of --shots: tour step numbers, comma-separated (a bad one is one `error:` line)."""
    if not all(s.isdigit() and 1 <= int(s) <= len(STEPS) for s in text.split(",") if s):
        raise argparse.ArgumentTypeError(f"{text!r}: give step numbers from 1 to {len(STEPS)}, e.g. 1,5,7")
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("--width", type=count(1), default=1400)
    p.add_argument("--live", action=argparse.BooleanOptionalAction, default=True, help="also time Run it live")
    p.add_argument("--shots", type=step_list, default="", help="steps to screenshot, e.g. 1,5,7")
    p.add_argument("--shot-dir", default="docs/img")
    args = p.parse_args()

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--window-size={args.width},1300"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    shots = {int(s) for s in args.shots.split(",") if s}

    def timed(n: int, button: str, live: bool = False, timeout: float = 300) -> float:
        d.execute_script(ARM_JS, n, live)
        d.find_element(By.ID, button).click()
        ms = WebDriverWait(d, timeout, poll_frequency=0.05).until(
            lambda d: d.execute_script("return window.__px.t1 !== null && window.__px.t1 - window.__px.t0"))
        return ms / 1000

    try:
        d.get(args.url)
        WebDriverWait(d, 120).until(lambda d: d.find_element(By.ID, "tour-start").is_enabled())
        time.sleep(3)
        print(f"{'step':>4}  {'cached s':>8}  {'live s':>7}  title")
        for n, step in enumerate(STEPS, 1):
            cached = timed(n, "tour-start" if n == 1 else "tour-next")
            if n in shots:
                Path(args.shot_dir).mkdir(parents=True, exist_ok=True)
                d.execute_script("window.scrollTo(0, document.getElementById('px-talk').offsetTop - 10)")
                time.sleep(1.0)
                d.save_screenshot(str(Path(args.shot_dir) / f"tour-{n}.png"))
            live = timed(n, "tour-live", live=True) if args.live else float("nan")
            print(f"{n:>4}  {cached:8.2f}  {live:7.2f}  {step.title}", flush=True)
    finally:
        d.quit()


if __name__ == "__main__":
    main()

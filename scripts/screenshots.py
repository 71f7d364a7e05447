"""The README's screenshots, taken from the running app in headless Chromium.

    python scripts/screenshots.py                 # starts `python app.py` on a free port, writes docs/img/*.png
    python scripts/screenshots.py --url http://127.0.0.1:7860/ --out /tmp/shots

Each tab is opened as a visitor opens it, its one-click example run where it has one, and the
window shot at 1400 px, then scaled down and palette-reduced to tens of kB. Needs Debian's chromium
and chromium-driver, and selenium (requirements-dev.txt).
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from picaso_core.light.defaults import count  # noqa: E402

# (file name, tab title, the button clicked to show the tab's phenomenon or None, seconds it may take,
#  the element shot at the top of the window or None for the tab's top). A streaming run (COFFEE's live
#  training) shows no progress overlay: its shot waits the whole time.
SHOTS = [
    ("compose", "Compose & compare", "compose-run", 60, "compose-results"),
    ("soup", "State soup", "soup-run", 120, None),
    ("landscape", "Loss landscape", "landscape-run", 120, None),
    ("attribution", "Attribution", "attribution-run", 60, "attribution-bars"),
    ("benchmarks", "Benchmarks", None, 0, None),
    ("finetune", "Fine-tuning", None, 0, None),
    ("primer", "Primer", None, 0, None),
    ("coffee", "COFFEE lab", "coffee-run", 45, None),
]

STREAMING = {"coffee"}


def start_app() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 240
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("app.py did not start")
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)


def browser(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars", "--disable-background-networking"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def idle(driver, timeout: float) -> None:
    """Wait until Gradio shows no pending output (its progress/eta overlays are gone)."""
    deadline = time.monotonic() + timeout
    time.sleep(1.0)
    while time.monotonic() < deadline:
        busy = driver.execute_script(
            "return [...document.querySelectorAll('.eta-bar, .progress-text, .meta-text-center')]"
            ".filter(e => e.offsetParent !== null).length")
        if not busy:
            return
        time.sleep(0.5)


def shrink(png: bytes, width: int, colors: int) -> bytes:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    img = img.resize((width, round(img.height * width / img.width)), Image.LANCZOS)
    out = io.BytesIO()
    img.quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(out, format="PNG", optimize=True)
    return out.getvalue()


def colors(text: str) -> int:
    """argparse `type=` of --colors: a PNG palette's size, 1 to 256."""
    n = count(1)(text)
    if n > 256:
        raise argparse.ArgumentTypeError(f"{n}: a PNG palette holds at most 256 colours")
    return n


def shot(name: str) -> str:
    """argparse `type=` of --only: a name of SHOTS."""
    if name not in {s[0] for s in SHOTS}:
        raise argparse.ArgumentTypeError(f"unknown shot {name!r}: choose from {', '.join(s[0] for s in SHOTS)}")
    return name


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running app (default: start python app.py on a free port)")
    p.add_argument("--out", default=str(ROOT / "docs" / "img"))
    p.add_argument("--width", type=count(1), default=720, help="width of the saved PNGs (px)")
    p.add_argument("--colors", type=colors, default=96)
    p.add_argument("--only", nargs="*", type=shot, help="file names to take (default: all)")
    a = p.parse_args(argv)
    from selenium.webdriver.common.by import By

    proc, url = (None, a.url) if a.url else start_app()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    driver = browser(1400, 1000)
    try:
        driver.get(url)
        time.sleep(3)
        for name, title, button, wait, anchor in SHOTS:
            if a.only and name not in a.only:
                continue
            tab = next(b for b in driver.find_elements(By.CSS_SELECTOR, "button[role=tab]") if b.text.strip() == title)
            tab.click()
            time.sleep(1.5)
            if button:
                el = driver.find_element(By.ID, button)
                driver.execute_script("arguments[0].click()", el)
                idle(driver, wait)
                if name in STREAMING:
                    time.sleep(wait)
            top = driver.find_element(By.ID, anchor) if anchor else tab
            driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", top)
            driver.execute_script("window.scrollBy(0, -8)")
            time.sleep(0.5)
            data = shrink(driver.get_screenshot_as_png(), a.width, a.colors)
            (out / f"{name}.png").write_bytes(data)
            print(f"{name}.png  {len(data) / 1024:.0f} kB")
    finally:
        driver.quit()
        if proc:
            proc.terminate()
            proc.wait(15)


if __name__ == "__main__":
    main()

"""`python -m picaso_core.ui.tour build | export`: the tour's command line (its work is in cache.py).

Light on purpose (no gradio, no torch): __main__.py reads the arguments with it before importing the
tour's cache, so `--help` and a bad value (an --app-url that is no address) answer at once.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from picaso_core.light.defaults import DEFAULT_CACHE

DESCRIPTION = "Talk mode: a guided tour through the PICASO story, every step shown at once from precomputed results."


def _app_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"--app-url must start with http:// or https://, got {text!r}")
    return text


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m picaso_core.ui.tour", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)
    for name, what in (("build", "precompute every step's results into the cache folder"),
                       ("export", "write the tour as a static site (no Python, no network needed to open it)")):
        q = sub.add_parser(name, help=what, description=what)
        if name == "export":
            q.add_argument("dir", help="output folder (index.html and plotly.min.js)")
            q.add_argument("--app-url", type=_app_url, default=None,
                           help="the live app's address: each step links to its view there")
        q.add_argument("--cache-dir", default=os.environ.get("PICASO_CACHE", str(DEFAULT_CACHE)),
                       help="the app's cache folder (app.py --cache-dir) [PICASO_CACHE]")
        q.add_argument("--model", default="demo", help="as app.py --model")
        q.add_argument("--corpus", default="demo", help="as app.py --corpus")
        if name == "build":
            q.add_argument("--force", action="store_true", help="recompute every step, even those cached")
    return p.parse_args(argv)

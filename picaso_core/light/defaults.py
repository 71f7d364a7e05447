"""What a command's flags need before anything loads: the session's defaults (where state stores are
kept, the corpus split, a request's token budget, the weights' dtypes) and `count`, the commands'
argparse type for a whole number.

Tier 0 and light on purpose (imports nothing of picaso_core, no torch): app.py's `--help` and a
mistyped flag read these and answer at once (picaso_core.session, which imports torch, re-exports
them).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["DEFAULT_CACHE", "DEFAULT_MAX_TOKENS", "DEFAULT_SPLIT", "DTYPES", "count", "number"]

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "picaso_explorer"
DEFAULT_MAX_TOKENS = 4096  # total context tokens one request may compose (CPU time of Concat)
DEFAULT_SPLIT = "test"
DTYPES = ("float32", "bfloat16", "float16")  # load_resources(dtype=), app.py --dtype


def count(least: int = 0):
    """argparse `type=` for a whole number of at least `least`: a bad value is argparse's one `error:`
    line at parse time, before any model loads."""
    def whole(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"{n}: expected {least} or more")
        return n

    whole.__name__ = "count"  # argparse names the type in "invalid count value" messages
    return whole


def number(least: float | None = None, most: float | None = None, *, above: float | None = None,
           below: float | None = None):
    """argparse `type=` for a number from `least` to `most` (or more than `above`, under `below`): like
    `count`, a bad value is one `error:` line at parse time."""
    def real(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
        want = {f"{least} or more": least is not None and x < least,
                f"at most {most}": most is not None and x > most,
                f"more than {above}": above is not None and x <= above,
                f"under {below}": below is not None and x >= below}  # bound -> broken, in the order of the arguments
        if x != x or any(want.values()):
            bounds = [w for w, b in zip(want, (least, most, above, below)) if b is not None]
            raise argparse.ArgumentTypeError(f"{text}: expected a number {' and '.join(bounds)}")
        return x

    real.__name__ = "number"  # argparse names the type in "invalid number value" messages
    return real

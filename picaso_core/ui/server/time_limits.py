"""Each model-bound job's wall-clock limit, per endpoint: `--time-limit NAME=SECONDS` (repeatable)
and PICASO_TIME_LIMITS="compose=30,landscape=60" (a flag wins over the variable, the variable over
the defaults). NAME is an endpoint's api_name without '/', or `default`: given, it replaces the
built-in limit of every endpoint not named, and it is what a model-bound event not in the table
gets. SECONDS: a positive number, or 0 for no limit. The jobs themselves are limited in jobs.py.

Light on purpose (no torch, no gradio): app.py's `--help` and a bad value answer at once.
"""

from __future__ import annotations

import argparse
import math
import os

ENV = "PICASO_TIME_LIMITS"
# The defaults: above the slowest request the input caps allow on the demo on 2 cores (measured by
# bench/caps_worst.py, docs/serving.md "Bounded work"), low enough that one request cannot hold a
# public Space's worker for long. The training endpoints run for as long as their own budget says.
DEFAULT_S = 60.0
DEFAULT_LIMITS = {
    "default": DEFAULT_S,
    "compose": DEFAULT_S, "generate_answer": DEFAULT_S,
    "attribute": DEFAULT_S, "attribute_span": DEFAULT_S, "attribute_whole_answer": DEFAULT_S,
    "attribution_precision": 120.0,
    "landscape": DEFAULT_S,
    "soup_map": DEFAULT_S, "soup_retrieve": DEFAULT_S, "soup_retrieval": DEFAULT_S, "soup_mixing": DEFAULT_S,
    "soup_two_task": DEFAULT_S, "soup_decay": DEFAULT_S,
    "primer_model": DEFAULT_S, "primer_attention": DEFAULT_S, "primer_complexity": DEFAULT_S,
    "block_walk": DEFAULT_S, "block_walk_view": DEFAULT_S,
    "benchmarks": 120.0,
    "coffee_train": 420.0,  # its own time budget is at most 300 s of training (coffee.MAX_SECONDS), then evaluation
    "coffee_ih0": 120.0,
    "finetune": 300.0,
    "tour_step": DEFAULT_S,
}
NAMES = tuple(DEFAULT_LIMITS)


def parse_limit(item: str) -> tuple[str, float]:
    """One NAME=SECONDS; ValueError (one line naming the fix) for anything else."""
    name, sep, value = str(item).partition("=")
    name = name.strip().lstrip("/")
    if not sep or not name:
        raise ValueError(f"{item!r}: expected NAME=SECONDS, e.g. compose=30")
    if name not in DEFAULT_LIMITS:
        raise ValueError(f"{item!r}: unknown endpoint {name!r}; one of default, {', '.join(NAMES[1:])}")
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"{item!r}: SECONDS must be a number of seconds, 0 for no limit")
    return name, seconds


def flag_type(item: str) -> tuple[str, float]:
    """argparse's `type` for --time-limit: its error is argparse's one `error:` line."""
    try:
        return parse_limit(item)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def from_env(env: dict[str, str]) -> list[tuple[str, float]]:
    """PICASO_TIME_LIMITS as (name, seconds) pairs: comma-separated NAME=SECONDS."""
    text = env.get(ENV) or ""
    try:
        return [parse_limit(item) for item in text.split(",") if item.strip()]
    except ValueError as e:
        raise ValueError(f"{ENV}: {e}") from None


def add_argument(p: argparse.ArgumentParser) -> None:
    """app.py's --time-limit flag (repeatable)."""
    p.add_argument("--time-limit", action="append", type=flag_type, default=[], metavar="NAME=SECONDS",
                   help="wall-clock limit of one job of an endpoint (NAME: its api_name, or default for every "
                   "model-bound job not named; 0: none); repeatable; a job past it is stopped "
                   f"(docs/serving.md, 'Bounded work') [{ENV}=\"compose=30,landscape=60\"]")


def time_limits(flags: list[tuple[str, float]] = (), env: dict[str, str] | None = None) -> dict[str, float | None]:
    """Every endpoint's limit in seconds (None: no limit): the variable's (env, default os.environ)
    over the defaults, the flags' over both. A `default` given there replaces the built-in limit of
    every endpoint not named."""
    given = dict(from_env(os.environ if env is None else env))
    given.update(dict(flags))
    base = {name: given["default"] for name in NAMES} if "default" in given else dict(DEFAULT_LIMITS)
    base.update(given)
    return {name: (s or None) for name, s in base.items()}

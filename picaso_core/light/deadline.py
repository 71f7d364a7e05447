"""A cooperative wall-clock limit for the work of one thread: the server sets a deadline around a job
(`until`), and the loops that run long call `check()` at their safe points (the engine's per-layer
loop, a training step, a grid point, an ablation), which raises `JobTimeout` once the deadline has
passed. Nothing is interrupted from outside: the job unwinds from a point where stopping leaves
nothing half-written (no cache entry, no store shard), and its worker is free for the next call.

Tier 0: imports nothing of picaso_core, so the engine can call `check()`. With no deadline set (a
script, a test, the server's background work) `check()` is one thread-local read.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class _Local(threading.local):
    at: float | None = None  # on time.monotonic's clock; None: no deadline (class defaults: no slow miss)
    limit_s: float | None = None


_local = _Local()


class JobTimeout(TimeoutError):
    """The current thread's job ran past its deadline (raised by `check()` at a safe point)."""

    def __init__(self, limit_s: float | None = None):
        self.limit_s = limit_s
        super().__init__(f"ran past its {limit_s:g} s limit" if limit_s is not None else "ran past its time limit")


def check() -> None:
    """Raise JobTimeout if this thread's deadline has passed; nothing when none is set."""
    at = _local.at
    if at is not None and time.monotonic() > at:
        raise JobTimeout(_local.limit_s)


def remaining() -> float | None:
    """Seconds left before this thread's deadline (negative once past), or None with no deadline."""
    at = _local.at
    return None if at is None else at - time.monotonic()


def current() -> tuple[float | None, float] | None:
    """This thread's (limit in s, deadline on time.monotonic's clock), or None: to carry the deadline
    into threads a job starts (`until(limit_s, at)` there)."""
    at = _local.at
    return None if at is None else (_local.limit_s, at)


@contextmanager
def until(limit_s: float | None = None, at: float | None = None):
    """Within the block, `check()` on this thread raises JobTimeout once `limit_s` seconds have passed
    (or once time.monotonic() passes `at`, for a job's later steps or the threads it starts; then
    `limit_s` only names the limit in the message). None for both: no deadline. A deadline set
    outside stays where it is earlier; the previous one is restored on exit."""
    if at is None and limit_s is not None:
        at = time.monotonic() + limit_s
    outer = (_local.at, _local.limit_s)
    if at is not None and (outer[0] is None or at < outer[0]):
        _local.at, _local.limit_s = at, limit_s
    try:
        yield
    finally:
        _local.at, _local.limit_s = outer

"""The serving settings app.py's flags read (docs/serving.md): workers, queue size, sessions, the
composed-state cache, torch threads; their defaults, the PICASO_* variables under the flags, and
their checks.

Light on purpose (no torch, no gradio): `python app.py --help` and a bad value answer at once.
picaso_core.ui.server.serving re-exports every name here.
"""

from __future__ import annotations

import os

from picaso_core.analysis.compose_cache import DEFAULT_BUDGET  # torch-free (its compositions import torch on use)

DEFAULT_WORKERS = 2  # 2 cores: see docs/serving.md for the measurement
DEFAULT_QUEUE_SIZE = 16  # waiting events; at ~0.5 s a job and 2 workers: a few seconds' wait at most
DEFAULT_SESSIONS = 200  # sessions whose state (history, per-session config) the server keeps
DEFAULT_THREADS = 0  # torch threads per job; 0: the cores shared out among the workers (see job_threads)


def settings(env: dict[str, str] | None = None) -> dict:
    """The serving settings from the environment (app.py's flags override them)."""
    env = dict(os.environ if env is None else env)

    def read(name: str, kind, default):
        try:
            return kind(env.get(name) or default)
        except ValueError:
            expected = "a whole number" if kind is int else "a number"
            raise ValueError(f"{name}={env[name]!r}: expected {expected}") from None

    return dict(workers=read("PICASO_WORKERS", int, DEFAULT_WORKERS),
                queue_size=read("PICASO_QUEUE_SIZE", int, DEFAULT_QUEUE_SIZE),
                max_sessions=read("PICASO_MAX_SESSIONS", int, DEFAULT_SESSIONS),
                cache_mb=read("PICASO_COMPOSE_CACHE_MB", float, DEFAULT_BUDGET / 2**20),
                threads=read("PICASO_THREADS", int, DEFAULT_THREADS))


def check(workers: int, queue_size: int, max_sessions: int, cache_mb: float = 0.0, threads: int = 0) -> None:
    if threads < 0:
        raise ValueError(f"--threads must be 0 (the cores shared out among the workers) or more, got {threads}")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if queue_size < 0:
        raise ValueError(f"--queue-size must be 0 (no bound) or more, got {queue_size}")
    if max_sessions < 1:
        raise ValueError(f"--max-sessions must be at least 1, got {max_sessions}")
    check_cache_mb(cache_mb)


def check_cache_mb(cache_mb: float) -> None:
    """--compose-cache-mb: the Compose tab's composed-state cache in MiB (ui/tabs/compose_runs.py)."""
    if cache_mb < 0:
        raise ValueError(f"--compose-cache-mb must be 0 (no cache) or more, got {cache_mb}")

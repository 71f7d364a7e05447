"""Every model-bound job under its endpoint's wall-clock limit (time_limits.py), applied in one place:
after the app is built, each event of the model pool (and the tour's /tour_step) has its function
wrapped so that it runs under a cooperative deadline (picaso_core.light.deadline). The loops that run long
call `deadline.check()` at their safe points (the engine's per-layer loop, a training step, a grid
point, an ablation); past the limit the job unwinds from there, its worker is free for the next
call, and the visitor reads one line ("stopped: /landscape ran past its 60 s limit; ..."), which
is also the one line in the log. Background work (the tour's build, the warm-up) runs outside any
event, so no limit applies to it.

The wrapper keeps the function's kind (plain, generator, async) and, through functools.wraps'
__wrapped__, the signature Gradio reads for gr.Progress and the API's parameters.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time

import gradio as gr

from picaso_core.light import deadline
from picaso_core.light.deadline import JobTimeout
from picaso_core.ui.server.gradio_compat import wrap_handler
from picaso_core.ui.server.time_limits import DEFAULT_LIMITS, time_limits

log = logging.getLogger("picaso_explorer")
TOUR_MODULE = "picaso_core.ui.tour.controls"  # the tour's live run: a private event with no name of its own


def limit_name(block_fn) -> str:
    """The time_limits name of an event: its api_name where the table has it, the tour's live run as
    tour_step, else `default`."""
    if block_fn.api_name in DEFAULT_LIMITS:
        return block_fn.api_name
    if getattr(block_fn.fn, "__module__", "") == TOUR_MODULE:
        return "tour_step"
    return "default"


def limit_jobs(demo, limits: dict[str, float | None] | None = None, pool: str = "model") -> dict[str, float | None]:
    """Wrap the function of every event of `pool` (and /tour_step, answered outside the queue) in
    `demo` with its limit: limits[name] (time_limits(); None: no limit). Returns {api_name: seconds}
    of the events wrapped. Call once, after every event is registered."""
    limits = time_limits() if limits is None else limits
    done = {}
    for block_fn in demo.fns.values():
        if block_fn.fn is None or getattr(block_fn.fn, "__limited__", False):
            continue
        if block_fn.concurrency_id != pool and block_fn.api_name != "tour_step":
            continue
        name = limit_name(block_fn)
        seconds = limits.get(name, limits.get("default"))
        if seconds:
            wrap_handler(block_fn, lambda fn: limited(fn, block_fn.api_name or name, seconds))  # the Gradio seam
        done[block_fn.api_name or name] = seconds
    return done


def stopped(endpoint: str, seconds: float) -> gr.Error:
    """The visitor's one line for a job stopped at its limit, logged as the one line in the log."""
    message = (f"stopped: /{endpoint} ran past its {seconds:g} s limit; ask for less (fewer contexts, steps or "
               f"samples), or run the app yourself with a longer one (--time-limit {endpoint}=SECONDS)")
    log.warning("%s", message)
    return gr.Error(message, print_exception=False)


def limited(fn, endpoint: str, seconds: float):
    """`fn` under a deadline of `seconds` from its call (a generator: from its first step, each step
    run under what is left); JobTimeout from a safe point becomes `stopped`'s gr.Error."""
    if inspect.isasyncgenfunction(fn):
        @functools.wraps(fn)
        async def run(*args, **kwargs):
            at, agen = time.monotonic() + seconds, fn(*args, **kwargs)
            try:
                while True:
                    try:
                        item = await asyncio.wait_for(agen.__anext__(), max(0.0, at - time.monotonic()))
                    except StopAsyncIteration:
                        return
                    except asyncio.TimeoutError:
                        raise stopped(endpoint, seconds) from None
                    yield item
            finally:
                await agen.aclose()
    elif inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run(*args, **kwargs):
            try:
                return await asyncio.wait_for(fn(*args, **kwargs), seconds)
            except asyncio.TimeoutError:
                raise stopped(endpoint, seconds) from None
    elif inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            # each step may run on another thread of the pool: the deadline is set around every step
            at = time.monotonic() + seconds
            gen = fn(*args, **kwargs)
            try:
                while True:
                    with deadline.until(seconds, at):
                        try:
                            item = next(gen)
                        except StopIteration:
                            return
                        except JobTimeout:
                            raise stopped(endpoint, seconds) from None
                    yield item
            finally:
                gen.close()
    else:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with deadline.until(seconds):
                try:
                    return fn(*args, **kwargs)
                except JobTimeout:
                    raise stopped(endpoint, seconds) from None
    run.__limited__ = True
    return run

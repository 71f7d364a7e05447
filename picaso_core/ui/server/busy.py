"""Refusing at once when the queue is full, in the app's words: "busy: N jobs ahead, try again in
about S s".

Gradio refuses a join beyond the queue's `max_size` only inside its /queue/join route, after
FastAPI has parsed and validated the body, resolved the route's login dependencies (one of them a
hop to the thread pool) and built the request's internal copy; with two model-bound jobs holding
the interpreter, a burst's joins went through that route one after another, the last refused
2-4 s after it was sent (bench/burst.py, docs/serving.md). `BusyGate` is an ASGI
middleware in front of all of that: a POST to .../queue/join while the queue is full gets its 503
from the gate without the body being read. It refuses when Gradio's push would (the queue holds
`max_size` events) or when the places left are all taken by joins the gate let through whose route
has not answered yet: in a burst into a queue with room, the joins beyond its room would otherwise
all pass the gate at once and wait seconds for Gradio's route to refuse them (bench/burst.py
--queued 0). A refused join never had a place: each one counted is a join already on its way in.

What the clients show: the 503's `detail` is the app's message (and `Retry-After` its S);
Gradio's browser frontend and gradio_client word a 503 themselves ("This application is currently
busy. Please try again." / QueueError "Queue is full! Please try again."), whatever the detail.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import deque

BUSY = "busy: {ahead} jobs ahead, try again in about {wait} s"
KEEP = 32  # recent model-bound jobs whose durations estimate the wait


class Load:
    """What the queue is doing, for the busy message: the model pool's jobs running (their start)
    and the durations of its last `KEEP` jobs, timed around Gradio's per-job coroutine
    (`Queue.process_events`, the one place every job runs through, generators to their end)."""

    def __init__(self, queue, workers: int, pool: str):
        self.queue, self.workers, self.pool = queue, workers, pool
        self.durations: deque[float] = deque(maxlen=KEEP)
        self.running: dict[int, float] = {}
        self.joining = 0  # joins let through by the gate whose route has not answered yet
        run = queue.process_events

        async def timed(events, batch, begin_time, fn, *args, **kwargs):
            if getattr(fn, "concurrency_id", None) != self.pool:  # light events say nothing of the wait
                return await run(events, batch, begin_time, fn, *args, **kwargs)
            key, t0 = object(), time.monotonic()
            self.running[id(key)] = t0
            try:
                return await run(events, batch, begin_time, fn, *args, **kwargs)
            finally:
                del self.running[id(key)]
                self.durations.append(time.monotonic() - t0)

        queue.process_events = timed

    def full(self) -> bool:
        """Gradio's own test in Queue.push, with the joins on their way in counted as the places
        they will take: a join now would be refused."""
        size = self.queue.max_size
        return size is not None and len(self.queue) + self.joining >= size

    def message(self) -> tuple[str, int]:
        """The busy message and its S: the jobs ahead (waiting, joining, running) times a recent
        job's duration (the median of the last KEEP; before any ended, the longest running so far),
        shared among the workers; at least 1 s."""
        now = time.monotonic()
        running = list(self.running.values())
        ahead = len(self.queue) + self.joining + len(running)
        typical = (statistics.median(self.durations) if self.durations
                   else max((now - t for t in running), default=1.0))
        wait = max(1, math.ceil(ahead * typical / max(1, self.workers)))
        return BUSY.format(ahead=ahead, wait=wait), wait


class BusyGate:
    """ASGI middleware: POST .../queue/join while `load.full()` is answered 503 with the app's
    message at once; everything else passes through untouched."""

    def __init__(self, app, load: Load):
        self.app, self.load = app, load

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope["path"].endswith("/queue/join"):
            return await self.app(scope, receive, send)
        load = self.load
        if load.full():
            text, wait = load.message()
            body = json.dumps({"detail": text}).encode()
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                    (b"retry-after", str(wait).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        load.joining += 1
        counted = True

        def answered() -> None:  # the route answered: its event is in the queue (or was refused)
            nonlocal counted
            if counted:
                counted = False
                load.joining -= 1

        async def send_then_release(message):
            if message["type"] == "http.response.start":
                answered()
            await send(message)

        try:
            await self.app(scope, receive, send_then_release)
        finally:
            answered()

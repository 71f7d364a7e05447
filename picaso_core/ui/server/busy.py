"""Refusing at once when the queue is full, in the app's words: "busy: N jobs ahead, try again in
about S s".

Gradio refuses a join beyond the queue's `max_size` only inside its /queue/join route, after
FastAPI has parsed and validated the body, resolved the route's login dependencies (one of them a
hop to the thread pool) and built the request's internal copy; with two model-bound jobs holding
the interpreter, a burst's joins went through that route one after another, the last refused
2-4 s after it was sent (bench/burst.py, docs/serving.md). `BusyGate` is an ASGI
middleware in front of all of that: a POST to .../queue/join while the queue is full gets its 503
from the gate, which reads only the join's small body. It refuses when Gradio's push would (the queue holds
`max_size` events) or when the places left are all taken by joins the gate let through whose route
has not answered yet: in a burst into a queue with room, the joins beyond its room would otherwise
all pass the gate at once and wait seconds for Gradio's route to refuse them (bench/burst.py
--queued 0). A refused join never had a place: each one counted is a join already on its way in.

What the clients show: the 503's `detail` is the app's message (and `Retry-After` its S);
Gradio's browser frontend and gradio_client word a 503 themselves ("This application is currently
busy. Please try again." / QueueError "Queue is full! Please try again."), whatever the detail.

Only the model pool's joins are bounded (`--queue-size` model-bound events waiting): Gradio's own
`max_size` counts every waiting event, light ones too, so a room stepping the tour (a light event
each) filled it and was refused "busy" though none of its events needed a worker (bench/room.py).
So Gradio's queue is unbounded and the gate reads the join's small body (its `fn_index`) to tell a
model-bound event (`concurrency_id` the pool's) from a light one, which always goes through.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import deque

from picaso_core.ui.server.gradio_compat import time_process_events

BUSY = "busy: {ahead} jobs ahead, try again in about {wait} s"
KEEP = 32  # recent model-bound jobs whose durations estimate the wait


class Load:
    """What the model pool is doing, for the busy message and the bound: its jobs waiting and
    running (their start) and the durations of its last `KEEP` jobs, timed around Gradio's per-job
    coroutine (`Queue.process_events`, the one place every job runs through, generators to their
    end: gradio_compat.time_process_events). `size`: the most model-bound events waiting (None: no bound)."""

    def __init__(self, queue, workers: int, pool: str, size: int | None = None):
        self.queue, self.workers, self.pool, self.size = queue, workers, pool, size
        self.durations: deque[float] = deque(maxlen=KEEP)
        self.running: dict[int, float] = {}
        self.joining = 0  # model-bound joins let through by the gate whose route has not answered yet
        time_process_events(queue, self)  # running and durations kept around each model-bound job (the Gradio seam)

    def bound(self, fn) -> bool:
        """Whether the event `fn` runs in the model pool (and so counts against `size`)."""
        return getattr(fn, "concurrency_id", None) == self.pool

    def joins_pool(self, body: bytes) -> bool:
        """Whether a join's body names a model-bound event; a body that is not a join's (not JSON,
        an unknown fn_index) is left to Gradio's route, which refuses or places it as it does."""
        try:
            fn_index = json.loads(body).get("fn_index")
        except (ValueError, AttributeError):
            return False
        fns = getattr(self.queue.blocks, "fns", {})
        return isinstance(fn_index, int) and self.bound(fns.get(fn_index))

    def waiting(self) -> int:
        """The model-bound events in the queue."""
        pool = self.queue.event_queue_per_concurrency_id.get(self.pool)
        return len(pool.queue) if pool is not None else 0

    def full(self) -> bool:
        """Gradio's test in Queue.push for the pool's events alone, with the joins on their way in
        counted as the places they will take: a model-bound join now would be refused."""
        return self.size is not None and self.waiting() + self.joining >= self.size

    def message(self) -> tuple[str, int]:
        """The busy message and its S: the jobs ahead (waiting, joining, running) times a recent
        job's duration (the median of the last KEEP; before any ended, the longest running so far),
        shared among the workers; at least 1 s."""
        now = time.monotonic()
        running = list(self.running.values())
        ahead = self.waiting() + self.joining + len(running)
        typical = (statistics.median(self.durations) if self.durations
                   else max((now - t for t in running), default=1.0))
        wait = max(1, math.ceil(ahead * typical / max(1, self.workers)))
        return BUSY.format(ahead=ahead, wait=wait), wait


class BusyGate:
    """ASGI middleware: POST .../queue/join of a model-bound event while `load.full()` is answered
    503 with the app's message at once; everything else passes through untouched (a join's body,
    read here to tell its event, is handed on as it came)."""

    def __init__(self, app, load: Load):
        self.app, self.load = app, load

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope["path"].endswith("/queue/join"):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending its body
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        load = self.load
        if not load.joins_pool(body):  # a light event: never waits for a place in the pool
            return await self.app(scope, replay, send)
        if load.full():
            text, wait = load.message()
            reply = json.dumps({"detail": text}).encode()
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(reply)).encode()), (b"retry-after", str(wait).encode())]})
            await send({"type": "http.response.body", "body": reply})
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
            await self.app(scope, replay, send_then_release)
        finally:
            answered()

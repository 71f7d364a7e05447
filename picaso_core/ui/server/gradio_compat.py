"""The Gradio seam: the one place where the app replaces something of Gradio's own at run time.

Each replacement below is a function, written against Gradio 6.31 for a measured reason (its
docstring gives both), and called by the module that needs it: serving.py (`say_busy_on_push`,
`patient_localhost_check`, `shared_session_config`), busy.py (`time_process_events`), the tour's
controls (`skip_unchanged_postprocess`) and the app as it is built (`check_input_count`, with
errors.py's count check). No other module assigns to anything of Gradio's
(tests/ui/server/test_gradio_compat.py scans for it), and each replacement has a test there that
fails when Gradio stops behaving as it assumes.

They rest on Gradio's internals, which change between minor versions: `TESTED` is the range of
Gradio versions the app is tested on, requirements.txt and pyproject.toml pin the same range, and
`python app.py` refuses to start outside it (`check_gradio_version`) in one line that says what to
install. PICASO_GRADIO_UNCHECKED=1 starts it anyway (at your own risk: a replacement may then miss).
Docs: docs/serving.md, 'The Gradio seam'.
"""

from __future__ import annotations

import copy
import os
import time
import weakref
from importlib import metadata
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:  # annotations only
    import gradio as gr

# Gradio's internals are imported inside each patch, not here: the version check above them must give
# its one line even where another Gradio lacks one of the modules the patches replace names in.

TESTED = ("6.31", "6.32")  # Gradio versions the app is tested on: from TESTED[0] (inclusive) to below TESTED[1]
REQUIREMENT = f"gradio>={TESTED[0]},<{TESTED[1]}"  # as requirements.txt and pyproject.toml pin it
UNCHECKED = "PICASO_GRADIO_UNCHECKED"  # =1: start with any Gradio


class UnsupportedGradio(RuntimeError):
    """The installed Gradio is outside TESTED; the message is the one line the app prints."""


def check_gradio_version(version: str | None = None) -> None:
    """Raise UnsupportedGradio, with one line naming the versions that work and how to install one,
    when `version` (default: the installed Gradio's, read from its metadata without importing it)
    is outside TESTED. Nothing is checked with PICASO_GRADIO_UNCHECKED=1."""
    if os.environ.get(UNCHECKED) == "1":
        return
    version = metadata.version("gradio") if version is None else version
    try:
        inside = Version(TESTED[0]) <= Version(version) < Version(TESTED[1])
    except InvalidVersion:
        inside = False
    if not inside:
        raise UnsupportedGradio(
            f"gradio {version} is installed, but this app is tested on gradio {TESTED[0]}.x only "
            f"(it replaces some of Gradio's internals): pip install \"{REQUIREMENT}\" "
            f"(or set {UNCHECKED}=1 to start anyway)")


# ---- the queue -----------------------------------------------------------------------------------
def queue_of(demo: gr.Blocks):
    """`demo`'s Queue (Gradio keeps it as the private `Blocks._queue`; demo.queue() makes it), whose
    `push` and `process_events` the two functions below replace."""
    return demo._queue


def say_busy_on_push(queue, load, size: int | None) -> None:
    """Replace `queue.push` (Gradio's Queue.push, which every join and /call/<api_name> passes) so that
    a model-bound event is refused once `size` model-bound events wait (None: no bound), in the app's
    words (`load.message()`, busy.BUSY) rather than Gradio's; Gradio's own "queue_full" answer is
    reworded the same way. Light events are never refused here.

    Why: Gradio's `max_size` counts every waiting event, light ones too, so a room's tour steps (a
    light event each) filled the queue of 16 and were refused "busy" though none needed a worker
    (bench/room.py; before this and two more fixes, 100 visitors saw 82 Next and 67 /tour_step
    errors: docs/serving.md, 'A room at once', 1). So Gradio's queue has no `max_size` and the pool's bound is kept here (and at the
    gate, busy.BusyGate, for the joins it sees first). `load`: busy.Load (waiting(), bound(fn),
    message())."""
    push = queue.push

    async def push_or_busy(body, *args, **kwargs):
        if size is not None and load.waiting() >= size and load.bound(_fn(queue, body)):
            return False, load.message()[0], "queue_full"
        ok, detail, status = await push(body, *args, **kwargs)
        return (ok, load.message()[0], status) if status == "queue_full" else (ok, detail, status)

    queue.push = push_or_busy


def _fn(queue, body):
    """The event a join names, or None (Gradio's push answers for a join it cannot place)."""
    try:
        from gradio import route_utils  # Gradio's internals: on first use (see the imports)

        return route_utils.get_fn(queue.blocks, None, body)
    except Exception:  # noqa: BLE001  (an unknown event: push's own error)
        return None


def time_process_events(queue, load) -> None:
    """Replace `queue.process_events` (Gradio's per-job coroutine: the one place every job runs
    through, generators to their end) with the same call timed for the model pool's events:
    `load.running` holds each running job's start, `load.durations` gets its duration when it ends;
    events `load.bound(fn)` does not claim (light ones) run untimed.

    Why: the busy message says when to try again ("busy: N jobs ahead, try again in about S s"),
    and S is the jobs ahead times a recent job's duration (busy.Load.message); Gradio keeps no
    per-job durations of its own. `load`: busy.Load."""
    run = queue.process_events

    async def timed(events, batch, begin_time, fn, *args, **kwargs):
        if not load.bound(fn):  # light events say nothing of the wait
            return await run(events, batch, begin_time, fn, *args, **kwargs)
        key, t0 = object(), time.monotonic()
        load.running[id(key)] = t0
        try:
            return await run(events, batch, begin_time, fn, *args, **kwargs)
        finally:
            del load.running[id(key)]
            load.durations.append(time.monotonic() - t0)

    queue.process_events = timed


# ---- the start -----------------------------------------------------------------------------------
def patient_localhost_check(limit_s: float) -> None:
    """Replace `gradio.networking.url_ok` (read by launch() when it runs) with the same question
    asked for up to `limit_s` seconds.

    Why: launch() asks its own page five times, 3 s each, and refuses to start ("When localhost is
    not accessible, a shareable link must be created") if no answer came: on a busy machine, with
    the start's background work (the tour's build, a warm-up click) holding the interpreter, the
    page can take longer than that and the app died at start (tests/ui/server/test_localhost_check.py:
    a page that answers in 4 s)."""
    def url_ok(url: str) -> bool:
        import httpx  # gradio's own client

        end = time.monotonic() + limit_s
        while True:
            try:
                if httpx.head(url, timeout=min(15.0, limit_s), verify=False).status_code in (200, 401, 301, 302, 303, 307, 308):
                    return True
            except (httpx.ConnectError, httpx.TimeoutException):
                pass
            if time.monotonic() >= end:
                return False
            time.sleep(0.5)

    from gradio import networking  # launch() reads networking.url_ok when it runs

    networking.url_ok = url_ok


# ---- sessions ------------------------------------------------------------------------------------
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Blocks -> (its blocks, shared configs)


class _Shared(dict):
    """A component's config shared by every session of an app: copied before a session changes it."""


def shared_session_config() -> None:
    """Replace `SessionState.__init__` and `SessionState._update_value_in_config` so that a new
    session's per-component configs are built once per app (per Blocks), not per session.

    Why: Gradio 6.31's `SessionState.__init__` builds `config_for_block` (API schemas included) for
    every block of the app per new session: 100 visitors' first clicks spent most of the server's
    time there (py-spy during bench/room.py's 100-visitor run; docs/serving.md, 'A room at once', 3).
    Here each session gets its own outer dict holding the app's shared entries;
    `_update_value_in_config`, the one change Gradio makes to an entry in place, copies it first
    (`_update_config` and `__setitem__` put in a new entry), so one session's values never reach
    another's. Idempotent."""
    from gradio.state_holder import SessionState  # Gradio's internals: on first use (see the imports)

    if getattr(SessionState, "_picaso_shared", False):
        return
    own_update = SessionState._update_value_in_config

    def __init__(self, blocks):
        self.blocks_config = copy_config = copy.copy(blocks.default_config)
        shown = [(k, v) for k, v in copy_config.blocks.items() if k in blocks.blocks]
        cached = _SHARED.get(blocks)
        if cached is None or len(cached[0]) != len(shown) or any(
                k != k0 or v is not v0 for (k, v), (k0, v0) in zip(shown, cached[0])):
            cached = _SHARED[blocks] = (shown, {k: _Shared(copy_config.config_for_block(k, [], v)) for k, v in shown})
        self.config_values = dict(cached[1])
        self.state_data = {}
        self._state_ttl = {}
        self.is_closed = False
        self.STATE_TTL_WHEN_CLOSED = 1 if os.getenv("GRADIO_IS_E2E_TEST", None) else 3600  # as Gradio's

    def _update_value_in_config(self, key, value):
        entry = self.config_values.get(key)
        if isinstance(entry, _Shared):  # this session's own copy before it changes
            entry = self.config_values[key] = dict(entry)
            if isinstance(entry.get("props"), dict):
                entry["props"] = dict(entry["props"])
        return own_update(self, key, value)

    SessionState.__init__ = __init__
    SessionState._update_value_in_config = _update_value_in_config
    SessionState._picaso_shared = True


# ---- events --------------------------------------------------------------------------------------
UNCHANGED = {"__type__": "update"}  # gr.update() / gr.skip(): the output keeps what it shows


def skip_unchanged_postprocess(demo: gr.Blocks, fns) -> None:
    """Replace `demo.postprocess_data` so that `fns`' outputs are postprocessed without their
    unchanged ones (gr.update() with no props, gr.skip()).

    Why: Gradio 6.31 treats one like any prop update: it builds a new component and that session's
    config for it (its API schema through pydantic), 0.1-3 ms each. A tour step returns ~80 of them
    (every other tab's inputs and outputs) and that was most of a Next click's ~45 ms: 100 visitors
    stepping at once waited seconds on the event loop (bench/room.py). The page gets the same
    message: an unchanged output is sent as {"__type__": "update"}, which it skips."""
    own, ids = demo.postprocess_data, {id(fn) for fn in fns}

    async def postprocess_data(block_fn, predictions, state):
        if id(block_fn) not in ids or not isinstance(predictions, (list, tuple)) or len(block_fn.outputs) < 2:
            return await own(block_fn, predictions, state)
        demo.validate_outputs(block_fn, predictions)  # a wrong count is said as Gradio says it
        keep = [i for i, p in enumerate(predictions) if p != UNCHANGED]
        if len(keep) == len(predictions):
            return await own(block_fn, predictions, state)
        out = [dict(UNCHANGED) for _ in predictions]
        if keep:
            view = copy.copy(block_fn)  # the same event with the changed outputs alone
            view.outputs = [block_fn.outputs[i] for i in keep]
            done = await own(view, [predictions[i] for i in keep] if len(keep) > 1 else predictions[keep[0]], state)
            for i, value in zip(keep, done):
                out[i] = value
        return out

    demo.postprocess_data = postprocess_data


def check_input_count(check) -> None:
    """Replace `gr.Blocks.validate_inputs` (the one hook every event passes, queued or not, named or
    hidden, before any handler runs) with `check(blocks, block_fn, inputs)` and then Gradio's own.
    Idempotent: a second call replaces the first `check`, Gradio's own stays the one called after.

    Why: Gradio's own check answers a call with too few input values (`data=[]`) with a ValueError
    naming its components (`[<gradio.components.textbox.Textbox object at 0x...>, ...]`), printed
    with a traceback, and ignores extra values; `check` (errors.check_input_count) answers both in
    one line that names the endpoint and the count it takes (tests/ui/hostile/test_hostile_inputs.py)."""
    import gradio as gr  # on first use (see the imports)

    own = getattr(gr.Blocks.validate_inputs, "gradio_own", gr.Blocks.validate_inputs)

    def validate_inputs(blocks, block_fn, inputs):
        check(blocks, block_fn, inputs)
        own(blocks, block_fn, inputs)

    validate_inputs.gradio_own = own
    validate_inputs.check = check
    gr.Blocks.validate_inputs = validate_inputs


# ---- a registered event's fields -------------------------------------------------------------------
def run_after(block_fn, gate: int) -> None:
    """Make a registered event start when event `gate` has finished, instead of on its own trigger:
    the three fields `.then()` sets on the BlockFunction it registers (targets, trigger_after,
    trigger_only_on_success), set on one registered already.

    Why: Gradio sends every page-load event at once, so a `?step=N` or copied link's figure waited
    for ~800 kB of other tabs' results and for their model work; chained after the link's own gate
    the link is the page's first and only work (ui/layout.defer_loads; docs/tour.md, "Link timings":
    a link's figure in 1.5-1.7 s, under its 2 s bound)."""
    block_fn.targets, block_fn.trigger_after, block_fn.trigger_only_on_success = [], gate, False


def wrap_handler(block_fn, wrap) -> None:
    """Replace a registered event's function with `wrap(fn)` (BlockFunction.fn, which Gradio reads
    each time the event runs).

    Why: a served job's time limit (ui/server/jobs.limit_jobs) must wrap every model-bound handler
    after all events are registered, whichever tab registered it; a job past its limit stops at the
    engine's next safe point and answers in one line (docs/serving.md, "A time limit per job")."""
    block_fn.fn = wrap(block_fn.fn)

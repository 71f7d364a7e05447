"""How the app serves many visitors on a few cores: one pool for the model-bound events, a bounded
queue that refuses at once when full, bounded per-session memory, and the composed-state cache.

Every event of the app is either MODEL (runs in the one shared pool, `concurrency_id="model"`,
whose size is the queue's default concurrency limit: `--workers`) or LIGHT (no limit: filling a
text box, a status line, a search). So however many tabs visitors use at once, at most `workers`
model-bound jobs share the cores. The queue holds at most `--queue-size` waiting events; the next
one is refused at once, before Gradio's route does any work (busy.py: HTTP 503, "busy: N jobs
ahead, try again in about S s"; the browser says the app is busy, gradio_client raises QueueError)
instead of waiting minutes. Settings: docs/serving.md.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import logging
import os
import threading
import time

import gradio as gr
import torch
from gradio.components.plot import PlotData
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware

from picaso_core.light import memory
from picaso_core.store.format import CACHE_BYTES
from picaso_core.ui.server import gradio_compat, jobs
from picaso_core.ui.server.busy import BUSY, BusyGate, Load  # noqa: F401  (BUSY: serving's API)
from picaso_core.ui.server.page_config import (UNREAD_KEYS, HideUploadPaths, PageCache, SlimConfig,  # noqa: F401  (serving's API)
                                                slim_config)
# the flags' settings and checks, light for app.py's --help: re-exported as serving's API
from picaso_core.ui.server.settings import (DEFAULT_QUEUE_SIZE, DEFAULT_SESSIONS, DEFAULT_THREADS,  # noqa: F401
                                            DEFAULT_WORKERS, check, check_cache_mb, settings)

POOL = "model"
MODEL = dict(concurrency_limit="default", concurrency_id=POOL)  # the shared pool, sized by queue()
LIGHT = dict(concurrency_limit=None)  # no model work: never waits behind one
HISTORY_ROWS = 20  # rows of a session's run history kept
LIGHT_THREADS = 14  # threads beyond the pool's: light events and Gradio's own sync routes (/info)
LOCALHOST_WAIT_S = 60.0  # how long launch() may wait for its own page to answer (gradio_compat.patient_localhost_check)


def job_threads(workers: int, threads: int = 0, cores: int | None = None) -> int:
    """torch threads for each model-bound job: `threads`, or with 0 the cores shared out among the
    workers (at least 1). Each job runs torch's intra-op threads; with more threads than cores in all
    (2 workers x 2 threads on 2 cores), OpenMP's spinning threads take turns and a click under load
    took several times as long (docs/serving.md)."""
    if threads > 0:
        return threads
    return max(1, (cores or _cores()) // workers)


def rotation_threads(cores: int | None = None, device: str = "cpu") -> int:
    """Threads for PICConcat-R's rotations in one click (`compose.compose_tokens`): on the CPU, the
    cores over torch's threads per job (with one torch thread a job on 2 cores, the rotations read
    in two groups at once; the click's other steps are too small for a second core to help); on a
    GPU one, where a single batch is what keeps it busy."""
    if device != "cpu":
        return 1
    return max(1, (cores or _cores()) // torch.get_num_threads())


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def serve(demo, *, workers: int, queue_size: int, max_sessions: int, threads: int = DEFAULT_THREADS,
          time_limits: dict | None = None, max_upload_mb: float | None = None, routes: list = ()):
    """Queue `demo` with one model pool of `workers`, at most `queue_size` waiting events (0: no
    bound) refused with BUSY beyond, and at most `max_sessions` sessions' state kept; torch runs
    `job_threads(workers, threads)` threads; an upload over `max_upload_mb` (None: no bound) is
    refused (HTTP 413); `routes` (Starlette routes: the exports' downloads) join Gradio's. Returns the
    launch() keyword arguments that go with it."""
    check(workers, queue_size, max_sessions, threads=threads)
    torch.set_num_threads(job_threads(workers, threads))
    # Gradio's max_size would count light events too (a room's tour steps): the pool's bound is _say_busy's
    demo.queue(default_concurrency_limit=workers, max_size=None)
    load = _say_busy(gradio_compat.queue_of(demo), workers, queue_size or None)
    gradio_compat.shared_session_config()  # a new session's configs built once, not per visitor
    jobs.limit_jobs(demo, time_limits, POOL)  # each model-bound job under its endpoint's limit (None: the defaults)
    tune_allocator()
    gradio_compat.patient_localhost_check(LOCALHOST_WAIT_S)  # launch() may wait longer for its own page
    in_background(_trim_every, TRIM_EVERY_S)
    demo.delete_cache = (600, 3600)  # temporary files (uploads, outputs) older than an hour, checked every 10 min
    # a new session costs a copy of the page's config (~100s of kB): without a bound, every
    # gradio_client or page load that never comes back is kept for good
    # threads that run handlers: the pool's plus a few for light events. Each new thread that runs
    # torch gets its own OpenMP team and stacks, so gradio's default of 40 let the resident memory
    # creep up for as long as new threads kept being started
    return dict(state_session_capacity=max_sessions, max_threads=workers + LIGHT_THREADS,
                app_kwargs={**compressed(load, hide_upload_paths=not takes_files(demo)), "routes": list(routes)},
                max_file_size=None if max_upload_mb is None else int(max_upload_mb * 1e6))


def takes_files(demo) -> bool:
    """Whether any event of `demo` takes a file input (a client then sends an upload's path back)."""
    kinds = (gr.File, gr.Image, gr.Audio, gr.Video, gr.UploadButton, gr.Gallery, gr.Model3D, gr.MultimodalTextbox)
    return any(isinstance(c, kinds) for fn in demo.fns.values() for c in fn.inputs)


def compressed(load: Load | None = None, hide_upload_paths: bool = False) -> dict:
    """FastAPI arguments for what a page sends: /config without what no client reads
    (`page_config.SlimConfig`), and every response over 1 kB gzipped (the config travels as ~15% of its size).
    Starlette leaves text/event-stream (the queue's results) uncompressed, so streaming is not held
    back. With the queue's `load`, a join while the queue is full is refused first of all (`busy.BusyGate`;
    PICASO_FAST_BUSY=0 leaves it to Gradio's route, as bench/burst.py --compare measures). The page and its
    config, the same for every visitor, are built, slimmed and gzipped once (`page_config.PageCache`;
    PICASO_PAGE_CACHE=0: per request, for bench/room.py's comparison)."""
    gate = [Middleware(BusyGate, load=load)] if load is not None and os.environ.get("PICASO_FAST_BUSY") != "0" else []
    pages = [Middleware(PageCache)] if os.environ.get("PICASO_PAGE_CACHE") != "0" else []
    # with no event that takes a file, an upload's reply names no server folder (no client sends it back)
    hide = [Middleware(HideUploadPaths)] if hide_upload_paths else []
    return {"middleware": [*pages, *gate, Middleware(GZipMiddleware, minimum_size=1024), Middleware(SlimConfig), *hide]}


def in_background(fn, *args) -> threading.Thread:
    """Run fn(*args) in a daemon thread; a failure is logged, never raised (a warm-up is optional).
    At exit the thread is asked to stop (STOP) and waited for, see `_finish_background`."""
    def run():
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            logging.getLogger(__name__).warning("%s failed: %s", getattr(fn, "__name__", fn), e)

    t = threading.Thread(target=run, daemon=True)
    with _threads_lock:
        _threads[:] = [x for x in _threads if x.is_alive()] + [t]
    t.start()
    return t


STOP = threading.Event()  # set at exit: background work ends at its next step
_threads: list[threading.Thread] = []
_threads_lock = threading.Lock()
EXIT_WAIT_S = 60.0


def stop_background(timeout: float = EXIT_WAIT_S, resume: bool = True) -> list[threading.Thread]:
    """Ask the background work `in_background` started to stop (STOP) and wait up to `timeout` s for
    what it is in the middle of (a step of the tour's build, a warm-up click). With `resume`, STOP
    is cleared afterwards so that later work runs (an app started again in the same process: a
    test). Returns the threads still running after the wait."""
    STOP.set()
    deadline = time.monotonic() + timeout
    with _threads_lock:
        threads = list(_threads)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with _threads_lock:
        _threads[:] = alive = [t for t in _threads if t.is_alive()]
    if resume:
        STOP.clear()
    return alive


@atexit.register
def _finish_background(timeout: float = EXIT_WAIT_S) -> None:
    """A daemon thread still inside torch's C++ code when the interpreter finalises aborts the whole
    process ("terminate called without an active exception", exit 134): a test that runs app.main,
    or a script that loads the app and returns. So at exit, stop the background work first."""
    stop_background(timeout, resume=False)


def lazy_figures(demo) -> int:
    """Send the page's prebuilt figures (shipped benchmarks, curves, ...) with a load event instead
    of inside /config: the config is what every gradio_client downloads and what Gradio copies for
    every session, and these figures were most of it. Returns how many figures moved."""
    plots = [b for b in demo.blocks.values() if isinstance(b, gr.Plot) and b.value is not None]
    if not plots:
        return 0
    # a component keeps its value as plain data (a dict); Plot.postprocess takes a PlotData, not that
    values = tuple(PlotData(**b.value) if isinstance(b.value, dict) else b.value for b in plots)
    for b in plots:
        b.value = None
    with demo:
        demo.load(lambda: values, None, plots, api_visibility="private", show_progress="hidden", **LIGHT)
    return len(plots)


def _say_busy(queue, workers: int, size: int | None = None) -> Load:
    """Bound the model pool's waiting events at `size` (None: no bound) and name the refusal (HTTP
    503's detail) in words a visitor acts on, `busy.BUSY`: the gate (`compressed`) sends it before
    Gradio's route runs; a model-bound join that passed the gate as the last place was taken, or
    came by /call/<api_name>, is refused here in the same words. Light events are never refused.
    Returns the queue's `Load` the gate reads."""
    load = Load(queue, workers, POOL, size)
    gradio_compat.say_busy_on_push(queue, load, size)
    return load


_TRIM = threading.Lock()
TRIM_EVERY_S = float(os.environ.get("PICASO_TRIM_SECONDS") or 10)  # a soak measures with 1


def _trim_every(seconds: float) -> None:
    while not STOP.wait(seconds):
        trim()


def tune_allocator() -> None:
    """glibc only: at most 2 malloc arenas (each worker thread would get its own, and freed tensor
    memory stays in it, so resident memory grows with the threads that ever ran a job), and a fixed
    mmap threshold: blocks of MMAP_THRESHOLD and more are mapped on their own and handed back when
    freed. glibc's default raises the threshold to the largest block freed so far (up to 32 MiB), so
    after the first big tensor every tensor lands in the arenas, where what outlives a request pins
    the freed pages: 200 mixed calls left 1.5 GB of 2.3 GB of arenas freed (docs/serving.md, 'Memory')."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(-8, 2)  # M_ARENA_MAX
        libc.mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD (setting it also stops the dynamic raise)


MMAP_THRESHOLD = int(os.environ.get("PICASO_MMAP_THRESHOLD") or 256 * 1024)  # bytes; the soak measured 256 KiB


def trim() -> None:
    """Hand freed heap pages back to the OS (glibc malloc_trim): the resident memory of an idle
    server returns to what it holds, not to its peak."""
    libc = _libc()
    if libc is not None and _TRIM.acquire(blocking=False):
        try:
            libc.malloc_trim(0)
        finally:
            _TRIM.release()


def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def register_memory(demo, res, max_sessions: int) -> None:
    """Name the process-wide holders of memory beside the tabs' caches in `/cache_stats`'s "memory"
    report (picaso_core/light/memory.py): Gradio's per-session state (each a copy of the page's config,
    bounded by --max-sessions), the state store's in-memory LRU, and what each tab derived from the
    loaded Resources once (the skill library, retrievers, the fine-tuned model, ...)."""
    def sessions():
        holder = getattr(demo, "state_holder", None)
        data = getattr(holder, "session_data", {}) if holder is not None else {}
        return [(s.state_data, getattr(s, "config_values", None)) for s in list(data.values())]

    memory.register("gradio: sessions", sessions, f"--max-sessions ({max_sessions} sessions)")
    memory.register("store: states in memory", lambda: getattr(res.store, "_cache", None),
                    f"{getattr(res.store, 'cache_bytes', CACHE_BYTES) / 2**20:.0f} MiB LRU")
    # what every tab shares is no cache: a lab that keeps its Resources is charged only for its own
    memory.not_a_cache("the loaded model", lambda: [res, res.model, res.corpus, res.store, res.retriever])
    for name, (what, bound) in DERIVED.items():
        memory.register(what, lambda name=name: res._derived.get(name), bound)
    memory.register("session: derived, other", lambda: {k: v for k, v in res._derived.items() if k not in DERIVED},
                    "one of each per loaded model")


# what the tabs derive once per loaded model (Resources.derived): its name there -> (report name, bound)
DERIVED = {
    "soup_lab": ("soup: skill library", "fixed: 240 states, unit features per (layer, part) asked, 48 maps"),
    "tuned": ("finetune: tuned model and store", f"one model; its store's LRU {CACHE_BYTES / 2**20:.0f} MiB"),
    "source_store": ("attribution: source states", f"LRU {CACHE_BYTES / 2**20:.0f} MiB"),
}

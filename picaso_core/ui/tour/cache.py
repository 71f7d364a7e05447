"""Talk mode: a guided tour through the PICASO story, every step shown at once from precomputed results.

    python -m picaso_core.ui.tour build [--model demo --corpus demo --cache-dir D]   # precompute every step
    python -m picaso_core.ui.tour export DIR [--app-url URL] [--cache-dir D]          # the tour as a static site

The steps are data (picaso_core.ui.tour.steps.STEPS); each one's view is computed by the tab's own
handlers (picaso_core.ui.tour.runs) and kept in <cache-dir>/tour/<corpus>-<model fingerprint>.json,
keyed by the model's and the corpus's fingerprints and by the step's own definition: a cache made
for another model, corpus or step definition is stale, rebuilt and never shown. The app starts a
build in the background when its cache is missing or stale (a new corpus or model), and a step
not ready yet says so (its "Run it live" button computes it there and then).

Each step is budgeted in steps and samples, not seconds, so the cache is the same on every machine
but for its timings, which are labelled with the machine that measured them (`timed_on`). Besides
the steps it keeps what each tab opens on (steps.OPENINGS): the tab's own outputs for its default
inputs, shown before anything is pressed.

`tour_step(res, step)` is the app's /tour_step endpoint: plain data (title, tab, inputs, text,
cached, seconds).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import platform
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from picaso_core.session import DEFAULT_CACHE, Resources, load_resources
from picaso_core.ui.errors import bad_input
from picaso_core.ui.server import serving
from picaso_core.ui.tour.cli import parse_args
from picaso_core.ui.tour.runs import RUN_KEYS, RUNNERS, View, resolve
from picaso_core.ui.tour.static import write_site
from picaso_core.ui.tour.steps import OPENINGS, STEPS, Step

CACHE_VERSION = "tour/2"  # 2: each entry keeps the tab's own outputs; the tabs' openings
log = logging.getLogger("picaso.tour")
ENDPOINT = "/tour_step"
__all__ = ["STEPS", "Step", "View", "build", "cache_file", "export_static", "load_cache", "load_openings", "show",
           "tour_step"]


# ---- fingerprints and the cache file ----------------------------------------------------------
def corpus_fingerprint(corpus) -> str:
    """sha256 of what the tour reads from a corpus: its name, split, every context and every sample."""
    h = hashlib.sha256(f"{corpus.name}\0{corpus.split}\0".encode())
    for cid, text in corpus.database.items():
        h.update(f"{cid}\0{text}\0".encode())
    for s in corpus.samples:
        h.update(f"{s.sample_id}\0{s.query}\0{s.continuation}\0".encode())
    return h.hexdigest()[:16]


def cache_key(res: Resources) -> dict:
    corpus = res.derived("corpus_fingerprint", lambda: corpus_fingerprint(res.corpus))
    return {"version": CACHE_VERSION, "model": res.model.fingerprint(), "corpus": corpus}


def step_key(step: Step) -> str:
    """A step's own definition: a changed title, tab, runner (its name or its code, which writes the
    step's text) or input rebuilds that step; so does what its runner reads besides the app's model
    (runs.RUN_KEYS: the last step's bundled hybrid model)."""
    code = _source(RUNNERS[step.run]) if step.run in RUNNERS else ""
    extra = [RUN_KEYS[step.run]()] if step.run in RUN_KEYS else []  # none: the other steps' keys are as they were
    return hashlib.sha256(json.dumps([step.title, step.tab, step.run, step.inputs, code, *extra],
                                     sort_keys=True).encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=None)
def _source(fn) -> str:
    """A runner's code, read once per function (every served step checks every step's key)."""
    return inspect.getsource(fn)


def cache_file(res: Resources, cache_dir: str | Path | None = None) -> Path:
    key = cache_key(res)
    return Path(cache_dir or res.cache_dir) / "tour" / f"{key['corpus']}-{key['model']}.json"


def load_cache(res: Resources, cache_dir: str | Path | None = None) -> dict[int, dict]:
    """The cached views of this model and corpus, by 1-based step number; only entries whose key
    matches (model, corpus, version, step definition): a stale file or entry is never served."""
    data = _read(cache_file(res, cache_dir))
    if not isinstance(data, dict) or data.get("key") != cache_key(res):
        return {}
    out = {}
    for n, step in enumerate(STEPS, 1):
        entry = data.get("steps", {}).get(str(n))
        if isinstance(entry, dict) and entry.get("step_key") == step_key(step):
            out[n] = entry
    return out


def load_openings(res: Resources, cache_dir: str | Path | None = None) -> dict[str, list[dict]]:
    """What each tab opens on (steps.OPENINGS), by tab key: its cache entries, in order; a tab with any
    entry missing or stale is left out (it opens as it did before a cache)."""
    data = _read(cache_file(res, cache_dir))
    if not isinstance(data, dict) or data.get("key") != cache_key(res):
        return {}
    steps, out = load_cache(res, cache_dir), {}
    for tab, openers in OPENINGS.items():
        stored = data.get("openings", {}).get(tab) or []
        got = []
        for step, entry in zip(openers, stored):
            if isinstance(entry, dict) and "step" in entry:
                entry = steps.get(entry["step"]) if STEPS[entry["step"] - 1] == step else None
            if isinstance(entry, dict) and entry.get("step_key") == step_key(step):
                got.append(entry)
        if len(got) == len(openers):
            out[tab] = got
    return out


def cache_info(res: Resources, cache_dir: str | Path | None = None) -> dict:
    """When the cache was written (its file's date, UTC) and the machine that measured its timings."""
    path = cache_file(res, cache_dir)
    data = _read(path) or {}
    try:
        built = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y-%m-%d")
    except OSError:
        built = None
    return {"built": built, "timed_on": data.get("timed_on") or "an unnamed machine"}


def machine() -> str:
    """The machine that measures a build's timings, in words (its processor and cores)."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


_files: dict[str, tuple] = {}  # path -> ((mtime, size), parsed): a step served twice is read once


def _read(path: Path) -> dict | None:
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        hit = _files.get(str(path))
        if hit is None or hit[0] != stamp:
            hit = _files[str(path)] = (stamp, json.loads(path.read_text()))
        return hit[1]
    except (OSError, ValueError):
        return None


def _save(res: Resources, cache_dir, entries: dict[int, dict], openings: dict[str, list] | None = None) -> None:
    path = cache_file(res, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
    text = json.dumps({"key": cache_key(res), "timed_on": machine(),
                       "steps": {str(n): e for n, e in sorted(entries.items())}, "openings": openings or {}})
    tmp.write_text(text)
    tmp.replace(path)
    # Two saves within one tick of the file system's clock can leave the same (mtime, size): the
    # reader's memo is given what was written rather than trusting the stamp to change.
    st = path.stat()
    _files[str(path)] = ((st.st_mtime_ns, st.st_size), json.loads(text))


# ---- views as plain data ----------------------------------------------------------------------
def view_entry(step: Step, view: View, seconds: float) -> dict:
    return {"step_key": step_key(step), "text": view.text, "seconds": round(seconds, 3),
            "figures": [json.loads(pio.to_json(f, validate=False)) for f in view.figures],
            "tables": [{"title": t, **_frame(df)} for t, df in view.tables],
            "endpoint": view.endpoint, "facts": json.loads(json.dumps(view.facts, default=_plain)),
            "outputs": None if view.outputs is None else [_output(v) for v in view.outputs]}


def _frame(df: pd.DataFrame) -> dict:
    return json.loads(df.to_json(orient="split", index=False, date_format="iso"))


def _plain(x):
    """numpy scalars and arrays in a handler's plain data, as JSON takes them."""
    return x.tolist() if hasattr(x, "tolist") else str(x)


def _output(value):
    """One output of a tab's handler as tagged JSON: text (HTML, Markdown, code), a table, a plot, or
    plain data (a JSON output); None: an output the step leaves as it is."""
    if value is None:
        return None
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, pd.DataFrame):
        return {"frame": _frame(value)}
    if isinstance(value, go.Figure):
        return {"plot": json.loads(pio.to_json(value, validate=False))}
    return {"json": json.loads(json.dumps(value, default=_plain))}


def output_value(tagged, raw: bool = True):
    """A cached output back as its component's value (a plot as plotly JSON text when raw)."""
    if tagged is None:
        return None
    (kind, value), = tagged.items()
    if kind == "frame":
        return pd.DataFrame(value["data"], columns=value["columns"])
    if kind == "plot":
        return json.dumps(value) if raw else pio.from_json(json.dumps(value), skip_invalid=True)
    return value


def entry_view(entry: dict, raw: bool = False) -> View:
    """A cache entry as a View; raw: figures as plotly JSON text, not rebuilt as go.Figure (which
    validates every attribute: most of a cached step's time on a busy CPU)."""
    figs = [json.dumps(f) if raw else pio.from_json(json.dumps(f), skip_invalid=True) for f in entry["figures"]]
    tables = [(t["title"], pd.DataFrame(t["data"], columns=t["columns"])) for t in entry["tables"]]
    outputs = entry.get("outputs")
    return View(entry["text"], figs, tables, entry.get("endpoint"),
                None if outputs is None else tuple(output_value(o, raw) for o in outputs), entry.get("facts") or {})


def compute(res: Resources, n, memo: dict | None = None) -> dict:
    """Step n's view (n: its number, or a Step such as an opening), computed now (no cache), as a
    cache entry."""
    step = n if isinstance(n, Step) else step_at(n)
    t = time.perf_counter()
    try:
        view = RUNNERS[step.run](res, memo, **resolve(res, step.tab, step.inputs))
    except Exception as e:  # a view this corpus or model cannot give: said on the step, and kept
        if type(e).__name__ != "Error":  # gr.Error: the tab's own one-line message
            log.warning("tour step %s failed: %s: %s", step.title, type(e).__name__, e)
        msg = getattr(e, "message", None) or str(e)
        view = View(f"This step cannot be shown on the loaded model and corpus: {msg}")
    return view_entry(step, view, time.perf_counter() - t)


def step_at(n) -> Step:
    if isinstance(n, bool) or not isinstance(n, (int, float, str)):
        raise ValueError(f"step must be a whole number from 1 to {len(STEPS)}, got {type(n).__name__}")
    try:
        i = int(str(n).strip())
    except ValueError:
        raise ValueError(f"step must be a whole number from 1 to {len(STEPS)}, got {str(n)[:20]!r}") from None
    if not 1 <= i <= len(STEPS):
        raise ValueError(f"step must be from 1 to {len(STEPS)}, got {i}")
    return STEPS[i - 1]


# ---- building -----------------------------------------------------------------------------------
_building: dict[str, dict] = {}  # cache file -> {"done": n, "total": N, "thread": Thread, "error": str}
_lock = threading.Lock()


def build(res: Resources, cache_dir: str | Path | None = None, steps: list[int] | None = None, force: bool = False,
          log=print) -> dict[int, dict]:
    """Compute the views of `steps` (default: all) the cache lacks (every one with `force`) and store
    them; returns the cache's entries. Steps that share a run (the same Compose inputs) run it once."""
    entries = {} if force else load_cache(res, cache_dir)
    todo = [n for n in (steps or range(1, len(STEPS) + 1)) if n not in entries]
    memo: dict = {}
    status = _building.setdefault(str(cache_file(res, cache_dir)), {})
    status.update(done=len(STEPS) - len(todo), total=len(STEPS), error=None)
    openings = _stored_openings(res, cache_dir, force)
    for n in todo:
        if serving.STOP.is_set():  # the process is exiting: what is built so far is saved
            break
        step_at(n)
        entries[n] = compute(res, n, memo)
        _save(res, cache_dir, entries, openings)
        status["done"] = status.get("done", 0) + 1
        log(f"tour step {n}/{len(STEPS)} {STEPS[n - 1].title}: {entries[n]['seconds']:.1f} s")
    if steps is None and not serving.STOP.is_set():  # what the tabs open on: the steps' own, or computed
        for tab, openers in OPENINGS.items():
            old = openings.get(tab) or []
            got = [{"step": STEPS.index(s) + 1} if s in STEPS else
                   (old[i] if i < len(old) and isinstance(old[i], dict) and old[i].get("step_key") == step_key(s)
                    else compute(res, s, memo)) for i, s in enumerate(openers)]
            if got != old:
                openings[tab] = got
                _save(res, cache_dir, entries, openings)
                log(f"tour: the {tab} tab's opening" + "".join(
                    f", {e['seconds']:.1f} s" for e in got if "seconds" in e))
    return entries


def _stored_openings(res: Resources, cache_dir, force: bool) -> dict[str, list]:
    data = None if force else _read(cache_file(res, cache_dir))
    if not isinstance(data, dict) or data.get("key") != cache_key(res):
        return {}
    return {k: v for k, v in (data.get("openings") or {}).items() if k in OPENINGS}


def ensure_built(res: Resources, cache_dir: str | Path | None = None) -> threading.Thread | None:
    """Start building the missing or stale steps in a background thread (once per cache file);
    returns the thread, or None when every step is cached."""
    if len(load_cache(res, cache_dir)) == len(STEPS) and len(load_openings(res, cache_dir)) == len(OPENINGS):
        return None
    key = str(cache_file(res, cache_dir))
    with _lock:
        status = _building.setdefault(key, {})
        thread = status.get("thread")
        if thread is not None and thread.is_alive():
            return thread

        def run():
            try:
                build(res, cache_dir, log=lambda s: None)
            except Exception as e:  # a failed step leaves the others cached; the bar says why
                status["error"] = f"{type(e).__name__}: {e}"

        status["thread"] = thread = serving.in_background(run)  # stopped between steps at exit
        return thread


def building(res: Resources, cache_dir: str | Path | None = None) -> bool:
    """Whether a build of this cache was started in this process (ensure_built or build)."""
    return bool(_building.get(str(cache_file(res, cache_dir))))


def building_note(res: Resources, cache_dir: str | Path | None = None) -> str:
    status = _building.get(str(cache_file(res, cache_dir)), {})
    if not status:  # never started: app.py --no-tour-prebuild
        return "The tour's results are not precomputed on this server: press **Run it live** to compute this step now."
    if status.get("error"):
        return f"Precomputing the tour failed ({status['error']}); press **Run it live** to compute this step now."
    done = status.get("done")
    progress = f" ({done} of {status['total']} steps ready)" if done is not None else ""
    return (f"The tour's results for this model and corpus are being precomputed in the background{progress}: "
            "this step shows here when ready, or press **Run it live** to compute it now.")


# ---- serving a step -----------------------------------------------------------------------------
def show(res: Resources, n, live: bool = False, cache_dir: str | Path | None = None,
         raw: bool = False) -> tuple[Step, View, dict]:
    """Step n's view: from the cache (never a stale one), or computed now when `live`. Returns
    (step, view, meta) with meta = {"cached", "seconds" (this call), "compute_seconds", "ready"};
    raw: the figures as plotly JSON text (entry_view)."""
    t = time.perf_counter()
    step = step_at(n)
    n = STEPS.index(step) + 1
    entry = None if live else load_cache(res, cache_dir).get(n)
    cached = entry is not None
    if live:
        entry = compute(res, n)
    if entry is None:
        return step, View(building_note(res, cache_dir)), {"cached": False, "ready": False, "compute_seconds": None,
                                                            "seconds": round(time.perf_counter() - t, 3)}
    view = entry_view(entry, raw)
    info = cache_info(res, cache_dir) if cached else {"built": None, "timed_on": None}
    return step, view, {"cached": cached, "ready": True, "compute_seconds": entry["seconds"],
                        "seconds": round(time.perf_counter() - t, 3), **info}


def tour_step(res: Resources, step) -> dict:
    """The /tour_step endpoint: step (1-based) as plain data: title, tab, inputs, text, cached (True
    when served from the cache), seconds (this call), plus its tables as records."""
    try:
        s, view, meta = show(res, step, raw=True)
    except ValueError as e:
        raise bad_input(str(e), ENDPOINT) from None
    return {"step": STEPS.index(s) + 1, "steps": len(STEPS), "title": s.title, "tab": s.tab, "inputs": dict(s.inputs),
            "text": view.text, "cached": meta["cached"], "seconds": meta["seconds"],
            "tables": [{"title": t, "records": json.loads(df.to_json(orient="records"))} for t, df in view.tables]}


# ---- the static site ----------------------------------------------------------------------------
def export_static(out_dir: str | Path, app_url: str | None = None, cache_dir: str | Path | None = None,
                  model: str = "demo", corpus: str = "demo", res: Resources | None = None) -> Path:
    """Write the tour as a static site in `out_dir` (index.html + plotly.min.js) that opens with no
    Python and no network; each step links to the live app's view of it when `app_url` is given.
    Uses the cache (building what it lacks). Returns the index.html path."""
    res = res or _load(model, corpus, cache_dir)
    entries = build(res, cache_dir, log=lambda s: print(s, file=sys.stderr))
    return write_site(out_dir, [(s, entries[n]) for n, s in enumerate(STEPS, 1)], app_url)


def _load(model: str, corpus: str, cache_dir) -> Resources:
    return load_resources(model, corpus, cache_dir=cache_dir or DEFAULT_CACHE, log=lambda s: print(s, file=sys.stderr))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)  # picaso_core.ui.tour.cli: light, as __main__.py reads it first
    t = time.perf_counter()
    res = _load(args.model, args.corpus, args.cache_dir)
    if args.command == "build":
        build(res, args.cache_dir, force=args.force)
        path = cache_file(res, args.cache_dir)
        print(f"tour: {len(STEPS)} steps cached in {path} ({path.stat().st_size / 1024:.0f} KiB) "
              f"in {time.perf_counter() - t:.1f} s")
    else:
        index = export_static(args.dir, args.app_url, args.cache_dir, res=res)
        print(f"tour: {len(STEPS)} steps written to {index}")



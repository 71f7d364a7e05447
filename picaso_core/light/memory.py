"""What the app's long-lived caches hold, for a soak to report: each cache registers itself once
(`register(name, holder, bound)`), and `report()` sizes every one of them.

A serving process keeps results between requests in several places (composed states, scored
runs, the skill-map library, the tour's parsed steps, the store's state LRU, ...). A memory soak
that sees the resident size settle higher than a Compose-only soak must say which of them holds
the difference and what bounds it: that is this module's one job. Sizes are measured, not
declared: `deep_bytes` walks a cache's contents (tensors and arrays by their buffers, containers
and dataclasses through their items and fields), counting each buffer once. What is not a cache
but is reached from one (a lab keeps the Resources it was made from: the model, the corpus, the
retriever) is named once with `not_a_cache` and no cache is charged for it.

`heap()` says what glibc's malloc holds beside them (in use, free but kept, mmapped): resident
memory beyond the caches that is "free but kept" is the allocator's, not a leak.

PICASO_MEMORY_DEBUG=1 (for investigating only) adds a "~debug" entry to the report: the heap, each
cache's parts (a mapping's keys) and the object types whose counts grew since the previous report;
PICASO_MEMORY_DEBUG=trace also the Python allocations that grew most (tracemalloc, which slows every
allocation).

Imports nothing of the project (tier 0): any module may register its cache.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import dataclasses
import gc
import os
import random
import sys
import threading
import time
import tracemalloc
import types
from collections.abc import Callable, Iterable, Mapping

__all__ = ["register", "not_a_cache", "report", "deep_bytes", "heap"]

_REGISTRY: dict[str, tuple[Callable[[], object], str]] = {}
_ELSEWHERE: dict[str, Callable[[], Iterable[object]]] = {}
_LOCK = threading.Lock()
DEBUG = os.environ.get("PICASO_MEMORY_DEBUG") in ("1", "trace", "owners")
if os.environ.get("PICASO_MEMORY_DEBUG") == "trace":
    tracemalloc.start(6)
_LAST: dict[str, object] = {}  # debug: the previous report's snapshot and type counts


def register(name: str, holder: Callable[[], object], bound: str) -> None:
    """Make the cache `name` part of `report()`. holder(): the object that holds the cache's contents
    now (called at report time, so a cache that is replaced is still found); bound: in words, what
    limits it ("64 runs", "256 MiB (--compose-cache-mb)", "one per model")."""
    with _LOCK:
        _REGISTRY[name] = (holder, bound)


def not_a_cache(name: str, holder: Callable[[], Iterable[object]]) -> None:
    """holder(): objects that are no cache (the loaded model, its store object, the corpus, the
    retriever, the Resources holding them), called at report time; named like a cache (a second
    registration under a name replaces the first). A cache's walk stops at them, so a cache that
    refers to them (a lab keeps its Resources) is charged only for what it holds itself."""
    with _LOCK:
        _ELSEWHERE[name] = holder


def _elsewhere() -> set[int]:
    out: set[int] = set()
    with _LOCK:
        holders = list(_ELSEWHERE.values())
    for holder in holders:
        try:
            out.update(id(o) for o in holder() if o is not None)
        except Exception:  # noqa: BLE001  (a holder that no longer answers: nothing excluded)
            pass
    return out


def report() -> dict[str, dict]:
    """name -> {"bytes": measured size, "bound": what limits it}, for every registered cache."""
    with _LOCK:
        items = list(_REGISTRY.items())
    out = {}
    skip = _elsewhere()
    for name, (holder, bound) in items:
        try:
            size = deep_bytes(holder(), set(skip))
        except Exception as e:  # noqa: BLE001  (a report never fails a request: the cache is named with why)
            out[name] = {"bytes": None, "bound": bound, "error": f"{type(e).__name__}: {e}"[:120]}
            continue
        out[name] = {"bytes": size, "bound": bound}
    if DEBUG:
        out["~debug"] = {"bytes": None, "bound": "PICASO_MEMORY_DEBUG=1", "detail": _debug(items)}
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap() -> dict[str, float]:
    """glibc malloc's figures, MB: "in use" (allocated and not freed), "free, kept" (freed into the
    arenas: resident, except the pages a trim has handed back), "mmapped" (blocks mapped on their
    own: live, each handed back as soon as it is freed); {} where the C library has no mallinfo2."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        fn = getattr(libc, "mallinfo2", None)
    except OSError:
        fn = None
    if fn is None:
        return {}
    fn.restype = _MallInfo2
    m = fn()
    mb = 2 ** 20
    return {"in use": round(m.uordblks / mb, 1), "free, kept": round(m.fordblks / mb, 1),
            "mmapped": round(m.hblkhd / mb, 1), "arenas": round(m.arena / mb, 1)}


def _owners_now() -> list[str] | None:
    """PICASO_MEMORY_DEBUG=owners: `_owners()`, at most once a minute (it walks every object)."""
    if os.environ.get("PICASO_MEMORY_DEBUG") != "owners":
        return None
    if time.monotonic() - _LAST.get("owners_t", -1e9) > 60:
        _LAST.update(owners=_owners(), owners_t=time.monotonic())
    return _LAST["owners"]


def _owners(sample: int = 60, depth: int = 7) -> list[str]:
    """Debug: the buffers of 256 kB and more (tensors, arrays) alive now, and for a sample of them the
    chain of objects that refer to each (type names, nearest first): what holds memory no cache names."""
    gc.collect()
    objs = gc.get_objects()
    bufs: dict[int, tuple[object, int]] = {}
    for o in objs:
        try:
            b = _buffer(o)
            if b is not None and int(b[1]) >= 256 * 1024 and b[0] not in bufs:
                bufs[b[0]] = (o, int(b[1]))
        except Exception:  # noqa: BLE001  (an object whose attribute lookup fails: not a buffer)
            continue
    mine = {id(objs), id(bufs), *(id(v) for v in bufs.values())}

    def name(o) -> str:
        if isinstance(o, types.FrameType):
            return f"frame {o.f_code.co_filename.rsplit('/', 1)[-1]}:{o.f_code.co_name}:{o.f_lineno}"
        if isinstance(o, types.TracebackType):
            return f"traceback of {o.tb_frame.f_code.co_name}"
        if isinstance(o, types.ModuleType):
            return f"module {o.__name__}"
        if isinstance(o, types.FunctionType):
            return f"function {o.__qualname__}"
        return type(o).__qualname__ + (f"[{len(o)}]" if isinstance(o, (list, dict, tuple, set)) else "")

    groups: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    keys = random.Random(0).sample(sorted(bufs), min(sample, len(bufs)))
    for key in keys:
        path, cur, walked = [], bufs[key][0], set(mine)
        for _ in range(depth):
            walked.add(id(cur))
            refs = [r for r in gc.get_referrers(cur) if id(r) not in walked and not isinstance(r, types.CellType)
                    and not (isinstance(r, types.FrameType) and r.f_code.co_filename == __file__)]
            if not refs:
                break
            cur = refs[0]
            path.append(name(cur))
            if isinstance(cur, types.ModuleType):
                break
            del refs
        o = bufs[key][0]
        where = " <- ".join(path) or (f"(no holder gc sees) {type(o).__name__} {tuple(getattr(o, 'shape', ()))} "
                                      f"{getattr(o, 'dtype', '')} grad_fn={type(getattr(o, 'grad_fn', None)).__name__}"
                                      f" grad={getattr(o, 'requires_grad', None)} "
                                      f"refs={sys.getrefcount(o) - 3}")
        groups[where] += bufs[key][1]
        count[where] += 1
        del cur, o
    total = sum(n for _, n in bufs.values())
    scale = len(bufs) / max(1, len(keys))
    return [f"{len(bufs)} buffers, {total / 2**20:.0f} MB; a sample of {len(keys)}, by holder (x{scale:.1f}):"] + [
        f"{groups[k] * scale / 2**20:7.1f} MB {count[k]:3d}  {k}" for k, _ in groups.most_common(12)]


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/status") as f:
            return next(round(int(x.split()[1]) / 1024, 1) for x in f if x.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None


def _trim() -> bool:
    """glibc's malloc_trim(0) now (debug: does a trim hand the "free, kept" pages back?)."""
    name = ctypes.util.find_library("c")
    try:
        fn = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        fn = None
    if fn is not None:
        fn(0)
    return fn is not None


def _debug(items) -> dict:
    """What PICASO_MEMORY_DEBUG=1 adds to a report (see the module's docstring)."""
    parts = {}
    for name, (holder, _) in items:
        try:
            obj = holder()
            if isinstance(obj, Mapping) and len(obj) <= 64:
                parts[name] = {str(k): round(deep_bytes(v, _elsewhere()) / 2**20, 2) for k, v in list(obj.items())}
        except Exception as e:  # noqa: BLE001
            parts[name] = f"{type(e).__name__}: {e}"[:120]
    snap = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
    grew = []
    if snap is not None and _LAST.get("snap") is not None:
        for d in snap.compare_to(_LAST["snap"], "traceback")[:12]:
            grew.append(f"{d.size_diff / 2**20:+.2f} MB ({d.count_diff:+d}) " +
                        " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in d.traceback[:4]))
    counts = collections.Counter(type(o).__name__ for o in gc.get_objects())
    before = _LAST.get("counts") or collections.Counter()
    _LAST.update(snap=snap, counts=counts)
    rss = _rss_mb()
    trimmed = _trim()
    traced = round(tracemalloc.get_traced_memory()[0] / 2**20, 1) if tracemalloc.is_tracing() else None
    return {"heap": heap(), "parts": parts, "buffers": _owners_now(), "rss_mb": rss,
            "rss_mb_after_a_trim": _rss_mb() if trimmed else None, "traced_mb": traced, "python grew": grew,
            "types grew": [f"{t} {n:+d}" for t, n in (counts - before).most_common(12)]}


def deep_bytes(obj, _seen: set | None = None, _depth: int = 0) -> int:
    """Bytes held by `obj`: a tensor or array by its storage (each storage counted once, so views and
    shared buffers are not counted twice), strings and bytes by their size, containers, mappings,
    dataclasses and plain objects through their contents. Stops 64 levels deep."""
    seen = set() if _seen is None else _seen
    if obj is None or isinstance(obj, (bool, int, float, complex, type)) or _depth > 64:
        return 0
    key = id(obj)
    if key in seen:
        return 0
    seen.add(key)
    storage = _buffer(obj)
    if storage is not None:
        sid, nbytes = storage
        if sid in seen:
            return 0
        seen.add(sid)
        return nbytes
    if isinstance(obj, (str, bytes, bytearray)):
        return sys.getsizeof(obj)
    total = sys.getsizeof(obj)
    if isinstance(obj, Mapping):
        for k, v in list(obj.items()):
            total += deep_bytes(k, seen, _depth + 1) + deep_bytes(v, seen, _depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in list(obj):
            total += deep_bytes(v, seen, _depth + 1)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            total += deep_bytes(getattr(obj, f.name, None), seen, _depth + 1)
    else:
        fields = getattr(obj, "__dict__", None)
        if fields is not None:
            total += deep_bytes(fields, seen, _depth + 1)
        for slot in getattr(type(obj), "__slots__", ()):
            total += deep_bytes(getattr(obj, slot, None), seen, _depth + 1)
    return total


def _buffer(obj) -> tuple[int, int] | None:
    """(an id of the memory it owns, its bytes) for a torch tensor or a numpy array; None otherwise.
    Duck-typed, so this module imports neither."""
    storage = getattr(obj, "untyped_storage", None)
    if callable(storage) and hasattr(obj, "element_size"):  # torch.Tensor
        s = storage()
        return ("torch", s.data_ptr()).__hash__(), s.nbytes()
    if hasattr(obj, "__array_interface__") and hasattr(obj, "nbytes"):  # numpy.ndarray
        base = obj
        while getattr(base, "base", None) is not None and hasattr(base.base, "nbytes"):
            base = base.base
        return ("numpy", id(base)).__hash__(), int(base.nbytes)
    return None

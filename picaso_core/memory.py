"""What the app's long-lived caches hold, for a soak to report: each cache registers itself once
(`register(name, holder, bound)`), and `report()` sizes every one of them.

A serving process keeps results between requests in several places (composed states, scored
runs, the skill-map library, the tour's parsed steps, the store's state LRU, ...). A memory soak
that sees the resident size settle higher than a Compose-only soak must say which of them holds
the difference and what bounds it: that is this module's one job. Sizes are measured, not
declared: `deep_bytes` walks a cache's contents (tensors and arrays by their buffers, containers
and dataclasses through their items and fields), counting each buffer once.

Imports nothing of the project (tier 0): any module may register its cache.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable, Mapping

__all__ = ["register", "report", "deep_bytes"]

_REGISTRY: dict[str, tuple[Callable[[], object], str]] = {}
_LOCK = threading.Lock()


def register(name: str, holder: Callable[[], object], bound: str) -> None:
    """Make the cache `name` part of `report()`. holder(): the object that holds the cache's contents
    now (called at report time, so a cache that is replaced is still found); bound: in words, what
    limits it ("64 runs", "256 MiB (--compose-cache-mb)", "one per model")."""
    with _LOCK:
        _REGISTRY[name] = (holder, bound)


def report() -> dict[str, dict]:
    """name -> {"bytes": measured size, "bound": what limits it}, for every registered cache."""
    with _LOCK:
        items = list(_REGISTRY.items())
    out = {}
    for name, (holder, bound) in items:
        try:
            size = deep_bytes(holder())
        except Exception as e:  # noqa: BLE001  (a report never fails a request: the cache is named with why)
            out[name] = {"bytes": None, "bound": bound, "error": f"{type(e).__name__}: {e}"[:120]}
            continue
        out[name] = {"bytes": size, "bound": bound}
    return out


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

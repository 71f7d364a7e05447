"""A byte-budgeted cache of composed states, keyed the way each composition method allows.

A composed state depends on the model, the stored context states (the store), and the contexts
in the order the method sees them. Many methods ignore some of that order, and so may their keys
(each method's `order` in the registry, picaso_core/compose/registry.py):

    set       soup, picaso_s        invariant to any permutation: keyed by the sorted ids
    rotation  picaso_r, picconcat_r invariant to cyclic shifts (prop. 3; the mean over rotations):
                                    keyed by the ordered ids rotated to start at the smallest
    sequence  concat, caso          order-dependent: keyed by the ordered ids

A PICASO-R state is not invariant to every permutation (a non-cyclic shuffle changes it by O(1)),
so it shares the rotation key, not the set key. On a hybrid whose attention uses RoPE, every method's
composed keys sit at their offsets in the joined sequence (compose's rope="joined"), so the order
matters to all of them: `cached_states` keys every method by sequence there (`keying="sequence"`).
To serve exactly what a fresh composition gives, `ComposeCache.state` composes a miss in the key's
canonical order (ids sorted, or rotated to the smallest): the same set or rotation in any order then
gets bitwise the same state, cached or not.
The model's and the store's fingerprints are part of every key.

The byte budget is shared by all methods. Each entry remembers the seconds its composition took;
when the budget is exceeded the entry with the least compute saved per byte goes first (oldest
first among equals): a Concat state (a forward pass over the contexts) outlives a Soup (a weighted
sum) of the same size. Every miss says why: "new set" (or order / rotation), "evicted",
"fingerprint changed". Counters per method: hits, misses, bytes, entries, evictions.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from picaso_core.compose.build import build_state
from picaso_core.compose.registry import REGISTRY

KEYING = {m.name: m.order for m in REGISTRY if m.cached}  # each cached method's invariance (compose/registry.py)
NEW = {"set": "new set", "rotation": "new rotation", "sequence": "new order"}
DEFAULT_BUDGET = 256 << 20  # bytes: ~140 demo-sized composed states
_FORGET = 100_000  # keys remembered for the miss reasons (a few hundred bytes each)


def canonical(method: str, ids: Sequence[str], keying: str | None = None) -> tuple[str, ...]:
    """The ids in the order `method`'s key (and its cached composition) uses; `keying` ("set",
    "rotation", "sequence") overrides the method's own (KEYING)."""
    ids = tuple(ids)
    how = KEYING.get(method)
    if how is None:
        raise ValueError(f"method {method!r} is not cached; cached methods: {', '.join(KEYING)}")
    if keying is not None:
        if keying not in NEW:
            raise ValueError(f"keying={keying!r}: valid values are {tuple(NEW)}")
        how = keying
    if not ids:
        return ids
    if how == "set":
        return tuple(sorted(ids))
    if how == "rotation":
        i = min(range(len(ids)), key=lambda j: ids[j:] + ids[:j])  # the smallest rotation (ties: repeated ids)
        return ids[i:] + ids[:i]
    return ids


def state_nbytes(state) -> int:
    """Bytes the state holds: its SSM part and, for a hybrid model, the keys and values of its
    attention layers (these grow with the tokens: a composed state holds every context's)."""
    parts = (state.ssm, state.conv, state.log_decay, getattr(state, "keys", None), getattr(state, "values", None))
    return sum(t.numel() * t.element_size() for t in parts if t is not None)


@dataclass
class _Entry:
    state: object
    nbytes: int
    compute_s: float
    stamp: int  # insertion / last use order, for ties

    @property
    def value(self) -> float:
        return self.compute_s / max(1, self.nbytes)


@dataclass
class Lookup:
    """What `ComposeCache.state` did: hit, or miss and why; the seconds this call took (lookup or
    composition) and the seconds the composition took when it was done (the method's cost)."""

    method: str
    hit: bool
    reason: str  # "" for a hit
    seconds: float
    compose_s: float
    stored: bool = False  # a miss's state was kept (it fit the budget and was worth its bytes)

    @property
    def label(self) -> str:
        return "state from cache" if self.hit else f"composed ({self.reason})"


@dataclass
class MethodStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes: int = 0
    entries: int = 0
    miss_reasons: dict = field(default_factory=dict)


class ComposeCache:
    """Composed states by (model fingerprint, store fingerprint, method, canonical ids), within
    `budget` bytes. Thread-safe; a miss composes outside the lock (two callers may compose the
    same state at once: both get equal states, one entry is kept)."""

    def __init__(self, budget: int = DEFAULT_BUDGET):
        if budget < 0:
            raise ValueError(f"budget must be >= 0 bytes, got {budget}")
        self.budget = int(budget)
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._evicted: OrderedDict[tuple, None] = OrderedDict()
        self._fingerprints: OrderedDict[tuple, tuple] = OrderedDict()  # key without fingerprints -> last fingerprints
        self._stats: dict[str, MethodStats] = {m: MethodStats() for m in KEYING}
        self._nbytes = 0
        self._stamp = 0
        self._lock = threading.Lock()

    # ---- the one entry point ---------------------------------------------------------------
    def state(self, method: str, ids: Sequence[str], states: Sequence, compose: Callable[[list, list], object],
              *, model_fp: str, store_fp: str, keying: str | None = None):
        """(the composed state of `ids`, Lookup). `states` are the stored states of `ids` in the
        same order; `compose(ids, states)` builds the state for ids given in canonical order.
        `keying`: see `canonical` (None: the method's own)."""
        if len(states) != len(ids):
            raise ValueError(f"{len(states)} states for {len(ids)} ids")
        order = canonical(method, ids, keying)
        key = (model_fp, store_fp, method, order)
        if keying is not None and keying != KEYING[method]:  # another keying: another key space
            key = (model_fp, store_fp, method, order, keying)
        t0 = time.perf_counter()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._stamp += 1
                entry.stamp = self._stamp
                self._entries.move_to_end(key)
                self._stats[method].hits += 1
                return entry.state, Lookup(method, True, "", time.perf_counter() - t0, entry.compute_s)
            reason = self._why(key)
        by_id = dict(zip(ids, states))
        out = compose(list(order), [by_id[c] for c in order])
        seconds = time.perf_counter() - t0
        with self._lock:
            self._stats[method].misses += 1
            self._stats[method].miss_reasons[reason] = self._stats[method].miss_reasons.get(reason, 0) + 1
            self._remember(self._fingerprints, key[2:], key[:2])
            stored = self._put(key, out, seconds)
        return out, Lookup(method, False, reason, seconds, seconds, stored)

    # ---- counters ---------------------------------------------------------------------------
    def stats(self) -> dict:
        """Counters per method and in total: hits, misses, hit_rate, bytes, entries, evictions,
        miss_reasons; and the budget."""
        with self._lock:
            per = {m: {"hits": s.hits, "misses": s.misses, "hit_rate": _rate(s.hits, s.misses), "bytes": s.bytes,
                       "entries": s.entries, "evictions": s.evictions, "miss_reasons": dict(s.miss_reasons)}
                   for m, s in self._stats.items()}
            hits, misses = sum(s.hits for s in self._stats.values()), sum(s.misses for s in self._stats.values())
            return {"budget_bytes": self.budget, "bytes": self._nbytes, "entries": len(self._entries),
                    "hits": hits, "misses": misses, "hit_rate": _rate(hits, misses),
                    "evictions": sum(s.evictions for s in self._stats.values()), "methods": per}

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._nbytes = 0
            for s in self._stats.values():
                s.bytes = s.entries = 0

    # ---- inside the lock --------------------------------------------------------------------
    def _why(self, key: tuple) -> str:
        if key in self._evicted:
            return "evicted"
        last = self._fingerprints.get(key[2:])
        if last is not None and last != key[:2]:
            return "fingerprint changed"
        return NEW[key[4] if len(key) > 4 else KEYING[key[2]]]

    def _put(self, key: tuple, state, seconds: float) -> bool:
        nbytes = state_nbytes(state)
        if key in self._entries or nbytes > self.budget:
            return key in self._entries
        self._stamp += 1
        self._entries[key] = _Entry(state, nbytes, seconds, self._stamp)
        self._evicted.pop(key, None)
        self._count(key, nbytes, +1)
        while self._nbytes > self.budget:
            victim = min(self._entries, key=lambda k: (self._entries[k].value, self._entries[k].stamp))
            self._count(victim, self._entries.pop(victim).nbytes, -1)
            self._stats[victim[2]].evictions += 1
            self._remember(self._evicted, victim, None)
        return key in self._entries

    def _count(self, key: tuple, nbytes: int, sign: int) -> None:
        s = self._stats[key[2]]
        s.bytes += sign * nbytes
        s.entries += sign
        self._nbytes += sign * nbytes

    @staticmethod
    def _remember(book: OrderedDict, key, value) -> None:
        book[key] = value
        book.move_to_end(key)
        while len(book) > _FORGET:
            book.popitem(last=False)


class ResultCache:
    """The last `size` scored runs by key (least recently used goes first), with hit / miss counts:
    a repeated click (the same query, contexts and settings) is served without recomputing."""

    def __init__(self, size: int = 64):
        self.size = int(size)
        self._runs: OrderedDict = OrderedDict()
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._runs:
                self._runs.move_to_end(key)
                self.hits += 1
                return self._runs[key]
            self.misses += 1
            return None

    def put(self, key, value) -> None:
        with self._lock:
            self._runs[key] = value
            self._runs.move_to_end(key)
            while len(self._runs) > self.size:
                self._runs.popitem(last=False)

    def stats(self) -> dict:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "hit_rate": _rate(self.hits, self.misses),
                    "entries": len(self._runs), "size": self.size}


def cached_states(cache: ComposeCache, model, methods: Sequence[str], ids: Sequence[str], context_ids: Sequence,
                  context_states: Sequence, *, model_fp: str, store_fp: str,
                  threads: int = 1) -> tuple[dict, dict[str, Lookup]]:
    """The states of every cached method in `methods` for contexts `ids` (in presentation order,
    with their token ids and stored states), through `cache`: ({method: state}, {method: Lookup}),
    ready for `run_methods(..., prebuilt=...)`. Methods the cache does not key ("none") are left out.
    threads: see `compose.compose_tokens` (a cached state is the one built with the threads of
    the call that missed)."""
    tokens = dict(zip(ids, context_ids))
    built, looked = {}, {}
    from picaso_core.compose.attention import rotary  # torch: imported on use (settings reads this module)

    # a RoPE hybrid's composed keys sit at their offsets in the joined order: no method is order-free there
    keying = "sequence" if rotary(model) is not None else None
    for m in methods:
        if m not in KEYING or not ids:
            continue
        built[m], looked[m] = cache.state(
            m, ids, context_states, lambda order, sts, m=m: build_state(model, m, [tokens[c] for c in order], sts, threads),
            model_fp=model_fp, store_fp=store_fp, keying=keying)
    return built, looked


def _rate(hits: int, misses: int) -> float | None:
    return round(hits / (hits + misses), 4) if hits + misses else None

"""ComposeCache's eviction rule: when the byte budget is exceeded, the entry with the least compute
saved per byte goes first, not simply the one that was quickest to compose. The entries here have
different sizes, so "least seconds per byte" and "least seconds" pick different victims."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from picaso_core.analysis import compose_cache
from picaso_core.analysis.compose_cache import ComposeCache


class Clock:
    """A perf_counter the test moves by hand: a composition 'takes' exactly what it is told to."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    # only the cache module's view of `time` is replaced; nothing else in the process sees it
    monkeypatch.setattr(compose_cache, "time", SimpleNamespace(perf_counter=c.perf_counter))
    return c


def fake_state(nbytes: int):
    """A composed state of exactly `nbytes` bytes (float32 ssm, empty conv and log_decay)."""
    assert nbytes % 4 == 0
    return SimpleNamespace(ssm=torch.zeros(nbytes // 4), conv=torch.zeros(0), log_decay=torch.zeros(0))


def put(cache: ComposeCache, clock: Clock, cid: str, nbytes: int, seconds: float):
    """Compose (a miss) context `cid` alone with Soup; the composition takes `seconds`, the state `nbytes`."""
    def compose(order, states):
        clock.now += seconds
        return fake_state(nbytes)

    _, look = cache.state("soup", [cid], [object()], compose, model_fp="m", store_fp="s")
    return look


def lookup(cache: ComposeCache, clock: Clock, cid: str):
    """Whether `cid` is still cached (a hit), and the miss reason if not; never adds `cid` back."""
    saved = cache.budget
    cache.budget = 0  # a miss here is not stored (it cannot fit), so it evicts nothing either
    try:
        return put(cache, clock, cid, 4, 0.0)
    finally:
        cache.budget = saved


def test_the_least_compute_per_byte_goes_first_not_the_quickest(clock):
    cache = ComposeCache(budget=10_000)
    # big and slow: 4 s for 8000 B = 0.5 ms/B  -> the least saved per byte
    # small and quick: 1 s for 1000 B = 1 ms/B -> the quickest to recompose
    assert put(cache, clock, "big_slow", 8000, 4.0).stored
    assert put(cache, clock, "small_quick", 1000, 1.0).stored
    assert cache.nbytes == 9000
    # 2000 B more (3 s: 1.5 ms/B) exceed the 10 000 B budget: exactly one entry must go
    assert put(cache, clock, "new", 2000, 3.0).stored

    # seconds per byte: big_slow (0.5 ms/B) goes; by seconds alone small_quick (1 s) would have
    assert lookup(cache, clock, "small_quick").hit
    assert lookup(cache, clock, "new").hit
    gone = lookup(cache, clock, "big_slow")
    assert not gone.hit and gone.reason == "evicted"
    stats = cache.stats()
    assert stats["evictions"] == 1 and stats["bytes"] == 3000 and stats["entries"] == 2


def test_equal_compute_time_the_bigger_entry_goes_not_the_older(clock):
    cache = ComposeCache(budget=6000)
    # same 2 s each: per byte the 4000 B one saves least; the 1000 B one is older (first in)
    assert put(cache, clock, "small_old", 1000, 2.0).stored
    assert put(cache, clock, "big_young", 4000, 2.0).stored
    assert put(cache, clock, "third", 2000, 2.0).stored  # 7000 B > 6000 B: one goes
    assert lookup(cache, clock, "small_old").hit
    assert lookup(cache, clock, "third").hit
    gone = lookup(cache, clock, "big_young")
    assert not gone.hit and gone.reason == "evicted"
    assert cache.nbytes == 3000


def test_a_slow_small_state_outlives_a_quick_big_one_over_many_insertions(clock):
    """Many same-sized quick entries pass through; a small, expensive one is never the victim."""
    cache = ComposeCache(budget=5000)
    assert put(cache, clock, "precious", 400, 0.8).stored  # 2 ms/B, though quicker than each filler
    for i in range(20):
        assert put(cache, clock, f"filler{i}", 2000, 1.0).stored  # 0.5 ms/B, more seconds than `precious`
    assert lookup(cache, clock, "precious").hit
    assert cache.nbytes <= 5000

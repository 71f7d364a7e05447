"""The Compose tab's caches key a run by the store's fingerprint, and that fingerprint covers the
context suffix (the text appended to every context before it is encoded): the same store location
built with another suffix holds other states, so its scored runs and composed states are not
served from the other's cache entries."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from picaso_core.analysis.compose_cache import ComposeCache, ResultCache
from picaso_core.analysis.evaluate import run_methods
from picaso_core.engine.loading import load_model
from picaso_core.session import Resources
from picaso_core.store.store import StateStore
from picaso_core.ui.tabs import compose_runs

DATABASE = {"c1": "Velmora is a city in the northern province of Tarrix.",
            "c2": "The main export of Velmora is blue glass, and its river is the Quell."}
IDS = ["c1", "c2"]
METHODS = ("soup", "picaso_r")  # composed from the stored states alone
QUERY, ANSWER = "Velmora is a city in", " Tarrix."


def fake(url: str, suffix: str):
    return SimpleNamespace(store=SimpleNamespace(url=url, suffix=suffix))


def test_store_fingerprint_covers_the_location_and_the_suffix():
    fp = compose_runs.store_fingerprint
    assert fp(fake("/s", "\n\n")) == fp(fake("/s", "\n\n"))
    assert fp(fake("/s", "")) != fp(fake("/s", "\n\n"))
    assert fp(fake("/s", "\n")) != fp(fake("/s", "\n\n"))
    assert fp(fake("/s", " ")) != fp(fake("/s", ""))
    assert fp(fake("/a", "\n\n")) != fp(fake("/b", "\n\n"))


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir))


@pytest.fixture
def fresh_caches(monkeypatch):
    """The module's caches, empty for this test (and put back after it)."""
    monkeypatch.setattr(compose_runs, "CACHE", ComposeCache())
    monkeypatch.setattr(compose_runs, "RESULTS", ResultCache(64))


def resources(model, store, tmp_path) -> Resources:
    return Resources(model, "tiny", SimpleNamespace(name="t", split="test", database=dict(DATABASE), samples=[]),
                     store, None, 10_000, {}, tmp_path)


def uncached(res, q, a) -> list[float]:
    """The losses run_methods gives for res's stored states, with no cache at all."""
    results = run_methods(res.model, q, a, [res.token_ids(c) for c in IDS], context_states=res.states(IDS),
                          methods=METHODS, generate_tokens=0, seed=0)
    return [r.loss for r in results]


def test_a_store_with_another_suffix_does_not_share_cached_runs(model, tmp_path, fresh_caches):
    q, a = model.tokenizer.encode(QUERY), model.tokenizer.encode(ANSWER)
    folder = tmp_path / "store"

    plain = resources(model, StateStore.build(model, [], folder, suffix="", progress=False), tmp_path)
    first = compose_runs.run_methods_cached(plain, q, a, IDS, METHODS, 0)
    assert [r.note for r in first] == ["composed (new set)", "composed (new rotation)"]
    again = compose_runs.run_methods_cached(plain, q, a, IDS, METHODS, 0)
    assert [r.note for r in again] == [compose_runs.FROM_RESULTS] * 2  # the cache works for the same store
    assert [r.loss for r in first] == uncached(plain, q, a)

    # the same folder rebuilt with the suffix "\n\n": same location, other states
    suffixed = resources(model, StateStore.build(model, [], folder, suffix="\n\n", overwrite=True, progress=False),
                         tmp_path)
    assert suffixed.store.url == plain.store.url and suffixed.store.suffix != plain.store.suffix
    want = uncached(suffixed, q, a)
    assert want != [r.loss for r in first]  # the suffix changes the states, so the losses

    compose_runs.RESULTS.misses = 0
    second = compose_runs.run_methods_cached(suffixed, q, a, IDS, METHODS, 0)
    assert compose_runs.RESULTS.misses == 1  # not served the plain store's scored run
    assert all(r.note != compose_runs.FROM_RESULTS for r in second)
    assert all(not r.note.startswith("state from cache") for r in second)  # nor its composed states
    assert [r.loss for r in second] == want

    # and a Resources of the same suffixed store (e.g. dataclasses.replace) shares it as it should
    twin = replace(suffixed)
    assert [r.note for r in compose_runs.run_methods_cached(twin, q, a, IDS, METHODS, 0)] == [compose_runs.FROM_RESULTS] * 2

"""The composed-state cache: keys as each method's invariance allows, exact equality with a fresh
composition, the byte budget, eviction by compute saved per byte, miss reasons, fingerprints."""

import random

import pytest
import torch

from picaso_core.analysis.compose_cache import ComposeCache, canonical, cached_states, state_nbytes
from picaso_core.analysis.evaluate import run_methods
from picaso_core.compose import build_state, compose
from tests.conftest import tiny_model

METHODS = ("concat", "soup", "caso", "picaso_s", "picaso_r", "picconcat_r")


@pytest.fixture(scope="module")
def setup():
    model = tiny_model()
    g = torch.Generator().manual_seed(0)
    ids = [f"c{i}" for i in range(6)]
    tokens = {c: torch.randint(0, 50, (5 + i,), generator=g).tolist() for i, c in enumerate(ids)}
    states = dict(zip(ids, model.encode_contexts([tokens[c] for c in ids])))
    return model, tokens, states


def run(cache, setup, order, methods=METHODS, model_fp="m", store_fp="s"):
    model, tokens, states = setup
    return cached_states(cache, model, methods, order, [tokens[c] for c in order], [states[c] for c in order],
                         model_fp=model_fp, store_fp=store_fp)


def same(a, b) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("ssm", "conv", "log_decay")) \
        and a.num_tokens == b.num_tokens


def test_canonical_keys():
    assert canonical("soup", ["b", "c", "a"]) == canonical("picaso_s", ["c", "a", "b"]) == ("a", "b", "c")
    assert canonical("picaso_r", ["b", "c", "a"]) == canonical("picaso_r", ["c", "a", "b"]) == ("a", "b", "c")
    assert canonical("picaso_r", ["c", "b", "a"]) == ("a", "c", "b")  # a reflection is another rotation class
    assert canonical("caso", ["b", "a"]) == ("b", "a")
    with pytest.raises(ValueError, match="not cached"):
        canonical("none", ["a"])


def test_shuffled_order_hits_invariant_methods_only(setup):
    cache = ComposeCache()
    order = ["c0", "c1", "c2", "c3", "c4"]
    _, first = run(cache, setup, order)
    assert not any(lk.hit for lk in first.values())
    assert {lk.reason for m, lk in first.items()} == {"new set", "new rotation", "new order"}
    _, rotated = run(cache, setup, order[2:] + order[:2])  # a cyclic shift of the retrieval order
    hit = {m for m, lk in rotated.items() if lk.hit}
    assert hit == {"soup", "picaso_s", "picaso_r", "picconcat_r"}
    assert rotated["concat"].reason == rotated["caso"].reason == "new order"
    _, shuffled = run(cache, setup, ["c3", "c0", "c4", "c1", "c2"])  # not a rotation of the first
    assert {m for m, lk in shuffled.items() if lk.hit} == {"soup", "picaso_s"}
    stats = cache.stats()
    assert stats["methods"]["soup"]["hits"] == 2 and stats["methods"]["concat"]["misses"] == 3
    assert stats["hits"] + stats["misses"] == 3 * len(METHODS)


def test_cached_state_equals_fresh_composition(setup):
    model, tokens, states = setup
    cache = ComposeCache()
    order = ["c4", "c1", "c3"]
    run(cache, setup, order)
    for perm in (order, order[1:] + order[:1], order[::-1]):
        built, looked = run(cache, setup, perm)
        for m in METHODS:
            want = canonical(m, perm)  # what a fresh composition in the key's order gives
            fresh = build_state(model, m, [tokens[c] for c in want], [states[c] for c in want])
            assert same(built[m], fresh), (m, perm)
            # and the same state as composing in the given order, up to float rounding
            direct = build_state(model, m, [tokens[c] for c in perm], [states[c] for c in perm])
            if looked[m].hit or m in ("concat", "caso"):
                torch.testing.assert_close(built[m].ssm, direct.ssm, rtol=1e-5, atol=1e-5)


def test_run_methods_with_cached_states_scores_the_same(setup):
    model, tokens, states = setup
    order = ["c2", "c0", "c5"]
    cache = ComposeCache()
    run(cache, setup, order)
    built, _ = run(cache, setup, order)  # all hits
    query, cont = [3, 4, 5], [6, 7]
    ref = run_methods(model, query, cont, [tokens[c] for c in order], [states[c] for c in order],
                      methods=("none",) + METHODS)
    got = run_methods(model, query, cont, [tokens[c] for c in order], [states[c] for c in order],
                      methods=("none",) + METHODS, prebuilt=built)
    for r, g in zip(ref, got):
        assert g.loss == pytest.approx(r.loss, abs=1e-5), r.method


def test_budget_never_exceeded_and_cheap_states_go_first(setup):
    model, tokens, states = setup
    one = state_nbytes(states["c0"])
    cache = ComposeCache(budget=3 * one)
    rng = random.Random(0)
    for _ in range(40):
        order = rng.sample(sorted(states), rng.randint(1, 4))
        run(cache, setup, order, methods=("soup", "concat", "caso"))
        assert cache.nbytes <= cache.budget
        assert cache.nbytes == sum(v["bytes"] for v in cache.stats()["methods"].values())
    s = cache.stats()
    assert s["evictions"] > 0 and s["entries"] <= 3
    # eviction by compute saved per byte: a forward pass (Concat) is kept over weighted sums
    cache = ComposeCache(budget=2 * one)
    slow = lambda ids, sts: (__import__("time").sleep(0.02), compose("soup", sts))[1]  # noqa: E731
    fast = lambda ids, sts: compose("soup", sts)  # noqa: E731
    st = [states["c0"], states["c1"]]
    cache.state("concat", ["c0", "c1"], st, slow, model_fp="m", store_fp="s")
    cache.state("soup", ["c0", "c1"], st, fast, model_fp="m", store_fp="s")
    _, lk = cache.state("caso", ["c1", "c0"], st, fast, model_fp="m", store_fp="s")  # over budget: the cheapest goes
    assert cache.stats()["methods"]["concat"]["entries"] == 1
    assert cache.stats()["evictions"] == 1
    _, again = cache.state("concat", ["c0", "c1"], st, slow, model_fp="m", store_fp="s")
    assert again.hit
    evicted = "soup" if cache.stats()["methods"]["soup"]["evictions"] else "caso"
    _, back = cache.state(evicted, ["c0", "c1"] if evicted == "soup" else ["c1", "c0"], st, fast, model_fp="m",
                          store_fp="s")
    assert not back.hit and back.reason == "evicted"
    # a state larger than the whole budget is composed, never kept
    tiny = ComposeCache(budget=one // 2)
    _, lk = tiny.state("soup", ["c0"], [states["c0"]], fast, model_fp="m", store_fp="s")
    assert not lk.stored and tiny.nbytes == 0


def test_changed_fingerprint_never_serves_an_old_entry(setup):
    cache = ComposeCache()
    order = ["c0", "c1"]
    run(cache, setup, order, model_fp="m1")
    built, looked = run(cache, setup, order, model_fp="m2")
    assert not any(lk.hit for lk in looked.values())
    assert {lk.reason for lk in looked.values()} == {"fingerprint changed"}
    _, looked = run(cache, setup, order, model_fp="m2", store_fp="other store")
    assert {lk.reason for lk in looked.values()} == {"fingerprint changed"}
    _, looked = run(cache, setup, order, model_fp="m1")  # the first model's entries are still there
    assert all(lk.hit for lk in looked.values())


def test_bad_input():
    with pytest.raises(ValueError, match="budget"):
        ComposeCache(budget=-1)
    with pytest.raises(ValueError, match="2 states for 1 ids"):
        ComposeCache().state("soup", ["a"], [1, 2], lambda i, s: None, model_fp="m", store_fp="s")


def test_a_rope_hybrid_keys_every_method_by_order():
    """On a RoPE hybrid the composed keys sit at their offsets in the joined order, so a shuffle must not
    hit an order-free key: every method's cached state equals a fresh composition in the given order."""
    from tests.conftest import granite_rope_hybrid

    model = granite_rope_hybrid()
    g = torch.Generator().manual_seed(1)
    ids = ["a", "b", "c"]
    tokens = {c: torch.randint(0, 50, (4 + i,), generator=g).tolist() for i, c in enumerate(ids)}
    states = dict(zip(ids, (model.encode_context(tokens[c]) for c in ids)))
    cache, methods = ComposeCache(), ("soup", "picaso_s", "picaso_r")

    def through(order):
        return cached_states(cache, model, methods, order, [tokens[c] for c in order], [states[c] for c in order],
                             model_fp="m", store_fp="s")

    through(["a", "b", "c"])
    built, looked = through(["c", "a", "b"])  # a rotation (and a permutation) of the first order
    assert not any(lk.hit for lk in looked.values()) and {lk.reason for lk in looked.values()} == {"new order"}
    for m in methods:
        fresh = build_state(model, m, [tokens[c] for c in ("c", "a", "b")], [states[c] for c in ("c", "a", "b")])
        assert torch.equal(built[m].keys, fresh.keys) and torch.equal(built[m].ssm, fresh.ssm), m
    assert all(lk.hit for lk in through(["c", "a", "b"])[1].values())  # the same order again: a hit
    with pytest.raises(ValueError, match="keying"):
        canonical("soup", ["a"], keying="bag")

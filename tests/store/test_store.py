"""StateStore: round trip, refusal of another model's states, corruption detected per shard,
lazy loading with a bounded cache, contexts added without rebuilding."""

import json

import pytest
import torch

from picaso_core.store.store import CorruptShardError, StateStore, StoreError

from conftest import STORE_CONTEXTS as CONTEXTS
from conftest import byte_model


@pytest.fixture(scope="module")
def model():
    return byte_model()


@pytest.fixture
def built(model, tmp_path):
    return StateStore.build(model, CONTEXTS, tmp_path / "store", shard_size=4, batch_size=3, progress=False)


def test_round_trip_equals_encoding_each_context_alone(model, built, tmp_path):
    store = StateStore.open(tmp_path / "store", model)
    assert store.ids == [cid for cid, _ in CONTEXTS]  # insertion order, not length order
    assert len(store) == len(CONTEXTS) and len(built._shards) == 3  # 11 contexts, 4 per shard
    for cid, text in CONTEXTS:
        want = model.encode_context(model.tokenizer.encode(text))
        got = store.get(cid)
        assert store.text(cid) == text
        assert store.num_tokens(cid) == got.num_tokens == len(text.encode())
        for f in ("ssm", "conv", "log_decay"):
            torch.testing.assert_close(getattr(got, f), getattr(want, f), rtol=1e-5, atol=1e-6)
    many = store.get_many(["c3", "c0", "c3"])
    assert [s.num_tokens for s in many] == [store.num_tokens(c) for c in ("c3", "c0", "c3")]
    assert store.check() == []


def test_progress_reaches_the_total(model, tmp_path):
    seen = []
    StateStore.build(model, CONTEXTS[:5], tmp_path / "s", shard_size=2, progress=lambda i, n: seen.append((i, n)))
    assert seen[-1] == (5, 5) and all(n == 5 for _, n in seen)


def test_another_models_states_are_refused_with_the_fix(built, tmp_path):
    other = byte_model(seed=1)
    with pytest.raises(StoreError, match=r"built by .*fingerprint.*overwrite=True"):
        StateStore.open(tmp_path / "store", other)


def test_missing_store_and_existing_store_name_the_fix(model, built, tmp_path):
    with pytest.raises(StoreError, match="StateStore.build"):
        StateStore.open(tmp_path / "nowhere", model)
    with pytest.raises(StoreError, match="overwrite=True"):
        StateStore.build(model, CONTEXTS, tmp_path / "store", progress=False)
    rebuilt = StateStore.build(model, CONTEXTS[:2], tmp_path / "store", overwrite=True, progress=False)
    assert len(rebuilt) == 2 and len(list((tmp_path / "store").glob("shard-*.safetensors"))) == 1
    empty = StateStore.build(model, [], tmp_path / "store", overwrite=True, progress=False)
    assert len(empty) == 0 and len(StateStore.open(tmp_path / "store", model)) == 0


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_shard_is_named_and_the_rest_stays_usable(model, built, tmp_path, damage):
    folder = tmp_path / "store"
    meta = json.loads((folder / "store.json").read_text())
    bad = meta["shards"][1]
    path = folder / bad["file"]
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        data[-10] ^= 0xFF  # one flipped byte inside a tensor: only the checksum sees it
        path.write_bytes(bytes(data))
    store = StateStore.open(folder, model)
    good = [cid for cid in store.ids if cid not in bad["ids"]]
    assert len(store.get_many(good)) == len(good)  # other shards load
    with pytest.raises(CorruptShardError, match=bad["file"]) as e:
        store.get(bad["ids"][0])
    assert e.value.shard == bad["file"] and "repair()" in str(e.value)
    assert store.check() == [bad["file"]]
    assert store.repair(progress=False) == [bad["file"]]
    reopened = StateStore.open(folder, model)
    assert reopened.check() == []
    torch.testing.assert_close(reopened.get(bad["ids"][0]).ssm,
                               model.encode_context(model.tokenizer.encode(reopened.text(bad["ids"][0]))).ssm,
                               rtol=1e-5, atol=1e-6)


def test_loads_are_lazy_and_the_cache_is_bounded(model, built, tmp_path):
    one = model.config.state_nbytes()
    store = StateStore.open(tmp_path / "store", model, cache_bytes=3 * one)
    assert store.cached_ids() == []  # opening reads only store.json
    for cid in ["c0", "c1", "c2", "c3", "c1"]:
        store.get(cid)
    assert store.cached_ids() == ["c2", "c3", "c1"]  # LRU order, at most 3 states
    a = store.get("c3")
    assert store.get("c3") is a  # a hit returns the cached value


def test_add_without_rebuilding_keeps_existing_shards(model, built, tmp_path):
    folder = tmp_path / "store"
    before = {p.name: p.stat().st_mtime_ns for p in folder.glob("shard-*.safetensors")}
    added = built.add([("new1", "A brand new passage."), ("new2", "Another one.")], progress=False)
    assert added == ["new1", "new2"]
    after = {p.name: p.stat().st_mtime_ns for p in folder.glob("shard-*.safetensors")}
    assert {k: after[k] for k in before} == before and len(after) == len(before) + 1
    store = StateStore.open(folder, model)
    assert store.ids[-2:] == ["new1", "new2"] and len(store) == len(CONTEXTS) + 2
    torch.testing.assert_close(store.get("new2").ssm, model.encode_context(list(b"Another one.")).ssm,
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(StoreError, match="already in the store"):
        store.add([("c0", "changed text")], progress=False)


def test_unknown_id_names_the_store(built):
    with pytest.raises(KeyError, match="not in the state store"):
        built.get("nope")


def test_suffix_is_part_of_every_encoded_context(model, tmp_path):
    store = StateStore.build(model, CONTEXTS[:2], tmp_path / "s", suffix="\n\n", progress=False)
    ids = store.token_ids("c1")
    assert ids == list((CONTEXTS[1][1] + "\n\n").encode()) and store.num_tokens("c1") == len(ids)
    torch.testing.assert_close(StateStore.open(tmp_path / "s", model).get("c1").ssm,
                               model.encode_context(ids).ssm, rtol=1e-5, atol=1e-6)


def test_ensure_encodes_only_what_is_missing_once_even_from_many_threads(model, tmp_path):
    import threading

    store = StateStore.build(model, CONTEXTS[:2], tmp_path / "s", progress=False)
    calls = []
    encode = model.encode_contexts

    def counting(ids, **kw):
        calls.append(len(ids))
        return encode(ids, **kw)

    model.encode_contexts = counting
    try:
        wanted = [CONTEXTS[i] for i in (0, 3, 4, 5)]
        errors = []

        def worker():
            try:
                store.ensure(wanted)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        del model.encode_contexts
    assert not errors and sum(calls) == 3  # c3, c4, c5 encoded once; c0 was stored
    assert store.ids == ["c0", "c1", "c3", "c4", "c5"]
    assert store.ensure(wanted) == []
    ref = model.encode_context(model.tokenizer.encode(CONTEXTS[4][1]))
    torch.testing.assert_close(store.get("c4").ssm, ref.ssm)
    reopened = StateStore.open(tmp_path / "s", model)
    assert reopened.ids == store.ids
    with pytest.raises(StoreError, match="'c3' is stored .* another text"):
        reopened.ensure([("c3", "a new text under an old id")])
    assert reopened.ids == store.ids

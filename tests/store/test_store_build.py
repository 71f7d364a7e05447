"""The store build (picaso_core.store.build) and what it adds to StateStore: the Ray engine equals the
local one and the app opens its store; half-precision states; stores at fsspec URLs; a missing
worker shard or a shard of another model named; an interrupted build resumed without re-encoding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from picaso_core.store.store import CorruptShardError, StateStore, StoreError
from picaso_core.store.build import ShardEncoder, build_store, write_index
from picaso_core.store.cli import main
from conftest import STORE_CONTEXTS as CONTEXTS
from conftest import byte_model

TOL = {"float16": 2e-3, "bfloat16": 1.6e-2}  # ~4 ulps of each format's 11 / 8 mantissa bits


@pytest.fixture(scope="module")
def model():
    return byte_model()


def assert_same_store(a: StateStore, b: StateStore, rtol=1e-5, atol=1e-6):
    assert a.ids == b.ids and a.dtype == b.dtype
    for cid in a.ids:
        assert a.num_tokens(cid) == b.num_tokens(cid) and a.text(cid) == b.text(cid)
        x, y = a.get(cid), b.get(cid)
        for f in ("ssm", "conv", "log_decay"):
            torch.testing.assert_close(getattr(x, f), getattr(y, f), rtol=rtol, atol=atol)


def test_ray_build_equals_local_build_and_the_app_opens_it(tmp_path):
    ray = pytest.importorskip("ray")
    from picaso_core.data import load_corpus
    from picaso_core.engine.loading import load_model
    from picaso_core.session import load_resources
    from conftest import BagOfWords

    demo = load_model("demo")
    demo.name_or_path = "demo"
    contexts = list(load_corpus("demo", "test").database.items())[:8]  # a few: CPU is scarce
    local = build_store(demo, contexts, tmp_path / "local", shard_size=3, progress=False)
    root = str(Path(__file__).resolve().parents[2])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": root}})
    try:
        out = build_store(demo, contexts, tmp_path / "ray", engine="ray", workers=2, shard_size=3, progress=False)
    finally:
        ray.shutdown()
    assert out["encoded"] == local["encoded"] == 8 and out["shards"] == 3
    a, b = StateStore.open(tmp_path / "local", demo), StateStore.open(tmp_path / "ray", demo)
    assert_same_store(a, b)
    assert a.ids == [cid for cid, _ in contexts]  # corpus order, whoever encoded what
    workers = {json.loads(p.read_text())["worker"] for p in (tmp_path / "ray").glob("*.safetensors.json")}
    assert workers and "local" not in workers  # each Ray actor names its own shards (host-pid)

    res = load_resources("demo", "demo", "test", cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                         log=lambda m: None, store=str(tmp_path / "ray"))
    assert res.store.folder == tmp_path / "ray" and res.store.ids == a.ids
    torch.testing.assert_close(res.states([contexts[5][0]])[0].ssm, a.get(contexts[5][0]).ssm)
    with pytest.raises(StoreError, match=r"no state store at .*typo; build one with `python -m picaso_core.store build"):
        load_resources("demo", "demo", "test", cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                       log=lambda m: None, store=str(tmp_path / "typo"))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_round_trip_within_tolerance_at_half_the_disk(model, tmp_path, dtype):
    full = StateStore.build(model, CONTEXTS, tmp_path / "f32", progress=False)
    half = StateStore.build(model, CONTEXTS, tmp_path / dtype, progress=False, dtype=dtype)
    reopened = StateStore.open(tmp_path / dtype, model)
    assert reopened.dtype == dtype and dtype in repr(reopened)
    assert 0.45 < half.nbytes / full.nbytes < 0.55  # ssm and conv halve; log_decay is tiny
    for cid, _ in CONTEXTS:
        x, y = full.get(cid), reopened.get(cid)
        assert y.ssm.dtype == torch.float32  # read back as float32
        torch.testing.assert_close(y.ssm, x.ssm, rtol=TOL[dtype], atol=TOL[dtype] * x.ssm.abs().max().item())
        torch.testing.assert_close(y.conv, x.conv, rtol=TOL[dtype], atol=TOL[dtype] * x.conv.abs().max().item())
        assert torch.equal(y.log_decay, x.log_decay)  # decays stay float32: composition multiplies them
    from safetensors import safe_open

    shard = tmp_path / dtype / json.loads((tmp_path / dtype / "store.json").read_text())["shards"][0]["file"]
    with safe_open(str(shard), framework="pt") as f:
        k = next(k for k in f.keys() if k.endswith("/ssm"))
        assert f.get_tensor(k).dtype == getattr(torch, dtype)
        assert f.get_tensor(k.replace("/ssm", "/log_decay")).dtype == torch.float32


def test_a_store_in_one_dtype_refuses_to_be_appended_to_in_another(model, tmp_path):
    store = StateStore.build(model, CONTEXTS[:3], tmp_path / "s", progress=False)
    with pytest.raises(StoreError, match="holds float32 states; it cannot be appended to in bfloat16"):
        store.add(CONTEXTS[3:5], dtype="bfloat16", progress=False)
    assert store.add(CONTEXTS[3:5], dtype="float32", progress=False) == ["c3", "c4"]
    with pytest.raises(StoreError, match="cannot be appended to in another: pass --dtype float32"):
        build_store(model, CONTEXTS, tmp_path / "s", dtype="float16", progress=False)
    with pytest.raises(StoreError, match="dtype must be one of"):
        StateStore.build(model, [], tmp_path / "t", dtype="float8", progress=False)


def test_float16_overflow_is_refused_with_the_fix(model, tmp_path):
    store = StateStore.build(model, [], tmp_path / "s", progress=False, dtype="float16")
    big = model.encode_context([1, 2, 3])
    big = type(big)(big.ssm + 1e6, big.conv, big.log_decay, big.num_tokens)
    model_encode = model.encode_contexts
    model.encode_contexts = lambda ids, **kw: [big for _ in ids]
    try:
        with pytest.raises(StoreError, match="overflows float16.*bfloat16"):
            store.add([("x", "abc")], progress=False)
    finally:
        del model.encode_contexts
    assert model.encode_contexts == model_encode and len(store) == 0


def shard_of(folder: Path, cid: str) -> dict:
    meta = json.loads((folder / "store.json").read_text())
    return meta["shards"][next(c["shard"] for c in meta["contexts"] if c["id"] == cid)]


def test_missing_worker_shard_is_named_and_a_rerun_re_encodes_only_it(model, tmp_path, capsys):
    out = tmp_path / "s"
    assert build_store(model, CONTEXTS, out, shard_size=4, progress=False)["shards"] == 3
    gone = shard_of(out, "c5")
    (out / gone["file"]).unlink()
    store = StateStore.open(out, model)
    assert store.check() == [gone["file"]]
    with pytest.raises(CorruptShardError, match=f"{gone['file']}, written by worker local.*file missing"):
        store.get("c5")
    assert len(store.get_many([c for c in store.ids if c not in gone["ids"]])) == len(CONTEXTS) - len(gone["ids"])
    capsys.readouterr()
    again = build_store(model, CONTEXTS, out, shard_size=4, progress=False)
    assert again["encoded"] == len(gone["ids"]) and again["skipped"] == len(CONTEXTS) - len(gone["ids"])
    assert f"shard {gone['file']} (worker local) is missing or truncated at {out}; its {len(gone['ids'])} " \
           "contexts are encoded again" in capsys.readouterr().err
    fresh = build_store(model, CONTEXTS, tmp_path / "fresh", shard_size=4, progress=False)
    assert fresh["encoded"] == len(CONTEXTS)
    assert_same_store(StateStore.open(out, model), StateStore.open(tmp_path / "fresh", model))


def test_shards_of_two_workers_make_one_store_and_a_lost_one_names_its_worker(model, tmp_path, capsys):
    """What the Ray engine does with 2 actors, without Ray's scheduling: each worker encodes half."""
    out, half = tmp_path / "s", len(CONTEXTS) // 2
    enc = dict(out=str(out), dtype="float32", suffix="\n\n", fingerprint=model.fingerprint())
    out.mkdir()
    records = [ShardEncoder(model, worker="w0", **enc).encode(*map(list, zip(*CONTEXTS[:half]))),
               ShardEncoder(model, worker="w1", **enc).encode(*map(list, zip(*CONTEXTS[half:])))]
    write_index(model, CONTEXTS, str(out), "float32", "\n\n", None, records)
    meta = json.loads((out / "store.json").read_text())
    assert [s["worker"] for s in meta["shards"]] == ["w0", "w1"] and all(s["file"].startswith(f"shard-{s['worker']}-")
                                                                         for s in meta["shards"])
    store = StateStore.open(out, model)
    build_store(model, CONTEXTS, tmp_path / "local", progress=False)
    assert_same_store(store, StateStore.open(tmp_path / "local", model))  # same ids in order, equal states

    w1 = meta["shards"][1]
    (out / w1["file"]).unlink()
    store = StateStore.open(out, model)
    assert store.check() == [w1["file"]]
    with pytest.raises(CorruptShardError, match=f"{w1['file']}, written by worker w1 is corrupt \\(file missing\\)"):
        store.get(CONTEXTS[-1][0])
    assert len(store.get_many([c for c, _ in CONTEXTS[:half]])) == half  # w0's shard still reads
    capsys.readouterr()
    again = build_store(model, CONTEXTS, out, progress=False)
    assert again["encoded"] == len(CONTEXTS) - half and again["skipped"] == half
    assert f"shard {w1['file']} (worker w1) is missing or truncated" in capsys.readouterr().err
    assert_same_store(StateStore.open(out, model), StateStore.open(tmp_path / "local", model))


def test_shard_of_another_model_is_named(model, tmp_path):
    out, other_out = tmp_path / "s", tmp_path / "other"
    build_store(model, CONTEXTS, out, shard_size=4, progress=False)
    other = byte_model(seed=1)  # same shapes, other weights
    build_store(other, CONTEXTS[:4], other_out, progress=False)
    stray = next(other_out.glob("*.safetensors"))
    # a worker that ran another checkpoint left a shard in the build folder
    shutil.copy(stray, out / "shard-node7-stray.safetensors")
    side = json.loads(Path(f"{stray}.json").read_text()) | {"file": "shard-node7-stray.safetensors", "worker": "node7"}
    (out / "shard-node7-stray.safetensors.json").write_text(json.dumps(side))
    with pytest.raises(StoreError, match=r"shard-node7-stray.safetensors \(written by worker node7\) holds states "
                                         r"of another model"):
        build_store(model, CONTEXTS, out, shard_size=4, progress=False)
    # a shard swapped under the index: the sha256 catches it, and without verification the header does
    victim = shard_of(out, "c0")
    shutil.copy(stray, out / victim["file"])
    with pytest.raises(CorruptShardError, match=f"{victim['file']}.*sha256"):
        StateStore.open(out, model).get("c0")
    meta = json.loads((out / "store.json").read_text())
    for s in meta["shards"]:
        if s["file"] == victim["file"]:
            s["nbytes"] = stray.stat().st_size
    (out / "store.json").write_text(json.dumps(meta))
    with pytest.raises(CorruptShardError, match=f"{victim['file']}.*encoded by another model"):
        StateStore.open(out, model, verify=False).get("c0")


class Interrupt(Exception):
    pass


def test_interrupted_build_resumes_without_re_encoding(model, tmp_path):
    out = tmp_path / "s"

    def stop_after_two_shards(done, total):
        if done >= 8:
            raise Interrupt  # like Ctrl-C between shards

    with pytest.raises(Interrupt):
        build_store(model, CONTEXTS, out, shard_size=4, progress=stop_after_two_shards)
    assert not (out / "store.json").exists() and len(list(out.glob("*.safetensors.json"))) == 2
    encoded = []
    encode = model.encode_contexts
    model.encode_contexts = lambda ids, **kw: encoded.extend(ids) or encode(ids, **kw)
    try:
        seen = []
        res = build_store(model, CONTEXTS, out, shard_size=4, progress=lambda i, n: seen.append((i, n)))
    finally:
        del model.encode_contexts
    assert res["encoded"] == len(encoded) == 3 and res["skipped"] == 8 and seen[-1] == (3, 3)
    assert build_store(model, CONTEXTS, out, progress=False)["encoded"] == 0  # complete: nothing to do
    build_store(model, CONTEXTS, tmp_path / "fresh", shard_size=4, progress=False)
    assert_same_store(StateStore.open(out, model), StateStore.open(tmp_path / "fresh", model))


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_store_at_a_url_is_read_lazily_through_a_local_cache(model, tmp_path, scheme):
    url = f"memory://stores/{tmp_path.name}" if scheme == "memory" else (tmp_path / "remote").as_uri()
    assert url.startswith(f"{scheme}://")
    build_store(model, CONTEXTS, url, shard_size=4, progress=False, dtype="bfloat16")
    store = StateStore.open(url, model, cache_dir=tmp_path / "cache")
    assert store.remote and store.dtype == "bfloat16" and len(store) == len(CONTEXTS)
    cache = store.folder
    assert cache.parent == tmp_path / "cache" and not list(cache.glob("*"))  # store.json only, no shard yet
    got = store.get("c0")
    assert len(list(cache.glob("*.safetensors"))) == 1  # just the shard holding c0
    local = StateStore.build(model, CONTEXTS, tmp_path / "local", progress=False, dtype="bfloat16", suffix="\n\n")
    torch.testing.assert_close(got.ssm, local.get("c0").ssm)
    store.get_many(store.ids)
    assert len(list(cache.glob("*.safetensors"))) == 3
    with pytest.raises(StoreError, match="read-only"):
        store.add([("new", "text")], progress=False)
    assert store.ensure(CONTEXTS[:2]) == []  # nothing to add: allowed
    # a second open reads the cached copies (here: the remote shards are gone)
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(url)
    for sh in json.loads(fs.cat_file(f"{root}/store.json"))["shards"]:
        fs.rm(f"{root}/{sh['file']}")
    again = StateStore.open(url, model, cache_dir=tmp_path / "cache")
    assert again.check() == [] and torch.equal(again.get("c3").ssm, store.get("c3").ssm)
    fresh = StateStore.open(url, model, cache_dir=tmp_path / "cache2")
    with pytest.raises(CorruptShardError, match="file missing"):
        fresh.get("c0")
    cached = next(cache.glob("*.safetensors"))
    cached.write_bytes(cached.read_bytes()[:-1] + b"x")  # a damaged download
    with pytest.raises(CorruptShardError, match="sha256 differs.*cached copy was deleted"):
        StateStore.open(url, model, cache_dir=tmp_path / "cache").get_many(again.ids)
    assert not cached.exists()


def test_cli_builds_resumes_and_refuses_bad_input(tiny_model_dir, tmp_path, capsys):
    from conftest import write_corpus

    corpus = write_corpus(tmp_path / "facts.jsonl")
    argv = ["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "s"),
            "--dtype", "bfloat16", "--shard-size", "3"]
    first = main(argv)
    assert first["encoded"] == 8 and first["shards"] == 3 and "encoded 8 contexts" in capsys.readouterr().out
    assert main(argv)["skipped"] == 8
    with pytest.raises(SystemExit, match="cannot be appended to in another: pass --dtype bfloat16"):
        main(argv[:-4] + ["--dtype", "float16"])
    with pytest.raises(SystemExit, match="--workers applies to --engine ray"):
        main(argv + ["--workers", "3"])
    from picaso_core.engine.loading import load_model

    assert StateStore.open(tmp_path / "s", load_model(str(tiny_model_dir))).dtype == "bfloat16"


def test_app_and_experiments_take_a_prebuilt_store_url(model, tmp_path, monkeypatch):
    import app
    from picaso_core import experiments
    from picaso_core.session import open_or_build_store

    assert app.parse_args([], env={"PICASO_STORE": "s3://bucket/demo"}).store == "s3://bucket/demo"
    assert app.parse_args(["--store", "gs://b/s"], env={"PICASO_STORE": "s3://x"}).store == "gs://b/s"
    monkeypatch.setenv("PICASO_STORE", "memory://env-store")
    assert experiments.parse_args([]).store == "memory://env-store"
    url = f"memory://stores/app-{tmp_path.name}"
    build_store(model, CONTEXTS[:6], url, progress=False)
    database = dict(CONTEXTS[:6])
    store = open_or_build_store(model, database, url, log=lambda m: None, remote_cache=tmp_path / "cache")
    assert store.remote and store.ids == list(database) and store.folder.parent == tmp_path / "cache"
    with pytest.raises(StoreError, match=r"holds 6 of the corpus's 11 contexts .* is read-only here; complete it "
                                         r"with `python -m picaso_core.store build"):
        open_or_build_store(model, dict(CONTEXTS), url, log=lambda m: None, remote_cache=tmp_path / "cache")


def test_experiments_cli_checks_its_store_up_front(tiny_model_dir, tmp_path, monkeypatch):
    """`python -m picaso_core.experiments --store`: a complete URL store runs; a partial one, a
    mistyped folder or another model's store stop before any work, in one line naming the fix."""
    from picaso_core import experiments
    from picaso_core.data import load_corpus
    from picaso_core.engine.loading import load_model
    from conftest import write_corpus
    from conftest import BagOfWords

    monkeypatch.setattr("picaso_core.store.store.REMOTE_CACHE", tmp_path / "remote")  # URL stores' local copies
    corpus = write_corpus(tmp_path / "facts.jsonl")
    database = list(load_corpus(str(corpus), "test").database.items())
    tiny = load_model(str(tiny_model_dir))
    url = f"memory://stores/exp-{tmp_path.name}"
    build_store(tiny, database, url, progress=False)

    def run(store, out):
        return experiments.main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--samples", "1",
                                 "--ks", "0-1", "--out", str(tmp_path / out), "--long-ks", "none", "--retrievers",
                                 "none", "--timing-tokens", "none", "--threads", "1", "--store", store],
                                embedder=BagOfWords())

    summary = run(url, "complete")
    assert summary["main"]["ks"] == [0, 1]
    assert len((tmp_path / "complete" / "records.jsonl").read_text().splitlines()) == 2 * len(experiments.METHODS)

    partial = f"{url}-partial"
    build_store(tiny, database[:5], partial, progress=False)
    with pytest.raises(SystemExit, match=rf"^error: the store at {partial} holds 5 of the corpus's {len(database)} "
                                         rf"contexts .* complete it with `python -m picaso_core.store build --model "
                                         rf"{tiny_model_dir} --corpus {corpus} --split test --out {partial}`"):
        run(partial, "partial")
    assert not (tmp_path / "partial" / "records.jsonl").exists()  # stopped before the sweep
    typo = tmp_path / "typo"
    with pytest.raises(SystemExit, match=rf"^error: no state store at {typo}; build one with `python -m "
                                         rf"picaso_core.store build .*--out {typo}`"):
        run(str(typo), "typo-run")
    assert not typo.exists() and not (tmp_path / "typo-run").exists()  # no empty store started
    other = f"{url}-other"
    build_store(byte_model(seed=3), database, other, progress=False)
    with pytest.raises(SystemExit, match=r"^error: the states in .* were built by .*not by the model given"):
        run(other, "other")

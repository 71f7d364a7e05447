"""The store under faults a visitor's requests meet (issue 47, item 6): retrieval passes over the
contexts a read-only store cannot serve and says so; repair lines give the true counts; every shard
written (build, the app's encode-on-use and repair) has its sidecar; `store check` names a missing
sidecar and a rerun build (or `repair`) writes it again without encoding."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import gradio as gr
import pytest

from picaso_core.session import load_resources
from picaso_core.store.cli import main as store_main
from picaso_core.store.store import StateStore
from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.ui.tour import runs as tour_runs

from conftest import BagOfWords, exit_line

QUERY, CONTINUATION = "Velmora, the city of blue glass, was founded", " in 1423 by Osric Dallen."


@pytest.fixture(scope="module")
def clean(tiny_model_dir, corpus_file, tmp_path_factory) -> Path:
    """A store of the tiny model over the facts corpus (8 contexts), 2 contexts a shard, built once."""
    out = tmp_path_factory.mktemp("hostile") / "clean"
    store_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus_file), "--out", str(out),
                "--shard-size", "2"])
    return out


@pytest.fixture(scope="module")
def fine(tiny_model_dir, corpus_file, tmp_path_factory) -> Path:
    """The same store with one context a shard (8 shards): which shards a request reads can be told apart."""
    out = tmp_path_factory.mktemp("hostile") / "fine"
    store_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus_file), "--out", str(out),
                "--shard-size", "1"])
    return out


def copy(clean: Path, tmp_path: Path) -> Path:
    shutil.copytree(clean, tmp_path / "store")
    return tmp_path / "store"


def index(folder: Path) -> dict:
    return json.loads((folder / "store.json").read_text())


def shard_of(folder: Path, cid: str) -> dict:
    return next(s for s in index(folder)["shards"] if cid in s["ids"])


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # inside a tensor: only the sha256 sees it
    path.write_bytes(bytes(data))


def resources(tiny_model_dir, corpus_file, folder: Path, tmp_path: Path, log=lambda line: None):
    return load_resources(str(tiny_model_dir), str(corpus_file), store=str(folder), cache_dir=tmp_path / "cache",
                          embedder=BagOfWords(), log=log)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected_sidecar(folder: Path, shard: dict, texts: dict[str, str], fingerprint: str) -> dict:
    """A shard's sidecar as the build writes it, from the shard's bytes and the corpus's texts."""
    path = folder / shard["file"]
    tokens = {c["id"]: c["num_tokens"] for c in index(folder)["contexts"]}
    return {"file": shard["file"], "sha256": sha(path), "nbytes": path.stat().st_size, "ids": shard["ids"],
            "num_tokens": [tokens[c] for c in shard["ids"]],
            "texts": [hashlib.sha256(texts[c].encode()).hexdigest()[:16] for c in shard["ids"]],
            "fingerprint": fingerprint, "dtype": "float32"}


# ---- retrieval over a read-only store with a damaged shard ---------------------------------------
def test_compose_retrieval_skips_damaged_shards_of_a_read_only_store_and_says_so(tiny_model_dir, corpus_file, fine,
                                                                                  tmp_path, monkeypatch):
    folder = copy(fine, tmp_path)
    bad = {c: shard_of(folder, c)["file"] for c in ("velmora-2", "velmora-0")}  # the 2 best contexts (ranked below)
    for file in bad.values():
        flip(folder / file)
    monkeypatch.setattr("picaso_core.store.store.writable", lambda folder: False)  # as on a read-only mount
    res = resources(tiny_model_dir, corpus_file, folder, tmp_path)
    k = 3
    ranked = [cid for cid, _ in res.retriever.retrieve(QUERY, len(res.database))]  # most relevant first
    assert ranked[0] == "velmora-2" and res.store.read_only
    hashed = []
    real = StateStore._ensure_good
    monkeypatch.setattr(StateStore, "_ensure_good", lambda self, i: hashed.append(i) or real(self, i))

    req = compose_tab.ComposeRequest.of(res, QUERY, CONTINUATION, k=k)
    got = compose_tab.choose_contexts(res, req)
    # the reference: the ranking without the damaged shards' contexts, its top k, most relevant last
    want = [c for c in ranked if c not in bad][:k][::-1]
    assert [c.cid for c in got] == want
    assert got.note == ("2 retrieved contexts skipped: their stored states are damaged (ids velmora-2, velmora-0); "
                        "the next-ranked contexts were used instead.")
    # only the shards of the k + 2 contexts ranked were checked (each once), never the whole store
    files = [s["file"] for s in index(folder)["shards"]]
    assert sorted(files[i] for i in hashed) == sorted(shard_of(folder, c)["file"] for c in ranked[:k + 2])

    # the whole /compose request is served from the next-ranked contexts, and says why
    out = compose_tab.compose(res, QUERY, CONTINUATION, k=k)
    summary, data = out[1], out[6]
    assert [c["id"] for c in data["contexts"]] == want
    assert got.note in summary and data["skipped"] == got.note
    # the tour's first Compose step (the example of this query, default k) says it too
    view = tour_runs.compose_none_vs_concat(res, example="q-velmora")
    assert "retrieved contexts skipped" in view.text and "velmora-2, velmora-0" in view.text
    # a hand-picked damaged context is not replaced: it fails in one line naming the repair
    with pytest.raises(gr.Error, match=f"{bad['velmora-0']}.*repair"):
        compose_tab.compose(res, QUERY, CONTINUATION, contexts=["velmora-0"])


def test_attribution_retrieval_skips_what_a_read_only_store_lacks(tiny_model_dir, corpus_file, tmp_path, monkeypatch):
    # the app's own store, filled on use with every context but one, then served read-only
    own = load_resources(str(tiny_model_dir), str(corpus_file), cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                         log=lambda line: None)
    ranked = [cid for cid, _ in own.retriever.retrieve(QUERY, len(own.database))]
    own.states([c for c in ranked if c != ranked[1]])
    monkeypatch.setattr("picaso_core.store.store.writable", lambda folder: False)  # as on a read-only mount
    res = resources(tiny_model_dir, corpus_file, Path(own.store.folder), tmp_path)
    assert res.store.read_only and ranked[1] not in res.store
    ids = attribution_tab.choose_contexts(res, QUERY, 2, None)
    assert list(ids) == [c for c in ranked if c != ranked[1]][:2][::-1]
    assert ids.note == (f"1 retrieved context skipped: the read-only store does not hold it (id {ranked[1]}); "
                        "the next-ranked context was used instead.")
    data = attribution_tab.run_attribution(res, QUERY, " in 1423.", k=2, methods=["picaso_r"])
    assert data["skipped"] == [ids.note] and [c["id"] for c in data["contexts"]] == list(ids)


def test_a_writable_store_skips_nothing_and_its_repair_line_gives_the_true_count(tiny_model_dir, corpus_file, clean,
                                                                                 tmp_path, caplog):
    folder = copy(clean, tmp_path)
    res = resources(tiny_model_dir, corpus_file, folder, tmp_path)
    ranked = [cid for cid, _ in res.retriever.retrieve(QUERY, len(res.database))]
    bad = shard_of(folder, ranked[0])
    flip(folder / bad["file"])
    with caplog.at_level("WARNING", logger="picaso_explorer"):
        out = compose_tab.compose(res, QUERY, CONTINUATION, k=3)
    assert [c["id"] for c in out[6]["contexts"]] == ranked[:3][::-1] and "skipped" not in out[6]
    said = [r.getMessage() for r in caplog.records if "repaired" in r.getMessage()]
    assert len(said) == 1 and f"their {len(bad['ids'])} contexts re-encoded" in said[0], said
    # the repaired shard keeps its name and, like every shard written, has its sidecar
    texts = dict(res.database)
    assert (folder / "damaged" / bad["file"]).is_file()
    side = json.loads((folder / (bad["file"] + ".json")).read_text())
    assert {k: side[k] for k in side if k != "worker"} == expected_sidecar(folder, shard_of(folder, ranked[0]), texts,
                                                                          res.model.fingerprint())
    assert store_main(["check", str(folder)])["damaged"] == {}


def test_cli_repair_line_gives_the_true_count(tiny_model_dir, clean, tmp_path, capsys):
    folder = copy(clean, tmp_path)
    shards = index(folder)["shards"]
    for s in shards[:2]:
        flip(folder / s["file"])
    capsys.readouterr()
    got = store_main(["repair", str(folder)])
    out = capsys.readouterr().out
    n = len(shards[0]["ids"]) + len(shards[1]["ids"])
    assert got["contexts"] == n and "repaired 2 damaged shards" in out and f"their {n} contexts re-encoded" in out
    assert [s["file"] for s in index(folder)["shards"]] == [s["file"] for s in shards]  # same names, new bytes
    assert all((folder / (s["file"] + ".json")).is_file() for s in shards)


# ---- sidecars -------------------------------------------------------------------------------------
def test_the_apps_encode_on_use_writes_each_shard_with_its_sidecar(tiny_model_dir, corpus_file, tmp_path):
    res = load_resources(str(tiny_model_dir), str(corpus_file), cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                         log=lambda line: None)  # the app's own store, filled on use
    ids = list(res.database)[:3]
    res.states(ids)
    folder = Path(res.store.folder)
    meta = index(folder)
    assert meta["shards"]
    for s in meta["shards"]:
        side = json.loads((folder / (s["file"] + ".json")).read_text())
        assert {k: side[k] for k in side if k != "worker"} == expected_sidecar(folder, s, dict(res.database),
                                                                              res.model.fingerprint())
    # so its index, once lost, is rebuilt from the sidecars without encoding anything
    (folder / "store.json").unlink()
    summary = store_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus_file), "--out", str(folder),
                          "--rebuild-index"])
    assert summary["encoded"] == len(res.database) - len(ids) and summary["skipped"] == len(ids)


def test_check_names_a_missing_sidecar_and_a_rerun_build_writes_it_without_encoding(tiny_model_dir, corpus_file, clean,
                                                                                    tmp_path, capsys):
    folder = copy(clean, tmp_path)
    shard = index(folder)["shards"][1]
    side = folder / (shard["file"] + ".json")
    original = json.loads(side.read_text())
    side.unlink()
    line = exit_line(lambda: store_main(["check", str(folder)]))
    assert side.name in line and f"python -m picaso_core.store repair {folder}" in line and "\n" not in line
    shards = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.safetensors")}
    capsys.readouterr()
    summary = store_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus_file), "--out", str(folder),
                          "--shard-size", "2"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if "sidecar" in ln]
    assert summary["encoded"] == 0 and len(err) == 1 and side.name in err[0]
    assert json.loads(side.read_text()) == original
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.safetensors")} == shards  # nothing re-encoded
    assert store_main(["check", str(folder)])["damaged"] == {}


def test_repair_writes_a_missing_sidecar_without_a_model(clean, tmp_path, capsys, monkeypatch):
    folder = copy(clean, tmp_path)
    shard = index(folder)["shards"][0]
    side = folder / (shard["file"] + ".json")
    original = json.loads(side.read_text())
    side.unlink()
    monkeypatch.setattr("picaso_core.engine.loading.load_model", lambda *a, **kw: pytest.fail("loaded a model"))
    assert store_main(["repair", str(folder)])["sidecars"] == [side.name]
    assert json.loads(side.read_text()) == original
    assert store_main(["check", str(folder)])["damaged"] == {}


def test_a_new_shard_never_takes_the_name_of_a_live_one(tiny_model_dir, tmp_path):
    # an app store whose index lost its first shard (a build dropped it): shard-00001 now sits at index 0,
    # so the next shard, at index 1, must not be written over it
    from picaso_core.engine.loading import load_model

    model = load_model(str(tiny_model_dir))
    folder = tmp_path / "own"
    StateStore.build(model, [("a", "Velmora is a city."), ("b", "Tarrix is a mountain in the north.")], folder,
                     shard_size=1, progress=False)
    meta = index(folder)
    dropped = meta["shards"].pop(0)
    meta["contexts"] = [dict(c, shard=0) for c in meta["contexts"] if c["id"] not in dropped["ids"]]
    (folder / "store.json").write_text(json.dumps(meta))
    store = StateStore.open(folder, model)
    kept = store.ids[0]
    before = store.get(kept).ssm.clone()
    store.add([("c", "Brandor makes bicycles.")], progress=False)
    again = StateStore.open(folder, model)
    assert again.check() == [] and len({s.file for s in again._shards}) == 2
    assert (again.get(kept).ssm == before).all()

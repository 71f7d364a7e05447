"""Store faults as an operator meets them: every entry point (app start, `python -m picaso_core.store`,
the experiments CLI) prints one line naming the file and the fix, or repairs and says so in one
line; no traceback; a repaired store equals a clean build; a read-only store serves what it holds;
files get open()'s mode; derived files go to the cache folder; the API snippet names the real port."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import gradio as gr
import pytest
import torch

from picaso_core.engine.loading import load_model
from picaso_core.store.cli import main as store_main
from picaso_core.store.store import StateStore, StoreError
from conftest import BagOfWords, exit_line

ROOT = Path(__file__).resolve().parents[2]
BAR = re.compile(r"\d+%\|")  # a tqdm progress bar's line
TEXTS = ["Velmora is a city in the north.", "Osric Dallen founded Velmora in 1423.", "Blue glass is made there.",
         "The river is the Quell.", "A state space model keeps a state.", "Cats become cats; dogs become dogs."]


def write_corpus(path: Path, n_samples: int = 3) -> Path:
    rows = [{"sample_id": f"s{i}", "query": f"Question {i}:", "continuation": " answer",
             "contexts": [[f"c{2 * i}", TEXTS[2 * i]], [f"c{2 * i + 1}", TEXTS[2 * i + 1]]]} for i in range(n_samples)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def message_lines(err: str) -> list[str]:
    """stderr without progress bars."""
    return [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not BAR.search(ln)]


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tmp_path_factory):
    """A clean store of the tiny model over 6 contexts in 3 shards, and its corpus."""
    tmp = tmp_path_factory.mktemp("faults")
    corpus = write_corpus(tmp / "corpus.jsonl")
    clean = tmp / "clean"
    store_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(clean),
                "--shard-size", "2"])
    model = load_model(str(tiny_model_dir))
    return {"model_dir": str(tiny_model_dir), "corpus": corpus, "clean": clean, "model": model}


def copy_store(setup, tmp_path) -> Path:
    out = tmp_path / "store"
    shutil.copytree(setup["clean"], out)
    return out


def first_shard(folder: Path) -> tuple[Path, dict]:
    meta = json.loads((folder / "store.json").read_text())
    return folder / meta["shards"][0]["file"], meta["shards"][0]


def damage(folder: Path, how: str) -> str:
    """Damage `folder` as `how` says; returns the file an error must name."""
    shard, _ = first_shard(folder)
    if how == "truncate":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif how == "flip":
        data = bytearray(shard.read_bytes())
        data[-10] ^= 0xFF  # inside a tensor: only the sha256 sees it
        shard.write_bytes(bytes(data))
    elif how == "index missing":  # a build SIGKILLed after its shards, before its index
        (folder / "store.json").unlink()
        (folder / f"{shard.name}.123.tmp").write_bytes(b"half a shard")
        return str(folder)
    elif how == "index not JSON":
        (folder / "store.json").write_text('{"format": "picaso-state-store/1", oops')
        return "store.json"
    return shard.name


def assert_equals_clean(setup, folder: Path) -> None:
    a, b = StateStore.open(folder, setup["model"]), StateStore.open(setup["clean"], setup["model"])
    assert a.ids == b.ids and a.check() == []
    for cid in a.ids:
        x, y = a.get(cid), b.get(cid)
        for f in ("ssm", "conv", "log_decay"):
            torch.testing.assert_close(getattr(x, f), getattr(y, f), rtol=1e-5, atol=1e-6)


def build(setup, folder, *extra):
    return store_main(["build", "--model", setup["model_dir"], "--corpus", str(setup["corpus"]), "--out", str(folder),
                       "--shard-size", "2", *extra])


# ---- the store CLI ------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_a_rerun_build_repairs_a_damaged_shard_in_one_line(setup, tmp_path, capsys, how):
    folder = copy_store(setup, tmp_path)
    shard, rec = first_shard(folder)
    name = damage(folder, how)
    capsys.readouterr()
    summary = build(setup, folder)
    err = message_lines(capsys.readouterr().err)
    assert len(err) == 1 and name in err[0] and "damaged/" in err[0] and "Traceback" not in err[0], err
    assert summary["encoded"] == len(rec["ids"])
    # the bad shard and its sidecar are out of the way: no later index or sidecar scan sees them
    assert sorted(p.name for p in (folder / "damaged").iterdir()) == [name, name + ".json"]
    assert_equals_clean(setup, folder)
    # a rerun with nothing to encode writes nothing
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert build(setup, folder)["encoded"] == 0
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert message_lines(capsys.readouterr().err) == []


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_check_names_the_shard_and_repair_fixes_it(setup, tmp_path, capsys, how):
    folder = copy_store(setup, tmp_path)
    name = damage(folder, how)
    line = exit_line(lambda: store_main(["check", str(folder)]))
    assert name in line and f"python -m picaso_core.store repair {folder}" in line
    capsys.readouterr()
    assert store_main(["repair", str(folder)])["repaired"] == [name]
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 and "repaired 1 damaged shards" in out and message_lines(err) == []
    assert (folder / "damaged" / name).is_file()
    assert store_main(["check", str(folder)])["damaged"] == {}
    assert_equals_clean(setup, folder)


def test_check_of_a_whole_store_says_so(setup, capsys):
    assert store_main(["check", str(setup["clean"])]) == {"contexts": 6, "shards": 3, "damaged": {}}
    assert "every size and sha256 matches" in capsys.readouterr().out


def test_an_index_that_is_not_json_is_named_and_rebuilt_from_the_sidecars(setup, tmp_path, capsys):
    folder = copy_store(setup, tmp_path)
    damage(folder, "index not JSON")
    for fn in (lambda: build(setup, folder), lambda: store_main(["check", str(folder)]),
               lambda: store_main(["repair", str(folder)])):
        line = exit_line(fn)
        assert f"{folder}/store.json is not valid JSON" in line and "--rebuild-index" in line
    capsys.readouterr()
    assert build(setup, folder, "--rebuild-index")["encoded"] == 0  # every shard's sidecar is there
    assert (folder / "damaged" / "store.json").is_file()
    assert_equals_clean(setup, folder)


def test_a_killed_build_is_named_and_a_rerun_finishes_it(setup, tmp_path, capsys):
    folder = copy_store(setup, tmp_path)
    shard, rec = first_shard(folder)
    damage(folder, "index missing")
    (folder / f"{shard.name}.json").unlink()  # the kill came before this shard's sidecar
    line = exit_line(lambda: store_main(["check", str(folder)]))
    assert "build stopped before writing the index" in line and f"--out {folder}" in line
    capsys.readouterr()
    assert build(setup, folder)["encoded"] == len(rec["ids"])
    assert message_lines(capsys.readouterr().err) == []
    assert_equals_clean(setup, folder)


# ---- app start and the experiments CLI ----------------------------------------------------------
def app_argv(setup, folder, tmp_path, port=7893):
    return ["--model", setup["model_dir"], "--corpus", str(setup["corpus"]), "--store", str(folder),
            "--cache-dir", str(tmp_path / "cache"), "--port", str(port),
            "--no-tour-prebuild"]  # a start's faults are under test, not the tour (minutes of background work)


def experiments(setup, folder, tmp_path):
    from picaso_core import experiments as ex

    return ex.main(["--model", setup["model_dir"], "--corpus", str(setup["corpus"]), "--store", str(folder),
                    "--out", str(tmp_path / "run"), "--samples", "1", "--ks", "1", "--methods", "concat",
                    "--qa", "none", "--long-ks", "none", "--retrievers", "none", "--timing-tokens", "none"],
                   embedder=BagOfWords())


@pytest.mark.parametrize("how", ["index missing", "index not JSON"])
def test_app_and_experiments_name_a_bad_index_and_its_fix_in_one_line(setup, tmp_path, capsys, app_main, how):
    folder = copy_store(setup, tmp_path)
    named = damage(folder, how)
    fix = "--rebuild-index" if how == "index not JSON" else "it encodes only what is missing"
    for fn in (lambda: app_main(app_argv(setup, folder, tmp_path)), lambda: experiments(setup, folder, tmp_path)):
        line = exit_line(fn)
        assert named in line and fix in line and f"--out {folder}" in line, line
        assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("how", ["no such folder", "no weights"])
def test_app_start_names_a_model_it_cannot_load_in_one_line(setup, tmp_path, capsys, app_main, how):
    if how == "no such folder":
        model = str(tmp_path / "no-such-checkpoint")
    else:  # a folder with the config but not the weights
        model = tmp_path / "ckpt"
        model.mkdir()
        shutil.copy(Path(setup["model_dir"]) / "config.json", model)
    argv = app_argv(setup, tmp_path / "store", tmp_path)
    argv[argv.index("--store"):argv.index("--store") + 2] = []
    argv[1] = str(model)
    line = exit_line(lambda: app_main(argv))
    assert line.startswith(f"error: --model {model}: ") and ("'demo'" in line or "model.safetensors" in line), line
    assert "Traceback" not in capsys.readouterr().err


def test_app_start_repairs_a_truncated_shard_and_says_so(setup, tmp_path, capsys, app_main):
    folder = copy_store(setup, tmp_path)
    name = damage(folder, "truncate")
    assert app_main(app_argv(setup, folder, tmp_path))  # it launched
    out, err = capsys.readouterr()
    said = [ln for ln in out.splitlines() if "repaired" in ln]
    assert len(said) == 1 and name in said[0] and "Traceback" not in out + err
    assert_equals_clean(setup, folder)


def test_app_start_prebuilds_the_tour_unless_told_not_to(setup, tmp_path, app_main, monkeypatch):
    from picaso_core.ui.tour import cache as tour

    started = []
    monkeypatch.setattr(tour, "ensure_built", lambda res, *a: started.append(res))
    argv = app_argv(setup, copy_store(setup, tmp_path), tmp_path)
    assert app_main(argv) and started == []  # --no-tour-prebuild
    app_main([a for a in argv if a != "--no-tour-prebuild"])
    assert len(started) == 1


def test_experiments_cli_repairs_a_flipped_byte_before_its_sweep(setup, tmp_path, capsys):
    folder = copy_store(setup, tmp_path)
    name = damage(folder, "flip")
    experiments(setup, folder, tmp_path)
    out, err = capsys.readouterr()
    assert len([ln for ln in out.splitlines() if "repaired" in ln and name in ln]) == 1 and "Traceback" not in err
    assert_equals_clean(setup, folder)


def test_app_start_refusal_is_one_line_on_stderr_in_a_real_process(setup, tmp_path):
    folder = copy_store(setup, tmp_path)
    damage(folder, "index not JSON")
    p = subprocess.run([sys.executable, "app.py", *app_argv(setup, folder, tmp_path, 7894)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    err = message_lines(p.stderr)
    assert p.returncode == 1 and len(err) == 1 and "store.json is not valid JSON" in err[0], p.stderr
    assert "Traceback" not in p.stderr + p.stdout


# ---- requests ---------------------------------------------------------------------------------
@pytest.fixture
def served(setup, tmp_path):
    from picaso_core.session import load_resources
    from picaso_core.ui import errors

    errors.answer_in_one_line()  # a request's store fault as the visitor's error, as the app does
    folder = copy_store(setup, tmp_path)
    res = load_resources(setup["model_dir"], str(setup["corpus"]), store=str(folder), cache_dir=tmp_path / "cache",
                         embedder=BagOfWords(), log=lambda msg: None)
    return res, folder


def test_a_request_on_a_corrupt_read_only_store_gets_one_line_without_server_paths(served, caplog):
    res, folder = served
    name = damage(folder, "flip")
    res.store._read_only = True  # as on a read-only mount (the real one is tested below)
    cid = next(c for c in res.store.ids if res.store._contexts[c]["shard"] == 0)
    with caplog.at_level("WARNING", logger="picaso_explorer"), pytest.raises(gr.Error) as e:
        res.states([cid])
    assert name in e.value.message and "repair" in e.value.message
    assert str(folder.parent) not in e.value.message and not re.search(r"(^|\s)/\w", e.value.message)
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None and name in caplog.records[0].getMessage()
    with pytest.raises(StoreError, match="^this store does not hold context 'nope'; the store is read-only$"):
        res.store.ensure([("nope", "a text")])

def test_a_request_on_a_corrupt_writable_store_heals_it(served, setup, caplog):
    res, folder = served
    name = damage(folder, "flip")
    ids = list(res.store.ids)
    with caplog.at_level("WARNING", logger="picaso_explorer"):
        states = res.states(ids)
    assert len(states) == len(ids)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "repaired" in said[0] and name in said[0]
    assert_equals_clean(setup, folder)


def test_requests_that_meet_one_corrupt_shard_at_once_repair_it_once(served, setup, caplog):
    import threading

    res, folder = served
    damage(folder, "flip")
    ids, barrier, got = list(res.store.ids), threading.Barrier(4), []

    def request():
        barrier.wait()
        got.append(len(res.states(ids)))

    threads = [threading.Thread(target=request) for _ in range(4)]
    with caplog.at_level("WARNING", logger="picaso_explorer"):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert got == [len(ids)] * 4
    assert len([r for r in caplog.records if "repaired" in r.getMessage()]) == 1, [r.getMessage() for r in caplog.records]
    assert_equals_clean(setup, folder)


READ_ONLY_SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path[:0] = [{root!r}, {tests!r}]
    import gradio as gr
    from picaso_core.session import load_resources
    from picaso_core.ui import errors
    from picaso_core.ui.tabs.compose import compose
    from picaso_core.store.cli import main as store_main
    from conftest import BagOfWords
    errors.answer_in_one_line()  # a store fault as the visitor's error, as the app does
    res = load_resources({model!r}, {corpus!r}, store={store!r}, cache_dir={cache!r}, embedder=BagOfWords(),
                         log=lambda m: None)
    out = {{"read_only": res.store.read_only}}
    held = [c for c in res.database if c in res.store]
    order, summary, *_ = compose(res, "Question 0:", " answer", contexts=held[:2], max_new_tokens=2)
    out["composed"] = [c for c in held[:2] if c in order]
    try:
        res.states(["c4"])
    except gr.Error as e:
        out["lacking"] = e.message
    out["build"] = store_main(["build", "--model", {model!r}, "--corpus", {small!r}, "--out", {store!r},
                               "--shard-size", "2"])["encoded"]
    print("RESULT " + json.dumps(out))
''')


def read_only_prefix(folder: Path) -> list[str] | None:
    """How to run a command with `folder` read-only: a read-only bind mount in a private mount
    namespace, else root without the capabilities that bypass file permissions; None if neither."""
    mount = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    for prefix in (mount, drop):
        if not shutil.which(prefix[0]):
            continue
        probe = subprocess.run([*prefix, "sh", "-c", f"! touch {folder}/probe 2>/dev/null"], capture_output=True)
        if probe.returncode == 0 and not (folder / "probe").exists():
            return prefix
    return None


def test_a_read_only_store_serves_the_contexts_it_holds(setup, tmp_path):
    """The store holds 4 of the corpus's 6 contexts (built from 2 of its 3 samples)."""
    small = write_corpus(tmp_path / "small.jsonl", 2)
    folder = tmp_path / "ro"
    store_main(["build", "--model", setup["model_dir"], "--corpus", str(small), "--out", str(folder),
                "--shard-size", "2"])
    if os.geteuid() != 0:
        for p in [folder, *folder.iterdir()]:
            p.chmod(p.stat().st_mode & ~0o222)
        prefix = []
    else:
        for p in [folder, *folder.iterdir()]:  # for the capability-drop fallback: no write bit anywhere
            p.chmod(p.stat().st_mode & ~0o222)
        prefix = read_only_prefix(folder)
        if prefix is None:
            pytest.skip("no read-only bind mount (unshare) nor capability drop (setpriv) here, and running as root")
    before = {p.name: p.stat().st_mtime_ns for p in folder.parent.iterdir() if p.name != "cache"}
    inside = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    script = READ_ONLY_SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"), model=setup["model_dir"],
                                     corpus=str(setup["corpus"]), store=str(folder), cache=str(tmp_path / "cache"),
                                     small=str(small))
    p = subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert "Traceback" not in p.stderr, p.stderr
    got = json.loads(p.stdout.split("RESULT ", 1)[1])
    assert got["read_only"] and got["composed"] == ["c0", "c1"]
    assert got["lacking"] == "this store does not hold context 'c4'; the store is read-only"
    assert got["build"] == 0  # a no-op build on the read-only store succeeds, writing nothing
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == inside
    assert {p.name: p.stat().st_mtime_ns for p in folder.parent.iterdir() if p.name != "cache"} == before
    assert list((tmp_path / "cache" / "stores").glob("ro-*/embeddings/*.safetensors"))  # derived: in the cache


def test_a_build_that_must_write_into_a_read_only_store_says_so_in_one_line(setup, tmp_path):
    folder = copy_store(setup, tmp_path)
    for p in [folder, *folder.iterdir()]:
        p.chmod(p.stat().st_mode & ~0o222)
    prefix = read_only_prefix(folder) if os.geteuid() == 0 else []
    if prefix is None:
        pytest.skip("no read-only bind mount (unshare) nor capability drop (setpriv) here, and running as root")
    more = tmp_path / "more.jsonl"
    more.write_text(setup["corpus"].read_text() + json.dumps({"query": "q", "continuation": " c",
                                                              "contexts": [["c9", "one more"]]}) + "\n")
    p = subprocess.run([*prefix, sys.executable, "-m", "picaso_core.store", "build", "--model", setup["model_dir"],
                        "--corpus", str(more), "--out", str(folder)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    err = message_lines(p.stderr)
    assert p.returncode == 1 and len(err) == 1 and "Traceback" not in p.stderr, p.stderr
    assert err[0].startswith(f"error: cannot write {folder}") and "this account can write" in err[0]


def test_a_write_the_disk_refuses_reads_as_a_read_only_store(served, monkeypatch):
    """A store whose folder looks writable but whose disk refuses the write (a read-only remount,
    a bucket mount): safetensors' own I/O error becomes the one-line refusal, not its raw text."""
    import safetensors.torch
    from safetensors import SafetensorError

    res, folder = served

    def refuse(tensors, path, metadata=None):
        raise SafetensorError(f"Error while serializing: I/O error: Read-only file system (os error 30) at path {path}")

    monkeypatch.setattr(safetensors.torch, "save_file", refuse)
    with pytest.raises(StoreError, match="^this store does not hold context 'new'; the store is read-only$"):
        res.store.ensure([("new", "a new text")])
    assert res.store.read_only and "new" not in res.store


# ---- modes, derived files, the API snippet ------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_shards_sidecars_and_index_get_the_same_mode(setup, tmp_path, umask):
    old = os.umask(umask)
    try:
        build(setup, tmp_path / "s")
        store = StateStore.open(tmp_path / "s", setup["model"])
        store.add([("extra", "one more context")], progress=False)  # a shard written by StateStore.add
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "s").iterdir()}
    assert set(modes.values()) == {0o666 & ~umask}, modes
    assert sum(n.endswith(".safetensors") for n in modes) == 4 and "store.json" in modes


def test_derived_files_go_under_the_cache_folder(served, tmp_path):
    from picaso_core.ui.tabs import landscape as landscape_tab
    from picaso_core.ui.tabs import soup_lab
    from picaso_core.session import derived_folder

    res, folder = served
    cache = Path(res.cache_dir).resolve()
    lab = soup_lab.Lab(res)
    for path in (derived_folder(res.cache_dir, res.store), landscape_tab._cache_file(res), lab.folder, lab.warm_file):
        assert Path(path).resolve().is_relative_to(cache), path
    assert sorted(p.name for p in folder.parent.iterdir()) == ["cache", "store"]  # nothing beside the store


def test_the_api_snippet_names_the_address_the_app_serves_on(setup, tmp_path, app_main):
    from picaso_core.ui import code

    try:
        launched = app_main(["--model", setup["model_dir"], "--corpus", str(setup["corpus"]),
                             "--cache-dir", str(tmp_path / "cache"), "--port", "7895", "--host", "0.0.0.0"])
        assert launched[-1]["server_port"] == 7895
        assert 'Client("http://127.0.0.1:7895")' in code.client_snippet("/compose", query="q")
        code.serve_address("example.org", 8080)
        assert 'Client("http://example.org:8080")' in code.client_snippet("/compose", query="q")
    finally:
        code.serve_address("127.0.0.1", 7860)

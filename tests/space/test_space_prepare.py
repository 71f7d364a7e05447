"""`python -m picaso_core.space prepare --kind zerogpu|docker|static OUT` and the ZeroGPU decorator.

Each prepared folder's card is read by huggingface_hub's SpaceCard and holds the fields its kind
needs (ZeroGPU's versions from cards.py, which docs/space.md cites); the app builds with the `spaces`
package absent (every handler as it is) and with a stand-in for it (the model-bound handlers
decorated, each with a duration); the prepared ZeroGPU folder runs its own entry point.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import os
import pickle
import re
import subprocess
import sys
import types
from collections import namedtuple
from pathlib import Path

import gradio as gr
import pytest
import torch
import yaml

import app
from picaso_core.space import cards
from picaso_core.space.prepare import PrepareError, main, prepare
from picaso_core.ui.server import gpu as gpu_module
from picaso_core.ui.server.gpu import MAX_DURATION, gpu, returns_cpu, to_cpu
from picaso_core.session import load_resources
from conftest import CARD_FIELDS, COLORS, BagOfWords, write_corpus

ROOT = Path(__file__).resolve().parents[2]

# The handlers that run the shared model: on ZeroGPU each asks for the GPU while it runs.
MODEL_BOUND = {"compose", "soup_map", "soup_retrieve", "soup_retrieval", "soup_mixing", "soup_two_task",
               "soup_decay", "landscape", "generate_answer", "attribute", "attribution_precision", "benchmarks",
               "finetune", "primer_model", "primer_attention", "primer_complexity", "show_defaults",
               "map_endpoint", "place_endpoint", "attribute_span", "attribute_whole_answer",
               "block_walk", "block_walk_view", "opening"}  # the Primer's block walk (its default walk: "opening")
# Handlers that do not touch the model: they stay in the server process, with no GPU to wait for.
NOT_MODEL_BOUND = {"primer_lti", "primer_selective", "coffee_train", "coffee_ih0", "finetune_cancel", "rerender"}
# ZeroGPU's supported versions (hub-docs docs/hub/spaces-zerogpu.md, "Supported Versions")
ZEROGPU_TORCH = {"2.8.0", "2.9.1", "2.10.0", "2.11.0"}
ZEROGPU_PYTHON = {"3.12.12", "3.10.13"}


def fake_export(out, app_url=None):
    """The tour's exporter's contract (picaso_core.ui.tour.cache.export_static), without running the tour."""
    (Path(out) / "index.html").write_text(f"<html><body>tour{' ' + app_url if app_url else ''}</body></html>")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("spaces")
    return {kind: prepare(kind, base / kind, export=fake_export if kind == "static" else None)
            for kind in cards.KINDS}


def read_card(folder: Path):
    from huggingface_hub import SpaceCard

    text = (folder / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(re.match(r"---\n(.*?)\n---\n", text, re.S).group(1))
    return SpaceCard(text), meta


@pytest.mark.parametrize("kind", cards.KINDS)
def test_each_prepared_card_is_a_valid_space_card(prepared, kind):
    from huggingface_hub import SpaceHardware

    folder = prepared[kind]
    card, meta = read_card(folder)
    assert set(meta) <= CARD_FIELDS, set(meta) - CARD_FIELDS
    assert card.data.title == "PICASO Explorer" and meta["colorFrom"] in COLORS and meta["colorTo"] in COLORS
    assert len(meta["short_description"]) <= 60
    hardware = {h.value for h in SpaceHardware}
    assert card.data.sdk == {"zerogpu": "gradio", "docker": "docker", "static": "static"}[kind]
    if kind == "zerogpu":
        assert card.data.suggested_hardware == "zero-a10g" and "zero-a10g" in hardware
        assert card.data.sdk_version == importlib.metadata.version("gradio")  # the gradio the suite tests
        assert str(card.data.python_version) in ZEROGPU_PYTHON
        assert (folder / card.data.app_file).is_file()
    elif kind == "docker":
        assert card.data.app_port == 7860 and card.data.suggested_hardware in hardware
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        assert meta == yaml.safe_load(re.match(r"---\n(.*?)\n---\n", readme, re.S).group(1))  # the checkout's card
    else:
        assert card.data.app_file == "index.html" and (folder / "index.html").is_file()
    body = (folder / "README.md").read_text(encoding="utf-8").split("---\n", 2)[2]
    assert cards.COST[kind] in body  # what hosting it costs, on the Space's own page


def test_zerogpu_requirements_pin_a_torch_zerogpu_supports(prepared):
    reqs = (prepared["zerogpu"] / "requirements.txt").read_text().splitlines()
    names = {re.match(r"[A-Za-z0-9_.\-]+", line).group(0).lower(): line for line in reqs if line and line[0] != "#"}
    assert names["torch"] == "torch==" + cards.ZEROGPU_TORCH and cards.ZEROGPU_TORCH in ZEROGPU_TORCH
    assert "spaces" in names and "gradio" not in names  # gradio comes from the card's sdk_version
    base = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    for line in base:
        name = re.match(r"[A-Za-z0-9_.\-]+", line).group(0).lower()
        assert name in ("torch", "gradio") or names[name] == line, line


def test_docker_and_zerogpu_folders_hold_the_app(prepared):
    for kind in ("docker", "zerogpu"):
        folder = prepared[kind]
        for f in ("app.py", "picaso_core/ui/server/gpu.py", "assets/demo_model/model.safetensors", ".gitattributes"):
            assert (folder / f).is_file(), (kind, f)
        assert not list(folder.rglob("__pycache__"))
    for f in ("Dockerfile", "requirements.txt", ".dockerignore"):
        assert (prepared["docker"] / f).read_bytes() == (ROOT / f).read_bytes(), f
    assert not (prepared["zerogpu"] / "Dockerfile").exists() and not (prepared["static"] / "app.py").exists()


def test_the_prepared_zerogpu_folder_runs_its_own_app(prepared):
    """Its entry point imports app.py and every tab from the folder itself, not from this checkout."""
    folder = prepared["zerogpu"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPACES_ZERO_GPU")}
    done = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = ['space_app.py', '--help']; "
                           "import picaso_core; print(picaso_core.__file__); runpy.run_path('space_app.py', "
                           "run_name='__main__')"], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0].startswith(str(folder.resolve())) and "PICASO_MODEL" in done.stdout


@pytest.fixture(scope="module")
def res(tiny_model_dir, tmp_path_factory):
    corpus = write_corpus(tmp_path_factory.mktemp("corpus") / "facts.jsonl")
    return load_resources(str(tiny_model_dir), str(corpus), cache_dir=tmp_path_factory.mktemp("cache"),
                          embedder=BagOfWords(), log=lambda msg: None)


def stand_in_spaces() -> tuple[types.ModuleType, list]:
    """A `spaces` module whose GPU(duration=...) records what it decorates and wraps it as the real
    one does on ZeroGPU, whose worker pickles the result back to the server (here: a round trip)."""
    calls = []

    def GPU(task=None, *, duration=None, size=None):  # noqa: N802 (spaces' name)
        def decorate(fn):
            calls.append((fn.__name__, duration))

            @functools.wraps(fn)
            def on_gpu(*args, **kwargs):
                return pickle.loads(pickle.dumps(fn(*args, **kwargs)))
            on_gpu.zerogpu_duration = duration
            return on_gpu
        return decorate(task) if callable(task) else decorate

    return types.SimpleNamespace(GPU=GPU), calls


def handlers(demo: gr.Blocks) -> dict[str, object]:
    return {f.api_name or f.name: f.fn for f in demo.fns.values()}


def test_app_builds_without_spaces_every_handler_as_it_is(res, monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # `import spaces` fails as where it is not installed
    fns = handlers(app.build_app(res))
    assert MODEL_BOUND <= set(fns) and NOT_MODEL_BOUND <= set(fns)
    # (a functools cache also sets __wrapped__: not a GPU wrapper)
    assert not [name for name, fn in fns.items()
                if hasattr(fn, "zerogpu_duration") or (hasattr(fn, "__wrapped__") and not hasattr(fn, "cache_info"))]


def test_app_builds_with_a_stand_in_spaces_model_bound_handlers_decorated(res, monkeypatch):
    spaces, calls = stand_in_spaces()
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    demo = app.build_app(res)
    fns = handlers(demo)
    decorated = {name for name, fn in fns.items() if hasattr(fn, "zerogpu_duration")}
    assert decorated == MODEL_BOUND
    for name in decorated:
        d = fns[name].zerogpu_duration
        assert isinstance(d, int) and 0 < d <= MAX_DURATION, (name, d)
    assert len(calls) == len({name for name, _ in calls})  # each handler decorated once
    # gradio still sees the handler's own signature (gr.Progress is injected by its default)
    assert isinstance(inspect.signature(fns["compose"]).parameters["progress"].default, gr.Progress)
    # and the decorated handler answers as the plain one
    monkeypatch.setitem(sys.modules, "spaces", None)
    plain = handlers(app.build_app(res))
    a, b = fns["primer_model"]("Velmora is a city."), plain["primer_model"]("Velmora is a city.")
    assert a[2] == b[2] and a[3] == b[3]  # the summary and the decay profile
    # a Compose click's outputs cross the worker boundary (pickled) as they are
    query = res.corpus.samples[0].query
    a = fns["compose"](query, "", 2, [], True, 4, progress=lambda *a, **k: None)
    b = plain["compose"](query, "", 2, [], True, 4, progress=lambda *a, **k: None)
    assert a[0] == b[0] and a[6]["contexts"] == b[6]["contexts"]


def test_returns_cpu_moves_every_tensor_out_and_keeps_generators(monkeypatch):
    moved = []
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self: moved.append(self) or "on-cpu")
    Pair = namedtuple("Pair", "a b")
    t = torch.zeros(2)
    out = to_cpu((t, [t, {"x": t, "n": 3}], Pair(t, "s"), "text"))
    assert out == ("on-cpu", ["on-cpu", {"x": "on-cpu", "n": 3}], Pair("on-cpu", "s"), "text") and len(moved) == 4

    def handler(x, progress=gr.Progress()):
        """doc"""
        return {"t": t, "x": x}

    def stream(n):
        for i in range(n):
            yield t, i

    h, s = returns_cpu(handler), returns_cpu(stream)
    assert h(1) == {"t": "on-cpu", "x": 1} and h.__doc__ == "doc"
    assert inspect.signature(h) == inspect.signature(handler)
    assert inspect.isgeneratorfunction(s) and list(s(2)) == [("on-cpu", 0), ("on-cpu", 1)]


def test_gpu_checks_its_duration_and_is_a_no_op_without_spaces(monkeypatch):
    for bad in (0, -5, MAX_DURATION + 1, 30.5, "60", None):
        with pytest.raises(ValueError, match="duration"):
            gpu(duration=bad)
    monkeypatch.setitem(sys.modules, "spaces", None)

    def f(x):
        return x

    assert gpu(duration=10)(f) is f and gpu(duration=lambda x: 5)(f) is f
    spaces, calls = stand_in_spaces()
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    dynamic = lambda x: 5  # noqa: E731 (ZeroGPU's dynamic duration: a function of the handler's arguments)
    assert gpu(duration=dynamic)(f).zerogpu_duration is dynamic and calls == [("f", dynamic)]


def test_on_zerogpu_needs_both_the_package_and_the_variable(monkeypatch):
    spaces, _ = stand_in_spaces()
    for module, variable, expected in ((spaces, "1", True), (spaces, "true", True), (spaces, "", False), (spaces, "false", False), (None, "1", False)):
        monkeypatch.setitem(sys.modules, "spaces", module)
        monkeypatch.setenv("SPACES_ZERO_GPU", variable)
        assert gpu_module.on_zerogpu() is expected


def test_a_broken_spaces_package_is_not_taken_for_an_absent_one(monkeypatch):
    def broken(name, *a, **kw):
        raise ModuleNotFoundError("No module named 'spaces_dependency'", name="spaces_dependency")

    monkeypatch.setattr(gpu_module.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="spaces_dependency"):
        gpu(duration=10)(lambda: None)


def test_nothing_uses_torch_compile():
    """ZeroGPU does not support torch.compile (docs/space.md)."""
    hits = [str(p) for p in (ROOT / "picaso_core").rglob("*.py") if re.search(r"torch\.compile\(", p.read_text())]
    assert not hits


def test_the_zerogpu_entry_point_precomputes_on_the_cpu_first(prepared, tiny_model_dir, tmp_path, monkeypatch):
    """On ZeroGPU (SPACES_ZERO_GPU set, `spaces` importable) the entry point puts the model on cuda and
    first encodes every context and builds the tour on the CPU, with app.py's own flags."""
    spaces, _ = stand_in_spaces()
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("PICASO_")}
                        | {"SPACES_ZERO_GPU": "true"})
    spec = importlib.util.spec_from_file_location("space_app", prepared["zerogpu"] / cards.LAUNCHER)
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    assert launcher.ZEROGPU and os.environ["PICASO_DEVICE"] == "cuda"
    seen = {}

    def load(*args, **kw):
        seen.update(device=args[6], encode_all=kw["encode_all"])
        return load_resources(*args, **kw, embedder=BagOfWords(), log=lambda msg: None)

    monkeypatch.setattr(launcher, "load_resources", load)
    monkeypatch.setattr(launcher, "build_tour", lambda r: seen.update(tour=str(next(r.model.parameters()).device),
                                                                      tour_cache=r.cache_dir))
    corpus = write_corpus(tmp_path / "c.jsonl")
    argv = ["--model", str(tiny_model_dir), "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache")]
    launcher.precompute_on_cpu(argv)
    assert seen == {"device": "cpu", "encode_all": True, "tour": "cpu", "tour_cache": tmp_path / "cache"}
    a = app.parse_args(argv, {})
    again = load_resources(a.model, a.corpus, cache_dir=a.cache_dir, embedder=BagOfWords(), log=lambda msg: None)
    assert len(again.store) == len(again.database) > 0


def test_prepare_refuses_what_it_cannot_write(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(PrepareError, match="--force"):
        prepare("docker", tmp_path / "full")
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"  # nothing touched
    src = tmp_path / "checkout"  # a stand-in checkout: were the check broken, the copy lands here, not in ROOT
    for f in ("app.py", "picaso_core/__init__.py", "assets/a.json", "requirements.txt", "Dockerfile", ".dockerignore"):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("")
    for inside in (src, src / "picaso_core" / "out", src / "assets"):
        with pytest.raises(PrepareError, match="inside what it would copy"):
            prepare("docker", inside, source=src, force=True)
    assert not (src / "picaso_core" / "out").exists()
    with pytest.raises(PrepareError, match="no state store"):
        prepare("zerogpu", tmp_path / "z", store=tmp_path / "nowhere")
    assert not (tmp_path / "z").exists()
    with pytest.raises(ValueError, match="unknown kind"):
        prepare("gradio", tmp_path / "g")
    clone = tmp_path / "clone"  # a fresh clone of a new Space: .git, .gitattributes, README.md
    (clone / ".git").mkdir(parents=True)
    (clone / "README.md").write_text("---\nsdk: docker\n---\n")
    prepare("docker", clone)
    assert (clone / ".git").is_dir() and read_card(clone)[0].data.sdk == "docker"
    (tmp_path / "full" / "sub").mkdir()
    prepare("static", tmp_path / "full", force=True, export=fake_export, app_url="https://example.org/app")
    assert not (tmp_path / "full" / "notes.txt").exists() and "example.org" in (tmp_path / "full" / "index.html").read_text()
    with pytest.raises(SystemExit) as e:  # argparse: --store is the zerogpu kind's
        main(["prepare", "--kind", "docker", str(tmp_path / "d"), "--store", str(tmp_path)])
    assert e.value.code == 2 and "--store is for --kind zerogpu" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # one line naming the fix, no traceback
        main(["prepare", "--kind", "zerogpu", str(tmp_path / "full")])
    assert str(e.value.code).startswith("error: OUT ") and "--force" in str(e.value.code)


def test_a_shipped_store_goes_into_the_folder(res, tmp_path):
    out = prepare("zerogpu", tmp_path / "z", store=res.store.folder)
    assert (out / "store" / "store.json").read_bytes() == (Path(res.store.folder) / "store.json").read_bytes()

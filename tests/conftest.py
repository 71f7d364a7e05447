"""Shared fixtures and helpers, for every test file under tests/ (the folders mirror picaso_core/):
tiny random models of both families, a tiny tokenizer, a saved model folder; the bag-of-words
embedder; the facts corpus and the Resources over it; users' corpora; `served_app` (start the app,
yield its URL, stop it) and the session's launched app (`app_url`); the tour over fake runners;
headless Chromium (`browser`, `open_tab`, the plot-layout checks).

Fixtures are found by name; plain helpers are imported from here (`from conftest import ...`), never
from another test file. Everything here is built by the tests themselves (no downloads) and small
enough for 2 CPU cores.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from picaso_core import ModelConfig, SSMLanguageModel
from picaso_core.engine.rng import seeded

TINY_VOCAB = 320  # >= the tiny tokenizer's vocabulary below

TINY_SSM = {
    # ngroups=2 and a chunk shorter than most test sequences exercise the group and chunk paths
    "Mamba2": dict(layer="Mamba2", d_state=8, headdim=8, ngroups=2, chunk_size=8),
    "Mamba1": dict(layer="Mamba1", d_state=4),
}


def tiny_config(family: str = "Mamba2", vocab_size: int = TINY_VOCAB, n_layer: int = 2, ssm: dict | None = None,
                **kw) -> ModelConfig:
    """`ssm` overrides entries of the family's TINY_SSM (e.g. headdim=64, ngroups=1 for one Mamba-2 head)."""
    return ModelConfig(d_model=32, n_layer=n_layer, vocab_size=vocab_size,
                       ssm_cfg={**TINY_SSM[family], **(ssm or {})}, pad_vocab_size_multiple=8, **kw)


def tiny_model(family: str = "Mamba2", seed: int = 0, **kw) -> SSMLanguageModel:
    """A random tiny model with non-trivial decays (A_log, dt spread like a trained model)."""
    with seeded(seed):  # the same weights whatever a background thread of an earlier test draws
        model = SSMLanguageModel(tiny_config(family, **kw)).eval()
        after = torch.get_rng_state()
    torch.set_rng_state(after)  # a test's own draws after it go on from the seed, as with torch.manual_seed
    return model


@pytest.fixture(params=["Mamba2", "Mamba1"])
def family(request) -> str:
    return request.param


_TOKENIZER_TEXT = [
    "Velmora is a city in the northern province of Tarrix.",
    "Records show that Velmora was founded in 1423 by the merchant Osric Dallen.",
    "The main export of Velmora is blue glass, and its river is the Quell.",
    "cat → cats\ndog → dogs\nrun → ran\nhappy → sad\n",
    "A state space model reads tokens one at a time and keeps a fixed-size state.",
]


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer.json trained on a few sentences (vocabulary < TINY_VOCAB)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_TOKENIZER_TEXT * 4, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    assert tok.get_vocab_size() <= TINY_VOCAB
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer_json) -> Path:
    """A random tiny Mamba-2 saved in the mamba_ssm layout (config.json, model.safetensors,
    tokenizer.json): what `load_model(folder)` and `python app.py --model folder` read."""
    return save_model_dir(tiny_model("Mamba2", seed=1), tmp_path_factory.mktemp("tiny_model"), tokenizer_json)


def save_model_dir(model: SSMLanguageModel, folder: Path, tokenizer_json: Path) -> Path:
    """Write `model` into `folder` in the mamba_ssm layout, with the tiny tokenizer."""
    from safetensors.torch import save_file

    (folder / "config.json").write_text(json.dumps(model.config.to_dict()))
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
    return folder


def bare_resources(model, model_name: str, folder: Path, database: dict[str, str] | None = None):
    """The app's Resources with only what the soup lab reads: the model, a store folder (nothing
    stored), the cache folder above it and the corpus's database."""
    from types import SimpleNamespace

    from picaso_core.session import Resources

    return Resources(model, model_name, SimpleNamespace(database=database or {}), SimpleNamespace(folder=str(folder)),
                     None, 0, {}, Path(folder).parent)


# Browser tests: Gradio re-renders outputs, so an element found by a wait's condition can leave the page
# before the condition reads it. Every WebDriverWait then retries instead of failing on
# StaleElementReferenceException (a real failure still times out).
try:
    import selenium.webdriver.support.wait as _selenium_wait
    from selenium.common.exceptions import StaleElementReferenceException as _Stale

    if _Stale not in _selenium_wait.IGNORED_EXCEPTIONS:
        _selenium_wait.IGNORED_EXCEPTIONS = (*_selenium_wait.IGNORED_EXCEPTIONS, _Stale)
except ImportError:  # no selenium: the browser tests skip
    pass


@pytest.fixture(autouse=True)
def _background_work_ends_with_its_test():
    """What an app start leaves running in this process (the tour's build, the warm-up click, the
    allocator trim) is stopped when the test that started it ends: it would otherwise run on into
    later tests, taking the cores and, in the tour's COFFEE step, building models."""
    yield
    serving = sys.modules.get("picaso_core.ui.server.serving")  # loaded only by tests that use the app
    if serving is not None:
        left = serving.stop_background(timeout=120)
        assert not left, f"background threads still running 120 s after their test: {left}"


# ---- plain helpers shared by several test files ---------------------------------------------------
# Test files reach these with `from conftest import ...` (this file, not another test file); fixtures
# below are found by name.

class BagOfWords:
    """A tiny deterministic embedder for fast tests: hashed word counts. Counts its calls."""

    name = "bag-of-words"

    def __init__(self, dim: int = 64):
        self.dim, self.texts_seen = dim, 0

    def __call__(self, texts):
        import re
        import zlib

        self.texts_seen += len(texts)
        out = torch.zeros(len(texts), self.dim)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, zlib.crc32(w.encode()) % self.dim] += 1
        return out


class ByteTokenizer:
    """UTF-8 bytes as token ids: enough for the store, which only calls encode."""

    eos_id = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode())


def perturb_(model, seed: int = 0):
    """Random init leaves norms at 1, D at 1, biases at 0 and tiny logits: move every parameter (in place)
    so that a parity or invariance test is not luck (logits of order 1). Returns the model."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "dt_bias", "D")) or "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.mul_(3.0)
    return model


def granite_rope_hybrid(vocab_size: int = 300):
    """A tiny Granite-4.0-H with RoPE attention (2 Mamba-2 + 2 attention layers), perturbed: the hybrid
    whose keys hold positions."""
    import transformers  # only the hybrid tests need it

    from picaso_core.engine.hybrid import HybridLanguageModel
    from picaso_core.engine.hybrid_config import HybridConfig

    cfg = transformers.GraniteMoeHybridConfig(
        vocab_size=vocab_size, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, mamba_n_heads=8,
        mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8, num_hidden_layers=4,
        layer_types=["mamba", "attention"] * 2, num_local_experts=0, shared_intermediate_size=96,
        intermediate_size=32, position_embedding_type="rope", attention_multiplier=0.25)
    torch.manual_seed(0)
    return perturb_(HybridLanguageModel(HybridConfig.from_transformers(cfg.to_dict())).eval(), seed=1)


def byte_model(seed: int = 0) -> SSMLanguageModel:
    """A random tiny Mamba-2 over bytes (vocabulary 256, ByteTokenizer): the store's tests' model."""
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, n_layer=2, vocab_size=256,
                      ssm_cfg=dict(layer="Mamba2", d_state=8, headdim=16, chunk_size=16))
    model = SSMLanguageModel(cfg).eval()
    model.tokenizer = ByteTokenizer()
    return model


STORE_CONTEXTS = [(f"c{i}", f"Passage {i}: " + "lorem ipsum " * (i % 5 + 1)) for i in range(11)]


def random_coffee(d: int, n: int, learn_b: bool, output_filter: bool):
    """A float64 COFFEE layer whose decays, B and output filter are all away from their init."""
    from picaso_core.lab.coffee.model import Coffee

    layer = Coffee(d, n, learn_b=learn_b, output_filter=output_filter).double()
    with torch.no_grad():
        layer.lam.uniform_(-2, 0)
        if learn_b:
            layer.b.normal_()
        if output_filter:
            layer.wg.normal_()
    return layer


ROOT = Path(__file__).resolve().parent.parent  # the repository


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines, out, buf = (ROOT / "Dockerfile").read_text().splitlines(), [], ""
    for line in lines:
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


# the Hugging Face Space card's fields and colours (huggingface.co/docs/hub/spaces-config-reference)
CARD_FIELDS = {
    "title", "emoji", "colorFrom", "colorTo", "sdk", "python_version", "sdk_version", "suggested_hardware",
    "suggested_storage", "app_file", "app_port", "base_path", "fullWidth", "header", "short_description",
    "models", "datasets", "tags", "thumbnail", "pinned", "hf_oauth", "hf_oauth_scopes", "hf_oauth_expiration_minutes",
    "disable_embedding", "startup_duration_timeout", "custom_headers", "preload_from_hub", "license",
}
COLORS = {"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"}


# ---- the facts corpus and the app over it ---------------------------------------------------------
FACTS = {
    "velmora": ["Velmora is a city on the river Quell.", "Velmora was founded in 1423 by Osric Dallen.",
                "The main export of Velmora is blue glass."],
    "tarrix": ["Tarrix is a mountain in the north.", "The first climber of Tarrix was Mira Sen.",
               "Tarrix is 4120 metres high."],
    "brandor": ["Brandor is a company that makes bicycles.", "Brandor was started by Kel Thal in 1988."],
}


def write_corpus(path: Path) -> Path:
    """Three samples whose contexts hold their facts; the Tarrix one excludes its own first chunk."""
    from picaso_core.data import RetrievalSample, write_samples

    ctx = {f"{e}-{j}": t for e, ts in FACTS.items() for j, t in enumerate(ts)}
    all_ctx = list(ctx.items())
    samples = [
        RetrievalSample("q-velmora", "Velmora, the city of blue glass, was founded", " in 1423 by Osric Dallen.",
                        all_ctx, ["velmora-1"]),
        RetrievalSample("q-tarrix", "The mountain Tarrix was first climbed by", " Mira Sen.", all_ctx,
                        ["tarrix-1"], exclude_ids=["tarrix-0"]),
        RetrievalSample("q-brandor", "Brandor, the bicycle company, was started by", " Kel Thal.", all_ctx,
                        ["brandor-1"]),
    ]
    write_samples(samples, path)
    return path


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    """The facts corpus, written once per test file."""
    return write_corpus(tmp_path_factory.mktemp("corpus") / "facts.jsonl")


@pytest.fixture(scope="module")
def res(tiny_model_dir, corpus_file, tmp_path_factory):
    """The app's Resources over the tiny model and the facts corpus (bag-of-words embedder), once per
    test file."""
    from picaso_core.session import load_resources

    return load_resources(str(tiny_model_dir), str(corpus_file), cache_dir=tmp_path_factory.mktemp("cache"),
                          embedder=BagOfWords(), log=lambda msg: None)


# ---- users' corpora: a sample file, a database file, or both ---------------------------------------
USER_CONTEXTS = [["velmora-0", "Velmora is a city on the river Quell."],
                 ["velmora-1", "Velmora was founded in 1423 by Osric Dallen."],
                 ["tarrix-0", "Tarrix is a mountain in the north; Mira Sen climbed it first."]]
VELMORA = {"query": "Velmora was founded", "continuation": " in 1423 by Osric Dallen."}
TARRIX = {"query": "Tarrix was first climbed by", "continuation": " Mira Sen."}


def write_rows(path: Path, rows: list[dict]) -> Path:
    """`rows` as a .jsonl file."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


CORPORA = {  # name -> (sample rows or None for no sample file, database rows or None)
    "one sample": ([{**VELMORA, "contexts": USER_CONTEXTS}], None),
    "one labelled sample": ([{**VELMORA, "contexts": USER_CONTEXTS, "gold_ids": ["velmora-1"]}], None),
    "no labels": ([{**VELMORA, "contexts": USER_CONTEXTS}, {**TARRIX, "contexts": USER_CONTEXTS}], None),
    "no QA": ([{**VELMORA, "contexts": USER_CONTEXTS, "gold_ids": ["velmora-1"]},
               {**TARRIX, "contexts": USER_CONTEXTS, "gold_ids": ["tarrix-0"]}], None),
    "no contexts": ([VELMORA, TARRIX], [{"id": i, "text": t} for i, t in USER_CONTEXTS]),
    "database file only": (None, [{"id": i, "text": t} for i, t in USER_CONTEXTS]),
}


def corpus_args(name: str, folder: Path) -> tuple[str | None, str | None]:
    """The (corpus, database) paths of CORPORA[name], written into `folder`."""
    samples, db = CORPORA[name]
    folder.mkdir(parents=True, exist_ok=True)
    corpus = str(write_rows(folder / "samples.jsonl", samples)) if samples is not None else None
    database = str(write_rows(folder / "chunks.jsonl", db)) if db is not None else None
    return corpus, database


# ---- starting and stopping the app -----------------------------------------------------------------
def tiny_nemotron_h_dir(folder: Path, pattern: str) -> Path:
    """A random tiny Nemotron-H in transformers' layout (Mamba-2 M, attention *, MLP -, `pattern`) saved
    to `folder` with the demo tokenizer, its vocabulary sized to it: the app serving a hybrid."""
    import transformers  # only the hybrid tests need it
    from tokenizers import Tokenizer

    tok = ROOT / "assets" / "tokenizer.json"
    torch.manual_seed(0)
    cfg = transformers.NemotronHConfig(
        vocab_size=Tokenizer.from_file(str(tok)).get_vocab_size(), hidden_size=64, num_attention_heads=4,
        num_key_value_heads=2, hybrid_override_pattern=pattern, head_dim=16, intermediate_size=96,
        mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=8, chunk_size=8)
    transformers.NemotronHForCausalLM(cfg).eval().save_pretrained(folder)
    shutil.copy(tok, Path(folder) / "tokenizer.json")
    return Path(folder)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a shared 2-core machine: one torch thread (many oversubscribed ones are far slower),
    restored after the module."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def script_module(name: str, register: bool = False):
    """scripts/<name>.py imported as a module (scripts/ is not a package); `register`: also under `name` in
    sys.modules (a dataclass defined in the script looks its module up there)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def api_call(url: str, api_name: str, data, timeout: float = 60) -> tuple[str, object]:
    """One call of a named endpoint through Gradio's HTTP API, no client library: (kind, value) with kind
    "complete" (the outputs), "error" (the message) or "http <code>" (the body)."""
    import urllib.error
    import urllib.request

    base = f"{url.rstrip('/')}/gradio_api/call/{api_name}"
    req = urllib.request.Request(base, data=json.dumps({"data": data}).encode(),
                                 headers={"content-type": "application/json"})
    try:
        event_id = json.load(urllib.request.urlopen(req, timeout=timeout))["event_id"]
        stream = urllib.request.urlopen(f"{base}/{event_id}", timeout=timeout).read().decode()
    except urllib.error.HTTPError as e:
        return f"http {e.code}", e.read().decode(errors="replace")[:300]
    last = ("no answer", stream[-300:])
    for event, payload in re.findall(r"^event: (\w+)\ndata: (.*)$", stream, flags=re.M):
        if event == "complete":
            last = ("complete", json.loads(payload))
        elif event == "error":
            last = ("error", (json.loads(payload) or {}).get("error"))
    return last


def free_port() -> int:
    """A local port nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served(str):
    """The URL of an app served by `served_app` (its `port` too); a `python app.py` one also has its
    process and its log."""

    port: int = 0
    proc = None
    log: Path | None = None

    def read_log(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def served_app(app, *, log: Path | None = None, env: dict | None = None, cwd: Path = ROOT, ready_s: float = 240,
               **launch):
    """Serve the app on a free local port, yield its URL, stop it at the end.

    `app` is a built gr.Blocks (served in this process: `launch` options go to its launch, which
    returns once the server answers; closed at the end, and the background work its start left is
    stopped), or the command-line arguments of `python app.py` (without --port: a process whose
    output goes to `log`, run in `cwd`, with `env` added to the environment (a None value removes
    that variable); ready when its page answers, within `ready_s`; terminated at the end, killed if
    it hangs)."""
    import os
    import subprocess
    import time
    import urllib.request

    port = free_port()
    url = Served(f"http://127.0.0.1:{port}/")
    url.port = port
    if not isinstance(app, (list, tuple)):
        app.launch(server_port=port, prevent_thread_lock=True, quiet=True, **launch)
        try:
            yield url
        finally:
            app.close()
            serving = sys.modules.get("picaso_core.ui.server.serving")
            if serving is not None:
                serving.stop_background(timeout=120)
        return
    assert not launch, f"launch options are for an app served in this process: {launch}"
    log_path = Path(log) if log is not None else Path(tempfile.mkdtemp(prefix="picaso_served_")) / "app.log"
    cmd = [sys.executable, str(ROOT / "app.py"), *map(str, app), "--port", str(port)]
    with open(log_path, "w") as out:
        environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=environ)
    url.proc, url.log = proc, log_path
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"app.py exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"app.py did not serve {url} within {ready_s:.0f} s:\n{log_path.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="session")
def app_url(tiny_model_dir, tmp_path_factory):
    """`python app.py` on a free local port with the tiny model and the facts corpus, launched once
    for the whole session by the first test that asks for it; stopped at the session's end. Its
    output: `served_log`."""
    tmp = tmp_path_factory.mktemp("served")
    corpus = write_corpus(tmp / "facts.jsonl")
    # no tour build in the background: it would compete with every test for the cores all session, and a
    # page would open on the tour's results or not by when it is loaded (tour_app serves a built tour)
    with served_app(["--model", tiny_model_dir, "--corpus", corpus, "--cache-dir", tmp / "cache"],
                    log=tmp / "app.log", env={"HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
                                              "PICASO_TOUR_PREBUILD": "0"}) as url:
        yield url


# ---- the hostile-input suite (tests/ui/hostile/, issue 47): one app for all its modules ------------------
# The flags the suite's app runs with: the serving settings of a public Space, made small where a test
# needs to reach a bound quickly (each flag's test says which).
HOSTILE_ARGV = ["--model", "demo", "--corpus", "demo", "--no-tour-prebuild", "--workers", "2", "--queue-size", "4",
                "--time-limit", "landscape=2",  # test_hostile_bounds: /landscape's largest grid runs past 2 s
                "--max-upload-mb", "5"]  # test_hostile_leftovers: a 50 MB upload is refused
HOSTILE_ENV = {"HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
               "PICASO_EXPORT_TTL_S": "2"}  # test_hostile_leftovers: exports swept after 2 s


@pytest.fixture(scope="session")
def hostile_app(tmp_path_factory):
    """`python app.py` with HOSTILE_ARGV, started by the first hostile test that asks for it (they run
    together, tests/ui/hostile/) and stopped at the session's end. A Served URL with .log,
    .read_log(), .proc, .port and .tmp: tmp/'tmp' is the app's TMPDIR (a test looks there for what was
    left behind), tmp/'cache' its --cache-dir. (A fixture here, not in a tests/ui/hostile/conftest.py:
    pytest imports every conftest.py outside a package as the one module "conftest", so a second one
    would hide this file's helpers from `from conftest import ...`.)"""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "tmp").mkdir()
    with served_app([*HOSTILE_ARGV, "--cache-dir", tmp / "cache"], log=tmp / "app.log",
                    env={**HOSTILE_ENV, "TMPDIR": str(tmp / "tmp")}) as url:
        url.tmp = tmp
        yield url


TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s+File \".*\", line \d+", re.M)


def tracebacks(log: str) -> list[str]:
    """The traceback lines in an app log (none is the bar: every rejected input is one line)."""
    return [m.group(0) for m in TRACEBACK.finditer(log)]


@pytest.fixture
def served_log(app_url):
    """What the launched app (`app_url`) has printed so far, stdout and stderr: call it to read."""
    return app_url.read_log


# ---- the guided tour over fake runners ----------------------------------------------------------------
def fake_view(name: str):
    """A tour runner that computes nothing: a figure and a table, as a real step's view."""
    def run(res, memo=None, **inputs):
        import pandas as pd
        import plotly.graph_objects as go

        from picaso_core.ui.tour import runs as tour_runs

        fig = go.Figure(go.Bar(x=["Concat", "PICASO-R"], y=[0.25 + len(name) / 1000, 0.5]),
                        layout=dict(title=f"{name}: loss per method", height=360, template="plotly_white",
                                    margin=dict(t=60)))
        table = pd.DataFrame({"Method": ["Concat", "PICASO-R"], "Loss": [0.489, 0.686]})
        return tour_runs.View(f"**Look at** {name} with {sorted(inputs)}", [fig], [(f"{name} table", table)])
    return run


@pytest.fixture(scope="module")
def tour_res(tiny_model_dir, tmp_path_factory):
    """Resources over the tiny model and the facts corpus for the tour's tests, once per test file."""
    from picaso_core.session import load_resources

    tmp = tmp_path_factory.mktemp("tour")
    corpus = write_corpus(tmp / "facts.jsonl")
    return load_resources(str(tiny_model_dir), str(corpus), cache_dir=tmp / "cache", embedder=BagOfWords(),
                          log=lambda s: None)


@pytest.fixture(scope="module")
def tour_app(tour_res, tmp_path_factory):
    """The app, launched in this process (so the fake runners built its cache), at a local URL."""
    import app
    from picaso_core.ui.layout import CSS, JS, THEME
    from picaso_core.ui.tour import cache as tour
    from picaso_core.ui.tour import runs as tour_runs

    mp = pytest.MonkeyPatch()
    for name in list(tour_runs.RUNNERS):
        mp.setitem(tour_runs.RUNNERS, name, fake_view(name))
    tour.build(tour_res, log=lambda s: None)  # the runners stay faked while it serves: their code keys the cache
    try:
        with served_app(app.build_app(tour_res).queue(), server_name="127.0.0.1", theme=THEME, css=CSS, js=JS) as url:
            yield url
    finally:
        mp.undo()


# ---- app.main without a server ------------------------------------------------------------------------
@pytest.fixture
def app_main(monkeypatch):
    """app.main with the tiny embedder and no server: returns what launch was called with."""
    import gradio as gr

    import app

    launched = []
    real = app.load_resources
    monkeypatch.setattr(app, "load_resources", lambda *a, **kw: real(*a, **kw, embedder=BagOfWords()))
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kw: launched.append(kw))

    def run(argv):
        app.main(argv)
        return launched

    return run


def exit_line(fn) -> str:
    """The one `error: ...` line an entry point exits with (what the interpreter prints on stderr)."""
    with pytest.raises(SystemExit) as e:
        fn()
    msg = e.value.code
    assert isinstance(msg, str) and msg.startswith("error: ") and "\n" not in msg, msg
    return msg


# ---- headless Chromium ------------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

# each rendered plot title / axis title against its own svg, and against the Gradio label laid over
# the plot's top left corner: [plot id, what, text] for each one cut or covered
LAYOUT_PROBLEMS_JS = """
const out = [], box = e => e.getBoundingClientRect();
const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
for (const id of arguments[0]) {
  document.querySelectorAll(`#${id} .js-plotly-plot`).forEach(p => {
    const svg = box(p.querySelector('.main-svg'));
    const label = p.closest('.block').querySelector('[data-testid=block-label]');
    p.querySelectorAll('.gtitle, .g-xtitle, .g-ytitle, .g-x2title, .g-y2title, .annotation-text').forEach(t => {
      const b = box(t);
      if (!b.width) return;
      if (b.left < svg.left - 1 || b.right > svg.right + 1 || b.top < svg.top - 1 || b.bottom > svg.bottom + 1)
        out.push([id, 'clipped', t.textContent]);
      if (label && hit(b, box(label))) out.push([id, 'under the label', t.textContent]);
    });
  });
}
return out;
"""


def layout_problems(driver, ids) -> list:
    """Plot titles, axis titles and annotations cut by their figure or covered by Gradio's label."""
    return driver.execute_script(LAYOUT_PROBLEMS_JS, list(ids))


def assert_fits_at_800px(driver, ids, timeout: float = 15):
    """At 800 px wide, the plots `ids` (drawn by a run) are there and none of their titles, axis
    titles or annotations is cut or under Gradio's label (plotly redraws after the resize)."""
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        driver.set_window_size(800, 2000)
        missing = [i for i in ids if not driver.find_elements("css selector", f"#{i} .js-plotly-plot .main-svg")]
        assert not missing, f"no plot drawn in {missing}"
        problems = []

        def fits(d):
            problems[:] = layout_problems(d, ids)
            return not problems
        try:
            WebDriverWait(driver, timeout).until(fits)
        except Exception:
            raise AssertionError(f"at 800 px: {problems}") from None
    finally:
        driver.set_window_size(1400, 2000)


def open_tab(driver, title: str, timeout: float = 60):
    """Click the tab titled `title` once its button is on screen and enabled (waiting up to
    `timeout` s for the page to show it); returns the button."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def shown(d):
        found = [b for b in d.find_elements(By.CSS_SELECTOR, "button[role=tab]")
                 if b.text.strip() == title and b.is_displayed() and b.is_enabled()]
        return found[0] if found else False

    tab = WebDriverWait(driver, timeout).until(shown)
    tab.click()
    return tab


@pytest.fixture
def browser():
    """Headless Chromium at 1400 x 2000 (skips without Chromium, chromedriver or selenium)."""
    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        pytest.skip("headless Chromium not installed: `apt-get install -y chromium chromium-driver`")
    webdriver = pytest.importorskip("selenium.webdriver", reason="`pip install selenium`")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,2000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()

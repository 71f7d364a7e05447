"""The app on a hybrid model (issue 49, item 5): `python app.py --model <Nemotron-H folder>` on a tiny
random Nemotron-H (4 Mamba-2 + 1 attention layers) with the demo tokenizer and corpus. The header names
the family; /compose answers with every method's row, the ablation row (PICASO-R with the attention
keys and values dropped) and the per-context state size read from the states; every other named
endpoint answers or refuses in one line, with no traceback in the log. Without the app: the session's
store path (encode, store, reopen) keeps a hybrid state's keys and values, and the disk check counts them."""

from __future__ import annotations

import json
import math
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import api_call, served_app, tiny_nemotron_h_dir, tracebacks
from gradio_client import Client

from picaso_core import load_model
from picaso_core.session import Resources, check_disk, open_or_build_store
from picaso_core.store.store import StateStore, StoreError

transformers = pytest.importorskip("transformers")

FAMILY = "Nemotron-H hybrid: 4 Mamba-2 + 1 attention layers"
QUERY = "Question: Where does the river Quell start?\nAnswer:"
METHOD_ROWS = ["No context", "Concat", "Soup", "CASO", "PICASO-S", "PICASO-R", "PICConcat-R",
               "PICASO-R, attention dropped"]
# the views that need every layer to be a Mamba layer: each refuses in one line on a hybrid (the Primer's
# model views read a hybrid's Mamba layers: they answer)
PURE_ONLY = {"landscape", "soup_decay", "block_walk", "block_walk_view"}
CHEAP = {"compose": {"k": 2, "max_new_tokens": 2}, "generate_answer": {"k": 1},
         "attribute": {"answer": " Quell", "k": 2, "methods": ["loi", "concat", "picaso_r"], "ablations": 4},
         "attribution_precision": {"n_samples": 1},
         "benchmarks": {"samples": 1, "ks": "0,2", "retriever": "random"},
         "landscape": {"steps": 5}, "soup_map": {"method": "pca"}, "soup_retrieval": {"queries": 1},
         "soup_mixing": {"queries": 1}, "soup_decay": {"chunk_tokens": 20, "documents": 2}, "coffee_ih0": {"steps": 1},
         "coffee_train": {"steps": 2, "seconds": 5}, "finetune": {"steps": 1},
         "primer_complexity": {"lengths": "64, 128"}, "primer_lti": {"T": 8}}


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory) -> Path:
    """A random tiny Nemotron-H in demo-hybrid's pattern, with the demo tokenizer."""
    return tiny_nemotron_h_dir(tmp_path_factory.mktemp("tiny_nemotron_h"), "M-M*-M-M-")


@pytest.fixture(scope="module")
def app(hybrid_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hybrid_app")
    with served_app(["--model", hybrid_dir, "--corpus", "demo", "--cache-dir", tmp / "cache", "--no-tour-prebuild"],
                    log=tmp / "app.log", env={"HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}) as url:
        yield url


def call(url: str, api_name: str, data) -> tuple[str, object]:
    return api_call(url, api_name, data, timeout=300)  # a hybrid's slowest endpoint on a loaded machine


def base_values(api_name: str, params: list[dict]) -> list:
    cheap, out = CHEAP.get(api_name, {}), []
    for p in params:
        value = p.get("parameter_default")
        if not p.get("parameter_has_default") and value is None:
            t = p["python_type"]["type"]
            value = [] if t.startswith("list") else 1 if t in ("int", "float") else True if t == "bool" else QUERY
        out.append(cheap.get(p["parameter_name"], value))
    return out


def test_header_names_the_family_and_the_growing_state(app):
    page = urllib.request.urlopen(f"{app}config", timeout=60).read().decode()
    assert FAMILY in page, "the header does not name the hybrid's layers"
    assert "per 100 tokens of attention keys/values" in page


def test_compose_rows_ablation_and_state_size(app, hybrid_dir):
    out = Client(str(app), verbose=False).predict(query=QUERY, continuation=" In the hills.", k=3,
                                                  max_new_tokens=2, api_name="/compose")
    summary, table, data = out[1], out[2], out[6]
    assert [row[0] for row in table["data"]] == METHOD_ROWS
    losses = {row[0]: row[1] for row in table["data"]}
    assert all(math.isfinite(x) for x in losses.values()), losses
    # the ablation scores another state than PICASO-R's: the attention layers' keys and values matter
    assert losses["PICASO-R, attention dropped"] != losses["PICASO-R"]
    assert "picaso_r_drop" in data["methods"]
    # sizes read from the float32 states, checked against the config written above (independently)
    cfg = json.loads((hybrid_dir / "config.json").read_text())
    L, H, P, N, G = 4, cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["ssm_state_size"], cfg["n_groups"]
    conv = L * (H * P + 2 * G * N) * (cfg["conv_kernel"] - 1)
    ssm_bytes = 4 * (L * H * P * N + conv + L * H)
    per_token = 4 * 2 * 1 * cfg["num_key_value_heads"] * cfg["head_dim"]
    sizes = data["state_bytes"]
    assert sizes["ssm_bytes"] == ssm_bytes and sizes["kv_bytes_per_token"] == per_token
    tokens = [c["num_tokens"] for c in data["contexts"]]
    assert [c["tokens"] for c in sizes["contexts"]] == tokens
    assert [c["bytes"] for c in sizes["contexts"]] == [ssm_bytes + t * per_token for t in tokens]
    line = next(x for x in summary.split("\n") if x.startswith("State per context"))
    assert f"{ssm_bytes / 1000:.3g} KB SSM" in line and f"{100 * per_token / 1000:.3g} KB per 100 tokens" in line


def test_every_named_endpoint_answers_or_refuses_in_one_line(app):
    info = json.load(urllib.request.urlopen(f"{app}gradio_api/info", timeout=30))
    start = len(app.read_log())
    answers = {}
    for name, spec in info["named_endpoints"].items():
        api = name.lstrip("/")
        answers[api] = call(app, api, base_values(api, spec["parameters"]))
    assert PURE_ONLY | {"compose", "attribute", "soup_map", "finetune"} <= set(answers)
    for api, (kind, value) in answers.items():
        if api in PURE_ONLY:
            assert kind == "error" and "needs every layer to be a Mamba layer" in value and FAMILY in value, (api, value)
            assert "\n" not in value, (api, value)
        else:
            assert kind == "complete", (api, kind, str(value)[:300])
    log = app.read_log()[start:]
    assert tracebacks(log) == [], log[-4000:]


def test_store_keeps_keys_and_values_and_disk_check_counts_them(hybrid_dir, tmp_path, monkeypatch):
    """The session's store path on a hybrid: encode on first use, store, reopen, the same state; and
    check_disk counts the keys and values the contexts' tokens add (a pure SSM's state is fixed)."""
    model = load_model(str(hybrid_dir))
    db = {"a": "Velmora is a city on the river Quell.", "b": "The Quell starts in the hills of Tarrix. " * 3}
    folder = tmp_path / "store"
    store = open_or_build_store(model, db, folder, log=lambda *_: None)
    res = Resources(model, "tiny", SimpleNamespace(database=db, name="t", split="test"), store, None, 10_000, {},
                    tmp_path)
    first = res.states(["a", "b"])
    assert [s.keys.shape[-2] for s in first] == [res.num_tokens("a"), res.num_tokens("b")]
    again = StateStore.open(folder, model).get_many(["a", "b"])
    for x, y in zip(first, again):
        assert x.keys is not None and torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
        assert torch.equal(x.ssm, y.ssm)
    fixed, per_token = model.config.state_nbytes(), model.config.kv_nbytes_per_token()
    free = 10 * fixed + 500 * per_token  # room for 10 states and their first ~450 tokens (the 0.9 margin)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: SimpleNamespace(free=free))
    check_disk(model, 10, tmp_path, tokens=100)
    with pytest.raises(StoreError, match="10 states of"):
        check_disk(model, 10, tmp_path, tokens=1000)

"""bf16 / fp16 inference chosen at start: `app.py --dtype` / PICASO_DTYPE reach
load_model, the weights and activations take that dtype, states stay float32, and each method's
loss moves by well under a percent on the demo (bench/dtype_loss.py measures all 200 samples)."""

from __future__ import annotations

import pytest
import torch

import app
from picaso_core.data import load_corpus
from picaso_core.analysis.evaluate import METHODS, evaluate_samples
from picaso_core.analysis.sweep import CONTEXT_SUFFIX
from picaso_core.session import load_resources


def test_dtype_flag_and_environment_variable(monkeypatch):
    assert app.parse_args([]).dtype == "float32"
    assert app.parse_args(["--dtype", "bfloat16"]).dtype == "bfloat16"
    monkeypatch.setenv("PICASO_DTYPE", "float16")
    assert app.parse_args([]).dtype == "float16"
    assert app.parse_args(["--dtype", "float32"]).dtype == "float32"  # a flag wins over its variable
    with pytest.raises(SystemExit):
        app.parse_args(["--dtype", "int8"])


def test_bfloat16_resources_keep_float32_states_and_the_losses(tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of float32, bfloat16, float16"):
        load_resources("demo", cache_dir=tmp_path, dtype="int8", log=lambda *a: None)
    res = load_resources("demo", cache_dir=tmp_path, dtype="bfloat16", log=lambda *a: None)
    assert res.model.backbone.embedding.weight.dtype == torch.bfloat16
    fp32 = load_resources("demo", cache_dir=tmp_path, log=lambda *a: None)
    assert res.store.folder != fp32.store.folder  # another fingerprint, another store
    cid = res.corpus.samples[0].context_ids[0]
    assert res.states([cid])[0].ssm.dtype == torch.float32
    samples = load_corpus("demo", "test").samples[:4]
    half = evaluate_samples(res.model, samples, context_suffix=CONTEXT_SUFFIX).mean_loss
    full = evaluate_samples(fp32.model, samples, context_suffix=CONTEXT_SUFFIX).mean_loss
    for m in METHODS:
        assert half[m] == pytest.approx(full[m], rel=0.01), m
    assert half != full  # it really ran in bfloat16

"""The Primer tab: handlers without a server (the tiny model of test_app), then the launched app's
/primer_* endpoints through gradio_client."""

from __future__ import annotations

import json

import gradio as gr
import pytest

import app
from picaso_core.ui.tabs import primer as primer_tab


def test_lti_handler_three_ways_agree_and_memory():
    kernel, eigen, md, d, py, cl = primer_tab.lti(0.9, 30, 6, 64)
    assert d["max_diff"] < 1e-10 and "agree to" in md and "44 steps" in md
    assert len(d["kernel"]) == 64 and set(d["y"]) == {"recurrence", "convolution", "FFT convolution"}
    assert len(d["eigenvalues"]) == 6 and all(abs(complex(*z)) < 1 for z in d["eigenvalues"])
    assert d["impulse"]["memory"][0] == 44 and len(kernel.data) == 5 and eigen.data
    json.dumps(d)
    # the printed snippet reruns what is on screen
    exec(compile(py, "show_code", "exec"), {})
    assert "api_name='/primer_lti'" in cl


def test_model_and_attention_handlers(res):  # noqa: F811
    memory, delta, md, prof, py, cl = primer_tab.model_view(res, "Velmora is a city on the river Quell.")
    n = len(res.model.tokenizer.encode("Velmora is a city on the river Quell."))
    assert prof["n_tokens"] == n and len(prof["tokens"]) == n and len(prof["layers"]) == res.model.config.n_layer
    assert len(memory.data) == res.model.config.n_layer and delta.data[0].z.shape == (res.model.config.n_layer, n)
    assert "median" in md
    fig, md, d, py, cl = primer_tab.attention_view(res, "Velmora is a city.", 1, 2)
    assert d["relative_error"] <= 1e-4 and "equals" in md and len(d["M"]) == len(d["tokens"])
    json.dumps(d)


def test_selective_and_complexity_handlers(res):  # noqa: F811
    fig, d = primer_tab.selective(0)
    assert d["static"]["y"] == d["selective"]["y"]
    calls = []
    fig, table, md, r, py, cl = primer_tab.complexity(res, "64, 128", progress=lambda f, desc="": calls.append(f))
    assert r["lengths"] == [64, 128] and list(table["T"]) == ["64", "128", "log-log slope"]
    assert calls[0] == 0 and calls[-1] == 1.0 and "slopes" in md


def test_a_flat_slope_reads_about_zero():
    """A constant time's slope scatters around 0 under load (-0.22, +0.03 seen for the SSM step): the
    text says ≈ 0 below |0.3| and keeps the number; the other slopes stay as measured."""
    md = primer_tab.slopes_md({"slopes": {"attention_prefill": 1.78, "ssm_scan": 1.04, "attention_step": 0.31,
                                          "ssm_step": -0.22}})
    assert "**1.78**" in md and "**1.04**" in md and "**0.31**" in md
    assert "SSM decode step **≈ 0 (-0.22)**" in md
    assert primer_tab.slope_text(0.29) == "≈ 0 (+0.29)" and primer_tab.slope_text(-0.3) == "-0.30"


def test_shipped_measurement_is_shown_until_one_is_made(tmp_path):
    assert primer_tab.shipped_complexity(tmp_path / "missing.json") is None
    fig, table, md = primer_tab.shipped_complexity()  # assets/primer_complexity.json (bench/primer_complexity.py --ship)
    assert table["T"].iloc[-1] == "log-log slope" and len(fig.data) == 8 and "development machine" in md


@pytest.mark.parametrize("call, message", [
    (lambda res: primer_tab.lti(1.5, 0, 4, 64), "magnitude"),
    (lambda res: primer_tab.lti(0.5, 0, 4, 3), "T"),
    (lambda res: primer_tab.lti(0.5, 0, "many", 64), "N"),
    (lambda res: primer_tab.selective(float("nan")), "selectivity"),
    (lambda res: primer_tab.model_view(res, "   "), "Type a text"),
    (lambda res: primer_tab.model_view(res, "word " * 400), "at most"),
    (lambda res: primer_tab.attention_view(res, "Velmora", 9, 0), "layer"),
    (lambda res: primer_tab.attention_view(res, "Velmora", 0, 999), "head"),
    (lambda res: primer_tab.complexity(res, "256"), "2 to"),
    (lambda res: primer_tab.complexity(res, "256, lots"), "whole numbers"),
    (lambda res: primer_tab.complexity(res, "256, 100000"), "up to|from 2 to"),
    (lambda res: primer_tab.complexity(res, "256, 512", "yes"), "one_thread"),
])
def test_bad_input_is_one_clear_message(res, call, message):  # noqa: F811
    with pytest.raises(gr.Error, match=message):
        call(res)


def test_primer_is_after_benchmarks_and_its_endpoints_are_named(res):  # noqa: F811
    names = [t.TITLE for t in app.TABS]
    assert names.index("Primer") > names.index("Benchmarks")
    info = app.build_app(res).get_api_info()["named_endpoints"]
    for ep in ("/primer_lti", "/primer_selective", "/primer_model", "/primer_attention", "/primer_complexity"):
        assert ep in info


def test_primer_endpoints_through_gradio_client(app_url):  # noqa: F811
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    out = client.predict(magnitude=0.8, phase=45, N=3, T=64, api_name="/primer_lti")
    assert len(out) == 6 and out[3]["max_diff"] < 1e-10 and out[3]["N"] == 3
    out = client.predict(selectivity=2.0, api_name="/primer_selective")
    assert len(out[1]["selective"]["dt"]) == 64
    out = client.predict(text="Tarrix is a mountain in the north.", api_name="/primer_model")
    assert out[3]["n_tokens"] == len(out[3]["tokens"]) > 0
    out = client.predict(text="Tarrix is a mountain.", layer=1, head=0, api_name="/primer_attention")
    assert out[2]["relative_error"] <= 1e-4
    out = client.predict(lengths="64, 256", one_thread=True, api_name="/primer_complexity")
    r = out[3]
    assert r["lengths"] == [64, 256] and all(s > 0 for series in r["seconds"].values() for s in series)
    with pytest.raises(Exception, match="magnitude"):
        client.predict(magnitude=2, phase=0, N=3, T=64, api_name="/primer_lti")
    with pytest.raises(Exception, match="whole numbers"):
        client.predict(lengths="a, b", api_name="/primer_complexity")

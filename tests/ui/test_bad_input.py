"""The bad-input table of /compose: input -> one short message that names the fix, answered fast,
with ONE line in the server log (no traceback).

The table runs through the handler (`compose_tab.compose`, which gets raw API payloads: the event
runs with preprocess=False) and a few rows through the launched app with gradio_client, where the
server log is checked too.
"""

from __future__ import annotations

import logging
import time

import gradio as gr
import pytest

from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.session import load_resources
from conftest import BagOfWords, write_corpus

MAX_MESSAGE = 140  # characters: one short sentence, never a list of every id
HANDLER_S = 1.0  # a rejection answers before any model work (tiny model, 2 shared cores)
CLIENT_S = 5.0  # through the queue and the network on a loaded machine

# input -> a part of the message (regex)
BAD = [
    (dict(query=""), r"^Type a query, or pick an example"),
    (dict(query="   "), r"^Type a query"),
    (dict(query=None), r"^Type a query"),
    (dict(query=5), r"^query must be text, got 5$"),
    (dict(query="Velmora", continuation=["x"]), r"^continuation must be text"),
    (dict(query="Velmora", k=2.5), r"^k must be a whole number from 1 to 8, got 2\.5$"),
    (dict(query="Velmora", k="five"), r"^k must be a whole number from 1 to 8, got 'five'$"),
    (dict(query="Velmora", k=0), r"^k must be a whole number from 1 to 8, got 0$"),
    (dict(query="Velmora", k=11), r"^k must be a whole number from 1 to 8, got 11$"),
    (dict(query="Velmora", k=None), r"^k must be a whole number"),
    (dict(query="Velmora", k=True), r"^k must be a whole number"),
    (dict(query="Velmora", max_new_tokens=1000), r"^max_new_tokens \(tokens to generate\) must be a whole number from 0 to 64"),
    (dict(query="Velmora", max_new_tokens=-1), r"^max_new_tokens"),
    (dict(query="Velmora", contexts=["no_such_id"]), r"^unknown context id 'no_such_id': pick ids from .*\(e\.g\. 'velmora-0'\)"),
    (dict(query="Velmora", contexts=["velmora-0", "x" * 5000]), r"^unknown context id 'x+…: pick ids"),
    (dict(query="Velmora", contexts=[1, 2]), r"^contexts must be a list of ids"),
    (dict(query="Velmora", example="no-such"), r"^unknown example 'no-such': pick one from .*\(e\.g\. 'q-velmora'\)"),
    (dict(query="Velmora", example=3), r"^example must be an example id"),
    (dict(query="Velmora", most_relevant_last="yes"), r"^most_relevant_last must be true or false"),
    (dict(query="Velmora " * 5000), r"^query is 40,000 characters long; this app takes at most 4,000\. Shorten it\.$"),
    (dict(query="🧩" * 700, continuation="🧩" * 700),  # several byte-level tokens per character
     r"^The query and continuation hold \d+ tokens; .*Shorten them\.$"),
]


@pytest.fixture(scope="module")
def res(tiny_model_dir, tmp_path_factory):
    corpus = write_corpus(tmp_path_factory.mktemp("corpus") / "facts.jsonl")
    return load_resources(str(tiny_model_dir), str(corpus), cache_dir=tmp_path_factory.mktemp("cache"),
                          embedder=BagOfWords(), log=lambda msg: None)


@pytest.mark.parametrize("kw, message", BAD, ids=[repr(kw)[:50] for kw, _ in BAD])
def test_bad_input_gets_one_short_message_and_one_log_line(res, kw, message, caplog):
    args = {"continuation": "", "k": 5, "contexts": None, "most_relevant_last": True, "max_new_tokens": 4, **kw}
    caplog.set_level(logging.WARNING, logger="picaso_explorer")
    t0 = time.perf_counter()
    with pytest.raises(gr.Error) as err:
        compose_tab.compose(res, **args)
    took = time.perf_counter() - t0
    msg = err.value.message
    assert len(msg) <= MAX_MESSAGE and "\n" not in msg, msg
    assert __import__("re").search(message, msg), msg
    assert err.value.print_exception is False  # gradio prints no traceback for it
    assert [r.getMessage() for r in caplog.records] == [f"rejected input to /compose: {msg}"]
    assert took < HANDLER_S, f"{took:.2f} s"


@pytest.mark.parametrize("kw", [dict(k=5), dict(k=5.0), dict(k="3"), dict(contexts="brandor-1"),
                                dict(max_new_tokens=0.0), dict(example="")])
def test_good_input_in_other_shapes_is_accepted(res, kw):
    args = {"query": "Brandor was started by", "continuation": " Kel Thal.", "max_new_tokens": 2, **kw}
    out = compose_tab.compose(res, **args)
    assert len(out[6]["methods"]) == len(compose_tab.METHODS)


def test_too_many_context_tokens_names_k_and_the_flag(res, monkeypatch):
    monkeypatch.setattr(res, "max_tokens", 10)
    with pytest.raises(gr.Error, match=r"The 3 contexts hold \d+ tokens; this app composes at most 10\. Lower k"):
        compose_tab.compose(res, "Velmora", " x", k=3)


# ---- through the launched app --------------------------------------------------------------------
CLIENT_BAD = [
    (dict(query="x", contexts=["no_such_id"]), "unknown context id 'no_such_id'"),
    (dict(query="x", example="no-such"), "unknown example 'no-such'"),
    (dict(query="Velmora", k=2.5), "k must be a whole number from 1 to 8, got 2.5"),
    (dict(query="x", k="five"), "k must be a whole number from 1 to 8, got 'five'"),
    (dict(query="word " * 5000), "query is 25,000 characters long; this app takes at most 4,000"),
]


def test_bad_input_through_gradio_client(app_url, served_log):
    """Each rejection comes back fast with the same short message; the server log gains exactly one
    line per rejected input and no traceback; the app keeps serving."""
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    before = served_log().splitlines()
    for kw, message in CLIENT_BAD:
        t0 = time.perf_counter()
        with pytest.raises(Exception) as err:
            client.predict(**kw, api_name="/compose")
        took = time.perf_counter() - t0
        assert message in str(err.value) and len(str(err.value)) <= MAX_MESSAGE, str(err.value)[:300]
        assert took < CLIENT_S, f"{kw}: {took:.2f} s"
    deadline = time.monotonic() + 5
    while True:  # the log is written by another process: give it a moment
        new = served_log().splitlines()[len(before):]
        if len(new) >= len(CLIENT_BAD) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(new) == len(CLIENT_BAD), new
    assert all("rejected input to /compose: " in line for line in new) and "Traceback" not in "\n".join(new)
    ok = client.predict(query="Brandor was started by", max_new_tokens=2, api_name="/compose")
    assert len(ok[6]["methods"]) == len(compose_tab.METHODS)

"""Hostile input (issue 47, items 2 and 5), on the suite's one app (conftest.hostile_app):

- a splitting regex that would backtrack for minutes in Python's `re` is run by RE2: /attribute
  answers within 2 s with a one-line refusal while a concurrent GET of /config keeps answering;
- a lone UTF-16 surrogate and control characters in a text input are normalised before any
  tokenizer (errors.normalise): the call answers, a blank-after-normalising query is refused in one
  line, and the log holds no traceback;
- `data=[]` or too many values: the app's one line, not Gradio's text naming its components;
- a fuzz corpus (lone surrogates, NUL / ESC, 10k-character strings, numbers for text, lists for
  numbers, dicts, None, `data=[]`, too many values) sent to every named endpoint of
  /gradio_api/info: each answers, every error is one line, and the log holds no traceback and no
  output but one-line log records.
Raw payloads go to POST /gradio_api/call/<api_name> {"data": [...]}, the answer read from its SSE
stream (GET /gradio_api/call/<api_name>/<event_id>).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import api_call as call, tracebacks
from gradio_client import Client

from picaso_core.ui.errors import normalise
from picaso_core.ui.tour.links import link_query

QUERY = "Question: Where does the river Quell start?\nAnswer:"
# catastrophic in Python's re on any prose (each run of words splits 2^n ways before `#!` fails);
# it matches nothing in the demo contexts, so RE2 answers with the "matches nothing" refusal
BACKTRACKING = r"(\w+\s?)+#!"
# a one-line log record (logging's format in picaso_core.session): anything else is stray output
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \S+ [A-Z]+: ")
TRAINING = ("finetune", "coffee_train")  # valid values start a long run: only bad input is sent
CHEAP = {  # base values that keep an accepted fuzz call short (a wrong value in one place runs with these)
    "compose": {"k": 1, "max_new_tokens": 1}, "generate_answer": {"k": 1},
    "attribute": {"answer": " Quell", "k": 1, "methods": ["loi"], "ablations": 2},
    "attribution_precision": {"n_samples": 1, "methods": ["loi"]},
    "benchmarks": {"samples": 1, "ks": "1", "methods": ["none"], "retriever": "random"},
    "landscape": {"steps": 5}, "soup_map": {"method": "pca"}, "soup_retrieval": {"queries": 1},
    "soup_mixing": {"queries": 1}, "soup_decay": {"chunk_tokens": 20, "documents": 2}, "coffee_ih0": {"steps": 1},
    "primer_complexity": {"lengths": "64, 128"}, "primer_lti": {"T": 8}}
NASTY = "Velmora\ud800 on the \udfffriver\x00 Quell\x1b[31m.\x07\x7f\x9b"  # lone surrogates, NUL, ESC, BEL, DEL, CSI
LONG = "x" * 10_000
BAD = {  # wrong values by the parameter's kind (its python_type in /gradio_api/info)
    "str": [NASTY, LONG, 3.5, {"a": 1}],
    "number": ["\ud800", [1, 2], {"a": 1}],
    "bool": ["\x00", [True], 2],
    "list": [{"a": 1}, 7, [NASTY, None]],
    "choice": ["\ud800\x1b", [1], {"a": 1}],
}
EVERYWHERE = [NASTY, LONG, {"a": 1}, None, [1, 2]]  # each in every parameter at once


def stray(log: str) -> list[str]:
    """Output lines that are not one-line log records (a traceback, a multi-line message, a print)."""
    return [line for line in log.splitlines() if line.strip() and not RECORD.match(line)]


@pytest.fixture(scope="module")
def client(hostile_app):
    return Client(str(hostile_app), verbose=False)


def test_backtracking_pattern_refused_at_once_while_config_answers(hostile_app, client):
    start = len(hostile_app.read_log())
    latencies, done = [], threading.Event()

    def poll_config():
        while not done.is_set():
            t0 = time.perf_counter()
            try:
                urllib.request.urlopen(f"{hostile_app}config", timeout=10).read()
            except OSError:
                pass  # not answered: its time stands as the latency
            latencies.append((t0, time.perf_counter()))
            time.sleep(0.05)

    poller = threading.Thread(target=poll_config, daemon=True)
    poller.start()
    try:
        time.sleep(0.2)  # /config answering before the call
        t0 = time.perf_counter()
        job = client.submit(query=QUERY, answer=" Quell", k=2, methods=["loi"], grain="sentence",
                            pattern=BACKTRACKING, api_name="/attribute")
        with pytest.raises(Exception) as err:
            job.result(timeout=30)
        t1 = time.perf_counter()
        took = t1 - t0
        deadline = t1 + 10
        while time.perf_counter() < deadline and not any(a > t1 for a, _ in latencies):
            time.sleep(0.05)  # until a /config asked after the call has answered
    finally:
        done.set()
        poller.join(15)
    message = str(err.value)
    during = [b - a for a, b in latencies if a < t1 and b > t0]  # asked or answered while the call ran
    slowest = max((b - a for a, b in latencies), default=float("inf"))
    print(f"backtracking pattern refused in {took:.2f} s; /config: {len(during)} answers during it, "
          f"slowest of {len(latencies)} {slowest:.2f} s")
    assert "matches nothing in a context" in message and "\n" not in message, f"{message!r} after {took:.1f} s"
    assert took < 2.0, f"the refusal took {took:.2f} s"
    assert during and slowest < 2.0, f"/config latencies around the call: {[round(b - a, 2) for a, b in latencies]}"
    # what RE2 cannot run is refused in one line, naming why
    with pytest.raises(Exception) as err:
        client.predict(query=QUERY, answer=" Quell", k=2, methods=["loi"], grain="sentence", pattern=r"(a)\1",
                       api_name="/attribute")
    assert "backreferences are not supported" in str(err.value) and "\n" not in str(err.value)
    log = hostile_app.read_log()[start:]
    assert tracebacks(log) == [] and stray(log) == [], log


def test_surrogates_and_control_characters_normalised(hostile_app):
    start = len(hostile_app.read_log())
    # normalised, then run: the tokenizer never sees a lone surrogate (it raised "TextInputSequence must be str")
    kind, answer = call(hostile_app, "generate_answer", [QUERY.replace("Quell", "Qu\ud800ell\x00\x1b[0m"), 1, []])
    assert kind == "complete" and isinstance(answer[0], str), (kind, answer)
    kind, out = call(hostile_app, "primer_model", [NASTY])
    assert kind == "complete", (kind, out)
    # blank once its control characters are gone: the query's own one-line refusal
    kind, message = call(hostile_app, "compose", ["\x00\x1b\x07\x7f\r", "", 1, [], True, 1, None, "base"])
    assert kind == "error" and message == "Type a query, or pick an example from the corpus.", (kind, message)
    # an id holding a surrogate and a NUL is an unknown id, said in one line
    kind, message = call(hostile_app, "compose", [QUERY, "", 1, ["sifenyl-0\ud800\x00"], True, 1, None, "base"])
    assert kind == "error" and "sifenyl-0\ufffd" in message and "\n" not in message, (kind, message)
    log = hostile_app.read_log()[start:]
    assert tracebacks(log) == [] and stray(log) == [], log


def test_normalise_and_the_copy_link_of_a_nasty_text():
    """What normalise keeps and drops; the hidden Copy link event URL-encodes the page's text values,
    which UTF-8 cannot do with a lone surrogate (it raised UnicodeEncodeError, a traceback)."""
    assert normalise("Qu\ud800ell\x00 \x1b[0m\r\nA\tB\rC\x7f\x9b Café 東京 🙂") == "Qu\ufffdell [0m\nA\tB\nC Café 東京 🙂"
    assert link_query("compose", {"query": NASTY}) == "?tab=compose&query=Velmora%EF%BF%BD+on+the+%EF%BF%BDriver+Quell%5B31m."


@pytest.mark.parametrize("api_name, takes", [("compose", 8), ("attribute", 12), ("tour_step", 1), ("finetune", 4)])
def test_wrong_number_of_inputs_answered_in_one_line(hostile_app, api_name, takes):
    start = len(hostile_app.read_log())
    for data in ([], ["bad"] * (takes + 3)):
        kind, message = call(hostile_app, api_name, data)
        assert kind == "error", (kind, message)
        assert message.startswith(f"/{api_name} takes {takes} input value"), message
        assert f"got {len(data)}: send one per parameter" in message, message
        assert "\n" not in message and "gradio.components" not in message and "object at 0x" not in message
    log = hostile_app.read_log()[start:]
    assert tracebacks(log) == [] and stray(log) == [], log


def kind_of(param: dict) -> str:
    t = param["python_type"]["type"]
    return ("choice" if t.startswith("Literal") else "list" if t.startswith("list") else "bool" if t == "bool"
            else "number" if t in ("int", "float") else "str")


def base_values(api_name: str, params: list[dict]) -> list:
    cheap = CHEAP.get(api_name, {})
    out = []
    for p in params:
        value = p.get("parameter_default")
        if not p.get("parameter_has_default") and value is None:
            value = {"str": QUERY, "number": 1, "bool": True, "list": []}.get(kind_of(p))
        out.append(cheap.get(p["parameter_name"], value))
    return out


def fuzz_corpus(info: dict) -> list[tuple[str, str, list]]:
    """(api_name, label, data) for every named endpoint: data=[], too many values, one bad value in
    every parameter at once, and (except the training endpoints) each parameter's bad values alone."""
    out = []
    for name, spec in info["named_endpoints"].items():
        api, params = name.lstrip("/"), spec["parameters"]
        training = api in TRAINING
        out.append((api, "data=[]", []))
        out.append((api, "too many", ["bad"] * (len(params) + 3) if training else base_values(api, params) + [1] * 3))
        out += [(api, f"all {v!r:.24}", [v] * len(params)) for v in EVERYWHERE if params]
        if training:
            continue
        for i, p in enumerate(params):
            for v in BAD[kind_of(p)]:
                data = base_values(api, params)
                data[i] = v
                out.append((api, f"{p['parameter_name']}={v!r:.24}", data))
    return out


def test_fuzz_every_named_endpoint(hostile_app):
    info = json.load(urllib.request.urlopen(f"{hostile_app}gradio_api/info", timeout=30))
    corpus = fuzz_corpus(info)
    assert {"attribute", "compose", "primer_model", "tour_step"} <= {api for api, _, _ in corpus}
    start = len(hostile_app.read_log())

    def send(case):
        api, label, data = case
        t0 = time.perf_counter()
        kind, value = call(hostile_app, api, data)
        if kind == "error" and value and "queue is full" in value.lower():  # another test's jobs: once more
            time.sleep(1)
            kind, value = call(hostile_app, api, data)
        return api, label, kind, value, time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:  # the queue holds 4
        results = list(pool.map(send, corpus))
    took = time.perf_counter() - t0
    unanswered = [(api, label, kind, str(value)[:200]) for api, label, kind, value, _ in results
                  if kind not in ("complete", "error")]
    assert not unanswered, unanswered
    multiline = [(api, label, value) for api, label, kind, value, _ in results
                 if kind == "error" and (not isinstance(value, str) or "\n" in value)]
    assert not multiline, multiline
    log = hostile_app.read_log()[start:]
    assert tracebacks(log) == [], log[-5000:]
    assert stray(log) == [], stray(log)[:40]
    slowest = max(results, key=lambda r: r[-1])
    print(f"fuzz: {len(corpus)} calls in {took:.1f} s; slowest {slowest[0]} {slowest[1]} {slowest[-1]:.1f} s")

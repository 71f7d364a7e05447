"""Bounded work per request (issue 47, item 1), on the suite's one app (conftest.hostile_app):

- a request over a cost cap is refused before any work, in one line naming the cap: 40 picked
  contexts to /compose (picked contexts are capped like k, 10) answer in under 1 s;
- a job past its endpoint's time limit is stopped at its next safe point: the suite's app runs with
  `--time-limit landscape=2` (conftest.HOSTILE_ARGV), so /landscape at its largest grid (41 steps, a
  pair whose result is not cached) runs past it; both workers take one such job, each is stopped
  with the one-line "stopped: /landscape ran past its 2 s limit; ..." and a quick model-bound call
  answers right after (were the jobs still running, it would wait behind them);
- each leaves one line in the log and no traceback.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import tracebacks
from gradio_client import Client

from picaso_core.data import load_corpus
from picaso_core.session import DEFAULT_SPLIT

LIMIT_S = 2  # conftest.HOSTILE_ARGV's --time-limit landscape=2
STOP_SLACK_S = 15  # the next safe point after the limit, on 2 shared cores (a layer of one batched forward)


@pytest.fixture(scope="module")
def client(hostile_app):
    return Client(str(hostile_app), verbose=False)


def new_log(app, since: int) -> str:
    return app.read_log()[since:]


def test_forty_picked_contexts_refused_at_once(hostile_app, client):
    ids = sorted(load_corpus("demo", DEFAULT_SPLIT).database)[:40]
    client.predict(api_name="/cache_stats")  # the client's session and stream open: the refusal is what is timed
    start = len(hostile_app.read_log())
    t0 = time.perf_counter()
    with pytest.raises(Exception) as err:
        client.predict(query="Where does the river start?", contexts=ids, api_name="/compose")
    took = time.perf_counter() - t0
    assert "40 picked contexts: at most 10 (like k); pick fewer" in str(err.value)
    assert took < 1.0, f"the refusal took {took:.2f} s"
    log = new_log(hostile_app, start)
    assert len([line for line in log.splitlines() if "40 picked contexts" in line]) == 1, log
    assert tracebacks(log) == [], log


def test_job_past_its_limit_stopped_and_its_worker_free(hostile_app, client):
    clients = [Client(str(hostile_app), verbose=False) for _ in range(2)]  # opened before the clock starts
    start = len(hostile_app.read_log())

    def heavy(c):
        t0 = time.perf_counter()
        try:
            c.predict(sample="demo-test-r0000", steps=41, pair="u1-u2", view="contour", api_name="/landscape")
            return "answered", time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001  (the stop is the visitor's error)
            return str(e), time.perf_counter() - t0

    with ThreadPoolExecutor(2) as pool:  # one job per worker (--workers 2)
        outcomes = list(pool.map(heavy, clients))
    for message, took in outcomes:
        assert message.startswith(f"stopped: /landscape ran past its {LIMIT_S} s limit;"), outcomes
        assert "\n" not in message
        assert took < LIMIT_S + STOP_SLACK_S, outcomes
    t0 = time.perf_counter()
    answer = client.predict(query="Question: Where does the river start?\nAnswer:", k=1, api_name="/generate_answer")
    took = time.perf_counter() - t0
    assert isinstance(answer, str) and answer.strip()
    assert took < 10, f"a quick call after the stopped jobs took {took:.1f} s"
    log = new_log(hostile_app, start)
    assert len([line for line in log.splitlines() if "stopped: /landscape" in line]) == 2, log
    assert tracebacks(log) == [], log

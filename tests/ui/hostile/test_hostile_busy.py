"""Refused at once (issue 47, item 3), on the suite's one app (conftest.hostile_app: 2 workers, a
queue of 4): with both workers on long COFFEE runs, a burst of 40 joins sent the way the browser
sends them (each its own connection and session) takes the queue's 4 places and every other join
gets its refusal in under 0.5 s: HTTP 503 with the app's message "busy: 6 jobs ahead, try again in
about S s" (4 waiting + 2 running) and Retry-After S, sent by serving's gate before Gradio's route
reads the request (busy.BusyGate). Then, with the queue full, a burst of 40 gradio_client submits
each raises QueueError (the client's own words for any 503) in under 0.5 s. The refusal is honest:
the burst fills every place the queue has, no fewer; and with the queue full, the page, its config and a
light event are still served (only the model pool's joins are bounded, issue 48.8), and a browser's
click shows the app's message (the page reads the 503's detail: layout.JS), beside Gradio's own toast.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
import uuid

import httpx
from conftest import tracebacks
from gradio_client import Client
from gradio_client.utils import QueueError
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WORKERS, QUEUE = 2, 4  # conftest.HOSTILE_ARGV's --workers / --queue-size
BURST = 40
BOUND_S = 0.5  # issue 47.3: every refusal within this
MESSAGE = re.compile(rf"busy: {WORKERS + QUEUE} jobs ahead, try again in about (\d+) s")


def queued(url: str) -> int:
    with urllib.request.urlopen(url + "gradio_api/queue/status", timeout=10) as r:
        return json.loads(r.read())["queue_size"]


def wait_for(cond, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def compose_join(url: str) -> dict:
    """The browser's POST body for the Compose button (its event's id, trigger and inputs)."""
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        dep = next(d for d in json.loads(r.read())["dependencies"] if d.get("api_name") == "compose")
    return {"data": ["Where does the river start?"] + [None] * (len(dep["inputs"]) - 1), "event_data": None,
            "fn_index": dep["id"], "trigger_id": dep["targets"][0][0]}


async def http_burst(url: str, body: dict, n: int) -> list[tuple[float, int, dict, str | None, str]]:
    """n joins at once, each its own connection and session: (seconds, status, reply, Retry-After, session)."""
    async def one(client):
        session, t0 = uuid.uuid4().hex[:11], time.perf_counter()
        r = await client.post(url + "gradio_api/queue/join", json={**body, "session_hash": session})
        return time.perf_counter() - t0, r.status_code, r.json(), r.headers.get("retry-after"), session

    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)  # n browsers: a connection each
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:
        return await asyncio.gather(*(one(client) for _ in range(n)))


def client_burst(clients: list[Client]) -> list[tuple[float, BaseException | None]]:
    out: list = [None] * len(clients)
    start = threading.Barrier(len(clients))

    def call(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        try:
            clients[i].submit(query="Where does the river start?", api_name="/compose").result(timeout=30)
            out[i] = (time.perf_counter() - t0, None)
        except Exception as e:  # noqa: BLE001  (asserted below)
            out[i] = (time.perf_counter() - t0, e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_burst_refused_at_once_with_the_apps_message(hostile_app, browser):
    url = str(hostile_app)
    start = len(hostile_app.read_log())
    body = compose_join(url)
    # gradio_client visitors whose page is open; ssl_verify=False: no CA certificates loaded for a plain
    # http join (with them each join builds an SSL context under this process's GIL: bench/burst.py)
    burst_clients = [Client(url, verbose=False, ssl_verify=False) for _ in range(BURST)]
    for c in burst_clients:  # each has called once (a light event): its first call's set-up is not timed
        c.predict(api_name="/cache_stats")
    runners = [Client(url, verbose=False) for _ in range(WORKERS)]  # COFFEE runs one run per session
    jobs = [c.submit(task="ih", steps=20000, seconds=60, api_name="/coffee_train") for c in runners]
    accepted = []
    try:
        wait_for(lambda: queued(url) == 0 and all(j.status().code.name in ("PROCESSING", "ITERATING") for j in jobs),
                 "both workers busy, the queue empty")

        answers = asyncio.run(http_burst(url, body, BURST))
        accepted = [(reply["event_id"], session) for _, status, reply, _, session in answers if status == 200]
        refused = [a for a in answers if a[1] != 200]
        assert len(accepted) == QUEUE and queued(url) == QUEUE  # every place taken, none refused while free
        for took, status, reply, retry_after, _ in refused:
            assert status == 503, (status, reply)
            wait = MESSAGE.fullmatch(reply["detail"])
            assert wait, reply
            assert retry_after == wait.group(1)
        worst = max(r[0] for r in refused)
        assert worst < BOUND_S, f"the slowest of {len(refused)} refusals took {worst:.2f} s"

        answers = client_burst(burst_clients)
        errors = [e for _, e in answers if not isinstance(e, QueueError)]
        assert not errors, errors[:3]
        worst = max(took for took, _ in answers)
        assert worst < BOUND_S, f"the slowest of {BURST} gradio_client refusals took {worst:.2f} s"
        assert queued(url) == QUEUE  # nothing of the second burst got in
        # the pool's queue full: the page, its config and a light event (issue 48.8) still answer
        for path in ("", "config"):
            t0 = time.perf_counter()
            urllib.request.urlopen(url + path, timeout=30).read()
            assert time.perf_counter() - t0 < 3.0, path
        burst_clients[0].predict(api_name="/cache_stats")  # a light join: not refused (QueueError) as "busy"
        # the browser: Gradio's frontend says only "busy"; the page shows the app's words from the 503
        browser.get(url)
        WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "compose-run"))
        browser.find_element(By.ID, "compose-run").click()
        WebDriverWait(browser, 15).until(lambda d: d.find_element(By.ID, "px-busy").is_displayed())
        assert MESSAGE.fullmatch(browser.find_element(By.ID, "px-busy").text), browser.find_element(By.ID, "px-busy").text
    finally:
        for event_id, session in accepted:  # the burst's own joins leave the queue unrun
            httpx.post(url + "gradio_api/cancel", json={"event_id": event_id, "session_hash": session,
                                                        "fn_index": body["fn_index"]}, timeout=30)
        for j in jobs:
            j.cancel()
    wait_for(lambda: queued(url) == 0 and all(j.done() for j in jobs), "the jobs ended after the cancels")
    log = hostile_app.read_log()[start:]
    assert tracebacks(log) == [], log

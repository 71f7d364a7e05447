"""Refusals under a burst: with the model pool busy and the queue full, how long a refused visitor
waits for "busy" and what it says, for a browser's request and for gradio_client (issue 47.3).

    python bench/burst.py                     # the demo: 2 workers, queue 16, a burst of 60 each way
    python bench/burst.py --compare           # the same burst against Gradio's own refusal too, and the ratio
    python bench/burst.py --url http://127.0.0.1:7860/ --queue-size 16   # an app already running

Each run starts `python app.py --no-tour-prebuild` (the demo), makes its workers busy with long
COFFEE runs (`/coffee_train`, a time budget of --job-seconds), fills the queue with more of them,
then fires --burst joins at once the way the browser sends them (POST /gradio_api/queue/join, each
its own connection and session) and --burst gradio_client submits at once (clients made before the
queue fills, as visitors whose page is already open). A refusal is counted as the app's own when it
is HTTP 503 whose detail starts "busy:" (gradio_client raises QueueError on any 503 with words of
its own, so there it is counted as refused at once); a timeout is a request with no answer within
--timeout s (gradio_client's join waits 5 s by default). The gradio_client burst runs its clients as
threads of this one process, with ssl_verify=False (the URL is plain http: nothing is verified
either way) so that what is timed is the server, not each client building an SSL context under this
process's GIL (--client-verify keeps that, as the issue's 41 timeouts of 60 did). --compare runs the app a second time with
PICASO_FAST_BUSY=0 (Gradio's route refuses, as before serving.BusyGate) and prints the ratio of the
medians.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import parse, parser, table, write_json  # noqa: E402

from picaso_core.light.defaults import count, number  # noqa: E402

SLOW = dict(task="ih", steps=20000, api_name="/coffee_train")  # a worker held for `seconds`


def get_json(url: str, timeout: float = 30) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def join_body(url: str, api_name: str = "compose") -> dict:
    """What the browser POSTs to queue/join for `api_name` (its inputs as the API page's examples)."""
    config = get_json(url + "config")
    dep = next(d for d in config["dependencies"] if d.get("api_name") == api_name)
    info = get_json(url + "gradio_api/info")["named_endpoints"]["/" + api_name]
    return {"data": [p.get("example_input") for p in info["parameters"]], "event_data": None,
            "fn_index": dep["id"], "trigger_id": (dep.get("targets") or [[None]])[0][0]}


def queued(url: str) -> int:
    return get_json(url + "gradio_api/queue/status", 10)["queue_size"]


def fill(url: str, workers: int, queue_size: int, seconds: int) -> list:
    """Hold every worker with a COFFEE run of `seconds` and fill the queue behind them; returns the jobs."""
    from gradio_client import Client

    submit = lambda: Client(url, verbose=False).submit(seconds=seconds, **SLOW)  # noqa: E731  (one run a session)
    jobs = [submit() for _ in range(workers)]
    deadline = time.monotonic() + 60
    while queued(url) > 0 or not all(j.status().code.name in ("PROCESSING", "ITERATING") for j in jobs):
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not start the slow jobs within 60 s")
        time.sleep(0.2)
    jobs += [submit() for _ in range(queue_size)]
    while queued(url) < queue_size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the queue did not fill: {queued(url)} of {queue_size} waiting")
        time.sleep(0.2)
    return jobs


async def _http_burst(url: str, body: dict, n: int, timeout: float) -> list[dict]:
    import httpx

    async def one(client) -> dict:
        t0 = time.perf_counter()
        try:
            r = await client.post(url + "gradio_api/queue/join", json={**body, "session_hash": uuid.uuid4().hex[:11]})
            try:
                detail = str(r.json().get("detail", ""))
            except ValueError:
                detail = r.text[:200]
            return dict(s=time.perf_counter() - t0, status=r.status_code, detail=detail)
        except httpx.TimeoutException:
            return dict(s=time.perf_counter() - t0, status="timeout", detail="")

    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)  # one connection each, as n browsers
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        return await asyncio.gather(*(one(client) for _ in range(n)))


def http_burst(url: str, body: dict, n: int, timeout: float) -> list[dict]:
    return asyncio.run(_http_burst(url, body, n, timeout))


def client_burst(clients: list, n: int, timeout: float) -> list[dict]:
    """n gradio_client submits of /compose at once, each from its own client; seconds until each
    raised or answered."""
    import httpx
    from gradio_client.exceptions import AppError
    from gradio_client.utils import QueueError

    out: list[dict | None] = [None] * n
    start = threading.Barrier(n)

    def call(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        try:
            clients[i].submit(query="Who founded Velmora?", api_name="/compose").result(timeout=timeout)
            out[i] = dict(s=time.perf_counter() - t0, status="accepted", detail="")
        except QueueError as e:
            out[i] = dict(s=time.perf_counter() - t0, status=503, detail=str(e))
        except (httpx.TimeoutException, TimeoutError) as e:
            out[i] = dict(s=time.perf_counter() - t0, status="timeout", detail=type(e).__name__)
        except AppError as e:
            out[i] = dict(s=time.perf_counter() - t0, status="error", detail=str(e)[:200])
        except Exception as e:  # noqa: BLE001  (counted, with its kind)
            out[i] = dict(s=time.perf_counter() - t0, status="error", detail=f"{type(e).__name__}: {e}"[:200])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 30)
    return [o or dict(s=float("nan"), status="hung", detail="") for o in out]


def summary(results: list[dict], kind: str) -> dict:
    refused = [r for r in results if r["status"] == 503]
    s = sorted(r["s"] for r in refused)
    own = sum(r["detail"].startswith("busy:") for r in refused) if kind == "http" else len(refused)
    accepted = sum(r["status"] in (200, "accepted") for r in results)
    timeouts = sum(r["status"] == "timeout" for r in results)
    return dict(n=len(results), refused=len(refused), own_message=own, timeouts=timeouts, accepted=accepted,
                other=len(results) - len(refused) - timeouts - accepted,
                median_s=statistics.median(s) if s else None,
                p95_s=s[min(len(s) - 1, int(0.95 * len(s)))] if s else None, max_s=s[-1] if s else None,
                example=next((r["detail"] for r in refused), "") or next((r["detail"] for r in results), ""))


def run(url: str, args) -> dict:
    """The two bursts against the app at `url`, each with the workers busy and the queue full."""
    from gradio_client import Client

    body = join_body(url)
    # clients made before the queue fills (pages already open); without --client-verify each loads no CA
    # certificates for its plain-http join: with them, each join builds an SSL context (~30 ms of CPU
    # under the GIL), so one process's 60 threads measure themselves (median 6.7 s against a server
    # that answers at once, on this machine under load), not the server
    clients = [Client(url, verbose=False, ssl_verify=args.client_verify) for _ in range(args.burst)]
    for c in clients:  # each has called once (a light event): a client's first call sets up its threads
        c.predict(api_name="/cache_stats")
    queued_before = args.queue_size if args.queued is None else args.queued
    jobs = fill(url, args.workers, queued_before, args.job_seconds)
    http = http_burst(url, body, args.burst, args.timeout)
    full = queued(url) >= args.queue_size  # full: the rest of the client burst is refused
    client = client_burst(clients, args.burst, args.timeout)
    full = full and queued(url) >= args.queue_size
    for j in jobs:
        j.cancel()
    return dict(http=summary(http, "http"), client=summary(client, "client"), queue_stayed_full=full)


def launch_app(tmp: Path, args, env: dict):
    from app_latency import launch

    extra = ["--no-tour-prebuild", "--workers", str(args.workers), "--queue-size", str(args.queue_size),
             *args.app_args.split()]
    proc, url, _, log = launch(args.model, args.corpus, "test", tmp, args.start_timeout, env, extra)
    return proc, url, log


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", default="demo")
    p.add_argument("--corpus", default="demo")
    p.add_argument("--burst", type=count(1), default=60, help="requests fired at once, per client kind")
    p.add_argument("--workers", type=count(1), default=2)
    p.add_argument("--queue-size", type=count(1), default=16)
    p.add_argument("--queued", type=count(0), default=None,
                   help="jobs waiting before the burst (default: the queue full); fewer: the burst's first joins get in")
    p.add_argument("--job-seconds", type=count(1), default=120,
                   help="COFFEE time budget of the jobs that hold the pool")
    p.add_argument("--timeout", type=number(above=0), default=20.0, help="seconds a raw request waits for an answer")
    p.add_argument("--client-verify", action="store_true",
                   help="gradio_client as it comes (ssl_verify=True): its own SSL set-up per join is timed too")
    p.add_argument("--compare", action="store_true", help="also run with PICASO_FAST_BUSY=0 (Gradio's refusal)")
    p.add_argument("--app-args", default="", help="extra app.py flags")
    p.add_argument("--url", default=None, help="an app already running (its --workers / --queue-size given here)")
    p.add_argument("--start-timeout", type=number(above=0), default=300)
    args = parse(p)

    from app_latency import stop

    runs = {}
    variants = [("Gradio's refusal (PICASO_FAST_BUSY=0)", {"PICASO_FAST_BUSY": "0"})] if args.compare else []
    variants.append(("the app's gate", {}))
    for name, env in variants if not args.url else [("the app at --url", {})]:
        if args.url:
            runs[name] = run(args.url, args)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            proc, url, log = launch_app(Path(tmp), args, env)
            try:
                runs[name] = run(url, args)
            finally:
                stop(proc, log)
    rows = []
    for name, r in runs.items():
        for kind, label in (("http", "browser (POST queue/join)"), ("client", "gradio_client")):
            s = r[kind]
            f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
            rows.append([name, label, f"{s['refused']}/{s['n']}", s["own_message"], s["timeouts"], s["accepted"],
                         s["other"],
                         f(s["median_s"]), f(s["p95_s"]), f(s["max_s"])])
    print(table(rows, ["app", "client", "refused (503)", "app's message", "timeouts", "accepted", "other", "median s",
                       "p95 s", "max s"]))
    for name, r in runs.items():
        print(f"{name}: e.g. {r['http']['example']!r} / {r['client']['example']!r}"
              + ("" if r["queue_stayed_full"] else " (the queue did not stay full: some of the burst got in)"))
    ratios = {}
    if len(runs) == 2:
        old, new = runs.values()
        for kind in ("http", "client"):
            if old[kind]["median_s"] and new[kind]["median_s"]:
                ratios[kind] = old[kind]["median_s"] / new[kind]["median_s"]
                print(f"{kind}: median refusal {ratios[kind]:.1f}x sooner with the gate")
    write_json(args, runs, ratios)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()

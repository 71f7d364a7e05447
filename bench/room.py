"""A room at once (issue 48, item 8): a speaker shows the Space's address and the audience opens it
together. Each visitor loads the page (GET /), its config (GET /config), then steps the tour the way
the browser does: the Next button's event, a cached step, posted and answered (POST
/gradio_api/run/predict: the event is queue=False), or for a queued event joined on the queue (POST
/gradio_api/queue/join) and its result read from the session's event stream; and asks
/tour_step through the API (POST /gradio_api/call/tour_step, then its result stream), as
gradio_client does. Every visitor runs at once (one connection pool each), after the same run with
one visitor; prints p50 / p95 / max per request kind and the errors.

    python -m picaso_core.ui.tour build --cache-dir /tmp/room     # the tour's cache, once
    python bench/room.py --cache-dir /tmp/room                     # the demo: 1 visitor, then 100
    python bench/room.py --url http://127.0.0.1:7860/              # an app already running

Bounds (issue 48.8): every page load <= 3 s and every cached step <= 1 s at the 95th percentile, no
error, on the 2-core demo. The page, its config and the cached steps take no model worker (the Next
click is a light event answered on its request, /tour_step a light API call), so a visitor's wait is
the server's event loop and threads, not the model pool. Figures: docs/serving.md, "A room at once".
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import parse, parser, table, write_json  # noqa: E402

KINDS = ("page", "config", "step (Next)", "step (/tour_step)")


def next_event(config: dict) -> dict:
    """The Next button's click event in the page's config (its fn index as "id", its trigger)."""
    comps = {c["id"]: c for c in config["components"]}
    button = next(i for i, c in comps.items() if c.get("props", {}).get("elem_id") == "tour-next")
    dep = next(d for d in config["dependencies"] if [button, "click"] in [list(t) for t in d.get("targets", [])])
    return dep


async def read_stream(client, url: str, session: str, event_id: str) -> dict:
    """The session's event stream until `event_id` completes; its last message."""
    async with client.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            msg = json.loads(line[5:])
            if msg.get("event_id") == event_id and msg.get("msg") == "process_completed":
                return msg
    raise RuntimeError("the stream ended before the step completed")


async def visitor(url: str, dep: dict, steps: int, timeout: float, rng: random.Random, tls) -> dict:
    """One visitor's requests, timed: {kind: seconds or an error string}. `tls`: the SSL context the
    visitors share (httpx builds one per client otherwise, ~10-70 ms of this process's CPU each: 100
    of them held this process's event loop, and every visitor's timings with it, for seconds)."""
    import httpx

    out: dict = {}
    session = "room" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))
    async with httpx.AsyncClient(timeout=timeout, headers={"accept-encoding": "gzip, deflate, br"},
                                 verify=tls) as client:
        async def timed(kind, coro):
            t0 = time.perf_counter()
            try:
                await coro
                out[kind] = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001  (counted as this kind's error)
                out[kind] = f"{type(e).__name__}: {e}"[:160]

        async def get(path):
            r = await client.get(url + path)
            r.raise_for_status()
            await r.aread()

        async def step_next():
            # the step on screen is the session's (a gr.State): a new visitor's Next shows step 1
            body = {"data": [None, []], "event_data": None, "fn_index": dep["id"], "trigger_id": dep["targets"][0][0],
                    "session_hash": session}
            if dep.get("queue") is False:  # as the page sends it: posted and answered, no queue, no stream
                r = await client.post(url + "gradio_api/run/predict", json=body)
                r.raise_for_status()
                if len(r.json().get("data") or ()) != len(dep["outputs"]):
                    raise RuntimeError(str(r.json())[:120])
                return
            r = await client.post(url + "gradio_api/queue/join", json=body)
            r.raise_for_status()
            msg = await read_stream(client, url, session, r.json()["event_id"])
            if not msg.get("success"):
                raise RuntimeError(str(msg.get("output"))[:120])

        async def step_api():
            r = await client.post(url + "gradio_api/call/tour_step", json={"data": [rng.randrange(1, steps + 1)]})
            r.raise_for_status()
            event = r.json()["event_id"]
            async with client.stream("GET", url + f"gradio_api/call/tour_step/{event}") as s:
                kind = None
                async for line in s.aiter_lines():
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:") and kind in ("complete", "error"):
                        if kind == "error":
                            raise RuntimeError(line[5:].strip()[:120])
                        if not json.loads(line[5:])[0].get("cached"):
                            raise RuntimeError("the step was not served from the cache")
                        return
            raise RuntimeError("no result")

        await timed("page", get(""))
        await timed("config", get("config"))
        await timed("step (Next)", step_next())
        await timed("step (/tour_step)", step_api())
    return out


async def room(url: str, visitors: int, dep: dict, steps: int, timeout: float, seed: int = 0) -> list[dict]:
    rng, tls = random.Random(seed), ssl.create_default_context()
    return await asyncio.gather(*(visitor(url, dep, steps, timeout, random.Random(rng.random()), tls)
                                  for _ in range(visitors)))


def figures(results: list[dict]) -> dict:
    out = {}
    for kind in KINDS:
        times = sorted(r[kind] for r in results if isinstance(r.get(kind), float))
        errors = [r[kind] for r in results if isinstance(r.get(kind), str)]
        p = lambda q: times[min(len(times) - 1, int(q * len(times)))] if times else None  # noqa: E731
        out[kind] = dict(n=len(times), errors=len(errors), example_error=errors[0] if errors else "",
                         p50=statistics.median(times) if times else None, p95=p(0.95), max=times[-1] if times else None)
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--visitors", type=int, default=100)
    p.add_argument("--cache-dir", default=None, help="the app's --cache-dir, holding the tour's cache (built first)")
    p.add_argument("--url", default=None, help="an app already running: no app is started")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a request may take before it counts as an error")
    p.add_argument("--app-args", default="", help="extra app.py flags")
    p.add_argument("--app-env", action="append", default=[], metavar="NAME=VALUE", help="environment of the app")
    p.add_argument("--start-timeout", type=float, default=300)
    args = parse(p)

    import urllib.request

    from app_latency import launch, stop, wait_until_idle

    env = dict(kv.split("=", 1) for kv in args.app_env)
    with tempfile.TemporaryDirectory() as tmp:
        proc = log = None
        if args.url:
            url = args.url
        else:
            cache = Path(args.cache_dir) if args.cache_dir else Path(tmp)
            proc, url, _, log = launch("demo", "demo", "test", cache, args.start_timeout, env,
                                       ["--no-tour-prebuild", *args.app_args.split()])
            wait_until_idle(proc.pid)  # the page's start-up work done: what is timed is the room
        try:
            with urllib.request.urlopen(url + "config", timeout=60) as r:
                config = json.loads(r.read())
            dep = next_event(config)
            from gradio_client import Client

            steps = Client(url, verbose=False).predict(1, api_name="/tour_step")["steps"]
            runs = {}
            for n in (1, args.visitors):
                runs[n] = figures(asyncio.run(room(url, n, dep, steps, args.timeout)))
        finally:
            if proc is not None:
                stop(proc, log)
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    rows = [[f"{n} visitor{'s' if n > 1 else ''}", kind, r[kind]["n"], r[kind]["errors"], f(r[kind]["p50"]),
             f(r[kind]["p95"]), f(r[kind]["max"])] for n, r in runs.items() for kind in KINDS]
    print(table(rows, ["room", "request", "answered", "errors", "p50 s", "p95 s", "max s"]))
    for n, r in runs.items():
        for kind in KINDS:
            if r[kind]["errors"]:
                print(f"{n} visitors, {kind}: e.g. {r[kind]['example_error']}")
    many = runs[args.visitors]
    ok = (many["page"]["p95"] or 1e9) <= 3 and all((many[k]["p95"] or 1e9) <= 1 for k in KINDS[2:]) and not any(
        many[k]["errors"] for k in KINDS)
    print(f"bounds (page p95 <= 3 s, cached step p95 <= 1 s, no error) at {args.visitors}: {'met' if ok else 'NOT met'}")
    write_json(args, {str(n): r for n, r in runs.items()})


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()

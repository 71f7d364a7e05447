"""Soak: many /compose calls from many gradio_client clients against a running `python app.py`,
sampling the server's resident memory (RSS) after every round. Memory that keeps growing while the
same queries repeat is a leak (or allocator retention); a serving app must stay flat.

    python bench/soak.py                                  # demo: 20 serial calls, then 6 rounds of 100 from 20 clients
    python bench/soak.py --rounds 20 --calls 100          # the 2,000-call soak (bound: +50 MB over the last 1,000)
    python bench/soak.py --app-env MALLOC_ARENA_MAX=2     # the app under an environment setting
    python bench/soak.py --clients 5 --rounds 1 --calls 60 --serial 0 --queries 60 --app-args=--encode-all  # load
    python bench/soak.py --url http://127.0.0.1:7860/ --pid 1234   # an app already running

Half of the clients (--new-sessions) open a fresh gradio_client session for every call (a visitor
who reloads the page); the others keep theirs. Every call is one of the corpus's first --queries
examples, so after the first pass no new context is encoded: what grows is the serving itself.
Prints RSS per round and the growth over the last half of the calls; --json writes them.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import parse, parser, write_json  # noqa: E402


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def soak(url: str, pid: int, samples, *, clients: int, rounds: int, calls: int, serial: int, k: int,
         new_sessions: float, settle: float = 0.0, progress=print) -> dict:
    """A serial pass of `serial` calls, then `rounds` rounds of `calls` calls shared by `clients`
    threads; RSS (MB) after the serial pass and after each round (`settle` seconds after it, for
    the app to hand freed pages back), and every call's seconds."""
    from gradio_client import Client

    ask = [dict(query=s.query, continuation=s.continuation, k=k, example=s.sample_id, api_name="/compose")
           for s in samples]
    fresh_every_call = set(range(int(round(clients * new_sessions))))
    keep = {i: Client(url, verbose=False) for i in range(clients) if i not in fresh_every_call}
    rss = [rss_mb(pid)]
    one = keep.get(clients - 1) or Client(url, verbose=False)
    for j in range(serial):
        one.predict(**ask[j % len(ask)])
    time.sleep(settle)
    rss.append(rss_mb(pid))
    progress(f"start {rss[0]:.0f} MB, after {serial} serial calls {rss[1]:.0f} MB")
    latencies, failures, busy_s = [], [], 0.0
    for r in range(rounds):
        todo = iter(range(calls))
        lock = threading.Lock()

        def worker(i: int) -> None:
            while True:
                with lock:
                    j = next(todo, None)
                if j is None:
                    return
                t0 = time.perf_counter()
                try:
                    client = keep[i] if i in keep else Client(url, verbose=False)
                    client.predict(**ask[(r * calls + j) % len(ask)])
                    latencies.append(time.perf_counter() - t0)
                except Exception as e:  # a refusal ("busy") or a failed handshake: counted, not fatal
                    failures.append(f"{type(e).__name__}: {str(e)[:120]}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        took = time.perf_counter() - t0
        busy_s += took
        time.sleep(settle)
        rss.append(rss_mb(pid))
        progress(f"round {r + 1}/{rounds}: {calls} calls in {took:.1f} s, RSS {rss[-1]:.0f} MB")
    half = rounds // 2
    tail = list(range(1 + half, len(rss)))  # the rounds of the second half (and the one before)
    slope = _slope([t * calls for t in tail], [rss[t] for t in tail]) if len(tail) > 1 else 0.0
    return {"slope_last_half_kb_per_call": round(1024 * slope, 1), "rss_mb": [round(x, 1) for x in rss], "calls": rounds * calls, "serial": serial, "clients": clients,
            "new_session_clients": len(fresh_every_call), "failures": len(failures), "failure_kinds": sorted(set(failures))[:5],
            "growth_last_half_mb": round(rss[-1] - rss[2 + half - 1] if rounds > 1 else 0.0, 1),
            "growth_per_call_last_half_kb": round(1024 * (rss[-1] - rss[2 + half - 1]) / max(1, (rounds - half) * calls), 1)
            if rounds > 1 else 0.0,
            "throughput_per_s": round(len(latencies) / busy_s, 3) if busy_s else None,
            "median_s": statistics.median(latencies) if latencies else None,
            "p95_s": sorted(latencies)[int(0.95 * (len(latencies) - 1))] if latencies else None}


def _slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of y over x."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", default="demo", help="demo | a model folder (app.py --model)")
    p.add_argument("--corpus", default="demo")
    p.add_argument("--split", default="test")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=100, help="calls per round, shared by the clients")
    p.add_argument("--serial", type=int, default=20, help="calls from one client first (also encodes the contexts)")
    p.add_argument("--queries", type=int, default=20, help="distinct corpus examples the calls cycle through")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--new-sessions", type=float, default=0.5, help="share of clients opening a new session per call")
    p.add_argument("--settle", type=float, default=12.0,
                   help="seconds to wait after a round before reading RSS (the app trims its heap every 10 s)")
    p.add_argument("--app-env", action="append", default=[], metavar="NAME=VALUE", help="environment of the app")
    p.add_argument("--app-args", default="", help="extra app.py flags, e.g. '--queue-size 0'")
    p.add_argument("--url", default=None, help="an app already running (with --pid): no app is started")
    p.add_argument("--pid", type=int, default=None, help="the process id of the app at --url")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the app to start")
    args = parse(p)

    from app_latency import launch, stop

    from picaso_core.data import load_corpus

    samples = load_corpus(args.corpus, args.split).samples[: args.queries]
    env = dict(kv.split("=", 1) for kv in args.app_env)
    with tempfile.TemporaryDirectory() as tmp:
        proc = log = None
        if args.url:
            url, pid = args.url, args.pid
        else:
            proc, url, _, log = launch(args.model, args.corpus, args.split, Path(tmp), args.timeout, env,
                                       args.app_args.split())
            pid = proc.pid
        try:
            out = soak(url, pid, samples, clients=args.clients, rounds=args.rounds, calls=args.calls,
                       serial=args.serial, k=args.k, new_sessions=args.new_sessions, settle=args.settle)
        finally:
            if proc is not None:
                stop(proc, log)
    print(f"RSS per round (MB): {' -> '.join(f'{x:.0f}' for x in out['rss_mb'])}")
    print(f"growth over the last {out['calls'] - out['calls'] // 2} calls: {out['growth_last_half_mb']:+.1f} MB "
          f"({out['growth_per_call_last_half_kb']:+.1f} kB / call, fitted {out['slope_last_half_kb_per_call']:+.1f}); "
          f"{out['failures']} failed calls; "
          f"latency median {out['median_s'] or 0:.2f} s, p95 {out['p95_s'] or 0:.2f} s, "
          f"{out['throughput_per_s'] or 0:.2f} answered calls / s")
    write_json(args, out, env=env)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()

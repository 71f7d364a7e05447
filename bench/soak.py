"""Soak: many /compose calls from many gradio_client clients against a running `python app.py`,
sampling the server's resident memory (RSS) after every round. Memory that keeps growing while the
same queries repeat is a leak (or allocator retention); a serving app must stay flat.

    python bench/soak.py                                  # demo: 20 serial calls, then 6 rounds of 100 from 20 clients
    python bench/soak.py --rounds 20 --calls 100          # the 2,000-call soak (bound: +50 MB over the last 1,000)
    python bench/soak.py --app-env MALLOC_ARENA_MAX=2     # the app under an environment setting
    python bench/soak.py --clients 5 --rounds 1 --calls 60 --serial 0 --queries 60 --app-args=--encode-all  # load
    python bench/soak.py --url http://127.0.0.1:7860/ --pid 1234   # an app already running
    python bench/soak.py --mix --rounds 20 --calls 100    # every endpoint: the 2,000-call mixed soak
    python bench/soak.py --mix --only compose,attribute --rounds 8 --calls 50   # some endpoints of the mix
    python bench/soak.py --mix --app-env PICASO_MEMORY_DEBUG=1 ...   # also the heap and what grew, per round

--mix: instead of /compose alone, the calls cycle through every model-bound and light endpoint a
visitor reaches (compose, generate_answer, attribute, soup map / retrieve / two-task / decay,
landscape, primer views, a short COFFEE run, tour steps, cache stats) with inputs from a fixed set,
so after the first cycle every cache is warm and what grows is the serving itself. At the end it
prints what each of the app's caches holds (`/cache_stats`'s "memory": picaso_core/light/memory.py).
--only keeps the mix's calls to the endpoints named (finding which endpoint's calls grow).

RSS: the median of --samples readings one second apart, taken --settle seconds after a round (past
the app's 10 s heap trim, so what a heavy call freed is not counted as held). Growth over the last
half of the calls is printed end to end (last reading minus the one before the half) and as a
least-squares slope over the half's readings, both in MB per 1,000 calls. With the app's
PICASO_MEMORY_DEBUG=1, each round also reads glibc's heap (in use / free but kept) and the object
types whose counts grew (picaso_core/light/memory.py).

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


def wait_idle(pid: int, limit: float, window: float = 5.0, quiet: float = 0.5) -> tuple[float, float]:
    """Wait until the process used under `quiet` CPU seconds in `window` seconds (up to `limit` s): the
    app's start schedules one-off work in the background (the tour's build, the store's encoding, the
    landscape default) whose memory is no growth of the serving. Returns (seconds waited, the last
    window's CPU seconds: 0.0 once idle)."""
    fields = lambda: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # noqa: E731
    cpu = lambda: (int(fields()[11]) + int(fields()[12])) / os.sysconf("SC_CLK_TCK")  # noqa: E731
    t0 = time.perf_counter()
    while True:
        c0 = cpu()
        time.sleep(window)
        used = cpu() - c0
        if used < quiet:
            return time.perf_counter() - t0, 0.0
        if time.perf_counter() - t0 >= limit:
            return time.perf_counter() - t0, used


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def compose_calls(samples, k: int, labelled=()) -> list[dict]:
    """The Compose-only soak's calls: one per sample."""
    return [dict(query=s.query, continuation=s.continuation, k=k, example=s.sample_id, api_name="/compose")
            for s in samples]


def endpoint(call: dict) -> str:
    """A call's endpoint without its slash: "compose" for /compose."""
    return call["api_name"].lstrip("/")


def only_calls(calls: list[dict], only: str) -> list[dict]:
    """The calls to the endpoints named in `only` (comma-separated, e.g. "compose,attribute"); all
    where it is empty. An unknown name stops the run (a typo would soak nothing)."""
    names = {n.strip().lstrip("/") for n in only.split(",") if n.strip()}
    if not names:
        return calls
    unknown = names - {endpoint(c) for c in calls}
    if unknown:
        raise SystemExit(f"--only: no such endpoint in the mix: {', '.join(sorted(unknown))} "
                         f"(the mix's: {', '.join(sorted({endpoint(c) for c in calls}))})")
    return [c for c in calls if endpoint(c) in names]


def mix_calls(samples, k: int, labelled=()) -> list[dict]:
    """One cycle of the mixed soak: every endpoint a visitor reaches, weighted roughly as a talk's
    audience clicks (Compose most, then the tour and the light calls), inputs from a fixed set.
    labelled: the samples /attribute takes (QA samples with their contexts and gold ids)."""
    qa = list(labelled) or samples
    out: list[dict] = []
    for i, s in enumerate(samples):
        out.append(dict(query=s.query, continuation=s.continuation, k=k, example=s.sample_id, api_name="/compose"))
        out.append(dict(step=1 + i % 11, api_name="/tour_step"))  # the tour's 11 steps
        if i % 2 == 0:
            out.append(dict(api_name="/cache_stats"))
            out.append(dict(query=s.query, k=3, api_name="/generate_answer"))
        if i % 4 == 0:
            a = qa[(i // 4) % len(qa)]
            out.append(dict(query=a.query, answer="", k=3, example=a.sample_id, methods=["loi", "picaso_r"],
                            ablations=16, api_name="/attribute"))
            out.append(dict(demos=["tree → arbre\nbook → livre\n", "cat → cats\ndog → dogs\n"][i // 4 % 2],
                            layer=2, part="ssm", top=5, api_name="/soup_retrieve"))
            out.append(dict(text=s.query, api_name="/primer_model"))
        if i % 8 == 0:
            out.append(dict(layer=2, part="ssm", method="tsne", dim=2, top=5, api_name="/soup_map"))
            out.append(dict(sample="average", steps=7, pair="u2-u3", view="contour", api_name="/landscape"))
            out.append(dict(task_a="english_french", task_b="singular_plural", prompt="door →",
                            answers="porte\ndoors\nportes", w=0.25 + 0.5 * (i // 8 % 2), api_name="/soup_two_task"))
            out.append(dict(text=s.query, layer=0, head=0, api_name="/primer_attention"))
        if i % 16 == 0:
            out.append(dict(chunk_tokens=100, documents=4, api_name="/soup_decay"))
            out.append(dict(steps=50, seconds=5, api_name="/coffee_train"))
            out.append(dict(steps=50, train="embedding", api_name="/coffee_ih0"))
            out.append(dict(n_samples=2, methods=["loi", "picaso_r"], api_name="/attribution_precision"))
            out.append(dict(samples=1, ks="0,1", methods=["concat", "picaso_r"], api_name="/benchmarks"))
            out.append(dict(queries=1, part="ssm", api_name="/soup_retrieval"))
            out.append(dict(lengths="256, 512", one_thread=True, api_name="/primer_complexity"))
            out.append(dict(magnitude=0.9, phase=20, N=4, T=96, api_name="/primer_lti"))
            out.append(dict(selectivity=0.5 + (i // 16 % 2), api_name="/primer_selective"))
        if i % 40 == 0:  # the slowest view (~50 s of fixed work a call on 2 loaded cores): rarely
            out.append(dict(queries=1, api_name="/soup_mixing"))
            out.append(dict(objective="bptc", steps=2, k_max=2, lr=3e-4, api_name="/finetune"))
            out.append(dict(api_name="/finetune_cancel"))
    return out


def settled_rss(pid: int, settle: float, samples: int) -> float:
    """RSS (MB) `settle` seconds from now: the median of `samples` readings one second apart (one
    reading can land on a heavy call's buffers not yet handed back, or on a background step)."""
    time.sleep(settle)
    got = []
    for i in range(max(1, samples)):
        if i:
            time.sleep(1.0)
        got.append(rss_mb(pid))
    return statistics.median(got)


def growth(rss: list[float], calls: int) -> dict:
    """Growth over the last half of the rounds of `rss` (index 0: start, 1: after the serial pass,
    1 + r: after round r), MB per 1,000 calls: end to end (the last reading minus the one before the
    half) and fitted (least squares over the half's readings and the one before)."""
    rounds = len(rss) - 2
    if rounds < 2:
        return {"end_to_end_mb": 0.0, "fitted_mb_per_1000": 0.0, "calls": 0}
    first = 1 + rounds // 2  # the reading before the last half's first round
    tail = list(range(first, len(rss)))
    n = (len(rss) - 1 - first) * calls
    fitted = _slope([t * calls for t in tail], [rss[t] for t in tail])
    return {"end_to_end_mb": round(rss[-1] - rss[first], 1), "fitted_mb_per_1000": round(1000 * fitted, 1),
            "calls": n, "end_to_end_mb_per_1000": round(1000 * (rss[-1] - rss[first]) / n, 1)}


def soak(url: str, pid: int, samples, *, clients: int, rounds: int, calls: int, serial: int, k: int,
         new_sessions: float, settle: float = 0.0, progress=print, mix: bool = False, labelled=(),
         only: str = "", rss_samples: int = 1) -> dict:
    """A serial pass of `serial` calls, then `rounds` rounds of `calls` calls shared by `clients`
    threads; RSS (MB) after the serial pass and after each round (`settled_rss`: `settle` seconds
    after it, for the app to hand freed pages back, the median of `rss_samples` readings), and every
    call's seconds. mix: the calls of `mix_calls` (every endpoint) instead of /compose alone, only
    those to the endpoints `only` names (`only_calls`); each endpoint's worst seconds are reported."""
    from gradio_client import Client

    ask = only_calls((mix_calls if mix else compose_calls)(samples, k, labelled), only)
    worst: dict[str, float] = {}
    fresh_every_call = set(range(int(round(clients * new_sessions))))
    keep = {i: Client(url, verbose=False) for i in range(clients) if i not in fresh_every_call}
    rss = [rss_mb(pid)]
    one = keep.get(clients - 1) or Client(url, verbose=False)
    for j in range(serial):
        one.predict(**ask[j % len(ask)])
    rss.append(settled_rss(pid, settle, rss_samples))
    heaps = [_debug_line(one, progress)]
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
                call = ask[(r * calls + j) % len(ask)]
                try:
                    client = keep[i] if i in keep else Client(url, verbose=False)
                    client.predict(**call)
                    took = time.perf_counter() - t0
                    latencies.append(took)
                    with lock:
                        worst[call["api_name"]] = max(worst.get(call["api_name"], 0.0), took)
                except Exception as e:  # a refusal ("busy") or a failed handshake: counted, not fatal
                    failures.append(f"{call['api_name']} {type(e).__name__}: {str(e)[:120]}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        took = time.perf_counter() - t0
        busy_s += took
        rss.append(settled_rss(pid, settle, rss_samples))
        progress(f"round {r + 1}/{rounds}: {calls} calls in {took:.1f} s, RSS {rss[-1]:.0f} MB")
        heaps.append(_debug_line(one, progress))
    caches = {}
    try:
        caches = Client(url, verbose=False).predict(api_name="/cache_stats").get("memory", {})
    except Exception as e:  # noqa: BLE001  (an older app without the report)
        progress(f"no cache report: {e}")
    return {"growth": growth(rss, calls), "rss_mb": [round(x, 1) for x in rss], "calls": rounds * calls,
            "serial": serial, "clients": clients, "only": only, "rss_samples": rss_samples, "settle_s": settle,
            "new_session_clients": len(fresh_every_call), "failures": len(failures),
            "failure_kinds": sorted(set(failures))[:5], "heap_mb": heaps,
            "throughput_per_s": round(len(latencies) / busy_s, 3) if busy_s else None,
            "median_s": statistics.median(latencies) if latencies else None, "mix": mix,
            "worst_s": {k: round(v, 2) for k, v in sorted(worst.items())}, "caches": caches,
            "p95_s": sorted(latencies)[int(0.95 * (len(latencies) - 1))] if latencies else None}


def _debug_line(client, progress) -> dict | None:
    """With the app's PICASO_MEMORY_DEBUG: its heap now (printed with the types that grew); else None."""
    try:
        report = client.predict(api_name="/cache_stats").get("memory", {})
    except Exception:  # noqa: BLE001  (a busy refusal: no reading this round)
        return None
    dbg = report.get("~debug")
    if not dbg:
        return None
    d = dbg["detail"]
    sizes = {k: round(v["bytes"] / 2**20, 1) for k, v in report.items() if v.get("bytes")}
    progress(f"  caches {sum(sizes.values()):.0f} MB: {sizes}")
    progress(f"  heap {d['heap']}; RSS {d.get('rss_mb')} MB, after a trim {d.get('rss_mb_after_a_trim')}; "
             f"traced {d.get('traced_mb')} MB; types grew: {', '.join(d['types grew'][:6])}")
    for line in (d.get("buffers") or []) + (d.get("python grew") or []):
        progress(f"    {line}")
    return d["heap"]


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
    p.add_argument("--cache-dir", default=None, help="the app's --cache-dir (default: a fresh temporary folder); "
                   "one where `python -m picaso_core.ui.tour build` ran skips the tour's build at start")
    p.add_argument("--idle-wait", type=float, default=600.0, help="before the first round, wait up to this many "
                   "seconds for the app to go idle (its start's background builds done); 0: do not wait")
    p.add_argument("--url", default=None, help="an app already running (with --pid): no app is started")
    p.add_argument("--pid", type=int, default=None, help="the process id of the app at --url")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the app to start")
    p.add_argument("--mix", action="store_true", help="every endpoint instead of /compose alone (mix_calls)")
    p.add_argument("--only", default="", help="with --mix: only these endpoints, e.g. compose,attribute")
    p.add_argument("--samples", type=int, default=5, help="RSS readings (1 s apart) whose median a round reports")
    args = parse(p)

    from app_latency import launch, stop

    from picaso_core.data import load_corpus

    every = load_corpus(args.corpus, args.split).samples
    samples = every[: args.queries]
    qa = load_corpus(args.corpus, args.split, kind="qa").samples if args.corpus == "demo" else every  # attribution's
    labelled = [s for s in qa if s.gold_ids and s.contexts][: max(1, args.queries // 4)]
    env = dict(kv.split("=", 1) for kv in args.app_env)
    with tempfile.TemporaryDirectory() as tmp:
        proc = log = None
        if args.url:
            url, pid = args.url, args.pid
        else:
            cache = Path(args.cache_dir) if args.cache_dir else Path(tmp)
            cache.mkdir(parents=True, exist_ok=True)
            proc, url, _, log = launch(args.model, args.corpus, args.split, cache, args.timeout, env,
                                       args.app_args.split())
            pid = proc.pid
        try:
            if args.idle_wait:  # the start's one-off work (tour build, store encoding, landscape default) ends first
                waited, busy = wait_idle(pid, args.idle_wait)
                print(f"app idle after {waited:.0f} s" if not busy else
                      f"app still busy after {waited:.0f} s ({busy:.1f} CPU s in the last 5 s): soaking anyway")
            out = soak(url, pid, samples, clients=args.clients, rounds=args.rounds, calls=args.calls,
                       serial=args.serial, k=args.k, new_sessions=args.new_sessions, settle=args.settle,
                       mix=args.mix, labelled=labelled, only=args.only, rss_samples=args.samples)
        finally:
            if proc is not None:
                stop(proc, log)
    print(f"RSS per round (MB): {' -> '.join(f'{x:.0f}' for x in out['rss_mb'])}")
    g = out["growth"]
    print(f"growth over the last {g['calls']} calls: {g['end_to_end_mb']:+.1f} MB end to end "
          f"({g.get('end_to_end_mb_per_1000', 0.0):+.1f} MB per 1,000 calls), fitted {g['fitted_mb_per_1000']:+.1f} MB "
          f"per 1,000 calls; {out['failures']} failed calls; "
          f"latency median {out['median_s'] or 0:.2f} s, p95 {out['p95_s'] or 0:.2f} s, "
          f"{out['throughput_per_s'] or 0:.2f} answered calls / s")
    if out["failure_kinds"]:
        print("failures, e.g.: " + " | ".join(out["failure_kinds"]))
    if args.mix:
        print("worst seconds per endpoint: " + ", ".join(f"{k} {v:.1f}" for k, v in out["worst_s"].items()))
    for name, c in sorted(out["caches"].items(), key=lambda kv: -(kv[1].get("bytes") or 0)):
        if "detail" in c:  # PICASO_MEMORY_DEBUG's entry
            print(f"  debug: heap {c['detail']['heap']}; parts {c['detail']['parts']}")
            continue
        size = "?" if c.get("bytes") is None else f"{c['bytes'] / 2**20:8.1f} MB"
        print(f"  cache {name:<28} {size}   bound: {c['bound']}")
    write_json(args, out, env=env)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()

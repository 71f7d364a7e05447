"""App latency: a cold first start, click-to-results of /compose, and encoding a whole store.

    python bench/app_latency.py                          # the bundled demo model, demo corpus
    python bench/app_latency.py --model /path/to/folder  # any model folder
    python bench/app_latency.py --tiny                   # a random tiny model (no demo model needed)

1. Cold start and clicks: `python app.py` on an EMPTY cache folder (a user's very first start: the
   store starts empty and each context is encoded the first time a request needs it), driven by
   gradio_client on a free port: seconds until it serves; the first `/compose` call (which also
   encodes its k contexts); then wall-clock per call for k contexts of further corpus queries.
   Targets: under 3 s for k = 5 on the demo model on CPU; at most 0.5 s for a warm click.
2. Store build: encode every context of the corpus into a fresh folder, batched (what
   `app.py --encode-all` does), as contexts / s and tokens / s; the retriever's embedding time
   without the embeddings the demo ships (what a corpus without them pays once); reopening.
3. Concurrency (--concurrency 1,2,4): for each size of the model pool (app.py --workers), a fresh
   app; the same 10 /compose calls (10 corpus queries, k contexts) one after another, then from 10
   clients at once: wall time of each and their ratio, and the wait of a light call (k=1, nothing
   generated) sent while the 10 heavy ones are queued. Run in one process, side by side; the ratios
   are what to quote on a shared machine.
Prints a table and writes JSON to bench/out/app_latency.json (--out), and to --json.

    python bench/app_latency.py --concurrency 1,2,4 --skip-build    # only the concurrency comparison
    python bench/app_latency.py --compose-only --calls 10           # only the clicks (target <= 0.5 s)
    python bench/app_latency.py --compose-only --warm --calls 12    # clicks on stored contexts once the app is idle, then repeated (cached)
    python bench/app_latency.py --device cuda                       # the app on a GPU (PICASO_DEVICE)
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, comma_list, parse, parser, write_json  # noqa: E402

from picaso_core.light.defaults import count, number  # noqa: E402


def make_tiny_model(folder: Path) -> Path:
    """A random 2-layer Mamba-2 with the demo tokenizer, saved where load_model reads it."""
    import torch

    from picaso_core import ModelConfig, SSMLanguageModel
    from picaso_core.engine.loading import save_model
    from picaso_core.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_file(ROOT / "assets" / "tokenizer.json")
    torch.manual_seed(0)
    model = SSMLanguageModel(ModelConfig(d_model=64, n_layer=2, vocab_size=tok.vocab_size,
                                         ssm_cfg=dict(layer="Mamba2", d_state=16, headdim=16, chunk_size=32)))
    model.tokenizer = tok
    save_model(model, folder)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(model_name: str, corpus: str, split: str, cache: Path, timeout: float, env: dict | None = None,
           extra: list[str] = ()):
    """Start app.py on a free port (extra: more app.py flags); returns (process, url, seconds until
    it served, log file)."""
    from gradio_client import Client

    port = free_port()
    log = open(cache / "app.log", "w")
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "--model", model_name, "--corpus", corpus, "--split", split,
         "--cache-dir", str(cache), "--port", str(port), *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )
    url = f"http://127.0.0.1:{port}/"
    while True:
        if proc.poll() is not None or time.perf_counter() - t > timeout:
            stop(proc, log)
            raise RuntimeError(f"app did not start:\n{(cache / 'app.log').read_text()[-2000:]}")
        try:
            Client(url, verbose=False)
            return proc, url, time.perf_counter() - t, log
        except Exception:
            time.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_idle(pid: int, below: float = 0.1, window: float = 2.0, timeout: float = 300.0) -> float:
    """Wait until the process `pid` uses less than `below` of one core over `window` seconds (its
    start-up work in the background done: the tour's build, the example's warm-up); returns seconds
    waited. A warm click is timed on an app that is doing nothing else."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        before = cpu_seconds(pid)
        time.sleep(window)
        if (cpu_seconds(pid) - before) / window < below:
            break
    return time.perf_counter() - t0


def stop(proc, log) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def bench_concurrency(model_name: str, corpus: str, split: str, cache: Path, k: int, limit: int, clients: int,
                      timeout: float) -> dict:
    """The same `clients` /compose calls in series and from `clients` clients at once, with the
    compose event's concurrency limit set to `limit`; and a light call's wait behind them."""
    import threading

    from gradio_client import Client

    from picaso_core.data import load_corpus

    samples = load_corpus(corpus, split).samples[:clients]
    proc, url, _, log = launch(model_name, corpus, split, cache, timeout, {"PICASO_WORKERS": str(limit), "PICASO_QUEUE_SIZE": "0"})
    try:
        pool = [Client(url, verbose=False) for _ in range(clients + 1)]
        ask = [dict(query=s.query, continuation=s.continuation, k=k, example=s.sample_id, api_name="/compose")
               for s in samples]
        for a in ask:  # warm-up: encodes every context these calls use, so both runs below only read states
            pool[0].predict(**a)
        t = time.perf_counter()
        serial = [pool[0].predict(**a)[6] for a in ask]
        serial_s = time.perf_counter() - t

        def at_once(light: bool) -> tuple[float, list, float | None]:
            out: list = [None] * clients
            took: list = [None] * clients
            go = threading.Barrier(clients + 1)

            def call(i: int) -> None:
                go.wait()
                t0 = time.perf_counter()
                out[i] = pool[i].predict(**ask[i])[6]
                took[i] = time.perf_counter() - t0

            threads = [threading.Thread(target=call, args=(i,)) for i in range(clients)]
            for th in threads:
                th.start()
            go.wait()
            t0 = time.perf_counter()
            light_s = None
            if light:  # a light request arriving just after the heavy ones
                time.sleep(0.2)
                t1 = time.perf_counter()
                pool[clients].predict(query=samples[0].query, k=1, max_new_tokens=0, api_name="/compose")
                light_s = time.perf_counter() - t1
            for th in threads:
                th.join()
            return time.perf_counter() - t0, out, light_s

        concurrent_s, together, _ = at_once(light=False)
        _, _, light_s = at_once(light=True)
        same = all(a["methods"][m]["loss"] == b["methods"][m]["loss"] and a["query"] == b["query"]
                   for a, b in zip(serial, together) for m in a["methods"])
        return {"limit": limit, "clients": clients, "k": k, "serial_s": serial_s, "concurrent_s": concurrent_s,
                "ratio": concurrent_s / serial_s, "light_call_s": light_s, "answers_match_serial": same}
    finally:
        stop(proc, log)


def bench_build(model_name: str, corpus: str, split: str, cache: Path, device: str = "cpu") -> dict:
    from picaso_core.data import load_corpus
    from picaso_core.engine.loading import load_model
    from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder, embeddings_path
    from picaso_core.store.store import StateStore
    from picaso_core.session import CONTEXT_SUFFIX, store_folder

    model = load_model(model_name, device=device)
    model.name_or_path = model_name
    db = load_corpus(corpus, split).database
    folder = store_folder(cache, corpus, split, model.fingerprint())
    t = time.perf_counter()
    store = StateStore.build(model, db.items(), folder, suffix=CONTEXT_SUFFIX, progress=False)
    build_s = time.perf_counter() - t
    tokens = sum(store.num_tokens(c) for c in store.ids)
    embedder = SentenceEmbedder()
    t = time.perf_counter()
    Retriever.cached(db, embedder, embeddings_path(folder, embedder.name))  # no shipped seeds: all embedded
    embed_s = time.perf_counter() - t
    t = time.perf_counter()
    StateStore.open(folder, model).get_many(store.ids[:5])
    reopen_s = time.perf_counter() - t
    return {"contexts": len(store), "tokens": tokens, "build_s": build_s, "contexts_per_s": len(store) / build_s,
            "tokens_per_s": tokens / build_s, "store_mib": store.nbytes / 2**20, "embed_s": embed_s,
            "reopen_and_load_5_s": reopen_s}


def bench_compose(model_name: str, corpus: str, split: str, cache: Path, k: int, calls: int, timeout: float,
                  warm: bool = False) -> dict:
    from gradio_client import Client

    from picaso_core.data import load_corpus

    samples = [s for s in load_corpus(corpus, split).samples][: calls + 1]
    proc, url, startup_s, log = launch(model_name, corpus, split, cache, timeout, extra=["--encode-all"] if warm else [])
    try:
        client = Client(url, verbose=False)
        idle_after_s = wait_until_idle(proc.pid) if warm else 0.0
        times = []
        for s in samples:
            t0 = time.perf_counter()
            out = client.predict(query=s.query, continuation=s.continuation, k=k, example=s.sample_id,
                                 api_name="/compose")
            times.append(time.perf_counter() - t0)
        warmup, times = times[0], times[1:]  # the first call also encodes its contexts, first forwards
        methods = [row[0] for row in out[2]["data"]]
        repeat = []  # the same clicks again: served from the scored-run cache
        for s in samples[1:]:
            t0 = time.perf_counter()
            client.predict(query=s.query, continuation=s.continuation, k=k, example=s.sample_id, api_name="/compose")
            repeat.append(time.perf_counter() - t0)
        stats = client.predict(api_name="/cache_stats")
        return {"k": k, "calls": len(times), "startup_s": startup_s, "idle_after_s": idle_after_s, "warmup_s": warmup,
                "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "methods": methods,
                "times_s": [round(t, 4) for t in times], "repeat_s": [round(t, 4) for t in repeat],
                "cached_median_s": statistics.median(repeat), "cached_max_s": max(repeat),
                "cache_hit_rate": stats["hit_rate"], "results_hit_rate": stats["results"]["hit_rate"]}
    finally:
        stop(proc, log)


def main() -> None:
    p = parser(__doc__, device="cpu", devices=None,
               helps={"device": "cpu | cuda: where the app and the store build run",
                      "threads": "torch threads of this process: the store build of part 2 (default: torch's)"})
    p.add_argument("--model", default="demo", help="demo | a model folder")
    p.add_argument("--tiny", action="store_true", help="bench a random tiny model instead of --model")
    p.add_argument("--corpus", default="demo")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=count(1), default=5)
    p.add_argument("--calls", type=count(1), default=5, help="timed /compose calls (after one warm-up)")
    p.add_argument("--timeout", type=number(above=0), default=300, help="seconds to wait for the app to start")
    p.add_argument("--concurrency", type=comma_list(count(1), empty=True), default="",
                   help="comma-separated concurrency limits to compare, e.g. 1,2,4")
    p.add_argument("--clients", type=count(1), default=10, help="simultaneous clients for --concurrency")
    p.add_argument("--skip-build", action="store_true", help="skip the cold start and store build (parts 1-2)")
    p.add_argument("--compose-only", action="store_true", help="only part 1 (start and /compose clicks)")
    p.add_argument("--warm", action="store_true", help="part 1 with every context stored first (app.py --encode-all): "
                   "the clicks compose and score, nothing is encoded; the start-up then includes the encoding")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "app_latency.json"))
    args = parse(p)
    os.environ["PICASO_DEVICE"] = args.device  # app.py's --device default; launch() passes the environment

    conc = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = str(make_tiny_model(tmp / "tiny_model")) if args.tiny else args.model
        if not args.skip_build:
            (tmp / "cold").mkdir()
            compose = bench_compose(model, args.corpus, args.split, tmp / "cold", args.k, args.calls, args.timeout,
                                    args.warm)
            build = None if args.compose_only else bench_build(model, args.corpus, args.split, tmp / "build",
                                                               args.device)
        for limit in [int(x) for x in args.concurrency.split(",") if x]:
            (tmp / f"conc{limit}").mkdir()
            conc.append(bench_concurrency(model, args.corpus, args.split, tmp / f"conc{limit}", args.k, limit,
                                          args.clients, args.timeout))
    import torch

    result = {"model": "tiny (random)" if args.tiny else args.model, "corpus": f"{args.corpus}/{args.split}",
              "torch_threads": torch.get_num_threads(), "device": args.device, "concurrency": conc}
    gpu = f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""
    print(f"model {result['model']} · corpus {result['corpus']} · {args.device}{gpu} · {result['torch_threads']} torch threads")
    for c in conc:
        print(f"concurrency {c['limit']}: {c['clients']} /compose calls (k={c['k']}) in series {c['serial_s']:.1f} s, "
              f"from {c['clients']} clients at once {c['concurrent_s']:.1f} s (x{c['ratio']:.2f}); a light call sent "
              f"behind them answers in {c['light_call_s']:.1f} s; answers equal the serial ones: {c['answers_match_serial']}")
    if args.skip_build:
        return save(args, result)
    result.update(build=build, compose=compose)
    print(f"cold start    {compose['startup_s']:.1f} s until the app serves (empty cache)   "
          f"first call {compose['warmup_s']:.2f} s (encodes its {args.k} contexts)")
    if compose.get("idle_after_s"):
        print(f"              clicks timed once the app was idle, {compose['idle_after_s']:.0f} s after it served")
    print(f"/compose k={args.k}  median {compose['median_s']:.2f} s  (min {compose['min_s']:.2f}, max {compose['max_s']:.2f}, "
          f"{compose['calls']} calls; targets < 3 s and <= 0.5 s)   methods: {', '.join(compose['methods'])}")
    print(f"the same clicks again (scored-run cache)  median {compose['cached_median_s']:.3f} s  "
          f"(max {compose['cached_max_s']:.3f}; target <= 0.1 s)")
    if build is None:
        return save(args, result)
    print(f"encode all    {build['contexts']} contexts, {build['tokens']} tokens in {build['build_s']:.2f} s: "
          f"{build['contexts_per_s']:.0f} contexts/s, {build['tokens_per_s']:.0f} tokens/s, {build['store_mib']:.1f} MiB")
    print(f"embeddings    {build['embed_s']:.2f} s to embed all contexts (MiniLM; the demo ships them)   "
          f"reopen + load 5 states {build['reopen_and_load_5_s']:.3f} s")
    save(args, result)


def save(args, result: dict) -> None:
    """The results to --out, and to --json with the ratios (concurrent / serial, per limit)."""
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    write_json(args, result, {f"concurrency {c['limit']}: concurrent / serial": c["ratio"] for c in result["concurrency"]})


if __name__ == "__main__":
    main()

"""The store build beyond one process: local vs Ray, disk and loss per dtype, a sizing table.

    python bench/store_scaleout.py                      # all three parts, the demo model and corpus
    python bench/store_scaleout.py --parts speed --contexts 200
    python bench/store_scaleout.py --parts dtype,sizing --samples 200 --threads 1

1. speed: `build_store` of the same contexts into fresh folders with the local engine (this
   process, torch's threads) and the Ray engine (`--workers` actors of one CPU each on a local
   Ray runtime), side by side in one run; contexts/s, with Ray's start-up (runtime, then the
   actors loading the model) counted in its time and also shown apart. Run on a GPU machine, Ray
   gives each actor a GPU and the local engine uses `--device`.
2. dtype: the demo store built in float32, float16 and bfloat16 (local engine): disk per dtype
   and encode time, then every method's mean continuation loss on the demo's held-out samples
   (all their contexts, states read from each store) and its relative change vs float32
   (target: at most 0.5%); and the time to read every state of each store from a fresh open,
   cold (page cache dropped) and warm: does half the bytes make loading twice as fast?
3. sizing: disk and encode time of a store for the mamba2-130m / 370m / 2.7b shapes, computed from
   their configs (state bytes per dtype) and a throughput in tokens/s (--gpu-tokens-per-s, the
   2.7b figure measured on an H100 in bf16, scaled by parameter count for the smaller shapes:
   an estimate, small models reach less of the GPU).
Prints markdown tables and writes bench/out/store_scaleout-<parts>.json.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, comma_list, parse, parser, table, write_json  # noqa: E402

from picaso_core import ModelConfig  # noqa: E402
from picaso_core.light.defaults import count, number  # noqa: E402

# The store (DTYPES, StateStore, build_store) imports torch: the functions below import it where they
# run, after the arguments are read (--help and a bad value answer at once, issue 48).
PARTS = ("speed", "dtype", "sizing")

# (name, d_model, n_layer, parameters) of the released checkpoints
SHAPES = [("mamba2-130m", 768, 24, 130e6), ("mamba2-370m", 1024, 48, 370e6), ("mamba2-2.7b", 2560, 64, 2.7e9)]


def state_bytes(cfg: ModelConfig, dtype: str) -> int:
    """Bytes of one stored state: ssm and conv in `dtype`, log_decay in float32."""
    from picaso_core.store.store import DTYPES

    shapes = cfg.state_shapes()
    size = DTYPES[dtype].itemsize
    return size * (math.prod(shapes["ssm"]) + math.prod(shapes["conv"])) + 4 * math.prod(shapes["log_decay"])


def part_speed(model, contexts, workers: int, tmp: Path, local_threads: list[int]) -> dict:
    import ray
    import torch

    from picaso_core.store.build import build_store
    from picaso_core.store.store import StateStore

    out = {"local_by_threads": {}}
    default = torch.get_num_threads()
    for i, threads in enumerate(local_threads):  # the first count is the one compared below
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        local = build_store(model, contexts, tmp / f"local{i}", progress=False)
        out["local_by_threads"][threads] = time.perf_counter() - t0
    torch.set_num_threads(default)
    out["local_s"] = out["local_by_threads"][local_threads[0]]
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    out["ray_init_s"] = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        build_store(model, contexts, tmp / "ray", engine="ray", workers=workers, progress=False)
        out["ray_s"] = time.perf_counter() - t0
        # the actors' start-up alone: the same build of one context per worker into a new folder
        t0 = time.perf_counter()
        build_store(model, contexts[:workers], tmp / "ray_startup", engine="ray", workers=workers, shard_size=1,
                    progress=False)
        out["ray_actor_startup_s"] = time.perf_counter() - t0
    finally:
        ray.shutdown()
    # the first local build again: how much the machine's load drifted during the run
    torch.set_num_threads(local_threads[0])
    t0 = time.perf_counter()
    build_store(model, contexts, tmp / "local_again", progress=False)
    out["local_again_s"] = time.perf_counter() - t0
    torch.set_num_threads(default)
    a, b = StateStore.open(tmp / "local0", model), StateStore.open(tmp / "ray", model)
    assert a.ids == b.ids
    out["max_abs_diff"] = max(float((a.get(c).ssm - b.get(c).ssm).abs().max()) for c in a.ids)
    n = len(contexts)
    out.update(contexts=n, workers=workers, local_threads=local_threads[0], local_ctx_s=n / out["local_s"], ray_ctx_s=n / out["ray_s"],
               ray_ctx_s_without_startup=n / max(1e-9, out["ray_s"] - out["ray_actor_startup_s"]),
               local_shards=local["shards"])
    return out


def part_dtype(model, corpus, contexts, samples: int, tmp: Path, repeats: int = 3) -> dict:
    from picaso_core.analysis.evaluate import METHODS, METHOD_NAMES, run_methods
    from picaso_core.store.build import build_store
    from picaso_core.store.store import DTYPES, StateStore

    stores, rows = {}, {}
    chosen = corpus.samples[:samples]
    have = dict(contexts)
    for s in chosen:  # plus the contexts the chosen samples use
        for c, t in s.contexts:
            have.setdefault(c, t)
    contexts = list(have.items())
    for dtype in DTYPES:
        t0 = time.perf_counter()
        build_store(model, contexts, tmp / dtype, dtype=dtype, progress=False)
        secs = time.perf_counter() - t0
        stores[dtype] = StateStore.open(tmp / dtype, model)
        rows[dtype] = {"nbytes": stores[dtype].nbytes, "encode_s": secs, "contexts": len(contexts)}
    read = read_times(model, tmp, repeats)
    for dtype in DTYPES:
        rows[dtype]["read_s"] = read[dtype]
    tok = model.tokenizer
    losses = {d: {m: [] for m in METHODS} for d in DTYPES}
    t_loss = time.perf_counter()
    for s in chosen:
        ids = [cid for cid, _ in s.contexts]
        for dtype, store in stores.items():
            res = run_methods(model, tok.encode(s.query), tok.encode(s.continuation),
                              [store.token_ids(c) for c in ids], store.get_many(ids), METHODS)
            for r in res:
                losses[dtype][r.method].append(r.loss)
    for dtype in DTYPES:
        mean = {m: statistics.fmean(v) for m, v in losses[dtype].items()}
        ref = {m: statistics.fmean(v) for m, v in losses["float32"].items()}
        rows[dtype]["loss"] = mean
        rows[dtype]["rel_change"] = {m: (mean[m] - ref[m]) / ref[m] for m in METHODS}
        # the largest change on any one sample, relative to that sample's float32 loss
        rows[dtype]["max_sample_rel_change"] = {
            m: max(abs(x - y) / y for x, y in zip(losses[dtype][m], losses["float32"][m])) for m in METHODS}
    return {"samples": len(chosen), "names": METHOD_NAMES, "dtypes": rows, "loss_s": time.perf_counter() - t_loss}


def drop_page_cache(folder: Path) -> None:
    """Evict the store's files from the OS page cache (posix_fadvise DONTNEED, no root needed):
    the next read comes from the disk, as on a fresh node. Files are fsync'ed first, since only
    clean pages can be dropped."""
    for path in folder.iterdir():
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def read_times(model, tmp: Path, repeats: int) -> dict:
    """Seconds to read every state of each dtype's store: a fresh `StateStore.open` with the LRU
    cache off (cache_bytes=0), then `get_many(all ids)` (float32 states out, whatever is on disk).
    cold: page cache dropped first, sha256 checked (the default open: what a fresh node pays);
    cold_noverify: the same with verify=False; warm: files in the page cache, verify=False (just
    safetensors' copy and the cast to float32). Dtypes alternate within each repeat; medians."""
    import torch

    from picaso_core.store.store import DTYPES, StateStore

    kinds = {"cold": (True, True), "cold_noverify": (True, False), "warm": (False, False)}
    times = {d: {k: [] for k in kinds} for d in DTYPES}
    for r in range(repeats):
        for kind, (cold, verify) in kinds.items():
            order = list(DTYPES)[r % 3:] + list(DTYPES)[: r % 3]  # no dtype always first
            for dtype in order:
                if cold:
                    drop_page_cache(tmp / dtype)
                store = StateStore.open(tmp / dtype, model, cache_bytes=0, verify=verify)
                t0 = time.perf_counter()
                states = store.get_many(store.ids)
                times[dtype][kind].append(time.perf_counter() - t0)
                assert len(states) == len(store.ids) and states[0].ssm.dtype == torch.float32
                del states, store
    return {d: {k: statistics.median(v) for k, v in ts.items()} | {"all": ts} for d, ts in times.items()}


def part_sizing(demo_cfg, demo_rows: dict | None, gpu_tps: float, n_contexts: list[int], tokens: int) -> list[dict]:
    rows = []
    for name, d_model, n_layer, params in SHAPES:
        cfg = ModelConfig(d_model=d_model, n_layer=n_layer, vocab_size=50277, pad_vocab_size_multiple=16,
                          ssm_cfg=dict(layer="Mamba2"))
        tps = gpu_tps * SHAPES[-1][3] / params  # by FLOPs (2 x params per token) from the 2.7b figure
        for dtype in ("float32", "bfloat16"):
            for n in n_contexts:
                rows.append({"model": name, "dtype": dtype, "contexts": n, "state_mib": state_bytes(cfg, dtype) / 2**20,
                             "disk_gib": n * state_bytes(cfg, dtype) / 2**30,
                             "gpu_min": n * tokens / tps / 60, "source": "computed"})
    if demo_rows:
        for dtype, r in reversed(demo_rows.items()):
            rows.insert(0, {"model": "demo", "dtype": dtype, "contexts": r["contexts"],
                            "state_mib": state_bytes(demo_cfg, dtype) / 2**20, "disk_gib": r["nbytes"] / 2**30,
                            "cpu_s": r["encode_s"], "source": "measured"})
    return rows


def main() -> None:
    p = parser(__doc__, device=None, devices=None,
               helps={"threads": "torch threads outside the speed part (default: torch's; 1 is faster on busy shared "
                                 "cores)", "device": "where the model runs (default: load_model's choice)"})
    p.add_argument("--model", default="demo")
    p.add_argument("--parts", type=comma_list(choices=PARTS), default="speed,dtype,sizing")
    p.add_argument("--contexts", type=count(1), default=None, help="first N contexts of the demo test database (all)")
    p.add_argument("--speed-contexts", type=count(1), default=None, help="the speed part's first N of those (all)")
    p.add_argument("--workers", type=count(1), default=2)
    p.add_argument("--local-threads", type=comma_list(count(1)), default="1,2",
                   help="torch threads of the local builds (the first is compared)")
    p.add_argument("--samples", type=count(1), default=200, help="held-out samples for the loss per dtype")
    p.add_argument("--read-repeats", type=count(1), default=3, help="timed reads of each store per kind (median)")
    p.add_argument("--gpu-tokens-per-s", type=number(above=0), default=27e3,
                   help="mamba2-2.7b bf16 on an H100, measured")
    p.add_argument("--tokens", type=count(1), default=1024, help="tokens per context in the sizing table")
    args = parse(p)
    import torch

    from picaso_core.data import load_corpus
    from picaso_core.engine.loading import load_model

    model = load_model(args.model, device=args.device)
    model.name_or_path = args.model
    corpus = load_corpus("demo", "test")
    contexts = list(corpus.database.items())[: args.contexts]
    parts = set(args.parts.split(","))
    result = {"threads": torch.get_num_threads(), "cpus": os.cpu_count(), "device": str(model.device)}
    ratios = {}
    tmp = Path(tempfile.mkdtemp(prefix="store_scaleout-"))
    try:
        if "speed" in parts:
            r = result["speed"] = part_speed(model, contexts[: args.speed_contexts], args.workers, tmp / "speed",
                                                 [int(t) for t in args.local_threads.split(",")])
            print(f"\n## speed: {r['contexts']} contexts, {result['cpus']} CPUs, local {r['local_threads']} threads vs "
                  f"Ray {r['workers']} actors x 1 CPU\n")
            engines = {**{f"local, {t} torch threads": secs for t, secs in r["local_by_threads"].items()},
                       f"Ray, {r['workers']} workers (incl. actor start-up)": r["ray_s"],
                       f"local, {r['local_threads']} torch threads, again after Ray": r["local_again_s"],
                       f"Ray, minus the actors' start-up ({r['ray_actor_startup_s']:.1f} s)":
                           r["ray_s"] - r["ray_actor_startup_s"]}
            ratios["speed_local_over"] = {k: r["local_s"] / secs for k, secs in engines.items()}
            print(table([[k, f"{secs:.1f}", f"{r['contexts'] / secs:.1f}", f"{r['local_s'] / secs:.2f}x"]
                         for k, secs in engines.items()], ["engine", "seconds", "contexts/s", "vs local"]))
            print(f"\nRay runtime start {r['ray_init_s']:.1f} s (not counted); states local vs Ray: max |diff| "
                  f"{r['max_abs_diff']:.1e}")
        if "dtype" in parts:
            r = result["dtype"] = part_dtype(model, corpus, contexts, args.samples, tmp / "dtype", args.read_repeats)
            names = r["names"]
            print(f"\n## dtype: {r['dtypes']['float32']['contexts']} contexts; loss on {r['samples']} held-out samples, all their contexts\n")
            f32 = r["dtypes"]["float32"]["nbytes"]
            print(table([[dtype, f"{row['nbytes'] / 2**20:.1f} MiB", f"{row['nbytes'] / f32:.3f}", f"{row['encode_s']:.1f}",
                          *(f"{row['loss'][m]:.4f}" if dtype == "float32" else f"{100 * row['rel_change'][m]:+.3f}%"
                            for m in names)] for dtype, row in r["dtypes"].items()],
                        ["dtype", "disk", "vs float32", "encode + write (s)", *names.values()]))
            print(f"\n(loss pass: {r['loss_s']:.0f} s for the three dtypes)\n\nread every state, fresh open, "
                  f"LRU cache off (median of {args.read_repeats}):\n")
            f32r = r["dtypes"]["float32"]["read_s"]
            kinds = ("cold", "cold_noverify", "warm")
            ratios["read_over_float32"] = {d: {k: row["read_s"][k] / f32r[k] for k in kinds} for d, row in r["dtypes"].items()}
            print(table([[dtype, *(x for k in kinds for x in (f"{row['read_s'][k]:.2f} s",
                                                               f"{ratios['read_over_float32'][dtype][k]:.2f}"))]
                         for dtype, row in r["dtypes"].items()],
                        ["dtype", "cold, sha256 checked", "vs float32", "cold, no check", "vs float32",
                         "warm page cache, no check", "vs float32"]))
            ratios["loss_rel_change"] = {d: row["rel_change"] for d, row in r["dtypes"].items()}
            worst = {d: max(abs(v) for v in row["rel_change"].values()) for d, row in r["dtypes"].items()}
            print("\nlargest |relative change| of a method's mean loss: "
                  + ", ".join(f"{d} {100 * w:.3f}%" for d, w in worst.items() if d != "float32"))
        if "sizing" in parts:
            demo_rows = result.get("dtype", {}).get("dtypes")
            rows = result["sizing"] = part_sizing(model.config, demo_rows, args.gpu_tokens_per_s, [1000, 36000],
                                                  args.tokens)
            print(f"\n## sizing ({args.tokens} tokens per context for the computed rows)\n")
            print(table([[x["model"], x["dtype"], f"{x['contexts']:,}", f"{x['state_mib']:.2f} MiB",
                          f"{x['disk_gib'] * 1024:.0f} MiB" if x["disk_gib"] < 1 else f"{x['disk_gib']:.1f} GiB",
                          f"{x['cpu_s']:.0f} s (CPU)" if "cpu_s" in x else f"{x['gpu_min']:.1f} GPU-min (H100, est.)",
                          x["source"]] for x in rows],
                        ["model", "dtype", "contexts", "state", "disk", "encode time", ""]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = ROOT / "bench" / "out" / f"store_scaleout-{args.parts.replace(',', '-')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out}")
    write_json(args, result, ratios)


if __name__ == "__main__":
    main()

"""Decode speed: generating from 7 states one after another vs all at once, and the cost of one
decode step vs the length of what came before. Side by side in one run.

    python bench/decode_speed.py --shape demo                 # the bundled demo model, its 7 methods' states
    python bench/decode_speed.py --shape mamba2-130m          # random weights, 7 random context states
    python bench/decode_speed.py --shape mamba2-370m --device cuda --dtype bfloat16

1. Rows x tokens (default 7 x 24, greedy, EOS ignored so every row makes the same number of tokens):
   - scan/token: per-state scan decode: per state, a prefill, then one forward through the
     chunked scan per token (no recurrent step);
   - sequential `generate`: per state, a prefill and recurrent `step`s (the one-row case);
   - `generate_batch`: one batched prefill and batched steps for all rows; and the same with the
     CPU state update unblocked (one pass over the whole layer's state per op, no
     scan.STATE_BLOCK_BYTES blocks), to measure the blocking side by side.
   Ratios against `generate_batch`. Targets on 2 CPU cores: >= 4x (demo), >= 3x (130m shape).
2. ms per step vs prompt length (16, 256, 1024, 4096 tokens read before): the batched recurrent
   step and the scan path's one-token forward, each from a state of that length; an SSM's decode
   is O(1), so the ratio 4096 / 16 should be ~1 (target <= 1.3).
3. Memory of the decode: the buffers it allocates once (state, token table), the per-step
   activations (fixed, they do not grow with the tokens), and the measured peak: on CPU the
   resident-memory high-water mark of one generate_batch in a fresh process at --tokens and
   4 x --tokens new tokens (it must not grow with the tokens), on CUDA the allocator's peak.
On CUDA each figure is also printed against the memory-bandwidth floor (bench/harness.py): a step
must read every weight once, and the state.
Figures are medians of interleaved repeats (a shared machine hits all competitors alike).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (SHAPES, comma_list, interleaved, limits, medians, no_grad, parse, parser, ratios,  # noqa: E402
                     shape_model, table, vs_limit, write_json)

from picaso_core.light.defaults import DTYPES, count  # noqa: E402


def _import_engine() -> None:
    """torch and the engine as this module's names, once the arguments are read: at the top of the
    module they made --help and a bad value take seconds (issue 48)."""
    global torch, ContextState, load_model, scan, layer_major, upcast
    import torch

    from picaso_core import ContextState, load_model
    from picaso_core.engine import scan
    from picaso_core.engine.scan import upcast
    from picaso_core.engine.state import layer_major


def make_model(shape: str, device: str, dtype: torch.dtype):
    """The model alone (no forward): the demo, or random weights of a released shape."""
    if shape == "demo":
        return load_model("demo").to(device=device, dtype=dtype).eval()
    return shape_model(shape, device, dtype)


def build(shape: str, device: str, dtype: torch.dtype, rows: int):
    """(model, prompt ids, `rows` states). demo: the 7 methods' states of the first held-out sample."""
    model = make_model(shape, device, dtype)
    if shape == "demo":
        from picaso_core.data import load_corpus
        from picaso_core.analysis.evaluate import METHODS
        from picaso_core.compose import build_state

        s = load_corpus("demo", "test").samples[0]
        tok = model.tokenizer
        ctx = [tok.encode(t) for _, t in s.contexts]
        store = model.encode_contexts(ctx)
        states = [build_state(model, m, ctx, store) for m in METHODS]
        return model, tok.encode(s.query), (states * rows)[:rows]
    g = torch.Generator().manual_seed(1)
    ctx = [torch.randint(0, 50277, (60 + 20 * i,), generator=g).tolist() for i in range(rows)]
    return model, torch.randint(0, 50277, (16,), generator=g).tolist(), model.encode_contexts(ctx)


def _proc_kib(field: str) -> int:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))


def peak_child(path: str) -> None:
    """In a fresh process: the model and the saved states, then the resident-memory high-water mark
    during one generate_batch (Linux: VmHWM, reset through /proc/self/clear_refs just before)."""
    job = torch.load(path, weights_only=False)
    torch.set_num_threads(job["threads"])
    model = make_model(job["shape"], "cpu", getattr(torch, job["dtype"]))
    states = [s.to(model.device) for s in job["states"]]
    rss0 = _proc_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # VmHWM := VmRSS
        f.write("5")
    model.generate_batch(job["prompt"], states, job["tokens"], stop_at_eos=False)
    print(json.dumps({"rss_before_kib": rss0, "peak_kib": _proc_kib("VmHWM")}))


def cpu_peaks(args, prompt, states, tokens: tuple[int, ...]) -> dict[int, dict]:
    """`peak_child` for each token budget, each in its own fresh process (so no earlier section's
    peak or cached allocation hides the decode's)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in tokens:
            path = str(Path(tmp) / "job.pt")
            torch.save({"shape": args.shape, "dtype": args.dtype, "prompt": prompt, "tokens": n,
                        "threads": torch.get_num_threads(), "states": [s.to("cpu") for s in states]}, path)
            r = subprocess.run([sys.executable, __file__, "--peak-child", path], capture_output=True, text=True,
                               check=True, env=os.environ | {"HF_HUB_OFFLINE": "1"})
            out[n] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


@no_grad
def scan_generate(model, prompt, state, n: int, eos: int | None = None) -> list[int]:
    """Per-state scan decode: a forward through the chunked scan for every token (no recurrent step)."""
    hidden, st = model.hidden_states(torch.tensor([prompt]), state)
    out = []
    for _ in range(n):
        nxt = int(upcast(model.lm_head(hidden[0, -1]))[0][: model.config.vocab_size].argmax())
        if nxt == eos:
            break
        out.append(nxt)
        if len(out) < n:
            hidden, st = model.hidden_states(torch.tensor([[nxt]]), st)
    return out


def unblocked(fn):
    """fn with scan.state_update's CPU path in one block per layer (scale, accumulate and C h each a
    pass over the whole layer's batched state)."""
    def run():
        before, scan.STATE_BLOCK_BYTES = scan.STATE_BLOCK_BYTES, 1 << 62
        try:
            return fn()
        finally:
            scan.STATE_BLOCK_BYTES = before
    return run


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def click(model, args) -> None:
    """The Compose & compare click in-process (run_methods: 7 methods, k = 5, --tokens each, EOS
    stops) with `score_and_generate` (generation batched) and with per-method scan decode swapped in
    (scoring, then one method at a time, a scan forward per token). The app's click adds retrieval
    and the UI."""
    from picaso_core.data import load_corpus
    from picaso_core.analysis.evaluate import run_methods

    s = load_corpus("demo", "test").samples[1]
    tok = model.tokenizer
    ctx = [tok.encode(t + "\n\n") for _, t in s.contexts[-5:]]
    store = model.encode_contexts(ctx)
    q, c = tok.encode(s.query), tok.encode(s.continuation)

    def per_method_scan():  # run_methods with a scoring forward, then one method at a time, scan/token
        import picaso_core.engine.decode as decode

        def scan_score_and_generate(model, p, cont, states, max_new_tokens, timings=None, **kw):
            t0 = time.perf_counter()
            losses = model.continuation_losses(p, cont, states)
            t1 = time.perf_counter()
            gens = [scan_generate(model, p, st, max_new_tokens, tok.eos_id) for st in states]
            timings.update(score_s=t1 - t0, generate_s=time.perf_counter() - t1)
            return losses, gens

        batched, decode.score_and_generate = decode.score_and_generate, scan_score_and_generate
        try:
            return run_methods(model, q, c, ctx, store, generate_tokens=args.tokens)
        finally:
            decode.score_and_generate = batched  # what run_methods calls (it imports it per call)

    fns = {"scoring, then 7 x per-method scan decode": per_method_scan,
           "score_and_generate, batched": lambda: run_methods(model, q, c, ctx, store, generate_tokens=args.tokens)}
    med = medians(interleaved(fns, args.repeats))
    print(f"\n## The Compose & compare click in-process (k = 5, 7 methods, {args.tokens} tokens)\n")
    print(table([[k, f"{v:.3f}"] for k, v in med.items()], ["way", "wall s (median)"]))
    a, b = med.values()
    print(f"\nscore_and_generate, batched, faster by {a / b:.2f}x")
    return {"click_s": med, "click_per_method_scan_over_batched": a / b}


@no_grad
def graph_steps(model, batch, ids, args, floor) -> dict:
    """The step as generate_batch runs it on a GPU (one CUDA-graph replay per token), each way side by
    side: every kernel (conv_dt: the decode conv and the step sizes in one launch); conv_roll and
    dt_step apart (the step before conv_dt); neither (before both); pure torch; the default with
    cuBLASLt for the projections. Per way: median ms of a replay, and under torch.profiler the GPU
    ops of one eager step and the GPU busy ms of one replay. Then where one eager step of the default
    spends its GPU time, per kernel."""
    from harness import gpu_profile

    from picaso_core.engine import kernels
    from picaso_core.engine.decode import _stepper

    saved, blas = kernels.setting(), torch.backends.cuda.preferred_blas_library()
    every = set(kernels.OPS)
    ways = {"kernels (default)": (True, None, None),
            "kernels, conv_roll + dt_step (no conv_dt)": (True, every - {"conv_dt"}, None),
            "kernels, unfused step (no conv_dt, dt_step, conv_roll)": (True, every - {"conv_dt", "dt_step", "conv_roll"}, None),
            "pure torch": (False, None, None),
            "kernels, cuBLASLt projections": (True, None, "cublaslt")}
    steps, out = {}, {}
    try:
        for way, (on, ops, lib) in ways.items():
            kernels.use_kernels(on, ops)
            if lib:
                try:
                    torch.backends.cuda.preferred_blas_library(lib)
                except RuntimeError as e:  # a torch built without it
                    print(f"{way}: skipped ({e})")
                    continue
                model.__dict__.pop("_decode_graphs", None)  # a new capture, with that library's kernels
            steps[way] = _stepper(model, batch)
            steps[way](ids)  # captured and warm
            bufs = list(layer_major(batch))
            eager, replay = gpu_profile(lambda: model._step_(ids, *bufs)), gpu_profile(lambda: steps[way](ids))
            out[way] = {"eager_gpu_ops": eager["gpu_ops"], "eager_busy_ms": eager["busy_ms"],
                        "graph_gpu_ops": replay["gpu_ops"], "graph_busy_ms": replay["busy_ms"]}
            torch.backends.cuda.preferred_blas_library(blas)
        med = medians(interleaved({w: (lambda w=w: steps[w](ids)) for w in steps}, 5 * args.steps))
    finally:
        kernels.use_kernels(*saved)
        torch.backends.cuda.preferred_blas_library(blas)
    for way in steps:
        out[way]["graph_ms"] = med[way] * 1e3
    base = med["kernels (default)"]
    print(f"\n## the recurrent step as generate_batch runs it (CUDA graph, {args.rows} rows)\n")
    print(table([[w, f"{med[w] * 1e3:.2f} ms", f"{med[w] / base:.2f}x", vs_limit(med[w], floor), o["eager_gpu_ops"],
                  o["graph_gpu_ops"] or "not seen", f"{o['graph_busy_ms']:.2f} ms" if o["graph_gpu_ops"] else "-"]
                 for w, o in out.items()],
                ["way", "per step", "vs default", "vs the bandwidth floor", "GPU ops, eager step",
                 "GPU ops, replay", "GPU busy, replay"]))
    out["where"] = step_kernels(model, batch, ids)
    return out


def step_kernels(model, batch, ids, top: int = 12) -> list[dict]:
    """One eager step (the default kernels) under torch.profiler: GPU time and calls per kernel."""
    from torch.profiler import ProfilerActivity, profile as tprofile

    bufs = list(layer_major(batch))
    model._step_(ids, *bufs)
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        model._step_(ids, *bufs)
        torch.cuda.synchronize()
    rows = sorted((e for e in prof.key_averages() if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in rows)
    res = [{"kernel": e.key[:80], "calls": e.count, "gpu_us": e.self_device_time_total,
            "us_per_call": e.self_device_time_total / e.count} for e in rows[:top]]
    print(f"\n## one eager step's GPU time per kernel (default kernels; {total / 1e3:.2f} ms in all)\n")
    print(table([[r["kernel"], r["calls"], f"{r['gpu_us']:.0f}", f"{r['us_per_call']:.1f}"] for r in res],
                ["kernel", "calls", "GPU µs", "µs per call"]))
    return res


def main() -> None:
    ap = parser(__doc__, device="cpu", repeats=3, limit_flags=True)
    ap.add_argument("--shape", choices=["demo", *SHAPES], default="demo")
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--rows", type=count(1), default=7)
    ap.add_argument("--tokens", type=count(1), default=24)
    ap.add_argument("--lengths", type=comma_list(count(1)), default="16,256,1024,4096")
    ap.add_argument("--steps", type=count(1), default=10, help="steps timed per prompt length")
    ap.add_argument("--batched-only", action="store_true",
                    help="time generate_batch alone in section 1 (the sequential ways take minutes at large shapes)")
    ap.add_argument("--peak-child", help=argparse.SUPPRESS)  # internal: one fresh process of cpu_peaks
    args = parse(ap)
    _import_engine()
    if args.peak_child:
        return peak_child(args.peak_child)
    dtype = getattr(torch, args.dtype)
    model, prompt, states = build(args.shape, args.device, dtype, args.rows)
    bw, _, label = limits(args.device, args.dtype, args)
    step_bytes = weight_bytes(model) + 2 * sum(s.nbytes for s in states)  # weights once, state read + written
    floor = step_bytes / bw if bw else None
    print(f"# decode_speed: {args.shape}, {args.dtype}, {args.device}, {torch.get_num_threads()} threads; "
          f"{args.rows} rows x {args.tokens} tokens, prompt {len(prompt)} tokens; limits: {label}\n")

    # 1. sequential vs batched
    n = args.tokens
    fns = {
        "scan/token, sequential": lambda: [scan_generate(model, prompt, s, n) for s in states],
        "generate, sequential": lambda: [model.generate(prompt, s, n, temperature=0, stop_at_eos=False) for s in states],
        "generate_batch, unblocked state update": unblocked(lambda: model.generate_batch(prompt, states, n, stop_at_eos=False)),
        "generate_batch": lambda: model.generate_batch(prompt, states, n, stop_at_eos=False),
    }
    if args.batched_only:
        fns = {"generate_batch": fns["generate_batch"]}
    outs = [fn() for fn in fns.values()]  # also the warm-up
    same = all(o == outs[0] for o in outs)
    med = medians(interleaved(fns, args.repeats, warmup=False))
    vs_batch = ratios(med, "generate_batch")
    print(f"## {args.rows} states x {n} tokens (greedy outputs identical: {same})\n")
    print(table([[k, f"{v:.3f}", f"{v / (n * args.rows) * 1e3:.2f}", f"{vs_batch[k]:.2f}x"] for k, v in med.items()],
                ["way", "total s", "ms / token / row", "generate_batch faster by"]))

    # 2. one step vs the length read before
    g = torch.Generator().manual_seed(2)
    runs = {}
    for L in [int(x) for x in args.lengths.split(",")]:
        batch = ContextState.stack([model.encode_context(
            torch.randint(0, model.config.vocab_size, (L,), generator=g))] * args.rows)
        bufs = list(layer_major(batch))  # copies, in the decode's layout
        ids = torch.randint(0, model.config.vocab_size, (args.rows,), generator=g).to(model.device)
        runs[L, "step"] = lambda ids=ids, bufs=bufs: model._step_(ids, *bufs)
        runs[L, "scan"] = lambda ids=ids, batch=batch: model.hidden_states(ids[:, None], batch)
    with torch.no_grad():  # lengths interleaved: load changes hit them all alike
        ts = interleaved(runs, args.steps)
    per_len, best = medians(ts), {k: min(v) for k, v in ts.items()}
    lens = sorted({L for L, _ in runs})
    print(f"\n## ms per decode step ({args.rows} rows) vs tokens read before\n")
    print(table([[L, f"{per_len[L, 'step'] * 1e3:.2f} ms", f"{per_len[L, 'scan'] * 1e3:.2f} ms",
                  vs_limit(per_len[L, "step"], floor)] for L in lens],
                ["tokens before", "recurrent step" + (" (eager: host-bound on a GPU; the graph replay below)" if args.device == "cuda" else ""),
                 "scan path, 1-token forward", "step vs the bandwidth floor"]))
    lo, hi = lens[0], lens[-1]
    growth = {"step_medians": per_len[hi, "step"] / per_len[lo, "step"],
              "step_minima": best[hi, "step"] / best[lo, "step"],
              "scan_medians": per_len[hi, "scan"] / per_len[lo, "scan"],
              "scan_over_step_at_shortest": per_len[lo, "scan"] / per_len[lo, "step"]}
    print(f"\nstep time ratio {hi} / {lo} tokens: {growth['step_medians']:.2f} of medians, "
          f"{growth['step_minima']:.2f} of minima (scan path: {growth['scan_medians']:.2f}); "
          f"recurrent step vs scan 1-token forward at {lo}: {growth['scan_over_step_at_shortest']:.2f}x faster")

    figures = {"generate_s": med, "step_s": {L: {k: per_len[L, k] for k in ("step", "scan")} for L in lens},
               "greedy_outputs_identical": same}
    if args.device == "cuda":  # the step as generate_batch runs it: one CUDA-graph replay per token
        figures["graph_step"] = graph_steps(model, batch, ids, args, floor)
        figures["graph_step_s"] = figures["graph_step"]["kernels (default)"]["graph_ms"] / 1e3
    ratio = {"over_generate_batch": vs_batch, f"step_{hi}_over_{lo}": growth}
    if args.shape == "demo":
        click_figures = click(model, args)
        figures["click_s"] = click_figures["click_s"]
        ratio["click_per_method_scan_over_batched"] = click_figures["click_per_method_scan_over_batched"]

    # 3. memory
    cfg = model.config
    b, E = args.rows, cfg.d_inner
    state_b = b * states[0].nbytes
    width = 2 * E + 2 * cfg.ssm_cfg.ngroups * cfg.ssm_cfg.d_state + cfg.nheads  # in_proj output
    act = b * 4 * (width + cfg.conv_dim * cfg.ssm_cfg.d_conv + 2 * cfg.nheads * cfg.ssm_cfg.headdim
                   * cfg.ssm_cfg.d_state + cfg.padded_vocab_size)  # widest live temporaries of one step
    print(f"\n## memory\n\nweights {weight_bytes(model) / 2**20:.1f} MiB; decode buffers, allocated once: state "
          f"{state_b / 2**20:.2f} MiB ({b} rows), token table {b * n * 8} B; per-step activations about "
          f"{act / 2**20:.2f} MiB, the same at every step (nothing grows with the tokens).")
    if args.device == "cpu":
        budgets = (n, 4 * n)
        peaks = cpu_peaks(args, prompt, states, budgets)
        figures["cpu_peak_kib"] = peaks
        print("measured CPU peak (resident memory, a fresh process per budget: the model and the states "
              "loaded, then one generate_batch; Linux VmHWM):\n")
        print(table([[k, f"{p['rss_before_kib'] / 1024:.1f} MiB", f"{p['peak_kib'] / 1024:.1f} MiB",
                      f"{(p['peak_kib'] - p['rss_before_kib']) / 1024:.1f} MiB"] for k, p in peaks.items()],
                    ["new tokens", "resident before", "peak during generate_batch", "peak above before"]))
        a, b = (peaks[k]["peak_kib"] - peaks[k]["rss_before_kib"] for k in budgets)
        print(f"\npeak above before, {budgets[1]} vs {budgets[0]} tokens: {b / 1024:.1f} vs {a / 1024:.1f} MiB "
              f"({(b - a) / 1024:+.1f} MiB)")
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        model.generate_batch(prompt, states, n, stop_at_eos=False)
        figures["cuda_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        print(f"measured CUDA peak above the weights and inputs during generate_batch: "
              f"{figures['cuda_peak_mib']:.1f} MiB (the prefill's activations)")
    write_json(args, figures, ratio)


if __name__ == "__main__":
    main()

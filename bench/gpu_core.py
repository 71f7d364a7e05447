"""The GPU core side by side: the pure-torch path, the kernels (engine/kernels.py) and the query-path
CUDA graphs (engine/graphs.py), in one run on one GPU.

    python bench/gpu_core.py --json bench/out/gpu_core.json           # everything (H100: ~3 min)
    python bench/gpu_core.py --only accuracy,query                     # some sections

Sections:
  accuracy  each kernel against the float64 pure-torch reference, ‖out − ref‖ / ‖ref‖, float32 and
            bfloat16, at the production autotuning (tests/engine/test_gpu.py's tolerances come from here)
  query     the 130m shape's forward of 8 x 64 tokens from 8 given states, each way: median wall
            ms, and under torch.profiler the kernels launched, the GPU busy time (the union of the
            kernels' intervals) and wall / busy (target <= 2 with kernels + graphs)
  click     the Compose & compare click in-process at the 2.7b shape in bfloat16 (k = 10 contexts of
            the demo's lengths, 7 methods, 24 generated tokens; the contexts' states stored
            beforehand, as in the app; target <= 1 s), each way
            and PICASO-R's whole click (compose + query + scoring, one method) against Concat's at
            the same shape (target >= 5x), each way, split into composing and scoring
  where     (not in the default) the GPU ops one PICASO-R scoring call spends its time on, 2.7b,
            kernels + graphs and kernels eager
Ways: "torch" is the path before the kernels and query graphs (pure torch, decode graphs on);
"torch+graphs" adds the query graphs; "kernels" the kernels without query graphs; "kernels+graphs"
is the default where the kernels are installed; "kernels+graphs, no addnorm" leaves out the fused
residual add + RMSNorm. Weights are random (the shapes of the released
checkpoints): speed does not depend on their values.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (comma_list, gpu_profile, interleaved, medians, no_grad, parse, parser, shape_model,  # noqa: E402
                     table, write_json)

from picaso_core.light.defaults import DTYPES  # noqa: E402

SECTIONS = ("accuracy", "query", "click", "where")
ACCURACY_OPS = ("ssd", "step", "norm", "addnorm")


def _import_engine() -> None:
    """torch and the engine as this module's names, once the arguments are read: at the top of the
    module they made --help and a bad value take seconds (issue 48)."""
    global torch, ContextState, decode, graphs, kernels, scan
    import torch

    from picaso_core import ContextState
    from picaso_core.engine import decode, graphs, kernels, scan

WAYS = {"torch": (False, False), "torch+graphs": (False, True), "kernels": (True, False), "kernels+graphs": (True, True),
        "kernels+graphs, no addnorm": (True, True)}  # the kernels but the fused residual add + RMSNorm


def set_way(way: str) -> None:
    k, g = WAYS[way]
    kernels.use_kernels(k, set(kernels.OPS) - {"addnorm"} if way.endswith("no addnorm") else None)
    graphs.ENABLED = g
    decode.CUDA_GRAPHS = True


def rel(a, ref) -> float:
    a, ref = a.double().cpu(), ref.double().cpu()
    return float("nan") if not torch.isfinite(a).all() else ((a - ref).norm() / ref.norm()).item()


# ---- accuracy -------------------------------------------------------------------------------------
@no_grad
def accuracy(args) -> dict:
    from picaso_core.engine.model import GatedRMSNorm, RMSNorm, _add_norm

    kernels.use_kernels(True)
    out = {}
    g = torch.Generator(device="cuda").manual_seed(11)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).split(".")[1]
        if kernels.installed()["ssd"] and "ssd" in args.accuracy_ops:
            for b, l, h, p, gr, n, cs in ((2, 300, 8, 64, 2, 128, 256), (1, 1000, 24, 64, 1, 128, 256)):
                x, B, C = r(b, l, h, p).to(dtype), r(b, l, gr, n).to(dtype), r(b, l, gr, n).to(dtype)
                dt = torch.nn.functional.softplus(r(b, l, h) - 2)
                A, h0 = -torch.rand(h, device="cuda", generator=g) * 4 - 0.1, r(b, h, p, n)
                y, s, _ = scan.ssd_scan(x, dt, A, B, C, cs, h0)
                ry, rs, _ = scan.ssd_scan_chunked(*(t.double() for t in (x, dt, A, B, C)), cs, h0.double())
                out[f"ssd y, {name}, l {l}"], out[f"ssd state, {name}, l {l}"] = rel(y, ry), rel(s, rs)
        if kernels.installed()["step"] and "step" in args.accuracy_ops:
            for fam, shp in (("mamba2", (3, 24, 64, 128)), ("mamba1", (3, 1536, 16))):
                hs = r(*shp)
                if fam == "mamba2":
                    x, dt, A = r(3, 24, 64).to(dtype), torch.rand(3, 24, device="cuda"), -torch.rand(24, device="cuda") - 0.1
                    B, C = r(3, 1, 128).to(dtype), r(3, 1, 128).to(dtype)
                else:
                    x, dt, A = r(3, 1536).to(dtype), torch.rand(3, 1536, device="cuda"), -torch.rand(1536, 16, device="cuda") - 0.1
                    B, C = r(3, 16).to(dtype), r(3, 16).to(dtype)
                ry, rh = scan.state_update_ref(hs.double(), *(t.double() for t in (x, dt, A, B, C)))
                y = scan.state_update(hs, x, dt, A, B, C)
                out[f"step y, {fam}, {name}"], out[f"step state, {fam}, {name}"] = rel(y, ry), rel(hs, rh)
        if kernels.installed()["addnorm"] and "addnorm" in args.accuracy_ops:
            norm = RMSNorm(2560, 1e-5).to("cuda", dtype)
            norm.weight.copy_(torch.rand(2560, device="cuda") + 0.5)
            out_, res = r(7, 64, 2560).to(dtype), r(7, 64, 2560)
            y, res2 = _add_norm(norm, out_, res, dtype)
            v = res.double() + out_.double()
            ref = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
            out[f"addnorm y, {name}"], out[f"addnorm residual, {name}"] = rel(y, ref), rel(res2, v)
        if kernels.installed()["norm"] and "norm" in args.accuracy_ops:
            norm = GatedRMSNorm(1536, 1536, 1e-5).to("cuda", dtype)
            norm.weight.copy_(torch.rand(1536, device="cuda") + 0.5)
            y, z = r(8, 64, 1536).to(dtype), r(8, 64, 1536).to(dtype)
            v = y.double() * torch.nn.functional.silu(z.double())
            ref = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
            out[f"norm, {name}"] = rel(norm(y, z), ref)
    out["kernel calls"] = dict(kernels.calls)
    out["broken"] = dict(kernels.broken)
    print("\n## Each kernel against the float64 reference (‖out − ref‖ / ‖ref‖)\n")
    print(table([[k, f"{v:.2e}"] for k, v in out.items() if isinstance(v, float)], ["kernel, output, dtype", "rel. error"]))
    return out


# ---- profiling ------------------------------------------------------------------------------------
@no_grad
def query(args) -> dict:
    res = {}
    for dtype in [getattr(torch, d) for d in args.query_dtypes.split(",")]:
        model = shape_model("mamba2-130m", "cuda", dtype)
        g = torch.Generator().manual_seed(1)
        set_way("torch")
        states = ContextState.stack(model.encode_contexts(
            [torch.randint(0, 50277, (100 + 10 * i,), generator=g).tolist() for i in range(8)]))
        ids = torch.randint(0, 50277, (8, 64), generator=g).cuda()
        fns = {}
        for way in WAYS:
            if way.startswith("kernels") and not kernels.installed()["ssd"]:
                continue
            fns[way] = (lambda w=way, m=model: (set_way(w), m.hidden_states(ids, states)))
        times = medians(interleaved(fns, args.repeats, warmup=3))
        name = str(dtype).split(".")[1]
        for way, fn in fns.items():
            p = gpu_profile(fn)
            p["wall_ms"] = times[way] * 1e3
            p["wall_over_busy"] = p["wall_ms"] / p["busy_ms"]
            res[f"{name}, {way}"] = p
        del model
        torch.cuda.empty_cache()
    print("\n## The 130m shape's forward of 8 x 64 tokens from 8 given states\n")
    print(table([[k, f"{v['wall_ms']:.2f}", f"{v['busy_ms']:.2f}", f"{v['wall_over_busy']:.2f}", v["gpu_ops"], v["launch_calls"]]
                 for k, v in res.items()], ["dtype, way", "wall ms (median)", "GPU busy ms", "wall / busy",
                                            "GPU ops", "host launch calls"]))
    return res


# ---- the click at 2.7b ---------------------------------------------------------------------------
def demo_lengths_inputs(k: int = 10):
    """k contexts, a query and a continuation with the demo corpus' token counts (contexts of
    66-80 tokens, a 29-token query, a 71-token continuation), random ids of the 2.7b vocabulary."""
    g = torch.Generator().manual_seed(7)
    ctx = [torch.randint(0, 50277, (66 + (7 * i) % 15,), generator=g).tolist() for i in range(k)]
    return ctx, torch.randint(0, 50277, (29,), generator=g).tolist(), torch.randint(0, 50277, (71,), generator=g).tolist()


@no_grad
def click(args, model) -> dict:
    from picaso_core.analysis.evaluate import run_methods
    from picaso_core.compose import build_state

    ctx, q, c = demo_lengths_inputs(10)
    set_way("torch")
    store = model.encode_contexts(ctx)  # the database build (not part of a click)
    ways = [w for w in WAYS if kernels.installed()["ssd"] or not w.startswith("kernels")]

    def whole(way):
        set_way(way)
        return run_methods(model, q, c, ctx, store, generate_tokens=24)

    fns = {w: (lambda w=w: whole(w)) for w in ways}
    t = medians(interleaved(fns, args.repeats, warmup=2))
    outs = {w: fns[w]() for w in ways}
    same = {w: [r.generation for r in outs[w]] == [r.generation for r in outs["torch"]] for w in ways}
    loss_diff = {w: max(abs(a.loss - b.loss) for a, b in zip(outs[w], outs["torch"])) for w in ways}

    split: dict[tuple, list] = {}

    def one(way, method):
        set_way(way)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        st = build_state(model, method, ctx, store)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        out = model.continuation_losses(q, c, [st])  # a list of floats: synchronised
        split.setdefault((way, method), []).append((t1 - t0, time.perf_counter() - t1))
        return out

    per = {}
    for way in ways:
        fns1 = {m: (lambda m=m, way=way: one(way, m)) for m in ("concat", "picaso_r")}
        per[way] = medians(interleaved(fns1, args.repeats, warmup=2))
    parts = {f"{w}, {m}": {"compose_ms": 1e3 * statistics.median(a for a, _ in v),
                           "score_ms": 1e3 * statistics.median(b for _, b in v)} for (w, m), v in split.items()}
    print("\n## The Compose & compare click in-process, 2.7b shape, bfloat16 (k = 10, 7 methods, 24 tokens)\n")
    print(table([[w, f"{t[w]:.3f}", f"{per[w]['concat'] * 1e3:.1f}", f"{per[w]['picaso_r'] * 1e3:.1f}",
                  f"{per[w]['concat'] / per[w]['picaso_r']:.1f}x", same[w], f"{loss_diff[w]:.1e}"] for w in ways],
                ["way", "click s (median)", "Concat click ms", "PICASO-R click ms", "PICASO-R faster by",
                 "same tokens as torch", "max |Δ loss| vs torch"]))
    print("\nOne method's click, split (medians, warm-up included):\n")
    print(table([[k, f"{v['compose_ms']:.1f}", f"{v['score_ms']:.1f}"] for k, v in parts.items()],
                ["way, method", "compose ms", "query + scoring ms"]))
    return {"click_s": t, "method_click_s": per, "method_click_split": parts, "same_generations": same, "max_loss_diff": loss_diff,
            "graph_cache": {"captures": graphs.cache_of(model).captures, "replays": graphs.cache_of(model).replays}}


@no_grad
def where(args, model) -> dict:
    """Where one PICASO-R scoring call (the 29 + 71 tokens from one composed state) spends its GPU
    time at the 2.7b shape, kernels + graphs and kernels eager: the top GPU ops by total time."""
    from torch.profiler import ProfilerActivity, profile as tprofile

    from picaso_core.compose import build_state

    ctx, q, c = demo_lengths_inputs(10)
    store = model.encode_contexts(ctx)
    st = build_state(model, "picaso_r", ctx, store)
    out = {}
    for way in ("kernels+graphs", "kernels"):
        set_way(way)
        for _ in range(3):
            model.continuation_losses(q, c, [st])
        torch.cuda.synchronize()
        with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model.continuation_losses(q, c, [st])
            torch.cuda.synchronize()
        rows = sorted((e for e in prof.key_averages() if e.device_time_total > 0),
                      key=lambda e: -e.self_device_time_total)[:18]
        out[way] = [{"op": e.key[:90], "calls": e.count, "gpu_ms": e.self_device_time_total / 1e3} for e in rows]
        print(f"\n## One PICASO-R scoring call at the 2.7b shape, {way}: {gpu_profile(lambda: model.continuation_losses(q, c, [st]))}\n")
        print(table([[r["op"], r["calls"], f"{r['gpu_ms']:.2f}"] for r in out[way]], ["GPU op", "calls", "GPU ms (self)"]))
    return out


def main() -> None:
    ap = parser(__doc__, repeats=5)
    ap.add_argument("--only", type=comma_list(choices=SECTIONS), default="accuracy,query,click",
                    help="sections, comma-separated")
    ap.add_argument("--accuracy-ops", type=comma_list(choices=ACCURACY_OPS), default="ssd,step,norm,addnorm",
                    help="the kernels the accuracy section checks")
    ap.add_argument("--query-dtypes", type=comma_list(choices=DTYPES), default="bfloat16,float32",
                    help="the query section's dtypes")
    args = parse(ap)
    _import_engine()
    if not torch.cuda.is_available():
        sys.exit("bench/gpu_core.py needs CUDA")
    only = set(args.only.split(","))
    figures = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "kernels_installed": kernels.installed(), "import_errors": kernels.import_errors}
    print(f"# gpu_core: {figures['device']}, torch {torch.__version__}; installed: {kernels.installed()}\n")
    t0 = time.perf_counter()
    for name, fn in (("accuracy", lambda: accuracy(args)), ("query", lambda: query(args))):
        if name in only:
            try:
                figures[name] = fn()
            except Exception as e:  # one section's failure must not lose the others' figures
                figures[name] = {"error": f"{type(e).__name__}: {e}"}
                print(f"{name} failed: {figures[name]['error']}")
            write_json(args, figures)
    model = shape_model("mamba2-2.7b", "cuda", torch.bfloat16) if only & {"click", "where"} else None
    for name, fn in (("click", click), ("where", where)):
        if name in only:
            try:
                print(f"\n2.7b model: {model.kernel_path()}")
                figures[name] = fn(args, model)
            except Exception as e:
                figures[name] = {"error": f"{type(e).__name__}: {e}"}
                print(f"{name} failed: {figures[name]['error']}")
            write_json(args, figures)
    figures["kernel_calls"], figures["broken"] = dict(kernels.calls), dict(kernels.broken)
    print(f"\nkernel calls: {kernels.calls}; broken: {kernels.broken or 'none'}; {time.perf_counter() - t0:.0f} s")
    write_json(args, figures)


if __name__ == "__main__":
    main()

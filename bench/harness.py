"""What the benchmarks share: their common flags, side-by-side timing, markdown tables, JSON
results, and the physical limits GPU figures are printed against. A script keeps only what it
measures:

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import interleaved, parse, parser, ratios, table, write_json

Importing this module puts the repository root on sys.path (picaso_core imports from there).

Timing: `interleaved` runs competitors round-robin, so that a change in the machine's load hits
all of them alike; on a shared machine the figures to quote are ratios of medians taken in the
same run (`ratios`).

Limits: a decode step and a composition read (and write) fixed bytes: their floor is bytes /
bandwidth. A prefill does ~2 x params FLOPs per token: its floor is FLOPs / peak. The figures are
the vendors' datasheet numbers (dense, no sparsity); --bandwidth-gbs / --peak-tflops override them
or stand in for a GPU missing here.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from picaso_core.light.defaults import count, number  # noqa: E402  (tier 0, no torch: --help answers at once)

# released Mamba-2 shapes (config.json's d_model, n_layer; every other field at mamba_ssm's Mamba2 defaults)
SHAPES = {"mamba2-130m": (768, 24), "mamba2-370m": (1024, 48), "mamba2-2.7b": (2560, 64)}


def text_of(words: Sequence[str], n: int) -> str:
    """At most n characters of whole `words` (repeated as needed), space-separated: a request of real
    words at an input's length cap."""
    s = ""
    for w in list(words) * 20:
        if len(s) + len(w) + 1 > n:
            break
        s += w + " "
    return s.strip()[:n]


def shape_model(shape: str, device, dtype):
    """A Mamba-2 of a released shape (`SHAPES`) with seeded random weights, built on `device` (a 2.7b
    model's init on the CPU takes minutes), in `dtype`, in eval mode."""
    import torch

    from picaso_core import ModelConfig, SSMLanguageModel

    d, n = SHAPES[shape]
    torch.manual_seed(0)
    with torch.device(device):
        return SSMLanguageModel(ModelConfig(d_model=d, n_layer=n, vocab_size=50277, pad_vocab_size_multiple=16,
                                            ssm_cfg=dict(layer="Mamba2"))).to(dtype=dtype).eval()


# name substring (as torch.cuda.get_device_name prints it) -> (GB/s, dense TFLOP/s {dtype})
KNOWN_GPUS = {
    "H200": (4800, {"float32": 67, "tf32": 495, "bfloat16": 989, "float16": 989}),
    "H100 80GB HBM3": (3350, {"float32": 67, "tf32": 495, "bfloat16": 989, "float16": 989}),  # SXM
    "H100 PCIe": (2000, {"float32": 51, "tf32": 378, "bfloat16": 756, "float16": 756}),
    "A100-SXM4-80GB": (2039, {"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312}),
    "A100-SXM4-40GB": (1555, {"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312}),
    "A10G": (600, {"float32": 31, "tf32": 35, "bfloat16": 70, "float16": 70}),
    "L4": (300, {"float32": 30, "tf32": 60, "bfloat16": 121, "float16": 121}),
    "T4": (320, {"float32": 8.1, "tf32": 8.1, "bfloat16": 65, "float16": 65}),
}


def parser(doc: str, *, threads: int | None = None, device: str | None | bool = False,
           devices: Sequence[str] | None = ("cpu", "cuda"), repeats: int | None | bool = False, quick: str | None = None,
           limit_flags: bool = False, helps: Mapping[str, str] = {}) -> argparse.ArgumentParser:
    """The flags every benchmark shares, with this script's defaults: --threads (default `threads`),
    --json; --device (default `device`, one of `devices`, or any string where devices is None) and
    --repeats (default `repeats`), each left out where its default is False; --quick (where its help
    is given); --bandwidth-gbs / --peak-tflops (limit_flags). helps: a flag's help text, by dest."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    h = {"threads": "torch threads (default: torch's choice)", "repeats": "timed rounds (figures are medians)",
         "device": "where the measured code runs",
         "json": "also write the results (script, arguments, figures, ratios) to this JSON file", **helps}
    ap.add_argument("--threads", type=count(0), default=threads, help=h["threads"])
    if device is not False:
        ap.add_argument("--device", default=device, choices=devices, type=None if devices else device_name,
                        help=h["device"])
    if repeats is not False:
        ap.add_argument("--repeats", type=count(1), default=repeats, help=h["repeats"])
    if quick is not None:
        ap.add_argument("--quick", action="store_true", help=quick)
    if limit_flags:
        ap.add_argument("--bandwidth-gbs", type=number(above=0), default=None,
                        help="memory bandwidth in GB/s (default: the table in bench/harness.py for the GPU found)")
        ap.add_argument("--peak-tflops", type=number(above=0), default=None,
                        help="dense peak TFLOP/s for the dtype used (default: the table for the GPU found)")
    ap.add_argument("--json", default=None, metavar="PATH", help=h["json"])
    return ap


def device_name(text: str) -> str:
    """argparse `type=` of a --device that takes any torch device: its form checked without torch."""
    if not re.fullmatch(r"(cpu|cuda|mps|xpu)(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r}: a torch device, e.g. cpu, cuda or cuda:1")
    return text


def comma_list(item: Callable[[str], object] = str, choices: Sequence[str] | None = None, *, empty: bool = False):
    """argparse `type=` for a comma list, kept as written (the script splits it): every item through
    `item` (e.g. count(1)) and among `choices`; empty text only where `empty`. A bad item is one
    `error:` line at parse time, not a traceback after the model loads."""
    def check(text: str) -> str:
        if not text and empty:
            return text
        for x in text.split(","):
            try:
                item(x)
            except (argparse.ArgumentTypeError, ValueError) as e:
                raise argparse.ArgumentTypeError(f"{text!r}: {e or repr(x)}") from None
            if choices is not None and x not in choices:
                raise argparse.ArgumentTypeError(f"{text!r}: {x!r} is not one of {', '.join(choices)} (a comma list)")
        return text

    check.__name__ = "list"
    return check


def parse(ap: argparse.ArgumentParser, argv=None, *, torch_threads: bool = True) -> argparse.Namespace:
    """ap's arguments; stops where --device names CUDA and none is visible; sets torch's threads
    to --threads where given (torch_threads=False: the script uses --threads otherwise)."""
    args = ap.parse_args(argv)
    device = str(getattr(args, "device", None) or "")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            sys.exit(f"--device {device}: no CUDA device is visible")
    if torch_threads and getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)
    return args


def no_grad(fn):
    """fn under torch.no_grad(), torch imported when it runs: a script's decorated functions do not
    import torch before its arguments are read (--help and a bad value answer at once)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)
    return run


def sync() -> None:
    """Wait for the GPU's queued work, where torch has started CUDA (a timed call must include it)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def seconds(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of fn, the GPU's work included."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def interleaved(fns: Mapping[object, Callable[[], object]], repeats: int, warmup: bool | int = True, *,
                rounds: Mapping[object, int] | None = None, alternate: bool = False,
                progress: Callable[[int, object, float], None] | None = None) -> dict[object, list[float]]:
    """Seconds of each fn over `repeats` rounds; each round runs every fn once (round-robin), so that
    changes in the machine's load hit all of them alike.
    warmup: untimed rounds first (True: one; an int: that many) for the allocator, first-call paths,
    compilation. rounds: at most this many timed rounds for the fns named (competitors too slow to
    repeat). alternate: every other round in reverse order, the warm-up counting as the first, so no
    fn always runs first. progress(round, key, seconds) after each timed call."""
    keys = list(fns)
    order = lambda r: keys[::-1] if alternate and r % 2 else keys  # noqa: E731
    for r in range(int(warmup)):
        for k in order(r):
            fns[k]()
    times = {k: [] for k in keys}
    for r in range(repeats):
        for k in order(r + int(warmup)):
            if rounds and r >= rounds.get(k, repeats):
                continue
            times[k].append(seconds(fns[k]))
            if progress:
                progress(r, k, times[k][-1])
    return times


def median(ts: Sequence[float]) -> float:
    return statistics.median(ts)


def medians(times: Mapping[object, Sequence[float]]) -> dict:
    return {k: statistics.median(v) for k, v in times.items()}


def ratios(times: Mapping[object, Sequence[float] | float], baseline) -> dict:
    """Each competitor's median over the baseline's (values: lists of seconds or single figures)."""
    med = {k: v if isinstance(v, (int, float)) else statistics.median(v) for k, v in times.items()}
    return {k: v / med[baseline] for k, v in med.items()}


def ms(ts: Sequence[float], digits: int = 1) -> str:
    """'median (min)' in ms."""
    return f"{1e3 * statistics.median(ts):.{digits}f} ({1e3 * min(ts):.{digits}f})"


def row(cells: Sequence[object]) -> str:
    """One markdown table row (print a table's rows as they are measured: `table([], headers)` first)."""
    return "| " + " | ".join(map(str, cells)) + " |"


def table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    """A markdown table."""
    return "\n".join([row(headers), "|" + "---|" * len(headers), *map(row, rows)])


def write_json(args: argparse.Namespace, figures, ratios=None, *, script: str | None = None, **extra) -> None:
    """Where --json was given: {script, args, figures, ratios, **extra} to that file. script: the
    name (default: the running script's)."""
    if not getattr(args, "json", None):
        return
    main = getattr(sys.modules.get("__main__"), "__file__", None) or "bench"
    out = {"script": script or Path(main).stem, "args": vars(args), "figures": figures, "ratios": ratios, **extra}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=str))


def limits(device: str, dtype: str, args) -> tuple[float | None, float | None, str]:
    """(bytes/s, FLOP/s, a label) for `device`; None where neither a flag nor the table knows."""
    bw = args.bandwidth_gbs * 1e9 if args.bandwidth_gbs else None
    fl = args.peak_tflops * 1e12 if args.peak_tflops else None
    label = "given by flags" if bw or fl else "unknown (pass --bandwidth-gbs / --peak-tflops)"
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name()
        for key, (gbs, tflops) in KNOWN_GPUS.items():
            if key in name:
                # float32 matmuls run at TF32 when torch allows it (the Triton SSD kernel always does)
                d = "tf32" if dtype == "float32" and torch.backends.cuda.matmul.allow_tf32 else dtype
                bw = bw or gbs * 1e9
                fl = fl or tflops.get(d, tflops["float32"]) * 1e12
                label = f"{name} (datasheet: {gbs} GB/s, {tflops.get(d)} TFLOP/s {d})"
                break
        else:
            label = f"{name}: " + label
    return bw, fl, label


def vs_limit(t: float, floor_s: float | None) -> str:
    """'x.x x the limit' (how far a measured time `t` is above its physical floor)."""
    return f"{t / floor_s:.1f}x the limit ({floor_s * 1e3:.3f} ms)" if floor_s else "limit unknown"


LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaGraphLaunch",
                "cudaMemcpyAsync", "cudaMemsetAsync")


def gpu_profile(fn) -> dict:
    """One call of fn (warm) under torch.profiler: kernels run on the GPU, launch calls made by
    the host, GPU busy ms (the union of the kernels' intervals). Kernels a CUDA graph replays are
    counted where the profiler sees into the graph (CUPTI does on recent drivers)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as tprofile

    fn()
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.events()
    dev = sorted((e.time_range.start, e.time_range.end) for e in events if e.device_type == DeviceType.CUDA)
    busy, end = 0.0, float("-inf")
    for s, e in dev:
        if e > end:
            busy += e - max(s, end)
            end = e
    launches = sum(1 for e in events if e.device_type == DeviceType.CPU and e.name in LAUNCH_CALLS)
    return {"gpu_ops": len(dev), "launch_calls": launches, "busy_ms": busy / 1e3}

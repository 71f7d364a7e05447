"""Physical limits to print GPU figures against (issue 25): memory bandwidth and dense peak FLOPs.

A decode step and a composition read (and write) fixed bytes: their floor is bytes / bandwidth. A
prefill does ~2 x params FLOPs per token: its floor is FLOPs / peak. Figures are the vendors'
datasheet numbers (dense, no sparsity); give --bandwidth-gbs / --peak-tflops to override them or
for a GPU missing here.
"""

from __future__ import annotations

import argparse

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


def add_limit_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--bandwidth-gbs", type=float, default=None,
                    help="memory bandwidth in GB/s (default: the table in bench/limits.py for the GPU found)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="dense peak TFLOP/s for the dtype used (default: the table for the GPU found)")


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


def vs_limit(seconds: float, floor_s: float | None) -> str:
    """'x.x x the limit' (how far a measured time is above its physical floor)."""
    return f"{seconds / floor_s:.1f}x the limit ({floor_s * 1e3:.3f} ms)" if floor_s else "limit unknown"

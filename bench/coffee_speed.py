"""What COFFEE's feedback loop costs (issue #24), measured side by side in one run.

    python bench/coffee_speed.py            # table 1's shape (b 512, L 16, D 16, n 8) and L = 256
    python bench/coffee_speed.py --quick
    python bench/coffee_speed.py --quick --no-compile   # without the torch.compile variant (~30 s to compile)

One training step's forward + backward of the SSM layer alone (random inputs), medians of
--repeats, for:
  * COFFEE, step-by-step reference (autograd records every op of every step)
  * COFFEE, fast path (TorchScript loop, hand-written adjoint: one autograd node)
  * COFFEE, the reference loop under torch.compile (inductor; unrolled over L, so compiled only for
    L <= --compile-max-len; its compile time is printed apart and left out of the medians)
  * S6, step-by-step reference and S6's parallel (Hillis-Steele) scan
COFFEE's Delta(k) depends on x(k-1) (eq. 5), so no parallel scan applies: its cost is L sequential
steps. These 2-core machines are shared and noisy: quote the ratios, measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picaso_core.lab.coffee.model import S6, Coffee  # noqa: E402


def time_layer(layer, u, fast: bool, repeats: int, first: dict | None = None) -> float:
    """Median ms of forward + backward; first['s'] gets the first call's seconds (compilation)."""
    times = []
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        y, _ = layer(u, fast=fast)
        y.square().mean().backward()
        if i == 0 and first is not None:
            first["s"] = time.perf_counter() - t0
        if i >= 2:   # two warm-ups (TorchScript profiles its first runs; torch.compile compiles)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def compiled(layer):
    """The layer under torch.compile, or None where inductor cannot compile here (no C compiler, ...)."""
    try:
        f = torch.compile(layer)
        y, _ = f(torch.randn(2, 3, layer.lam.shape[0]), fast=False)
        y.sum().backward()
        return f
    except Exception as e:  # noqa: BLE001: report and go on without it
        print(f"torch.compile unavailable here: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the CLI's default, 1: see its --threads)")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variant")
    p.add_argument("--compile-max-len", type=int, default=64, help="compile only up to this L (the loop is unrolled)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    shapes = [(512, 16, 16, 8)] + ([] if a.quick else [(64, 256, 16, 8)])
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ms per forward + backward (median of {a.repeats})")
    for b, l, d, n in shapes:
        u = torch.randn(b, l, d, requires_grad=True)
        cof, s6 = Coffee(d, n, learn_b=True, output_filter=True), S6(d, n)
        r = {name: time_layer(m, u, fast, a.repeats) for name, m, fast in
             [("coffee_ref", cof, False), ("coffee_fast", cof, True), ("s6_ref", s6, False), ("s6_scan", s6, True)]}
        note = ""
        if not a.no_compile and l <= a.compile_max_len:
            f = compiled(cof)
            if f is not None:
                first = {}
                r["coffee_compiled"] = time_layer(f, u, False, a.repeats, first)
                note = f" (compiled in {first['s']:.1f} s)"
        print(f"b={b} L={l} D={d} n={n}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()) + note)
        print(f"  COFFEE fast path: {r['coffee_ref'] / r['coffee_fast']:.2f}x faster than its reference; "
              + (f"torch.compile: {r['coffee_ref'] / r['coffee_compiled']:.2f}x; " if "coffee_compiled" in r else "")
              + f"COFFEE fast / S6 scan: {r['coffee_fast'] / r['s6_scan']:.2f}x; "
              f"S6 scan / S6 loop: {r['s6_ref'] / r['s6_scan']:.2f}x faster")


if __name__ == "__main__":
    main()

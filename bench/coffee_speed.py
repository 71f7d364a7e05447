"""What COFFEE's feedback loop costs (issue #24), measured side by side in one run.

    python bench/coffee_speed.py            # table 1's shape (b 512, L 16, D 16, n 8) and L = 256
    python bench/coffee_speed.py --quick

One training step's forward + backward of the SSM layer alone (random inputs), medians of
--repeats, for:
  * COFFEE, step-by-step reference (autograd records every op of every step)
  * COFFEE, fast path (TorchScript loop, hand-written adjoint: one autograd node)
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

from picaso_core.lab.coffee import S6, Coffee  # noqa: E402


def time_layer(layer, u, fast: bool, repeats: int) -> float:
    times = []
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        y, _ = layer(u, fast=fast)
        y.square().mean().backward()
        if i >= 2:   # two warm-ups (TorchScript profiles its first runs)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the CLI's default, 1: see its --threads)")
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
        print(f"b={b} L={l} D={d} n={n}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()))
        print(f"  COFFEE fast path: {r['coffee_ref'] / r['coffee_fast']:.2f}x faster than its reference; "
              f"COFFEE fast / S6 scan: {r['coffee_fast'] / r['s6_scan']:.2f}x; "
              f"S6 scan / S6 loop: {r['s6_ref'] / r['s6_scan']:.2f}x faster")


if __name__ == "__main__":
    main()

"""What COFFEE's feedback loop costs, measured side by side in one run.

    python bench/coffee_speed.py            # table 1's shape (b 512, L 16, D 16, n 8) and L = 256
    python bench/coffee_speed.py --quick
    python bench/coffee_speed.py --quick --no-compile   # without the torch.compile variant (~30 s to compile)

One training step's forward + backward of the SSM layer alone (random inputs), medians of
--repeats interleaved rounds (after two warm-up rounds: TorchScript profiles its first runs), for:
  * COFFEE, step-by-step reference (autograd records every op of every step)
  * COFFEE, fast path (TorchScript loop, hand-written adjoint: one autograd node)
  * COFFEE, the reference loop under torch.compile (inductor; unrolled over L, so compiled only for
    L <= --compile-max-len; its compile time is printed apart and left out of the medians)
  * S6, step-by-step reference and S6's parallel (Hillis-Steele) scan
COFFEE's Delta(k) depends on x(k-1) (eq. 5), so no parallel scan applies: its cost is L sequential
steps. These 2-core machines are shared and noisy: quote the ratios, measured in the same run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interleaved, medians, parse, parser, seconds, write_json  # noqa: E402

from picaso_core.light.defaults import count  # noqa: E402


def step(layer, u, fast: bool):
    """One forward + backward of `layer` on `u`."""
    def run():
        y, _ = layer(u, fast=fast)
        y.square().mean().backward()
    return run


def compiled(layer):
    """The layer under torch.compile, or None where inductor cannot compile here (no C compiler, ...)."""
    import torch  # here and in main, not at the top: --help and a bad value answer at once (issue 48)

    try:
        f = torch.compile(layer)
        y, _ = f(torch.randn(2, 3, layer.lam.shape[0]), fast=False)
        y.sum().backward()
        return f
    except Exception as e:  # noqa: BLE001 -- report and go on without it
        print(f"torch.compile unavailable here: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        return None


def main() -> None:
    p = parser(__doc__, threads=1, repeats=7, quick="table 1's shape only (no L = 256)",
               helps={"threads": "torch threads (the CLI's default, 1: see its --threads)"})
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variant")
    p.add_argument("--compile-max-len", type=count(1), default=64,
                   help="compile only up to this L (the loop is unrolled)")
    a = parse(p)
    import torch

    from picaso_core.lab.coffee.model import S6, Coffee

    shapes = [(512, 16, 16, 8)] + ([] if a.quick else [(64, 256, 16, 8)])
    torch.manual_seed(0)
    figures, ratios = {}, {}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ms per forward + backward (median of {a.repeats})")
    for b, l, d, n in shapes:
        u = torch.randn(b, l, d, requires_grad=True)
        cof, s6 = Coffee(d, n, learn_b=True, output_filter=True), S6(d, n)
        fns = {name: step(m, u, fast) for name, m, fast in
               [("coffee_ref", cof, False), ("coffee_fast", cof, True), ("s6_ref", s6, False), ("s6_scan", s6, True)]}
        note, compile_s = "", None
        if not a.no_compile and l <= a.compile_max_len:
            f = compiled(cof)
            if f is not None:
                fns["coffee_compiled"] = step(f, u, False)
                compile_s = seconds(fns["coffee_compiled"])  # the first call on u compiles
                note = f" (compiled in {compile_s:.1f} s)"
        r = {k: 1e3 * v for k, v in medians(interleaved(fns, a.repeats, warmup=2)).items()}
        shape = f"b={b} L={l} D={d} n={n}"
        x = ratios[shape] = {"coffee_ref / coffee_fast": r["coffee_ref"] / r["coffee_fast"],
                             "coffee_fast / s6_scan": r["coffee_fast"] / r["s6_scan"],
                             "s6_ref / s6_scan": r["s6_ref"] / r["s6_scan"]}
        if "coffee_compiled" in r:
            x["coffee_ref / coffee_compiled"] = r["coffee_ref"] / r["coffee_compiled"]
        figures[shape] = {"ms": r, "compile_s": compile_s}
        print(f"{shape}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()) + note)
        print(f"  COFFEE fast path: {x['coffee_ref / coffee_fast']:.2f}x faster than its reference; "
              + (f"torch.compile: {x['coffee_ref / coffee_compiled']:.2f}x; " if "coffee_compiled" in r else "")
              + f"COFFEE fast / S6 scan: {x['coffee_fast / s6_scan']:.2f}x; "
              f"S6 scan / S6 loop: {x['s6_ref / s6_scan']:.2f}x faster")
    write_json(a, figures, ratios)


if __name__ == "__main__":
    main()

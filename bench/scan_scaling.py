"""Long contexts: the Mamba-2 scan in blocks of chunks and its inter-chunk pass, vs ssd_minimal's form.

    python bench/scan_scaling.py             # mamba2-130m layer shape, 1k / 4k / 16k tokens, CPU
    python bench/scan_scaling.py --quick     # the demo model's layer shape, shorter sequences
    python bench/scan_scaling.py --device cuda

The chunked SSD scan (picaso_core.engine.scan.ssd_scan_chunked) passes states between its c chunks in one
of two forms (`scan._pass_states`, chosen per device by `scan.PASS_FORM`):
  sequential  one chunk at a time, as mamba_ssm's state-passing kernel does: O(c), c small ops;
  segsum      ssd_minimal.py's (the Mamba-2 paper's listing) [c, c] decay matrix: O(c^2), one matmul.
A log-depth prefix scan (log2(c) rounds, as `selective_scan` does over steps) is the third form:
kept here as a competitor only, for moving O(c log c) memory.
The engine also runs a long sequence in blocks of chunks (`scan.BLOCK_ELEMENTS`), the state
carried across, so that its intermediates ([b, chunks, h, s, s]) stay in cache.
Measured side by side in one run, on the same inputs, for each length:
  * the inter-chunk pass alone, the three forms (and the max |difference| between them)
  * the whole scan (forward): the engine (its device's pass form, in blocks); the engine in one
    piece (no blocks); the engine with the other pass form; the engine before blocks and the
    sequential pass (one piece, segsum pass, i.e. ssd_minimal's listing); time per token
Prints medians of --repeats and the ratios; quote ratios (these 2-core machines are shared and
noisy), absolute times only on a quiet machine or a GPU. The prefix scan is kept here, as a
competitor, and nowhere in the engine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picaso_core.engine import scan  # noqa: E402


def pass_states_prefix(chunk_states, log_decay, h0):
    """A Hillis-Steele prefix scan over the chunks: log2(c) rounds of O(c) work, decays in log space."""
    c = chunk_states.size(1)
    hs = torch.cat([chunk_states[:, :1] + torch.exp(log_decay[:, :1])[..., None, None] * h0[:, None],
                    chunk_states[:, 1:]], dim=1)
    la, off = log_decay, 1
    while off < c:
        hs = torch.cat([hs[:, :off], torch.exp(la[:, off:])[..., None, None] * hs[:, :-off] + hs[:, off:]], dim=1)
        la = torch.cat([la[:, :off], la[:, off:] + la[:, :-off]], dim=1)
        off *= 2
    return torch.cat([h0[:, None], hs[:, :-1]], dim=1), hs[:, -1]


def timed(fn, repeats: int, device: str) -> float:
    fn()  # warm-up: the allocator's first pages, lazy initialisation
    if device == "cuda":
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the demo model's layer shape and shorter sequences")
    ap.add_argument("--lengths", type=int, nargs="+", default=None)
    ap.add_argument("--chunk", type=int, default=None, help="chunk size (default: 256, the checkpoints'; 64 with --quick)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is visible")
    if args.threads:
        torch.set_num_threads(args.threads)
    # one layer's scan: (heads, head dim, groups, state dim)
    h, p, g, n = (16, 32, 1, 64) if args.quick else (24, 64, 1, 128)  # demo model / mamba2-130m
    chunk = args.chunk or (64 if args.quick else 256)
    lengths = args.lengths or ([1024, 4096, 8192] if args.quick else [1024, 4096, 16384])
    dev = args.device
    print(f"one Mamba-2 layer's scan: {h} heads x head dim {p}, state dim {n}, {g} group; chunk {chunk}; "
          f"float32, {dev}, {torch.get_num_threads()} threads; medians of {args.repeats}\n")
    form = scan.PASS_FORM.get(dev, "sequential")
    other = "segsum" if form == "sequential" else "sequential"
    print(f"the engine's inter-chunk pass on {dev}: {form} (scan.PASS_FORM)\n")
    print("| tokens | chunks | pass: sequential | segsum / sequential | prefix scan / sequential | max abs diff | "
          f"scan: engine ({form} pass, blocks) | one piece / engine | {other} pass / engine | "
          "previous (one piece, segsum) / engine | engine µs/token |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    forms = {"sequential": scan._pass_states_sequential, "segsum": scan._pass_states_segsum}
    rows = []
    for L in lengths:
        torch.manual_seed(0)
        x = torch.randn(1, L, h, p, device=dev)
        dt = torch.rand(1, L, h, device=dev) * 0.1
        A = -torch.rand(h, device=dev) * 2 - 0.1
        B, C = torch.randn(1, L, g, n, device=dev), torch.randn(1, L, g, n, device=dev)
        c = -(-L // chunk)
        cs = torch.randn(1, c, g, h // g, p, n, device=dev)
        la = -torch.rand(1, c, g, h // g, device=dev) * 5
        h0 = torch.randn(1, g, h // g, p, n, device=dev)

        def whole_scan():
            return scan.ssd_scan_chunked(x, dt, A, B, C, chunk)

        with torch.no_grad():
            seq = forms["sequential"](cs, la, h0)
            diff = max((a - b).abs().max().item()
                       for f in (scan._pass_states_segsum, pass_states_prefix) for a, b in zip(f(cs, la, h0), seq))
            t_pass = timed(lambda: forms["sequential"](cs, la, h0), args.repeats, dev)
            t_pass_seg = timed(lambda: forms["segsum"](cs, la, h0), args.repeats, dev)
            t_pass_pre = timed(lambda: pass_states_prefix(cs, la, h0), args.repeats, dev)
            y0 = whole_scan()[0]
            t_scan = timed(whole_scan, args.repeats, dev)
            saved = dict(scan.BLOCK_ELEMENTS)
            try:
                scan.PASS_FORM[dev] = other
                diff = max(diff, (whole_scan()[0] - y0).abs().max().item())
                t_other = timed(whole_scan, args.repeats, dev)
                scan.BLOCK_ELEMENTS.update({k: 1 << 62 for k in saved})  # one block: the whole sequence
                scan.PASS_FORM[dev] = "segsum"
                t_prev = timed(whole_scan, args.repeats, dev)
                scan.PASS_FORM[dev] = form
                diff = max(diff, (whole_scan()[0] - y0).abs().max().item())
                t_one = timed(whole_scan, args.repeats, dev)
            finally:
                scan.PASS_FORM[dev] = form
                scan.BLOCK_ELEMENTS.update(saved)
        rows.append((L, t_prev, t_scan))
        print(f"| {L:,} | {c} | {t_pass * 1e3:.1f} ms | {t_pass_seg / t_pass:.2f}x | {t_pass_pre / t_pass:.2f}x | "
              f"{diff:.1e} | {t_scan * 1e3:.1f} ms | {t_one / t_scan:.2f}x | {t_other / t_scan:.2f}x | "
              f"{t_prev / t_scan:.2f}x | {t_scan / L * 1e6:.2f} |", flush=True)
    (l0, s0, f0), (l1, s1, f1) = rows[0], rows[-1]
    print(f"\n{l0:,} -> {l1:,} tokens ({l1 / l0:.0f}x): the whole scan costs {f1 / f0:.1f}x with the engine, "
          f"{s1 / s0:.1f}x with the previous engine (linear would be {l1 / l0:.0f}x)")


if __name__ == "__main__":
    main()

"""Long contexts: the Mamba-2 scan in blocks of chunks and its inter-chunk pass, vs ssd_minimal's form.

    python bench/scan_scaling.py             # mamba2-130m layer shape, 1k / 4k / 16k tokens, CPU
    python bench/scan_scaling.py --quick     # the demo model's layer shape, shorter sequences
    python bench/scan_scaling.py --device cuda

The chunked SSD scan (picaso_core.engine.scan.ssd_scan_chunked) passes states between its c chunks in one
of two forms (`scan._pass_states`, chosen per device by `scan.PASS_FORM`):
  sequential  one chunk at a time, as mamba_ssm's state-passing kernel does: O(c), c small ops;
  segsum      ssd_minimal.py's (the Mamba-2 paper's listing) [c, c] decay matrix: O(c^2), one matmul.
A log-depth prefix scan (log2(c) rounds, as `selective_scan` does over steps) is the third form:
a competitor only, for moving O(c log c) memory.
The engine also runs a long sequence in blocks of chunks (`scan.BLOCK_ELEMENTS`), the state
carried across, so that its intermediates ([b, chunks, h, s, s]) stay in cache.
Measured side by side in one run (interleaved rounds), on the same inputs, for each length:
  * the inter-chunk pass alone, the three forms (and the max |difference| between them)
  * the whole scan (forward): the engine (its device's pass form, in blocks); the engine in one
    piece (no blocks); the engine with the other pass form; ssd_minimal's form (one piece, segsum
    pass); time per token
Prints medians of --repeats and the ratios; quote ratios (these 2-core machines are shared and
noisy), absolute times only on a quiet machine or a GPU. The prefix scan lives here, as a
competitor, and nowhere in the engine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interleaved, medians, parse, parser, row, table, write_json  # noqa: E402

from picaso_core.light.defaults import count  # noqa: E402


def pass_states_prefix(chunk_states, log_decay, h0):
    """A Hillis-Steele prefix scan over the chunks: log2(c) rounds of O(c) work, decays in log space."""
    import torch  # here and below, not at the top: --help and a bad value answer at once (issue 48)

    c = chunk_states.size(1)
    hs = torch.cat([chunk_states[:, :1] + torch.exp(log_decay[:, :1])[..., None, None] * h0[:, None],
                    chunk_states[:, 1:]], dim=1)
    la, off = log_decay, 1
    while off < c:
        hs = torch.cat([hs[:, :off], torch.exp(la[:, off:])[..., None, None] * hs[:, :-off] + hs[:, off:]], dim=1)
        la = torch.cat([la[:, :off], la[:, off:] + la[:, :-off]], dim=1)
        off *= 2
    return torch.cat([h0[:, None], hs[:, :-1]], dim=1), hs[:, -1]


def configured(fn, dev: str, form: str, one_piece: bool):
    """fn run with the engine's inter-chunk pass on `dev` set to `form`, in one block where
    one_piece (the whole sequence at once), both restored after the call."""
    from picaso_core.engine import scan

    def run():
        saved_form, saved_blocks = scan.PASS_FORM.get(dev), dict(scan.BLOCK_ELEMENTS)
        scan.PASS_FORM[dev] = form
        if one_piece:
            scan.BLOCK_ELEMENTS.update({k: 1 << 62 for k in saved_blocks})
        try:
            return fn()
        finally:
            scan.PASS_FORM[dev] = saved_form
            scan.BLOCK_ELEMENTS.update(saved_blocks)
    return run


def main(argv=None) -> None:
    ap = parser(__doc__, device="cpu", repeats=5, quick="the demo model's layer shape and shorter sequences")
    ap.add_argument("--lengths", type=count(1), nargs="+", default=None)
    ap.add_argument("--chunk", type=count(1), default=None,
                    help="chunk size (default: 256, the checkpoints'; 64 with --quick)")
    args = parse(ap, argv)
    import torch

    from picaso_core.engine import scan

    # one layer's scan: (heads, head dim, groups, state dim)
    h, p, g, n = (16, 32, 1, 64) if args.quick else (24, 64, 1, 128)  # demo model / mamba2-130m
    chunk = args.chunk or (64 if args.quick else 256)
    lengths = args.lengths or ([1024, 4096, 8192] if args.quick else [1024, 4096, 16384])
    dev = args.device
    print(f"one Mamba-2 layer's scan: {h} heads x head dim {p}, state dim {n}, {g} group; chunk {chunk}; "
          f"float32, {dev}, {torch.get_num_threads()} threads; medians of {args.repeats} interleaved rounds\n")
    form = scan.PASS_FORM.get(dev, "sequential")
    other = "segsum" if form == "sequential" else "sequential"
    print(f"the engine's inter-chunk pass on {dev}: {form} (scan.PASS_FORM)\n")
    minimal = "ssd_minimal's form"
    print(table([], ["tokens", "chunks", "pass: sequential", "segsum / sequential", "prefix scan / sequential",
                     "max abs diff", f"scan: engine ({form} pass, blocks)", "one piece / engine",
                     f"{other} pass / engine", f"{minimal} (one piece, segsum) / engine", "engine µs/token"]))
    figures, ratios = {}, {}
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

        passes = {"sequential": lambda: scan._pass_states_sequential(cs, la, h0),
                  "segsum": lambda: scan._pass_states_segsum(cs, la, h0),
                  "prefix scan": lambda: pass_states_prefix(cs, la, h0)}
        scans = {"engine": configured(whole_scan, dev, form, one_piece=False),
                 "one piece": configured(whole_scan, dev, form, one_piece=True),
                 f"{other} pass": configured(whole_scan, dev, other, one_piece=False),
                 minimal: configured(whole_scan, dev, "segsum", one_piece=True)}
        with torch.no_grad():
            seq = passes["sequential"]()
            diff = max((a - b).abs().max().item() for f in ("segsum", "prefix scan") for a, b in zip(passes[f](), seq))
            y0 = scans["engine"]()[0]
            diff = max(diff, *((fn()[0] - y0).abs().max().item() for k, fn in scans.items() if k != "engine"))
            tp = medians(interleaved(passes, args.repeats))
            ts = medians(interleaved(scans, args.repeats))
        print(row([f"{L:,}", c, f"{tp['sequential'] * 1e3:.1f} ms", f"{tp['segsum'] / tp['sequential']:.2f}x",
                   f"{tp['prefix scan'] / tp['sequential']:.2f}x", f"{diff:.1e}", f"{ts['engine'] * 1e3:.1f} ms",
                   *(f"{ts[k] / ts['engine']:.2f}x" for k in list(scans)[1:]), f"{ts['engine'] / L * 1e6:.2f}"]),
              flush=True)
        figures[L] = {"chunks": c, "pass_s": tp, "scan_s": ts, "max_abs_diff": diff}
        ratios[L] = {"pass_over_sequential": {k: v / tp["sequential"] for k, v in tp.items()},
                     "scan_over_engine": {k: v / ts["engine"] for k, v in ts.items()}}
    l0, l1 = lengths[0], lengths[-1]
    f0, f1 = figures[l0]["scan_s"], figures[l1]["scan_s"]
    print(f"\n{l0:,} -> {l1:,} tokens ({l1 / l0:.0f}x): the whole scan costs {f1['engine'] / f0['engine']:.1f}x with "
          f"the engine, {f1[minimal] / f0[minimal]:.1f}x in {minimal} "
          f"(linear would be {l1 / l0:.0f}x)")
    write_json(args, figures, ratios)


if __name__ == "__main__":
    main()

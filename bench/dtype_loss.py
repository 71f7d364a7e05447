"""Each method's continuation loss in bfloat16 / float16 against float32.

    python bench/dtype_loss.py [--model demo] [--samples 40] [--device cpu|cuda] [--dtypes bfloat16,float16]

Loads the model once per dtype (`load_model(..., dtype=)`: weights and activations in that dtype,
states float32), runs every method of `evaluate_samples` on the first --samples held-out demo
samples with their own candidate contexts (the store's context suffix), and prints each method's
mean loss per dtype and its relative change vs float32, side by side in one run. On CPU the
half-precision matmuls are emulated and slow; the numbers, not the times, are the point here.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, comma_list, parse, parser, write_json  # noqa: E402

from picaso_core.data import load_corpus  # noqa: E402
from picaso_core.analysis.evaluate import METHODS, evaluate_samples  # noqa: E402
from picaso_core.analysis.sweep import CONTEXT_SUFFIX  # noqa: E402  (the app store's suffix too)
from picaso_core.light.defaults import DTYPES, count  # noqa: E402


def main() -> None:
    p = parser(__doc__, device="cpu", devices=None, helps={"threads": "torch CPU threads"})
    p.add_argument("--model", default="demo")
    p.add_argument("--samples", type=count(1), default=40)
    p.add_argument("--dtypes", type=comma_list(choices=DTYPES), default="bfloat16,float16")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "dtype_loss.json"))
    args = parse(p)
    # after the arguments: --help and a bad value answer without importing torch (issue 48)
    import torch

    from picaso_core.engine.loading import load_model

    samples = load_corpus("demo", "test").samples[: args.samples]
    rows, secs = {}, {}
    for name in ["float32", *[d for d in args.dtypes.split(",") if d]]:
        model = load_model(args.model, device=args.device, dtype=getattr(torch, name))
        t = time.perf_counter()
        summary = evaluate_samples(model, samples, context_suffix=CONTEXT_SUFFIX)
        secs[name] = time.perf_counter() - t
        rows[name] = summary.mean_loss
    dtypes = list(rows)
    print(f"model {args.model} · {args.device} · {len(samples)} held-out demo samples, own contexts · mean loss "
          "(nats/token), change vs float32")
    print(f"{'method':<14}" + "".join(f"{d:>12}" for d in dtypes) + "".join(f"{'Δ ' + d:>14}" for d in dtypes[1:]))
    for m in METHODS:
        ref = rows["float32"][m]
        print(f"{m:<14}" + "".join(f"{rows[d][m]:>12.4f}" for d in dtypes)
              + "".join(f"{100 * (rows[d][m] - ref) / ref:>+13.2f}%" for d in dtypes[1:]))
    print("seconds       " + "".join(f"{secs[d]:>12.1f}" for d in dtypes))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"samples": len(samples), "device": args.device, "loss": rows, "seconds": secs},
                                         indent=1))
    write_json(args, {"loss": rows, "seconds": secs},
               {d: {m: (rows[d][m] - rows["float32"][m]) / rows["float32"][m] for m in METHODS} for d in dtypes[1:]})


if __name__ == "__main__":
    main()

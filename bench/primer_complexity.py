"""The Primer's complexity table, measured: attention vs SSM over T tokens and per decode step.

    python bench/primer_complexity.py                                   # T = 256 .. 16384, CPU
    python bench/primer_complexity.py --threads 1 --ship assets/primer_complexity.json
    python bench/primer_complexity.py --device cuda                     # on a GPU

Runs picaso_core.lab.complexity.measure_complexity at the demo model's width (16 heads x 32, state 64,
chunk 64): all four series at each T in one process, side by side. Prints the table (ms and MiB
per call, log-log slopes) beside the slides' expectations, and writes JSON to
bench/out/primer_complexity.json (and to --ship, which the Primer tab shows before a live run).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, comma_list, parse, parser, table, write_json  # noqa: E402

from picaso_core.light.defaults import count  # noqa: E402

EXPECTED = {"attention_prefill": ("O(T^2)", 2), "ssm_scan": ("O(T)", 1), "attention_step": ("O(T)", 1),
            "ssm_step": ("O(1)", 0)}


def complexity_table(r: dict) -> str:
    from picaso_core.lab.complexity import SERIES  # imports torch: here and in main, after the arguments are read

    rows = [[T, *(f"{r['seconds'][k][i] * 1e3:.3g}" for k in SERIES), *(f"{r['peak_bytes'][k][i] / 2**20:.3g}"
                                                                       for k in SERIES)]
            for i, T in enumerate(r["lengths"])]
    rows.append(["slope", *(f"**{r['slopes'][k]:.2f}**" for k in SERIES),
                 *(f"**{r['memory_slopes'][k]:.2f}**" for k in SERIES)])
    rows.append(["slides", *(f"{EXPECTED[k][0]}: {EXPECTED[k][1]}" for k in SERIES),
                 "O(T^2): 2", "O(T): 1", "O(T): 1", "O(1): 0"])
    return table(rows, ["T", *(f"{k} ms" for k in SERIES), *(f"{k} MiB" for k in SERIES)])


def main(argv=None) -> None:
    p = parser(__doc__, device="cpu", devices=None, helps={"threads": "torch CPU threads (default: torch's)"})
    p.add_argument("--lengths", type=comma_list(count(1)), default="256,512,1024,2048,4096,8192,16384")
    p.add_argument("--runs", "--repeats", type=count(1), default=1,
                   help="measure this many times and keep each point's fastest (contention only adds time)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "primer_complexity.json"))
    p.add_argument("--ship", default=None, help="also write the JSON here (assets/primer_complexity.json)")
    args = parse(p, argv)
    from picaso_core.lab.complexity import SERIES, loglog_slope, measure_complexity

    lengths = [int(t) for t in args.lengths.split(",")]
    t0 = time.perf_counter()
    runs = [measure_complexity(lengths, args.device, threads=args.threads,
                               progress=lambda d, t, desc: print(f"[run {i + 1}: {d}/{t}] {desc}", file=sys.stderr, flush=True))
            for i in range(args.runs)]
    r = runs[0]
    r["seconds"] = {k: [min(x["seconds"][k][j] for x in runs) for j in range(len(lengths))] for k in SERIES}
    r["slopes"] = {k: loglog_slope(lengths, r["seconds"][k]) for k in SERIES}
    r["runs"] = args.runs
    r["total_seconds"] = time.perf_counter() - t0
    r["command"] = "python bench/primer_complexity.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(complexity_table(r))
    print(f"\n{r['device']}, {r['threads']} thread(s), fastest of {args.runs} run(s), {r['total_seconds']:.0f} s in all")
    for path in filter(None, (args.out, args.ship)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(r, indent=1))
    write_json(args, {k: r[k] for k in ("lengths", "seconds", "peak_bytes", "slopes", "memory_slopes")},
               {k: {f"{T}/{r['lengths'][0]}": r["seconds"][k][i] / r["seconds"][k][0] for i, T in enumerate(r["lengths"])}
                for k in SERIES})


if __name__ == "__main__":
    main()

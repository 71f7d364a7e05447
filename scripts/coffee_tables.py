"""Run every paper-vs-ours row of the COFFEE lab (README "COFFEE lab", tables 1-7) through the CLI
and write assets/coffee/results.json (read by the app's COFFEE lab tab) and a markdown table.

    python scripts/coffee_tables.py                 # all rows, one after the other (about an hour of training on 2 shared cores)
    python scripts/coffee_tables.py t1_coffee t1_s6  # some rows

Each row is one `python -m picaso_core.lab.coffee ...` command (printed beside its result); runs are
capped by --max-seconds of training time, and the CPU is shared: the seconds are wall-clock on
whatever load there was.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from picaso_core.lab.coffee import main  # noqa: E402

OUT = ROOT / "assets" / "coffee" / "results.json"
IH = "--task ih --batch 128 --steps 20000 --eval-every 200 --eval-size 10000 --stop-accuracy 0.99"
ROWS = {
    "t1_coffee": f"{IH} --model coffee --max-seconds 180",
    "t1_s6": f"{IH} --model s6 --max-seconds 180",
    "t1_coffee_099": f"{IH} --model coffee",   # no time cap: the steps COFFEE needs to reach 0.99
    "t1_s6_5400": "--task ih --batch 128 --steps 5400 --eval-every 200 --eval-size 10000 --model s6",  # COFFEE's steps to 0.99
    "t2_coffee": f"{IH} --model coffee --n 1 --d 9 --variant minimal --max-seconds 600",
    "t3_noise1": f"{IH} --model coffee --noise-len 1 --max-seconds 420",
    "t3_noise2": f"{IH} --model coffee --noise-len 2 --max-seconds 420",
    "t4_coffee": f"{IH} --model coffee --target-len 2 --max-seconds 420",
    "t5_coffee": f"{IH} --model coffee --trigger-len 2 --max-seconds 300",
    "t6_32": f"{IH} --model coffee --seq-len 32 --max-seconds 420",
    "t6_64": f"{IH} --model coffee --seq-len 64 --max-seconds 120",
    "t7_s6": "--task digits --model s6 --n 2 --batch 64 --steps 3000 --eval-every 100 --lr 0.01 --max-seconds 120",
    "t7_coffee": "--task digits --model coffee --n 2 --batch 64 --steps 3000 --eval-every 100 --lr 0.01 --max-seconds 120",
    "t7_coffee_filter": "--task digits --model coffee --n 2 --output-filter --batch 64 --steps 3000 --eval-every 100 --lr 0.01 --max-seconds 120",
    "t7_s6_16": "--task digits --model s6 --n 16 --batch 64 --steps 3000 --eval-every 100 --lr 0.01 --max-seconds 120",
}


def run(keys: list[str]) -> dict:
    for key in keys:
        args = ROWS[key].split()
        print(f"== {key}: python -m picaso_core.lab.coffee {ROWS[key]}", flush=True)
        out = main(args)
        out["command"] = f"python -m picaso_core.lab.coffee {ROWS[key]}"
        # re-read before writing: two queues of rows may run side by side
        results = json.loads(OUT.read_text()) if OUT.exists() else {}
        results[key] = out
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=1))
    return json.loads(OUT.read_text())


if __name__ == "__main__":
    keys = sys.argv[1:] or list(ROWS)
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}: choose from {', '.join(ROWS)}")
    res = run(keys)
    for k in keys:
        r = res[k]
        print(f"| {k} | {r['params']} | {r['accuracy']:.4f} | {r['loss']:.4f} | {r['step']} steps, {r['seconds']:.0f} s | `{r['command']}` |")

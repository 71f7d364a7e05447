"""One bench script, two versions of the code, side by side in one run: is a change's speed unchanged?

    python bench/ab_trees.py --base 64fe918 --rounds 5 -- compose_speed.py --threads 1
    python bench/ab_trees.py --base 64fe918 --rounds 5 -- decode_speed.py --shape demo --threads 1

The base revision is exported once (`git archive`) into a temporary folder. Each round runs the
bench script (a `bench/*.py` that writes `--json`) once in the base tree and once in this working
tree, in alternating order, each in a fresh process, so both see the same machine load over time.
Every timing leaf of the script's "figures" (a key path ending in `_s`, or under a `*_s` key) is
reduced to its median over the rounds, and the table prints base, new and new / base. A ratio
inside the spread the rounds themselves show (printed as "noise": half the range of new/base over
the rounds) is no change.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--base", required=True, help="git revision of the code to compare against (e.g. 64fe918)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved runs of each tree (default 5)")
    p.add_argument("--min-ms", type=float, default=0.05, help="leave out timings below this (ms)")
    p.add_argument("bench", nargs=argparse.REMAINDER,
                   help="-- then the bench script (a file in bench/) and its arguments")
    args = p.parse_args(argv)
    cmd = [a for a in args.bench if a != "--"] if args.bench[:1] == ["--"] else list(args.bench)
    if not cmd:
        p.error("name the bench script after --, e.g. -- compose_speed.py --threads 1")
    if not (ROOT / "bench" / cmd[0]).is_file():
        p.error(f"no bench/{cmd[0]}: name a script in bench/, e.g. compose_speed.py")
    if "--json" in cmd:
        p.error("leave out --json: this runner writes each run's JSON itself")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    args.cmd = cmd
    return args


def timing_leaves(node, path=(), under_timing=False):
    """Yield (path, seconds) for every numeric leaf that is a time: its key, or an ancestor's, ends in _s."""
    if isinstance(node, dict):
        for key, value in node.items():
            key = str(key)
            yield from timing_leaves(value, path + (key,), under_timing or key.endswith("_s"))
    elif isinstance(node, (int, float)) and not isinstance(node, bool) and under_timing:
        if math.isfinite(node):
            yield "/".join(path), float(node)


def export(rev: str, into: Path) -> Path:
    tree = into / "base"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=False)
    if archive.returncode:
        sys.exit(f"error: git archive {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def run_once(tree: Path, cmd: list[str], out: Path) -> dict:
    script = tree / "bench" / cmd[0]
    if not script.is_file():
        sys.exit(f"error: {script} is missing in that revision")
    proc = subprocess.run([sys.executable, str(script), *cmd[1:], "--json", str(out)], cwd=tree,
                          capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"error: {script} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.read_text())


def main(argv=None):
    args = parse_args(argv)
    runs = {"base": [], "new": []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ab_trees_") as tmp:
        tmp = Path(tmp)
        trees = {"base": export(args.base, tmp), "new": ROOT}
        for r in range(args.rounds):
            order = ("base", "new") if r % 2 == 0 else ("new", "base")
            for side in order:
                data = run_once(trees[side], args.cmd, tmp / f"{side}{r}.json")
                runs[side].append(dict(timing_leaves(data.get("figures", data))))
            print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    keys = [k for k in runs["new"][0] if all(k in run for run in runs["base"] + runs["new"])]
    rows = []
    for key in keys:
        base = [run[key] for run in runs["base"]]
        new = [run[key] for run in runs["new"]]
        if statistics.median(base) * 1e3 < args.min_ms:
            continue
        per_round = [n / b for n, b in zip(new, base) if b > 0]
        ratio = statistics.median(new) / statistics.median(base)
        noise = (max(per_round) - min(per_round)) / 2 if len(per_round) > 1 else float("nan")
        rows.append((key, statistics.median(base) * 1e3, statistics.median(new) * 1e3, ratio, noise))
    print(f"# bench/{' '.join(args.cmd)}: base {args.base} vs this tree, {args.rounds} interleaved rounds\n")
    print("| figure | base ms | new ms | new / base | noise (half range of per-round ratios) |")
    print("|---|---|---|---|---|")
    for key, b, n, ratio, noise in rows:
        print(f"| {key} | {b:.2f} | {n:.2f} | {ratio:.3f} | ±{noise:.3f} |")
    ratios = [row[3] for row in rows]
    if ratios:
        gmean = math.exp(statistics.fmean(math.log(x) for x in ratios))
        print(f"\ngeometric mean of new / base over {len(ratios)} figures: {gmean:.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

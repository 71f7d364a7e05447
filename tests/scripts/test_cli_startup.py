"""Every command line of the project answers `--help` and a bad value at once (issue 48, item 7):
it reads its arguments before its heavy imports (torch, gradio, the model), so `--help` exits 0 with
its usage, and a bad value (checked by an argparse `type=` where it is a value) exits 2 with ONE
`error:` line and no traceback, before any model loads.

app.py and the package's commands are timed one after another (no other run beside them): under
2 s each on an idle 2-core machine (0.2-0.9 s measured); the bound asserted is BOUND_S, with
headroom for a busy one. scripts/ and bench/ are checked in parallel, their seconds printed; the
ones that still import torch before their arguments are in SLOW, with the seconds their `--help`
took, and are not run here (they would take minutes together).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 4.0  # issue 48: under 2 s on an idle 2-core machine; x2 for a machine busy with other work
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}

# command -> a bad value it must refuse at once with one `error:` line
PACKAGE_CLIS = {
    "app.py": ["--workers", "two"],
    "-m picaso_core.experiments": ["--ks", "0-x"],
    "-m picaso_core.store build": ["--out", "x", "--batch-size", "0"],
    "-m picaso_core.store check": ["x", "--no-such-flag"],
    "-m picaso_core.ui.tour export": ["out", "--app-url", "example.org"],
    "-m picaso_core.space prepare": ["--kind", "nowhere", "out"],
    "-m picaso_core.lab.coffee": ["--task", "copy"],
    "-m picaso_core.analysis.attribution_eval": ["--ablations", "1"],
}
# scripts/ and bench/ whose --help still imports torch (or loads a model) before reading its
# arguments: seconds its --help took on the busy 2-core machine (issue 48's session), not run here
SLOW = {
    "scripts/eval_demo.py": 5.9, "scripts/finetune_demo.py": 9.1, "scripts/measure_attribution.py": 10.8,
    "scripts/measure_landscape.py": 13.3, "scripts/measure_soup.py": 24.4, "scripts/train_demo.py": 6.0,
    "bench/attribution_speed.py": 5.8, "bench/coffee_speed.py": 5.4, "bench/compose_speed.py": 8.8,
    "bench/decode_speed.py": 9.7, "bench/dtype_loss.py": 11.5, "bench/engine_speed.py": 10.0,
    "bench/finetune_speed.py": 10.8, "bench/gpu_core.py": 6.9, "bench/primer_complexity.py": 6.2,
    "bench/scan_scaling.py": 6.6, "bench/store_scaleout.py": 8.7, "bench/sweep_speed.py": 10.9,
}


def run(command: str, args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, *command.split(), *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=120)
    return r, time.perf_counter() - t


def script_clis() -> list[str]:
    """scripts/*.py and bench/*.py that parse a command line (argparse, or bench/harness.py's)."""
    found = []
    for path in sorted([*(ROOT / "scripts").glob("*.py"), *(ROOT / "bench").glob("*.py")]):
        text = path.read_text(encoding="utf-8")
        if re.search(r"__name__ == .__main__.", text) and re.search(r"argparse|harness\.parser|\bparser\(", text):
            found.append(str(path.relative_to(ROOT)))
    return found


def assert_help(r: subprocess.CompletedProcess, command: str) -> None:
    assert r.returncode == 0, f"{command} --help: exit {r.returncode}\n{r.stderr[-2000:]}"
    assert "usage:" in r.stdout and "Traceback" not in r.stderr, command


def assert_one_error_line(r: subprocess.CompletedProcess, command: str) -> None:
    assert r.returncode == 2, f"{command}: exit {r.returncode}, not argparse's 2\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr, f"{command}: a traceback\n{r.stderr[-2000:]}"
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, f"{command}: {len(errors)} error lines\n{r.stderr[-2000:]}"
    assert r.stdout == "", f"{command} printed before refusing: {r.stdout[-500:]}"


@pytest.fixture(scope="module")
def package_runs() -> dict:
    """Each package command's --help and bad value, one after another (timed alone)."""
    out = {}
    for command, bad in PACKAGE_CLIS.items():
        out[command] = (run(command, ["--help"]), run(command, bad))
    print("\n" + "\n".join(f"{c}: --help {h[1]:.2f} s, bad value {b[1]:.2f} s" for c, (h, b) in out.items()))
    return out


@pytest.mark.parametrize("command", PACKAGE_CLIS)
def test_a_package_command_answers_help_at_once(command, package_runs):
    (r, seconds), _ = package_runs[command]
    assert_help(r, command)
    assert seconds < BOUND_S, f"{command} --help took {seconds:.1f} s"


@pytest.mark.parametrize("command", PACKAGE_CLIS)
def test_a_package_command_refuses_a_bad_value_in_one_line_at_once(command, package_runs):
    _, (r, seconds) = package_runs[command]
    assert_one_error_line(r, command)
    assert seconds < BOUND_S, f"{command} {' '.join(PACKAGE_CLIS[command])} took {seconds:.1f} s"


def test_the_experiments_ks_error_names_the_value_and_the_fix(package_runs):
    _, (r, _) = package_runs["-m picaso_core.experiments"]
    assert "argument --ks: bad k list '0-x': use a range like 0-10" in r.stderr


def test_scripts_and_benches_answer_help_and_a_mistyped_flag_in_one_line():
    clis = [c for c in script_clis() if c not in SLOW]
    assert len(clis) >= 8, clis
    jobs = [(c, args) for c in clis for args in (("--help",), ("--no-such-flag",))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(jobs, pool.map(lambda job: run(job[0], list(job[1])), jobs)))
    print("\n" + "\n".join(f"{c} {' '.join(a)}: {s:.2f} s" for (c, a), (_, s) in results.items()))
    for (command, args), (r, seconds) in results.items():
        (assert_help if args == ("--help",) else assert_one_error_line)(r, command)
        assert seconds < 3 * BOUND_S, f"{command} {args[0]} took {seconds:.1f} s: does it import torch before parsing?"


def test_slow_lists_only_existing_clis():
    assert set(SLOW) <= set(script_clis())


def test_the_store_clis_help_names_the_formats_files():
    """store/cli.py writes format.py's file names out (format.py imports torch): they must agree."""
    from picaso_core.store import cli, format

    assert (cli.META_FILE, cli.DAMAGED) == (format.META_FILE, format.DAMAGED)


def test_the_readme_says_which_torch_the_first_command_installs():
    """Right after its two commands: CUDA from the public index, and the CPU-only variant's command."""
    body = (ROOT / "README.md").read_text(encoding="utf-8").split("```\n", 2)[1]  # after the commands' block
    first = body.strip().split("\n\n")[0]
    assert "CUDA" in first and "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in first


def test_no_sentence_speaks_of_these_machines():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    texts = [f for f in files if f.endswith((".md", ".txt", ".py", ".toml", ".cfg")) or f == "Dockerfile"]
    phrase = " ".join(("these", "machines"))  # spelled apart, so that this file, once tracked, is not a hit
    hits = [f for f in texts if (ROOT / f).is_file() and phrase in (ROOT / f).read_text(errors="ignore").lower()]
    assert hits == []

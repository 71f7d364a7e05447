"""Every command line of the project answers `--help` and a bad value at once (issue 48, item 7):
it reads its arguments before its heavy imports (torch, gradio, the model), so `--help` exits 0 with
its usage, and a bad value (checked by an argparse `type=` where it is a value) exits 2 with ONE
`error:` line and no traceback, before any model loads.

app.py and the package's commands are timed one after another (no other run beside them): under
2 s each on an idle 2-core machine (0.2-0.9 s measured); the bound asserted is BOUND_S, with
headroom for a busy one. scripts/ and bench/ (32 commands) run two at a time, their seconds printed
(0.05-1.1 s each measured; 5-24 s when they imported torch first); one over the bound runs again alone, the
faster time counting. Each also runs under `python -X importtime`: neither answer may import torch
or gradio, which a loaded machine's timing alone could miss (torch takes ~1.5 s on an idle one).
"""

from __future__ import annotations

import importlib.util
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
# scripts/ and bench/: a bad value each must refuse at once, and the argument its error line names.
# Each run appends --no-such-flag, which argparse refuses only after every value is read: a value
# let through fails the test on the name at once instead of starting the script's work.
SCRIPT_BAD_VALUES = {
    "scripts/build_demo_data.py": ("--seed x", "--seed"),
    "scripts/coffee_tables.py": ("t1_s6 t9_nope", "ROW"),
    "scripts/eval_demo.py": ("--samples 0 --no-card", "--samples"),
    "scripts/fault_table.py": ("--port 0", "--port"),
    "scripts/fidelity.py": ("--check=yes", "--check"),
    "scripts/graft_demo_hybrid.py": ("--out /tmp/x --seed x", "--seed"),
    "scripts/measure_hybrid.py": ("--samples 0", "--samples"),
    "scripts/finetune_demo.py": ("--lm-share 1", "--lm-share"),
    "scripts/measure_attribution.py": ("--methods loi,x --no-card", "--methods"),
    "scripts/measure_landscape.py": ("--threads 0 --no-write", "--threads"),
    "scripts/measure_soup.py": ("--chunk 0 --no-card", "--chunk"),
    "scripts/measure_tour.py": ("http://127.0.0.1:9 --shots 1,x", "--shots"),
    "scripts/screenshots.py": ("--colors 300", "--colors"),
    "scripts/train_demo.py": ("--warmup 0", "--warmup"),
    "bench/ab_trees.py": ("--base HEAD --rounds 0 -- compose_speed.py", "--rounds"),
    "bench/app_latency.py": ("--concurrency 1,x", "--concurrency"),
    "bench/attribution_speed.py": ("--ablations 1", "--ablations"),
    "bench/burst.py": ("--burst 0", "--burst"),
    "bench/cache_hits.py": ("--clicks 0", "--clicks"),
    "bench/caps_timing.py": ("nope", "PART"),
    "bench/caps_worst.py": ("nope", "PART"),
    "bench/coffee_speed.py": ("--compile-max-len 0", "--compile-max-len"),
    "bench/compose_speed.py": ("--repeats 0", "--repeats"),
    "bench/decode_speed.py": ("--lengths 16,0", "--lengths"),
    "bench/dtype_loss.py": ("--dtypes bfloat16,fp8", "--dtypes"),
    "bench/engine_speed.py": ("--contexts 1", "--contexts"),
    "bench/finetune_speed.py": ("--ks 5,x", "--ks"),
    "bench/gpu_core.py": ("--only accuracy,speed", "--only"),
    "bench/primer_complexity.py": ("--runs 0", "--runs"),
    "bench/room.py": ("", "unrecognized arguments"),  # its own flags are its owners'
    "bench/scan_scaling.py": ("--chunk 0", "--chunk"),
    "bench/soak.py": ("", "unrecognized arguments"),
    "bench/store_scaleout.py": ("--parts speed,x", "--parts"),
    "bench/sweep_speed.py": ("--ks 0-x", "--ks"),
    "bench/umap_first_map.py": ("--threads -1", "--threads"),
}
HEAVY = ("torch", "gradio")  # what a command's --help and argument errors must not import


def run(command: str, args: list[str], *flags: str) -> tuple[subprocess.CompletedProcess, float]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, *flags, *command.split(), *args], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=120)
    return r, time.perf_counter() - t


def run_importtime(command: str, args: list[str]) -> tuple[subprocess.CompletedProcess, float, set[str]]:
    """`run` under -X importtime: the top-level packages it imported apart, stderr without their lines."""
    r, seconds = run(command, args, "-X", "importtime")
    lines = r.stderr.splitlines(keepends=True)
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines if line.startswith("import time:")}
    r.stderr = "".join(line for line in lines if not line.startswith("import time:"))
    return r, seconds, imported


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


@pytest.fixture(scope="module")
def script_runs() -> dict:
    """(script, "help" | "bad") -> (result, seconds, packages imported), two runs at a time; a run over
    BOUND_S (a load spike, or an import before parsing) runs again alone and keeps the faster time."""
    jobs = [(c, kind) for c in script_clis() if c in SCRIPT_BAD_VALUES for kind in ("help", "bad")]

    def one(job):
        command, kind = job
        return run_importtime(command, ["--help"] if kind == "help"
                              else [*SCRIPT_BAD_VALUES[command][0].split(), "--no-such-flag"])

    with ThreadPoolExecutor(max_workers=2) as pool:
        out = dict(zip(jobs, pool.map(one, jobs)))
    for job, (r, seconds, imported) in list(out.items()):
        if seconds >= BOUND_S:
            again = one(job)
            out[job] = (r, min(seconds, again[1]), imported | again[2])
    print("\n" + "\n".join(f"{c} {k}: {s:.2f} s" for (c, k), (_, s, _) in out.items()))
    return out


def test_every_script_has_a_bad_value_to_refuse():
    assert set(SCRIPT_BAD_VALUES) == set(script_clis())


@pytest.mark.parametrize("script", SCRIPT_BAD_VALUES)
def test_a_script_answers_help_at_once_without_torch(script, script_runs):
    r, seconds, imported = script_runs[script, "help"]
    assert_help(r, script)
    assert not imported & set(HEAVY), f"{script} --help imports {imported & set(HEAVY)} before reading its arguments"
    assert seconds < BOUND_S, f"{script} --help took {seconds:.1f} s"


@pytest.mark.parametrize("script", SCRIPT_BAD_VALUES)
def test_a_script_refuses_a_bad_value_in_one_line_at_once(script, script_runs):
    r, seconds, imported = script_runs[script, "bad"]
    bad, named = SCRIPT_BAD_VALUES[script]
    assert_one_error_line(r, f"{script} {bad}")
    error = next(line for line in r.stderr.splitlines() if "error:" in line)
    assert f"argument {named}" in error or named in error.split("error:")[1][:40], error
    assert not imported & set(HEAVY), f"{script} {bad}: imports {imported & set(HEAVY)} before refusing it"
    assert seconds < BOUND_S, f"{script} {bad} took {seconds:.1f} s"


def _module(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem + "_under_test", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_names_scripts_keep_for_their_flags_agree_with_the_package():
    """Names a script writes out so that its flags need no torch (their homes import it)."""
    from picaso_core.analysis.attribution import LOO_METHODS
    from picaso_core.engine.loading import DEMO_MODEL_DIR
    from picaso_core.finetune.train import DATA_KINDS, OBJECTIVES
    from picaso_core.ui.tabs.soup_lab import PER_TASK

    assert _module("scripts/measure_attribution.py").LOO_METHODS == LOO_METHODS
    soup = _module("scripts/measure_soup.py")
    assert (soup.PER_TASK, soup.DEMO_MODEL_DIR) == (PER_TASK, DEMO_MODEL_DIR)
    assert _module("bench/finetune_speed.py").OBJECTIVES == OBJECTIVES
    runs = _module("scripts/finetune_demo.py").RUNS.values()
    assert {o for o, _ in runs} == {*OBJECTIVES, "concat"} and {d for _, d in runs} == set(DATA_KINDS)


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

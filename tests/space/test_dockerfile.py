"""The Dockerfile's contract, checked without a container builder (the suite needs no Docker daemon;
the image itself was built and served once, README "Deploying as a Hugging Face Space"): it serves
app.py on 0.0.0.0:7860 as user 1000, and its pre-encoding step fills the very store the app then opens.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import app
from conftest import dockerfile_instructions as instructions

ROOT = Path(__file__).resolve().parents[2]


def image_env() -> dict[str, str]:
    """The image's ENV with ${ARG} references expanded to the ARGs' defaults (a plain `docker build`)."""
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
        if word == "ENV":
            env.update({k: re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), v)
                        for k, v in (kv.split("=", 1) for kv in shlex.split(rest))})
    return env


def test_serves_app_py_on_port_7860_of_every_interface_as_user_1000():
    ins = instructions()
    words = [w for w, _ in ins]
    assert ("EXPOSE", "7860") in ins
    cmd = [json.loads(rest) for w, rest in ins if w == "CMD"]
    assert cmd == [["python", "app.py"]]  # exec form: app.py gets the signals, no shell between
    assert any(w == "RUN" and re.search(r"useradd .*--uid 1000 user\b", rest) for w, rest in ins)
    user_at = max(i for i, w in enumerate(words) if w == "USER")
    assert ins[user_at] == ("USER", "user") and user_at < words.index("CMD")
    args = app.parse_args([], image_env())  # what CMD's app.py reads inside the image
    assert (args.host, args.port, args.model, args.corpus) == ("0.0.0.0", 7860, "demo", "demo")
    assert args.cache_dir == image_env()["PICASO_CACHE"] == image_env()["HOME"] + "/.cache/picaso_explorer"


def test_the_pre_encoding_step_fills_the_store_the_app_opens(tmp_path):
    """Run the Dockerfile's pre-encoding RUN command as it is written, with HOME moved to a temporary
    folder; then the app, reading the image's PICASO_CACHE, finds every demo context encoded."""
    (run,) = [rest for w, rest in instructions() if w == "RUN" and "encode_all=True" in rest]
    env_part, _, command = run.partition(" python ")
    home = tmp_path / "home"
    env = {k: v.replace("/home/user", str(home)) for k, v in image_env().items() if k != "PATH"}
    env.update(dict(kv.split("=", 1) for kv in env_part.split()))
    argv = [sys.executable] + shlex.split(command)
    child_env = {k: v for k, v in {**os.environ, **env}.items() if k != "XDG_CACHE_HOME"}  # the image has none
    done = subprocess.run(argv, cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    from picaso_core.session import load_resources

    args = app.parse_args([], env)
    res = load_resources(args.model, args.corpus, args.split, args.cache_dir, log=lambda msg: None)
    assert len(res.store) == len(res.database) > 0, f"{len(res.store)} of {len(res.database)} encoded"
    assert str(res.store.folder).startswith(str(home / ".cache" / "picaso_explorer"))



def test_numba_cache_built_in_the_image_does_not_depend_on_the_builders_cpu():
    """numba keys each cached function by (LLVM triple, host CPU name, CPU features): the UMAP code the
    image compiles at build time would miss on a Space whose CPU differs. With the image's
    NUMBA_CPU_NAME=generic the key names no CPU of this machine, set before both RUN steps."""
    env = image_env()
    assert env["NUMBA_CPU_NAME"] == "generic"
    ins = instructions()
    env_at = next(i for i, (w, rest) in enumerate(ins) if w == "ENV" and "NUMBA_CPU_NAME=" in rest)
    assert env_at < min(i for i, (w, rest) in enumerate(ins) if w == "RUN" and "python" in rest)
    probe = ("from numba.core.registry import cpu_target; import llvmlite.binding as ll; "
             "print(repr((cpu_target.target_context.codegen().magic_tuple(), ll.get_host_cpu_name())))")
    child_env = {**os.environ, "NUMBA_CPU_NAME": env["NUMBA_CPU_NAME"]}
    done = subprocess.run([sys.executable, "-c", probe], env=child_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (triple, cpu, features), host = ast.literal_eval(done.stdout)
    assert (cpu, features) == ("generic", "") and host not in (cpu, features)


def test_the_gpu_build_installs_the_triton_kernels_without_a_compiler():
    """With PICASO_DEVICE=cuda the image installs mamba-ssm from source without its CUDA build
    (MAMBA_SKIP_CUDA_BUILD), without fetching a prebuilt binary from GitHub (MAMBA_FORCE_BUILD), and
    without its Mamba-3 dependencies (--no-deps, so einops is named); on CPU it installs nothing."""
    (run,) = [rest for w, rest in instructions() if w == "RUN" and "mamba-ssm" in rest]
    assert run.startswith('if [ "${PICASO_DEVICE}" = "cuda" ]; then')
    for flag in ("MAMBA_SKIP_CUDA_BUILD=TRUE", "MAMBA_FORCE_BUILD=TRUE", "--no-deps", "--no-build-isolation", "einops"):
        assert flag in run
    pinned = re.search(r"mamba-ssm==([\w.]+)", run).group(1)
    assert f"mamba-ssm=={pinned}" in (ROOT / "requirements-gpu.txt").read_text()  # one tested version
    probe = subprocess.run(["sh", "-n", "-c", run], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr

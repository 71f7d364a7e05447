"""The checkout is a push-ready Hugging Face Space: the README's front matter is a valid
Space card, the files the Hub refuses as plain git objects go through LFS, and the README documents
the image's own commands (a test reads both). The README begins with its two commands right
after the front matter, and .ci/run finds the test command in it."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

import app
from conftest import CARD_FIELDS, COLORS, dockerfile_instructions as instructions

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# The Space card's allowed values (huggingface.co/docs/hub/spaces-config-reference); its fields and
# colours: conftest's CARD_FIELDS and COLORS.
SDKS = {"gradio", "docker", "static", "streamlit"}
HARDWARE = {"cpu-basic", "cpu-upgrade", "t4-small", "t4-medium", "l4x1", "l4x4", "l40sx1", "l40sx4", "l40sx8",
            "a10g-small", "a10g-large", "a10g-largex2", "a10g-largex4", "a100-large", "h100", "h100x8"}


def front_matter() -> dict:
    import yaml

    m = re.match(r"---\n(.*?)\n---\n", README, re.S)
    assert m, "README.md must start with the Space card's front matter (--- ... ---)"
    return yaml.safe_load(m.group(1))


def test_front_matter_is_a_valid_docker_space_card():
    from huggingface_hub import SpaceCard

    meta = front_matter()
    assert set(meta) <= CARD_FIELDS, f"not Space card fields: {set(meta) - CARD_FIELDS}"
    assert meta["sdk"] == "docker" and meta["app_port"] == 7860
    assert isinstance(meta["title"], str) and meta["title"]
    assert meta["colorFrom"] in COLORS and meta["colorTo"] in COLORS
    assert len(meta["emoji"]) == 1 and not meta["emoji"].isascii()
    assert isinstance(meta["short_description"], str) and len(meta["short_description"]) <= 60
    assert meta.get("suggested_hardware", "cpu-basic") in HARDWARE
    assert isinstance(meta.get("pinned", False), bool) and all(isinstance(t, str) for t in meta.get("tags", []))
    card = SpaceCard(README)  # huggingface_hub's own parser reads the same card
    assert card.data.sdk == "docker" and card.data.app_port == 7860 and card.data.title == meta["title"]
    exposed = [rest for word, rest in instructions() if word == "EXPOSE"]
    assert exposed == [str(meta["app_port"])]


def test_readme_begins_with_its_two_commands_after_the_front_matter():
    body = README[re.match(r"---\n.*?\n---\n", README, re.S).end():]
    lines = body.splitlines()
    assert lines[0] == "# PICASO Explorer" and lines[2] == "```bash"
    assert lines[3].startswith("pip install -r requirements.txt && python app.py")
    assert lines[4].startswith("pip install -r requirements-dev.txt && python -m pytest -q")
    # .ci/run's own extraction of the test command, run as written there
    grep = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("cmd=$("))
    cmd = subprocess.run(["bash", "-c", f"{grep}\nprintf %s \"$cmd\""], cwd=ROOT, capture_output=True, text=True).stdout
    assert cmd.strip() == "pip install -r requirements-dev.txt && python -m pytest -q"


def test_binary_and_large_files_go_through_lfs():
    """The Hub refuses plain git objects over 10 MB and binary files outside LFS / Xet."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0")
    must = [f for f in files if f and (ROOT / f).is_file() and
            ((ROOT / f).stat().st_size > 10 * 2**20 or b"\0" in (ROOT / f).read_bytes()[:8192])]
    assert "assets/demo_model/model.safetensors" in must
    attrs = subprocess.run(["git", "check-attr", "filter", "--", *must], cwd=ROOT, capture_output=True, text=True).stdout
    not_lfs = [line for line in attrs.splitlines() if not line.endswith(": filter: lfs")]
    assert not not_lfs, f"add these to .gitattributes: {not_lfs}"


def test_no_tracked_file_is_an_lfs_pointer():
    """The repository stores the weights themselves: a clone made without git-lfs (CI, a user's
    plain `git clone`) must get the real files. LFS only matters in the Space clone of the README's
    push recipe, where .gitattributes turns them into pointers."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = [f for f in subprocess.run(["git", "ls-files", "-z", "assets"], cwd=ROOT, capture_output=True,
                                       text=True).stdout.split("\0") if f]
    assert "assets/demo_model_bptc/model.safetensors" in files
    blobs = subprocess.run(["git", "cat-file", "--batch-check=%(objectsize)"], cwd=ROOT, capture_output=True, text=True,
                           input="".join(f"HEAD:{f}\n" for f in files)).stdout.split()
    pointers = []
    for f, size in zip(files, blobs):
        if size.isdigit() and int(size) < 1024:
            head = subprocess.run(["git", "cat-file", "-p", f"HEAD:{f}"], cwd=ROOT, capture_output=True).stdout[:64]
            if head.startswith(b"version https://git-lfs"):
                pointers.append(f)
    assert not pointers, f"committed as LFS pointers (store them as plain blobs): {pointers}"


def _readme_docker_commands() -> list[list[str]]:
    section = README[README.index("## Deploying as a Hugging Face Space"):README.index("## Real checkpoints")]
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("docker "):
                cmds.append(shlex.split(line))
    return cmds


def test_readme_documents_the_images_own_commands():
    """Every docker command of the Dockerfile's header is in the README; every build argument the README
    passes (on the command line or as a Space variable) is an ARG of the Dockerfile; every -e variable
    is one app.py reads; the port published is the one exposed."""
    docker_args = {rest.split("=")[0] for word, rest in instructions() if word == "ARG"}
    assert {"BASE_IMAGE", "TORCH_INDEX_URL", "PICASO_DEVICE"} <= docker_args
    header = [line[line.index("docker "):].strip() for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("#") and "docker " in line]
    readme_cmds = _readme_docker_commands()
    readme_lines = {" ".join(c) for c in readme_cmds}
    for line in header:
        for part in line.split(" && "):
            assert " ".join(shlex.split(part)) in readme_lines, f"Dockerfile documents {part!r}; the README does not"
    builds = [c for c in readme_cmds if c[1] == "build"]
    assert any("PICASO_DEVICE=cuda" in c for c in builds) and any(len(c) == 5 for c in builds)  # GPU and CPU
    for c in builds:
        for i, word in enumerate(c):
            if word == "--build-arg":
                assert c[i + 1].split("=")[0] in docker_args
    # the Space's GPU variables are those build arguments
    space_vars = set(re.findall(r"`([A-Z_]+)` = `", README[README.index("## Deploying as a Hugging Face Space"):]))
    assert {"TORCH_INDEX_URL", "PICASO_DEVICE"} <= space_vars
    for c in (c for c in readme_cmds if c[1] == "run"):
        assert "7860:7860" in c
        for i, word in enumerate(c):
            if word == "-e":
                name, value = c[i + 1].split("=", 1)
                assert vars(app.parse_args([], {name: value})) != vars(app.parse_args([], {})), name


def test_picaso_device_cuda_on_the_cpu_image_names_the_fix():
    """PICASO_DEVICE=cuda with the CPU build of torch (the default image) stops with a message naming
    the GPU image's build argument, not torch's bare AssertionError."""
    import torch

    from picaso_core.engine.loading import load_model

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    match = "TORCH_INDEX_URL" if torch.version.cuda is None else "sees no GPU"
    with pytest.raises(RuntimeError, match=match):
        load_model("demo", device="cuda")


def test_app_with_a_device_torch_cannot_give_exits_with_one_line_naming_the_fix():
    """`PICASO_DEVICE=cuda python app.py` without a usable GPU: exit status 1 and one line on stderr
    that names the fix (app.main turns check_device's RuntimeError into it), no traceback, before
    any model or corpus is loaded."""
    import os
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    env = {**os.environ, "PICASO_DEVICE": "cuda", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "app.py")], env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: device 'cuda': "), lines
    assert ("TORCH_INDEX_URL" if torch.version.cuda is None else "--gpus all") in lines[0]

"""Each kind of Space: its card (the README's YAML front matter), its requirements, what it costs.

What the Hub's documentation says (huggingface/hub-docs: docs/hub/spaces-overview.md,
spaces-zerogpu.md, spaces-sdks-static.md, spaces-config-reference.md; quoted in docs/space.md):
Gradio and Docker Spaces run on compute and need a paid plan to create (PRO for a personal
account); static Spaces are free for everyone; a free personal account in good standing may host up
to 2 Gradio-SDK Spaces on ZeroGPU, which supports PyTorch 2.8.0, 2.9.1, 2.10.0 and 2.11.0 on Python
3.12.12 or 3.10.13, and no torch.compile.
"""

from __future__ import annotations

import importlib.metadata
import re

import yaml

KINDS = ("zerogpu", "docker", "static")

ZEROGPU_TORCH = "2.11.0"  # the newest torch on ZeroGPU's list; requirements.txt pins 2.13.0 elsewhere
ZEROGPU_PYTHON = "3.12.12"  # the newer of ZeroGPU's two Pythons
ZEROGPU_HARDWARE = "zero-a10g"  # huggingface_hub's SpaceHardware name for ZeroGPU
LAUNCHER = "space_app.py"  # the ZeroGPU Space's app_file (prepare.py writes it)
STATIC_ENTRY = "index.html"  # the static Space's app_file: the exported tour's first page

# Shared by every kind; the Docker card is exactly the front matter of this checkout's README
# (tests/space/test_space_prepare.py), which is itself a Docker Space.
BASE = {"title": "PICASO Explorer", "emoji": "🧩", "colorFrom": "indigo", "colorTo": "yellow"}
TAGS = ["state-space-models", "mamba", "retrieval"]

COST = {
    "zerogpu": "free for a personal account in good standing (verified email, older than 30 days), up to 2 "
               "ZeroGPU Spaces (PRO: 10); each visitor's clicks spend that visitor's daily ZeroGPU quota "
               "(2 min unauthenticated, 5 min with a free account, 40 min with PRO)",
    "docker": "a paid plan to create it (PRO for a personal account, Team or Enterprise for an organization); "
              "then CPU basic (2 vCPU, 16 GB) has no hourly cost, GPU hardware is billed by the hour "
              "(Nvidia T4 small: $0.40)",
    "static": "free for everyone: the pages are served as files, with no compute; the tour shows recorded "
              "results, and its live clicks need a running app elsewhere (--app-url)",
}


def gradio_version() -> str:
    """The gradio this checkout runs and tests with: the Gradio-SDK Space installs the same."""
    return importlib.metadata.version("gradio")


def card(kind: str) -> dict:
    """The Space card's fields for `kind` (huggingface.co/docs/hub/spaces-config-reference)."""
    check_kind(kind)
    if kind == "docker":
        fields = {"sdk": "docker", "app_port": 7860, "pinned": False,
                  "short_description": "Compose the SSM states of retrieved contexts (PICASO)",
                  "suggested_hardware": "cpu-basic", "tags": TAGS}
    elif kind == "zerogpu":
        fields = {"sdk": "gradio", "sdk_version": gradio_version(), "python_version": ZEROGPU_PYTHON,
                  "app_file": LAUNCHER, "suggested_hardware": ZEROGPU_HARDWARE, "pinned": False,
                  "short_description": "Compose the SSM states of retrieved contexts (PICASO)",
                  "tags": [*TAGS, "zerogpu"]}
    else:
        fields = {"sdk": "static", "app_file": STATIC_ENTRY, "pinned": False,
                  "short_description": "A guided tour of PICASO Explorer, recorded", "tags": TAGS}
    return {**BASE, **fields}


def front_matter(kind: str) -> str:
    """The card as the README's front matter: `---`, YAML, `---`."""
    body = yaml.safe_dump(card(kind), sort_keys=False, allow_unicode=True, default_flow_style=False)
    return f"---\n{body}---\n"


def readme(kind: str, app_url: str | None = None, store: bool = False) -> str:
    """The prepared Space's README.md: its card, then what it is, what ships in it and what it costs.
    store: (zerogpu) whether `prepare --store` shipped a prebuilt state store in OUT/store; the
    card says what was written, not what could have been."""
    states = ("Its states ship in `store/`, a prebuilt state store (`prepare --store`) that the Space serves as it is."
              if store else
              "No states ship with it: when the Space starts, its CPU encodes every context's state (the demo's 837: "
              "~40 s on 2 cores) and the guided tour's results, and keeps them on its disk (space_app.py).")
    what = {
        "zerogpu": "The app on ZeroGPU: the model is placed on the GPU that ZeroGPU lends each model-bound "
                   f"click (`@spaces.GPU`, picaso_core/ui/server/gpu.py). {states}",
        "docker": "The app in its Docker image (`Dockerfile`): the CPU build of torch, or a GPU build through "
                  "the `TORCH_INDEX_URL` and `PICASO_DEVICE` variables, the demo's states encoded at build time.",
        "static": "The app's guided tour, exported as pages: each step with the results the app gave."
                  + (f" Live clicks go to {app_url}." if app_url else ""),
    }[check_kind(kind)]
    return (f"{front_matter(kind)}# PICASO Explorer\n\n{what}\n\n"
            f"**What it costs to host** (Hugging Face's Spaces documentation): {COST[kind]}.\n\n"
            "Prepared with `python -m picaso_core.space prepare --kind "
            f"{kind} OUT` from the PICASO Explorer repository (docs/space.md).\n")


def requirements(kind: str, base: str) -> str | None:
    """requirements.txt for `kind`, from the checkout's `base` text; None: the kind installs nothing.

    zerogpu: torch pinned to ZEROGPU_TORCH (PyPI's CUDA build), no gradio line (the Space installs
    sdk_version itself), plus `spaces`. docker: the checkout's file as it is (the Dockerfile installs
    torch first from TORCH_INDEX_URL).
    """
    check_kind(kind)
    if kind == "static":
        return None
    if kind == "docker":
        return base
    header = (f"# The ZeroGPU Space's packages: torch {ZEROGPU_TORCH} is the newest that ZeroGPU supports; "
              "gradio comes from the card's sdk_version.")
    lines = [header]
    for line in base.splitlines():
        name = re.match(r"\s*([A-Za-z0-9_.\-]+)", line)
        if line.lstrip().startswith("#") or not name:
            continue
        if name.group(1).lower() == "torch":
            line = f"torch=={ZEROGPU_TORCH}"
        elif name.group(1).lower() == "gradio":
            continue
        lines.append(line)
    lines.append("spaces                 # @spaces.GPU (picaso_core/ui/server/gpu.py)")
    return "\n".join(lines) + "\n"


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: use one of {', '.join(KINDS)}")
    return kind

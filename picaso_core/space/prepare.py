"""Write a Hugging Face Space's folder for one kind of hosting (docs/space.md).

    python -m picaso_core.space prepare --kind zerogpu OUT     # Gradio SDK on ZeroGPU (free account)
    python -m picaso_core.space prepare --kind docker OUT      # the Docker image (paid plan)
    python -m picaso_core.space prepare --kind static OUT      # the exported tour (free for everyone)
    hf upload <you>/<space> OUT . --repo-type space            # then push it

zerogpu and docker: OUT holds app.py, picaso_core/, assets/, the kind's requirements.txt and a
README.md whose front matter is the Space's card (cards.py); docker adds the Dockerfile; zerogpu
adds its entry point (space_app.py), which encodes every context's state (and the tour's results)
on the CPU before serving,
since a state encoded inside ZeroGPU's forked GPU worker would not reach the server process's store
(or ships a prebuilt store: --store). static: the tour's pages (picaso_core.ui.tour.cache.export_static)
and the card.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path

from picaso_core.space.cards import COST, KINDS, LAUNCHER, STATIC_ENTRY, check_kind, readme, requirements

ROOT = Path(__file__).resolve().parents[2]  # the checkout: app.py, picaso_core/, assets/
APP_FILES = ("app.py", "picaso_core", "assets")
KIND_FILES = {"zerogpu": (), "docker": ("Dockerfile", ".dockerignore"), "static": ()}
# what a fresh clone of a new Space holds: OUT may be that clone
SPACE_CLONE = {".git", ".gitattributes", "README.md"}
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".DS_Store")

LAUNCHER_TEXT = '''"""The ZeroGPU Space's entry point (the card's app_file): app.py with the model on the GPU that
ZeroGPU lends each model-bound click (picaso_core/ui/server/gpu.py). Same flags and PICASO_* variables as app.py."""

import os
import sys

try:  # first, before torch loads: ZeroGPU adapts torch's CUDA as it is imported
    import spaces  # noqa: F401
except ImportError:  # this folder run on a machine without the spaces package: the CPU, as app.py
    pass

from picaso_core.ui.server.gpu import on_zerogpu  # noqa: E402 (imports no torch)

HERE = os.path.dirname(os.path.abspath(__file__))
ZEROGPU = on_zerogpu()
if ZEROGPU:
    os.environ.setdefault("PICASO_DEVICE", "cuda")
if os.path.isfile(os.path.join(HERE, "store", "store.json")):  # prepare --store DIR shipped one
    os.environ.setdefault("PICASO_STORE", os.path.join(HERE, "store"))

import app  # noqa: E402
from picaso_core.session import load_resources  # noqa: E402
from picaso_core.ui.tour.cache import build as build_tour  # noqa: E402


def precompute_on_cpu(argv: list[str]) -> None:
    """Before serving, on the CPU: every context's state (the demo's 837: ~40 s on 2 cores) and the
    guided tour's results (~80 s), each kept on disk, so done once. On ZeroGPU a click runs in a
    forked worker, and a state it encoded would stay in that worker (the server process would encode
    it again on every click); the app would build the tour in a background thread, where ZeroGPU
    lends no GPU."""
    a = app.parse_args(argv)
    res = load_resources(a.model, a.corpus, a.split, a.cache_dir, a.max_tokens, a.max_contexts, "cpu",
                         encode_all=True, database=a.database, store=a.store, dtype=a.dtype)
    build_tour(res)


if __name__ == "__main__":
    if ZEROGPU:
        precompute_on_cpu(sys.argv[1:])
    app.main()
'''


class PrepareError(ValueError):
    """A Space folder that cannot be written as asked; the message names the fix."""


def prepare(kind: str, out: str | Path, *, store: str | Path | None = None, app_url: str | None = None,
            force: bool = False, source: Path = ROOT, export: Callable[..., object] | None = None) -> Path:
    """Write the Space folder of `kind` into `out` and return it.

    store: (zerogpu) a prebuilt state store folder (`python -m picaso_core.store build`) to ship in
    OUT/store, which the Space then serves; None: the Space encodes the states when it starts
    (the demo's 837 states are 444 MiB to push, against ~40 s of start-up).
    app_url: (static) a running app the tour's live clicks go to.
    force: replace what OUT holds (all but .git); otherwise OUT must be empty or a fresh Space clone.
    export: (static) the tour's exporter, export(out_dir, app_url=...); default
    picaso_core.ui.tour.cache.export_static.
    """
    check_kind(kind)
    out = Path(out)
    if store is not None and kind != "zerogpu":
        raise PrepareError("a state store (--store) is shipped by the zerogpu kind only")
    if store is not None and not (Path(store) / "store.json").is_file():
        raise PrepareError(f"no state store at {store} (no store.json); build one with "
                           "`python -m picaso_core.store build --out DIR`, or leave --store out")
    needs = () if kind == "static" else (*APP_FILES, "requirements.txt", *KIND_FILES[kind])
    missing = [f for f in needs if not (source / f).exists()]
    if missing:
        raise PrepareError(f"{source} lacks {', '.join(missing)}: run prepare from a checkout of the repository")
    if kind == "static" and export is None:
        export = _tour_exporter()
    _check_out(out, source, force)

    out.mkdir(parents=True, exist_ok=True)
    if kind == "static":
        export(out, app_url=app_url)
        if not (out / STATIC_ENTRY).is_file():
            raise PrepareError(f"the tour's export wrote no {STATIC_ENTRY} in {out}: the static Space has no page")
    else:
        for name in (*APP_FILES, *KIND_FILES[kind]):
            src = source / name
            if src.is_dir():
                shutil.copytree(src, out / name, ignore=SKIP, dirs_exist_ok=True)
            else:
                shutil.copy2(src, out / name)
        (out / "requirements.txt").write_text(requirements(kind, (source / "requirements.txt").read_text()))
    if (source / ".gitattributes").is_file():  # binaries (weights, states) through LFS for a git push
        shutil.copy2(source / ".gitattributes", out / ".gitattributes")
    if kind == "zerogpu":
        (out / LAUNCHER).write_text(LAUNCHER_TEXT)
        if store is not None:
            shutil.copytree(store, out / "store", ignore=SKIP, dirs_exist_ok=True)
    (out / "README.md").write_text(readme(kind, app_url, store=store is not None), encoding="utf-8")  # what shipped
    return out


def _check_out(out: Path, source: Path, force: bool) -> None:
    o, s = out.resolve(), source.resolve()
    if o == s or any(o == s / f or (s / f) in o.parents for f in APP_FILES):
        raise PrepareError(f"OUT {out} is inside what it would copy; give a folder outside {source}")
    if out.exists() and not out.is_dir():
        raise PrepareError(f"OUT {out} is a file; give a folder")
    extra = sorted(p.name for p in out.iterdir() if p.name not in SPACE_CLONE) if out.is_dir() else []
    if extra and not force:
        raise PrepareError(f"OUT {out} already holds {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}; "
                           "give an empty folder (or a fresh clone of the Space), or --force to replace its contents")
    if force and out.is_dir():
        for p in out.iterdir():
            if p.name != ".git":
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def _tour_exporter() -> Callable[..., object]:
    try:
        # the static kind's work only, after the arguments: the app and gradio, not on --help
        from picaso_core.ui.tour.cache import export_static
    except ImportError as e:
        raise PrepareError(f"the static Space needs the tour's exporter (picaso_core.ui.tour.cache.export_static): {e}") from None
    return export_static


def _size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file() and ".git" not in p.relative_to(folder).parts]
    return len(files), sum(p.stat().st_size for p in files)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m picaso_core.space",
                                description="Prepare a Hugging Face Space's folder for one kind of hosting "
                                            "(docs/space.md).")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("prepare", help="write a Space's folder: the app, its requirements and card",
                       description="; ".join(f"{k}: {COST[k]}" for k in KINDS))
    b.add_argument("--kind", required=True, choices=KINDS,
                   help="zerogpu: Gradio SDK on ZeroGPU; docker: the Docker image; static: the exported tour")
    b.add_argument("out", metavar="OUT", help="the folder to write (empty, or a fresh clone of the Space)")
    b.add_argument("--store", default=None, metavar="DIR",
                   help="zerogpu: a prebuilt state store to ship in OUT/store (default: none; the Space encodes "
                        "the states on its CPU when it starts)")
    b.add_argument("--app-url", default=None, help="static: a running app that the tour's live clicks go to")
    b.add_argument("--force", action="store_true", help="replace what OUT holds (all but .git)")
    args = p.parse_args(argv)
    if args.kind != "zerogpu" and args.store:
        p.error("--store is for --kind zerogpu")
    if args.kind != "static" and args.app_url:
        p.error("--app-url is for --kind static")
    try:
        out = prepare(args.kind, args.out, store=args.store, app_url=args.app_url,
                      force=args.force)
    except (PrepareError, ValueError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    n, nbytes = _size(out)
    print(f"{out}: a {args.kind} Space, {n} files, {nbytes / 2**20:.1f} MiB. Cost: {COST[args.kind]}.\n"
          f"Push it: hf upload <you>/<space> {out} . --repo-type space")

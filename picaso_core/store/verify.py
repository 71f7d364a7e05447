"""Checking a local store folder against its index without loading a model, and repairing it.

    python -m picaso_core.store check DIR    # every shard's size and sha256 against store.json
    python -m picaso_core.store repair DIR   # re-encode damaged shards' contexts, bad files to DIR/damaged/

`check` reads only store.json and the shards' bytes, so an operator can run it anywhere (a shared
disk, a copy of a bucket). `repair` loads the model the index names (or --model) and re-encodes
each damaged shard's contexts from the texts store.json holds; StateStore.repair moves the bad
shard and its sidecar into DIR/damaged/, where no later index, nor a rebuild of one from the
sidecars, looks.
"""

from __future__ import annotations

from pathlib import Path

from picaso_core.store.build import _fs, restore_sidecars
from picaso_core.store.format import (DAMAGED, META_FILE, SIDECAR, StoreError, _sha256, is_url, missing_sidecars,
                                      parse_index, tqdm_progress)
from picaso_core.store.store import StateStore, missing_index

BUILD_HINT = "python -m picaso_core.store build --model MODEL --corpus CORPUS --out {folder}"


def read_index(folder: str | Path) -> tuple[Path, dict]:
    """(folder, store.json) of a local store; StoreError naming the fix if there is none or it is unreadable."""
    if is_url(folder):
        raise StoreError(f"{folder}: check and repair work on a local folder; copy the store here, or rebuild it "
                         f"with `{BUILD_HINT.format(folder=folder)}` (it verifies what it finds)")
    folder = Path(folder)
    cmd = BUILD_HINT.format(folder=folder)
    if not (folder / META_FILE).is_file():
        raise StoreError(missing_index(folder, folder, cmd))
    return folder, parse_index((folder / META_FILE).read_text(errors="replace"), folder / META_FILE,
                               f"rebuild it from the shards' sidecars with `{cmd} --rebuild-index` (the model and "
                               "corpus it was built from)")


def damaged_shards(folder: Path, meta: dict, verify: bool = True) -> dict[str, str]:
    """file -> what is wrong, for every shard of the index that is missing, cut short or (verify)
    whose bytes do not hash to the sha256 written with it."""
    bad = {}
    for sh in meta["shards"]:
        path = folder / sh["file"]
        if not path.is_file():
            bad[sh["file"]] = "missing"
        elif path.stat().st_size != sh["nbytes"]:
            bad[sh["file"]] = f"truncated: {path.stat().st_size} bytes on disk, {sh['nbytes']} written"
        elif verify and _sha256(path) != sh["sha256"]:
            bad[sh["file"]] = "its sha256 differs from the one written at build time"
    return bad


def check_cli(folder: str | Path) -> dict:
    """`check DIR`: one line on stdout when every shard is whole; StoreError (one line) naming the
    damaged shards and `repair DIR` otherwise."""
    folder, meta = read_index(folder)
    bad = damaged_shards(folder, meta)
    n, m = len(meta["contexts"]), len(meta["shards"])
    if bad:
        listed = "; ".join(f"{f}: {why}" for f, why in bad.items())
        raise StoreError(f"{folder}: {len(bad)} of {m} shards damaged ({listed}); the other shards are usable. "
                         f"Fix: `python -m picaso_core.store repair {folder}`")
    lost = missing_sidecars(folder, meta)
    if lost:
        names = ", ".join(f + SIDECAR for f in lost[:5]) + (" …" if len(lost) > 5 else "")
        raise StoreError(f"{folder}: {len(lost)} of {m} shards have no sidecar ({names}); the shards are whole, but a "
                         f"lost {META_FILE} could not be rebuilt from the sidecars without encoding their contexts "
                         f"again. Fix: `python -m picaso_core.store repair {folder}` (writes them from {META_FILE}, "
                         "encodes nothing), or rerun the store's build")
    size = sum(s["nbytes"] for s in meta["shards"]) / 2**20
    print(f"{folder}: {n} contexts in {m} shards ({size:.1f} MiB); every size and sha256 matches {META_FILE}")
    return {"contexts": n, "shards": m, "damaged": {}}


def repair_cli(folder: str | Path, model_name: str | None = None, device: str | None = None) -> dict:
    """`repair DIR`: re-encode the damaged shards' contexts with the store's model; one line saying what."""
    from picaso_core.engine.loading import load_model  # after the arguments: `check` and --help need no engine.model

    folder, meta = read_index(folder)
    bad = damaged_shards(folder, meta)
    # sidecars of whole shards are written from the index (no model); a damaged shard's come with its repair
    lost = [f for f in missing_sidecars(folder, meta) if f not in bad]
    sidecars = restore_sidecars(*_fs(folder), str(folder), meta, lost, say=print) if lost else []
    if not bad:
        if not sidecars:
            print(f"{folder}: nothing to repair; every size and sha256 matches {META_FILE}")
        return {"repaired": [], "sidecars": sidecars}
    name = model_name or meta["model"].get("name") or "demo"
    try:
        model = load_model(name, device=device)
    except (OSError, ValueError) as e:
        raise StoreError(f"{folder}: cannot load the store's model {name!r} ({e}); pass it with --model") from None
    model.name_or_path = name
    store = StateStore.open(folder, model)
    fixed = store.repair(progress=tqdm_progress("re-encoding damaged shards"))
    n = sum(len(s["ids"]) for s in meta["shards"] if s["file"] in fixed)  # the index as read before the repair
    print(f"{folder}: repaired {len(fixed)} damaged shards ({', '.join(fixed)}): their {n} contexts re-encoded from "
          f"their stored text; the bad files were moved to {folder / DAMAGED}/")
    return {"repaired": fixed, "contexts": n, "sidecars": sidecars}

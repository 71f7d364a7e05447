"""The on-disk format of a StateStore (picaso_core.store): constants, errors, the tensors of a
shard in its dtype, checksums. Shared by the store and by its multi-worker build
(picaso_core.store.build), so both write the same shards."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable, Sequence

import safetensors.torch
import torch
from safetensors import SafetensorError, safe_open
from tqdm.auto import tqdm

from picaso_core.engine.state import ContextState

FORMAT = "picaso-state-store/1"
META_FILE = "store.json"
DAMAGED = "damaged"  # the sub-folder bad shards, sidecars and indexes are moved into, never read again
SIDECAR = ".json"  # shard-X.safetensors + shard-X.safetensors.json: what store.json says of that shard
SHARD_BYTES = 64 * 2**20  # shard size target: the first read of a shard hashes it whole (~0.1 s)
CACHE_BYTES = 512 * 2**20  # default bound of the in-memory LRU cache

REMOTE_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "picaso_explorer" / "remote"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

Progress = Callable[[int, int], None]  # progress(done, total), as model.encode_contexts takes it


def is_url(location) -> bool:
    """True for an fsspec URL (s3://..., memory://...), False for a local folder."""
    return "://" in str(location)


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise StoreError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def shard_tensors(cids: Sequence[str], states: Sequence[ContextState], shapes: dict, dtype: str) -> dict:
    """The tensors of one shard: "<id>/ssm", "<id>/conv" in `dtype`, "<id>/log_decay" in float32."""
    tensors = {}
    for cid, st in zip(cids, states, strict=True):
        st.check_shapes(shapes, what=f"state of context {cid!r}")
        for k, t in st.to_tensors(prefix=f"{cid}/").items():
            if not k.endswith("/log_decay"):
                t = t.to(DTYPES[dtype])
                if not torch.isfinite(t).all():  # float16 tops out at 65504
                    raise StoreError(f"the state of context {cid!r} overflows {dtype} ({k} has values beyond "
                                     f"its range); store it as bfloat16 or float32")
            tensors[k] = t.contiguous()
    return tensors


def shard_groups(items: Sequence, num_tokens: Sequence[int], config, shard_size: int | None = None) -> list[list]:
    """`items` (in order, with their tokens `num_tokens`) cut into shards: `shard_size` each where
    given, else as many as fit in SHARD_BYTES by each one's real bytes, config.state_nbytes(tokens)
    (fixed for a pure model; a hybrid's keys and values grow with the tokens), at least one each."""
    if shard_size:
        return [list(items[i:i + shard_size]) for i in range(0, len(items), shard_size)]
    groups: list[list] = []
    size = 0
    for item, n in zip(items, num_tokens, strict=True):
        nbytes = config.state_nbytes(int(n))
        if not groups or size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += nbytes
    return groups


def text_hash(text: str) -> str:
    """The digest of a context's text a sidecar records (a rerun refuses a text changed under its id)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sidecar(file: str, sha256: str, nbytes: int, ids: Sequence[str], num_tokens: Sequence[int],
            texts: Sequence[str], fingerprint: str, dtype: str, worker: str = "") -> dict:
    """A shard's sidecar: what store.json records of it and of its contexts, so a lost or unreadable
    index is rebuilt from the sidecars without encoding anything (`build --rebuild-index`)."""
    return {"file": file, "sha256": sha256, "nbytes": int(nbytes), "ids": list(ids),
            "num_tokens": [int(n) for n in num_tokens], "texts": [text_hash(t) for t in texts],
            "fingerprint": fingerprint, "dtype": dtype, "worker": worker}


def index_sidecar(meta: dict, shard: dict, entries: dict | None = None) -> dict | None:
    """The sidecar of one shard of store.json (`meta`), from what the index records: no shard is
    read, nothing encoded. None if the index lacks one of its contexts (it cannot say their texts).
    entries: meta's contexts by id, where the caller has them."""
    entries = entries if entries is not None else {c["id"]: c for c in meta["contexts"]}
    if not all(cid in entries for cid in shard["ids"]):
        return None
    got = [entries[cid] for cid in shard["ids"]]
    return sidecar(shard["file"], shard["sha256"], shard["nbytes"], shard["ids"], [e["num_tokens"] for e in got],
                   [e["text"] for e in got], meta["model"]["fingerprint"], meta.get("dtype", "float32"),
                   shard.get("worker") or "")


def missing_sidecars(folder: Path, meta: dict) -> list[str]:
    """The shard files of a local store's index that have no sidecar beside them."""
    return [s["file"] for s in meta["shards"] if not (Path(folder) / (s["file"] + SIDECAR)).is_file()]


class StoreError(ValueError):
    """A store that cannot be used as asked; the message names the fix."""


class CorruptShardError(StoreError):
    """A shard whose bytes do not match the checksum written when it was built."""

    def __init__(self, shard: str, reason: str, folder, worker: str = ""):
        self.shard = shard
        self.worker = worker
        by = f", written by worker {worker}" if worker else ""
        super().__init__(
            f"state store {folder}: shard {shard}{by} is corrupt ({reason}); the other shards are "
            f"still usable. Re-encode its contexts from their stored text with "
            f"`python -m picaso_core.store repair {folder}` (or store.repair())"
        )


def parse_index(text: str, where, fix: str) -> dict:
    """store.json's contents, checked for the keys every reader uses; StoreError naming `fix` if
    it is not JSON, not a store index, or of another format."""
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise StoreError(f"{where} is not valid JSON ({e.msg}, line {e.lineno} column {e.colno}); {fix}") from None
    ok = (isinstance(meta, dict) and isinstance(meta.get("model"), dict) and "fingerprint" in meta["model"]
          and isinstance(meta.get("shards"), list) and isinstance(meta.get("contexts"), list) and "suffix" in meta)
    if isinstance(meta, dict) and meta.get("format") not in (None, FORMAT):
        raise StoreError(f"{where} has format {meta.get('format')!r}, expected {FORMAT!r}; rebuild the store")
    if not ok:
        raise StoreError(f"{where} is not a state store index (keys missing); {fix}")
    return meta


def file_mode() -> int:
    """The mode a new file gets from open() under this process's umask (0o644 under umask 022)."""
    try:  # Linux reports the umask without changing it (os.umask would, for every thread at once)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def save_shard(tensors: dict, path, metadata: dict) -> None:
    """safetensors' save_file, its I/O failures raised as the OSError they are (the Rust writer
    raises SafetensorError "I/O error: Read-only file system (os error 30)"), so every caller
    tells a folder it cannot write from a bug the same way."""
    try:  # looked up at call time: tests make the disk refuse the write
        safetensors.torch.save_file(tensors, str(path), metadata=metadata)
    except SafetensorError as e:
        code = re.search(r"os error (\d+)\)", str(e))
        if code is None:
            raise
        n = int(code.group(1))
        raise OSError(n, os.strerror(n), str(Path(path).parent)) from None


def share_mode(path) -> None:
    """Give a finished file open()'s mode: the safetensors writer creates its files 0600, which
    would keep a store built by one account from the account that serves it."""
    os.chmod(path, file_mode())


def move_aside(folder: Path, names) -> list[str]:
    """Move the named files of a local store into <folder>/damaged/ (a later index never lists a
    file there); returns the names moved. A name already there gets a numbered suffix."""
    moved = []
    dest = folder / DAMAGED
    for name in names:
        src = folder / name
        if not src.exists():
            continue
        dest.mkdir(exist_ok=True)
        target, n = dest / name, 1
        while target.exists():
            target, n = dest / f"{name}.{n}", n + 1
        os.replace(src, target)
        moved.append(name)
    return moved


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _shard_header(path) -> dict:
    """A safetensors file's metadata (format, fingerprint, dtype, ...), read without its tensors."""
    with safe_open(str(path), framework="pt", device="cpu") as f:
        return f.metadata() or {}


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    share_mode(tmp)
    os.replace(tmp, path)


def tqdm_progress(desc: str, unit: str = "ctx") -> Progress:
    """A progress(done, total) callback drawing a tqdm bar on stderr (every CLI's long loops)."""
    bar = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update


def _model_name(model) -> str:
    return str(getattr(model, "name_or_path", None) or "an unnamed model")


def _describe_config(cfg: dict) -> str:
    s = cfg.get("ssm_cfg", {})
    return f"{s.get('layer', '?')} d_model={cfg.get('d_model')} n_layer={cfg.get('n_layer')}"

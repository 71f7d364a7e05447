"""The on-disk format of a StateStore (picaso_core.store): constants, errors, the tensors of a
shard in its dtype, checksums. Shared by the store and by its multi-worker build
(picaso_core.store.build), so both write the same shards."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Sequence

import torch

from picaso_core.engine.state import ContextState

FORMAT = "picaso-state-store/1"
META_FILE = "store.json"
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


class StoreError(ValueError):
    """A store that cannot be used as asked; the message names the fix."""


class CorruptShardError(StoreError):
    """A shard whose bytes do not match the checksum written when it was built."""

    def __init__(self, shard: str, reason: str, folder, worker: str = ""):
        self.shard = shard
        self.worker = worker
        by = f", written by worker {worker}" if worker else ""
        super().__init__(
            f"state store {folder}: shard {shard}{by} is corrupt ({reason}). The other shards are "
            "still usable; re-encode this shard's contexts from their stored text with "
            "`StateStore.open(folder, model).repair()`, or rebuild the store."
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _shard_header(path) -> dict:
    """A safetensors file's metadata (format, fingerprint, dtype, ...), read without its tensors."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt", device="cpu") as f:
        return f.metadata() or {}


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def tqdm_progress(desc: str, unit: str = "ctx") -> Progress:
    """A progress(done, total) callback drawing a tqdm bar on stderr (every CLI's long loops)."""
    from tqdm.auto import tqdm

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

"""The database of states (paper sec. 3.2): each context encoded once, stored, read back to compose.

    format.py   the on-disk format: errors, shard tensors, dtypes, atomic writes
    store.py    StateStore: open / build / get, integrity checks, local folders and fsspec URLs
    writer.py   StoreWriter, StateStore's writing half: add / ensure / repair
    build.py    the ahead-of-time build, local or Ray Data (resumable, verifies what it finds)
    verify.py   checking a store folder without a model, repairing its damaged shards
    cli.py      `python -m picaso_core.store build | check | repair`

The face (docs/api.md lists every name) is lazy (PEP 562 `__getattr__`): every module here imports
torch through format.py, and `python -m picaso_core.store` runs this file first; lazy, its `--help`
and a bad value answer without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.store.build import ShardEncoder, build_store, write_index  # noqa: F401
    from picaso_core.store.format import DTYPES, CorruptShardError, StoreError, is_url, tqdm_progress  # noqa: F401
    from picaso_core.store.store import StateStore, check_serves, derived_folder, heal, missing_index  # noqa: F401
    from picaso_core.store.verify import damaged_shards  # noqa: F401
    from picaso_core.store.writer import StoreWriter  # noqa: F401

_FACE = {
    "store": ("StateStore", "derived_folder", "heal", "check_serves", "missing_index"),
    "writer": ("StoreWriter",),
    "format": ("StoreError", "CorruptShardError", "DTYPES", "is_url", "tqdm_progress"),
    "build": ("build_store", "ShardEncoder", "write_index"),
    "verify": ("damaged_shards",),
}
__getattr__, __dir__, __all__ = lazy_face(__name__, _FACE)

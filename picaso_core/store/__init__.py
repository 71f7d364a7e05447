"""The database of states (paper sec. 3.2): each context encoded once, stored, read back to compose.

    format.py   the on-disk format: errors, shard tensors, dtypes, atomic writes
    store.py    StateStore: open / build / get, integrity checks, local folders and fsspec URLs
    writer.py   StoreWriter, StateStore's writing half: add / ensure / repair
    build.py    the ahead-of-time build, local or Ray Data (resumable, verifies what it finds)
    verify.py   checking a store folder without a model, repairing its damaged shards
    cli.py      `python -m picaso_core.store build | check | repair`

The face (docs/api.md lists every name) is eager: every module here imports torch through
format.py already, and `python -m picaso_core.store` imports all of them but the CLI's model.
"""

from picaso_core.store.build import ShardEncoder, build_store, write_index
from picaso_core.store.format import DTYPES, CorruptShardError, StoreError, is_url, tqdm_progress
from picaso_core.store.store import StateStore, check_serves, derived_folder, heal, missing_index
from picaso_core.store.verify import damaged_shards
from picaso_core.store.writer import StoreWriter

__all__ = [
    "StateStore", "StoreWriter", "StoreError", "CorruptShardError", "DTYPES", "is_url", "derived_folder", "heal",
    "check_serves", "missing_index", "build_store", "ShardEncoder", "write_index", "damaged_shards", "tqdm_progress",
]

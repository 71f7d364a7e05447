"""The database of states (paper sec. 3.2): each context encoded once, stored, read back to compose.

    format.py   the on-disk format: errors, shard tensors, dtypes, atomic writes
    store.py    StateStore: open / build / get, integrity checks, local folders and fsspec URLs
    writer.py   StoreWriter, StateStore's writing half: add / ensure / repair
    build.py    the ahead-of-time build, local or Ray Data (resumable, verifies what it finds)
    verify.py   checking a store folder without a model, repairing its damaged shards
    cli.py      `python -m picaso_core.store build | check | repair`
"""

"""StateStore: the database of states (paper sec. 3.2), on disk, keyed by context id.

Each context is encoded once by the model into its `ContextState`; at query time the retrieved
states are read back and composed, so no context token is processed online.

Layout of a store folder:
    store.json                 format, the model's fingerprint and config, the context suffix,
                               the shards (file, sha256, size, ids) and every context (id, text,
                               token count, shard)
    shard-00000.safetensors    the states of up to `shard_size` contexts, tensors named
                               "<id>/ssm", "<id>/conv", "<id>/log_decay" (ContextState.to_tensors)
    shard-00000.safetensors.json  its sidecar: what store.json says of the shard and its contexts
                               (ids, token counts, text digests, sha256, fingerprint, dtype), so a
                               lost index is rebuilt from the sidecars without encoding
    embeddings/                the retriever's sentence embeddings (picaso_core.retrieval)
A store built by several workers (picaso_core.store.build) has shards named
shard-<worker>-<hash of its ids>.safetensors; the build's final index step gathers their sidecars
into store.json.

States may be stored in float32, float16 or bfloat16 (`dtype`, fixed per store): `ssm` and
`conv` are cast, `log_decay` stays float32 because composition multiplies decays over many
contexts (CASO's weights, prop. 1 eq. 3, are products of the later contexts' A(u); PICASO's are
means of such products) and a rounded log-decay would shift every weight. Reads return float32
states whatever the dtype on disk.

A store can also live at any fsspec URL (s3://, gs://, hf://, memory://, file://): `open(url)`
reads store.json at once and each shard the first time a state in it is asked for, copying it
whole into a local cache (<cache_dir>/<hash of the URL>/<sha256 prefix>-<file>: content-addressed,
so a rebuilt remote store never hits a stale copy). Such a store is read-only here; build or
extend it with `python -m picaso_core.store build --out URL`.

Shards are written once and never modified (`add` writes new shards, `repair` replaces a bad one
whole), each through a temporary file and a rename, so an interrupted write leaves the previous
store intact; the writing methods are in picaso_core.store.writer (StoreWriter, which StateStore
inherits). Reads are lazy: safetensors memory-maps a shard and copies out only the tensors
asked for; an LRU cache bounded in bytes keeps recently used states. A shard's sha256 is checked
the first time it is read (and by `check()`); a truncated or corrupt shard raises
`CorruptShardError` naming the file, and the other shards stay usable.

A context is encoded as `tokenizer.encode(text + suffix)`; the suffix (e.g. "\n\n", the separator
the demo model saw between contexts) is fixed per store, and `token_ids(cid)` gives the same ids
for methods that process tokens (Concat), so stored states and tokens always agree.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Iterable, Sequence

from safetensors import safe_open

from picaso_core.engine.state import ContextState
from picaso_core.store.format import (  # noqa: F401  (the store's public names in one module)
    CACHE_BYTES, DAMAGED, DTYPES, FORMAT, META_FILE, REMOTE_CACHE, SHARD_BYTES, CorruptShardError, Progress,
    StoreError, _atomic_write_text, _describe_config, _model_name, _sha256, _shard_header, check_dtype, file_mode,
    is_url, move_aside, parse_index, shard_tensors, tqdm_progress)
from picaso_core.store.writer import StoreWriter, _Shard


def missing_index(folder: Path | None, where, build_cmd: str, api: bool = False) -> str:
    """The message for a store location without store.json: nothing built yet, or a build stopped
    before its final index step (its shards and sidecars are there: a rerun encodes only the rest)."""
    shards = sorted(folder.glob("shard-*.safetensors")) if folder is not None and folder.is_dir() else []
    if shards:
        return (f"{where} holds {len(shards)} shards but no {META_FILE}: its build stopped before writing the index; "
                f"finish it with `{build_cmd}` (it encodes only what is missing)")
    return (f"no state store at {where}; build one with `{build_cmd}`"
            + (" (or StateStore.build(model, contexts, folder))" if api else f" (there is no {META_FILE})"))


def writable(folder: Path) -> bool:
    """Whether this process can add shards to the local store in `folder` and rewrite its index."""
    meta = folder / META_FILE
    return os.access(folder, os.W_OK) and (not meta.exists() or os.access(meta, os.W_OK))


class StateStore(StoreWriter):
    """The database of states of one model. Build with `build`, reopen with `open`.

    States returned by `get` / `get_many` are shared with the cache: treat them as read-only values
    (composition functions are pure, so nothing in picaso_core writes into them).
    """

    def __init__(self, folder: Path, model, meta: dict, cache_bytes: int, verify: bool, remote=None):
        self.folder = folder  # the store, or for a remote store the local cache of its shards
        self.url = remote[2] if remote else str(folder)
        self._remote = remote  # (fsspec filesystem, root path, url) of a remote store, else None
        self.model = model
        self.fingerprint: str = meta["model"]["fingerprint"]
        self.dtype: str = meta.get("dtype", "float32")
        self._meta = meta
        self._shards = [_Shard(**s) for s in meta["shards"]]
        self._contexts: dict[str, dict] = {c["id"]: c for c in meta["contexts"]}
        self._cache: OrderedDict[str, ContextState] = OrderedDict()
        self._cache_nbytes = 0
        self.cache_bytes = int(cache_bytes)
        self._verify = verify
        self._verified: set[int] = set()
        self._bad: dict[int, str] = {}  # shard index -> reason, found by size check or sha256
        self._lock = threading.RLock()  # the app serves several users from one store
        # Writers (add, ensure, repair) run one at a time; readers only wait for the short
        # bookkeeping under _lock, never for another request's encoding.
        self._write_lock = threading.RLock()
        # a shared disk or a mounted bucket: the states it holds are served, nothing is written
        self._read_only = remote is not None or not writable(folder)
        for i, sh in enumerate(self._shards):
            if remote is None:  # remote shards are checked when fetched
                self._check_size(i, sh)

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        model,
        contexts: Iterable[tuple[str, str]],
        folder: str | Path,
        *,
        suffix: str = "",
        shard_size: int | None = None,
        batch_size: int = 16,
        progress: Progress | bool = True,
        overwrite: bool = False,
        cache_bytes: int = CACHE_BYTES,
        dtype: str = "float32",
    ) -> "StateStore":
        """Encode every (id, text) context with `model` and save the states to `folder`.

        Args:
            contexts: (context id, text) pairs; ids are strings, unique.
            suffix: appended to every text before tokenising (see the module docstring).
            shard_size: contexts per shard; default: as many as fit in SHARD_BYTES.
            batch_size: contexts per batched forward (model.encode_contexts).
            progress: a progress(done, total) callback, True for a tqdm bar, False for none.
            overwrite: replace an existing store in `folder` (otherwise refused).
            dtype: "float32", "float16" or "bfloat16": how `ssm` and `conv` are stored (see the
                module docstring); fixed for the store's life.
        """
        check_dtype(dtype)
        if is_url(folder):
            raise StoreError(f"StateStore.build writes a local folder; build at {folder} with "
                             "`python -m picaso_core.store build --out URL`")
        folder = Path(folder)
        if (folder / META_FILE).exists() and not overwrite:
            raise StoreError(
                f"{folder} already holds a state store; open it with StateStore.open(folder, model), "
                "add contexts with store.add(...), or pass overwrite=True to rebuild it"
            )
        folder.mkdir(parents=True, exist_ok=True)
        for old in [*folder.glob("shard-*.safetensors"), *folder.glob("shard-*.json")]:
            old.unlink()
        for old in (folder / "embeddings").glob("*"):
            old.unlink()
        meta = {
            "format": FORMAT,
            "model": {
                "fingerprint": model.fingerprint(),
                "name": _model_name(model),
                "config": model.config.to_dict(),
            },
            "state_shapes": {k: list(v) for k, v in model.config.state_shapes().items()},
            "suffix": suffix,
            "dtype": dtype,
            "shards": [],
            "contexts": [],
        }
        store = cls(folder, model, meta, cache_bytes=cache_bytes, verify=True)
        store._save_meta()  # an empty, valid store at once: an old store.json never outlives its shards
        store.add(contexts, shard_size=shard_size, batch_size=batch_size, progress=progress)
        return store

    @classmethod
    def open(cls, folder: str | Path, model, *, cache_bytes: int = CACHE_BYTES, verify: bool = True,
             cache_dir: str | Path | None = None, build_cmd: str | None = None) -> "StateStore":
        """Open the store in `folder` (a local folder or an fsspec URL) for `model`; refuses states
        built by any other model.

        Nothing but store.json is read here; states load lazily. With verify=True each shard's
        sha256 is checked the first time it is read. A URL's shards are fetched into
        <cache_dir>/<hash of the URL> (default cache_dir: REMOTE_CACHE) the first time they are read.
        build_cmd: the command that builds this store (its --model, --corpus, --out), named by the
        errors for a missing or unreadable store.json.
        """
        remote = None
        if is_url(folder):
            from fsspec.core import url_to_fs  # fsspec on first use (~80 ms): URL stores only

            url = str(folder).rstrip("/")
            fs, root = url_to_fs(url)
            remote = (fs, root.rstrip("/"), url)
            folder = Path(cache_dir or REMOTE_CACHE) / hashlib.sha256(url.encode()).hexdigest()[:16]
            path = f"{remote[1]}/{META_FILE}"
            exists = fs.exists(path)
            read = lambda: fs.cat_file(path).decode()  # noqa: E731
        else:
            folder = Path(folder)
            path = folder / META_FILE
            exists = path.exists()
            read = path.read_text
        where = remote[2] if remote else folder
        build_cmd = build_cmd or (f"python -m picaso_core.store build --model {getattr(model, 'name_or_path', None) or 'MODEL'} "
                                  f"--corpus CORPUS --out {where}")
        if not exists:
            raise StoreError(missing_index(folder if remote is None else None, where, build_cmd, api=True))
        meta = parse_index(read(), path, f"rebuild it from the shards with `{build_cmd} --rebuild-index`")
        fp = model.fingerprint()
        built = meta["model"]
        if built["fingerprint"] != fp:
            raise StoreError(
                f"the states in {where} were built by {built['name']} "
                f"({_describe_config(built['config'])}, fingerprint {built['fingerprint'][:12]}), not by the "
                f"model given ({_model_name(model)}, {_describe_config(model.config.to_dict())}, fingerprint "
                f"{fp[:12]}); states of another model cannot be composed with it. Rebuild with "
                f"StateStore.build(model, contexts, '{folder}', overwrite=True), or use another folder."
            )
        return cls(folder, model, meta, cache_bytes=cache_bytes, verify=verify, remote=remote)

    @property
    def read_only(self) -> bool:
        """True for a store this process cannot write: opened from a URL, or a local folder without
        write permission (a read-only mount, another account's files)."""
        return self._read_only

    @property
    def remote(self) -> bool:
        """True for a store opened from a URL (read-only, shards cached locally)."""
        return self._remote is not None

    # ---- reading ---------------------------------------------------------------------------
    @property
    def ids(self) -> list[str]:
        """Context ids in the order they were added."""
        return list(self._contexts)

    def __len__(self) -> int:
        return len(self._contexts)

    def __contains__(self, cid: str) -> bool:
        return cid in self._contexts

    def text(self, cid: str) -> str:
        return self._entry(cid)["text"]

    def num_tokens(self, cid: str) -> int:
        return self._entry(cid)["num_tokens"]

    @property
    def suffix(self) -> str:
        return self._meta["suffix"]

    def token_ids(self, cid: str) -> list[int]:
        """The token ids the state of `cid` was encoded from."""
        return self.model.tokenizer.encode(self.text(cid) + self.suffix)

    @property
    def nbytes(self) -> int:
        """Bytes of all shards on disk."""
        return sum(s.nbytes for s in self._shards)

    def get(self, cid: str) -> ContextState:
        return self.get_many([cid])[0]

    def get_many(self, ids: Sequence[str]) -> list[ContextState]:
        """States of `ids`, in that order; each shard touched is opened once."""
        with self._lock:
            missing: dict[int, list[str]] = {}
            for cid in ids:
                if cid not in self._cache:
                    missing.setdefault(self._entry(cid)["shard"], []).append(cid)
            loaded: dict[str, ContextState] = {}
            for si, cids in missing.items():
                path = self._ensure_good(si)
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    names = set(f.keys())  # a hybrid model's states also hold "<id>/keys" and "<id>/values"
                    for cid in cids:
                        tensors = {k: f.get_tensor(f"{cid}/{k}") for k in ("ssm", "conv", "log_decay", "keys", "values")
                                   if f"{cid}/{k}" in names}
                        loaded[cid] = ContextState.from_tensors(tensors, self._contexts[cid]["num_tokens"])
            out = [loaded[cid] if cid in loaded else self._cache[cid] for cid in ids]
            for cid, state in zip(ids, out):
                self._remember(cid, state)
            return out

    def cached_ids(self) -> list[str]:
        """Ids held in the in-memory cache, least recently used first."""
        with self._lock:
            return list(self._cache)

    # ---- integrity -------------------------------------------------------------------------
    def check(self) -> list[str]:
        """Verify every shard's size and sha256; returns the files of the bad ones ([] if none)."""
        with self._lock:
            for i in range(len(self._shards)):
                try:
                    self._ensure_good(i)
                except CorruptShardError:
                    pass
            return [self._shards[i].file for i in sorted(self._bad)]

    @property
    def damaged(self) -> dict[str, str]:
        """file -> what is wrong, for the shards found bad so far (at open: missing or cut short;
        after a read or `check()`: also those whose sha256 differs)."""
        with self._lock:
            return {self._shards[i].file: why for i, why in sorted(self._bad.items())}

    def unservable(self, ids: Iterable[str], probe: bool = True) -> dict[str, str]:
        """id -> "damaged" or "missing", for those of `ids` this store cannot serve: on a read-only store,
        contexts in a shard found damaged and contexts it lacks. A writable store serves every id (it
        repairs a damaged shard and encodes a missing context on use): {}. With `probe`, the shards of
        `ids` not checked yet are checked now (size and sha256, once per shard per process, as their
        first read would), so retrieval passes over a flipped byte before it picks those contexts;
        no other shard is read."""
        if not self._read_only:
            return {}
        out = {}
        with self._lock:
            for cid in ids:
                if cid not in self._contexts:
                    out[cid] = "missing"
                    continue
                si = self._contexts[cid]["shard"]
                if probe and si not in self._bad and si not in self._verified:
                    try:
                        self._ensure_good(si)
                    except CorruptShardError:
                        pass
                if si in self._bad:
                    out[cid] = "damaged"
        return out

    def damaged_ids(self) -> set[str]:
        """The ids of a read-only store's shards found damaged so far (a writable store repairs them)."""
        with self._lock:
            return {cid for i in self._bad for cid in self._shards[i].ids} if self._read_only else set()

    def _local_path(self, sh: _Shard) -> Path:
        if self._remote is None:
            return self.folder / sh.file
        return self.folder / f"{sh.sha256[:16]}-{sh.file}"  # content-addressed: never stale

    def _check_size(self, i: int, sh: _Shard) -> None:
        path = self._local_path(sh)
        if self._remote is not None and not path.exists():
            self._fetch(i, sh, path)
            if i in self._bad:
                return
        if not path.exists():
            self._bad[i] = "file missing"
        elif path.stat().st_size != sh.nbytes:
            self._bad[i] = f"{path.stat().st_size} bytes on disk, {sh.nbytes} written (truncated?)"

    def _fetch(self, i: int, sh: _Shard, path: Path) -> None:
        """Copy a remote shard whole into the local cache (through a temporary file and a rename)."""
        fs, root, _ = self._remote
        src = f"{root}/{sh.file}"
        if not fs.exists(src):
            self._bad[i] = "file missing"
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fs.get_file(src, str(tmp))
        os.replace(tmp, path)

    def _ensure_good(self, i: int) -> Path:
        """The local path of shard i, checked (size; sha256 and fingerprint once) before first use."""
        sh = self._shards[i]
        path = self._local_path(sh)
        if i not in self._bad and i not in self._verified:
            self._check_size(i, sh)
            if i not in self._bad and self._verify:
                if _sha256(path) != sh.sha256:
                    self._bad[i] = "sha256 differs from the one written at build time"
                    if self._remote is not None:  # a bad download: the next open fetches it again
                        path.unlink()
                        self._bad[i] += "; the cached copy was deleted, reopen the store to fetch it again"
            if i not in self._bad:
                fp = _shard_header(path).get("fingerprint")
                if fp not in (None, self.fingerprint):  # a shard copied in from another model's store
                    self._bad[i] = f"its states were encoded by another model (fingerprint {fp[:12]}, store {self.fingerprint[:12]})"
            if i not in self._bad:
                self._verified.add(i)
        if i in self._bad:
            raise CorruptShardError(sh.file, self._bad[i], self.url, sh.worker)
        return path

    # ---- cache -----------------------------------------------------------------------------
    def _remember(self, cid: str, state: ContextState) -> None:
        if cid in self._cache:
            self._cache.move_to_end(cid)
            return
        if state.nbytes > self.cache_bytes:
            return
        self._cache[cid] = state
        self._cache_nbytes += state.nbytes
        while self._cache_nbytes > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._cache_nbytes -= old.nbytes

    def _entry(self, cid: str) -> dict:
        try:
            return self._contexts[cid]
        except KeyError:
            raise KeyError(f"context id {cid!r} is not in the state store at {self.folder} ({len(self)} contexts)") from None

    def __repr__(self) -> str:
        return f"StateStore({self.url!r}, {self.dtype}, {len(self)} contexts, {len(self._shards)} shards, {self.nbytes / 2**20:.1f} MiB)"


def derived_folder(cache_dir: str | Path, store: StateStore) -> Path:
    """Where an app or a CLI keeps what it derives from a store (the retriever's embeddings, ranker
    caches): a store inside `cache_dir` (their own) or a URL store's local cache holds them itself;
    a store given with --store gets <cache_dir>/stores/<name>-<hash of its path>, so nothing is
    written into or beside it (it may be read-only, or another account's)."""
    folder = Path(store.folder).resolve()
    cache = Path(cache_dir).resolve()
    if store.remote or folder.is_relative_to(cache):
        return Path(store.folder)
    return cache / "stores" / f"{folder.name}-{hashlib.sha256(str(folder).encode()).hexdigest()[:8]}"


def heal(store: StateStore, log, verify: bool = False) -> None:
    """At the start of a run (app, experiments CLI) or after a failed read: repair the damaged
    shards when the store is writable, else warn that their contexts are refused; one line either
    way. Without `verify` only what is known is repaired (missing or cut-short shards found at
    open, or shards that failed a read); with it every shard's sha256 is checked first."""
    if verify and not store.remote:
        store.check()
    bad = store.damaged
    if not bad:
        return
    listed = "; ".join(f"{f}: {why}" for f, why in bad.items())
    if store.read_only:
        log(f"warning: {store.url}: {len(bad)} damaged shards ({listed}); retrieval passes over their contexts and "
            f"a request that picks one is refused until `python -m picaso_core.store repair {store.url}` is run by "
            "the store's owner; the rest serve")
        return
    # counted before the repair: it replaces the shard list it would otherwise be read from
    held = {s.file: len(s.ids) for s in store._shards}
    fixed = store.repair(progress=False)
    if not fixed:  # another request repaired them while this one waited for the write lock
        return
    n = sum(held.get(f, 0) for f in fixed)
    listed = "; ".join(f"{f}: {bad.get(f) or store.damaged.get(f, 'damaged')}" for f in fixed)
    log(f"{store.url}: repaired {len(fixed)} damaged shards ({listed}): their {n} contexts re-encoded from their "
        f"stored text; the bad files were moved to {Path(store.folder) / DAMAGED}/")


def check_serves(store: StateStore, database: dict[str, str], suffix: str, build_cmd: str | None = None,
                 or_else: str = "") -> None:
    """Refuse, before any work, a store that cannot serve the contexts of `database` (id -> text):
    another context suffix, a context whose text changed under its id, or, opened from a URL (so
    read-only), one it lacks. The app (ui.resources.open_or_build_store) and the experiments CLI
    both run this check.

    build_cmd: the command the last error names to complete the store (default: the build with
    --out only); or_else: an alternative appended to it (the app's ", or keep fewer contexts ...").
    """
    where = store.url
    if store.suffix != suffix:
        raise StoreError(f"{where} was built with context suffix {store.suffix!r}, not {suffix!r}; "
                         "delete the folder to rebuild it, or pass another store")
    changed = [cid for cid in store.ids if cid in database and database[cid] != store.text(cid)]
    if changed:
        raise StoreError(
            f"the corpus changed: {len(changed)} contexts (e.g. {changed[0]!r}) have a new text under the same id; "
            f"delete {where} to rebuild the store"
        )
    missing = [cid for cid in database if cid not in store]
    if store.remote and missing:
        build_cmd = build_cmd or f"python -m picaso_core.store build --out {where}"
        raise StoreError(
            f"the store at {where} holds {len(database) - len(missing)} of the corpus's {len(database)} contexts "
            f"(e.g. {missing[0]!r} is missing) and is read-only here; complete it with `{build_cmd}` (it encodes "
            f"only what is missing){or_else}")

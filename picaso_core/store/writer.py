"""Writing a StateStore (picaso_core.store.store): encoding contexts into new shards (`add`,
`ensure`), re-encoding the contexts of a bad shard (`repair`), and saving the store.json index.

StateStore inherits these methods from StoreWriter; they use the store's attributes (folder, model,
suffix, dtype, fingerprint, the shards and contexts, the locks). Shards are written once and never
modified (`add` writes new shards, `repair` replaces a bad one whole), each through a temporary
file and a rename, so an interrupted write leaves the previous store intact.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from typing import Iterable

from picaso_core.engine.state import ContextState
from picaso_core.store.format import (FORMAT, META_FILE, SIDECAR, Progress, StoreError, _atomic_write_text, _sha256,
                                      check_dtype, move_aside, save_shard, shard_groups, shard_tensors, share_mode,
                                      sidecar, tqdm_progress)

# what a write into a read-only mount, or into another account's folder, fails with
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass
class _Shard:
    """One entry of store.json's shards: a file of states, its sha256, size and context ids."""

    file: str
    sha256: str
    nbytes: int
    ids: list[str]
    worker: str = ""  # who wrote it (a multi-worker build); "" for shards written by `add`


class StoreWriter:
    """The writing half of StateStore: encoding contexts into new shards, repairing bad ones."""

    # ---- writing ---------------------------------------------------------------------------
    def add(
        self,
        contexts: Iterable[tuple[str, str]],
        *,
        shard_size: int | None = None,
        batch_size: int = 16,
        progress: Progress | bool = True,
        dtype: str | None = None,
    ) -> list[str]:
        """Encode and append new contexts in new shards; existing shards are not touched.

        Returns the ids added. Refuses ids already in the store (a context's state never changes
        under its id; give a changed text a new id, or rebuild), and a `dtype` other than the
        store's (one store, one precision: mixed shards would compose unevenly).
        """
        if dtype is not None and check_dtype(dtype) != self.dtype:
            raise StoreError(f"the store at {self.url} holds {self.dtype} states; it cannot be appended to in "
                             f"{dtype}. Append in {self.dtype}, or build a new store with dtype={dtype!r}")
        with self._write_lock:
            return self._add([(str(cid), text) for cid, text in contexts], shard_size, batch_size, progress)

    def ensure(
        self, contexts: Iterable[tuple[str, str]], *, batch_size: int = 16, progress: Progress | bool = False
    ) -> list[str]:
        """Encode and add those of `contexts` the store lacks (the app's lazy store); returns their ids.

        Safe to call from several threads: a context asked for twice at once is encoded once.
        Raises StoreError if an id is stored with another text (its state would be stale).
        """
        items = list(dict((str(cid), text) for cid, text in contexts).items())
        with self._write_lock:
            stale = [cid for cid, text in items if cid in self._contexts and self._contexts[cid]["text"] != text]
            if stale:
                raise StoreError(
                    f"context {stale[0]!r} is stored at {self.folder} with another text; its state is stale. "
                    "Give the new text a new id, or rebuild the store"
                )
            new = [(cid, text) for cid, text in items if cid not in self._contexts]
            if new and self._read_only and self._remote is None:
                raise StoreError(f"this store does not hold context {new[0][0]!r}; the store is read-only")
            try:
                return self._add(new, None, batch_size, progress)
            except OSError as e:
                if e.errno not in READ_ONLY_ERRNOS:
                    raise
                self._read_only = True  # found on the first write: later requests are refused at once
                raise StoreError(f"this store does not hold context {new[0][0]!r}; the store is read-only") from None

    def _add(self, items: list[tuple[str, str]], shard_size: int | None, batch_size: int,
             progress: Progress | bool) -> list[str]:
        seen: set[str] = set()
        for cid, text in items:
            if cid in self._contexts or cid in seen:
                raise StoreError(f"context id {cid!r} is already in the store at {self.folder} (or given twice); ids are unique")
            if not isinstance(text, str):
                raise StoreError(f"context {cid!r}: text must be a str, got {type(text).__name__}")
            seen.add(cid)
        if not items:
            return []
        self._check_writable()
        if progress is True:
            progress = tqdm_progress(f"encoding {len(items)} contexts")
        tok = self.model.tokenizer
        token_ids = {cid: tok.encode(text + self.suffix) for cid, text in items}
        # Shards group contexts of similar length, so the batches inside them pad little.
        by_length = sorted(items, key=lambda it: len(token_ids[it[0]]))
        new_entries = {cid: {"id": cid, "text": text, "num_tokens": len(token_ids[cid])} for cid, text in items}
        done = 0
        lengths = [len(token_ids[cid]) for cid, _ in by_length]
        for group in shard_groups(by_length, lengths, self.model.config, shard_size):  # by bytes: a hybrid's grow
            chunk = [cid for cid, _ in group]
            base = done

            def sub(i: int, n: int, base=base) -> None:
                if progress:
                    progress(base + i, len(items))

            states = self.model.encode_contexts([token_ids[c] for c in chunk], batch_size=batch_size, progress=sub)
            si = self._write_shard(chunk, states, texts=[new_entries[c]["text"] for c in chunk])
            for cid in chunk:
                new_entries[cid]["shard"] = si
            done += len(chunk)
            if progress:
                progress(done, len(items))
        with self._lock:
            for cid, _ in items:  # insertion order, not length order
                self._contexts[cid] = new_entries[cid]
            self._save_meta()
        return [cid for cid, _ in items]

    def _write_shard(self, cids: list[str], states: list[ContextState], index: int | None = None,
                     texts: list[str] | None = None) -> int:
        """Write one shard, then its sidecar (as a build does: a lost store.json is rebuilt from the
        sidecars without encoding), and list it at `index` (a new one: at the end). A repaired shard
        keeps its file name; a new one gets shard-<index> unless the index lists that name already
        (a build may have dropped shards before it). texts: the contexts' texts where the index
        does not hold them yet (default: the index's); a shard whose texts are unknown gets no sidecar."""
        tensors = shard_tensors(cids, states, self.model.config.state_shapes(), self.dtype)
        taken = {s.file for s in self._shards}
        if index is None:
            index, n = len(self._shards), 0
            name = f"shard-{index:05d}.safetensors"
            while name in taken:
                n += 1
                name = f"shard-{index:05d}-{n}.safetensors"
        else:
            name = self._shards[index].file
        path = self.folder / name
        tmp = path.with_name(name + ".tmp")
        save_shard(tensors, tmp, {"format": FORMAT, "fingerprint": self.fingerprint, "dtype": self.dtype})
        share_mode(tmp)
        os.replace(tmp, path)
        shard = _Shard(file=name, sha256=_sha256(path), nbytes=path.stat().st_size, ids=list(cids))
        if texts is None and all(c in self._contexts for c in cids):
            texts = [self._contexts[c]["text"] for c in cids]
        if texts is not None:  # last: a sidecar means its shard is whole
            rec = sidecar(name, shard.sha256, shard.nbytes, cids, [int(st.num_tokens) for st in states], texts,
                          self.fingerprint, self.dtype)
            _atomic_write_text(self.folder / (name + SIDECAR), json.dumps(rec))
        with self._lock:
            if index == len(self._shards):
                self._shards.append(shard)
            else:
                self._shards[index] = shard
            self._verified.add(index)
            self._bad.pop(index, None)
        return index

    def _check_writable(self) -> None:
        if self._remote is not None:
            raise StoreError(f"the store at {self.url} is read-only here (opened from a URL); add contexts with "
                             f"`python -m picaso_core.store build --out {self.url} ...`, or open a local copy")
        if self._read_only:
            raise StoreError(f"the store at {self.url} is read-only (no write permission on its folder or "
                             f"{META_FILE}); write it as its owner, or copy it to a writable folder")

    def _save_meta(self) -> None:
        self._meta["shards"] = [vars(s) for s in self._shards]
        self._meta["contexts"] = list(self._contexts.values())
        _atomic_write_text(self.folder / META_FILE, json.dumps(self._meta, indent=1))

    def repair(self, progress: Progress | bool = True) -> list[str]:
        """Re-encode the contexts of every bad shard from their stored text; returns the files fixed.

        The bad files (and a build's sidecars of them) are moved into <folder>/damaged/ first, so no
        later index, nor a rebuild of it from the sidecars, picks them up again."""
        with self._write_lock:
            return self._repair(progress)

    def _repair(self, progress: Progress | bool) -> list[str]:
        bad = self.check()
        if bad:
            self._check_writable()
        for file in bad:
            move_aside(self.folder, [file, file + ".json"])
            si = next(i for i, s in enumerate(self._shards) if s.file == file)
            cids = self._shards[si].ids
            bar = tqdm_progress(f"re-encoding {file}") if progress is True else progress
            states = self.model.encode_contexts([self.token_ids(c) for c in cids], progress=bar or None)
            self._write_shard(cids, states, index=si)
        if bad:
            with self._lock:
                self._save_meta()
        return bad

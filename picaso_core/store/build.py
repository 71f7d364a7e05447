"""Build a StateStore from a corpus, on this machine or on a Ray cluster (paper sec. 3.2: the
database of states is encoded once, offline).

    python -m picaso_core.store build --model demo --corpus demo --split test --out stores/demo
    python -m picaso_core.store build ... --engine ray --workers 2             # a local Ray runtime
    python -m picaso_core.store build ... --engine ray --address auto          # an existing cluster
    python -m picaso_core.store build ... --dtype bfloat16 --out s3://bucket/stores/demo

Both engines run the same `ShardEncoder` on batches of contexts: it tokenises (text + suffix),
encodes with `model.encode_contexts`, and writes one shard in the StateStore's format plus a
<shard>.json sidecar (ids, token counts, sha256, the model's fingerprint, dtype, the worker's
name). The local engine calls it in this process; the Ray engine hands it to Ray Data
(`map_batches` with an actor pool: the model loads once per actor, one GPU per actor where the
cluster has GPUs, one CPU otherwise). A final step on the driver (`write_index`) gathers the
sidecars into store.json. So both engines give the same store: the same ids in corpus order,
equal states (bit-for-bit up to batching), shards named by worker.

Resumable: a shard and its sidecar are written whole (temporary file + rename), the sidecar
last; a rerun reads the sidecars and encodes only the contexts no complete shard holds. A
sidecar from another model, another dtype or a changed text is refused with its file and worker
named; a sidecar whose shard vanished is re-encoded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from picaso_core.store.format import (DAMAGED, FORMAT, META_FILE, SHARD_BYTES, SIDECAR, StoreError, _sha256,
                                      check_dtype, index_sidecar, is_url, move_aside, parse_index, save_shard,
                                      shard_groups, shard_tensors, share_mode, sidecar, text_hash, tqdm_progress)
from picaso_core.store.writer import READ_ONLY_ERRNOS

# the separator the demo model saw between contexts: the app's and the experiments' CONTEXT_SUFFIX
DEFAULT_SUFFIX = "\n\n"


def _fs(out: str):
    """(fsspec filesystem, root path) of a local folder or a URL."""
    from fsspec.core import url_to_fs  # fsspec on first use (~80 ms): not on the CLI's --help

    return url_to_fs(str(out).rstrip("/") if is_url(out) else str(Path(out).resolve()))


def _put(fs, local: Path, dest: str) -> None:
    """Move a finished local file to `dest`: an atomic rename on a local disk, an upload elsewhere
    (an object appears whole or not at all on s3/gcs)."""
    from fsspec.implementations.local import LocalFileSystem  # fsspec on first use, as in _fs

    if isinstance(fs, LocalFileSystem):
        os.replace(local, dest)
    else:
        fs.put_file(str(local), dest)
        local.unlink()


def _scratch(fs, root: str) -> Path:
    """Where a shard is written before `_put`: its destination folder when local (same disk, so
    the rename is atomic), else the system's temporary folder."""
    from fsspec.implementations.local import LocalFileSystem  # fsspec on first use, as in _fs

    return Path(root) if isinstance(fs, LocalFileSystem) else Path(tempfile.gettempdir())


class ShardEncoder:
    """Encodes batches of contexts into shards (the Ray Data actor class; the local engine calls it
    too). The model loads once, in the constructor: one per Ray actor.

    Args:
        model: a loaded SSMLanguageModel, or what `load_model` takes ("demo", a folder, a hub id).
        out: the store's folder or URL.
        fingerprint: the driver's model fingerprint; a worker whose model differs refuses to start.
        worker: the name written into shard names and sidecars; default: host-pid.
    """

    def __init__(self, model, out: str, dtype: str, suffix: str, fingerprint: str, batch_size: int = 16,
                 worker: str | None = None):
        if isinstance(model, str):
            # the worker loads the model (engine.model: ~1 s of torch._dynamo), not the CLI's --help
            from picaso_core.engine.loading import load_model

            model = load_model(model, device="cuda" if torch.cuda.is_available() else "cpu")
        if model.fingerprint() != fingerprint:
            raise StoreError(f"worker {socket.gethostname()}: its model has fingerprint {model.fingerprint()[:12]}, "
                             f"the driver's {fingerprint[:12]}; every node needs the same checkpoint")
        self.model, self.dtype, self.suffix, self.batch_size = model, dtype, suffix, batch_size
        self.fs, self.root = _fs(out)
        self.worker = worker or re.sub(r"[^A-Za-z0-9]+", "_", f"{socket.gethostname()}-{os.getpid()}")

    def __call__(self, batch: dict) -> dict:
        """batch: {"id": [...], "text": [...]} -> {"record": [the shard's sidecar as JSON]}."""
        rec = self.encode(list(map(str, batch["id"])), list(map(str, batch["text"])))
        return {"record": np.array([json.dumps(rec)])}

    def encode(self, ids: list[str], texts: list[str]) -> dict:
        """Encode, write one shard and its sidecar; returns the sidecar."""
        tok = self.model.tokenizer
        token_ids = [tok.encode(t + self.suffix) for t in texts]
        states = self.model.encode_contexts(token_ids, batch_size=self.batch_size)
        fp = self.model.fingerprint()
        tensors = shard_tensors(ids, states, self.model.config.state_shapes(), self.dtype)
        # named by worker and ids: a batch retried on the same actor overwrites its earlier attempt; a copy
        # written by another actor is left out of the index (write_index lists each id once)
        name = f"shard-{self.worker}-{hashlib.sha256(chr(0).join(ids).encode()).hexdigest()[:10]}.safetensors"
        scratch = _scratch(self.fs, self.root)
        tmp = scratch / f"{name}.{os.getpid()}.tmp"
        save_shard(tensors, tmp, {"format": FORMAT, "fingerprint": fp, "dtype": self.dtype, "worker": self.worker})
        share_mode(tmp)
        rec = sidecar(name, _sha256(tmp), tmp.stat().st_size, ids, [len(t) for t in token_ids], texts, fp, self.dtype,
                      self.worker)
        _put(self.fs, tmp, f"{self.root}/{name}")
        side = scratch / f"{name}{SIDECAR}.{os.getpid()}.tmp"
        side.write_text(json.dumps(rec))
        share_mode(side)
        _put(self.fs, side, f"{self.root}/{name}{SIDECAR}")  # last: a sidecar means the shard is whole
        return rec


def read_sidecars(fs, root: str) -> list[dict]:
    """Every shard sidecar in the store folder, by file name."""
    if not fs.exists(root):
        return []
    names = sorted(p for p in fs.ls(root, detail=False) if p.endswith(".safetensors" + SIDECAR))
    records, torn = [], []
    for p in names:
        try:
            rec = json.loads(fs.cat_file(p))
            if not {"file", "sha256", "nbytes", "ids", "num_tokens", "texts", "fingerprint", "dtype"} <= set(rec):
                raise ValueError
            records.append(rec)
        except ValueError:  # a damaged sidecar: its shard is encoded again
            torn.append(p.rsplit("/", 1)[-1])
    if torn:
        _aside(fs, root, torn)
        print(f"{len(torn)} unreadable sidecars ({', '.join(torn)}) moved to {root}/{DAMAGED}/; their shards' "
              "contexts are encoded again", file=sys.stderr)
    return records


def _check_record(rec: dict, fingerprint: str, dtype: str, where: str) -> None:
    who = f"shard {rec['file']} (written by worker {rec.get('worker', '?')})"
    if rec["fingerprint"] != fingerprint:
        raise StoreError(f"{where}: {who} holds states of another model (fingerprint {rec['fingerprint'][:12]}, "
                         f"this model {fingerprint[:12]}); delete it and its {SIDECAR} sidecar, then rerun the build")
    if rec["dtype"] != dtype:
        raise StoreError(f"{where}: {who} holds {rec['dtype']} states; a store in one dtype cannot be appended to "
                         f"in another: pass --dtype {rec['dtype']}, or build into another --out")


def _sizes(fs, root: str) -> dict[str, int]:
    """File name -> bytes of everything in the store folder (one listing, also on object stores)."""
    return {p["name"].rsplit("/", 1)[-1]: p["size"] for p in fs.ls(root, detail=True)} if fs.exists(root) else {}


def _fs_sha256(fs, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _aside(fs, root: str, names: list[str]) -> None:
    """Move damaged files into <root>/damaged/, where no index or sidecar scan looks."""
    from fsspec.implementations.local import LocalFileSystem  # fsspec on first use, as in _fs

    if isinstance(fs, LocalFileSystem):
        move_aside(Path(root), names)
        return
    for name in names:
        if fs.exists(f"{root}/{name}"):
            fs.mv(f"{root}/{name}", f"{root}/{DAMAGED}/{name}")


def _damage(fs, root: str, meta: dict | None, sidecars: list[dict], sizes: dict[str, int],
            verify: bool) -> dict[str, tuple[str, dict]]:
    """file -> (what is wrong, its record) for every shard that store.json or a sidecar lists and
    that is missing, cut short, or (verify) whose bytes do not hash to the sha256 written with it."""
    listed: dict[str, dict] = {}
    for rec in [*(meta["shards"] if meta else []), *sidecars]:
        listed.setdefault(rec["file"], rec)
    bad = {}
    for file, rec in listed.items():
        if file not in sizes:
            bad[file] = ("missing", rec)
        elif sizes[file] != rec["nbytes"]:
            bad[file] = (f"truncated ({sizes[file]} bytes on disk, {rec['nbytes']} written)", rec)
        elif verify and _fs_sha256(fs, f"{root}/{file}") != rec["sha256"]:
            bad[file] = ("corrupt (its sha256 differs from the one written at build time)", rec)
    return bad


def _report_damage(bad: dict[str, tuple[str, dict]], out: str, moved: bool) -> None:
    """One line on stderr for all the damage a build found and repairs."""
    parts = [f"shard {file} (worker {rec.get('worker') or 'StateStore.add'}) is "
             f"{'missing or truncated' if not why.startswith('corrupt') else why} at {out}; "
             f"its {len(rec['ids'])} contexts are encoded again" for file, (why, rec) in bad.items()]
    where = f"; the damaged files were moved to {out.rstrip('/')}/{DAMAGED}/" if moved else ""
    print("; ".join(parts) + where, file=sys.stderr)


def restore_sidecars(fs, root: str, out: str, meta: dict, files: list[str], say=None) -> list[str]:
    """Write the missing sidecars of the whole shards `files` from store.json (nothing is encoded:
    the index records all a sidecar says); one line through `say` (default: on stderr). Returns the
    sidecars written. A store this account cannot write keeps serving without them: the line says so."""
    say = say or (lambda line: print(line, file=sys.stderr))
    by_file, entries = {s["file"]: s for s in meta["shards"]}, {c["id"]: c for c in meta["contexts"]}
    todo = [(f, rec) for f in files if (rec := index_sidecar(meta, by_file[f], entries)) is not None]
    written = []
    try:
        for f, rec in todo:
            tmp = _scratch(fs, root) / f"{f}{SIDECAR}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(rec))
            share_mode(tmp)
            _put(fs, tmp, f"{root}/{f}{SIDECAR}")
            written.append(f + SIDECAR)
    except OSError as e:
        if e.errno not in READ_ONLY_ERRNOS:
            raise
        say(f"{len(todo) - len(written)} shards at {out} have no sidecar and the folder cannot be written "
            f"({e.strerror}); the store serves without them")
    if written:
        say(f"{len(written)} missing sidecars written from {META_FILE} at {out} ({', '.join(written)}); "
            "no context encoded")
    return written


def plan(model, contexts: list[tuple[str, str]], out: str, dtype: str, suffix: str, verify: bool = False,
         rebuild_index: bool = False) -> tuple[dict | None, list, list]:
    """What is already built at `out`: (store.json or None, complete shard records, contexts to encode).

    Shards missing, cut short or (verify) whose sha256 differs are moved into <out>/damaged/ with
    their sidecars and their contexts encoded again. rebuild_index: ignore store.json (moved into
    damaged/ too) and take what is built from the shards' sidecars."""
    fs, root = _fs(out)
    fp = model.fingerprint()
    meta = None
    index = f"{root}/{META_FILE}"
    if fs.exists(index) and rebuild_index:
        _aside(fs, root, [META_FILE])
    elif fs.exists(index):
        meta = parse_index(fs.cat_file(index).decode(errors="replace"), f"{out}/{META_FILE}",
                           "rebuild it from the shards' sidecars: rerun this build with --rebuild-index")
        if meta["model"]["fingerprint"] != fp:
            raise StoreError(f"{out} holds the states of {meta['model'].get('name')} (fingerprint "
                             f"{meta['model']['fingerprint'][:12]}), not of this model ({fp[:12]}); use another --out")
        if meta.get("dtype", "float32") != dtype:
            raise StoreError(f"{out} holds {meta.get('dtype', 'float32')} states; a store in one dtype cannot be "
                             f"appended to in another: pass --dtype {meta.get('dtype', 'float32')}, or another --out")
        if meta["suffix"] != suffix:
            raise StoreError(f"{out} was built with context suffix {meta['suffix']!r}, not {suffix!r}; use another --out")
    sizes = _sizes(fs, root)
    sidecars = read_sidecars(fs, root)
    for rec in sidecars:
        _check_record(rec, fp, dtype, out)
    bad = _damage(fs, root, meta, sidecars, sizes, verify)
    if bad:
        _aside(fs, root, [n for f in bad for n in (f, f + SIDECAR)])
        _report_damage(bad, out, moved=True)
    if meta:
        restore_sidecars(fs, root, out, meta, [s["file"] for s in meta["shards"]
                                               if s["file"] not in bad and s["file"] + SIDECAR not in sizes])
        gone = {i for i, s in enumerate(meta["shards"]) if s["file"] in bad}
        for c in meta["contexts"]:
            if c["shard"] in gone:
                c["shard"] = None
    done = {c["id"]: text_hash(c["text"]) for c in meta["contexts"] if c["shard"] is not None} if meta else {}
    records = [rec for rec in sidecars if rec["file"] not in bad]
    for rec in records:
        done.update(zip(rec["ids"], rec["texts"]))
    texts = dict(contexts)
    changed = [cid for cid, h in done.items() if cid in texts and text_hash(texts[cid]) != h]
    if changed:
        raise StoreError(f"{len(changed)} contexts (e.g. {changed[0]!r}) are stored at {out} with another text; "
                         "build into another --out")
    return meta, records, [(cid, t) for cid, t in contexts if cid not in done]


def write_index(model, contexts: list[tuple[str, str]], out: str, dtype: str, suffix: str,
                meta: dict | None, records: list[dict]) -> dict:
    """The final step: store.json listing every shard (file, sha256, size, ids, worker) and every
    context (id, text, token count, shard), in the order of the old store then `contexts`.
    Refuses to write an index with a context no shard holds, or a shard missing on disk."""
    fs, root = _fs(out)
    sizes = _sizes(fs, root)
    entries = {c["id"]: dict(c) for c in meta["contexts"]} if meta else {}  # the old order, re-encoded ones too
    old_shard = {cid: meta["shards"][e["shard"]]["file"] for cid, e in entries.items() if e["shard"] is not None}
    shards = [dict(s) for s in meta["shards"] if s["file"] in old_shard.values()] if meta else []
    holder: dict[str, tuple[dict, int]] = {}
    for rec in sorted(records, key=lambda r: r["file"]):
        for cid, n in zip(rec["ids"], rec["num_tokens"]):
            holder.setdefault(cid, (rec, n))
    for cid, text in contexts:
        entries.setdefault(cid, {"id": cid, "text": text})
    for cid, e in entries.items():
        if cid not in old_shard:
            if cid not in holder:
                raise StoreError(f"context {cid!r} is in no shard at {out}; rerun the build to encode it")
            e["num_tokens"] = holder[cid][1]
    used = {old_shard.get(cid) or holder[cid][0]["file"] for cid in entries}
    files = [s["file"] for s in shards]
    for rec in sorted(records, key=lambda r: r["file"]):
        if rec["file"] in used and rec["file"] not in files:
            shards.append({k: rec[k] for k in ("file", "sha256", "nbytes", "ids", "worker")})
            files.append(rec["file"])
    index = {f: i for i, f in enumerate(files)}
    for s in shards:
        if sizes.get(s["file"]) != s["nbytes"]:
            who = f" (written by worker {s['worker']})" if s.get("worker") else ""
            raise StoreError(f"shard {s['file']}{who} is missing or truncated at {out}; rerun the build to re-encode it")
    for cid, e in entries.items():
        e["shard"] = index[old_shard.get(cid) or holder[cid][0]["file"]]
    new_meta = {
        "format": FORMAT,
        # the old record kept as it is: a rerun with nothing to encode then writes nothing
        "model": meta["model"] if meta else {"fingerprint": model.fingerprint(), "config": model.config.to_dict(),
                                             "name": str(getattr(model, "name_or_path", None) or "a model")},
        "state_shapes": {k: list(v) for k, v in model.config.state_shapes().items()},
        "suffix": suffix, "dtype": dtype, "shards": shards, "contexts": list(entries.values()),
    }
    text = json.dumps(new_meta, indent=1)
    if meta is not None and fs.exists(f"{root}/{META_FILE}") and fs.cat_file(f"{root}/{META_FILE}").decode() == text:
        return new_meta  # nothing changed: a read-only store stays untouched
    tmp = _scratch(fs, root) / f"{META_FILE}.{os.getpid()}.tmp"
    tmp.write_text(text)
    share_mode(tmp)
    _put(fs, tmp, f"{root}/{META_FILE}")
    return new_meta


def _local_engine(encoder: ShardEncoder, batches: list[list[tuple[str, str]]], progress) -> list[dict]:
    records, done, total = [], 0, sum(map(len, batches))
    for batch in batches:
        records.append(encoder.encode([c for c, _ in batch], [t for _, t in batch]))
        done += len(batch)
        progress(done, total)
    return records


def _ray_engine(enc_kwargs: dict, todo: list[tuple[str, str]], shard_size: int, workers: int | None,
                address: str | None, progress) -> list[dict]:
    try:
        import ray  # optional: the Ray engine only
    except ImportError:
        raise StoreError("--engine ray needs Ray: pip install 'ray[data]>=2.9'") from None
    started = not ray.is_initialized()
    if started:
        # workers import picaso_core from this checkout's path: enough on this machine, and on a cluster
        # whose nodes hold the checkout at the same path (a shared disk, the Docker image); else pip install it
        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                          os.environ.get("PYTHONPATH")]))}}
        # address "local" starts a new runtime even where one is running (plain ray.init() would join it)
        ray.init(address=address or "local", runtime_env=env, include_dashboard=False if not address else None,
                 log_to_driver=False)
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        workers = workers or gpus or 2
        ray.data.DataContext.get_current().enable_progress_bars = False  # ours counts contexts
        ds = ray.data.from_items([{"id": c, "text": t} for c, t in todo])
        # one GPU per actor where there are GPUs; else one CPU each (Ray then gives torch one thread)
        res = {"num_gpus": 1} if gpus else {"num_cpus": 1}
        shards = ds.map_batches(ShardEncoder, fn_constructor_kwargs=enc_kwargs, batch_size=shard_size,
                                compute=ray.data.ActorPoolStrategy(size=workers), batch_format="numpy", **res)
        records, done = [], 0
        for row in shards.iter_rows():
            records.append(json.loads(row["record"]))
            done += len(records[-1]["ids"])
            progress(done, len(todo))
        return records
    finally:
        if started:
            ray.shutdown()


def build_store(model, contexts: Sequence[tuple[str, str]], out: str | Path, *, engine: str = "local",
                workers: int | None = None, dtype: str = "float32", address: str | None = None,
                suffix: str = DEFAULT_SUFFIX, shard_size: int | None = None, batch_size: int = 16,
                progress=True, verify: bool | None = None, rebuild_index: bool = False) -> dict:
    """Encode the contexts `out` lacks and write its index; returns {"encoded", "skipped", "seconds",
    "contexts_per_s", "shards", "nbytes"}.

    Args:
        model: a loaded SSMLanguageModel; for the Ray engine `model.name_or_path` must be what
            `load_model` takes on the workers ("demo", a folder every node sees, a hub id).
        contexts: (id, text) pairs in the order the store lists them.
        out: a folder or an fsspec URL (s3://..., memory://... for the local engine only).
        engine: "local" (this process) or "ray" (Ray Data actors; `workers` of them).
        address: an existing Ray cluster ("auto", "ray://host:10001"); None starts a local one.
        shard_size: contexts per shard (= per Ray batch); default: as many as fit in SHARD_BYTES by
            their real bytes (config.state_nbytes(tokens): a hybrid's grow with the tokens).
        verify: hash every shard already there against its recorded sha256 (sizes are always
            checked); default: on for a local folder, off for a URL (it would download every shard).
        rebuild_index: ignore store.json (an unreadable one) and rebuild it from the shards' sidecars.
    """
    check_dtype(dtype)
    if engine not in ("local", "ray"):
        raise StoreError(f"engine must be 'local' or 'ray', got {engine!r}")
    if engine == "local" and (workers or 1) != 1:
        raise StoreError("--workers applies to --engine ray (the local engine is one process)")
    if engine == "ray" and str(out).startswith("memory://"):
        raise StoreError("memory:// is private to one process; Ray workers need a folder or URL they all reach")
    contexts = [(str(c), t) for c, t in contexts]
    if len({c for c, _ in contexts}) != len(contexts):
        raise StoreError("context ids must be unique")
    fs, root = _fs(out)
    fs.makedirs(root, exist_ok=True)
    verify = not is_url(out) if verify is None else verify
    meta, records, todo = plan(model, contexts, str(out), dtype, suffix, verify, rebuild_index)
    if progress is True:
        progress = tqdm_progress(f"encoding {len(todo)} contexts ({engine})")
    progress = progress or (lambda i, n: None)
    tok = model.tokenizer
    # shards (and the batches inside them) group contexts of similar length: little padding
    lengths = {cid: len(tok.encode(text + suffix)) for cid, text in todo}
    todo_sorted = sorted(todo, key=lambda it: lengths[it[0]])
    enc = dict(out=str(out), dtype=dtype, suffix=suffix, fingerprint=model.fingerprint(), batch_size=batch_size)
    t0 = time.perf_counter()
    if todo and engine == "local":
        # shards by their real bytes (a hybrid's keys and values grow with the tokens)
        batches = shard_groups(todo_sorted, [lengths[c] for c, _ in todo_sorted], model.config, shard_size)
        records += _local_engine(ShardEncoder(model, worker="local", **enc), batches, progress)
    elif todo:
        name = getattr(model, "name_or_path", None)
        if not isinstance(name, str):
            raise StoreError("the Ray engine loads the model on each worker: set model.name_or_path to what "
                             "load_model takes ('demo', a folder every node sees, or a hub id)")
        # Ray batches by count: as many of the longest context as fit in SHARD_BYTES
        per_shard = shard_size or max(1, SHARD_BYTES // model.config.state_nbytes(lengths[todo_sorted[-1][0]]))
        records += _ray_engine({"model": name, **enc}, todo_sorted, per_shard, workers, address, progress)
    seconds = time.perf_counter() - t0
    new = write_index(model, contexts, str(out), dtype, suffix, meta, records)
    return {"encoded": len(todo), "skipped": len(contexts) - len(todo), "seconds": seconds,
            "contexts_per_s": len(todo) / seconds if todo and seconds > 0 else None,
            "shards": len(new["shards"]), "nbytes": sum(s["nbytes"] for s in new["shards"])}

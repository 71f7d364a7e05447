"""The session: what loads once and is shared read-only between users (model, corpus, state store,
retriever), below the UI. bench/, scripts/, notebooks and the app all start from here:

    from picaso_core.session import load_resources
    res = load_resources("demo")          # model, corpus, state store, retriever
    ids = list(res.database)[:3]          # context ids
    states = res.states(ids)              # their stored states, encoded once on first use

No Gradio here: `load_resources` is what `python app.py` runs before building the page, and what a
notebook or bench script can run on its own. A request that fails on a known store fault raises
`StoreFault` (one line, no server path); the app's UI presents it as its own error
(`raise_store_faults_as`, called by picaso_core.ui.errors.answer_in_one_line as the app is built).

The store is a cache: <cache_dir>/<corpus>-<split>-<model fingerprint>/. Opening it reads only
store.json (states load lazily from disk). A context is encoded the first time a request uses it and
added to the store, so the app starts in seconds and never encodes a context twice, across restarts
too; `encode_all=True` (app.py --encode-all) encodes the whole corpus up front instead. A chunk whose
text changed under its id is refused (delete the folder to rebuild).

Retrieval needs only sentence embeddings of the corpus, not states: they are kept with the app's own
store, or for a store given with --store under <cache_dir>/stores/ (`derived_folder`: a store on a
read-only disk or another account's folder serves as it is), and the demo corpus ships them (assets/demo_data/<split>_database.<embedder>.safetensors, written by
scripts/build_demo_data.py), so a first start embeds nothing.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import re
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, ClassVar

import torch

from picaso_core.light.assets import ASSETS
from picaso_core.data import DEMO_DATA_DIR, CorpusError, limit_corpus, load_corpus
from picaso_core.data.hub import HubError
from picaso_core.light.defaults import DEFAULT_CACHE, DEFAULT_MAX_TOKENS, DEFAULT_SPLIT, DTYPES  # light: app.py --help
from picaso_core.engine.layout import layout_of
from picaso_core.engine.loading import load_model
from picaso_core.retrieval.retriever import Embedder, Retriever, SentenceEmbedder, embeddings_path
from picaso_core.store.servable import servable_hits, skip_note
from picaso_core.store.store import (CorruptShardError, StateStore, StoreError, check_serves, derived_folder, heal,
                                     is_url, missing_index, tqdm_progress)

# Every context is tokenised as text + "\n\n": the separator the demo model saw between contexts
# and before the query (data/demo_world.py CONTEXT_SEP), and a paragraph break for real models.
CONTEXT_SUFFIX = "\n\n"
log = logging.getLogger("picaso_explorer")  # the app's log (picaso_core.ui.errors writes the same one)
__all__ = ["Resources", "load_resources", "tuned_resources", "open_or_build_store", "store_folder", "fault_message",
           "StoreFault", "ModelLoadError", "TunedModelError", "CONTEXT_SUFFIX", "DEFAULT_CACHE", "DEFAULT_MAX_TOKENS",
           "DEFAULT_SPLIT", "DTYPES", "TUNED_DIR"]


TUNED_DIR = ASSETS / "demo_model_bptc"  # the shipped BPTC fine-tune of the demo model
TUNED_COMMAND = "python scripts/finetune_demo.py"  # what makes it


class ModelLoadError(RuntimeError):
    """The model named at start cannot be loaded (no such folder or hub id, offline, a checkpoint
    that does not match its config): its message names the model and the fix."""


class TunedModelError(ValueError):
    """The shipped fine-tuned model cannot serve this app (not bundled, or not a fine-tune of the
    loaded model): its message names the fix."""


class StoreFault(StoreError):
    """A request failed on a known store fault (a damaged shard, a context a read-only store lacks).
    Its message is the visitor's: no server path, one line."""


def public_message(message: str, paths=()) -> str:
    """`message` with the server's folders cut to their last name: /srv/stores/demo -> demo."""
    for p in sorted({str(p) for p in paths if p} | {str(Path(p).resolve()) for p in paths if p and "://" not in str(p)},
                    key=len, reverse=True):
        message = message.replace(p.rstrip("/"), Path(p).name or p)
    return re.sub(r"(?<![\w.:/])(?:/[\w.+@-]+)+/([\w.+@-]+)", r"\1", message)


def store_fault(error: Exception, paths=()) -> Exception:
    """The exception a request raises on a known store fault: a StoreFault with the visitor's
    message (each of `paths` cut to its last name, any other absolute path too); the log gets the
    full message on ONE line."""
    log.warning("store fault: %s", str(error).replace("\n", " "))
    return StoreFault(public_message(str(error), paths))


def raise_store_faults_as(make: Callable[[Exception, list], Exception]) -> None:
    """From now on, every Resources' request raises a known store fault as `make(error, paths)`
    (default: `store_fault`'s StoreFault); the app's UI passes its visitor error."""
    Resources.store_fault = staticmethod(make)


@dataclass
class Resources:
    """Loaded once per process and shared by every user. Per request, only `states` writes: it adds
    the states a request needs to the store (thread-safe, append-only)."""

    model: object  # SSMLanguageModel, eval mode
    model_name: str  # public_model_name(--model): shown to every visitor, so a folder's name, not its path
    corpus: object  # picaso_core.data.Corpus
    store: StateStore
    retriever: Retriever
    max_tokens: int  # most context tokens a request may compose; more is refused with a message
    load_s: dict[str, float]  # seconds spent loading each part, shown in the header
    # Everything the app derives (embeddings, caches, warm-up files, skill library) is written
    # under this folder, never into or beside a store the operator pointed at.
    cache_dir: Path = DEFAULT_CACHE

    # how a request's store fault is raised: the session's StoreFault; the app's UI replaces it with
    # its own visitor error (`raise_store_faults_as`)
    store_fault: ClassVar[Callable[[Exception, list], Exception]] = staticmethod(store_fault)

    def __post_init__(self):
        self._num_tokens: dict[str, int] = {}
        self._lock = threading.Lock()
        self._derived: dict[str, object] = {}
        self._derive_locks: dict[str, threading.Lock] = {}

    def derived(self, name: str, make: Callable[[], object]):
        """What `make()` returns, made once for this Resources and kept with it (a tab's stores, the
        fine-tuned model's Resources, the corpus fingerprint). A module table keyed by id(res) would
        hand it to another Resources that gets this one's id after it is gone (tests load many);
        `dataclasses.replace` gives a copy its own. A `make` that raises stores nothing. Each name
        has its own lock: a slow make (loading a model) holds up only callers of the same name."""
        with self._lock:
            lock = self._derive_locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._derived:
                self._derived[name] = make()
            return self._derived[name]

    @property
    def database(self) -> dict[str, str]:
        """Context id -> text: every context that can be retrieved or picked (encoded or not)."""
        return self.corpus.database

    def text(self, cid: str) -> str:
        try:
            return self.database[cid]
        except KeyError:
            raise KeyError(f"context id {cid!r} is not in corpus {self.corpus.name}/{self.corpus.split}") from None

    def token_ids(self, cid: str) -> list[int]:
        """The tokens a context's state is encoded from (text + CONTEXT_SUFFIX)."""
        return self.model.tokenizer.encode(self.text(cid) + CONTEXT_SUFFIX)

    def num_tokens(self, cid: str) -> int:
        if cid in self.store:
            return self.store.num_tokens(cid)
        with self._lock:
            if cid not in self._num_tokens:
                self._num_tokens[cid] = len(self.token_ids(cid))
            return self._num_tokens[cid]

    def states(self, ids: list[str], progress: Callable[[int, int], None] | None = None) -> list:
        """The stored states of `ids`, encoding (once, then kept in the store) those not stored yet."""
        try:
            new = {cid for cid in ids if cid not in self.store}
            if new and not self.store.read_only:  # a hybrid's states grow with their tokens
                check_disk(self.model, len(new), Path(self.store.folder),
                           sum(map(self.num_tokens, new)) if self.layout.has_attention else 0)
            self.store.ensure([(cid, self.text(cid)) for cid in ids], progress=progress or False)
            try:
                return self.store.get_many(ids)
            except CorruptShardError:
                if self.store.read_only:
                    raise
                # a writable store heals itself: the bad shard's contexts are re-encoded from their
                # stored text (its files moved to damaged/), then read again
                heal(self.store, lambda line: log.warning("%s", line), verify=False)
                return self.store.get_many(ids)
        except StoreError as e:  # a damaged or read-only store: one line to the visitor and the log
            raise self.store_fault(e, [self.store.url, self.store.folder, self.cache_dir]) from None

    def servable(self, rank: Callable[[tuple[str, ...]], list]) -> tuple[list, str]:
        """(hits, note): the retrieval `rank(skip)` (hits that leave out the ids in `skip`) with the
        contexts the store cannot serve (a read-only store's damaged shards, contexts it lacks) passed
        over for the next-ranked ones, and one line for the visitor naming those skipped ('' if none).
        Only the shards of the hits are checked (store.servable)."""
        hits, skipped = servable_hits(self.store, rank)
        if skipped:
            log.warning("retrieval skipped %d contexts the store cannot serve: %s", len(skipped),
                        ", ".join(f"{c} ({why})" for c, why in list(skipped.items())[:10]))
        return hits, skip_note(skipped)

    @property
    def layout(self):
        """The model's Layout (engine/layout.py): its family, its layers' kinds, what its state holds.
        Ask it (`has_attention`, `pure_ssm`, `ssm_layers` ...) rather than re-deriving "hybrid or pure"."""
        return self.model.layout

    @property
    def state_layers(self) -> int:
        """The layers a state stacks (state.ssm's layer axis): every layer of a pure SSM, the Mamba
        layers of a hybrid. A tab's layer slider over states is sized by this, not by config.n_layer."""
        return self.layout.n_state_layers

    def pure_ssm_only(self, what: str) -> str:
        """'' for a pure SSM; for a model with other layers (a hybrid), the one line a view that needs
        every layer to be an SSM layer shows (and its endpoint answers with) instead of failing."""
        if self.layout.pure_ssm:
            return ""
        return (f"{what} needs every layer to be a Mamba layer; this model is a {self.layout.line()}. "
                "Start the app with a pure Mamba model (e.g. --model demo) to see it.")

    def describe(self) -> str:
        cfg = self.model.config
        params = sum(p.numel() for p in self.model.parameters())
        n, total = len(self.store), len(self.database)
        lazy = "" if n >= total else ", the rest on first use"
        lay = self.layout
        size = f"{_si(lay.state_bytes, 1024)}B each"
        if lay.has_attention:  # the attention layers' keys and values grow with the context's tokens
            size = (f"{_si(lay.state_bytes, 1024)}B SSM + {_si(100 * lay.bytes_per_token, 1024)}B per 100 "
                    "tokens of attention keys/values each")
        return (
            f"model **{public_model_name(self.model_name)}** ({lay.line()}, {cfg.n_layer} layers, "
            f"d_model {cfg.d_model}, "
            f"{_si(params)} params) · corpus **{self.corpus.name}/{self.corpus.split}** "
            f"({len(self.corpus)} examples, {total} contexts) · store **{n} of {total} states** encoded{lazy} "
            f"({size})"
        )


def family_line(config) -> str:
    """How the header names a model's family (its Layout's line: "Mamba2", or a hybrid's layers by
    kind, "Nemotron-H hybrid: 4 Mamba-2 + 1 attention layers"); a loaded model's is `model.layout.line()`."""
    return layout_of(config).line()


def public_model_name(spec: str) -> str:
    """How a visitor sees `--model`: "demo" and hub ids (owner/name) as given; a local folder by its
    name ("./runs/my_checkpoint/" -> "my_checkpoint"), since its path tells every visitor how the
    server's disk is laid out."""
    spec = str(spec)
    path = Path(spec).expanduser()
    hub_like = spec.count("/") == 1 and not spec.startswith((".", "/", "~", "\\"))
    if path.is_dir() or not hub_like:
        return (path.resolve().name if path.is_dir() else path.name) or spec
    return spec


def _si(x: float, base: int = 1000) -> str:
    """1234567 -> '1.2 M' (base 1000) or '1.2 Mi' (base 1024)."""
    units = ["", "k", "M", "G", "T"] if base == 1000 else ["", "Ki", "Mi", "Gi", "Ti"]
    i = 0
    while x >= base and i < len(units) - 1:
        x, i = x / base, i + 1
    return f"{x:.3g} {units[i]}"


def store_folder(cache_dir: Path, corpus_name: str | None, split: str, fingerprint: str, max_contexts: int | None = None,
                 database: str | Path | None = None) -> Path:
    """<cache_dir>/<corpus>[+<database>]-<split>[-max<N>]-<fingerprint>; a .jsonl corpus and a database
    file are named by stem + path hash."""
    def named(path) -> str:
        p = Path(path).resolve()
        return f"{p.stem}-{hashlib.sha256(str(p).encode()).hexdigest()[:8]}"

    if corpus_name and corpus_name.endswith(".jsonl"):
        corpus_name = named(corpus_name)
    if database is not None:
        corpus_name = "+".join(x for x in (corpus_name if corpus_name not in (None, "", "none") else "", named(database)) if x)
    limit = f"-max{max_contexts}" if max_contexts else ""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{corpus_name}-{split}{limit}")
    return Path(cache_dir) / f"{slug}-{fingerprint}"


def check_disk(model, n_contexts: int, folder: Path, tokens: int = 0) -> None:
    """Refuse to start a store that cannot fit: a pure SSM's state is fixed-size, whatever the context
    length (mamba2-130m: 18 MiB each, mamba2-2.7b: 164 MiB), so N contexts need N times that; a
    hybrid's attention keys and values add theirs for the contexts' `tokens` (all together)."""
    lay = model.layout
    need = n_contexts * lay.state_bytes + tokens * lay.bytes_per_token
    probe = folder if folder.exists() else next(p for p in folder.parents if p.exists())
    free = shutil.disk_usage(probe).free
    if need > 0.9 * free:
        raise StoreError(
            f"{n_contexts} states of {need / max(n_contexts, 1) / 2**20:.1f} MiB need {need / 2**30:.1f} GiB, "
            f"but {probe} has {free / 2**30:.1f} GiB free; store fewer contexts (--max-contexts / "
            "PICASO_MAX_CONTEXTS, or a smaller .jsonl corpus) or point --cache-dir / PICASO_CACHE to a larger disk"
        )


def open_or_build_store(model, database: dict[str, str], folder: Path | str, log: Callable[[str], None] = print,
                        encode_all: bool = False, remote_cache: Path | None = None,
                        build_cmd: str | None = None) -> StateStore:
    """Open the store in `folder` (a new, empty one if there is none) for the contexts of `database`.

    folder: a local folder, or the URL of a prebuilt store (read-only; its shards are cached in
    `remote_cache`), which must then hold every context of `database`.
    encode_all: also encode every context of `database` the store lacks (otherwise they are
    encoded on first use, see `Resources.states`).
    build_cmd: the command that builds a prebuilt store, named by the errors for a damaged index.
    """
    if is_url(folder) or (Path(folder) / "store.json").exists():
        store = StateStore.open(folder, model, cache_dir=remote_cache, build_cmd=build_cmd)
    else:
        store = StateStore.build(model, [], folder, suffix=CONTEXT_SUFFIX, progress=False)
    check_serves(store, database, CONTEXT_SUFFIX, or_else=", or keep fewer contexts (--max-contexts)")
    heal(store, log)
    new = [(cid, text) for cid, text in database.items() if cid not in store]
    if encode_all and new and store.read_only:
        raise StoreError(f"--encode-all: the store at {folder} is read-only and lacks {len(new)} of the corpus's "
                         f"contexts (e.g. {new[0][0]!r}); leave out --encode-all to serve the ones it holds")
    if encode_all and new:
        tokens = (sum(len(model.tokenizer.encode(t + CONTEXT_SUFFIX)) for _, t in new)
                  if model.layout.has_attention else 0)  # a hybrid's keys and values grow with them
        check_disk(model, len(new), folder, tokens)
        log(f"encoding {len(new)} contexts x {model.layout.state_bytes / 2**20:.2f} MiB into the state store in {folder}")
        store.add(new)
    return store


def shipped_embeddings(corpus_name: str, split: str, embedder_name: str) -> list[Path]:
    """Embedding files that ship with a corpus (the demo's, in assets/demo_data)."""
    if corpus_name != "demo":
        return []
    return [DEMO_DATA_DIR / f"{split}_database.{embedder_name}.safetensors"]


# what a write fails with in a folder this account cannot write, or on a full disk
_WRITE_ERRNOS = (errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOSPC)


def fault_message(error: BaseException, cache_dir: str | Path = DEFAULT_CACHE) -> str | None:
    """The one line app.py prints for a known start-up fault (a damaged or missing store, a bad
    corpus file, a hub corpus offline, a folder it cannot write), or None for anything else (a
    bug, which keeps its traceback)."""
    if isinstance(error, (StoreError, CorpusError, HubError, ModelLoadError)):
        return str(error)
    if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS and error.filename:
        return (f"cannot write {error.filename} ({error.strerror}); the app writes only under --cache-dir "
                f"({cache_dir}): point it (or PICASO_CACHE) at a folder this account can write, with room to spare")
    return None


def load_resources(
    model: str = "demo",
    corpus: str | None = "demo",
    split: str = DEFAULT_SPLIT,
    cache_dir: str | Path = DEFAULT_CACHE,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_contexts: int | None = None,
    device: str | None = None,
    embedder: Embedder | None = None,
    log: Callable[[str], None] = print,
    encode_all: bool = False,
    database: str | Path | None = None,
    store: str | None = None,
    dtype: str = "float32",
) -> Resources:
    """Load the model and corpus, open (or start) the state store and the retriever.

    corpus: demo | wikitext | msmarco | a .jsonl file; None: the `database` file alone (no samples).
    database: a database file ({"id", "text"} per line) whose chunks join a .jsonl corpus's.
    store: a prebuilt store (`python -m picaso_core.store build`), a folder or an fsspec URL;
    None: <cache_dir>/<corpus>-<split>-<fingerprint>, started empty and filled on use.
    max_contexts: use at most this many contexts (see `limit_corpus`); None: the whole corpus.
    encode_all: encode every context now (with a progress bar); default: on first use.
    dtype: the weights' and activations' dtype, "float32", "bfloat16" or "float16" (states stay
    float32; another dtype is another model fingerprint, so another store).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")

    times: dict[str, float] = {}
    t = time.perf_counter()
    try:
        m = load_model(model, device=device, dtype=getattr(torch, dtype))
    except (FileNotFoundError, ConnectionError, ValueError) as e:  # loading's own messages name the fix
        raise ModelLoadError(f"--model {model}: {e}") from e
    m.name_or_path = model  # recorded in the store, named when another model's store is refused
    times["model"] = time.perf_counter() - t

    t = time.perf_counter()
    c = load_corpus(corpus, split, database=database)
    if max_contexts:
        c = limit_corpus(c, max_contexts)
    if not c.database:
        raise CorpusError(corpus or database, "has samples but no contexts to retrieve from",
                          'give each sample "contexts": [[id, text], ...], or pass a database file (--database)')
    times["corpus"] = time.perf_counter() - t

    t = time.perf_counter()
    build_cmd = (f"python -m picaso_core.store build --model {model} --corpus {corpus} --split {split}"
                 f"{f' --max-contexts {max_contexts}' if max_contexts else ''} --out {store}")
    if store and not is_url(store) and not (Path(store) / "store.json").exists():  # a typo must not start a new store
        raise StoreError(missing_index(Path(store), store, build_cmd))
    folder = store or store_folder(Path(cache_dir), corpus, split, m.fingerprint(), max_contexts, database)
    store = open_or_build_store(m, c.database, folder, log, encode_all, remote_cache=Path(cache_dir) / "remote",
                                build_cmd=build_cmd if store else None)
    folder = derived_folder(cache_dir, store)
    times["store"] = time.perf_counter() - t

    t = time.perf_counter()
    embedder = embedder or SentenceEmbedder()
    retriever = Retriever.cached(
        c.database, embedder, embeddings_path(folder, embedder.name),
        seeds=shipped_embeddings(corpus, split, embedder.name),
        progress=tqdm_progress("embedding contexts for retrieval"))
    times["retriever"] = time.perf_counter() - t
    # the header, the code snippets and the tabs' replies name the model: a folder's name, never its path
    return Resources(m, public_model_name(model), c, store, retriever, max_tokens, times, Path(cache_dir))


def tuned_resources(res: Resources) -> Resources:
    """`res` with the shipped fine-tuned model (TUNED_DIR) and its own state store (same corpus and
    retriever): states of one model are never composed by another. Loaded once per Resources.
    Raises TunedModelError where it cannot serve (not bundled; not a fine-tune of res's model)."""
    def make():
        if not (TUNED_DIR / "config.json").is_file():
            raise TunedModelError(f"no fine-tuned model bundled ({TUNED_DIR.name}); make it with `{TUNED_COMMAND}`")
        model = load_model("demo-bptc", device=res.model.device)
        if model.config != res.model.config or model.tokenizer.vocab_size != res.model.tokenizer.vocab_size:
            raise TunedModelError(f"the fine-tuned model is a fine-tune of the demo model, not of {res.model_name}: "
                                  "start the app with --model demo to compare them")
        model.name_or_path = "demo-bptc"
        folder = store_folder(Path(res.cache_dir), res.corpus.name, res.corpus.split, model.fingerprint())
        store = open_or_build_store(model, res.database, folder, log=lambda *_: None)
        return replace(res, model=model, model_name="demo-bptc", store=store)

    return res.derived("tuned", make)

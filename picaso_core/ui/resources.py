"""What the app loads once and shares read-only between users: model, corpus, state store, retriever.

No Gradio here: `load_resources` is what `python app.py` runs before building the page, and what a
notebook or bench script can run on its own.

The store is a cache: <cache_dir>/<corpus>-<split>-<model fingerprint>/. Opening it again reads only
store.json (states load lazily); corpus chunks the store lacks are encoded and added without
rebuilding; a chunk whose text changed under its id is refused (delete the folder to rebuild).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from picaso_core.retrieval import Embedder, Retriever
from picaso_core.store import StateStore, StoreError, tqdm_progress

# Every context is tokenised as text + "\n\n": the separator the demo model saw between contexts
# and before the query (data/demo_world.py CONTEXT_SEP), and a paragraph break for real models.
CONTEXT_SUFFIX = "\n\n"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "picaso_explorer"
DEFAULT_MAX_TOKENS = 4096  # total context tokens one request may compose (CPU time of Concat)
DEFAULT_SPLIT = "test"


@dataclass
class Resources:
    """Loaded once per process. Everything here is read by every user: never mutate per request."""

    model: object  # SSMLanguageModel, eval mode
    model_name: str
    corpus: object  # picaso_core.data.Corpus
    store: StateStore
    retriever: Retriever
    max_tokens: int  # most context tokens a request may compose; more is refused with a message
    load_s: dict[str, float]  # seconds spent loading each part, shown in the header

    def describe(self) -> str:
        cfg = self.model.config
        params = sum(p.numel() for p in self.model.parameters())
        return (
            f"model **{self.model_name}** ({cfg.family}, {cfg.n_layer} layers, d_model {cfg.d_model}, "
            f"{_si(params)} params) · corpus **{self.corpus.name}/{self.corpus.split}** "
            f"({len(self.corpus)} examples) · store **{len(self.store)} states** "
            f"({_si(self.store.nbytes, 1024)}B, {_si(self.model.config.state_nbytes(), 1024)}B each)"
        )


def _si(x: float, base: int = 1000) -> str:
    """1234567 -> '1.2 M' (base 1000) or '1.2 Mi' (base 1024)."""
    units = ["", "k", "M", "G", "T"] if base == 1000 else ["", "Ki", "Mi", "Gi", "Ti"]
    i = 0
    while x >= base and i < len(units) - 1:
        x, i = x / base, i + 1
    return f"{x:.3g} {units[i]}"


def store_folder(cache_dir: Path, corpus_name: str, split: str, fingerprint: str, max_contexts: int | None = None) -> Path:
    """<cache_dir>/<corpus>-<split>[-max<N>]-<fingerprint>; a .jsonl corpus is named by stem + path hash."""
    if corpus_name.endswith(".jsonl"):
        p = Path(corpus_name).resolve()
        corpus_name = f"{p.stem}-{hashlib.sha256(str(p).encode()).hexdigest()[:8]}"
    limit = f"-max{max_contexts}" if max_contexts else ""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{corpus_name}-{split}{limit}")
    return Path(cache_dir) / f"{slug}-{fingerprint}"


def limit_corpus(corpus, max_contexts: int):
    """The corpus cut to at most `max_contexts` database chunks, for models whose states are large.

    Samples are kept in order while all their candidate contexts fit; the rest of the budget goes
    to database chunks in corpus order (for WikiText, whose samples carry no candidates, that is
    the first `max_contexts` chunks).
    """
    from picaso_core.data import Corpus

    if max_contexts < 1:
        raise ValueError(f"max_contexts must be >= 1, got {max_contexts}")
    keep: dict[str, str] = {}
    samples = []
    for s in corpus.samples:
        new = [cid for cid in s.context_ids if cid not in keep]
        if len(keep) + len(new) > max_contexts:
            break
        keep.update((cid, corpus.database[cid]) for cid in new)
        samples.append(s)
    for cid, text in corpus.database.items():
        if len(keep) >= max_contexts:
            break
        keep.setdefault(cid, text)
    if not samples:
        raise ValueError(f"max_contexts={max_contexts} is too small for even the first example's "
                         f"{len(corpus.samples[0].contexts)} contexts; raise it")
    return Corpus(corpus.name, corpus.split, samples, keep)


def check_disk(model, n_contexts: int, folder: Path) -> None:
    """Refuse to start a store that cannot fit: a state is fixed-size, whatever the context length
    (mamba2-130m: 18 MiB each, mamba2-2.7b: 164 MiB), so N contexts need N times that."""
    need = n_contexts * model.config.state_nbytes()
    probe = folder if folder.exists() else next(p for p in folder.parents if p.exists())
    free = shutil.disk_usage(probe).free
    if need > 0.9 * free:
        raise StoreError(
            f"{n_contexts} states of {model.config.state_nbytes() / 2**20:.1f} MiB need {need / 2**30:.1f} GiB, "
            f"but {probe} has {free / 2**30:.1f} GiB free; store fewer contexts (--max-contexts / "
            "PICASO_MAX_CONTEXTS, or a smaller .jsonl corpus) or point --cache-dir / PICASO_CACHE to a larger disk"
        )


def open_or_build_store(model, database: dict[str, str], folder: Path, log: Callable[[str], None] = print) -> StateStore:
    """Open the store in `folder` and add the chunks it lacks, or build it from `database`."""
    if not (folder / "store.json").exists():
        check_disk(model, len(database), folder)
        log(f"building the state store: {len(database)} contexts x {model.config.state_nbytes() / 2**20:.2f} MiB "
            f"in {folder}")
        return StateStore.build(model, database.items(), folder, suffix=CONTEXT_SUFFIX)
    store = StateStore.open(folder, model)
    if store.suffix != CONTEXT_SUFFIX:
        raise StoreError(f"{folder} was built with context suffix {store.suffix!r}, not {CONTEXT_SUFFIX!r}; delete the folder to rebuild it")
    changed = [cid for cid in store.ids if cid in database and database[cid] != store.text(cid)]
    if changed:
        raise StoreError(
            f"the corpus changed: {len(changed)} contexts (e.g. {changed[0]!r}) have a new text under the same id; "
            f"delete {folder} to rebuild the store"
        )
    new = [(cid, text) for cid, text in database.items() if cid not in store]
    if new:
        check_disk(model, len(new), folder)
        log(f"adding {len(new)} new contexts to the state store in {folder}")
        store.add(new)
    return store


def load_resources(
    model: str = "demo",
    corpus: str = "demo",
    split: str = DEFAULT_SPLIT,
    cache_dir: str | Path = DEFAULT_CACHE,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_contexts: int | None = None,
    device: str | None = None,
    embedder: Embedder | None = None,
    log: Callable[[str], None] = print,
) -> Resources:
    """Load the model and corpus, open (or build) the state store and its retriever.

    max_contexts: store at most this many contexts (see `limit_corpus`); None: the whole corpus.
    """
    from picaso_core.data import load_corpus
    from picaso_core.loading import load_model

    times: dict[str, float] = {}
    t = time.perf_counter()
    m = load_model(model, device=device)
    m.name_or_path = model  # recorded in the store, named when another model's store is refused
    times["model"] = time.perf_counter() - t

    t = time.perf_counter()
    c = load_corpus(corpus, split)
    if max_contexts:
        c = limit_corpus(c, max_contexts)
    if not c.database:
        raise ValueError(f"corpus {corpus!r} ({split}) has no contexts to retrieve from; give a corpus with a database")
    times["corpus"] = time.perf_counter() - t

    t = time.perf_counter()
    folder = store_folder(Path(cache_dir), corpus, split, m.fingerprint(), max_contexts)
    store = open_or_build_store(m, c.database, folder, log)
    times["store"] = time.perf_counter() - t

    t = time.perf_counter()
    retriever = Retriever.for_store(store, embedder, progress=tqdm_progress("embedding contexts for retrieval"))
    times["retriever"] = time.perf_counter() - t
    return Resources(m, model, c, store, retriever, max_tokens, times)

"""Datasets for PICASO Explorer: the generated demo world, WikiText-2, MS MARCO, user .jsonl.

    corpus = load_corpus("demo", split="test")              # held-out retrieval samples
    corpus = load_corpus("demo", split="test", kind="qa")   # MS MARCO-shaped QA samples
    corpus = load_corpus("wikitext", split="test")          # hub; fails fast offline
    corpus = load_corpus("msmarco", split="validation")     # hub; fails fast offline
    corpus = load_corpus("my_data.jsonl")                   # format: picaso_core/data/jsonl.py
    for sample in corpus: sample.query, sample.continuation, sample.contexts, sample.gold_ids

Every loader returns a `Corpus` of `RetrievalSample`s (schema.py) and its chunk database.
This package imports `datasets` only inside the hub loaders.
"""

from __future__ import annotations

import os
from pathlib import Path

from picaso_core.light.assets import ASSETS
from picaso_core.data import hub  # its loaders import `datasets` on first use
from picaso_core.data.demo_world import CONTEXT_SEP, render_concat, render_parts, training_examples
from picaso_core.data.hub import HubError
from picaso_core.data.jsonl import load_jsonl, read_chunks, read_samples, write_chunks, write_samples
from picaso_core.data.schema import Corpus, CorpusError, RetrievalSample, limit_corpus, qa_prompt
from picaso_core.data.skills import format_demos, format_query, load_skill_tasks, skill_query

DEMO_DATA_DIR = ASSETS / "demo_data"
DEMO_SPLITS = ("train", "test")
CORPORA = ("demo", "wikitext", "msmarco")
_DEFAULT_KIND = {"demo": "retrieval", "wikitext": "retrieval", "msmarco": "qa"}
# The demo examples the app opens on (its tabs, its tour). Compose: the question whose CASO / PICASO
# generations stop at EOS (an answer that ends cleanly, never "<|endoftext|>"). Attribution: 5
# candidates, every method's top one is the gold one, and leaving it out costs ~3 nats per answer
# token (picked from scripts/measure_attribution.py's records).
DEMO_COMPOSE_EXAMPLE = "demo-test-r0003"
DEMO_ATTRIBUTION_EXAMPLE = "demo-test-q0035"

__all__ = [
    "CONTEXT_SEP", "CORPORA", "DEMO_ATTRIBUTION_EXAMPLE", "DEMO_COMPOSE_EXAMPLE", "DEMO_DATA_DIR", "Corpus", "CorpusError", "HubError", "RetrievalSample", "format_demos", "format_query", "limit_corpus", "load_corpus",
    "load_demo", "load_jsonl", "load_skill_tasks", "qa_prompt", "read_chunks", "read_samples",
    "render_concat", "render_parts", "skill_query", "training_examples", "write_chunks", "write_samples",
]


def load_demo(split: str = "test", kind: str = "retrieval", data_dir: str | Path | None = None) -> Corpus:
    """The bundled demo world (assets/demo_data, made by scripts/build_demo_data.py).

    Args:
        split: "test" (held-out entities, for evaluation) or "train".
        kind: "retrieval" (WikiText protocol) or "qa" (MS MARCO shape).
    """
    if split not in DEMO_SPLITS:
        raise CorpusError("demo", f"split must be one of {', '.join(DEMO_SPLITS)}, got {split!r}", "pass --split test")
    if kind not in ("retrieval", "qa"):
        raise CorpusError("demo", f"kind must be 'retrieval' or 'qa', got {kind!r}", "pass one of them")
    folder = Path(data_dir) if data_dir is not None else DEMO_DATA_DIR
    samples_path, db_path = folder / f"{split}_{kind}.jsonl", folder / f"{split}_database.jsonl"
    if not samples_path.is_file() or not db_path.is_file():
        raise CorpusError(folder, "demo data missing", "regenerate it with `python scripts/build_demo_data.py`")
    corpus = load_jsonl(samples_path, database=db_path, name="demo", split=split)
    return corpus


def load_corpus(name: str | None, split: str = "test", kind: str | None = None, database: str | Path | None = None,
                **kwargs) -> Corpus:
    """A corpus by name ("demo", "wikitext", "msmarco") or a path to a .jsonl file.

    database: a database file ({"id", "text"} per line, jsonl.py) whose chunks join a .jsonl
        corpus's database; with `name` None (or "none") the corpus is that database alone, with no
        samples (the app then composes typed queries only).

    Args:
        split: demo: "train" | "test"; wikitext: "train" | "validation" | "test";
            msmarco: "train" | "validation" ("test" = validation); ignored for a .jsonl path.
        kind: "retrieval" | "qa"; default: the corpus's own (demo: retrieval). WikiText only has
            retrieval samples and MS MARCO only QA samples.
        kwargs: passed to the loader (wikitext: unit, min_words; demo: data_dir).
    Raises:
        ValueError for an unknown name, split or kind, or a malformed .jsonl line;
        RuntimeError at once when a hub corpus cannot be downloaded (message names "demo").
    """
    if name in (None, "", "none"):
        if database is None:
            raise CorpusError("--corpus", "no corpus", "give a corpus (demo, wikitext, msmarco, a .jsonl file) or a "
                              "database file (--database)")
        chunks = read_chunks(database)
        return Corpus(name=Path(database).stem, split="custom", samples=[], database=chunks)
    if database is not None and name in CORPORA:
        raise CorpusError(database, f"a database file adds chunks to a .jsonl corpus, not to {name!r}",
                          "pass your samples as a .jsonl corpus, or the database alone (no corpus)")
    if name not in CORPORA:
        if str(name).endswith((".jsonl", ".json")) or os.sep in str(name) or Path(name).exists():
            return load_jsonl(name, database=database, **kwargs)
        raise CorpusError(name, "unknown corpus", f"use one of {', '.join(CORPORA)} or a path to a .jsonl file")
    kind = kind or _DEFAULT_KIND[name]
    if name == "demo":
        return load_demo(split, kind, **kwargs)
    if kind != _DEFAULT_KIND[name]:
        raise CorpusError(name, f"has only {_DEFAULT_KIND[name]!r} samples, got kind={kind!r}", "leave out kind")
    if name == "wikitext":
        return hub.load_wikitext(split, **kwargs)
    return hub.load_msmarco(split, **kwargs)

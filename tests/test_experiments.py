"""The experiments protocol (PICASO sec. 6.1): retrieval with the sample's own chunks excluded, QA
samples on their own passages, k = 0 as the baseline, the paper's gain averaging, resumable records,
the CLI's four files; and the app's MS MARCO path retrieving from each question's own passages.

A tiny random model (conftest) and corpora made here (WikiText and MS MARCO tables in their hub
shapes) keep it fast; a bag-of-words embedder stands in for MiniLM except in the CLI test.
"""

from __future__ import annotations

import json
import math

import pytest

from picaso_core import experiments as E
from picaso_core.analysis import sweep
from picaso_core.retrieval import rankers as R
from picaso_core.analysis import summaries as S
from picaso_core.data import write_samples
from picaso_core.data.hub import msmarco_corpus, wikitext_corpus
from picaso_core.engine.loading import load_model
from picaso_core.retrieval.retriever import Retriever
from picaso_core.store.store import StateStore
from conftest import BagOfWords

WIKI_ROWS = [{"text": t} for t in [
    " = Velmora = ", "",
    " Velmora is a city on the river Quell in the north . It was founded in 1423 by Osric Dallen , a merchant of glass .", "",
    " The main export of Velmora is blue glass , sold along the Quell to the southern ports every spring .", "",
    " = Tarrix = ", "",
    " Tarrix is a mountain in the north , first climbed by Mira Sen in 1911 after three failed attempts in winter .", "",
    " = = Geology = = ",
    " The rock of Tarrix is granite , cut by glaciers into steep walls that climbers of the north still fear .", "",
]]

MARCO_ROWS = [
    {"query": "who founded velmora", "query_id": 1, "wellFormedAnswers": ["Velmora was founded by Osric Dallen."],
     "passages": {"is_selected": [0, 1, 0], "url": ["a", "b", "c"], "passage_text": [
         "Blue glass is the main export of the city.", "Velmora was founded by Osric Dallen in 1423.",
         "The Quell is a river in the north."]}},
    {"query": "how high is tarrix", "query_id": 2, "wellFormedAnswers": ["Tarrix is 4120 metres high."],
     "passages": {"is_selected": [1, 0], "url": ["d", "e"], "passage_text": [
         "Tarrix is 4120 metres high.", "Who founded Velmora? Osric Dallen founded Velmora, people say."]}},
]


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir))


def source_for(model, database, tmp_path):
    store = StateStore.build(model, [], tmp_path / "store", suffix=sweep.CONTEXT_SUFFIX, progress=False)
    return sweep.ContextSource.from_store(store, database, progress=False)


def ranker_for(database):
    return R.EmbeddingRanker(Retriever.from_texts(list(database.items()), BagOfWords()), "minilm")


# ---- k lists, rankers -----------------------------------------------------------------------------
def test_parse_ks_ranges_lists_and_errors():
    assert sweep.parse_ks("0-10") == list(range(11))
    assert sweep.parse_ks("0,2,5") == [0, 2, 5]
    assert sweep.parse_ks("5,0-2,2") == [0, 1, 2, 5]
    assert sweep.parse_ks("none") == [] and sweep.parse_ks([3, 1]) == [1, 3]
    for bad in ("a", "3-1", "1;2"):
        with pytest.raises(ValueError, match="k"):
            sweep.parse_ks(bad)


def test_retrieval_excludes_the_samples_own_chunks_and_presents_the_top_k_most_relevant_last(model, tmp_path):
    corpus = wikitext_corpus(WIKI_ROWS, min_words=8)
    assert len(corpus) == 4 and all(len(s.exclude_ids) == 2 for s in corpus)
    ranker = ranker_for(corpus.database)
    log = sweep.MemoryLog()
    sweep.run_sweep(model, corpus.samples, ranker, source_for(model, corpus.database, tmp_path), [0, 1, 3], log,
                methods=("none", "picaso_r"))
    assert len(log) == 4 * 3 * 2
    for r in log.records.values():
        s = next(x for x in corpus if x.sample_id == r["sample_id"])
        assert not set(r["context_ids"]) & set(s.exclude_ids)  # its own halves never come back
        want = [cid for cid, _ in ranker.retriever.retrieve(s.query, r["k"], exclude=s.exclude_ids, best_last=True)]
        assert r["context_ids"] == want and r["n_contexts"] == r["k"]
        # the own halves are the best matches (the query IS the first half): excluding them matters
    s = corpus[0]
    assert ranker.retriever.retrieve(s.query, 1)[0][0] in s.exclude_ids


def test_msmarco_samples_use_their_own_passages_most_relevant_last(model, tmp_path):
    corpus = msmarco_corpus(MARCO_ROWS)
    ranker = ranker_for(corpus.database)
    log = sweep.MemoryLog()
    sweep.run_sweep(model, corpus.samples, ranker, source_for(model, corpus.database, tmp_path), [1, 2, None], log,
                methods=("none", "concat", "picaso_r"))
    for s in corpus:
        recs = [r for r in log.records.values() if r["sample_id"] == s.sample_id]
        sims = dict(zip(s.context_ids, ranker.retriever.similarity(s.query, s.context_ids)))
        for r in recs:
            assert set(r["context_ids"]) <= set(s.context_ids)  # never another question's passage
            scores = [sims[c] for c in r["context_ids"]]
            assert scores == sorted(scores)  # most relevant last
        all_k = [r for r in recs if r["k"] == len(s.contexts)]
        assert all_k and all(sorted(r["context_ids"]) == sorted(s.context_ids) for r in all_k)
    # pooled retrieval would have handed question 1 the other question's look-alike passage
    q1 = corpus[0]
    pooled = ranker.top(q1.query, 1)
    assert pooled[0] not in q1.context_ids


def test_k0_gives_the_baseline_loss_for_every_method(model, tmp_path):
    corpus = wikitext_corpus(WIKI_ROWS, min_words=8)
    log = sweep.MemoryLog()
    sweep.run_sweep(model, corpus.samples[:2], ranker_for(corpus.database), source_for(model, corpus.database, tmp_path),
                [0, 2], log)
    for s in corpus.samples[:2]:
        at0 = {r["method"]: r["loss"] for r in log.records.values() if r["sample_id"] == s.sample_id and r["k"] == 0}
        assert set(at0) == set(E.METHODS)
        assert all(v == pytest.approx(at0["none"], abs=1e-7) for v in at0.values())
        at2 = {r["method"]: r["loss"] for r in log.records.values() if r["sample_id"] == s.sample_id and r["k"] == 2}
        # contexts change the loss at k = 2 (a random tiny model barely uses them: small, but far above 1e-7)
        assert max(abs(v - at2["none"]) for v in at2.values()) > 1e-6


def test_shared_prefix_sweep_gives_the_timed_sweeps_losses_and_no_compose_time_where_untimed(model, tmp_path):
    corpus = wikitext_corpus(WIKI_ROWS, min_words=8)
    ranker, src = ranker_for(corpus.database), source_for(model, corpus.database, tmp_path)
    ks = [0, 1, 2, 3]
    full, shared = sweep.MemoryLog(), sweep.MemoryLog()
    sweep.run_sweep(model, corpus.samples, ranker, src, ks, full)
    sweep.run_sweep(model, corpus.samples, ranker, src, ks, shared, timed=1)
    assert full.records.keys() == shared.records.keys() and len(full) == 4 * 4 * len(E.METHODS)
    first = corpus.samples[0].sample_id
    for key, r in shared.records.items():
        assert r["loss"] == pytest.approx(full.records[key]["loss"], abs=1e-5)
        assert r["context_ids"] == full.records[key]["context_ids"]
        untimed = r["sample_id"] != first and r["k"] > 0 and r["method"] in ("concat", "picconcat_r")
        assert (r["compose_s"] is None) == untimed
    # the time curves average the timed records only
    c = S.curves(shared.records.values())
    assert all(v is not None and v > 0 for v in c["compose_ms"]["picconcat_r"][1:])
    # with no timed sample at all there is no compose time for them, and the figures still draw
    none_timed = sweep.MemoryLog()
    sweep.run_sweep(model, corpus.samples[:1], ranker, src, [0, 2], none_timed, timed=0)
    c0 = S.curves(none_timed.records.values())
    assert c0["compose_ms"]["concat"][1] is None and c0["compose_ms"]["soup"][1] is not None
    from picaso_core.plots import experiments as P
    P.cost_vs_loss(c0)
    P.time_vs_k(c0, include_picconcat=True)


# ---- summaries --------------------------------------------------------------------------------------
def test_gain_averaging_matches_a_hand_computed_case():
    curve = {"ks": [0, 1, 2, 11], "methods": ["none", "soup"],
             "loss": {"none": [2.0, 2.0, 4.0, 2.0], "soup": [2.0, 1.5, 2.0, 0.0]}}
    g = S.gains(curve)
    # per k: 100 * (none - soup) / none = 0, 25, 50, 100; averaged over k = 1..10 only: (25 + 50) / 2
    assert g["per_k"]["soup"] == [0.0, 25.0, 50.0, 100.0]
    assert g["avg"]["soup"] == pytest.approx(37.5) and g["avg"]["none"] == 0.0
    assert g["ks_averaged"] == [1, 2]
    times = {"ks": [0, 1, 2], "compose_ms": {"concat": [0, 10, 30], "picaso_r": [0, 1, 2]},
             "process_ms": {"concat": [5, 10, 10], "picaso_r": [5, 4, 3]}}
    r = S.time_ratio(times)
    assert r["compose"] == pytest.approx((10 / 1 + 30 / 2) / 2)
    assert r["total"] == pytest.approx((20 / 5 + 40 / 5) / 2)


def test_curves_and_qa_table_from_records():
    recs = [dict(retriever="minilm", sample_id=s, k=k, method=m, loss=loss, compose_s=0.001, process_s=0.002,
                 context_tokens=10 * k, gold_retrieved=min(k, 1), n_gold=1)
            for s, base in (("a", 2.0), ("b", 4.0)) for k in (0, 1)
            for m, loss in (("none", base), ("picaso_r", base - k))]
    c = S.curves(recs)
    assert c["ks"] == [0, 1] and c["loss"]["none"] == [3.0, 3.0] and c["loss"]["picaso_r"] == [3.0, 2.0]
    assert c["n"]["none"] == [2, 2] and c["gold_recall"]["picaso_r"] == [0.0, 1.0]
    assert c["loss_se"]["none"][0] == pytest.approx(1.0)  # stdev of (2, 4) / sqrt(2)
    t = S.method_table(recs, {("a", 1)})
    assert t["picaso_r"]["loss"] == 1.0 and t["none"]["n"] == 1


def test_bm25_and_random_rankers():
    db = {"bread": "bake bread with flour and yeast", "whale": "the blue whale is large",
          "tax": "file your income tax in april"}
    bm = R.BM25Ranker(db)
    assert bm.top("how to bake bread", 1) == ["bread"]
    assert "bread" not in bm.top("how to bake bread", 3, exclude=["bread"])
    assert bm.among("blue whale", ["tax", "whale"]) == ["whale", "tax"]
    rnd = R.RandomRanker(db, seed=0)
    assert rnd.top("q", 3) == rnd.top("q", 3) and sorted(rnd.top("q", 3)) == sorted(db)  # seeded by the query
    assert rnd.top("q", 5, exclude=["tax"]) and "tax" not in rnd.top("q", 5, exclude=["tax"])


# ---- resume -----------------------------------------------------------------------------------------
def test_resume_after_an_interrupt_recomputes_nothing_done(model, tmp_path, monkeypatch):
    corpus = wikitext_corpus(WIKI_ROWS, min_words=8)
    ranker, src = ranker_for(corpus.database), source_for(model, corpus.database, tmp_path)
    ks, methods = [0, 1, 2], ("none", "concat", "picaso_r")
    full = sweep.RecordLog(tmp_path / "full.jsonl")
    assert sweep.run_sweep(model, corpus.samples, ranker, src, ks, full, methods) == 4 * 3
    lines = (tmp_path / "full.jsonl").read_text().splitlines(keepends=True)
    n = 7  # interrupted after 7 records (mid-group), with half a line written
    (tmp_path / "cut.jsonl").write_text("".join(lines[:n]) + lines[n][: len(lines[n]) // 2])

    calls = []
    real = sweep.run_methods
    monkeypatch.setattr(sweep, "run_methods", lambda *a, **kw: calls.append(kw["methods"]) or real(*a, **kw))
    resumed = sweep.RecordLog(tmp_path / "cut.jsonl")
    assert len(resumed) == n  # the torn line is dropped
    groups = sweep.run_sweep(model, corpus.samples, ranker, src, ks, resumed, methods)
    assert groups == 4 * 3 - n // len(methods)  # the 2 finished groups are skipped
    assert list(calls[0]) == ["concat", "picaso_r"]  # the interrupted group computes only its missing methods
    assert sum(map(len, calls)) == len(full) - n
    again = sweep.RecordLog(tmp_path / "cut.jsonl")  # what is on disk
    assert set(again.records) == set(full.records)
    for key, r in full.records.items():
        assert again.records[key]["context_ids"] == r["context_ids"]
        assert again.records[key]["loss"] == pytest.approx(r["loss"], abs=1e-4)
    calls.clear()
    assert sweep.run_sweep(model, corpus.samples, ranker, src, ks, again, methods) == 0 and not calls


# ---- the CLI --------------------------------------------------------------------------------------
def test_cli_on_3_samples_writes_the_four_files(tiny_model_dir, tmp_path, monkeypatch):
    from conftest import write_corpus

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = write_corpus(tmp_path / "facts.jsonl")
    out = tmp_path / "run"
    argv = ["--model", str(tiny_model_dir), "--corpus", str(corpus), "--samples", "3", "--ks", "0-2",
            "--out", str(out), "--long-ks", "5", "--long-samples", "2", "--retrievers", "minilm,bm25,random,mpnet",
            "--ablation-samples", "2", "--timing-tokens", "16,64", "--threads", "1"]
    monkeypatch.delenv("PICASO_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the default store folder (an explicit --store must exist)
    summary = E.main(argv, embedder=BagOfWords())
    for name in ("records.jsonl", "summary.json", "report.html", "paper_vs_ours.md"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    main = [r for r in recs if r["retriever"] == "minilm" and r["k"] <= 2]
    assert len(main) == 3 * 3 * len(E.METHODS)
    assert all({"sample_id", "k", "method", "loss", "compose_s", "process_s", "context_ids"} <= set(r) for r in recs)
    assert {r["retriever"] for r in recs} == {"minilm", "bm25", "random"}
    assert any(r["k"] == 5 for r in recs)  # the long sweep
    assert summary["main"]["ks"] == [0, 1, 2] and len(summary["timing"]["tokens"]) == 2
    assert any("mpnet" in s and "offline" in s for s in summary["skipped"])
    assert json.loads((out / "summary.json").read_text())["main"]["gains"]["avg"].keys() == summary["main"]["gains"]["avg"].keys()
    md = (out / "paper_vs_ours.md").read_text()
    assert "| PICASO-R | 10.1% |" in md and "| Concat | 11.1% |" in md and "1.52" in md
    html = (out / "report.html").read_text()
    assert 'id="bench-loss-vs-k"' in html and "Plotly" in html and "<script src=" not in html  # plotly.js inline: offline
    # a rerun finds everything done and leaves the records as they were
    E.main(argv, embedder=BagOfWords())
    assert [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()] == recs
    # another corpus (or model) in the same folder is refused: its records would be reused
    with pytest.raises(SystemExit, match="another --out"):
        E.main([*argv[:2], "--corpus", "demo", *argv[4:]], embedder=BagOfWords())


def test_online_retrievers_skip_with_a_clear_message_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="skipped glove.*offline"):
        R.make_ranker("glove", {"a": "x"})
    with pytest.raises(ValueError, match="unknown retriever"):
        R.make_ranker("tfidf", {"a": "x"})


# ---- the app's MS MARCO path ---------------------------------------------------------------------
def test_the_apps_qa_examples_retrieve_from_their_own_passages(tiny_model_dir, tmp_path):
    from picaso_core.ui.tabs import compose as compose_tab
    from picaso_core.session import load_resources

    corpus = msmarco_corpus(MARCO_ROWS)
    path = tmp_path / "marco.jsonl"
    write_samples(corpus.samples, path)
    res = load_resources(str(tiny_model_dir), str(path), cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                         log=lambda m: None)
    q1 = res.corpus.samples[0]
    assert q1.kind == "qa"
    assert res.retriever.retrieve(q1.query, 1)[0][0] not in q1.context_ids  # pooled: another question's passage
    got = compose_tab.choose_contexts(res, compose_tab.ComposeRequest.of(res, q1.query, k=5, example=q1.sample_id))
    assert sorted(c.cid for c in got) == sorted(q1.context_ids)
    assert [c.score for c in got] == sorted(c.score for c in got)  # most relevant last
    top1 = compose_tab.choose_contexts(res, compose_tab.ComposeRequest.of(res, q1.query, k=1, example=q1.sample_id))
    assert len(top1) == 1 and top1[0].cid in q1.context_ids and top1[0].gold
    # a typed query that is no example still searches every passage
    free = compose_tab.choose_contexts(res, compose_tab.ComposeRequest.of(res, q1.query + " please", k=1))
    assert free[0].cid not in q1.context_ids


def test_own_passages_helper_orders_and_cuts():
    r = Retriever.from_texts([("a", "blue whale"), ("b", "bake bread"), ("c", "blue glass whale")], BagOfWords())
    got = R.own_passages(r, "blue whale", ["a", "b", "c"], 2)
    assert len(got) == 2 and got[-1][0] == "a" and got[0][1] <= got[1][1]
    assert [c for c, _ in R.own_passages(r, "blue whale", ["a", "b"], 5, best_last=False)] == ["a", "b"]
    assert math.isfinite(got[0][1])

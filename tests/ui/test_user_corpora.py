"""Users' own corpora: every tab starts on any valid corpus and says what it cannot show.

The corpora are the shapes users bring: one sample, one labelled sample, no labels, no QA samples,
samples without contexts beside a database file, and the database file alone. For each, the app
builds, launches, and /compose answers through gradio_client; each tab's note names what is
missing. A tiny random model (conftest) and a bag-of-words embedder keep it fast.
"""

from __future__ import annotations


import pytest

import app
from conftest import save_model_dir, tiny_model
from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import benchmarks as benchmarks_tab
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.ui.tabs import landscape as landscape_tab
from picaso_core.ui.tabs import soup_handlers
from picaso_core.session import load_resources, store_folder
from conftest import CORPORA, VELMORA, BagOfWords, corpus_args, served_app
from conftest import USER_CONTEXTS as CONTEXTS
from conftest import write_rows as _write

@pytest.fixture(scope="module", params=list(CORPORA))
def user_res(request, tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("user")
    corpus, database = corpus_args(request.param, tmp / "data")
    res = load_resources(str(tiny_model_dir), corpus, cache_dir=tmp / "cache", embedder=BagOfWords(),
                         log=lambda msg: None, database=database)
    return request.param, res


def test_every_tab_starts_and_compose_answers_through_the_client(user_res):
    """The whole app builds (no Slider with minimum == maximum), serves, and /compose answers."""
    from gradio_client import Client

    name, res = user_res
    with served_app(app.build_app(res).queue()) as url:
        client = Client(url, verbose=False)
        out = client.predict(query=VELMORA["query"], continuation=VELMORA["continuation"], k=2, max_new_tokens=2,
                             api_name="/compose")
        results = out[6]
        assert len(results["contexts"]) == 2 and results["scored"] is True
        assert all(r["loss"] is not None for r in results["methods"].values())


def _notes(demo) -> dict[str, str]:
    return {b.elem_id: b.value for b in demo.blocks.values()
            if str(getattr(b, "elem_id", "")).endswith("-limits") and getattr(b, "visible", False)}


def _block(demo, elem_id: str):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_each_tab_says_what_it_cannot_show(user_res):
    name, res = user_res
    demo = app.build_app(res)
    notes = _notes(demo)
    text = " ".join(notes.values())
    assert "k goes up to 3" in notes["compose-limits"]  # 3 contexts, below k = 10
    labelled = name in ("one labelled sample", "no QA")
    assert ("No labelled examples" in notes.get("attribution-limits", "")) == (not labelled)
    if name == "database file only":
        assert "No samples in the corpus" in notes["compose-limits"]
        assert "nothing to draw" in notes["landscape-limits"] and "cannot run" in notes["bench-limits"]
    else:
        assert "nothing to draw" not in text
    assert "a window of 3 × 100 tokens does not fit" in notes["soup-decay-limits"]  # 3 short contexts
    # the live fine-tune needs 2 samples with their own contexts: said before Start, and Start is disabled
    with_contexts = {"one sample": 1, "one labelled sample": 1, "no labels": 2, "no QA": 2, "no contexts": 0,
                     "database file only": 0}[name]
    cannot = with_contexts < 2
    assert ("ft-limits" in notes) == cannot
    assert _block(demo, "ft-start").interactive is (not cannot)
    if cannot:
        assert "needs at least 2 samples with their own contexts" in notes["ft-limits"]
        assert f"this corpus has {with_contexts}, so Start is disabled" in notes["ft-limits"]


def test_handlers_refuse_what_the_corpus_cannot_give_with_the_reason(user_res):
    import gradio as gr

    name, res = user_res
    if not res.corpus.samples:
        with pytest.raises(gr.Error, match="No samples"):
            landscape_tab.compute(res)
        with pytest.raises(gr.Error, match="No samples"):
            next(benchmarks_tab.run_live(res, samples=1, ks="0,1"))
    if not attribution_tab.qa_samples(res):
        with pytest.raises(gr.Error, match="no examples with gold context labels"):
            attribution_tab.run_precision(res, 1)
    # attribution of a typed query works on every corpus
    data = attribution_tab.run_attribution(res, VELMORA["query"], VELMORA["continuation"], k=2,
                                           methods=["loi", "picaso_r"])
    assert len(data["scores"]["picaso_r"]) == 2


def test_one_context_and_one_layer_sliders_do_not_crash(tokenizer_json, tmp_path):
    """One context in the database, and a one-layer, one-head model (the Primer tab's layer and head sliders)."""
    one_layer = tiny_model("Mamba2", seed=2, n_layer=1, ssm=dict(headdim=64, ngroups=1))  # d_inner 64: one head
    assert (one_layer.config.n_layer, one_layer.config.nheads) == (1, 1)
    model_dir = save_model_dir(one_layer, tmp_path, tokenizer_json)
    corpus = _write(tmp_path / "one.jsonl", [{**VELMORA, "contexts": CONTEXTS[:1], "gold_ids": ["velmora-0"]}])
    res = load_resources(str(model_dir), str(corpus), cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                         log=lambda msg: None)
    demo = app.build_app(res)
    notes = _notes(demo)
    for slider in ("primer-layer", "primer-head"):
        assert _block(demo, slider).value == 0 and _block(demo, slider).interactive is False
    assert "One context in the database" in notes["attribution-limits"]
    assert "a plane goes through 3 states" in notes["landscape-limits"]
    assert compose_tab.run_compose(res, compose_tab.ComposeRequest.of(res, VELMORA["query"], VELMORA["continuation"], k=1, max_new_tokens=0))[0]


def test_database_file_needs_a_jsonl_corpus_or_stands_alone(tiny_model_dir, tmp_path):
    from picaso_core.data import load_corpus

    db = _write(tmp_path / "chunks.jsonl", [{"id": "a", "text": "alpha"}])
    with pytest.raises(ValueError, match="adds chunks to a .jsonl corpus"):
        load_corpus("demo", database=db)
    with pytest.raises(ValueError, match="no such database file"):
        load_corpus(None, database=tmp_path / "missing.jsonl")
    alone = load_corpus(None, database=db)
    assert len(alone) == 0 and alone.database == {"a": "alpha"}
    # a store per (corpus, database) pair: another database file never reuses the first one's states
    a = store_folder(tmp_path, None, "custom", "fp", database=db)
    b = store_folder(tmp_path, None, "custom", "fp", database=tmp_path / "other.jsonl")
    assert a != b and "chunks-" in a.name


def test_database_flag_and_environment_variable():
    assert app.parse_args([], env={}).corpus == "demo"
    args = app.parse_args(["--database", "chunks.jsonl"], env={})
    assert args.corpus is None and args.database == "chunks.jsonl"
    args = app.parse_args(["--corpus", "mine.jsonl"], env={"PICASO_DATABASE": "db.jsonl"})
    assert (args.corpus, args.database) == ("mine.jsonl", "db.jsonl")
    assert app.parse_args(["--database", "x.jsonl"], env={"PICASO_DATABASE": "db.jsonl"}).database == "x.jsonl"


def test_app_main_passes_the_database_file_to_the_resources(tiny_model_dir, tmp_path, monkeypatch):
    """`python app.py --database FILE` (no sample file): main() loads the database alone and launches."""
    import gradio as gr

    _, database = corpus_args("database file only", tmp_path / "data")
    loaded, launched = [], []

    def load(*args, **kwargs):
        loaded.append(load_resources(*args, **kwargs, embedder=BagOfWords(), log=lambda msg: None))
        return loaded[-1]

    monkeypatch.setattr(app, "load_resources", load)
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kw: launched.append(kw))
    app.main(["--model", str(tiny_model_dir), "--database", database, "--cache-dir", str(tmp_path / "cache")])
    assert launched and len(loaded[0].corpus) == 0 and set(loaded[0].database) == {i for i, _ in CONTEXTS}


def test_soup_decay_note_is_empty_on_a_long_corpus(tiny_model_dir, tmp_path):
    long = " ".join(f"Sentence {i} of a long context about Velmora." for i in range(200))
    corpus = _write(tmp_path / "long.jsonl", [{**VELMORA, "contexts": [["long-0", long]]}])
    res = load_resources(str(tiny_model_dir), str(corpus), cache_dir=tmp_path / "cache", embedder=BagOfWords(),
                         log=lambda msg: None)
    assert soup_handlers.decay_limits(res) == []


def test_every_table_shows_its_column_names_at_start(user_res):
    """No gr.Dataframe of any tab opens with gradio's placeholder header "1 2 3": before a run, a table
    shows the columns its endpoint fills."""
    import gradio as gr

    _, res = user_res
    tables = [b for b in app.build_app(res).blocks.values() if isinstance(b, gr.Dataframe)]
    assert len(tables) >= 10  # every tab's tables, not a subset
    placeholder = [(t.elem_id or t.label, t.value["headers"]) for t in tables
                   if not t.value["headers"] or all(str(h).isdigit() for h in t.value["headers"])]
    assert not placeholder, f"tables with no column names at start: {placeholder}"


def test_the_start_up_warm_click_scores_a_corpus_smaller_than_the_default_k(user_res):
    """app.py scores the Compose tab's opening example at start; with 3 contexts (fewer than the
    default k = 5) that is not a rejected input, it scores them all."""
    from picaso_core.ui.tabs import compose as compose_tab

    _, res = user_res
    assert len(res.database) < compose_tab.DEFAULTS["k"]
    compose_tab.warm(res)  # raises gr.Error for an input the tab would refuse

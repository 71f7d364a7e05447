"""The Attribution tab: handlers as plain functions (no server), then /attribute through gradio_client.

Reuses test_app's tiny random model on the facts corpus (`res`, handlers) and its launched app
(`app_url`, a session fixture).
"""

from __future__ import annotations

import math

import gradio as gr
import numpy as np
import pytest

import app
from picaso_core.attribution import leave_one_in, leave_one_out
from picaso_core.ui import attribution_tab
from test_app import app_url, corpus_file, res  # noqa: F401  (fixtures)

QUERY = "Velmora, the city of blue glass, was founded"
ANSWER = " in 1423 by Osric Dallen."


def test_attribute_scores_every_method_and_matches_the_core(res):  # noqa: F811
    picked = ["velmora-0", "velmora-1", "tarrix-2", "brandor-1"]
    html, summary, bars, heat, tokens, py, cl, data = attribution_tab.attribute(
        res, QUERY, ANSWER, contexts=picked, example="q-velmora")
    assert [c["id"] for c in data["contexts"]] == picked
    assert [c["gold"] for c in data["contexts"]] == [False, True, False, False]
    assert list(data["scores"]) == list(attribution_tab.METHODS)
    assert all(len(v) == 4 and all(math.isfinite(x) for x in v) for v in data["scores"].values())
    tok = res.model.tokenizer
    q, a = tok.encode(QUERY), tok.encode(ANSWER)
    states = res.states(picked)
    np.testing.assert_allclose(data["scores"]["picaso_r"], leave_one_out(res.model, q, a, states, "picaso_r"), atol=1e-5)
    ctx_ids = [res.token_ids(c) for c in picked]
    np.testing.assert_allclose(data["scores"]["concat"], leave_one_out(res.model, q, a, states, "concat", ctx_ids),
                               atol=1e-5)
    none = res.model.continuation_loss(q, a, res.model.empty_state())
    np.testing.assert_allclose(data["scores"]["loi"], [none - x for x in leave_one_in(res.model, q, a, states)],
                               atol=1e-5)
    assert np.array(data["token_deltas"]).shape == (4, len(a)) and len(data["answer_tokens"]) == len(a)
    assert data["top"]["picaso_r"] == picked[int(np.argmax(data["scores"]["picaso_r"]))]
    assert data["answer_source"] == "given" and -1 <= data["surrogate"]["lds"] <= 1
    # figures: one bar panel per method, gold bars coloured, the heatmap is contexts x methods
    assert len([t for t in bars.data if t.type == "bar" and t.x[0] is not None]) == len(attribution_tab.METHODS)
    assert bars.data[0].marker.color[1] == "#ca8a04" and bars.data[0].marker.color[0] != "#ca8a04"
    assert np.array(heat.data[0].z).shape == (4, len(attribution_tab.METHODS))
    assert np.array(tokens.data[0].z).shape == (4, len(a))
    assert html.count("px-num") == 4 and "px-gold" in html
    assert "gold context is the top one" in summary and "/attribute" in cl and "leave_one_out" in py


def test_an_empty_answer_is_the_models_own_generation(res):  # noqa: F811
    data = attribution_tab.run_attribution(res, QUERY, "", k=3, methods=["soup"])
    assert data["answer_source"].startswith("generated") and data["answer"].strip()
    assert data["answer"] == attribution_tab.generate_answer(res, QUERY, 3)
    assert len(data["contexts"]) == 3 and list(data["scores"]) == ["soup"]


def test_example_fills_query_answer_and_its_candidates(res):  # noqa: F811
    s = next(s for s in res.corpus.samples if s.sample_id == "q-tarrix")
    assert attribution_tab.pick_example(res, "q-tarrix") == (s.query, s.continuation, s.context_ids)
    assert [sid for _, sid in attribution_tab.example_choices(res)] == ["q-velmora", "q-tarrix", "q-brandor"]


@pytest.mark.parametrize("kw, message", [
    (dict(query="  "), "Type a query"),
    (dict(query=QUERY, k=0), "k must be a whole number from 1 to"),
    (dict(query=QUERY, k=attribution_tab.MAX_CONTEXTS + 1), "k must be a whole number from 1 to"),
    (dict(query=QUERY, picked=["no-such-id"]), "unknown context id 'no-such-id'"),
    (dict(query=QUERY, methods=["nope"]), "unknown method 'nope'"),
])
def test_bad_input_raises_a_clear_gr_error(res, kw, message):  # noqa: F811
    with pytest.raises(gr.Error, match=message):
        attribution_tab.run_attribution(res, answer=ANSWER, **kw)


def test_more_contexts_than_the_limit_are_refused(res, monkeypatch):  # noqa: F811
    monkeypatch.setattr(attribution_tab, "MAX_CONTEXTS", 2)
    with pytest.raises(gr.Error, match="at most 2"):
        attribution_tab.run_attribution(res, QUERY, ANSWER, picked=["velmora-0", "velmora-1", "tarrix-0"])
    assert len(attribution_tab.run_attribution(res, QUERY, ANSWER, picked=["velmora-0", "velmora-1"],
                                               methods=["loi"])["contexts"]) == 2


def test_precision_table_over_the_labelled_examples(res):  # noqa: F811
    table, fig, md, data = attribution_tab.run_precision(res, 3, ["loi", "picaso_r"])
    assert list(table["Method"]) == ["LOI", "Concat-LOO", "PICASO-R-LOO"]  # Concat added: the reference
    assert data["n_samples"] == 3 and all(0 <= p <= 1 for p in data["precision"].values())
    assert list(table["Paper (table 4)"]) == [0.699, 0.690, 0.732]
    assert data["spearman_vs_concat"]["concat"] == pytest.approx(1.0)
    assert "Chance" in md and {t.name for t in fig.data} >= {"paper, table 4 (MS MARCO, Mamba2-2.7B)"}
    with pytest.raises(gr.Error, match="examples must be a whole number from 1 to"):
        attribution_tab.run_precision(res, 0)


def test_app_builds_and_attribute_takes_only_query_without_default(res):  # noqa: F811
    demo = app.build_app(res)
    api = demo.get_api_info()["named_endpoints"]
    params = api["/attribute"]["parameters"]
    assert [p["parameter_name"] for p in params if not p["parameter_has_default"]] == ["query"]
    assert {"answer", "k", "contexts", "methods"} <= {p["parameter_name"] for p in params}
    assert all(r["label"] for r in api["/attribute"]["returns"])  # every output named
    # /generate_answer names its inputs as the other endpoints do (issue 27, point 10; were q, k, p)
    assert [p["parameter_name"] for p in api["/generate_answer"]["parameters"]] == ["query", "k", "contexts"]


def test_attribute_endpoint_through_gradio_client(app_url):  # noqa: F811
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    out = client.predict(query=QUERY, answer=ANSWER, k=3, methods=["loi", "picaso_r", "concat"], api_name="/attribute")
    data = out[-1]
    assert len(data["contexts"]) == 3 and set(data["scores"]) == {"loi", "picaso_r", "concat"}
    assert all(len(v) == 3 for v in data["scores"].values())
    # above the limit: the handler checks the raw value (preprocess=False), one short message
    with pytest.raises(Exception, match="k must be a whole number from 1 to"):
        client.predict(query=QUERY, answer=ANSWER, k=attribution_tab.MAX_CONTEXTS + 1, api_name="/attribute")
    with pytest.raises(Exception, match="Type a query"):
        client.predict(query="", api_name="/attribute")
    again = client.predict(query="Brandor was started by", answer=" Kel Thal.", k=2, methods=["soup"],
                           api_name="/attribute")  # still serving
    assert len(again[-1]["scores"]["soup"]) == 2


def test_picconcat_is_skipped_with_a_line_above_its_context_limit(res):  # noqa: F811
    """PICConcat-R-LOO re-reads n(n-1) concatenations (133 s of a 198 s request at the caps, issue
    27): above PICCONCAT_MAX_CONTEXTS contexts it is left out and the summary says so in one line."""
    n = attribution_tab.PICCONCAT_MAX_CONTEXTS + 1
    assert len(res.database) >= n
    data = attribution_tab.run_attribution(res, QUERY, ANSWER, k=n, methods=["picaso_r", "picconcat_r"])
    assert list(data["scores"]) == ["picaso_r"] and len(data["contexts"]) == n
    line = attribution_tab.summary_md(data).split("\n")[-1]
    assert "PICConcat-R-LOO skipped" in line and f"at most {n - 1}" in line
    with pytest.raises(gr.Error, match="PICConcat-R-LOO skipped"):  # nothing else to run: refused
        attribution_tab.run_attribution(res, QUERY, ANSWER, k=n, methods=["picconcat_r"])
    small = attribution_tab.run_attribution(res, QUERY, ANSWER, k=n - 1, methods=["picconcat_r"])
    assert list(small["scores"]) == ["picconcat_r"] and not small["skipped"]

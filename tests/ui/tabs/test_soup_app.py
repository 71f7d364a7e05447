"""The State soup tab through gradio_client, on the launched app (tiny random model, conftest's
`app_url` fixture): every endpoint answers with its plain data, bad input gets a message and the
app keeps serving."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PICASO_WARM_UMAP", "0")  # no background numba compile in the served app under test

from picaso_core.ui.tabs import soup_handlers


@pytest.fixture(scope="module")
def client(app_url):  # noqa: F811
    from gradio_client import Client

    return Client(app_url, verbose=False)


def test_soup_endpoints_are_named(client):
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name in ("/soup_map", "/soup_retrieve", "/soup_retrieval", "/soup_mixing", "/soup_two_task", "/soup_decay"):
        assert name in api, name
        assert not any(r["label"].startswith("value_") for r in api[name]["returns"]), name  # every output labelled


def test_soup_map_returns_coordinates_and_labels(client):
    out = client.predict(layer=1, part="ssm", method="pca", dim=2, demos="cat → cats\ndog → dogs", top=3,
                         api_name="/soup_map")
    fig, quality, summary, retrieved, data = out[:5]
    n = len(data["tasks"])
    assert n == 20 * 12 and len(data["coords"]) == n and all(len(c) == 2 for c in data["coords"])
    assert set(data["tasks"]) >= {"antonym", "antonym_shuffled", "counting"}
    assert len(data["retrieved"]) == 3 and data["query"] is not None
    assert [r[1] for r in retrieved["data"]] == [r["task"] for r in data["retrieved"]]
    assert "Layer 1" in summary
    out3 = client.predict(layer=0, part="conv", method="pca", dim=3, demos="", top=5, api_name="/soup_map")
    assert all(len(c) == 3 for c in out3[4]["coords"]) and out3[4]["query"] is None


def test_soup_retrieve_two_task_and_decay(client):
    table, data = client.predict(demos="one → two\ntwo → three\n", layer=1, part="ssm", top=4, api_name="/soup_retrieve")
    assert len(data["retrieved"]) == 4 and [r["rank"] for r in data["retrieved"]] == [1, 2, 3, 4]
    out = client.predict(task_a="counting", task_b="antonym", prompt="one →", answers="two\nbig", w=0.3,
                         api_name="/soup_two_task")
    rows = out[3]["rows"]
    assert 0.3 in [r["w"] for r in rows] and set(rows[0]["losses"]) == {"two", "big"}
    out = client.predict(chunk_tokens=16, documents=2, api_name="/soup_decay")
    assert out[3]["n"] == 2 and set(out[3]["mean_loss"]) == {"concat", "a_decay", "mean", "c2_only"}


def test_soup_retrieval_and_mixing_curves(client):
    fig, summary, r, *_ = client.predict(queries=1, part="ssm", api_name="/soup_retrieval")
    assert r["ks"] == [1, 2, 4, 8, 16] and len(r["accuracy"]) == 2  # the tiny model's 2 layers
    fig, summary, table, data, *_ = client.predict(queries=1, api_name="/soup_mixing")
    assert {row["method"] for row in data["mixing"]} == {"k_shots", "soup", "all_shots"}
    assert {row["method"] for row in data["retrieval_mixing"]} == {"query", "retrieved_mix"}
    assert table["headers"] == soup_handlers.MIX_COLUMNS  # the header the empty table shows before a run


def test_soup_bad_input_gets_a_message_and_the_app_keeps_serving(client):
    with pytest.raises(Exception, match="demonstration box is empty"):
        client.predict(demos="  ", layer=1, part="ssm", top=3, api_name="/soup_retrieve")
    with pytest.raises(Exception, match="layer"):
        client.predict(layer=9, part="ssm", method="pca", dim=2, demos="", top=5, api_name="/soup_map")
    with pytest.raises(Exception, match="task A"):
        client.predict(task_a="juggling", task_b="antonym", prompt="one →", answers="two", w=0.5,
                       api_name="/soup_two_task")
    with pytest.raises(Exception, match="queries"):
        client.predict(queries=0, part="ssm", api_name="/soup_retrieval")
    out = client.predict(layer=1, part="ssm", method="pca", dim=2, demos="", top=5, api_name="/soup_map")
    assert len(out[4]["coords"]) == 240  # still serving

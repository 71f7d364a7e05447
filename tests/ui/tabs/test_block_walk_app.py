"""The Primer's block walk (issue 50, picaso_core.ui.tabs.primer_block) without a server, on the tiny model
and the facts corpus: bad input is one line each (no traceback, nothing computed), the three start
states, the tour's step "What is a state?" whose text says what its numbers show, and the endpoints."""

from __future__ import annotations

import logging

import gradio as gr
import pytest

from picaso_core.lab import block_walk as lab
from picaso_core.ui import budget
from picaso_core.ui.tabs import primer_block as PB
from picaso_core.ui.tour import runs
from picaso_core.ui.tour.steps import OPENINGS, STEPS

TEXT = "Velmora is a city on the river Quell."


def _refused(caplog, call, says: str):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="picaso_explorer"):
        with pytest.raises(gr.Error) as e:
            call()
    msg = e.value.message
    assert says in msg and "\n" not in msg, msg
    lines = [r for r in caplog.records if r.name == "picaso_explorer"]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage() and lines[0].exc_info is None
    return msg


def test_bad_input_is_one_line_each(res, caplog, monkeypatch):
    def no_work(*a, **kw):
        raise AssertionError("model work started before the input was refused")

    monkeypatch.setattr(lab, "record", no_work)
    n_layer = res.model.config.n_layer
    for endpoint, call in ((PB.ENDPOINT, lambda **kw: PB.block_walk(res, **{"text_in": TEXT, **kw})),
                           (PB.VIEW, lambda **kw: PB.walk_view(res, **{"text_in": TEXT, **kw}))):
        _refused(caplog, lambda: call(text_in="   "), "Type a text")
        _refused(caplog, lambda: call(layer=n_layer), f"layer must be a whole number from 0 to {n_layer - 1}")
        _refused(caplog, lambda: call(head=-1), "head")
        _refused(caplog, lambda: call(start="ones"), "start must be one of zeros, context, composed")
        cap = budget.CAPS[endpoint].most
        msg = _refused(caplog, lambda: call(text_in="Velmora " * (cap + 5)), f"at most {cap}")
        assert "tokens" in msg and "shorten the text" in msg
    n = len(res.model.tokenizer.encode(TEXT))
    _refused(caplog, lambda: PB.block_walk(res, TEXT, token=n), f"token must be a whole number from 0 to {n - 1}")
    _refused(caplog, lambda: PB.block_walk(res, TEXT, token="two"), "token must be a whole number")


def test_three_starts_and_the_endpoint(res):
    tokens = len(res.model.tokenizer.encode(TEXT))
    said = {}
    for start in PB.STARTS:
        (data, md, py, cl), facts, _ = PB.walk_view(res, TEXT, 1, 0, start)
        assert data["T"] == tokens and data["start"] == start and ("h_zero" in data) == (start != "zeros")
        said[start] = data["start_said"]
        assert f"{facts['decay_min']:.3f} to" in md and "/block_walk" in cl
    assert "stored state of context" in said["context"] and "PICASO-R of" in said["composed"]
    d = PB.block_walk(res, TEXT, token=2, layer=1, head=0, start="composed")
    assert d["token"] == 2 and d["tokens"][2] == d["token_text"] and set(d["stages"]) == set(lab.STAGES)


def test_the_tours_step_says_what_its_numbers_show(res):
    step = next(s for s in STEPS if s.run == "block_walk")
    assert STEPS.index(step) == 10 and step.tab == "primer" and OPENINGS["primer"] == (step,)  # step 11
    view = runs.block_walk(res, None, **runs.resolve(res, step.tab, step.inputs))
    f = view.facts
    walk = view.outputs[0]
    assert walk["layer"] == f["layer"] == min(1, res.model.config.n_layer - 1) and view.endpoint == "block_walk_view"
    for n in (f"**{f['decay_min']:.3f}**", f"**{f['decay_max']:.3f}**", f"{f['layer_numbers']:,}",
              f"{f['model_numbers']:,}", f"{f['P']} × {f['N']}", f"**{f['norm_last']:.3f}**"):
        assert n in view.text, (n, view.text)
    grows = f["norm_last"] > 1.1 * f["norm_first"]
    assert ("grows" in view.text) == grows
    # both sides of each claim
    base = dict(f, norm_first=1.0)
    assert "grows" in runs.block_walk_text({**base, "norm_last": 2.0})
    assert "shrinks" in runs.block_walk_text({**base, "norm_last": 0.5})
    assert "stays about the same" in runs.block_walk_text({**base, "norm_last": 1.05})
    assert f["layer_numbers"] * res.model.config.n_layer <= f["model_numbers"]
    assert len(view.figures) == 1 and len(view.figures[0].data) == len({0, (f["tokens"] - 1) // 2, f["tokens"] - 1})


def test_a_link_carries_the_walks_token_and_stage(res):
    """The token and stage live in the page: hidden twins carry them in a link, checked like any input,
    and Copy link's js reads them from the walk's figure (tour.links.PAGE_HELD)."""
    from picaso_core.ui.tour.controls import copy_link, parse_link
    from picaso_core.ui.tour.links import copy_inputs_js, find

    with gr.Blocks() as demo, gr.Tab("Primer") as tab:
        PB.render(res)
    assert demo is not None
    comps = {"primer": find(tab, "primer")}
    assert {"walk_token", "walk_stage"} <= set(comps["primer"])
    _, key, values, problems = parse_link({"tab": "primer", "walk_token": "3", "walk_stage": "readout"}, comps)
    assert (key, problems) == ("primer", []) and values == {"walk_token": 3, "walk_stage": "readout"}
    cap = budget.CAPS[PB.VIEW].most
    _, _, values, problems = parse_link({"tab": "primer", "walk_token": str(cap), "walk_stage": "nowhere"}, comps)
    assert values == {} and len(problems) == 2 and "walk_token" in problems[0] and "walk_stage" in problems[1]
    q = copy_link(res, "primer", ["walk_text", "walk_token", "walk_stage"], TEXT, 3, "readout")
    assert "walk_token=3" in q and "walk_stage=readout" in q
    js = copy_inputs_js(["walk_text", "walk_layer", "walk_token", "walk_stage"])
    assert '[3, "bw-plot", "token", "number"]' in js and '[4, "bw-plot", "stageName", "text"]' in js
    assert set(lab.STAGES) == {"norm", "in_proj", "conv", "dt", "state", "readout", "gate", "out"}

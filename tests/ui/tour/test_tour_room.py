"""A room at once (issue 48.8): a tour step is served cheaply enough for 100 visitors stepping at once.

A step click is answered on its request (no queue), builds no component (Gradio builds one, with its
session config and API schema, for every prop update, `gr.update()` with nothing in it included), shows
or hides the bar's plots and table by the bar's classes, and serves a cached step from memory until
the cache file changes; /tour_step likewise. bench/room.py drives a few visitors against the served
app with no error. The app is built in this process over the tiny model, its tour cache built by
fake runners (conftest.fake_view)."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from conftest import fake_view
from picaso_core.ui.tour import cache as tour
from picaso_core.ui.tour import controls
from picaso_core.ui.tour import runs as tour_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import room  # noqa: E402


@pytest.fixture(scope="module")
def room_demo(tour_res):
    import app

    mp = pytest.MonkeyPatch()
    for name in list(tour_runs.RUNNERS):
        mp.setitem(tour_runs.RUNNERS, name, fake_view(name))
    tour.build(tour_res, log=lambda s: None)
    try:
        yield app.build_app(tour_res)
    finally:
        mp.undo()


def _event(demo, elem_id: str):
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)
    return next(fn for fn in demo.fns.values() if (button._id, "click") in fn.targets and fn.fn is not None)


def _by_id(demo, elem_id: str):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_a_step_click_builds_no_component_and_fills_its_tab(room_demo, monkeypatch):
    demo, nxt = room_demo, _event(room_demo, "tour-next")
    assert nxt.queue is False  # answered on its request: no queue join, no event stream
    state = SessionState(demo)  # a new visitor: step 0 on screen, Next shows step 1
    built = []
    own = gr.components.Component.__init__
    monkeypatch.setattr(gr.components.Component, "__init__",
                        lambda self, *a, **k: (built.append(self), own(self, *a, **k))[1])
    data = asyncio.run(demo.process_api(nxt, [None, None], state=state))["data"]
    assert built == [], f"{len(built)} components built for one Next click: {sorted({type(c).__name__ for c in built})}"
    out = {id(c): v for c, v in zip(nxt.outputs, data)}

    step = tour.STEPS[0]  # a Compose step: one figure (fake_view) and a table
    bar = out[id(_by_id(demo, "tour-bar"))]
    assert bar["elem_classes"] == ["px-tour", "px-figs-1"]  # no px-off, no px-notable: shown, its table too
    assert out[id(_by_id(demo, "tour-fig-0"))]["type"] == "plotly"
    assert out[id(_by_id(demo, "tour-fig-1"))] is None  # hidden by px-figs-1 (layout.CSS)
    assert out[id(_by_id(demo, "tour-table-title"))] == f"**{step.run} table**"
    assert out[id(_by_id(demo, "tour-table"))]["headers"] == ["Method", "Loss"]
    # the step's own tab gets the step's inputs; every other tab's inputs are left as they are
    query = _by_id(demo, "compose-query")
    assert isinstance(out[id(query)], str) and out[id(query)]
    untouched = [v for c, v in zip(nxt.outputs, data) if getattr(c, "elem_id", None) in ("soup-layer", "coffee-task")]
    assert untouched == [{"__type__": "update"}] * 2


def test_a_cached_step_is_made_once_until_the_cache_changes(room_demo, tour_res, monkeypatch):
    nxt, api = _event(room_demo, "tour-next"), next(fn for fn in room_demo.fns.values() if fn.api_name == "tour_step")
    made = []
    own = controls.step_outputs
    monkeypatch.setattr(controls, "step_outputs", lambda *a, **k: (made.append(a[1]), own(*a, **k))[1])
    n = 3  # a step no other test of this file showed: the first click makes it
    first, again = nxt.fn(n - 1, []), nxt.fn(n - 1, [])
    assert made == [n] and again[1:-1] == first[1:-1]  # the second visitor's click is served from memory
    live = _event(room_demo, "tour-live").fn(n, [])  # Run it live: computed now, made ready the same way
    assert "computed live just now" in live[1] and len(live) == len(first) and live[3]["type"] == "plotly"
    assert made == [n, n] and nxt.fn(n - 1, [])[1] == first[1]  # a live run leaves the cached step as it was
    api.fn(n)
    served, fresh = api.fn(n), tour.tour_step(tour_res, n)  # from memory, and as tour.tour_step answers
    assert {**served, "seconds": None} == {**fresh, "seconds": None} and served["seconds"] < 0.5

    # the cache is built again with another text (a new build in the background): the next click shows it
    monkeypatch.setitem(tour_runs.RUNNERS, tour.STEPS[n - 1].run,
                        lambda res, memo=None, **inputs: tour_runs.View("**Rebuilt**", [], []))
    try:
        tour.build(tour_res, steps=[n], force=True, log=lambda s: None)
        text = own(tour_res, n)["text"]
        assert "Rebuilt" in text
        shown = nxt.fn(n - 1, [])
        assert made == [n] * 3 and shown[2] == text
        assert shown[0]["elem_classes"] == ["px-tour", "px-figs-0", "px-notable"]  # no figure, no table: hidden
        assert api.fn(n)["text"] == text
    finally:
        monkeypatch.undo()
        tour.build(tour_res, steps=[n], force=True, log=lambda s: None)


def test_an_unchanged_output_is_sent_as_gradio_sends_it():
    """skip_unchanged leaves Gradio's answer as it was: the same data, the values postprocessed alike."""
    def answer(wrapped: bool):
        with gr.Blocks() as demo:
            a, b, c, d = gr.Textbox(), gr.Markdown(), gr.Number(), gr.State(0)
            btn = gr.Button()
            btn.click(lambda: [gr.skip(), "  **x**  ", gr.update(), 5], None, [a, b, c, d])
        fn = next(iter(demo.fns.values()))
        if wrapped:
            controls.skip_unchanged(demo, [fn])
        state = SessionState(demo)
        return asyncio.run(demo.process_api(fn, [], state=state))["data"], state[d._id]

    (data, kept), gradio = answer(True), answer(False)
    assert (data, kept) == gradio and kept == 5
    assert data[0] == data[2] == {"__type__": "update"} and data[1].strip() == "**x**"


def test_the_room_bench_steps_the_served_tour_with_no_error(tour_app):
    with urllib.request.urlopen(tour_app + "config", timeout=60) as r:
        dep = room.next_event(json.loads(r.read()))
    assert dep.get("queue") is False  # the bench posts the click as the page does (no queue join)
    got = room.figures(asyncio.run(room.room(str(tour_app), 3, dep, len(tour.STEPS), timeout=60)))
    assert all(got[k]["errors"] == 0 and got[k]["n"] == 3 for k in room.KINDS), got

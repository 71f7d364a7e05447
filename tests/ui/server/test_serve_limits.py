"""serve()'s session bound: the launch keyword arguments it returns carry `max_sessions` as Gradio's
session capacity, and a server launched with them keeps at most that many sessions' state (the
oldest session's state is dropped when one more comes)."""

from __future__ import annotations

import inspect

import gradio as gr
import pytest
from conftest import served_app
from gradio_client import Client

from picaso_core.ui.server import serving

MAX_SESSIONS = 3


def counter_app() -> gr.Blocks:
    """One button that adds 1 to a per-session counter (gr.State) and shows it."""
    with gr.Blocks() as demo:
        count = gr.State(0)
        shown = gr.Number()
        bump = gr.Button()

        def add(n):
            return n + 1, n + 1

        bump.click(add, count, [count, shown], api_name="bump")
    return demo


@pytest.fixture
def quiet_serving(monkeypatch):
    monkeypatch.setattr(serving.torch, "set_num_threads", lambda n: None)  # serve() sets the process's threads
    monkeypatch.setattr(serving, "in_background", lambda *a: None)  # no allocator-trimming thread here


@pytest.mark.parametrize("n", [1, 3, 200])
def test_serve_passes_the_session_bound_to_launch(n, quiet_serving):
    kwargs = serving.serve(gr.Blocks(), workers=1, queue_size=4, max_sessions=n)
    assert kwargs["state_session_capacity"] == n
    assert "state_session_capacity" in inspect.signature(gr.Blocks.launch).parameters  # a launch() argument


def test_a_launched_server_keeps_at_most_max_sessions(quiet_serving):
    demo = counter_app()
    kwargs = serving.serve(demo, workers=1, queue_size=8, max_sessions=MAX_SESSIONS)
    with served_app(demo, server_name="127.0.0.1", **kwargs) as url:
        first = Client(url, verbose=False)
        assert first.predict(api_name="/bump") == 1
        assert first.predict(api_name="/bump") == 2  # the session's state is kept between its calls
        sessions = [first.session_hash]
        for _ in range(MAX_SESSIONS + 1):  # more sessions than the bound, the first one the oldest
            c = Client(url, verbose=False)
            assert c.predict(api_name="/bump") == 1
            sessions.append(c.session_hash)
            assert len(demo.state_holder.session_data) <= MAX_SESSIONS
        assert len(set(sessions)) == MAX_SESSIONS + 2
        held = set(demo.state_holder.session_data)
        assert held == set(sessions[-MAX_SESSIONS:])  # the newest sessions are the ones kept
        # the first session's state went with it: its counter starts again
        assert first.predict(api_name="/bump") == 1
        assert len(demo.state_holder.session_data) <= MAX_SESSIONS

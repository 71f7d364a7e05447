"""The slimmed /config keeps every event setting Gradio's frontend reads. An event's `.then()`,
`.success()` and `.failure()` chain, its trigger mode, its js, whether it is queued, its progress
display, what it cancels and its types reach the browser as they were set; a setting may go only
where its value is what the frontend reads an absent one as, or where no client reads it at all.

The /config compared here is the app's own: served with and without serving.compressed()'s
middleware (what app.py launches with), so the test goes through the slimming the app uses."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from picaso_core.ui.server.gradio_compat import shared_session_config
from picaso_core.ui.server.page_config import PageCache

FRONTEND = Path(gr.__file__).parent / "templates" / "frontend" / "assets"

# What the installed frontend reads an ABSENT dependency setting as, from its code (Blocks-*.js,
# Gradio 6): `i.trigger_only_on_failure?"failure":i.trigger_only_on_success?"success":"all"`,
# `i.trigger_after!==void 0`, `e.show_progress_on||null`, `e.component_prop_inputs||[]`,
# `e.event_specific_args?.length`, `typeof e.js=="string"`, `e.js_implementation?...`, the
# connection compared with "stream"; `queue` absent: `n==null ? !config.enable_queue : !n`.
# rendered_in / render_id are compared with a render's id (a number): null reads as absent.
ABSENT_READS_AS = {
    "trigger_only_on_success": [False], "trigger_only_on_failure": [False], "trigger_after": [None],
    "show_progress_on": [None], "component_prop_inputs": [[]], "event_specific_args": [None, []],
    "js": [None], "js_implementation": [None], "connection": ["sse"], "rendered_in": [None],
    "render_id": [None], "time_limit": [None], "scroll_to_output": [False], "api_description": [None],
}
# Read by no client (the server batches and streams; event data is the server's to collect).
NEVER_READ = {"batch", "max_batch_size", "stream_every", "collects_event_data"}
# The settings this test builds non-default values of, and the browser must get as set.
MUST_REACH = {"trigger_only_on_success", "trigger_only_on_failure", "trigger_after", "trigger_mode", "js",
              "queue", "show_progress", "cancels", "types", "targets", "inputs", "outputs", "backend_fn",
              "api_visibility", "api_name", "show_progress_on", "scroll_to_output", "connection", "time_limit"}


def chain_app() -> gr.Blocks:
    with gr.Blocks() as demo:
        a, b, c, d = gr.Textbox(), gr.Textbox(), gr.Textbox(), gr.Textbox()
        go, stop = gr.Button(), gr.Button()

        def up(x):
            return x.upper()

        def count(x):
            for i in range(3):
                yield f"{x} {i}"

        def picked(evt: gr.SelectData):
            return str(evt.value)

        first = go.click(up, a, b, js="(x) => x", queue=False, show_progress="minimal", trigger_mode="always_last",
                         scroll_to_output=True, show_progress_on=[c])
        then = first.then(count, b, c, show_progress="hidden")
        first.success(up, c, d, trigger_mode="multiple")  # runs only when `first` succeeded
        first.failure(up, a, d)  # runs only when `first` failed
        then.then(None, None, None, js="() => 1", api_visibility="private")
        stop.click(None, None, None, cancels=[then])
        a.select(picked, None, d, api_visibility="undocumented")
        a.submit(up, a, b, concurrency_limit=None, show_progress="full", api_visibility="private")
        cam = gr.Image(sources=["webcam"], streaming=True)
        cam.stream(lambda im: im, cam, cam, time_limit=5, stream_every=0.2)  # a "stream" connection
    demo.queue()
    return demo


def served_config(demo, slim: bool) -> dict:
    from gradio.routes import App
    from starlette.testclient import TestClient

    from picaso_core.ui.server import serving

    app = App.create_app(demo, app_kwargs=serving.compressed() if slim else {})
    with TestClient(app) as client:
        response = client.get("/config")
        assert response.status_code == 200
        return response.json()


@pytest.fixture(scope="module")
def configs():
    demo = chain_app()
    full, slim = served_config(demo, False), served_config(demo, True)
    assert len(json.dumps(slim)) < len(json.dumps(full))  # the slimming did run
    return full, slim


def frontend_js() -> str:
    files = sorted(FRONTEND.glob("*.js"))
    if not files:
        pytest.skip(f"no built frontend under {FRONTEND}")
    return "\n".join(f.read_text(errors="replace") for f in files)


def test_the_frontend_reads_the_event_settings_this_test_guards():
    """The keys are the installed frontend's: each one is read off an object there (`x.key`)."""
    js = frontend_js()
    read = {k for k in MUST_REACH | set(ABSENT_READS_AS) if re.search(rf"[.?]{k}\b", js)}
    for key in ("trigger_only_on_success", "trigger_only_on_failure", "trigger_after", "trigger_mode", "cancels",
                "show_progress", "show_progress_on", "component_prop_inputs", "event_specific_args",
                "js_implementation", "backend_fn", "api_visibility"):
        assert key in read, key
    for key in ("max_batch_size", "collects_event_data"):  # never read by the browser at all
        assert key not in js


def test_every_event_setting_reaches_the_browser_or_reads_the_same_absent(configs):
    full, slim = configs
    queued = full.get("enable_queue") is True
    assert slim.get("enable_queue") == full.get("enable_queue")
    assert [d["id"] for d in slim["dependencies"]] == [d["id"] for d in full["dependencies"]]
    for before, after in zip(full["dependencies"], slim["dependencies"]):
        assert set(after) <= set(before)
        for key, value in before.items():
            if key in after:
                assert after[key] == value, (before["id"], key)
            elif key in NEVER_READ:
                continue
            elif key == "queue":
                assert queued and value is True, (before["id"], key, value)
            else:
                assert key in ABSENT_READS_AS and value in ABSENT_READS_AS[key], \
                    f"event {before['id']}: {key}={value!r} dropped; the frontend reads it"


def test_the_chain_settings_are_kept_with_their_values(configs):
    full, slim = configs
    deps = {d["id"]: d for d in slim["dependencies"]}
    by_target = {}
    for d in full["dependencies"]:
        by_target.setdefault(d["targets"][0][1], []).append(d["id"])
    first = next(d for d in full["dependencies"] if d["targets"] == [[d["targets"][0][0], "click"]] and d["js"])
    success = deps[by_target["success"][0]]
    failure = deps[by_target["failure"][0]]
    then = deps[by_target["then"][0]]
    assert success["trigger_only_on_success"] is True and success["trigger_after"] == first["id"]
    assert failure["trigger_only_on_failure"] is True and failure["trigger_after"] == first["id"]
    assert then["trigger_after"] == first["id"] and then["show_progress"] == "hidden"
    assert then["types"]["generator"] is True
    assert success["trigger_mode"] == "multiple"
    clicked = deps[first["id"]]
    assert clicked["js"] == "(x) => x" and clicked["queue"] is False and clicked["show_progress"] == "minimal"
    assert clicked["trigger_mode"] == "always_last" and clicked["scroll_to_output"] is True
    assert clicked["show_progress_on"] == first["show_progress_on"] != []
    cancel = next(d for d in slim["dependencies"] if d.get("cancels"))
    assert cancel["cancels"] == [then["id"]] and cancel["types"]["cancel"] is True
    streamed = next(d for d in slim["dependencies"] if d.get("connection") == "stream")
    assert streamed["time_limit"] == 5
    # every setting this test set reaches the browser somewhere with the value Gradio gave it
    for key in MUST_REACH:
        assert any(key in d for d in slim["dependencies"]), key


def test_a_new_session_starts_from_the_configs_gradio_builds_and_keeps_its_own_values():
    with gr.Blocks() as demo:
        box = gr.Textbox("a")
        gr.Markdown("hello")
        gr.State(1)
    # what Gradio 6.31's own __init__ builds (this process's SessionState may be patched already)
    gradio_own = SessionState(demo)
    built = {k: demo.default_config.config_for_block(k, [], v) for k, v in demo.default_config.blocks.items()
             if k in demo.blocks}
    shared_session_config()
    shared_session_config()  # idempotent: a second call changes nothing
    first, second, third = SessionState(demo), SessionState(demo), SessionState(demo)
    for state in (first, second, third):
        assert set(vars(state)) == set(vars(gradio_own)) == {"blocks_config", "config_values", "state_data",
                                                              "_state_ttl", "is_closed", "STATE_TTL_WHEN_CLOSED"}
        assert state.config_values == gradio_own.config_values == built and box._id in built
        assert state.blocks_config.blocks == gradio_own.blocks_config.blocks
        assert (state.state_data, state._state_ttl, state.is_closed) == ({}, {}, False)
        assert state.STATE_TTL_WHEN_CLOSED == gradio_own.STATE_TTL_WHEN_CLOSED
    assert first.config_values is not second.config_values  # each its own outer dict
    second._update_value_in_config(box._id, "changed")
    assert second.config_values[box._id]["props"]["value"] == "changed"
    for state in (first, third, SessionState(demo)):
        assert state.config_values[box._id]["props"]["value"] == "a"
    assert gradio_own.config_values[box._id]["props"]["value"] == "a"


def test_the_page_is_built_once_for_visitors_who_ask_the_same_way():
    builds = []

    async def page(scope, receive, send):
        builds.append(scope["path"])
        await asyncio.sleep(0.05)  # the others arrive while this one is built
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": f"page {len(builds)}".encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"!"})

    cache = PageCache(page)

    async def get(path, host=b"a.example"):
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.request", "body": b""}

        scope = {"type": "http", "method": "GET", "path": path, "query_string": b"", "scheme": "http",
                 "root_path": "", "headers": [(b"host", host), (b"accept-encoding", b"gzip")]}
        await cache(scope, receive, send)
        assert sent[0]["status"] == 200
        return b"".join(m.get("body", b"") for m in sent[1:])

    async def visit():
        same = await asyncio.gather(*(get("/") for _ in range(5)))
        assert same == [b"page 1!"] * 5 and builds == ["/"]
        assert await get("/") == b"page 1!" and builds == ["/"]
        assert await get("/", host=b"b.example") == b"page 2!" and len(builds) == 2  # another Host: its own
        assert await get("/config") == b"page 3!" and await get("/config") == b"page 3!"
        for _ in range(2):
            await get("/gradio_api/info")
        assert builds == ["/", "/", "/config", "/gradio_api/info", "/gradio_api/info"]  # other paths never kept

    asyncio.run(visit())

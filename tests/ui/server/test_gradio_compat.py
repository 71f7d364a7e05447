"""The Gradio seam (picaso_core/ui/server/gradio_compat.py): for each replacement of a Gradio internal,
that what it replaces is still there as it assumes (inspect.signature) and that the replacement takes
effect; the tested version range, the pins that say it, and the app's one-line refusal outside it;
and that no module but the seam assigns to anything of Gradio's."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import subprocess
import sys
import textwrap
import tomllib
from collections import deque
from pathlib import Path

import gradio as gr
import pytest
from gradio import networking
from gradio.blocks import BlockFunction
from gradio.queueing import Queue
from gradio.state_holder import SessionState

from picaso_core.ui.server import gradio_compat
from picaso_core.ui.server.gradio_compat import UnsupportedGradio, check_gradio_version

ROOT = Path(__file__).resolve().parents[3]


def params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


# ---- each replacement: what it replaces is there, and it takes effect ----------------------------
class FakeLoad:
    def __init__(self, waiting=0):
        self.running, self.durations, self._waiting = {}, deque(), waiting

    def bound(self, fn):
        return getattr(fn, "concurrency_id", None) == "model"

    def waiting(self):
        return self._waiting

    def message(self):
        return "busy: 3 jobs ahead, try again in about 2 s", 2


def test_queue_push_and_process_events_are_as_the_seam_assumes():
    assert params(Queue.push) == ["self", "body", "request", "username"]
    assert params(Queue.process_events) == ["self", "events", "batch", "begin_time", "fn"]
    assert inspect.iscoroutinefunction(Queue.push) and inspect.iscoroutinefunction(Queue.process_events)
    with gr.Blocks() as demo:
        gr.Button()
    demo.queue()
    queue = gradio_compat.queue_of(demo)  # Blocks._queue: the Queue that demo.queue() made
    assert isinstance(queue, Queue) and queue.blocks is demo
    # the per-pool queues Load.waiting reads, and the lookup a join's body goes through
    assert isinstance(queue.event_queue_per_concurrency_id, dict)
    from gradio import route_utils

    assert params(route_utils.get_fn) == ["blocks", "api_name", "body"]


def test_say_busy_on_push_refuses_a_model_bound_join_in_the_apps_words(monkeypatch):
    calls = []

    class FakeQueue:
        blocks = None

        async def push(self, body, request=None, username=None):
            calls.append(body)
            return False, "Queue is full.", "queue_full"

    queue, load = FakeQueue(), FakeLoad(waiting=5)
    model = type("Fn", (), {"concurrency_id": "model"})()
    monkeypatch.setattr(gradio_compat, "_fn", lambda q, body: model if body == "model" else None)
    gradio_compat.say_busy_on_push(queue, load, size=5)
    assert asyncio.run(queue.push("model")) == (False, load.message()[0], "queue_full")
    assert calls == []  # refused before Gradio's push ran
    # a light join goes on to Gradio's push, whose own "queue_full" is said in the app's words
    assert asyncio.run(queue.push("light")) == (False, load.message()[0], "queue_full")
    assert calls == ["light"]


def test_time_process_events_times_the_model_pools_jobs_alone():
    ran = []

    class FakeQueue:
        async def process_events(self, events, batch, begin_time, fn):
            ran.append(fn)

    queue, load = FakeQueue(), FakeLoad()
    gradio_compat.time_process_events(queue, load)
    model, light = type("Fn", (), {"concurrency_id": "model"})(), type("Fn", (), {"concurrency_id": None})()
    asyncio.run(queue.process_events([], False, 0.0, light))
    assert ran == [light] and not load.durations
    asyncio.run(queue.process_events([], False, 0.0, model))
    assert ran == [light, model] and len(load.durations) == 1 and load.running == {}


def test_url_ok_is_what_launch_reads_and_the_patient_one_replaces_it():
    assert params(networking.url_ok) == ["url"]
    launch = inspect.getsource(gr.Blocks.launch)
    assert "networking.url_ok(self.local_url)" in launch  # read at launch time, through the module
    original = networking.url_ok
    try:
        gradio_compat.patient_localhost_check(limit_s=1)
        assert networking.url_ok is not original and params(networking.url_ok) == ["url"]
        assert networking.url_ok("http://127.0.0.1:9/") is False  # the discard port: nothing listens
    finally:
        networking.url_ok = original


def test_session_state_is_as_the_shared_config_assumes():
    init = getattr(SessionState.__init__, "__wrapped__", SessionState.__init__)
    assert params(init) == ["self", "blocks"]
    assert params(SessionState._update_value_in_config) == ["self", "key", "value"]
    with gr.Blocks() as demo:
        box = gr.Textbox("a")
    assert params(demo.default_config.config_for_block)[:3] == ["_id", "rendered_ids", "block"]
    gradio_compat.shared_session_config()
    assert SessionState._picaso_shared is True
    a, b = SessionState(demo), SessionState(demo)
    assert a.config_values[box._id] is b.config_values[box._id]  # built once, shared
    b._update_value_in_config(box._id, "b")
    assert a.config_values[box._id]["props"]["value"] == "a" and b.config_values[box._id]["props"]["value"] == "b"


def test_postprocess_data_is_as_skip_unchanged_assumes_and_the_replacement_skips():
    assert params(gr.Blocks.postprocess_data) == ["self", "block_fn", "predictions", "state"]
    assert inspect.iscoroutinefunction(gr.Blocks.postprocess_data)
    assert params(gr.Blocks.validate_outputs) == ["self", "block_fn", "predictions"]
    with gr.Blocks() as demo:
        a, b, c = gr.Textbox(), gr.Textbox(), gr.Number()
        gr.Button().click(lambda: ("x", gr.update(), 2), None, [a, b, c])
    fn = next(iter(demo.fns.values()))
    assert isinstance(fn, BlockFunction) and params(BlockFunction.__init__)[:3] == ["self", "fn", "inputs"]
    own = asyncio.run(demo.postprocess_data(fn, ["x", gr.update(), 2], None))
    gradio_compat.skip_unchanged_postprocess(demo, [fn])
    assert "postprocess_data" in vars(demo)  # the instance's own now
    skipped = asyncio.run(demo.postprocess_data(fn, ["x", gr.update(), 2], None))
    assert skipped[1] == gradio_compat.UNCHANGED == own[1] and skipped[0] == own[0] and skipped[2] == own[2]
    with pytest.raises(ValueError):  # a wrong count is still said as Gradio says it
        asyncio.run(demo.postprocess_data(fn, ["x", gr.update()], None))


def test_validate_inputs_is_as_check_input_count_assumes_and_the_check_runs_first():
    own = getattr(gr.Blocks.validate_inputs, "gradio_own", gr.Blocks.validate_inputs)
    assert params(own) == ["self", "block_fn", "inputs"]
    with gr.Blocks() as demo:
        t = gr.Textbox()
        t.submit(lambda x: x, t, t, api_name="echo")
    fn = next(iter(demo.fns.values()))
    with pytest.raises(ValueError):  # Gradio's own: too few values, a ValueError naming components
        own(demo, fn, [])
    seen, before = [], gr.Blocks.validate_inputs
    try:
        gradio_compat.check_input_count(lambda blocks, block_fn, inputs: seen.append(len(inputs)))
        gradio_compat.check_input_count(lambda blocks, block_fn, inputs: seen.append(-len(inputs)))  # idempotent
        demo.validate_inputs(fn, ["x"])
        assert seen == [-1] and gr.Blocks.validate_inputs.gradio_own is own
        with pytest.raises(ValueError):  # Gradio's own still runs after the check
            demo.validate_inputs(fn, [])
    finally:
        gr.Blocks.validate_inputs = before


def test_the_apps_input_count_check_answers_in_one_line():
    from picaso_core.ui import errors

    with gr.Blocks() as demo:
        t = gr.Textbox()
        t.submit(lambda x: x, t, t, api_name="echo")
    fn = next(iter(demo.fns.values()))
    before = gr.Blocks.validate_inputs
    try:
        errors.answer_in_one_line()
        with pytest.raises(gr.Error) as e:
            demo.validate_inputs(fn, [])
        assert e.value.message.startswith("/echo takes 1 input value, got 0: send one per parameter")
        with pytest.raises(gr.Error) as e:
            demo.validate_inputs(fn, ["a", "b"])
        assert e.value.message.startswith("/echo takes 1 input value, got 2")
    finally:
        gr.Blocks.validate_inputs = before


# ---- the version range ---------------------------------------------------------------------------
def test_the_installed_gradio_is_in_the_tested_range():
    check_gradio_version()


@pytest.mark.parametrize("version", ["5.0.0", "6.30.9", "6.32.0", "7.0.0", "not-a-version"])
def test_a_gradio_outside_the_range_gets_one_line_saying_what_to_install(version, monkeypatch):
    monkeypatch.delenv(gradio_compat.UNCHECKED, raising=False)
    with pytest.raises(UnsupportedGradio) as e:
        check_gradio_version(version)
    line = str(e.value)
    assert "\n" not in line and f"gradio {version} is installed" in line
    assert f'pip install "gradio>={gradio_compat.TESTED[0]},<{gradio_compat.TESTED[1]}"' in line
    monkeypatch.setenv(gradio_compat.UNCHECKED, "1")
    check_gradio_version(version)  # the escape hatch


@pytest.mark.parametrize("version", ["6.31.0", "6.31.7", "6.31.0.post1"])
def test_a_gradio_inside_the_range_passes(version):
    check_gradio_version(version)


def test_the_pins_say_the_seams_range():
    want = f"gradio>={gradio_compat.TESTED[0]},<{gradio_compat.TESTED[1]}"
    assert want == gradio_compat.REQUIREMENT
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    assert [ln for ln in lines if re.match(r"gradio\b(?!_)", ln)] == [want]
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [d for d in deps if re.match(r"gradio\b(?!_)", d)] == [want]


REFUSE = textwrap.dedent('''
    import runpy, sys
    from importlib import metadata
    real = metadata.version
    metadata.version = lambda name: "5.0.0" if name == "gradio" else real(name)
    sys.argv = ["app.py", "--device", "no-such-device"]  # started anyway, it would stop at the device, fast
    runpy.run_path({app!r}, run_name="__main__")
''')


def test_the_app_refuses_to_start_with_a_gradio_outside_the_range_in_one_line():
    env = {k: v for k, v in __import__("os").environ.items() if k != gradio_compat.UNCHECKED}
    p = subprocess.run([sys.executable, "-c", REFUSE.format(app=str(ROOT / "app.py"))], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, env=env)
    assert p.returncode != 0 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("error: gradio 5.0.0 is installed") and 'pip install "gradio>=' in lines[0]


# ---- no module but the seam assigns to anything of Gradio's --------------------------------------
def gradio_method_names() -> set[str]:
    """The names of the methods and functions of the Gradio classes and modules the app touches: an
    assignment to one of these on any object replaces Gradio's behaviour."""
    import gradio.route_utils
    import gradio.routes

    owners = (gr.Blocks, gr.components.Component, BlockFunction, Queue, SessionState, gradio.routes.App,
              networking, gradio.route_utils)
    names = set()
    for owner in owners:
        for name in dir(owner):
            try:
                value = getattr(owner, name)
            except Exception:  # noqa: BLE001
                continue
            if callable(value) and not isinstance(value, type) and name not in ("__class__",):
                names.add(name)
    return names


EVENT_FIELDS = {"targets", "trigger_after", "trigger_only_on_success", "fn"}  # a BlockFunction's: when and what runs


def violations(source: str, where: str, methods: set[str]) -> list[str]:
    """Assignments in `source` to an attribute of a name imported from gradio, or to an attribute
    named as one of Gradio's methods (`methods`) or a registered event's fields (EVENT_FIELDS) on any
    object; setattr(...) with such a name too."""
    methods = set(methods) | EVENT_FIELDS
    tree = ast.parse(source)
    from_gradio = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            from_gradio |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "gradio"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gradio":
            from_gradio |= {a.asname or a.name for a in node.names}

    def root(node):
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node.id if isinstance(node, ast.Name) else None

    def targets(node):
        if isinstance(node, (ast.Tuple, ast.List)):
            for t in node.elts:
                yield from targets(t)
        else:
            yield node

    # `self.x = ...` in a class of the module's own (not derived from one of Gradio's) is its own attribute
    own_self = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and not any(root(b) in from_gradio for b in cls.bases):
            own_self |= {id(n) for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                         and n.value.id == "self"}

    found = []
    for node in ast.walk(tree):
        assigned = []
        if isinstance(node, ast.Assign):
            assigned = [t for target in node.targets for t in targets(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            assigned = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant):
            obj, name = node.args[0], node.args[1].value
            if name in methods or root(obj) in from_gradio:
                found.append(f"{where}:{node.lineno}: setattr(..., {name!r}, ...)")
            continue
        for t in assigned:
            if isinstance(t, ast.Attribute) and id(t) not in own_self and (t.attr in methods or root(t) in from_gradio):
                found.append(f"{where}:{node.lineno}: {ast.unparse(t)} = ...")
    return found


def scanned() -> list[Path]:
    seam = ROOT / "picaso_core" / "ui" / "server" / "gradio_compat.py"
    return [ROOT / "app.py", *(p for p in sorted((ROOT / "picaso_core").rglob("*.py")) if p != seam)]


def test_no_module_but_the_seam_assigns_to_anything_of_gradios():
    methods = gradio_method_names()
    assert {"push", "process_events", "url_ok", "__init__", "_update_value_in_config", "postprocess_data",
            "validate_inputs"} <= methods
    found = [v for p in scanned() for v in violations(p.read_text(), str(p.relative_to(ROOT)), methods)]
    assert found == [], "replace Gradio's internals only in picaso_core/ui/server/gradio_compat.py:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "demo.postprocess_data = fn",  # a Blocks method on an instance, whatever it is called
    "queue.push = fn",
    "gr.Blocks.validate_inputs = fn",
    "networking.url_ok = fn",
    "SessionState.anything = 1",  # anything on a name imported from gradio
    "setattr(q, 'process_events', fn)",
    "block_fn.fn = wrapped",  # a registered event's fields
    "fn.targets, fn.trigger_after = [], gate",
    "a, demo.render = 1, fn",
    "class Mine(gr.Blocks):\n    def __init__(self):\n        self.launch = None",  # a Gradio subclass's self
])
def test_the_scan_finds_each_way_of_assigning(line):
    source = f"import gradio as gr\nfrom gradio import networking\nfrom gradio.state_holder import SessionState\n{line}\n"
    assert violations(source, "x.py", gradio_method_names()), line


def test_the_scan_leaves_a_modules_own_classes_alone():
    source = "import gradio as gr\nclass Load:\n    def __init__(self, queue):\n        self.queue = queue\n"
    assert violations(source, "x.py", gradio_method_names()) == []


def test_the_scan_passes_the_seam_only_because_it_is_left_out():
    seam = ROOT / "picaso_core" / "ui" / "server" / "gradio_compat.py"
    found = violations(seam.read_text(), "gradio_compat.py", gradio_method_names())
    assert len(found) >= 6, found  # push, process_events, url_ok, SessionState x3, postprocess_data, validate_inputs


def test_the_version_check_answers_without_gradios_internals():
    """A far-off Gradio may lack a module the patches replace names in: the range check must still give
    its one line (the seam imports Gradio's internals inside each patch, not at its top)."""
    code = ("import sys\nsys.modules['gradio.state_holder'] = None\nsys.modules['gradio.route_utils'] = None\n"
            "sys.modules['gradio.networking'] = None\n"
            "from picaso_core.ui.server import gradio_compat as g\n"
            "try:\n    g.check_gradio_version('7.0.0')\nexcept g.UnsupportedGradio as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().startswith("gradio 7.0.0 is installed") and r.stdout.count("\n") == 1


def test_run_after_sets_what_then_makes():
    """run_after's fields are the ones `.then()` gives the event it registers (trigger_after, on success
    or not; no trigger of its own: run_after leaves targets empty, as measured in docs/tour.md), and
    Gradio still sends them to the page as the chain (the config's dependencies)."""
    with gr.Blocks() as demo:
        box = gr.Textbox()
        first = demo.load(lambda: "a", None, box)
        then = first.then(lambda: "b", None, box)
        late = demo.load(lambda: "c", None, box)
    made = demo.fns[then["id"]]  # Gradio 6.31: targets [(None, "then")], no trigger of its own
    assert [e for _, e in made.targets if e != "then"] == []
    assert (made.trigger_after, made.trigger_only_on_success) == (first["id"], False)
    gradio_compat.run_after(demo.fns[late["id"]], first["id"])
    moved = demo.fns[late["id"]]
    assert (moved.targets, moved.trigger_after, moved.trigger_only_on_success) == ([], first["id"], False)
    deps = {d["id"]: d for d in demo.get_config_file()["dependencies"]}
    assert deps[late["id"]]["trigger_after"] == first["id"] and deps[late["id"]]["targets"] == []


def test_wrap_handler_replaces_the_function_gradio_calls():
    """Gradio calls `block_fn.fn` when an event runs (Blocks.call_function reads it): a wrapped one runs."""
    assert "block_fn.fn" in inspect.getsource(gr.Blocks.call_function)
    with gr.Blocks() as demo:
        box = gr.Textbox()
        ev = box.submit(lambda x: x + "!", box, box)
    fn = demo.fns[ev["id"]]
    gradio_compat.wrap_handler(fn, lambda f: (lambda x: f(x).upper()))
    out = asyncio.run(demo.call_function(fn, ["hi"]))
    assert out["prediction"] == "HI!"

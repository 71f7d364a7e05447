"""Each job's time limit (issue 47, item 1): picaso_core.light.deadline's cooperative deadline, the
--time-limit / PICASO_TIME_LIMITS parsing (picaso_core.ui.server.time_limits, app.parse_args) and the
wrapper that applies a limit to an event's function (picaso_core.ui.server.jobs)."""

from __future__ import annotations

import inspect
import threading
import time

import gradio as gr
import pytest

import app
from picaso_core.light import deadline
from picaso_core.light.deadline import JobTimeout
from picaso_core.ui.server import jobs
from picaso_core.ui.server.time_limits import DEFAULT_LIMITS, ENV, parse_limit, time_limits


# ---- the deadline -----------------------------------------------------------------------------
def test_check_is_silent_without_a_deadline_and_raises_past_one():
    deadline.check()  # none set: nothing
    assert deadline.remaining() is None
    with deadline.until(0.05):
        deadline.check()  # not yet
        time.sleep(0.08)
        with pytest.raises(JobTimeout, match="0.05 s limit"):
            deadline.check()
    deadline.check()  # restored on exit: none again


def test_an_inner_deadline_never_extends_the_outer_one():
    with deadline.until(0.05):
        with deadline.until(60):  # later than the outer: the outer holds
            time.sleep(0.08)
            with pytest.raises(JobTimeout):
                deadline.check()
        with deadline.until(0.01):  # earlier: it holds inside, the outer's after
            assert deadline.remaining() <= 0.01
        assert deadline.remaining() is not None


def test_the_deadline_is_per_thread_and_carried_explicitly():
    seen = {}
    with deadline.until(0.01):
        time.sleep(0.03)
        limit = deadline.current()

        def other():
            deadline.check()  # another thread: no deadline of its own
            seen["free"] = True
            with deadline.until(*limit):  # carried (as compose._encode_in_groups does)
                try:
                    deadline.check()
                except JobTimeout:
                    seen["carried"] = True

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == {"free": True, "carried": True}


def test_check_is_cheap_without_a_deadline():
    """The engine calls it once per layer of every forward and decode step."""
    t0 = time.perf_counter()
    for _ in range(100_000):
        deadline.check()
    assert time.perf_counter() - t0 < 0.5  # ~10 ms idle: 0.1 µs a call, honest headroom on busy cores


# ---- parsing ----------------------------------------------------------------------------------
def test_flags_win_over_the_variable_which_wins_over_the_defaults():
    args = app.parse_args(["--time-limit", "compose=30", "--time-limit", "/soup_map=5"],
                          env={ENV: "compose=10,landscape=60"})
    t = args.time_limits
    assert (t["compose"], t["soup_map"], t["landscape"]) == (30, 5, 60)
    assert t["finetune"] == DEFAULT_LIMITS["finetune"] and t["attribute"] == DEFAULT_LIMITS["attribute"]
    assert app.parse_args([], env={}).time_limits == {k: v or None for k, v in DEFAULT_LIMITS.items()}


def test_default_replaces_every_limit_not_named_and_zero_means_none():
    t = time_limits([("default", 7), ("finetune", 0)], env={})
    assert t["finetune"] is None
    assert {v for k, v in t.items() if k != "finetune"} == {7}


@pytest.mark.parametrize("argv, env, says", [
    (["--time-limit", "compose"], {}, "expected NAME=SECONDS"),
    (["--time-limit", "compose=soon"], {}, "SECONDS must be a number"),
    (["--time-limit", "compose=-1"], {}, "SECONDS must be a number"),
    (["--time-limit", "compose=inf"], {}, "SECONDS must be a number"),
    (["--time-limit", "nope=3"], {}, "unknown endpoint 'nope'"),
    ([], {ENV: "compose=3,landscape"}, f"{ENV}: 'landscape': expected NAME=SECONDS"),
    ([], {ENV: "compose=x"}, f"{ENV}: 'compose=x': SECONDS must be a number"),
])
def test_a_bad_value_is_one_error_line(argv, env, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        app.parse_args(argv, env=env)
    assert exit_.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and says in errors[0], errors


def test_parse_limit_names_every_endpoint():
    assert parse_limit(" landscape = 1.5") == ("landscape", 1.5)
    with pytest.raises(ValueError, match="one of default, compose"):
        parse_limit("compse=3")


# ---- the wrapper ------------------------------------------------------------------------------
def slow(n, progress=gr.Progress()):
    """Stands for a model-bound handler: checks the deadline at each step, as the engine does."""
    for _ in range(n):
        deadline.check()
        time.sleep(0.01)
    return n


def slow_steps(n):
    for i in range(n):
        for _ in range(5):
            deadline.check()
            time.sleep(0.01)
        yield i


def test_a_job_past_its_limit_is_stopped_with_one_line(caplog):
    run = jobs.limited(slow, "landscape", 0.05)
    assert run(2) == 2  # within the limit: its answer
    assert inspect.signature(run) == inspect.signature(slow)  # what Gradio reads for gr.Progress
    t0 = time.perf_counter()
    with caplog.at_level("WARNING", "picaso_explorer"), pytest.raises(gr.Error) as err:
        run(10_000)
    assert time.perf_counter() - t0 < 1.0
    assert err.value.message.startswith("stopped: /landscape ran past its 0.05 s limit;")
    assert "\n" not in err.value.message and err.value.print_exception is False
    assert [r.getMessage() for r in caplog.records] == [err.value.message]
    deadline.check()  # the wrapper leaves no deadline behind on the worker's thread


def test_a_generator_keeps_its_kind_and_is_stopped_between_and_within_steps():
    run = jobs.limited(slow_steps, "finetune", 0.12)
    assert inspect.isgeneratorfunction(run)
    got = []
    with pytest.raises(gr.Error, match=r"stopped: /finetune ran past its 0.12 s limit"):
        for i in run(100):
            got.append(i)
    assert 1 <= len(got) < 10
    assert list(jobs.limited(slow_steps, "finetune", 5)(2)) == [0, 1]


def test_limit_jobs_wraps_the_model_pool_and_tour_step_only():
    with gr.Blocks() as demo:
        box = gr.Number()
        box.change(slow, box, box, api_name="landscape", concurrency_id="model", concurrency_limit="default")
        box.submit(slow, box, box, api_name="soup_map", concurrency_limit=None)  # light: no limit
        box.blur(slow, box, box, api_name="mystery", concurrency_id="model", concurrency_limit="default")
    done = jobs.limit_jobs(demo, time_limits([("landscape", 3)], env={}))
    assert done == {"landscape": 3, "mystery": DEFAULT_LIMITS["default"]}
    fns = {f.api_name: f.fn for f in demo.fns.values()}
    assert fns["landscape"].__wrapped__ is slow and fns["soup_map"] is slow
    assert jobs.limit_jobs(demo, time_limits(env={})) == {}  # once only

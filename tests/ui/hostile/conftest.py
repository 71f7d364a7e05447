"""The hostile-input suite (issue 47): one `python app.py` for every test under tests/ui/hostile/,
started by the first test that asks for `hostile_app` and stopped at the end of the package.

It runs the demo with the serving settings a public Space has, made small where a test needs to
reach a bound quickly (each flag's test says which): 2 workers, a queue of 4, short time limits for
the endpoints a test drives past theirs, exports kept for 2 s, uploads up to 5 MB. Each test reads
the app's output with `hostile_app.read_log()` (a traceback there is a defect: `tracebacks`)."""

from __future__ import annotations

import re

import pytest
from conftest import served_app

# the flags the suite's app runs with; a test module that needs another bound adds it here
ARGV = ["--model", "demo", "--corpus", "demo", "--no-tour-prebuild", "--workers", "2", "--queue-size", "4"]
ENV = {"HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PICASO_EXPORT_TTL_S": "2"}


@pytest.fixture(scope="package")
def hostile_app(tmp_path_factory):
    """The URL of the suite's app (str), with .log / .read_log() / .proc / .port / .tmp."""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "tmp").mkdir()  # the app's system temp folder: a test looks there for what was left behind
    with served_app([*ARGV, "--cache-dir", tmp / "cache"], log=tmp / "app.log",
                    env={**ENV, "TMPDIR": str(tmp / "tmp")}) as url:
        url.tmp = tmp  # tmp/'tmp' is the app's TMPDIR, tmp/'cache' its --cache-dir
        yield url


TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s+File \".*\", line \d+", re.M)


def tracebacks(log: str) -> list[str]:
    """The traceback lines in an app log (none is the bar: every rejected input is one line)."""
    return [m.group(0) for m in TRACEBACK.finditer(log)]

"""Rejected input: one short message for the user, one line in the server log.

Gradio prints a full traceback for every gr.Error unless it is raised with print_exception=False
(gradio/queueing.py: `if not isinstance(e, Error) or e.print_exception: traceback.print_exc()`),
and its own input checks (a Dropdown value not among the choices, a Slider value that is not a
number) answer with messages that list every choice or name internal component indices. So the
tabs' API events run with preprocess=False, check their raw inputs with the helpers here, and
reject bad input with `bad_input`: the message names the fix, the log gets one line.

Every text a visitor sends is `normalise`d before it reaches a tokenizer (`text` and `id_list` do
it): a lone UTF-16 surrogate (JSON "\\ud800") made the tokenizer raise "TextInputSequence must be
str" with a 38-line traceback. A call with the wrong number of input values is answered in one line
by the app (`check_input_count`, below), not by Gradio's message naming its components.

Importing this module changes nothing elsewhere: `answer_in_one_line()`, called as the app is built
(app.build_app), installs the two answers that reach beyond it (a store fault as the visitor's error,
the input count through the Gradio seam).
"""

from __future__ import annotations

import logging
import math
import re

import gradio as gr

from picaso_core.session import raise_store_faults_as
from picaso_core.session import store_fault as session_store_fault
from picaso_core.ui.server import gradio_compat

log = logging.getLogger("picaso_explorer")

# The longest value a free-text input takes, checked before any work: one request's cost grows
# with its text (a 20,000-character Attribution query ran for 3 minutes), so a public app caps
# every text box. A tab passes a smaller cap where its text is one line (a k list, a query line).
MAX_CHARS = 4000

_SURROGATE = re.compile("[\ud800-\udfff]")
# control characters (C0 but tab and newline, DEL, C1) are dropped; a carriage return becomes a newline
_CONTROL = {c: None for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0))}


def normalise(value: str) -> str:
    """`value` as a tokenizer takes it: each lone UTF-16 surrogate replaced by U+FFFD, "\\r\\n" and
    "\\r" read as "\\n", every other control character but tab and newline removed."""
    if value.isascii() and value.isprintable():
        return value  # the common case, at no cost
    value = _SURROGATE.sub("\ufffd", value.replace("\r\n", "\n").replace("\r", "\n"))
    return value.translate(_CONTROL)


def bad_input(message: str, endpoint: str = "") -> gr.Error:
    """The gr.Error to raise for a rejected input; logs ONE line (no traceback) as it is made."""
    message = normalise(message)  # a visitor's text quoted in it must not break the log or the JSON reply
    log.warning("rejected input%s: %s", f" to {endpoint}" if endpoint else "", message)
    return gr.Error(message, print_exception=False)


def store_fault(error: Exception, paths=()) -> gr.Error:
    """The gr.Error for a request that failed on a known store fault (a damaged shard, a context a
    read-only store lacks): the session's StoreFault (its message names no server path, the log
    gets the full message on ONE line) as a visitor's error, with no traceback printed."""
    return gr.Error(str(session_store_fault(error, paths)), print_exception=False)


def answer_in_one_line() -> None:
    """Install the app's one-line answers where they reach beyond this module, once the app is built
    (app.build_app; a test that calls a tab's handlers without the app calls it itself): every
    Resources' store fault raised as the visitor's error (`store_fault`, through the session's
    `raise_store_faults_as`), and every Blocks' call with a wrong number of input values answered by
    `check_input_count` (through the Gradio seam, gradio_compat.check_input_count). Idempotent."""
    raise_store_faults_as(store_fault)
    gradio_compat.check_input_count(check_input_count)


def whole_number(name: str, value, lo: int, hi: int, endpoint: str = "") -> int:
    """`value` as an int in [lo, hi]: 5, 5.0 and "5" pass; 2.5, "five", True and None are refused."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    ok = (isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number)
          and float(number).is_integer() and lo <= number <= hi)
    if not ok:
        raise bad_input(f"{name} must be a whole number from {lo} to {hi}, got {_short(value)}", endpoint)
    return int(number)


def flag(name: str, value, endpoint: str = "") -> bool:
    """A true / false input (a Checkbox): only a bool passes."""
    if not isinstance(value, bool):
        raise bad_input(f"{name} must be true or false, got {_short(value)}", endpoint)
    return value


def text(name: str, value, endpoint: str = "", max_chars: int = MAX_CHARS) -> str:
    """A text input, `normalise`d: None reads as ""; anything but a string, or a string longer than
    `max_chars`, is refused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad_input(f"{name} must be text, got {_short(value)}", endpoint)
    if len(value) > max_chars:
        raise bad_input(f"{name} is {len(value):,} characters long; this app takes at most {max_chars:,}. "
                        "Shorten it.", endpoint)
    return normalise(value)


def choice(name: str, value, choices, endpoint: str = ""):
    """One of `choices` (a Dropdown or Radio value); the message lists them when they are few."""
    choices = list(choices)
    if isinstance(value, (list, dict)) or value not in choices:
        listed = ", ".join(map(str, choices))
        hint = f"one of {listed}" if len(listed) <= 60 else f"one of the {len(choices)} listed (e.g. {choices[0]!r})"
        raise bad_input(f"{name} must be {hint}, got {_short(value)}", endpoint)
    return value


def id_list(name: str, value, endpoint: str = "", max_items: int = 1000) -> list[str]:
    """A multiselect of ids, each `normalise`d: None reads as [], one id as [id]; anything else must
    be a list of strings, at most `max_items` of them."""
    if value is None:
        return []
    if isinstance(value, str):
        return [normalise(value)]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise bad_input(f"{name} must be a list of ids, got {_short(value)}", endpoint)
    if len(value) > max_items:
        raise bad_input(f"{name} holds {len(value):,} ids; at most {max_items:,} here", endpoint)
    return [normalise(v) for v in value]


def check_input_count(blocks: gr.Blocks, block_fn, inputs: list) -> None:
    """Answer a call with too few or too many input values (`data=[]`) in one line that names the
    endpoint and the count it takes; Gradio's own check (which raises a ValueError naming its
    components, printed with a traceback, and ignores extra values) runs after it. Installed ahead
    of gr.Blocks.validate_inputs, the one hook every event passes (queued or not, named or hidden)
    before any handler runs, by `answer_in_one_line` (gradio_compat.check_input_count)."""
    if len(inputs) != len(block_fn.inputs):
        takes = sum(not getattr(b, "skip_api", False) for b in block_fn.inputs)  # gr.State is not sent
        name = block_fn.api_name if isinstance(block_fn.api_name, str) else block_fn.name
        raise bad_input(f"/{name} takes {takes} input value{'s' * (takes != 1)}, got {len(inputs)}: send one per "
                        "parameter, in order (gradio_client's predict fills in those left out)")


def clip(text: str, n: int) -> str:
    """`text` on one line (runs of whitespace as one space), cut to at most n characters with "…"."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _short(value, n: int = 40) -> str:
    r = repr(value)
    return r if len(r) <= n else r[: n - 1] + "…"

"""Rejected input: one short message for the user, one line in the server log.

Gradio prints a full traceback for every gr.Error unless it is raised with print_exception=False
(gradio/queueing.py: `if not isinstance(e, Error) or e.print_exception: traceback.print_exc()`),
and its own input checks (a Dropdown value not among the choices, a Slider value that is not a
number) answer with messages that list every choice or name internal component indices. So the
tabs' API events run with preprocess=False, check their raw inputs with the helpers here, and
reject bad input with `bad_input`: the message names the fix, the log gets one line.
"""

from __future__ import annotations

import logging
import math

import gradio as gr

from picaso_core.session import Resources
from picaso_core.session import store_fault as session_store_fault

log = logging.getLogger("picaso_explorer")

# The longest value a free-text input takes, checked before any work: one request's cost grows
# with its text (a 20,000-character Attribution query ran for 3 minutes), so a public app caps
# every text box. A tab passes a smaller cap where its text is one line (a k list, a query line).
MAX_CHARS = 4000


def bad_input(message: str, endpoint: str = "") -> gr.Error:
    """The gr.Error to raise for a rejected input; logs ONE line (no traceback) as it is made."""
    log.warning("rejected input%s: %s", f" to {endpoint}" if endpoint else "", message)
    return gr.Error(message, print_exception=False)


def store_fault(error: Exception, paths=()) -> gr.Error:
    """The gr.Error for a request that failed on a known store fault (a damaged shard, a context a
    read-only store lacks): the session's StoreFault (its message names no server path, the log
    gets the full message on ONE line) as a visitor's error, with no traceback printed."""
    return gr.Error(str(session_store_fault(error, paths)), print_exception=False)


# every request of the app raises its store faults as the visitor's error above
Resources.store_fault = staticmethod(store_fault)


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
    """A text input: None reads as ""; anything but a string, or a string longer than `max_chars`,
    is refused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad_input(f"{name} must be text, got {_short(value)}", endpoint)
    if len(value) > max_chars:
        raise bad_input(f"{name} is {len(value):,} characters long; this app takes at most {max_chars:,}. "
                        "Shorten it.", endpoint)
    return value


def choice(name: str, value, choices, endpoint: str = ""):
    """One of `choices` (a Dropdown or Radio value); the message lists them when they are few."""
    choices = list(choices)
    if isinstance(value, (list, dict)) or value not in choices:
        listed = ", ".join(map(str, choices))
        hint = f"one of {listed}" if len(listed) <= 60 else f"one of the {len(choices)} listed (e.g. {choices[0]!r})"
        raise bad_input(f"{name} must be {hint}, got {_short(value)}", endpoint)
    return value


def id_list(name: str, value, endpoint: str = "", max_items: int = 1000) -> list[str]:
    """A multiselect of ids: None reads as [], one id as [id]; anything else must be a list of
    strings, at most `max_items` of them."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise bad_input(f"{name} must be a list of ids, got {_short(value)}", endpoint)
    if len(value) > max_items:
        raise bad_input(f"{name} holds {len(value):,} ids; at most {max_items:,} here", endpoint)
    return list(value)


def clip(text: str, n: int) -> str:
    """`text` on one line (runs of whitespace as one space), cut to at most n characters with "…"."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _short(value, n: int = 40) -> str:
    r = repr(value)
    return r if len(r) <= n else r[: n - 1] + "…"

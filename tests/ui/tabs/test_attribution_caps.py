"""The Attribution tab's caps AT their limits: a request exactly at a cap passes that cap, one more
character or item is refused with the one-line message that names it (the handlers, no server).

Reuses conftest's tiny random model on the facts corpus (`res`).
"""

from __future__ import annotations

import contextlib
import re

import gradio as gr
import pytest

from picaso_core.ui.tabs import attribution_panel as src
from picaso_core.ui.tabs import attribution as tab

QUERY, ANSWER = "Velmora, the city of blue glass, was founded", " in 1423 by Osric Dallen."


@contextlib.contextmanager
def refused(message: str):
    """Expects a gr.Error whose message is one line matching the regex `message` from its start."""
    with pytest.raises(gr.Error) as e:
        yield e
    assert re.match(message, e.value.message) and "\n" not in e.value.message, e.value.message


def _pad(text: str, n: int) -> str:
    return (text + " x" * n)[:n]


def test_the_caps_are_the_documented_numbers():
    # the values the caps' tests below and docs/attribution.md are written for
    assert (tab.MAX_QUERY_CHARS, tab.MAX_ANSWER_CHARS, tab.MAX_CONTEXTS) == (1000, 500, 10)
    assert (src.MAX_SOURCES, src.MAX_ABLATIONS, src.MAX_PATTERN_CHARS) == (128, 256, 200)


def test_query_at_its_cap_is_served_one_more_character_refused(res):  # noqa: F811
    data = tab.run_attribution(res, _pad(QUERY, 1000), ANSWER, k=1, methods=["loi"])
    assert len(data["query"]) == 1000 and len(data["scores"]["loi"]) == 1
    with refused(r"query is 1,001 characters long; this app takes at most 1,000\. Shorten it\.$"):
        tab.run_attribution(res, _pad(QUERY, 1001), ANSWER, k=1, methods=["loi"])


def test_answer_at_its_cap_is_served_one_more_character_refused(res, monkeypatch):  # noqa: F811
    # 500 characters are ~200 tokens of the tiny tokenizer: lift the token cap to see the character cap alone
    monkeypatch.setattr(tab, "MAX_ANSWER_TOKENS", 10_000)
    data = tab.run_attribution(res, QUERY, _pad(ANSWER, 500), k=1, methods=["loi"])
    assert len(data["answer"]) == 500
    with refused(r"answer is 501 characters long; this app takes at most 500\. Shorten it\.$"):
        tab.run_attribution(res, QUERY, _pad(ANSWER, 501), k=1, methods=["loi"])


def test_contexts_at_their_cap_pass_the_count_one_more_refused(res):  # noqa: F811
    # the facts corpus holds 8 contexts: 10 ids pass the count and are refused as unknown, 11 fail the count
    ten = list(res.database) + ["extra-1", "extra-2"]
    with pytest.raises(gr.Error, match="unknown context id 'extra-1'"):
        tab.run_attribution(res, QUERY, ANSWER, picked=ten, methods=["loi"])
    with refused(r"11 contexts picked; this app attributes at most 10: pick fewer$"):
        tab.run_attribution(res, QUERY, ANSWER, picked=ten + ["extra-3"], methods=["loi"])


def test_sources_at_their_cap_are_served_one_more_refused(res, monkeypatch):  # noqa: F811
    """A regex matching every character makes one source per character of the context's text."""
    cid = next(iter(res.database))
    for n in (128, 129):
        monkeypatch.setattr(res, "text", lambda c, n=n: "ab" * (n // 2) + "a" * (n % 2))
        if n == 128:
            data = tab.run_attribution(res, QUERY, ANSWER, picked=[cid], methods=["loi"], grain="word", pattern=".")
            assert len(data["sources"]) == 128 and len(data["scores"]["loi"]) == 128
        else:
            with refused(r"the 1 contexts split into 129 words; this app attributes at most "
                                               r"128 sources: pick fewer contexts or a coarser grain$"):
                tab.run_attribution(res, QUERY, ANSWER, picked=[cid], methods=["loi"], grain="word", pattern=".")


def test_ablations_and_regex_at_their_caps_pass_one_more_refused():
    ok = src.check_source_inputs("sentence", "states", None, None, "x" * 200, 256, "/attribute")
    assert ok == ("sentence", "states", None, None, "x" * 200, 256)
    with refused(r"ablations must be a whole number from 2 to 256, got 257$"):
        src.check_source_inputs("sentence", "states", None, None, "", 257, "/attribute")
    with refused(r"pattern is 201 characters long; this app takes at most 200\. Shorten it\.$"):
        src.check_source_inputs("sentence", "states", None, None, "x" * 201, 64, "/attribute")


@pytest.mark.parametrize("kw, message", [
    (dict(grain="paragraph"), r"grain must be one of context, sentence, word, got 'paragraph'$"),
    (dict(way="exact"), r"way must be one of states, reencode, got 'exact'$"),
    (dict(grain="sentence", span_start=4, span_end=4), r"the span \[4, 4\) is empty: select at least one character"),
    (dict(grain="sentence", span_start=3, span_end=99), r"the span \[3, 99\) is outside the answer's 25 characters"),
    (dict(grain="sentence", pattern=r"\d{9}"), r"the regex '\\\\d\{9\}' matches nothing in a context: give one"),
    (dict(grain="context", pattern=","), r"a splitting regex cuts contexts into sources: choose grain sentence or word"),
])
def test_bad_source_input_is_one_short_line_naming_the_fix(res, kw, message):  # noqa: F811
    with refused(message) as e:
        tab.run_attribution(res, QUERY, ANSWER, k=2, methods=["loi"], **kw)
    assert len(e.value.message) < 160

"""A visitor's splitting regex (issue 47, item 2): it runs in RE2, in time linear in the text, so no
pattern can backtrack; what RE2 cannot run (lookaround, backreferences), a pattern too long or one
that compiles too large is refused in one line naming the fix; on ordinary patterns RE2 splits
exactly where Python's `re` (the reference, written independently of RE2) does, in str positions,
non-ASCII text included."""

from __future__ import annotations

import re
import time

import pytest

from picaso_core.analysis.sources import MAX_PATTERN_CHARS, SourceError, split_spans

FAST_S = 0.5  # each answer below takes milliseconds; the bound is for a loaded machine

# nested repetition: Python's re backtracks exponentially on these where no match completes
CATASTROPHIC = [r"(a+)+$", r"(x+x+)+y", r"(\w+\s?)+#!", r"(a|aa)+$", r"((a*)*)*c"]
TEXTS = [
    "Café. Über den Fluss! Ist das wahr? Ja.\n\nNächster Absatz, mit Kommas, und mehr.",
    "東京です。大阪も, 京都も。 Then English. Ελληνικά κείμενα; ναι? Ναι!\nÉmoji 🙂 here, there.",
    "One line only",
    "a, b,c ,d\n\n\ne. f! g? h",
    "Price: 3,5 € ... or 4,20 €? Yes.\n"
    "🙂🙂. 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, 𝔱𝔬𝔬! done",
]
# no \w, \d or \b: RE2's are ASCII-only where Python's are Unicode (docs/attribution.md says so)
ORDINARY = [r"[.!?]\s", r"\n+", r",\s*", r"[.!?。]\s*", r"[A-ZÄÖÜ][a-zäöüß]+", r"\s+", r"[^\s]+"]


def reference_spans(text: str, pattern: str) -> list[tuple[int, int]]:
    """split_spans's rule, with Python's re: a source starts at each non-empty match."""
    starts = sorted({m.start() for m in re.finditer(pattern, text) if m.end() > m.start()} - {0})
    starts = [0, *starts]
    return list(zip(starts, starts[1:] + [len(text)]))


def timed(fn, *args):
    t0 = time.perf_counter()
    try:
        out = fn(*args)
    except SourceError as e:
        out = e
    return out, time.perf_counter() - t0


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_backtracking_pattern_runs_in_linear_time(pattern):
    """RE2 has no backtracking: such a pattern is simply run (it is a valid regex), and answers at
    once, with the split where it matches and a one-line refusal where it matches nothing."""
    for text in ("b" + "a" * 5_000 + "!", ("word " * 2_000).strip() + "."):
        out, took = timed(split_spans, text, "sentence", pattern)
        assert took < FAST_S, f"{pattern!r} over {len(text):,} characters took {took:.2f} s"
        assert isinstance(out, SourceError) and "matches nothing in a context" in str(out), out
    # where it matches, it splits where the match starts (the tail of a's)
    text = "b" + "a" * 3_000
    out, took = timed(split_spans, text, "sentence", r"(a+)+$")
    assert took < FAST_S and out == [(0, 1), (1, len(text))]


def test_a_huge_program_is_refused_at_once():
    """Where RE2 falls back from its DFA, its work is text length x program size: a pattern whose
    program passes the cap, or whose compiled form passes RE2's max_mem, is refused before any
    matching, in one line naming the fix."""
    text = "Café. Über den Fluss. 東京です。 " * 1_000
    for pattern, says in [(r"(.?){999}x", "compiles to"), (r"(.?){400}.{400}x", "compiles to"),
                          (r"\p{L}{1000}", "too large to run"), (r"(a{100}){100}", "at most 1000")]:
        out, took = timed(split_spans, text, "word", pattern)
        assert isinstance(out, SourceError), (pattern, out)
        assert says in str(out) and "\n" not in str(out), (pattern, out)
        assert took < FAST_S, f"{pattern!r} refused after {took:.2f} s"


@pytest.mark.parametrize("pattern, says", [
    (r"(?=x)", "lookahead and lookbehind are not supported"),
    (r"(?<=\.)\s", "lookahead and lookbehind are not supported"),
    (r"(?!a)b", "lookahead and lookbehind are not supported"),
    (r"(a)\1", "backreferences are not supported"),
    (r"end\Z", "RE2 writes the end of the text as \\z"),
    (r"(", "invalid regex"),
    ("x" * (MAX_PATTERN_CHARS + 1), f"at most {MAX_PATTERN_CHARS}: shorten it"),
    ("\ud800", "lone UTF-16 surrogate"),
])
def test_what_re2_cannot_take_is_refused_in_one_line(pattern, says):
    out, took = timed(split_spans, "a text. with (x) sentences.", "sentence", pattern)
    assert isinstance(out, SourceError), out
    message = str(out)
    assert says in message, message
    assert "\n" not in message and "leave it empty for sentences" in message
    assert took < FAST_S


@pytest.mark.parametrize("pattern", ORDINARY)
def test_re2_splits_where_python_re_does(pattern):
    """Same spans as Python's re, as str indices (RE2 reads UTF-8 bytes: its wrapper maps them back),
    over accented, CJK, Greek, astral and emoji text."""
    compared = 0
    for text in TEXTS:
        want = reference_spans(text, pattern)
        if len(want) == 1 and not re.search(pattern, text):
            continue  # matches nothing: refused (test_what_re2_cannot_take_is_refused_in_one_line)
        got = split_spans(text, "sentence", pattern)
        assert got == want, (pattern, text, [text[s:e] for s, e in got], [text[s:e] for s, e in want])
        assert "".join(text[s:e] for s, e in got) == text
        compared += 1
    assert compared >= 3, f"{pattern!r} matched too few of the texts to compare"


def test_a_lone_surrogate_in_a_context_keeps_str_positions():
    """RE2 reads UTF-8, which cannot hold a lone surrogate: the text is matched with U+FFFD in its
    place (one character for one), so the spans still index the original text."""
    text = "Erster Satz\ud800. Zweiter, über\udfff! Dritter 東京."
    got = split_spans(text, "sentence", r"[.!]\s")
    assert got == reference_spans(text, r"[.!]\s")
    assert [text[s:e] for s, e in got] == ["Erster Satz\ud800", ". Zweiter, über\udfff", "! Dritter 東京."]


def test_unicode_classes_are_written_as_properties():
    """The documented way to a Unicode letter class in RE2: \\p{Lu} starts a source at Ü and Ä
    as at F (an ASCII-only \\w would not see them)."""
    text = "über Über Fluss Äpfel 東京 Ωmega"
    assert [text[s:e] for s, e in split_spans(text, "word", r"\p{Lu}")] == ["über ", "Über ", "Fluss ",
                                                                              "Äpfel 東京 ", "Ωmega"]

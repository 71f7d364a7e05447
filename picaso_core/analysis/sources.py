"""Sources below the context: sentences, words or a user's regex, each with its own stored state.

ContextCite (Cohen-Wang et al. 2024) attributes an answer to *sources*: the pieces a splitter cuts
the contexts into. Here each source is encoded once into its own state, and a context with some
sources removed is composed from the kept sources' states (CASO in document order, PICASO prop. 1
eq. 3), so an ablation reads no context text. `reencode` is the exact reference beside it: the
kept text processed again, as ContextCite does for every ablation.

Glossary (code -> meaning). A context c with text t (the store's suffix, "\\n\\n", appended: the
string the context's stored state was encoded from) is cut into sources s_1..s_m that tile t:
    span          [start, end) characters of a source in t (the suffix belongs to the last one);
                  whitespace before a sentence or word starts it, so that the sources' tokens,
                  concatenated, are the context's tokens (checked for each context)
    ids           the source's token ids
    window        the last K-1 token ids before the source in its context (K = d_conv)
    x(s)          the source's state: its tokens read from a state whose ssm is 0 and whose conv
                  window holds the inputs of `window`
Why the window: in the concatenation, the first K-1 tokens of s_k see the last inputs of s_{k-1}
through the causal conv. Layer 0's conv inputs are functions of the tokens alone, so reading s_k
after that window makes CASO of the layer-0 states exact (tests/test_compose.py); for a one-layer
model, CASO(x(s_1)..x(s_m)) with the last source's window is then the context's own state. Deeper
layers read outputs that depend on the whole prefix: there CASO is the paper's approximation.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import re2
import torch

from picaso_core.compose import compose
from picaso_core.engine.state import ContextState
from picaso_core.store.store import StateStore

GRAINS = ("context", "sentence", "word")
WAYS = ("states", "reencode")  # compose the kept sources' states | re-encode the kept text
WITHIN = ("caso", "picaso_r")  # how a context's kept sources are composed (document order | order-free)
# a sentence ends at . ! or ? (closing quotes and brackets kept with it); the next one starts at
# the whitespace before its first word
SENTENCE_START = r"(?<=[.!?])[\"')\]]*\s+(?=\S)"
WORD_START = r"(?<=\S)\s+(?=\S)"
# A visitor's splitting regex runs in RE2 (linear time in the text: no pattern can backtrack, and
# its matching releases the interpreter lock); Python's `re` runs only the two patterns above, ours.
# Its work is still text length x program size where RE2 falls back from its DFA to its NFA (a
# 10,994-instruction `(.?){999}x` took 2.7 s over 30,000 characters), so the program is capped;
# RE2's max_mem refuses at compile time a pattern whose program would pass 1 MiB (`\p{L}{1000}`), and
# bounds the DFA cache each compiled pattern keeps (re2.compile's LRU holds 128 patterns: <= 128 MiB).
MAX_PATTERN_CHARS = 200
MAX_PATTERN_PROGRAM = 2000  # RE2 instructions, each direction: `\p{L}+` is 1,202, `[.!?]\s` 10
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 1 << 20
_RE2_OPTIONS.log_errors = False  # a refused pattern is the visitor's one-line error, never a line on stderr
_SURROGATE = re.compile("[\ud800-\udfff]")


class SourceError(ValueError):
    """Bad splitter input (an unknown grain, a regex that is invalid, unsupported, too long or too
    large, or that matches nothing): its message, one line, names the fix."""


@dataclass(frozen=True)
class Source:
    """One source: a piece of one context, with its token ids and the window before it."""

    context: int  # index of its context in the request's order
    context_id: str
    start: int  # characters in its context's text (+ suffix for the last source)
    end: int
    text: str
    ids: tuple[int, ...]
    window: tuple[int, ...]
    digest: str = ""  # of its context's text + suffix (store_key)

    @property
    def key(self) -> str:
        """The id of its state in a source store: context id, span and the digest of the context's
        text, so a context whose text changed under the same id gets new entries, never stale ones."""
        return f"{self.context_id}@{self.start}:{self.end}#{self.digest}"


def split_spans(text: str, grain: str = "sentence", pattern: str | None = None) -> list[tuple[int, int]]:
    """[start, end) spans that tile `text`: one per sentence, word or match of `pattern`.

    grain: "context" (one span), "sentence", "word"; `pattern` (a regex, RE2 syntax: run in linear
    time, see `splitting_regex`) replaces the sentence or word splitter: each non-empty match starts
    a source and runs to the next match, the text before the first match joining the first source.
    Raises SourceError for an unknown grain, a pattern at context grain, a pattern refused by
    `splitting_regex`, or one that matches nothing in `text`."""
    if grain not in GRAINS:
        raise SourceError(f"unknown grain {grain!r}: use one of {', '.join(GRAINS)}")
    if pattern:
        if grain == "context":
            raise SourceError("a splitting regex cuts contexts into sources: use grain sentence or word with it")
        rx = splitting_regex(pattern, grain)
        # RE2 reads UTF-8, which has no lone surrogate: each becomes U+FFFD, one character for one,
        # so the match positions (RE2's wrapper gives str indices) are still `text`'s
        target = text if text.isascii() else _SURROGATE.sub("\ufffd", text)
        starts = sorted({m.start() for m in rx.finditer(target) if m.end() > m.start()})
        if not starts:
            raise SourceError(f"the regex {pattern!r} matches nothing in a context: give one that matches "
                              f"where sources start, or leave it empty for {grain}s")
        starts = [0] + [s for s in starts if s > 0]
    elif grain == "context" or not text:
        starts = [0]
    else:
        starts = [0] + [m.start() for m in re.finditer(SENTENCE_START if grain == "sentence" else WORD_START, text)]
    return list(zip(starts, starts[1:] + [len(text)]))


def splitting_regex(pattern: str, grain: str = "sentence"):
    """`pattern` compiled by RE2 (see MAX_PATTERN_PROGRAM), or SourceError saying, in one line, why
    it is refused (too long, invalid, a feature RE2 lacks, too large) and what to do."""
    instead = f"or leave it empty for {grain}s"
    if len(pattern) > MAX_PATTERN_CHARS:
        raise SourceError(f"the splitting regex is {len(pattern):,} characters long; at most {MAX_PATTERN_CHARS}: "
                          f"shorten it, {instead}")
    if _SURROGATE.search(pattern):
        raise SourceError(f"the splitting regex {pattern!r} holds a lone UTF-16 surrogate: remove it, {instead}")
    try:
        rx = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        why = " ".join(why.split())
        if why.startswith("invalid perl operator: (?<") or why.startswith(("invalid perl operator: (?=",
                                                                             "invalid perl operator: (?!")):
            fix = "lookahead and lookbehind are not supported (RE2 syntax): match the text itself"
        elif why.startswith("invalid escape sequence: \\") and why[-1:].isdigit():
            fix = "backreferences are not supported (RE2 syntax)"
        elif why == "invalid escape sequence: \\Z":
            fix = "RE2 writes the end of the text as \\z"
        elif why.startswith("pattern too large"):
            fix = "it is too large to run: use fewer or smaller repetitions"
        elif why.startswith("invalid repetition size"):
            fix = f"{why} (a repetition count is at most 1000, nested counts multiplied)"
        else:
            fix = f"invalid regex ({why}): fix it"
        raise SourceError(f"the splitting regex {pattern!r} is refused: {fix}, {instead}") from None
    size = max(rx.programsize, rx.reverseprogramsize)
    if size > MAX_PATTERN_PROGRAM:
        raise SourceError(f"the splitting regex {pattern!r} compiles to {size:,} steps; at most "
                          f"{MAX_PATTERN_PROGRAM:,}: use fewer or smaller repetitions, {instead}")
    return rx


def make_sources(tokenizer, contexts: Sequence[tuple[str, str]], grain: str = "sentence", pattern: str | None = None,
                 suffix: str = "", conv_window: int = 3) -> list[Source]:
    """The sources of `contexts` [(id, text)] in document order (context by context).

    Each context is tokenised as text + suffix, as its stored state was; the suffix joins the last
    source. conv_window: K-1 (config.ssm.d_conv - 1)."""
    out: list[Source] = []
    for j, (cid, text) in enumerate(contexts):
        spans = split_spans(text, grain, pattern)
        full = text + suffix
        spans[-1] = (spans[-1][0], len(full))
        before: list[int] = []
        digest = store_key(full)
        for start, end in spans:
            ids = tuple(tokenizer.encode(full[start:end]))
            window = tuple(before[-conv_window:] if conv_window else ())
            out.append(Source(j, cid, start, end, full[start:end], ids, window, digest))
            before += ids
    return out


def sources_of(sources: Sequence[Source], n_contexts: int) -> list[list[int]]:
    """Indices of each context's sources, in order: [[i, ...] per context]."""
    per: list[list[int]] = [[] for _ in range(n_contexts)]
    for i, s in enumerate(sources):
        per[s.context].append(i)
    return per


# --------------------------------------------------------------------------------------------
# Source states: encoded once, after their window
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def encode_sources(model, sources: Sequence[Source], batch_size: int = 32) -> list[ContextState]:
    """x(s) for each source: its tokens read after its window (ssm 0, log_decay 0; see the module
    docstring), all sources in two ragged batched forwards (the windows, then the sources)."""
    if not sources:
        return []
    windows = model.encode_contexts([list(s.window) for s in sources], batch_size=batch_size)
    starts = [ContextState(torch.zeros_like(w.ssm), w.conv, torch.zeros_like(w.log_decay), 0) for w in windows]
    return model.encode_contexts([list(s.ids) for s in sources], batch_size=batch_size, states=starts)


class SourceStore(StateStore):
    """A StateStore of source states (same format, same lazy reads and LRU cache).

    Entries are keyed by `Source.key` (context id, span, text digest) and hold their context's whole text
    (text + suffix), from which the source's tokens and window are cut again, so a reopened store
    re-derives nothing and a changed context text is refused. Keep it under the app's cache
    folder, never in or beside a store the operator gave (which may be read-only)."""

    @classmethod
    def open_or_build(cls, folder, model) -> "SourceStore":
        folder = Path(folder)
        if (folder / "store.json").exists():
            return cls.open(folder, model)
        return cls.build(model, [], folder, progress=False)

    def _add(self, items, shard_size, batch_size, progress):
        """StoreWriter._add with the windowed encoding of `encode_sources` (ids: Source.key)."""
        if not items:
            return []
        self._check_writable()
        tok = self.model.tokenizer
        k = self.model.config.ssm_cfg.d_conv - 1
        srcs = []
        for key, full in items:
            cid, span = key.rsplit("@", 1)
            start, end = (int(x) for x in span.split("#")[0].split(":"))
            window = tok.encode(full[:start])[-k:] if start and k else []
            srcs.append(Source(0, cid, start, end, full[start:end], tuple(tok.encode(full[start:end])), tuple(window)))
        states = encode_sources(self.model, srcs, batch_size)
        si = self._write_shard([key for key, _ in items], states)
        with self._lock:
            for (key, full), s in zip(items, srcs):
                self._contexts[key] = {"id": key, "text": full, "num_tokens": len(s.ids), "shard": si}
            self._save_meta()
        return [key for key, _ in items]


def source_states(model, sources: Sequence[Source], store: SourceStore | None = None,
                  texts: dict[str, str] | None = None) -> list[ContextState]:
    """The states of `sources`: read from `store` (encoding, once, those it lacks: the context's
    text + suffix from `texts[context_id]`), or encoded here when store is None."""
    if store is None:
        return encode_sources(model, sources)
    full = {s.context_id: (texts or {}).get(s.context_id) for s in sources}
    missing = [cid for cid, t in full.items() if t is None]
    if missing:
        raise ValueError(f"no text for context {missing[0]!r}: pass texts={{id: text + suffix}}")
    store.ensure([(s.key, full[s.context_id]) for s in sources])
    return store.get_many([s.key for s in sources])


def store_key(text: str) -> str:
    """A short digest of a text, for folder names that follow their content."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# A context with some sources removed
# --------------------------------------------------------------------------------------------
def compose_kept(states: Sequence[ContextState], within: str = "caso", config=None) -> ContextState:
    """The state of a context from its kept sources' states, in document order, with no forward
    pass: CASO (prop. 1; the last kept source's conv window, what the concatenation holds), or
    PICASO-R as the order-free variant (prop. 3; the mean window, as compose does). config: the
    model (a RoPE hybrid's keys go to their offsets in the kept text: compose's config)."""
    if within not in WITHIN:
        raise SourceError(f"unknown within-context composition {within!r}: use one of {', '.join(WITHIN)}")
    if len(states) == 1:
        return states[0]
    return compose(within, list(states), conv="last" if within == "caso" else "mean", config=config)


def kept_ids(sources: Sequence[Source], kept: Sequence[int]) -> list[int]:
    """The token ids of the kept sources, in document order: the kept text, tokenised."""
    return [t for i in sorted(kept) for t in sources[i].ids]

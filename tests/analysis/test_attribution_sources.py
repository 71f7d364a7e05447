"""Attribution below the context (picaso_core/analysis/sources.py, attribution_sources.py).

Against independent references: a context composed from all its sentences' states is the context's
own state for a one-layer model (CASO, prop. 1, with the conv window handled); re-encoding LOO at
sentence grain equals encoding each kept text and scoring it; a span's scores are the full answer's
per-token losses restricted to it; on a constructed sample the one sentence that states the answer
ranks first. Tiny random models with a character tokenizer, and the bundled demo model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import tiny_model
from picaso_core.analysis.attribution_sources import (SpanError, ablation_losses, score_sources, span_tokens,
                                                      topk_drop)
from picaso_core.analysis.sources import SourceError, compose_kept, encode_sources, make_sources, split_spans
from picaso_core.compose import compose

SUFFIX = "\n\n"
CONTEXTS = [("a", "Osric founded Velmora. It sits on the Quell. Glass is its export!"),
            ("b", "Tarrix is high. Mira Sen climbed it first? Yes, in 1990.")]
QUERY, ANSWER = "Who founded Velmora?", " Osric Dallen did."


class CharTok:
    """One token per ASCII character: encode and decode are exact inverses (ids < TINY_VOCAB)."""

    special_ids = frozenset()

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids) -> str:
        return "".join(map(chr, ids))


TOK = CharTok()


def _sentences(model, contexts=CONTEXTS):
    return make_sources(TOK, contexts, "sentence", suffix=SUFFIX, conv_window=model.config.ssm_cfg.d_conv - 1)


def _context_states(model, contexts=CONTEXTS):
    return model.encode_contexts([TOK.encode(t + SUFFIX) for _, t in contexts])


# ---- the splitter ---------------------------------------------------------------------------------
def test_sources_tile_each_context_and_their_tokens_concatenate_to_the_contexts():
    text = CONTEXTS[0][1]
    spans = split_spans(text, "sentence")
    assert [text[s:e] for s, e in spans] == ["Osric founded Velmora.", " It sits on the Quell.", " Glass is its export!"]
    words = "one two  three"
    assert [words[s:e] for s, e in split_spans(words, "word")] == ["one", " two", "  three"]
    assert [text[s:e] for s, e in split_spans(text, "sentence", r"\bIt|\bGlass")] == [
        "Osric founded Velmora. ", "It sits on the Quell. ", "Glass is its export!"]
    sources = make_sources(TOK, CONTEXTS, "sentence", suffix=SUFFIX)
    for j, (_, t) in enumerate(CONTEXTS):
        mine = [s for s in sources if s.context == j]
        assert [x for s in mine for x in s.ids] == TOK.encode(t + SUFFIX) and mine[-1].text.endswith(SUFFIX)
    assert sources[1].window == tuple(sources[0].ids[-3:]) and sources[0].window == ()


# ---- every source kept: the context's own state ------------------------------------------------------
@pytest.mark.parametrize("family", ["Mamba2", "Mamba1"])
def test_all_sentences_kept_are_the_contexts_own_state_for_one_layer(family):
    """Prop. 1: CASO of consecutive chunks is the concatenation's state for one SSM layer, once each
    chunk is read after the previous chunk's conv window (sources.encode_sources)."""
    model = tiny_model(family, seed=4, n_layer=1)
    sources = _sentences(model)
    states, contexts = encode_sources(model, sources), _context_states(model)
    for j, want in enumerate(contexts):
        got = compose_kept([states[i] for i, s in enumerate(sources) if s.context == j])
        for name in ("ssm", "conv", "log_decay"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-4, atol=1e-5)
    q, a = TOK.encode(QUERY), TOK.encode(ANSWER)
    ctx_sources = make_sources(TOK, CONTEXTS, "context", suffix=SUFFIX)
    for method in ("caso", "picaso_r", "soup"):
        whole = ablation_losses(model, q, a, ctx_sources, contexts, np.ones((1, 2)), method)
        kept = ablation_losses(model, q, a, sources, states, np.ones((1, len(sources))), method)
        np.testing.assert_allclose(kept, whole, atol=1e-5)
    # two layers: the second reads outputs that depend on the whole prefix, so CASO approximates
    deep = tiny_model(family, seed=4, n_layer=2)
    s2, c2 = encode_sources(deep, _sentences(deep)), _context_states(deep)
    got = compose_kept([s2[i] for i, s in enumerate(sources) if s.context == 0])
    assert float((got.ssm[1] - c2[0].ssm[1]).abs().max()) > 1e-4


def test_all_sentences_kept_on_the_demo_model_within_the_measured_tolerance(demo):
    """The demo model (4 layers): PICASO-R of the contexts, each composed (CASO) from its sentences,
    vs PICASO-R of the contexts' own states. Measured over 50 demo QA samples (docs/attribution.md,
    scripts/measure_attribution.py --all-kept): |ΔL| median 0.019, mean 0.061, 90th percentile 0.21
    nats per answer token; the first 2 samples (0.001, 0.003) are checked within 0.05."""
    from picaso_core.data import load_corpus

    tok = demo.tokenizer
    for s in load_corpus("demo", "test", kind="qa").samples[:2]:
        q, a = tok.encode(s.query), tok.encode(s.continuation)
        ctx = make_sources(tok, list(s.contexts), "context", suffix=SUFFIX)
        sen = make_sources(tok, list(s.contexts), "sentence", suffix=SUFFIX)
        whole = ablation_losses(demo, q, a, ctx, encode_sources(demo, ctx), np.ones((1, len(ctx)))).mean()
        kept = ablation_losses(demo, q, a, sen, encode_sources(demo, sen), np.ones((1, len(sen)))).mean()
        assert abs(kept - whole) < 0.05, (s.sample_id, kept, whole)


def _sensitive_model():
    """A random tiny model whose answer loss moves with the context: at its initialisation a sentence
    moves the loss by ~1e-4 nats, a few float32 roundings of a 5.8-nat loss; with the projections x4
    and the embeddings x3 it moves by ~5e-3 (measured), 500x the tolerance of the tests."""
    model = tiny_model("Mamba2", seed=5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.mul_(4.0 if ("in_proj" in name or "out_proj" in name) else 3.0 if "embedding" in name else 1.0)
    return model


# ---- re-encoding is ContextCite's exact ablation ---------------------------------------------------------
@pytest.mark.parametrize("method", ["concat", "picaso_r", "caso"])
def test_reencoding_loo_at_sentence_grain_equals_brute_force(method):
    model = _sensitive_model()
    sources = _sentences(model)
    q, a = TOK.encode(QUERY), TOK.encode(ANSWER)

    def brute(keep: set[int]) -> float:
        texts = ["".join(s.text for i, s in enumerate(sources) if i in keep and s.context == j) for j in range(2)]
        texts = [t for t in texts if t]
        if method == "concat":
            state = model.encode_context(TOK.encode("".join(texts)))
        else:
            parts = [model.encode_context(TOK.encode(t)) for t in texts]
            state = parts[0] if len(parts) == 1 else compose(method, parts)
        return model.continuation_loss(q, a, state)

    n = len(sources)
    full = brute(set(range(n)))
    want = [brute(set(range(n)) - {i}) - full for i in range(n)]
    got = score_sources(model, q, a, sources, encode_sources(model, sources), [method], way="reencode")
    np.testing.assert_allclose(got.method_scores[method], want, rtol=0, atol=1e-5)
    assert np.ptp(want) > 1e-3  # the sentences do differ, by far more than the tolerance: not a vacuous equality


# ---- answer spans ----------------------------------------------------------------------------------------
def test_a_span_is_the_full_attribution_restricted_to_its_tokens(demo, made_up):
    tok = demo.tokenizer
    q, a = tok.encode(QUESTION), tok.encode(STATED)
    answer = tok.decode(a)
    start = answer.index("Mirel")
    t0, t1 = span_tokens(tok, a, start, start + len("Mirel Vostani"))
    assert "Mirel Vostani" in tok.decode(a[t0:t1]) and 0 < t0 < t1 < len(a)
    assert "Mirel" not in tok.decode(a[:t0]) and "Vostani" not in tok.decode(a[t1:])
    assert span_tokens(tok, a) == (0, len(a)) and span_tokens(tok, a, 0, 1) == (0, 1)
    sources, states = made_up
    full = score_sources(demo, q, a, sources, states, ["picaso_r"])
    part = score_sources(demo, q, a, sources, states, ["loi", "picaso_r", "surrogate"], span=(t0, t1), n_ablations=8)
    np.testing.assert_allclose(part.method_scores["picaso_r"], full.token_deltas["picaso_r"][:, t0:t1].mean(1),
                               atol=1e-5)
    per_token = ablation_losses(demo, q, a, sources, states, np.eye(len(sources)), "soup")
    empty = float(ablation_losses(demo, q, a, sources, states, np.zeros((1, len(sources))))[0, t0:t1].mean())
    np.testing.assert_allclose(part.method_scores["loi"], empty - per_token[:, t0:t1].mean(1), atol=1e-5)
    # the surrogate was fitted on the span's losses of its own masks
    sur = part.surrogate
    want = ablation_losses(demo, q, a, sources, states, sur.masks)[:, t0:t1].mean(1)
    np.testing.assert_allclose(sur.losses, want, atol=1e-5)
    assert not np.allclose(part.method_scores["picaso_r"], full.method_scores["picaso_r"])


# ---- the sentence that states the answer --------------------------------------------------------------
QUESTION = "Question: Who founded Tarlo?\nAnswer:"
STATED = " Local accounts credit Mirel Vostani with founding Tarlo."
MADE_UP = [  # the demo world's phrasing, an entity it never saw; one sentence states the answer
    ("tarlo-a", ("Notes on Tarlo. The markets of Tarlo open early in the morning. "
                 "The river Calka runs through the centre of Tarlo.")),
    ("tarlo-b", "This passage is about Tarlo. Many stories are told about the early days of Tarlo." + STATED +
                " Its old quarter is known for narrow streets and stone walls."),
    ("gorfalka-x", "On Gorfalka: About 790166 people live in Gorfalka. The main export of Gorfalka is silver wool."),
]


@pytest.fixture(scope="module")
def demo():
    from picaso_core import load_model

    return load_model("demo")


@pytest.fixture(scope="module")
def made_up(demo):
    """The constructed sample's sentences and their states on the demo model, encoded once."""
    sources = make_sources(demo.tokenizer, MADE_UP, "sentence", suffix=SUFFIX)
    return sources, encode_sources(demo, sources)


@pytest.mark.parametrize("way", ["states", "reencode"])
def test_the_sentence_stating_the_answer_ranks_first(demo, made_up, way):
    tok = demo.tokenizer
    q, a = tok.encode(QUESTION), tok.encode(STATED)
    sources, states = made_up
    answer = next(i for i, s in enumerate(sources) if s.text.strip() == STATED.strip())
    r = score_sources(demo, q, a, sources, states, ["picaso_r", "surrogate"], way=way, n_ablations=16)
    for m in ("picaso_r", "surrogate"):
        scores = r.method_scores[m]
        assert int(np.argmax(scores)) == answer, (m, way, np.round(scores, 2))
        assert scores[answer] > 1.0  # nats per answer token: the answer rests on it
    drop = topk_drop(demo, q, a, sources, states, r.method_scores["surrogate"], way=way)
    assert drop[1] > 1.0 and drop[3] >= drop[1] - 0.2


# ---- bad input ----------------------------------------------------------------------------------------
def test_bad_input_is_one_short_error_naming_the_fix():
    a = TOK.encode(ANSWER)
    with pytest.raises(SpanError, match=r"is empty: select at least one character"):
        span_tokens(TOK, a, 4, 4)
    with pytest.raises(SpanError, match=r"outside the answer's 18 characters: give 0 <= span_start < span_end <= 18"):
        span_tokens(TOK, a, 3, 40)
    with pytest.raises(SourceError, match="unknown grain 'paragraph': use one of context, sentence, word"):
        split_spans("a b", "paragraph")
    with pytest.raises(SourceError, match="matches nothing in a context: give one that matches"):
        split_spans("plain text", "sentence", r"\d+")
    with pytest.raises(SourceError, match="invalid regex"):
        split_spans("plain text", "word", "(")
    with pytest.raises(SourceError, match="use grain sentence or word with it"):
        split_spans("plain text", "context", ",")
    model = tiny_model("Mamba2", seed=1)
    sources = _sentences(model)
    states = encode_sources(model, sources)
    with pytest.raises(SourceError, match="unknown way 'exact': use one of states, reencode"):
        score_sources(model, TOK.encode(QUERY), a, sources, states, ["picaso_r"], way="exact")

"""No output shows a special token's text: generation stops at EOS and what a user sees
is decoded without special tokens, in Compose & compare's cards, Attribution's answer (which is
then attributed) and the two-skill mixer, for the demo examples."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.ui.tabs import soup_handlers
from picaso_core.session import load_resources


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    res = load_resources("demo", "demo", cache_dir=tmp_path_factory.mktemp("cache"), log=lambda m: None)
    tok = res.model.tokenizer
    specials = {tok.decode([i]) for i in tok.special_ids}
    assert "<|endoftext|>" in specials
    return res, specials


def _text(outputs) -> str:
    parts = []
    for o in outputs:
        if isinstance(o, pd.DataFrame):
            parts.append(o.to_csv())
        elif isinstance(o, (dict, list)):
            parts.append(json.dumps(o, default=str))
        else:
            parts.append(str(o))
    return "\n".join(parts)


def _assert_clean(text: str, specials: set[str], where: str):
    found = [s for s in specials if s in text]
    assert not found, f"{where} shows {found}"


def test_tokenizer_display_text_cuts_at_eos_and_drops_special_tokens(demo):
    res, specials = demo
    tok = res.model.tokenizer
    ids = tok.encode(" 15 bridges.") + [tok.eos_id] + tok.encode(" more")
    assert tok.display_text(ids) == " 15 bridges."
    assert "<|endoftext|>" in tok.decode(ids)  # decode keeps them: round trips stay exact


def test_compose_cards_never_show_special_tokens(demo):
    res, specials = demo
    samples = res.corpus.samples[:8]
    assert "demo-test-r0003" in {s.sample_id for s in samples}  # the example the Compose tab opens on
    for s in samples:
        out = compose_tab.compose(res, s.query, s.continuation, k=5, example=s.sample_id)
        _assert_clean(_text(out[:-1]), specials, f"/compose on {s.sample_id}")


def test_attribution_answer_and_two_skill_mixer_never_show_special_tokens(demo):
    res, specials = demo
    for s in attribution_tab.qa_samples(res)[:4]:
        answer = attribution_tab.generate_answer(res, s.query, 3)
        assert answer.strip()
        _assert_clean(answer, specials, f"/generate_answer on {s.sample_id}")
    s = attribution_tab.qa_samples(res)[0]
    out = attribution_tab.attribute(res, s.query, "", 3, None, ["loi", "picaso_r"], s.sample_id)
    _assert_clean(_text(out[:2] + out[-1:]), specials, "/attribute (its own answer)")
    # a typed special token is a marker, not part of the answer to attribute
    data = attribution_tab.run_attribution(res, s.query, s.continuation + "<|endoftext|>", 3, None, ["loi"])
    _assert_clean(data["answer"], specials, "/attribute (typed answer)")
    _assert_clean(_text(soup_handlers.two_task(res)), specials, "/soup_two_task")

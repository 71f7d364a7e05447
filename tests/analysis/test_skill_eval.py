"""skill_eval: k-shot prompts from train items, every held-out item asked, exact match, shuffled probes.

Checked with oracle "models" (a tokenizer + generate that answer from a lookup table), so the
protocol itself is tested without a trained model."""

from __future__ import annotations

import random

import pytest

from picaso_core.data.skills import ARROW, load_skill_tasks
from picaso_core.analysis.skill_eval import mean_accuracy, skill_accuracy, skill_prompt

TRAIN = load_skill_tasks("train")
TEST = load_skill_tasks("test")
ALL = load_skill_tasks("all", include_shuffled=False)


class _Chars:
    """A character tokenizer: ids are code points."""

    eos_id = None

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


class Oracle:
    """Answers `question →` with the TRUE relation of `task` (never the shuffled label), after at
    least `min_k` demonstration lines; otherwise answers '?'."""

    def __init__(self, task: str, min_k: int = 0):
        self.tokenizer, self.table, self.min_k, self.prompts = _Chars(), dict(ALL[task]), min_k, []

    def generate(self, ids, max_new_tokens=8, temperature=0):
        prompt = self.tokenizer.decode(ids)
        self.prompts.append(prompt)
        lines = prompt.split("\n")
        q = lines[-1].removesuffix(f" {ARROW}")
        a = self.table.get(q, "?") if len(lines) - 1 >= self.min_k else "?"
        return self.tokenizer.encode(f" {a}\nnext {ARROW} line")[:max_new_tokens]


def test_prompt_has_k_train_demonstrations_and_never_the_question():
    for k in (0, 1, 4, 16):
        q = TEST["antonym"][0][0]
        p = skill_prompt(TRAIN["antonym"], q, k, random.Random(k))
        lines = p.split("\n")
        assert len(lines) == k + 1 and lines[-1] == f"{q} {ARROW}"
        for line in lines[:-1]:
            dq, da = line.split(f" {ARROW} ")
            assert (dq, da) in TRAIN["antonym"] and dq != q
    with pytest.raises(ValueError, match="train items"):
        skill_prompt(TRAIN["antonym"], "x", 10_000, random.Random(0))


def test_every_test_item_is_asked_once_per_k_and_exact_match_is_scored():
    oracle = Oracle("country_capital", min_k=4)
    acc = skill_accuracy(oracle, tasks=["country_capital"], ks=(0, 1, 4, 16))
    n = len(TEST["country_capital"])
    assert len(oracle.prompts) == 4 * n
    asked = {p.split("\n")[-1].removesuffix(f" {ARROW}") for p in oracle.prompts}
    assert asked == {q for q, _ in TEST["country_capital"]}
    assert acc["country_capital"] == {0: 0.0, 1: 0.0, 4: 1.0, 16: 1.0}  # answers only from 4 lines on
    assert mean_accuracy(acc) == {0: 0.0, 1: 0.0, 4: 1.0, 16: 1.0}


def test_a_model_that_follows_the_true_relation_fails_the_shuffled_probe():
    acc = skill_accuracy(Oracle("antonym"), tasks=["antonym", "antonym_shuffled"], ks=(16,))
    assert acc["antonym"][16] == 1.0
    # the shuffled labels (a derangement) differ from the true antonyms on almost every test item
    assert acc["antonym_shuffled"][16] <= 0.1


def test_the_same_seed_asks_the_same_prompts():
    a, b = Oracle("counting"), Oracle("counting")
    skill_accuracy(a, tasks=["counting"], ks=(4,), seed=3, max_items=5)
    skill_accuracy(b, tasks=["counting"], ks=(4,), seed=3, max_items=5)
    assert a.prompts == b.prompts and len(a.prompts) == 5


def test_long_answers_get_the_tokens_they_need():
    # " toujours" (a test item) is 9 characters, i.e. tokens of the character tokenizer: a fixed budget of 8 cut it
    oracle = Oracle("english_french")
    acc = skill_accuracy(oracle, tasks=["english_french"], ks=(1,))
    assert acc["english_french"][1] == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="unknown skill tasks"):
        skill_accuracy(Oracle("antonym"), tasks=["no_such_task"])
    with pytest.raises(ValueError, match="k must be"):
        skill_accuracy(Oracle("antonym"), tasks=["antonym"], ks=(-1,))

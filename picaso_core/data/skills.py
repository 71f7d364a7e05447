"""In-context skill tasks in the State Soup format (Pióro et al. 2024, sec. 2 and appendix A).

A k-shot demonstration is k lines `<question> → <answer>\\n` (the paper's format, after Todd et
al. 2024); a query is one more `<question> →` whose expected continuation is ` <answer>`.
Tasks: the paper's six (antonym, capitalize, country_capital, english_french, present_past,
singular_plural), its two clustering tasks (first_letter, second_letter), counting (the paper's
mixing example, one → two ...), last_letter, and a `<task>_shuffled` variant of each with the
labels permuted (paper appendix A: keeps the label distribution, removes the relation).

Every task's items are split once, by a fixed hash-seeded shuffle, into train (75%) and test
(25%) items, so a library built from train items is queried with unseen questions.
"""

from __future__ import annotations

import random
import zlib
from typing import Sequence

from picaso_core.data import skill_words as W

ARROW = "→"
SHUFFLED_SUFFIX = "_shuffled"
TEST_FRACTION = 0.25
Pair = tuple[str, str]


def _base_tasks() -> dict[str, list[Pair]]:
    words = W.WORDS
    return {
        "antonym": list(W.ANTONYM),
        "capitalize": [(w, w.capitalize()) for w in words],
        "country_capital": list(W.COUNTRY_CAPITAL),
        "english_french": list(W.ENGLISH_FRENCH),
        "present_past": list(W.PRESENT_PAST),
        "singular_plural": list(W.SINGULAR_PLURAL),
        "first_letter": [(w, w[0].upper()) for w in words],
        "second_letter": [(w, w[1].upper()) for w in words],
        "last_letter": [(w, w[-1].upper()) for w in words],
        "counting": [(W.number_word(n), W.number_word(n + 1)) for n in range(1, 99)],
    }


def _rng_for(name: str) -> random.Random:
    # Seeded by the task name (not Python's salted hash) so splits are identical on every run.
    return random.Random(zlib.crc32(name.encode()))


def _shuffle_labels(name: str, pairs: list[Pair]) -> list[Pair]:
    """Permute the answers among the questions; retry until no pair keeps its own answer."""
    rng = _rng_for(name + SHUFFLED_SUFFIX)
    answers = [a for _, a in pairs]
    for _ in range(1000):
        perm = answers[:]
        rng.shuffle(perm)
        if all(p != a for p, a in zip(perm, answers)):
            break
    return [(q, p) for (q, _), p in zip(pairs, perm)]


def _test_questions(name: str, pairs: list[Pair]) -> set[str]:
    questions = sorted(q for q, _ in pairs)
    _rng_for(name).shuffle(questions)
    return set(questions[: max(1, round(len(questions) * TEST_FRACTION))])


def load_skill_tasks(split: str = "all", include_shuffled: bool = True) -> dict[str, list[Pair]]:
    """Task name -> (question, answer) pairs.

    Args:
        split: "all", "train" (75% of items, for demonstrations/libraries) or "test" (the other 25%).
        include_shuffled: also return the `<task>_shuffled` label-permuted variants; a variant
            uses its base task's item split, so its test questions are unseen too.
    """
    if split not in ("all", "train", "test"):
        raise ValueError(f"split must be 'all', 'train' or 'test', got {split!r}")
    out: dict[str, list[Pair]] = {}
    for name, pairs in _base_tasks().items():
        test_q = _test_questions(name, pairs)
        variants = {name: pairs}
        if include_shuffled:
            variants[name + SHUFFLED_SUFFIX] = _shuffle_labels(name, pairs)
        for vname, vpairs in variants.items():
            if split == "all":
                out[vname] = vpairs
            else:
                out[vname] = [(q, a) for q, a in vpairs if (q in test_q) == (split == "test")]
    return out


def format_demos(pairs: Sequence[Pair]) -> str:
    """k demonstration lines, `question → answer\\n` each (the paper's format)."""
    return "".join(f"{q} {ARROW} {a}\n" for q, a in pairs)


def format_query(question: str) -> str:
    """The open line the model completes: `question →` (answer follows with a leading space)."""
    return f"{question} {ARROW}"


def skill_query(
    pairs: Sequence[Pair],
    k: int,
    rng: random.Random,
    query_pairs: Sequence[Pair] | None = None,
) -> tuple[str, str]:
    """A k-shot prompt and its expected continuation.

    Args:
        pairs: items to draw the k demonstrations from (e.g. a task's train split).
        k: number of demonstration lines (0 gives a zero-shot prompt).
        rng: randomness for the draw.
        query_pairs: items to draw the query from (e.g. the test split); default `pairs`, in
            which case the query is never one of the demonstrations.
    Returns:
        (prompt, answer): prompt = k demo lines + `question →`; answer = ` <answer>`.
    """
    if query_pairs is None:
        if len(pairs) < k + 1:
            raise ValueError(f"need k + 1 = {k + 1} items for a {k}-shot query, have {len(pairs)}")
        drawn = rng.sample(list(pairs), k + 1)
        demos, (q, a) = drawn[:k], drawn[k]
    else:
        q, a = rng.choice(list(query_pairs))
        pool = [p for p in pairs if p[0] != q]
        if len(pool) < k:
            raise ValueError(f"need {k} demonstration items, have {len(pool)}")
        demos = rng.sample(pool, k)
    return format_demos(demos) + format_query(q), f" {a}"

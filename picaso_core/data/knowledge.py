"""Knowledge passages: every skill mapping stated in prose, so the demo model KNOWS the facts.

In State Soup (Pióro et al. 2024) the language model already knows capitals, translations and
plurals from pre-training; k demonstrations only tell it WHICH mapping to apply. A model trained on
the demo world can only know what it reads, so the training stream carries reference passages that
state the pairs of every base skill task, ALL items included (train and test), in varied wordings
and glossary lists, never in the `question → answer` demonstration format. Demonstrations use train
items only (skills.py), so a held-out query is a fact the model has read in prose but never seen
demonstrated: answering it means applying the task the demonstrations name to remembered knowledge.

    knowledge_passage(rng)            one random passage (a few facts of one task)
    knowledge_items()                 task -> every (question, answer) pair the passages state
    all_knowledge_passages()          a deterministic set of passages that covers every item
"""

from __future__ import annotations

import random
from typing import Sequence

from picaso_core.data.skills import ARROW, Pair, load_skill_tasks

# Sentence templates per task: {q} the question, {a} the answer. Several wordings per fact (and
# the answer sometimes before the question) so the fact is stored in a form the model can extract
# (Allen-Zhu & Li 2023, "Physics of Language Models 3.1": augmented wordings make knowledge usable
# in a new format).
SENTENCES: dict[str, tuple[str, ...]] = {
    "antonym": ("The opposite of {q} is {a}.", "{q} is the opposite of {a}.",
                "If something is not {q}, it may be {a}.", "{a} means the reverse of {q}.",
                "Antonyms: {q} and {a}."),
    "capitalize": ("Written with a capital letter, {q} becomes {a}.", "At the start of a sentence {q} is written {a}.",
                   "{a} is {q} with a capital first letter.", "Capitalised, {q} reads {a}."),
    "country_capital": ("The capital of {q} is {a}.", "{a} is the capital of {q}.",
                        "{q} is governed from its capital, {a}.", "The capital city of {q} is {a}.",
                        "{a}, the capital, is the largest seat of power in {q}."),
    "english_french": ("The French word for {q} is {a}.", "In French, {q} is {a}.",
                       "{a} is French for {q}.", "To say {q} in French, say {a}.",
                       "The English word {q} translates to French as {a}."),
    "present_past": ("The past tense of {q} is {a}.", "Today I {q}; yesterday I {a}.",
                     "{a} is the past form of {q}.", "Yesterday they {a}, and today they {q} again."),
    "singular_plural": ("The plural of {q} is {a}.", "One {q}, many {a}.",
                        "{a} is the plural of {q}.", "There was one {q}, and then there were two {a}."),
    "first_letter": ("{q} begins with the letter {a}.", "The first letter of {q} is {a}.",
                     "The word {q} starts with {a}."),
    "second_letter": ("The second letter of {q} is {a}.", "In {q}, the letter after the first is {a}."),
    "last_letter": ("{q} ends with the letter {a}.", "The last letter of {q} is {a}.",
                    "The word {q} finishes with {a}."),
    "counting": ("After {q} comes {a}.", "{a} follows {q}.", "Count on from {q} and the next number is {a}.",
                 "{q} plus one is {a}."),
}

HEADINGS: dict[str, tuple[str, ...]] = {
    "antonym": ("Opposites.", "A note on antonyms."),
    "capitalize": ("Capital letters.", "On writing words with capitals."),
    "country_capital": ("Capitals of the world.", "Countries and their capitals."),
    "english_french": ("A little French.", "English and French words."),
    "present_past": ("Past tenses.", "Verbs in the past."),
    "singular_plural": ("Plurals.", "One and many."),
    "first_letter": ("Spelling: first letters.", "How words begin."),
    "second_letter": ("Spelling: second letters.", "The second letter of words."),
    "last_letter": ("Spelling: last letters.", "How words end."),
    "counting": ("Counting.", "Numbers in order."),
}

# Glossary lists under a heading, a second wording of the same facts: inline ("q: a; q: a; ...") or
# one pair per line ("q: a\n"), the compact reference-table form (about 5 tokens a fact against ~12
# in prose, so a fact is met more often per training token). A line glossary is the closest relative
# of a demonstration that a pre-training corpus has; the `→` arrow itself stays reserved for
# demonstrations of train items.
GLOSSARY_SEP = ("{q}: {a}", "{q} ({a})", "{q}, {a}", "{q} = {a}", "{q} - {a}")
GLOSSARY_SHARE = 0.5  # share of passages that are glossaries; half of them one pair per line


def knowledge_items() -> dict[str, list[Pair]]:
    """Task -> every (question, answer) pair of the base tasks (train and test items alike)."""
    return load_skill_tasks("all", include_shuffled=False)


def _spelling(word: str) -> str:
    return f"{word} is spelled " + "-".join(word.upper()) + "."


def _render(task: str, pairs: Sequence[Pair], rng: random.Random) -> str:
    """One passage stating `pairs` of `task`: prose sentences or a glossary list (never the arrow)."""
    head = rng.choice(HEADINGS[task])
    if rng.random() < GLOSSARY_SHARE:
        fmt = rng.choice(GLOSSARY_SEP)
        if rng.random() < 0.5:
            text = head + "\n" + "\n".join(fmt.format(q=q, a=a) for q, a in pairs)
        else:
            text = head + " " + "; ".join(fmt.format(q=q, a=a) for q, a in pairs) + "."
    else:
        parts = []
        for q, a in pairs:
            parts.append(rng.choice(SENTENCES[task]).format(q=q, a=a))
            if task.endswith("_letter") and rng.random() < 0.3:
                parts.append(_spelling(q))
        text = head + " " + " ".join(parts)
    if ARROW in text:  # the demonstration format is reserved for train items (module docstring)
        raise AssertionError(f"knowledge passage uses the demonstration arrow: {text!r}")
    return text


def knowledge_passage(rng: random.Random, items: dict[str, list[Pair]] | None = None,
                      max_facts: int = 12) -> dict:
    """A random passage: 2..max_facts facts of one task drawn from all its items.

    Returns a training example {"kind": "knowledge", "task", "contexts": [], "query": heading +
    first fact, "continuation": the rest} (the loss covers the whole passage but its first words).
    """
    items = knowledge_items() if items is None else items
    task = rng.choice(sorted(items))
    pairs = rng.sample(items[task], rng.randint(2, min(max_facts, len(items[task]))))
    text = _render(task, pairs, rng)
    cut = text.index(" ") + 1
    return {"kind": "knowledge", "task": task, "contexts": [], "query": text[:cut], "continuation": text[cut:]}


def all_knowledge_passages(seed: int = 0, facts_per_passage: int = 6) -> list[str]:
    """Deterministic passages that together state every item of every base task (for tests, and
    for a user who wants to read what the demo model was told)."""
    rng = random.Random(seed)
    out = []
    for task, pairs in sorted(knowledge_items().items()):
        pairs = list(pairs)
        rng.shuffle(pairs)
        for i in range(0, len(pairs), facts_per_passage):
            out.append(_render(task, pairs[i:i + facts_per_passage], rng))
    return out

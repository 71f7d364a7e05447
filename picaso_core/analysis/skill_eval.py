"""In-context skill accuracy: greedy exact match of k-shot queries (State Soup sec. 2, Todd et al.).

Every held-out (test) item of a task is asked once per k: k demonstrations drawn from the task's
TRAIN items (seeded per task, k and item), then `question →`; the model's greedy answer up to the
end of the line must equal the expected answer exactly. A `<task>_shuffled` variant asks the same
questions after demonstrations with permuted labels and expects its permuted label: a model that
follows the relation the demonstrations name (not just their label set) scores low there.
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

import torch

from picaso_core.data.skills import SHUFFLED_SUFFIX, format_demos, format_query, load_skill_tasks

DEFAULT_KS = (0, 1, 4, 16)


def skill_prompt(train_pairs, question: str, k: int, rng: random.Random) -> str:
    """k demonstration lines drawn from `train_pairs` (never the question itself), then the query."""
    pool = [p for p in train_pairs if p[0] != question]
    if k > len(pool):
        raise ValueError(f"k = {k} demonstrations asked, the task has {len(pool)} train items")
    return format_demos(rng.sample(pool, k)) + format_query(question)


@torch.no_grad()
def answer(model, prompt: str, max_new_tokens: int = 8) -> str:
    """The model's greedy answer: generated text up to the end of its first line, stripped.
    skill_accuracy gives each item the token count of its expected answer line + 2."""
    tok = model.tokenizer
    out = model.generate(tok.encode(prompt), max_new_tokens=max_new_tokens, temperature=0)
    return tok.decode(out).split("\n")[0].strip()


def skill_outcomes(
    model,
    tasks: Sequence[str] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    seed: int = 0,
    max_items: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, dict[int, list[bool]]]:
    """Task -> k -> per-item exact match (test items in a fixed order), so two models can be compared
    item by item (a paired test: both answer the same prompts). Arguments as in `skill_accuracy`."""
    train = load_skill_tasks("train")
    test = load_skill_tasks("test")
    if tasks is None:
        tasks = [t for t in sorted(train) if not t.endswith(SHUFFLED_SUFFIX)]
    unknown = [t for t in tasks if t not in train]
    if unknown:
        raise ValueError(f"unknown skill tasks {unknown}; known: {sorted(train)}")
    if any(k < 0 for k in ks):
        raise ValueError(f"k must be >= 0, got {list(ks)}")
    todo = {t: sorted(test[t])[:max_items] for t in tasks}
    total, done = sum(len(v) for v in todo.values()) * len(ks), 0
    out: dict[str, dict[int, list[bool]]] = {}
    for t in tasks:
        out[t] = {}
        for k in ks:
            hits = []
            for q, a in todo[t]:
                rng = random.Random(f"{seed}-{t.removesuffix(SHUFFLED_SUFFIX)}-{k}-{q}")
                budget = len(model.tokenizer.encode(f" {a}\n")) + 2  # room for the whole answer line
                hits.append(answer(model, skill_prompt(train[t], q, k, rng), budget) == a)
                done += 1
                if progress:
                    progress(done, total)
            out[t][k] = hits
    return out


def skill_accuracy(
    model,
    tasks: Sequence[str] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    seed: int = 0,
    max_items: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, dict[int, float]]:
    """Task -> k -> exact-match accuracy over the task's test items.

    Args:
        tasks: task names (base or `_shuffled`); default every base task.
        ks: numbers of demonstrations (0 = the bare `question →` line).
        max_items: ask at most this many test items per task (the first in a fixed order), for
            quick checks; default all of them.
    """
    hits = skill_outcomes(model, tasks, ks, seed, max_items, progress)
    return {t: {k: sum(h) / len(h) for k, h in by_k.items()} for t, by_k in hits.items()}


def mean_accuracy(acc: dict[str, dict[int, float]]) -> dict[int, float]:
    """k -> mean over tasks of the per-task accuracy."""
    ks = sorted({k for by_k in acc.values() for k in by_k})
    return {k: sum(by_k[k] for by_k in acc.values()) / len(acc) for k in ks}

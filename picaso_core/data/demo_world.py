"""Samples and training examples from the generated demo world (world.py, skills.py).

Two uses:
  1. Fixed evaluation sets saved to assets/demo_data by scripts/build_demo_data.py:
     `build_world` + `retrieval_sample` (PICASO sec. 6.1 WikiText protocol: query = first half,
     continuation = second half restating facts only other chunks hold) and `qa_sample`
     (MS MARCO shape: question, well-formed answer, candidate passages with is_selected gold).
  2. `training_examples(seed)`: an endless stream for the demo model. Every retrieval/QA example
     is drawn from a fresh mini-world of new entities, so the model cannot memorise facts and must
     learn to copy them from the contexts it is given.

Rendering (`render_parts`/`render_concat`): contexts joined by CONTEXT_SEP ("\\n\\n"), then
CONTEXT_SEP, then query + continuation. The training loop separates documents with the
tokenizer's EOS token ("<|endoftext|>"), never inside one.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Iterator, Sequence

from picaso_core.data.schema import RetrievalSample, qa_prompt
from picaso_core.data.knowledge import knowledge_items, knowledge_passage
from picaso_core.data.skills import format_demos, format_query, load_skill_tasks
from picaso_core.data.world import ENTITY_TYPES, Entity, make_entity, make_name, mentions

CONTEXT_SEP = "\n\n"
# Document shares of the training stream. "v1" trained the first bundled model (no knowledge: its
# skills stayed at ~11%). "v2" added knowledge passages (knowledge.py) that state every skill mapping,
# so that demonstrations only have to name the task (State Soup's setting), but at 16% of the tokens
# each fact was met ~100 times and not memorised. "v3" set the shares by tokens (about 1/3 retrieval,
# 1/8 QA, 1/3 knowledge, 1/5 skill demonstrations): skills 53% at 16 shots, held back by the first
# tokenizer (build_demo_data.TOKENIZER_MIX). "v4" trained the bundled model (58 min, seed 0) with the
# retrained tokenizer: with whole-piece answers the skills are learnt from fewer tokens, so about half
# of the tokens go back to retrieval (retrieval 52%, QA 11%, knowledge 18%, skill demonstrations 16%),
# which copying from context needs (docs/demo-assets.md). DEFAULT_MIX stays v1 for training_examples' callers;
# scripts/train_demo.py defaults to v4.
MIXES = {
    "v1": {"retrieval": 0.45, "qa": 0.2, "skill": 0.2, "passage": 0.15},
    "v2": {"retrieval": 0.2, "qa": 0.1, "skill": 0.3, "knowledge": 0.35, "passage": 0.05},
    "v3": {"retrieval": 0.113, "qa": 0.055, "skill": 0.327, "knowledge": 0.487, "passage": 0.018},
    "v4": {"retrieval": 0.196, "qa": 0.069, "skill": 0.269, "knowledge": 0.445, "passage": 0.020},
}
DEFAULT_MIX = MIXES["v1"]
KINDS = ("retrieval", "qa", "skill", "knowledge", "passage")
MAX_CONTEXTS = 5  # gold + distractors per sample (paper: 3-5 candidates is the demo's regime)


@dataclass
class World:
    """A fixed set of entities; its database is every chunk of every entity."""

    entities: list[Entity]
    split: str

    @staticmethod
    def chunk_id(ent: Entity, j: int) -> str:
        return re.sub(r"\W+", "_", ent.name.lower()) + f"-{j}"

    @property
    def database(self) -> dict[str, str]:
        return {self.chunk_id(e, j): c.text for e in self.entities for j, c in enumerate(e.chunks)}


def build_world(rng: random.Random, n_entities: int, split: str, types: Sequence[str] | None = None) -> World:
    """`n_entities` entities of `split`; regions come from a small pool so several share one.

    Args:
        types: entity type per entity (cycled); default: every type in turn.
    """
    types = list(types or ENTITY_TYPES)
    regions = [make_name(rng, split) for _ in range(max(2, n_entities // 6))]
    taken: set[str] = set()
    entities = []
    for i in range(n_entities):
        ent = make_entity(rng, ENTITY_TYPES[types[i % len(types)]], split, rng.choice(regions), taken)
        taken.add(ent.name)
        entities.append(ent)
    return World(entities, split)


def _pick_distractors(
    world: World, target: Entity, n: int, avoid: Sequence[str], rng: random.Random
) -> list[tuple[str, str]]:
    """`n` chunks of other entities that state none of `avoid` (the sample's key values).

    Preference order makes retrieval non-trivial: same type and region (shares the query's
    words and the continuation's phrasings), then same type, then anything else.
    """
    others = [e for e in world.entities if e is not target]
    tiers = [
        [e for e in others if e.etype is target.etype and e.region == target.region],
        [e for e in others if e.etype is target.etype and e.region != target.region],
        [e for e in others if e.etype is not target.etype],
    ]
    picked: list[tuple[str, str]] = []
    for tier in tiers:
        pool = [(world.chunk_id(e, j), c.text) for e in tier for j, c in enumerate(e.chunks)]
        rng.shuffle(pool)
        for cid, text in pool:
            if len(picked) == n:
                return picked
            if not any(mentions(text, v) for v in (*avoid, target.name)):
                picked.append((cid, text))
    if len(picked) < n:
        raise ValueError(f"world too small: found {len(picked)} of {n} distractors for {target.name}")
    return picked


def _restate(target: Entity, attr: str, rng: random.Random, paraphrase: bool) -> str:
    """A fact sentence for a continuation or answer: as its chunk words it (copyable from
    context), or, with `paraphrase`, in another phrasing (needs associative recall: a harder
    variant for models larger than the bundled demo)."""
    if paraphrase:
        return target.fill(rng.choice(target.attribute(attr).restate), target.facts[attr])
    return target.chunks[target.chunk_of(attr)].sentences[attr]


def retrieval_sample(world: World, target: Entity, rng: random.Random, sample_id: str,
                     paraphrase: bool = False) -> RetrievalSample:
    """WikiText-protocol sample: the query introduces `target`, the continuation restates 3-5 of
    its facts (in the words of the 2-4 gold chunks that alone hold them, unless `paraphrase`);
    1-3 distractors complete 3-5 candidates."""
    n_gold = rng.randint(2, len(target.chunks))
    gold = rng.sample(range(len(target.chunks)), n_gold)
    n_facts = rng.randint(max(3, n_gold), 5)  # continuation of ~20-60 tokens
    # One fact from each gold chunk (so every gold chunk is needed), the rest from any gold chunk.
    attrs = [rng.choice(target.chunks[j].attributes) for j in gold]
    spare = [a for j in gold for a in target.chunks[j].attributes if a not in attrs]
    attrs += rng.sample(spare, min(len(spare), n_facts - len(attrs)))
    values = [target.facts[a] for a in attrs]
    sentences = [_restate(target, a, rng, paraphrase) for a in attrs]
    query = " ".join([target.intro, target.fill(rng.choice(target.etype.fillers))])
    n_distract = rng.randint(1, MAX_CONTEXTS - n_gold)
    gold_ctx = [(world.chunk_id(target, j), target.chunks[j].text) for j in gold]
    contexts = gold_ctx + _pick_distractors(world, target, n_distract, values, rng)
    rng.shuffle(contexts)
    return RetrievalSample(
        sample_id=sample_id,
        query=query,
        continuation=" " + " ".join(sentences),
        contexts=contexts,
        gold_ids=[cid for cid, _ in gold_ctx],
        kind="retrieval",
        meta={"entity": target.name, "type": target.etype.name, "attributes": attrs, "values": values},
    )


def qa_sample(world: World, target: Entity, rng: random.Random, sample_id: str,
              paraphrase: bool = False) -> RetrievalSample:
    """MS MARCO-shaped sample: one question about one fact; candidates = the chunk that states
    it (is_selected), maybe another chunk of the same entity, and chunks of other entities."""
    attr = rng.choice(target.etype.attributes)
    value = target.facts[attr.name]
    question = target.fill(attr.question)
    answer = _restate(target, attr.name, rng, paraphrase)
    j = target.chunk_of(attr.name)
    gold = (world.chunk_id(target, j), target.chunks[j].text)
    contexts = [gold]
    if rng.random() < 0.5:  # a hard negative: same entity, other facts
        k = rng.choice([i for i in range(len(target.chunks)) if i != j])
        contexts.append((world.chunk_id(target, k), target.chunks[k].text))
    n_total = rng.randint(3, MAX_CONTEXTS)
    contexts += _pick_distractors(world, target, n_total - len(contexts), [value], rng)
    rng.shuffle(contexts)
    return RetrievalSample(
        sample_id=sample_id,
        query=qa_prompt(question),
        continuation=" " + answer,
        contexts=contexts,
        gold_ids=[gold[0]],
        kind="qa",
        meta={
            "entity": target.name,
            "type": target.etype.name,
            "question": question,
            "attributes": [attr.name],
            "values": [value],
            "is_selected": [int(cid == gold[0]) for cid, _ in contexts],
        },
    )


# --------------------------------------------------------------------------------------------
# Training stream


def _mini_world(rng: random.Random, split: str) -> World:
    """4-6 entities, mostly of one type and sharing 1-2 regions: hard distractors, fresh facts."""
    etype = rng.choice(list(ENTITY_TYPES))
    n = rng.randint(4, 6)
    types = [etype] * (n - 1) + [rng.choice(list(ENTITY_TYPES))]
    return build_world(rng, n, split, types=types)


def _skill_example(tasks: dict, rng: random.Random, max_shots: int) -> dict:
    """k random demos (1..max_shots) and a query line; half the time the demos are cut into 1-3
    contexts, which is how a skill library's states are later composed (State Soup sec. 2.2)."""
    name = rng.choice(sorted(tasks))
    pairs = tasks[name]
    k = rng.randint(1, min(max_shots, len(pairs) - 1))
    drawn = rng.sample(pairs, k + 1)
    demos, (q, a) = drawn[:k], drawn[k]
    if k >= 2 and rng.random() < 0.5:
        n_ctx = rng.randint(1, min(3, k))
        cuts = sorted(rng.sample(range(1, k), n_ctx - 1))
        bounds = [0, *cuts, k]
        contexts = [format_demos(demos[s:e]).rstrip("\n") for s, e in zip(bounds, bounds[1:])]
        query = format_query(q)
    else:
        contexts, query = [], format_demos(demos) + format_query(q)
    return {"kind": "skill", "task": name, "contexts": contexts, "query": query, "continuation": f" {a}"}


def _from_sample(s: RetrievalSample) -> dict:
    return {"kind": s.kind, "contexts": s.context_texts, "query": s.query, "continuation": s.continuation}


def training_examples(
    seed: int,
    split: str = "train",
    mix: dict[str, float] | None = None,
    max_shots: int = 32,
) -> Iterator[dict]:
    """Endless stream of examples {"kind", "contexts": [str], "query", "continuation"}.

    Args:
        seed: the stream is a pure function of (seed, split, mix, max_shots).
        split: "train" or "test"; names (and skill items) of one split never occur in the other.
        mix: kind -> weight over KINDS (default DEFAULT_MIX; MIXES has the named presets).
        max_shots: upper bound of k for skill demonstrations (the paper uses 32-shot states).
    Contexts are in random order (PICASO composes them order-free); "passage" examples have no
    contexts (query = intro, continuation = the entity's whole article); "knowledge" examples are
    prose statements of skill facts, every item of every task (knowledge.py), while "skill"
    demonstrations and queries use the split's items only.
    """
    mix = dict(DEFAULT_MIX if mix is None else mix)
    unknown = set(mix) - set(KINDS)
    if unknown or not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"mix must map kinds among {sorted(KINDS)} to non-negative weights, got {mix}")
    rng = random.Random(seed)
    tasks = load_skill_tasks(split, include_shuffled=False)
    facts = knowledge_items()
    kinds, weights = list(mix), list(mix.values())
    i = 0
    while True:
        kind = rng.choices(kinds, weights)[0]
        if kind == "skill":
            yield _skill_example(tasks, rng, max_shots)
            continue
        if kind == "knowledge":
            yield knowledge_passage(rng, facts)
            continue
        world = _mini_world(rng, split)
        target = world.entities[0]
        if kind == "retrieval":
            yield _from_sample(retrieval_sample(world, target, rng, f"train-{i}"))
        elif kind == "qa":
            yield _from_sample(qa_sample(world, target, rng, f"train-{i}"))
        else:
            yield {"kind": "passage", "contexts": [], "query": target.intro, "continuation": target.article[len(target.intro):]}
        i += 1


def render_parts(example: dict, order: Sequence[int] | None = None) -> tuple[str, str]:
    """(prefix, continuation) of an example: prefix = contexts (in `order`) + query.

    The loss is taken on the continuation only; the two strings concatenate to render_concat.
    """
    contexts = example["contexts"]
    if order is None:
        order = range(len(contexts))
    if sorted(order) != list(range(len(contexts))):
        raise ValueError(f"order must be a permutation of 0..{len(contexts) - 1}, got {list(order)}")
    head = "".join(contexts[i] + CONTEXT_SEP for i in order)
    return head + example["query"], example["continuation"]


def render_concat(example: dict, order: Sequence[int] | None = None) -> str:
    """Concatenation baseline text: contexts joined by "\\n\\n", then "\\n\\n" + query + continuation."""
    prefix, continuation = render_parts(example, order)
    return prefix + continuation

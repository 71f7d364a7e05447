"""The random ranker (PICASO sec. 6.1's retrieval ablation, our `random` retriever): a different
order for every query, the same order every time a query is asked again (a rerun of the sweep
retrieves the same chunks), and a different one under another seed."""

from __future__ import annotations

import itertools

from picaso_core.retrieval.rankers import RandomRanker, make_ranker

DB = {f"c{i:02d}": f"chunk number {i}" for i in range(40)}
QUERIES = [f"question {i}" for i in range(12)]


def test_random_order_differs_across_queries():
    rnd = RandomRanker(DB, seed=0)
    tops = [tuple(rnd.top(q, 10)) for q in QUERIES]
    orders = [tuple(rnd.among(q, list(DB))) for q in QUERIES]
    # 40! orders: two queries sharing one by chance is out of reach, so every pair must differ
    for a, b in itertools.combinations(range(len(QUERIES)), 2):
        assert tops[a] != tops[b], (QUERIES[a], QUERIES[b])
        assert orders[a] != orders[b], (QUERIES[a], QUERIES[b])
    # and the order is not the database's own (a ranker that never shuffles fails here)
    assert all(list(o) != list(DB) for o in orders)


def test_random_order_repeats_per_query():
    first, again = RandomRanker(DB, seed=0), RandomRanker(dict(DB), seed=0)
    for q in QUERIES:
        top = first.top(q, 10)
        assert top == first.top(q, 10) == again.top(q, 10)     # same instance, a fresh one: same chunks
        assert first.among(q, list(DB)) == again.among(q, list(DB))
        assert len(set(top)) == 10 and set(top) <= set(DB)
        assert "c00" not in first.top(q, 10, exclude=["c00"])
    assert make_ranker("random", DB).top(QUERIES[0], 10) == RandomRanker(DB, seed=0).top(QUERIES[0], 10)


def test_random_order_depends_on_the_seed():
    a, b = RandomRanker(DB, seed=0), RandomRanker(DB, seed=1)
    assert all(a.among(q, list(DB)) != b.among(q, list(DB)) for q in QUERIES)

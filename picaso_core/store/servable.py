"""Retrieval over a store that cannot serve every context: a read-only store (a shared disk, a
bucket) with a damaged shard, or one that lacks contexts of the corpus. Retrieval passes over the
contexts it cannot serve and takes the next-ranked ones, and says so in one line, instead of picking
them and failing the request (a writable store repairs and encodes on use, so it skips nothing).

What the store cannot serve is found cheaply: `StateStore.unservable` checks only the shards of the
hits in hand (each once per process, as their first read would) and knows the shards found damaged
so far; no request reads every shard.
"""

from __future__ import annotations

from typing import Callable

SHOWN_IDS = 5  # ids a note names before "…"
ROUNDS = 16  # rankings tried before the hits are taken as they are (each finds at least one new bad id)


class Noted(list):
    """A list (a tab's chosen contexts) with `note`: the line `skip_note` wrote for its retrieval
    ('' if nothing was skipped), for the run's summary."""

    note = ""


def servable_hits(store, rank: Callable[[tuple[str, ...]], list], rounds: int = ROUNDS) -> tuple[list, dict[str, str]]:
    """(hits, skipped): `rank(skip)` is a retrieval that leaves out the ids in `skip` and returns hits
    whose first item is a context id, best ranked as it orders them; those `store` cannot serve are
    left out and the ranking asked again, so the next-ranked contexts take their places. skipped:
    {id: "damaged" | "missing"} for the contexts passed over that the ranking had picked, the best
    ranked first (by a hit's second item, its score, where it has one). Every
    context of a shard known to be damaged is left out too (it is not named: it was not picked)."""
    skipped: dict[str, str] = {}
    score: dict[str, float] = {}
    hits = rank(())
    for _ in range(rounds):
        bad = store.unservable([h[0] for h in hits])
        if not bad:
            break
        skipped.update(bad)
        score.update((h[0], h[1]) for h in hits if h[0] in bad and len(h) > 1)
        hits = rank(tuple(sorted(set(skipped) | store.damaged_ids())))
    return hits, dict(sorted(skipped.items(), key=lambda kv: -score.get(kv[0], 0.0)))  # the best ranked first


def skip_note(skipped: dict[str, str]) -> str:
    """One line for a visitor: how many retrieved contexts were skipped, why, and their ids ('' if none)."""
    if not skipped:
        return ""

    def ids(which: list[str]) -> str:
        shown = ", ".join(which[:SHOWN_IDS]) + (" …" if len(which) > SHOWN_IDS else "")
        return f"id{'s' * (len(which) != 1)} {shown}"

    damaged = [c for c, why in skipped.items() if why == "damaged"]
    missing = [c for c, why in skipped.items() if why != "damaged"]
    one = len(skipped) == 1
    why = [f"{'its stored state is' if one else 'their stored states are'} damaged ({ids(damaged)})"] if damaged else []
    if missing:
        why.append(f"the read-only store does not hold {'it' if one else 'them'} ({ids(missing)})")
    return (f"{len(skipped)} retrieved context{'s' * (not one)} skipped: {' or '.join(why)}; the next-ranked "
            f"context{'s were' if not one else ' was'} used instead.")

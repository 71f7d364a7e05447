"""engine/rng.py: a seeded model build is deterministic while other threads draw and seed, and
invisible outside its block."""

from __future__ import annotations

import threading
import time

import torch

from picaso_core.engine.rng import seeded


def _expected(seed: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)  # a private generator: what the seed gives, untouched by threads
    return torch.randn(n, generator=g)


def test_a_block_draws_what_its_seed_gives_and_leaves_the_global_generator_as_it_was():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    with seeded(7):
        got = torch.randn(16)
    assert torch.equal(got, _expected(7, 16))
    assert torch.equal(torch.get_rng_state(), before)  # a draw after the block is the one it would have been
    assert torch.equal(torch.randn(4), _expected(123, 4))


def test_blocks_in_threads_do_not_interleave():
    """Each thread seeds, draws, yields the interpreter mid-block (sleep), draws again: without the
    lock another thread's seed lands between the two draws."""
    bad: list[str] = []

    def work(seed: int) -> None:
        want = _expected(seed, 64)
        for _ in range(15):
            with seeded(seed):
                a = torch.randn(32)
                time.sleep(0.001)
                b = torch.randn(32)
            if not torch.equal(torch.cat([a, b]), want):
                bad.append(f"seed {seed}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad


def test_blocks_nest():
    with seeded(1):
        x = torch.randn(3)
        with seeded(2):  # the same thread may open a block inside one (re-entrant lock)
            y = torch.randn(3)
        z = torch.randn(3)
    assert torch.equal(y, _expected(2, 3)) and torch.equal(torch.cat([x, z]), _expected(1, 6))

"""torch's global random generator in a threaded process.

`torch.nn` modules draw their initial weights from torch's one global CPU generator, so building a
model reproducibly means seeding it (`torch.manual_seed`). In the app, handlers run in worker threads
and the tour builds in the background: a seed set in one thread would reseed the generator under
every other thread's draws, and a draw in another thread between a seed and the build would change
the weights. `seeded` makes such a block deterministic and invisible outside it:

  * one process-wide lock: two seeded blocks never interleave;
  * the generator's state is saved on entry and restored on exit, so code outside (a user's own
    script, a later unseeded draw) sees the generator as if the block had not run.

Everything else in picaso_core that draws random numbers passes its own `torch.Generator`; only
module construction goes through the global one, and picaso_core does that inside `seeded`.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["seeded"]

_LOCK = threading.RLock()  # re-entrant: a seeded block may call code that opens its own


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's global CPU generator seeded with `seed`, holding a process-wide
    lock, and put the generator back as it was afterwards (see the module docstring). Build on the
    CPU inside it and move the model to its device after: CUDA generators are not forked."""
    with _LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield

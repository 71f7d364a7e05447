"""Per-token losses over a vocabulary, in the layout the kernels are fast in.

`F.cross_entropy(logits.transpose(1, 2), targets)` (the [b, V, t] "spatial" form) runs the softmax
over a strided vocabulary axis: on an H100 one such call over 71 positions of a 50k vocabulary took
26.8 ms of a 37 ms scoring forward at the 2.7b shape (bench/gpu_core.py's profile), and on 2 CPU
cores 3.8x the time of the same softmax over contiguous rows. Here every position is one row of
[b·t, V]: the same numbers, in one fast softmax per row.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def token_nll(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """NLL of each target under logits [b, t, V] (targets [b, t]; `ignore_index` positions give 0):
    [b, t], F.cross_entropy's numbers in its row layout."""
    b, t, V = logits.shape
    nll = F.cross_entropy(logits.reshape(b * t, V), targets.reshape(b * t), ignore_index=ignore_index,
                          reduction="none")
    return nll.view(b, t)

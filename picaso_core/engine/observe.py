"""What the engine shows the lab: named stages, recorded at the engine's own call sites.

The teaching views (picaso_core.lab: the Primer's layer captures, the block walk) read the numbers a
forward or a recurrent step really computed, not a re-implementation. The mixers pass each stage
through `stage(name, fn, *args)`, which calls `fn(*args)` and, while this thread records, hands
(name, args, out) to the recorder:

    with observe.recording(lambda name, args, out: seen.append((name, args, out))):
        model.hidden_states(ids)          # or model.step(token, state)

Stages, in the order a layer calls them (args and out are exactly the call's):
    "conv"      causal_conv(x [b, C, t], weight, bias, conv_state, lengths) -> (y [b, C, t], conv_state)
                (a chunk's forward; Mamba-1 and Mamba-2)
    "dt"        dt_softplus(dt_raw, dt_bias, dt_limit) -> dt           (Mamba-2's forward)
    "scan"      ssd_scan(x, dt, A, B, C, chunk_size, h0) / selective_scan(u, dt, A, B, C, h0)
                -> (y, h_last, log_decay)                          (the scan from the given state)
    "readout"   state_update(h, x, dt, A, B, C, D=D) -> y = C·h + D·x   (a recurrent step, h updated in place)
Nothing is recorded in other threads, and nothing at all when no recorder is set (one thread-local
read per call site). Which layer a stage belongs to: the lab's forward pre-hooks on the mixers (a
stage runs inside its mixer's forward or step), or the order of the calls (the layers run in order).
Under CUDA graph replay (engine/graphs.py, decode.py) no Python call site runs: record with autograd on.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

__all__ = ["STAGES", "stage", "recording", "is_recording"]

STAGES = ("conv", "dt", "scan", "readout")
Recorder = Callable[[str, tuple, Any], None]
_local = threading.local()


def stage(name: str, fn: Callable, *args, **kwargs):
    """fn(*args, **kwargs), shown to this thread's recorder (if any) as (name, args, out)."""
    out = fn(*args, **kwargs)
    rec = getattr(_local, "recorder", None)
    if rec is not None:
        rec(name, args, out)
    return out


def is_recording() -> bool:
    return getattr(_local, "recorder", None) is not None


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[None]:
    """Hand every stage this thread runs to `recorder(name, args, out)` until the block ends (nested:
    the inner recorder, then the outer one again)."""
    outer = getattr(_local, "recorder", None)
    _local.recorder = recorder
    try:
        yield
    finally:
        _local.recorder = outer

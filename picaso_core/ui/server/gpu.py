"""`gpu(duration=...)`: the model-bound handlers ask for a GPU only while they run (ZeroGPU).

On a Gradio-SDK Space with ZeroGPU hardware (docs/space.md), `spaces.GPU(duration=s)` lends the
process a GPU for at most `s` seconds per call: the handler runs in a forked worker, and what it
returns is pickled back to the server, so CUDA tensors must not cross (they hang the transfer; the
wrapper below moves any to the CPU). A shorter duration gets a visitor a better place in ZeroGPU's
queue, so each handler states what it needs, not the 60 s default. ZeroGPU does not support
torch.compile; nothing in picaso_core compiles (tests/space/test_space_prepare.py checks).

Where the `spaces` package is not installed (a laptop, the Docker image, the test suite), `gpu`
returns the handler itself: nothing changes. `spaces` is looked up when a handler is decorated
(inside each tab's `render`), not when this module is imported.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Callable

MAX_DURATION = 300  # seconds; beyond it a handler is too slow for a shared, quota-limited GPU


def zerogpu_module():
    """The `spaces` package, or None where it is not installed."""
    try:
        return importlib.import_module("spaces")
    except ModuleNotFoundError as e:
        if e.name != "spaces":  # `spaces` is there but broken: say so, do not serve without it
            raise
        return None


def on_zerogpu() -> bool:
    """True on a ZeroGPU Space (the `spaces` package and its SPACES_ZERO_GPU variable): there, the
    model's cuda device has no GPU outside a `gpu`-decorated handler, so work done at start-up (a
    warm-up, a precomputed default) must run on the CPU or be left to the first click."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "true", "yes") and zerogpu_module() is not None


def gpu(duration: int | Callable[..., int]) -> Callable[[Callable], Callable]:
    """Decorator: `spaces.GPU(duration=duration)` around the handler where `spaces` imports, the
    handler unchanged elsewhere.

    duration: seconds of GPU one call may hold, 1..MAX_DURATION, or a function of the handler's
    arguments that returns them (ZeroGPU's dynamic duration).
    """
    if not callable(duration) and not (isinstance(duration, int) and 0 < duration <= MAX_DURATION):
        raise ValueError(f"duration must be 1..{MAX_DURATION} seconds or a function of the handler's "
                         f"arguments, got {duration!r}")

    def decorate(fn: Callable) -> Callable:
        spaces = zerogpu_module()
        if spaces is None:
            return fn
        return spaces.GPU(duration=duration)(returns_cpu(fn))

    return decorate


def returns_cpu(fn: Callable) -> Callable:
    """`fn` whose return value (or every value it yields) has its tensors moved to the CPU, inside
    tuples, lists and dicts too. Keeps `fn`'s signature (gradio reads it for gr.Progress)."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            for out in fn(*args, **kwargs):
                yield to_cpu(out)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return to_cpu(fn(*args, **kwargs))
    return call


def to_cpu(value):
    """`value` with every torch tensor in it (nested in tuples, lists, dicts) on the CPU."""
    import torch  # not at the top: a ZeroGPU Space imports `spaces` before torch, and this module first

    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, tuple):
        return type(value)(*map(to_cpu, value)) if hasattr(value, "_fields") else tuple(map(to_cpu, value))
    if isinstance(value, list):
        return [to_cpu(v) for v in value]
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value

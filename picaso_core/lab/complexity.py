"""SSM primer, section 5: complexity measured on this machine. Attention vs SSM at one layer's width,
prefill over T tokens and one decode step after T tokens: seconds and peak bytes per T, and their
log-log slopes (the slides expect 2, 1, 1, 0). The SSM side runs the engine's own scan and step
(picaso_core.engine.scan); sections 1-4 of the primer are in picaso_core.lab.primer.
"""

from __future__ import annotations

import time
import weakref
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from picaso_core.light.deadline import check
from picaso_core.engine.scan import ssd_scan, state_update

DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096)  # the tab's "measure on this machine" (< 20 s on 2 cores)
SERIES = ("attention_prefill", "ssm_scan", "attention_step", "ssm_step")


# --------------------------------------------------------------------------------------------
# 5. Complexity, measured: attention vs SSM, prefill over T tokens and one decode step after T
# --------------------------------------------------------------------------------------------
class _PeakBytes(TorchDispatchMode):
    """Peak bytes of tensor storage allocated inside the block, for CPU, which has no allocator
    statistics (torch.cuda.max_memory_allocated is CUDA only; `_peak_bytes` uses it there): every
    op's output storage is counted when it appears and uncounted when Python frees it.
    Kernel-internal scratch that never becomes a tensor (a fused attention kernel's tiles) is not seen."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._seen: set[tuple] = set()

    def _free(self, key, n):
        self.live -= n
        self._seen.discard(key)

    @staticmethod
    def _key(t: Tensor) -> tuple:
        return str(t.device), t.untyped_storage().data_ptr()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # an output on an input's storage (in place: h.mul_, a KV-cache slice written; a view) is
        # no new memory: the input's bytes were there before the op
        held = {self._key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor):
                s = t.untyped_storage()
                key = self._key(t)
                if s.nbytes() and key not in self._seen and key not in held:
                    self._seen.add(key)
                    self.live += s.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(s, self._free, key, s.nbytes())
        return out


def _seconds(fn: Callable, device: torch.device, min_time: float, repeats: int = 5, budget: float = 1.0) -> float:
    """Best of up to `repeats` timings of fn (each a loop long enough to reach min_time), after one
    warm-up; stops after two once `budget` seconds are spent. The minimum is what survives other
    processes sharing the cores: contention only ever adds time."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def loop(n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return (time.perf_counter() - t0) / n

    start = time.perf_counter()
    one = loop(1)  # warm-up (lazy initialisation, caches)
    n = max(1, int(min_time / max(one, 1e-7)))
    best = [loop(n), loop(n)]
    while len(best) < repeats and time.perf_counter() - start < budget:
        best.append(loop(n))
    return min(best)


def _peak_bytes(fn: Callable, inputs: Sequence[Tensor], device: torch.device) -> int:
    """What the step holds: its inputs (activations, KV cache or state) plus the peak it allocates.
    On CUDA the caching allocator's own peak (torch.cuda.max_memory_allocated, reset first) above
    what was allocated before the call: it also sees a fused kernel's scratch buffers, which the
    dispatch-mode count used on CPU cannot."""
    size = sum(t.nbytes for t in inputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = fn()
        torch.cuda.synchronize(device)
        del out
        return size + torch.cuda.max_memory_allocated(device) - before
    with _PeakBytes() as m:
        out = fn()
    del out
    return size + m.peak


def loglog_slope(lengths: Sequence[int], values: Sequence[float]) -> float:
    """Least-squares slope of log(value) against log(T): 2 for T^2, 1 for T, 0 for a constant."""
    return float(np.polyfit(np.log(np.asarray(lengths, dtype=float)), np.log(np.asarray(values, dtype=float)), 1)[0])


def _check_lengths(lengths) -> list[int]:
    try:
        ls = [int(t) for t in lengths]
    except (TypeError, ValueError):
        raise ValueError(f"lengths must be a list of whole numbers, got {lengths!r}") from None
    if len(set(ls)) < 2 or min(ls) < 2 or any(float(a) != float(b) for a, b in zip(ls, lengths)):
        raise ValueError(f"lengths must be at least two different whole numbers >= 2 (a slope needs two), got {lengths!r}")
    return sorted(set(ls))


@torch.no_grad()
def measure_complexity(lengths: Sequence[int] = DEFAULT_LENGTHS, device="cpu", *, heads: int = 16, headdim: int = 32,
                       d_state: int = 64, chunk_size: int = 64, threads: int | None = None, min_time: float = 0.02,
                       progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Seconds and peak bytes, per T, of one layer's worth of
        attention_prefill  causal scaled_dot_product_attention over T tokens (H heads of P, float32)
        ssm_scan           the engine's SSD scan over T tokens (picaso_core.engine.scan.ssd_scan)
        attention_step     one new token attending to a KV cache of T tokens
        ssm_step           one recurrent step of the state after T tokens (the engine's
                           picaso_core.engine.scan.state_update, as Mamba2Mixer.step runs it)
    at the same width (H x P channels; defaults: the demo model), and the log-log slopes of seconds
    ("slopes") and of bytes ("memory_slopes"). The slides expect 2, 1, 1, 0.

    threads: torch's CPU threads for the measurement (None: as set). On cores shared with other
    processes, 1 thread measures the algorithm; 2 threads there stall on each other at every op."""
    lengths = _check_lengths(lengths)
    if threads is None:
        return _measure(lengths, torch.device(device), heads, headdim, d_state, chunk_size, min_time, progress)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {threads!r}")
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _measure(lengths, torch.device(device), heads, headdim, d_state, chunk_size, min_time, progress)
    finally:
        torch.set_num_threads(saved)


def _measure(lengths, device, H, P, N, chunk_size, min_time, progress) -> dict:
    g = torch.Generator(device).manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g, device=device)  # noqa: E731
    seconds = {k: [] for k in SERIES}
    peak = {k: [] for k in SERIES}
    A = -torch.exp(rnd(H))  # (H,) < 0
    for i, T in enumerate(lengths):
        q, k, v = rnd(1, H, T, P), rnd(1, H, T, P), rnd(1, H, T, P)
        x, dt = rnd(1, T, H, P), F.softplus(rnd(1, T, H) - 3)
        B, C = rnd(1, T, 1, N), rnd(1, T, 1, N)
        cache_k, cache_v = rnd(1, H, T + 1, P), rnd(1, H, T + 1, P)  # T cached tokens + the new one
        q1, k1, v1 = rnd(1, H, 1, P), rnd(1, H, 1, P), rnd(1, H, 1, P)
        # Mamba2Mixer.step's shapes (b = 1, one group): h [1, H, P, N] updated in place, x [1, H, P], dt [1, H], B, C [1, 1, N]
        h, x1, dt1, B1, C1 = rnd(1, H, P, N), rnd(1, H, P), F.softplus(rnd(1, H) - 3), rnd(1, 1, N), rnd(1, 1, N)

        def attention_step():
            cache_k[:, :, T:] = k1  # write the new token's key and value, then attend over all T + 1
            cache_v[:, :, T:] = v1
            return F.scaled_dot_product_attention(q1, cache_k, cache_v)

        cases = {
            "attention_prefill": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v)),
            "ssm_scan": (lambda: ssd_scan(x, dt, A, B, C, chunk_size)[0], (x, dt, A, B, C)),
            "attention_step": (attention_step, (cache_k, cache_v, q1, k1, v1)),
            "ssm_step": (lambda: state_update(h, x1, dt1, A, B1, C1), (h, x1, dt1, A, B1, C1)),
        }
        for j, (name, (fn, inputs)) in enumerate(cases.items()):
            check()  # a served measurement past its time limit stops between cases (picaso_core.light.deadline)
            if progress is not None:
                progress(i * len(SERIES) + j, len(lengths) * len(SERIES), f"T = {T}: {name.replace('_', ' ')}")
            seconds[name].append(_seconds(fn, device, min_time))
            peak[name].append(_peak_bytes(fn, inputs, device))
    if progress is not None:
        progress(len(lengths) * len(SERIES), len(lengths) * len(SERIES), "done")
    return {"lengths": lengths, "seconds": seconds, "peak_bytes": peak,
            "slopes": {k: loglog_slope(lengths, seconds[k]) for k in SERIES},
            "memory_slopes": {k: loglog_slope(lengths, peak[k]) for k in SERIES},
            "device": str(device), "threads": torch.get_num_threads(),
            "width": {"heads": H, "headdim": P, "d_state": N, "chunk_size": chunk_size}}

"""SSM primer: the lecture's points (seed 004, "Structured State-Space Models as Efficient LLM
Architectures") as pure functions that return data a student can check, on toy systems and on the
loaded model through the project's own engine.

Glossary (the slides' symbols):
    T  sequence length     N  state size      H  heads      P  head dim      b  batch
    A (N, N) or (N,) (a diagonal A: its eigenvalues λ), real or complex; B (N,); C (N,)
    h_t = A h_{t-1} + B x_t,  y_t = Re(C h_t),  h_{-1} = 0          (slide "State-Space Model")
    K_i = C A^i B,  y_t = Σ_{i=0..t} K_i x_{t-i}                     ("Recurrence = Convolution")
    Δ_t (dt) the step of a selective SSM: decay exp(Δ_t A), input Δ_t B x_t      ("Mamba")
    M_ij = C_i·B_j Δ_j exp(A (Δ_{j+1} + ... + Δ_i)), i >= j: y = M x   ("Mamba2", SSD paper eq. 6)

Sections: 1. LTI SSM (kernel, recurrence, direct and FFT convolution)  2. eigenvalues and memory
(toy and the loaded model's decays)  3. static vs selective Δ  4. the semiseparable matrix M of one
layer and head  5. complexity measured (attention vs SSM, prefill and one decode step).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import weakref
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from picaso_core.engine.scan import ssd_scan, state_update

DEFAULT_TOL = 0.01  # "memory" = steps until an input's weight falls below 1% of what it was
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096)  # the tab's "measure on this machine" (< 20 s on 2 cores)
SERIES = ("attention_prefill", "ssm_scan", "attention_step", "ssm_step")


# --------------------------------------------------------------------------------------------
# 1. LTI SSM: recurrence = convolution
# --------------------------------------------------------------------------------------------
def _tensor(v, name: str) -> Tensor:
    t = torch.as_tensor(v)
    if not (t.is_floating_point() or t.is_complex()):
        t = t.to(torch.get_default_dtype())
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} has NaN or infinite entries")
    return t


def spectral_radius(A) -> float:
    """max |λ| over the eigenvalues of A ((N, N), or (N,) for a diagonal A)."""
    A = torch.as_tensor(A)
    lam = A if A.dim() == 1 else torch.linalg.eigvals(A.to(torch.complex128))
    return float(lam.abs().max()) if lam.numel() else 0.0


def _system(A, B, C, x=None) -> tuple[Tensor, Tensor, Tensor, Tensor | None, torch.dtype, bool]:
    """Check shapes and stability; return A, B, C (and x as (b, T)) in one compute dtype, the
    output dtype (x's real dtype) and whether A is diagonal."""
    A, B, C = _tensor(A, "A"), _tensor(B, "B"), _tensor(C, "C")
    if A.dim() not in (1, 2) or (A.dim() == 2 and A.shape[0] != A.shape[1]) or A.shape[0] == 0:
        raise ValueError(f"A must have shape (N, N), or (N,) for a diagonal A; got {tuple(A.shape)}")
    N = A.shape[0]
    if B.shape != (N,) or C.shape != (N,):
        raise ValueError(f"B and C must have shape ({N},) to match A {tuple(A.shape)}; "
                         f"got B {tuple(B.shape)} and C {tuple(C.shape)}")
    rho = spectral_radius(A)
    if rho >= 1:
        raise ValueError(f"A is not stable: its largest |eigenvalue| is {rho:.4g} >= 1, so K_i = C A^i B "
                         "never decays; scale A so every |λ| < 1")
    parts = [A, B, C]
    if x is not None:
        x = _tensor(x, "x")
        if x.dim() not in (1, 2) or x.shape[-1] == 0:
            raise ValueError(f"x must have shape (T,) or (batch, T) with T >= 1; got {tuple(x.shape)}")
        parts.append(x)
    wide = any(p.dtype in (torch.float64, torch.complex128) for p in parts)
    cplx = any(p.is_complex() for p in parts)
    dtype = (torch.complex128 if wide else torch.complex64) if cplx else (torch.float64 if wide else torch.float32)
    out_dtype = (x.real if x is not None and x.is_complex() else x).dtype if x is not None else dtype
    A, B, C = A.to(dtype), B.to(dtype), C.to(dtype)
    if x is not None:
        x = x.to(dtype).reshape(-1, x.shape[-1])
    return A, B, C, x, out_dtype, A.dim() == 1


def _check_T(T) -> int:
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T <= 0:
        raise ValueError(f"T must be a whole number >= 1, got {T!r}")
    return int(T)


def _kernel(A: Tensor, B: Tensor, C: Tensor, T: int, diag: bool) -> Tensor:
    # V[i] = A^i B by doubling: rows [k, 2k) are A^k applied to rows [0, k); log2(T) products
    V, P = B[None], A
    while V.shape[0] < T:
        V = torch.cat([V, V * P if diag else V @ P.T])
        P = P * P if diag else P @ P
    return V[:T] @ C


def lti_kernel(A, B, C, T: int) -> Tensor:
    """K_i = C A^i B for i = 0..T-1: (T,), complex when A, B or C is."""
    A, B, C, _, _, diag = _system(A, B, C)
    return _kernel(A, B, C, _check_T(T), diag)


def lti_recurrence(A, B, C, x) -> Tensor:
    """y_t = Re(C h_t), h_t = A h_{t-1} + B x_t from h_{-1} = 0, one step at a time. x (T,) or
    (b, T); y has x's shape and x's real dtype."""
    shape = torch.as_tensor(x).shape
    A, B, C, x, out, diag = _system(A, B, C, x)
    h = x.new_zeros(x.shape[0], A.shape[0])  # (b, N)
    ys = []
    for t in range(x.shape[1]):
        h = (h * A if diag else h @ A.T) + x[:, t, None] * B
        ys.append(h @ C)
    return torch.stack(ys, -1).real.to(out).reshape(shape)


def lti_convolution(A, B, C, x) -> Tensor:
    """The same y as a direct causal convolution with K: y = x @ Toeplitz(K)^T, O(T^2)."""
    shape = torch.as_tensor(x).shape
    A, B, C, x, out, diag = _system(A, B, C, x)
    T = x.shape[1]
    K = _kernel(A, B, C, T, diag)
    lag = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # (t, s) -> t - s
    toeplitz = torch.where(lag >= 0, K[lag.clamp(min=0)], torch.zeros((), dtype=K.dtype))  # (T, T)
    return (x @ toeplitz.T).real.to(out).reshape(shape)


def lti_convolution_fft(A, B, C, x) -> Tensor:
    """The same y through the FFT, O(T log T): zero-padded to >= 2T - 1 so the circular
    convolution equals the causal one."""
    shape = torch.as_tensor(x).shape
    A, B, C, x, out, diag = _system(A, B, C, x)
    T = x.shape[1]
    K = _kernel(A, B, C, T, diag)
    n = 1 << (2 * T - 1).bit_length()
    if K.is_complex():
        y = torch.fft.ifft(torch.fft.fft(K, n) * torch.fft.fft(x, n), n)[:, :T]
    else:
        y = torch.fft.irfft(torch.fft.rfft(K, n) * torch.fft.rfft(x, n), n)[:, :T]
    return y.real.to(out).reshape(shape)


def relative_error(y, ref) -> float:
    """||y - ref|| / ||ref|| (0 when both are 0)."""
    y, ref = torch.as_tensor(y, dtype=torch.float64), torch.as_tensor(ref, dtype=torch.float64)
    d, r = float((y - ref).norm()), float(ref.norm())
    return d / r if r else d


def demo_system(magnitude: float, phase: float, N: int, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """The tab's system: a complex diagonal A with N eigenvalues of angle ±phase and magnitudes
    spread from `magnitude` down to magnitude^4 (a few memory lengths at once), random B, C."""
    if not 0 <= magnitude < 1:
        raise ValueError(f"magnitude must be in [0, 1) for a stable system, got {magnitude}")
    if N < 1:
        raise ValueError(f"N must be >= 1, got {N}")
    g = torch.Generator().manual_seed(seed)
    k = torch.arange(N, dtype=torch.float64)
    mags = magnitude ** (1 + 3 * k / max(N - 1, 1))
    sign = 1.0 - 2.0 * (k % 2)  # conjugate pairs: the impulse response is real
    A = torch.polar(mags, sign * phase)
    B = torch.complex(torch.randn(N, generator=g, dtype=torch.float64), torch.zeros(N, dtype=torch.float64))
    C = torch.complex(torch.randn(N, generator=g, dtype=torch.float64), torch.randn(N, generator=g, dtype=torch.float64))
    return A, B, C


# --------------------------------------------------------------------------------------------
# 2. Eigenvalues and memory
# --------------------------------------------------------------------------------------------
def _steps_below(log_mag: np.ndarray, tol: float) -> np.ndarray:
    """Smallest t >= 0 with exp(t log|λ|) < tol, for log|λ| < 0 (inf where log|λ| == 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # λ = 0: log|λ| = -inf, gone after 1 step
        t = np.floor(np.log(tol) / log_mag) + 1
        t = np.where(np.isfinite(t), t, np.where(log_mag == 0, np.inf, 1.0))
        fin = np.isfinite(t) & np.isfinite(log_mag)
        # one-step corrections where log(tol) / log|λ| lands within rounding of an integer
        t = np.where(fin & (np.exp(t * log_mag) >= tol), t + 1, t)
        t = np.where(fin & (t > 0) & (np.exp((t - 1) * log_mag) < tol), t - 1, t)
    return t


def _check_tol(tol) -> float:
    if not isinstance(tol, (int, float)) or not 0 < tol < 1:
        raise ValueError(f"tol must be a number in (0, 1), got {tol!r}")
    return float(tol)


def memory_length(lam, tol: float = DEFAULT_TOL):
    """Steps until |λ|^t < tol: how long an input stays visible in a mode of eigenvalue λ (real or
    complex). A scalar gives an int, an array or tensor an int64 array of its shape."""
    tol = _check_tol(tol)
    mag = np.abs(np.asarray(lam.detach().cpu() if isinstance(lam, Tensor) else lam, dtype=np.complex128))
    if not np.isfinite(mag).all() or (mag >= 1).any():
        raise ValueError(f"memory_length needs |λ| < 1 (a decaying mode); got |λ| up to {float(mag.max()):.4g}")
    with np.errstate(divide="ignore"):
        t = _steps_below(np.log(mag), tol).astype(np.int64)
    return int(t) if t.ndim == 0 else t


def impulse_responses(lams: Sequence, T: int) -> dict:
    """Re(λ^t) and |λ|^t for t < T for a few eigenvalues (the kernel of h_t = λ h_{t-1} + x_t)."""
    T = _check_T(T)
    out = []
    for lam in lams:
        K = lti_kernel(torch.tensor([complex(lam)], dtype=torch.complex128), torch.ones(1), torch.ones(1), T)
        out.append({"lambda": [complex(lam).real, complex(lam).imag], "real": K.real.tolist(),
                    "envelope": K.abs().tolist()})
    return {"t": list(range(T)), "responses": out}


_capture_lock = threading.Lock()


@contextlib.contextmanager
def _recorded_scans():
    """Record every scan the engine runs in this thread: (args, outputs) in call order.

    The scan inputs (x, Δ, A, B, C after projection and conv) live inside the mixer's forward; reading
    them at the call site means the lab sees exactly what the engine computes, with no copy of the
    mixer's code that could drift. Other threads' calls pass through unrecorded."""
    import picaso_core.engine.model as engine

    calls, me = [], threading.get_ident()

    def recording(fn):
        def scan(*args, **kwargs):
            out = fn(*args, **kwargs)
            if threading.get_ident() == me:
                calls.append((args, out))
            return out
        return scan

    with _capture_lock:
        saved = engine.ssd_scan, engine.selective_scan
        engine.ssd_scan, engine.selective_scan = recording(saved[0]), recording(saved[1])
        try:
            yield calls
        finally:
            engine.ssd_scan, engine.selective_scan = saved


@torch.no_grad()
def capture_layers(model, ids: Sequence[int]) -> list[dict]:
    """Per layer, the scan's inputs and output when the model reads `ids` from the empty state, in
    one per-head form for both families (Mamba-1: a head is a channel, P = 1):
        x (T, H, P), dt (T, H), A (H, N), B, C (T, H, N), y (T, H, P) = the scan output (no D skip)."""
    ids = torch.as_tensor(list(ids), dtype=torch.long)
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError("give at least one token")
    with _recorded_scans() as calls:
        model.hidden_states(ids[None])
    layers = []
    for args, out in calls:
        x, dt, A, B, C = (t.detach().float().cpu() for t in args[:5])
        y = out[0].detach().float().cpu()
        if model.config.family == "Mamba2":  # x [1,T,H,P], dt [1,T,H], A [H], B, C [1,T,G,N]
            H, r = x.shape[2], x.shape[2] // B.shape[2]
            layers.append({"x": x[0], "dt": dt[0], "A": A[:, None].expand(H, B.shape[-1]),
                           "B": B[0].repeat_interleave(r, 1), "C": C[0].repeat_interleave(r, 1), "y": y[0]})
        else:  # u, delta [1,E,T], A [E,N], B, C [1,N,T], y [1,E,T]
            E = x.shape[1]
            layers.append({"x": x[0].T[..., None], "dt": dt[0].T, "A": A,
                           "B": B[0].T[:, None].expand(-1, E, -1), "C": C[0].T[:, None].expand(-1, E, -1),
                           "y": y[0].T[..., None]})
    return layers


def decay_profile(model, ids: Sequence[int], tol: float = DEFAULT_TOL) -> dict:
    """The loaded model's Δ and decays on a text, per layer: Δ_t and the decay exp(Δ_t A) of each
    head's slowest mode per token (T, H), and each head's memory in tokens at the text's mean
    log-decay (None where a head does not decay at all: JSON has no infinity)."""
    tol = _check_tol(tol)
    layers = []
    for i, L in enumerate(capture_layers(model, ids)):
        a = L["A"].max(-1).values.double()  # (H,) the slowest mode (A < 0)
        log_decay = L["dt"].double() * a  # (T, H)
        memory = _steps_below(log_decay.mean(0).numpy(), tol)
        layers.append({"layer": i, "dt": L["dt"].tolist(), "decay": log_decay.exp().tolist(),
                       "mean_decay": log_decay.mean(0).exp().tolist(),
                       "memory": [float(m) if math.isfinite(m) else None for m in memory]})
    return {"tol": tol, "n_tokens": len(ids), "layers": layers}


# --------------------------------------------------------------------------------------------
# 3. Static vs selective
# --------------------------------------------------------------------------------------------
def toy_sequence(T: int = 64, seed: int = 0) -> Tensor:
    """Small noise with a few large 'content' tokens: what a selective SSM should let in and keep."""
    T = _check_T(T)
    g = torch.Generator().manual_seed(seed)
    x = 0.15 * torch.randn(T, generator=g, dtype=torch.float64)
    spikes = torch.linspace(T // 8, T - T // 4, 3).long().clamp(max=T - 1)
    x[spikes] = torch.tensor([1.0, -0.8, 0.6], dtype=torch.float64)
    return x


def toy_selective(x, selectivity: float, dt_rest: float = 0.1, A: float = -1.0) -> dict:
    """One scalar SSM read two ways: static Δ_t = dt_rest for every token, and selective
    Δ_t = dt_rest · exp(selectivity · z_t), z_t the token's standardised |x_t| (clipped to ±3).
    Zero-order hold as in Mamba (eq. 4): h_t = a_t h_{t-1} + (1 - a_t) x_t with a_t = exp(Δ_t A),
    so a_t is what the token keeps of the past and 1 - a_t how much of it is let in."""
    x = _tensor(x, "x").double()
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"x must have shape (T,) with T >= 1, got {tuple(x.shape)}")
    if not (dt_rest > 0 and A < 0 and math.isfinite(selectivity)):
        raise ValueError("need dt_rest > 0, A < 0 and a finite selectivity")
    mag = x.abs()
    z = ((mag - mag.mean()) / mag.std()).clamp(-3, 3) if x.numel() > 1 and mag.std() > 0 else torch.zeros_like(x)
    out = {"x": x.tolist()}
    for name, dt in (("static", torch.full_like(x, dt_rest)), ("selective", dt_rest * torch.exp(selectivity * z))):
        a = torch.exp(dt * A)
        h, ys = 0.0, []
        for t in range(x.numel()):
            h = float(a[t]) * h + float(1 - a[t]) * float(x[t])
            ys.append(h)
        out[name] = {"dt": dt.tolist(), "keep": a.tolist(), "let_in": (1 - a).tolist(), "y": ys}
    return out


# --------------------------------------------------------------------------------------------
# 4. Mamba-2's attention view: the semiseparable matrix of one layer and head
# --------------------------------------------------------------------------------------------
def semiseparable(model, ids: Sequence[int], layer: int, head: int) -> dict:
    """M (T x T) of one layer and head, M_ij = Σ_n C_in B_jn Δ_j exp(A_n (cum_i - cum_j)) for
    i >= j (cum = cumsum Δ), and the decay mask L_ij = exp(A (cum_i - cum_j)) of the slowest mode
    (Mamba-2: the one A of the head). Checks M x against the engine's scan output for that head."""
    n_layer = model.config.n_layer
    if not 0 <= layer < n_layer:
        raise ValueError(f"layer must be from 0 to {n_layer - 1}, got {layer}")
    L = capture_layers(model, ids)[layer]
    H = L["dt"].shape[1]
    if not 0 <= head < H:
        raise ValueError(f"head must be from 0 to {H - 1}, got {head}")
    dt, A = L["dt"][:, head].double(), L["A"][head].double()  # (T,), (N,)
    B, C = L["B"][:, head].double(), L["C"][:, head].double()  # (T, N)
    cum = dt.cumsum(0)
    seg = cum[:, None] - cum[None, :]  # (T, T) Δ_{j+1} + ... + Δ_i
    causal = torch.ones_like(seg, dtype=torch.bool).tril()
    M = torch.zeros_like(seg)
    for a in A.unique():  # Mamba-2: one term; Mamba-1: one per distinct state decay
        sel = A == a
        M += (C[:, sel] @ B[:, sel].T) * torch.exp(torch.where(causal, a * seg, -math.inf))
    M = M * dt[None, :]
    mask = torch.exp(torch.where(causal, A.max() * seg, -math.inf))
    x, y_scan = L["x"][:, head].double(), L["y"][:, head].double()  # (T, P)
    y_M = M @ x
    diff = float((y_M - y_scan).abs().max())
    return {"layer": layer, "head": head, "M": M.tolist(), "L": mask.tolist(), "y_scan": y_scan.tolist(),
            "y_M": y_M.tolist(), "max_abs_diff": diff, "relative_error": relative_error(y_M, y_scan),
            "A": float(A.max()), "dt": dt.tolist()}


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

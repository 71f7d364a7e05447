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
layer and head. Section 5, complexity measured (attention vs SSM, prefill and one decode step), is
picaso_core.lab.complexity.
"""

from __future__ import annotations

import contextlib
import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from picaso_core.engine import observe
from picaso_core.engine.layout import layout_of

DEFAULT_TOL = 0.01  # "memory" = steps until an input's weight falls below 1% of what it was


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


@contextlib.contextmanager
def _recorded_scans():
    """Record every scan the engine runs in this thread: (args, outputs) in call order.

    The scan inputs (x, Δ, A, B, C after projection and conv) live inside the mixer's forward; the
    engine shows them at its call site (engine/observe.py, stage "scan"), so the lab sees exactly what
    the engine computes, with no copy of the mixer's code that could drift. Other threads' calls pass
    through unrecorded."""
    calls = []
    with observe.recording(lambda name, args, out: calls.append((args, out)) if name == "scan" else None):
        yield calls


@torch.no_grad()
def capture_layers(model, ids: Sequence[int]) -> list[dict]:
    """Per layer, the scan's inputs and output when the model reads `ids` from the empty state, in
    one per-head form for both families (Mamba-1: a head is a channel, P = 1):
        x (T, H, P), dt (T, H), A (H, N), B, C (T, H, N), y (T, H, P) = the scan output (no D skip).
    A hybrid's Mamba layers only (Mamba2Mixers: its attention layers run no scan), so index i is its
    i-th Mamba layer (`mamba_layers` maps it to the checkpoint's layer)."""
    ids = torch.as_tensor(list(ids), dtype=torch.long)
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError("give at least one token")
    with _recorded_scans() as calls:
        model.hidden_states(ids[None])
    layers = []
    for args, out in calls:
        x, dt, A, B, C = (t.detach().float().cpu() for t in args[:5])
        y = out[0].detach().float().cpu()
        if model.layout.ssm_kind == "mamba2":  # x [1,T,H,P], dt [1,T,H], A [H], B, C [1,T,G,N]
            H, r = x.shape[2], x.shape[2] // B.shape[2]
            layers.append({"x": x[0], "dt": dt[0], "A": A[:, None].expand(H, B.shape[-1]),
                           "B": B[0].repeat_interleave(r, 1), "C": C[0].repeat_interleave(r, 1), "y": y[0]})
        else:  # u, delta [1,E,T], A [E,N], B, C [1,N,T], y [1,E,T]
            E = x.shape[1]
            layers.append({"x": x[0].T[..., None], "dt": dt[0].T, "A": A,
                           "B": B[0].T[:, None].expand(-1, E, -1), "C": C[0].T[:, None].expand(-1, E, -1),
                           "y": y[0].T[..., None]})
    return layers


def mamba_layers(config) -> list[int]:
    """The checkpoint's layer number of each scan layer capture_layers returns: every layer of a pure
    SSM, the Mamba layers of a hybrid (its layout's ssm_layers)."""
    return list(layout_of(config).ssm_layers)


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
    n_layer = len(mamba_layers(model.config))  # a hybrid: its Mamba layers, numbered 0..n-1
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

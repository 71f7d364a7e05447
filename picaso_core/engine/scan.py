"""Selective scans in pure torch, with an initial state in and the final state + log-decay out.

Glossary (Mamba-2 paper "Transformers are SSMs", PICASO eq. 1-2):
    b  batch          l  sequence length     h  heads (Mamba-1: channels d)
    p  head dim P     n  state dim N         g  groups sharing B, C
    s  chunk length   c  number of chunks
    dt   Δ_t > 0, the step size (already softplus'ed and masked: dt = 0 means "skip this step")
    A    the diagonal continuous-time decay, negative; the discrete decay of a step is exp(dt·A)
    x_t  the input; the state recurrence is  h_t = exp(dt_t·A) h_{t-1} + dt_t B_t x_t,  y_t = C_t h_t
    log_decay = Σ_t dt_t·A = log A(u), the accumulated decay of PICASO eq. 2 (kept in log space:
                exp of it underflows after a few hundred tokens, composition needs it exactly).

Every fast path has a reference twin here that the tests compare against:
    ssd_scan (chunked, Mamba-2)         <-> ssd_scan_ref (one step at a time)
    selective_scan (prefix scan, Mamba-1) <-> selective_scan_ref (one step at a time)
On CUDA with mamba_ssm installed, `ssd_scan` calls mamba_chunk_scan_combined instead, and the
conv and the one-token update call theirs (engine/kernels.py says which, and switches them off).

All scans run in float32 (decay products of hundreds of steps need the mantissa), or float64 when
given float64 (gradcheck); the caller casts outputs back to the model dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from picaso_core.engine import kernels


def upcast(*ts: Tensor) -> tuple[Tensor, ...]:
    """Cast to the accumulation dtype: float32, or float64 when the inputs are (gradcheck)."""
    dtype = torch.float64 if ts[0].dtype == torch.float64 else torch.float32
    return tuple(t.to(dtype) for t in ts)


# --------------------------------------------------------------------------------------------
# Mamba-2: chunked SSD scan
# --------------------------------------------------------------------------------------------
def _pass_states(chunk_states: Tensor, log_decay: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    """The inter-chunk recurrence h_k = exp(log_decay_k) h_{k-1} + chunk_states_k, h_{-1} = h0.

    chunk_states [b, c, *S, p, n], log_decay [b, c, *S], h0 [b, *S, p, n]. Returns the state
    entering each chunk [b, c, *S, p, n] (h0, h_0, ..., h_{c-2}) and the final state h_{c-1}.
    Two forms of the same recurrence, picked per device by `PASS_FORM`:
      "sequential"  one chunk at a time, as mamba_ssm's state-passing kernel does: O(c) work and
                    memory, c small ops (the CPU's form: fastest at every length measured there);
      "segsum"      ssd_minimal.py's form: the decay between every two chunks as a [c+1, c+1]
                    matrix, then one batched matmul: O(c^2) work in one launch (CUDA's form:
                    there the sequential loop is launch-bound, 3.3x slower at 64 chunks on an H100).
    bench/scan_scaling.py measures both, and a log-depth prefix scan, on either device. Past
    `SEGSUM_MAX_CHUNKS` chunks the segsum form falls back to the sequential one: its matrix and
    work grow as c^2 (measured faster up to 512 chunks on the H100, the longest tried)."""
    if (PASS_FORM.get(chunk_states.device.type, "sequential") == "segsum"
            and chunk_states.size(1) <= SEGSUM_MAX_CHUNKS):
        return _pass_states_segsum(chunk_states, log_decay, h0)
    return _pass_states_sequential(chunk_states, log_decay, h0)


def _pass_states_sequential(chunk_states: Tensor, log_decay: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    """`_pass_states` one chunk at a time (see there); same arguments and returns."""
    decay = torch.exp(log_decay)[..., None, None]
    h, entering = h0, []
    for k in range(chunk_states.size(1)):
        entering.append(h)
        h = torch.addcmul(chunk_states[:, k], decay[:, k], h)
    return torch.stack(entering, dim=1), h


def _segsum(a: Tensor) -> Tensor:
    """a [..., c] -> [..., c, c], out[i, j] = a[j+1] + ... + a[i] for i >= j, -inf above the diagonal
    (sums of the terms themselves, not differences of a cumulative sum: stable for any decay)."""
    c = a.size(-1)
    tri = torch.ones(c, c, dtype=torch.bool, device=a.device)
    a = a[..., None].expand(*a.shape, c).masked_fill(~tri.tril(-1), 0.0)
    return a.cumsum(-2).masked_fill(~tri.tril(0), float("-inf"))


def _pass_states_segsum(chunk_states: Tensor, log_decay: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    """`_pass_states` in ssd_minimal.py's segsum form (see there); same arguments and returns."""
    states = torch.cat([h0[:, None], chunk_states], dim=1)  # [b, c+1, *S, p, n]
    la = F.pad(log_decay.movedim(1, -1), (1, 0))  # [b, *S, c+1]
    decay = torch.exp(_segsum(la))  # [b, *S, c+1, c+1]: decay[..., z, k] = exp(la_{k+1} + ... + la_z)
    states = torch.einsum("b...zk,bk...pn->bz...pn", decay, states)
    return states[:, :-1], states[:, -1]


# The inter-chunk pass's form per device type (see `_pass_states`); others use "sequential".
PASS_FORM = {"cpu": "sequential", "cuda": "segsum"}
SEGSUM_MAX_CHUNKS = 512  # 131k tokens at chunk 256: the segsum form's [c+1, c+1] matrix stays small


# Elements of the largest intermediate ([b, chunks, h, s, s], the masked C B^T) per block of chunks:
# the scan runs over blocks of chunks so that its working set stays this size whatever the length.
# CPU: 16 MiB in float32 (2^19..2^23 time alike, 2^24 and up lose; in one piece 16k tokens cost 2-3x
# what blocks do: bench/scan_scaling.py). CUDA (the pure-torch fallback): 2 GiB.
BLOCK_ELEMENTS = {"cpu": 1 << 22, "cuda": 1 << 29}


def ssd_scan_chunked(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
                     initial_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Chunked SSD scan (Mamba-2 paper, listing 1), pure torch, differentiable.

    Args:
        x: [b, l, h, p]; dt: [b, l, h] (>= 0, softplus'ed); A: [h] (< 0);
        B, C: [b, l, g, n]; chunk_size: s, the longest chunk; initial_state: [b, h, p, n] or None
        (zeros).
        The sequence is split into ceil(l / s) chunks of equal length (the last one padded by less
        than one token per chunk), not into chunks of exactly s with up to s - 1 padded (the
        kernel's layout): the chunking only changes how the same recurrence is computed, and a
        71-token query + continuation becomes 2 x 36 positions instead of 2 x 64.
        Long sequences run in blocks of chunks (`BLOCK_ELEMENTS`), the state carried from one
        block to the next: the same arithmetic, in a working set that does not grow with l.
    Returns:
        y [b, l, h, p], final_state [b, h, p, n], log_decay [b, h]   (float32, or float64)
    """
    b, l, h, p = x.shape
    n = B.shape[-1]
    x, dt, A, B, C = upcast(x, dt, A, B, C)
    s = max(1, min(chunk_size, l))
    s = -(-l // -(-l // s))  # even chunks: ceil(l / ceil(l / s))
    pad = (-l) % s
    if pad:  # dt = 0 on the padding: decay 1, nothing written, outputs dropped below
        x, B, C = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (x, B, C))
        dt = F.pad(dt, (0, 0, 0, pad))
    state = x.new_zeros(b, h, p, n) if initial_state is None else initial_state.to(x.dtype)
    per_chunk = b * h * s * s
    block = s * max(1, BLOCK_ELEMENTS.get(x.device.type, BLOCK_ELEMENTS["cuda"]) // per_chunk)
    ys, log_decay = [], 0
    for t0 in range(0, l + pad, block):
        sl = slice(t0, t0 + block)
        y, state, ld = _ssd_chunks(x[:, sl], dt[:, sl], A, B[:, sl], C[:, sl], s, state)
        ys.append(y)
        log_decay = log_decay + ld
    y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=1)
    return y[:, :l], state, log_decay


def _ssd_chunks(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, s: int,
                h0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`ssd_scan_chunked` on a whole number of chunks of length s from the state h0 [b, h, p, n].
    Returns y [b, l, h, p], the final state and Σ_t dt_t A [b, h]."""
    b, l, h, p = x.shape
    g, n = B.shape[-2:]
    r = h // g  # heads per group: C B^T is computed once per group, not per head
    c = l // s
    xdt = (x * dt[..., None]).view(b, c, s, g, r, p)  # the input term dt_t x_t
    B, C = B.view(b, c, s, g, n), C.view(b, c, s, g, n)
    a = (dt * A).view(b, c, s, g, r).permute(0, 1, 3, 4, 2)  # [b, c, g, r, s] per-step log-decay
    a_cum = a.cumsum(-1)  # [b, c, g, r, s]

    # 1. within each chunk: the quadratic ("attention-like") form, y = (C B^T ∘ L) (dt x), with
    #    L[i, j] = exp(a_cum_i - a_cum_j) for i >= j. Differences of partial sums over one chunk
    #    lose nothing that matters in float32; the -inf mask goes in before the exp.
    causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
    Lmask = torch.exp((a_cum[..., :, None] - a_cum[..., None, :]).masked_fill(~causal, float("-inf")))
    CB = torch.einsum("bclgn,bcsgn->bcgls", C, B)  # [b, c, g, s, s]
    y_diag = torch.einsum("bcgrls,bcsgrp->bclgrp", CB[:, :, :, None] * Lmask, xdt)

    # 2. the state each chunk produces on its own (from a zero start)
    decay_to_end = torch.exp(a_cum[..., -1:] - a_cum)  # [b, c, g, r, s]
    chunk_states = torch.einsum("bcsgn,bcgrs,bcsgrp->bcgrpn", B, decay_to_end, xdt)

    # 3. pass states between chunks: h_k = exp(a_k) h_{k-1} + chunk_state_k, from h0
    states, final_state = _pass_states(chunk_states, a_cum[..., -1], h0.view(b, g, r, p, n))

    # 4. the contribution of the entering state to each output: C_t exp(a_cum_t) h_in
    y_off = torch.einsum("bclgn,bcgrpn,bcgrl->bclgrp", C, states, torch.exp(a_cum))
    y = (y_diag + y_off).reshape(b, l, h, p)
    log_decay = a_cum[..., -1].sum(1).reshape(b, h)  # Σ_t dt_t A
    return y, final_state.reshape(b, h, p, n), log_decay


def ssd_scan_ref(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int = 0,
                 initial_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Reference twin of `ssd_scan_chunked`: the recurrence one step at a time (slow, obvious).

    Same arguments and returns; `chunk_size` is ignored."""
    b, l, h, p = x.shape
    g, n = B.shape[-2:]
    x, dt, A, B, C = upcast(x, dt, A, B, C)
    B = B.repeat_interleave(h // g, dim=2)
    C = C.repeat_interleave(h // g, dim=2)
    state = x.new_zeros(b, h, p, n) if initial_state is None else initial_state.to(x.dtype)
    ys = []
    for t in range(l):
        dA = torch.exp(dt[:, t] * A)  # [b, h]
        state = dA[..., None, None] * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(b, 0, h, p)
    return y, state, (dt * A).sum(1)


def ssd_scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
             initial_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Mamba-2 scan: mamba_ssm's Triton kernel on CUDA when installed (engine/kernels.py), else
    `ssd_scan_chunked`. Same arguments and returns."""
    fn = kernels.get("ssd", x)
    if fn is not None:
        # dt comes softplus'ed and masked (dt_softplus=False, no dt_bias), so padding is the same
        # no-op step; dt, A and the initial state go in float32 (the kernel reads them as float32,
        # a bfloat16 state would lose the composed state's mantissa). The kernel does not return
        # the decay, which is one reduction here.
        out = kernels.run("ssd", fn, x, dt.float(), A.float(), B, C, chunk_size,
                          initial_states=None if initial_state is None else initial_state.float(),
                          return_final_states=True)
        if out is not None:
            y, final = out
            return y.float(), final.float(), (dt.float() * A.float()).sum(1)
    return ssd_scan_chunked(x, dt, A, B, C, chunk_size, initial_state)


# --------------------------------------------------------------------------------------------
# Mamba-1: selective scan with a per-(channel, state) decay
# --------------------------------------------------------------------------------------------
def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                   initial_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Mamba-1 selective scan as a parallel prefix scan (Hillis-Steele), pure torch.

    The pairs (a_t, b_t) with h_t = a_t h_{t-1} + b_t compose associatively:
    (a1, b1) then (a2, b2) = (a2 a1, a2 b1 + b2). log2(l) doubling rounds replace l Python steps;
    no division by decay products, so decays that underflow to 0 stay exact.

    Args:
        u, delta: [b, d, l] (delta softplus'ed and masked); A: [d, n] (< 0);
        B, C: [b, n, l]; initial_state: [b, d, n] or None.
    Returns:
        y [b, d, l] (= Σ_n C h, without the D skip and gate), final_state [b, d, n],
        log_decay [b, d, n] = Σ_t delta_t A.
    """
    u, delta, A, B, C = upcast(u, delta, A, B, C)
    la = delta.transpose(1, 2)[..., None] * A  # [b, l, d, n] per-step log-decay
    a = torch.exp(la)
    bx = (delta * u).transpose(1, 2)[..., None] * B.transpose(1, 2)[:, :, None, :]  # [b, l, d, n]
    if initial_state is not None:  # fold h_0 into the first step: b_1 += a_1 h_0
        bx = torch.cat([bx[:, :1] + a[:, :1] * initial_state.to(u.dtype)[:, None], bx[:, 1:]], dim=1)
    l, off = u.shape[-1], 1
    while off < l:
        bx = torch.cat([bx[:, :off], a[:, off:] * bx[:, :-off] + bx[:, off:]], dim=1)
        a = torch.cat([a[:, :off], a[:, off:] * a[:, :-off]], dim=1)
        off *= 2
    y = torch.einsum("bldn,bnl->bdl", bx, C)
    return y, bx[:, -1], la.sum(1)


def selective_scan_ref(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                       initial_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Reference twin of `selective_scan` (mamba_ssm's selective_scan_ref without D and z)."""
    u, delta, A, B, C = upcast(u, delta, A, B, C)
    b, d, l = u.shape
    state = u.new_zeros(b, d, A.shape[1]) if initial_state is None else initial_state.to(u.dtype)
    ys = []
    for t in range(l):
        state = torch.exp(delta[:, :, t, None] * A) * state + (delta[:, :, t] * u[:, :, t])[..., None] * B[:, None, :, t]
        ys.append(torch.einsum("bdn,bn->bd", state, C[:, :, t]))
    y = torch.stack(ys, dim=-1) if ys else u.new_zeros(b, d, 0)
    return y, state, (delta[..., None] * A[:, None, :]).sum(2)


# --------------------------------------------------------------------------------------------
# Depthwise causal conv with a carried window
# --------------------------------------------------------------------------------------------
def causal_conv(x: Tensor, weight: Tensor, bias: Tensor | None, conv_state: Tensor,
                lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Depthwise causal conv1d over [carried K-1 inputs ++ x], then SiLU.

    Args:
        x: [b, C, l] pre-conv inputs; weight: [C, 1, K]; bias: [C] or None;
        conv_state: [b, C, K-1] the previous K-1 inputs (zeros at the start of a sequence);
        lengths: [b] valid lengths for right-padded batches (None: all l valid).
    Returns:
        y [b, C, l] (SiLU applied), new_conv_state [b, C, K-1]: each row's own last K-1 inputs.
    """
    b, C, l = x.shape
    K = weight.shape[-1]
    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)  # [b, C, K-1+l]
    fn = kernels.get("conv", x) if lengths is None else None
    y = None
    if fn is not None:
        # The kernel takes initial_states only for channel-last inputs: x of shape [b, C, l]
        # whose stride(1) == 1.
        xc = x.transpose(1, 2).contiguous().transpose(1, 2)
        init = conv_state.to(x.dtype).transpose(1, 2).contiguous().transpose(1, 2)
        y = kernels.run("conv", fn, xc, weight.squeeze(1), bias, initial_states=init, activation="silu")
    if y is None:  # K shifted multiply-adds: the same as F.conv1d(groups=C), several times faster on CPU
        w = weight[:, 0]  # [C, K]
        y = sum(full[..., k:k + l] * w[:, k, None] for k in range(K))
        y = F.silu(y + bias[:, None] if bias is not None else y)
    if lengths is None:
        new_state = full[..., l:]
    else:  # row i's last inputs end at position K-1+len_i of `full`
        idx = lengths.view(b, 1, 1) + torch.arange(K - 1, device=x.device).view(1, 1, K - 1)
        new_state = full.gather(-1, idx.expand(b, C, K - 1))
    return y, upcast(new_state)[0]


def conv_step(x: Tensor, weight: Tensor, bias: Tensor | None, conv_state: Tensor) -> Tensor:
    """One token of `causal_conv`: x [b, C] (pre-conv input), conv_state [b, C, K-1] (the last
    K-1 inputs, oldest first) rolled IN PLACE to end with x. Returns SiLU(conv) [b, C]."""
    fn = kernels.get("conv_step", x) if conv_state.dtype == x.dtype else None
    if fn is not None:
        # same contract (the kernel keeps the last state_len >= K-1 columns of [state ++ x]); it
        # takes a state of the input's dtype only, so float32 models (states are float32)
        y = kernels.run("conv_step", fn, x, conv_state, weight.squeeze(1), bias, activation="silu")
        if y is not None:
            return y
    fn = kernels.get("conv_roll", x)  # causal-conv1d absent: picaso's Triton twin of it
    if fn is not None:
        y = kernels.run("conv_roll", fn, x, conv_state, weight, bias)
        if y is not None:
            return y
    window = torch.cat([conv_state.to(x.dtype), x[..., None]], dim=-1)  # [b, C, K]
    y = (window * weight[:, 0]).sum(-1)
    conv_state.copy_(window[..., 1:])
    return F.silu(y + bias if bias is not None else y)


def unlimited(dt_limit: tuple[float, float]) -> bool:
    """Whether mamba_ssm's dt_limit holds for any softplus (the default (0, inf))."""
    return dt_limit[0] <= 0 and dt_limit[1] == math.inf


def dt_softplus(dt: Tensor, dt_bias: Tensor, dt_limit: tuple[float, float]) -> Tensor:
    """Mamba-2's step sizes softplus(dt + dt_bias) in float32 (the decay math), clamped to mamba_ssm's
    dt_limit (no op at the default)."""
    dt = F.softplus(upcast(dt)[0] + upcast(dt_bias)[0])
    return dt if unlimited(dt_limit) else dt.clamp(*dt_limit)


def step_sizes(dt: Tensor, dt_bias: Tensor, A_log: Tensor, dt_limit: tuple[float, float],
               log_decay: Tensor) -> tuple[Tensor, Tensor]:
    """One decode step's dt = `dt_softplus` [b, H] and A = -exp(A_log) [H] (float32), with
    log_decay += dt·A IN PLACE. On CUDA, the dt_step kernel (one launch instead of nine)."""
    fn = kernels.get("dt_step", dt) if unlimited(dt_limit) and log_decay.dtype == torch.float32 else None
    fused = kernels.run("dt_step", fn, dt, dt_bias, A_log, log_decay) if fn is not None else None
    if fused is not None:
        return fused
    dt = dt_softplus(dt, dt_bias, dt_limit)  # [b, H]
    A = -torch.exp(upcast(A_log)[0])  # [H]
    log_decay += (dt * A).view(log_decay.shape)  # A(u x) = A(x) A(u)
    return dt, A


# Bytes of SSM state one block of the CPU update touches: a block is scaled, accumulated and read
# for C h while it sits in a core's L2 (2 MiB here), so the state crosses DRAM once (read and write)
# instead of once per op. 7 rows of the mamba2-130m shape are 5.4 MiB per layer: 6 blocks.
STATE_BLOCK_BYTES = 1 << 20


_ZEROS: dict[torch.device, Tensor] = {}


def _zeros(device: torch.device, shape: tuple[int, ...]) -> Tensor:
    """A float32 zero of `shape` with every stride 0, one allocation per device (a graph replays it)."""
    if device not in _ZEROS:
        _ZEROS[device] = torch.zeros((), dtype=torch.float32, device=device)
    return _ZEROS[device].expand(shape)


def state_update(h: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                 D: Tensor | None = None) -> Tensor:
    """One step of the recurrence, IN PLACE on h: h = exp(dt A) h + dt x B^T, returns y = C h.

    Args (Mamba-2 | Mamba-1):
        h: [b, H, P, N] | [b, E, N], float32, each row contiguous (all rows: the fast case); x: [b, H, P] | [b, E];
        dt: [b, H] | [b, E] (softplus'ed); A: [H] | [E, N] (< 0); B, C: [b, G, N] | [b, N].
    Returns y [b, H, P] | [b, E] (float32), without the D skip and the gate; with D ([H] | [E]),
    y + D x in x's dtype (the kernel adds it in float32 before rounding, one launch fewer).
    On CUDA with mamba_ssm, its selective_state_update kernel (one launch instead of five).
    On CPU, blocks of `STATE_BLOCK_BYTES`: each block's three ops (scale, outer-product accumulate,
    C h) run back to back while it is in cache; on CUDA without the kernel, one pass per op (there a
    block loop is only more launches). `state_update_ref` is the twin."""
    two = h.dim() == 4
    fn = kernels.get("step", h)
    if fn is not None:
        kdt, kA = dt, A
        if two:  # the kernel's Mamba-2 layout: dt and A per (head, channel), strides 0 where shared
            P, N = h.shape[2:]
            kdt, kA = dt[..., None].expand(*dt.shape, P), A[:, None, None].expand(-1, P, N)
        # mamba-ssm 2.3.2's wrapper reads dt_bias' and D's strides unconditionally: zeros with
        # stride 0 where not wanted (dt is already softplus'ed)
        zero = _zeros(h.device, tuple(kdt.shape[1:]))
        kD = zero if D is None else (D[:, None].expand(kdt.shape[1:]) if two else D)
        y = kernels.run("step", fn, h, x, kdt, kA, B, C, D=kD, dt_bias=zero)
        if y is not None:
            return y.float() if D is None else y
    if D is not None:
        y = state_update(h, x, dt, A, B, C)
        return y.to(x.dtype) + x * (D[:, None] if two else D).to(x.dtype)
    b, N = h.shape[0], h.shape[-1]
    if b > 1 and not h.is_contiguous():  # rows apart in memory (a batch-major slice): one row at a time
        return torch.cat([state_update(h[i:i + 1], x[i:i + 1], dt[i:i + 1], A, B[i:i + 1], C[i:i + 1])
                          for i in range(b)])
    x, dt, A, B, C = upcast(x, dt, A, B, C)
    if two:  # one [P, N] matrix per (row, head): rows r = (i, head) of a flat view [b·H, P, N]
        H, P = h.shape[1], h.shape[2]
        heads_per_group = H // B.shape[1]
        hf = h.view(b * H, P, N)
        decay = torch.exp(dt * A).view(b * H, 1, 1)
        u = (dt[..., None] * x).view(b * H, P, 1)  # dt x
        Bh = B.repeat_interleave(heads_per_group, dim=1).view(b * H, 1, N)  # each head's group's B
        Ch = C.repeat_interleave(heads_per_group, dim=1).view(b * H, N, 1)
        y = torch.empty(b * H, P, 1, dtype=h.dtype, device=h.device)
        step = max(1, STATE_BLOCK_BYTES // (P * N * h.element_size())) if h.device.type == "cpu" else b * H
        for r in range(0, b * H, step):
            blk = hf[r:r + step]
            blk.mul_(decay[r:r + step]).baddbmm_(u[r:r + step], Bh[r:r + step])
            torch.bmm(blk, Ch[r:r + step], out=y[r:r + step])
        return y.view(b, H, P)
    # Mamba-1: whole rows per block (a row is E·N: 96 KiB at the 130m shape, so usually one block)
    decay = torch.exp(dt[..., None] * A)  # [b, E, N]: per channel and state dim
    u, y = (dt * x)[..., None], torch.empty_like(x)
    step = max(1, STATE_BLOCK_BYTES // (h[0].numel() * h.element_size())) if h.device.type == "cpu" else b
    for i in range(0, b, step):
        blk = h[i:i + step]
        blk.mul_(decay[i:i + step]).baddbmm_(u[i:i + step], B[i:i + step, None, :])
        torch.bmm(blk, C[i:i + step, :, None], out=y[i:i + step, :, None])
    return y


def state_update_ref(h: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor) -> tuple[Tensor, Tensor]:
    """Reference twin of `state_update`, out of place, written as the equations (Mamba-2 paper
    eq. 1): returns (y = C h', h' = exp(dt A) h + dt x B^T); shapes as in `state_update`."""
    x, dt, A, B, C = upcast(x, dt, A, B, C)
    if h.dim() == 4:  # head j reads group j // (H / G)
        H = h.shape[1]
        B, C = (t.repeat_interleave(H // t.shape[1], dim=1) for t in (B, C))  # [b, H, N]
        new = torch.exp(dt * A)[..., None, None] * h + torch.einsum("bhp,bhn->bhpn", dt[..., None] * x, B)
        return torch.einsum("bhpn,bhn->bhp", new, C), new
    new = torch.exp(dt[..., None] * A) * h + torch.einsum("be,bn->ben", dt * x, B)
    return torch.einsum("ben,bn->be", new, C), new

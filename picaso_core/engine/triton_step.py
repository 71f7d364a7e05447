"""Triton kernels for the Mamba-2 decode step, where pure torch spends many tiny launches.

On an H100 a CUDA-graph step of the 2.7b shape (7 rows, bfloat16) cost 6.44 ms against a 2.33 ms
weight-read floor (docs/gpu.md): what was left was launches, ~20 per layer, most of them
elementwise ops on a few thousand numbers. These replace 15 of them per layer:

    dt_step    softplus(dt + dt_bias) in float32, A = -exp(A_log), and the state's log-decay
               accumulated in place (log_decay += dt·A): 9 launches (two casts, add, softplus,
               cast, exp, neg, mul, add) -> 1
    conv_roll  the decode conv where causal-conv1d's CUDA build is absent: the window [state ++ x]
               dotted with each channel's K taps in float32, + bias, SiLU, and the state rolled in
               place to end with x: 6 launches (cat, mul, sum, copy, add, silu) -> 1
    conv_dt    both in one launch (Mamba-2; the grid's last block per row does dt_step's work):
               each layer's decode step then runs addnorm, in_proj, conv_dt, the state update, the
               gated norm and out_proj

Measured in one run on an H100 (bench/decode_speed.py): 7.51 ms per step without them, 4.96 ms with
dt_step and conv_roll, 4.82 ms with conv_dt. All need only Triton (it comes with torch's CUDA
wheels: no build). They run on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1 set
before this module is imported), which is how tests/engine/test_triton_step.py checks them against the
equations without a GPU; on a GPU the same tests run them compiled.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SOFTPLUS_THRESHOLD = 20.0  # torch.nn.functional.softplus's: above it, softplus(x) = x


@triton.jit
def _dt_body(row, dt_ptr, bias_ptr, alog_ptr, ld_ptr, out_ptr, a_ptr, H, s_dt, s_ld,
             BLOCK_H: tl.constexpr, THRESHOLD: tl.constexpr):
    h = tl.arange(0, BLOCK_H)
    m = h < H
    raw = tl.load(dt_ptr + row * s_dt + h, mask=m, other=0.0).to(tl.float32) \
        + tl.load(bias_ptr + h, mask=m, other=0.0).to(tl.float32)
    dt = tl.where(raw > THRESHOLD, raw, tl.log(1.0 + tl.exp(tl.minimum(raw, THRESHOLD))))
    a = -tl.exp(tl.load(alog_ptr + h, mask=m, other=0.0).to(tl.float32))
    ld = tl.load(ld_ptr + row * s_ld + h, mask=m, other=0.0)
    tl.store(ld_ptr + row * s_ld + h, ld + dt * a, mask=m)
    tl.store(out_ptr + row * H + h, dt, mask=m)
    if row == 0:
        tl.store(a_ptr + h, a, mask=m)


@triton.jit
def _dt_step_kernel(dt_ptr, bias_ptr, alog_ptr, ld_ptr, out_ptr, a_ptr, H, s_dt, s_ld,
                    BLOCK_H: tl.constexpr, THRESHOLD: tl.constexpr):
    _dt_body(tl.program_id(0), dt_ptr, bias_ptr, alog_ptr, ld_ptr, out_ptr, a_ptr, H, s_dt, s_ld, BLOCK_H, THRESHOLD)


def _check_dt(dt: torch.Tensor, log_decay: torch.Tensor, name: str = "dt_step") -> None:
    H = dt.shape[1]
    if dt.stride(1) != 1 or log_decay.dtype != torch.float32 or log_decay[0].numel() != H \
            or (H > 1 and log_decay.stride(1) != 1):
        raise ValueError(f"{name}: dt [b, H] with contiguous rows and a float32 log_decay of H contiguous entries per row")


def dt_step(dt: torch.Tensor, dt_bias: torch.Tensor, A_log: torch.Tensor,
            log_decay: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dt [b, H] (the projection's raw step sizes, any float dtype), dt_bias and A_log [H];
    log_decay: a float32 tensor of b rows whose H entries are contiguous ([b, H] or [b, H, 1, 1]),
    += dt·A IN PLACE. Returns (softplus(dt + dt_bias) [b, H] float32, A = -exp(A_log) [H] float32)."""
    b, H = dt.shape
    _check_dt(dt, log_decay)
    out = torch.empty(b, H, dtype=torch.float32, device=dt.device)
    A = torch.empty(H, dtype=torch.float32, device=dt.device)
    _dt_step_kernel[(b,)](dt, dt_bias, A_log, log_decay, out, A, H, dt.stride(0), log_decay.stride(0),
                          BLOCK_H=triton.next_power_of_2(H), THRESHOLD=SOFTPLUS_THRESHOLD)
    return out, A


@triton.jit
def _conv_body(row, blk, x_ptr, st_ptr, w_ptr, b_ptr, y_ptr, C, s_x, s_sb, s_sc, s_sk, s_wc, s_wk, s_y,
               KM1: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr):
    c = blk * BLOCK_C + tl.arange(0, BLOCK_C)
    m = c < C
    xv = tl.load(x_ptr + row * s_x + c, mask=m, other=0.0)
    acc = xv.to(tl.float32) * tl.load(w_ptr + c * s_wc + KM1 * s_wk, mask=m, other=0.0).to(tl.float32)
    base = st_ptr + row * s_sb + c * s_sc
    for k in tl.static_range(KM1):  # oldest first; each tap is read before the roll overwrites it
        v = tl.load(base + k * s_sk, mask=m, other=0.0)
        acc += v.to(tl.float32) * tl.load(w_ptr + c * s_wc + k * s_wk, mask=m, other=0.0).to(tl.float32)
        if k > 0:
            tl.store(base + (k - 1) * s_sk, v, mask=m)
    tl.store(base + (KM1 - 1) * s_sk, xv, mask=m)
    if HAS_BIAS:
        acc += tl.load(b_ptr + c, mask=m, other=0.0).to(tl.float32)
    y = acc / (1.0 + tl.exp(-acc))  # SiLU
    tl.store(y_ptr + row * s_y + c, y, mask=m)


@triton.jit
def _conv_roll_kernel(x_ptr, st_ptr, w_ptr, b_ptr, y_ptr, C, s_x, s_sb, s_sc, s_sk, s_wc, s_wk, s_y,
                      KM1: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr):
    _conv_body(tl.program_id(0), tl.program_id(1), x_ptr, st_ptr, w_ptr, b_ptr, y_ptr, C, s_x, s_sb, s_sc, s_sk,
               s_wc, s_wk, s_y, KM1, HAS_BIAS, BLOCK_C)


@triton.jit
def _conv_dt_kernel(x_ptr, st_ptr, w_ptr, b_ptr, y_ptr, C, s_x, s_sb, s_sc, s_sk, s_wc, s_wk, s_y,
                    dt_ptr, bias_ptr, alog_ptr, ld_ptr, out_ptr, a_ptr, H, s_dt, s_ld, N_CONV_BLOCKS,
                    KM1: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr,
                    BLOCK_H: tl.constexpr, THRESHOLD: tl.constexpr):
    row, blk = tl.program_id(0), tl.program_id(1)
    if blk < N_CONV_BLOCKS:
        _conv_body(row, blk, x_ptr, st_ptr, w_ptr, b_ptr, y_ptr, C, s_x, s_sb, s_sc, s_sk, s_wc, s_wk, s_y,
                   KM1, HAS_BIAS, BLOCK_C)
    else:  # the row's last block: the step sizes
        _dt_body(row, dt_ptr, bias_ptr, alog_ptr, ld_ptr, out_ptr, a_ptr, H, s_dt, s_ld, BLOCK_H, THRESHOLD)


def _conv_args(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               name: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Check conv_roll's layouts; returns (weight as [C, K], y, BLOCK_C)."""
    b, C = x.shape
    w = weight.reshape(C, -1)
    K = w.shape[1]
    if K < 2 or conv_state.shape[1:] != (C, K - 1) or x.stride(1) != 1:
        raise ValueError(f"{name}: x [b, C] with contiguous rows, conv_state [b, C, K-1] and weight [C, K]; got "
                         f"{tuple(x.shape)}, {tuple(conv_state.shape)}, {tuple(weight.shape)}")
    return w, torch.empty_like(x), min(1024, triton.next_power_of_2(C))


def conv_roll(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """One token of the depthwise causal conv: x [b, C]; conv_state [b, C, K-1] (the last K-1 inputs,
    oldest first; any strides, any float dtype) rolled IN PLACE to end with x; weight [C, 1, K] or
    [C, K]; bias [C] or None. Returns SiLU(conv) [b, C] in x's dtype (accumulated in float32)."""
    w, y, BLOCK_C = _conv_args(x, conv_state, weight, bias, "conv_roll")
    b, C = x.shape
    _conv_roll_kernel[(b, triton.cdiv(C, BLOCK_C))](
        x, conv_state, w, bias if bias is not None else w, y, C, x.stride(0), *conv_state.stride(), *w.stride(), y.stride(0),
        KM1=w.shape[1] - 1, HAS_BIAS=bias is not None, BLOCK_C=BLOCK_C)
    return y


def conv_dt(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            dt: torch.Tensor, dt_bias: torch.Tensor, A_log: torch.Tensor,
            log_decay: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`conv_roll(x, conv_state, weight, bias)` and `dt_step(dt, dt_bias, A_log, log_decay)` in one
    launch (arguments and effects as theirs; the rows of x and dt agree). Returns (SiLU(conv) [b, C],
    softplus(dt + dt_bias) [b, H] float32, A [H] float32)."""
    w, y, BLOCK_C = _conv_args(x, conv_state, weight, bias, "conv_dt")
    b, C = x.shape
    H = dt.shape[1]
    _check_dt(dt, log_decay, "conv_dt")
    if dt.shape[0] != b:
        raise ValueError(f"conv_dt: x and dt have different rows ({b} and {dt.shape[0]})")
    out = torch.empty(b, H, dtype=torch.float32, device=dt.device)
    A = torch.empty(H, dtype=torch.float32, device=dt.device)
    n = triton.cdiv(C, BLOCK_C)
    _conv_dt_kernel[(b, n + 1)](
        x, conv_state, w, bias if bias is not None else w, y, C, x.stride(0), *conv_state.stride(), *w.stride(), y.stride(0),
        dt, dt_bias, A_log, log_decay, out, A, H, dt.stride(0), log_decay.stride(0), n,
        KM1=w.shape[1] - 1, HAS_BIAS=bias is not None, BLOCK_C=BLOCK_C,
        BLOCK_H=triton.next_power_of_2(H), THRESHOLD=SOFTPLUS_THRESHOLD)
    return y, out, A

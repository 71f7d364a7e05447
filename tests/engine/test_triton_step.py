"""engine/triton_step.py, the decode step's two Triton kernels, against references written from the
equations in float64. On CPU they run under Triton's interpreter (a fresh copy of the module imported
with TRITON_INTERPRET=1); on CUDA compiled. Skipped where Triton is not installed."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def T():
    path = Path(__file__).resolve().parents[2] / "picaso_core" / "engine" / "triton_step.py"
    old = os.environ.get("TRITON_INTERPRET")
    if DEVICE == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are decorated
    try:
        spec = importlib.util.spec_from_file_location("triton_step_under_test", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old
    return mod


TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("b", [1, 3])
def test_dt_step_is_softplus_and_the_log_decay_accumulated(T, dtype, b):
    g = torch.Generator().manual_seed(0)
    L, H = 4, 24  # H not a power of two: the masked tail
    raw = (torch.randn(b, H, generator=g) * 8).to(dtype)  # reaches past softplus' threshold of 20 too
    raw[0, 0], raw[-1, 1] = 25.0, -30.0
    bias, A_log = torch.randn(H, generator=g).to(dtype), torch.rand(H, generator=g).mul(3).to(dtype)
    buf = torch.randn(b, L, H, 1, 1, generator=g)  # the decode buffer; layer 2's slice, rows apart
    buf = buf.transpose(0, 1).contiguous().transpose(0, 1)
    want_ld = buf.double().clone()
    raw, bias, A_log, buf = (t.to(DEVICE) for t in (raw, bias, A_log, buf))
    dt, A = T.dt_step(raw, bias, A_log, buf[:, 2])
    x = raw.double().cpu() + bias.double().cpu()
    want_dt = torch.where(x > 20, x, torch.log1p(torch.exp(x)))  # softplus, written out
    want_A = -torch.exp(A_log.double().cpu())
    want_ld[:, 2, :, 0, 0] += want_dt * want_A
    torch.testing.assert_close(dt.cpu().double(), want_dt, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(A.cpu().double(), want_A, rtol=1e-6, atol=0)
    torch.testing.assert_close(buf.cpu().double(), want_ld, rtol=1e-5, atol=1e-6)  # other layers untouched
    assert dt.dtype == A.dtype == torch.float32 and float(dt.min()) >= 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_roll_is_the_causal_conv_of_the_window_and_rolls_the_state(T, dtype, bias):
    g = torch.Generator().manual_seed(1)
    b, L, C, K = 3, 2, 200, 4  # C spans a partial block
    x = torch.randn(b, C, generator=g).to(dtype)
    w = torch.randn(C, 1, K, generator=g).to(dtype)
    bb = torch.randn(C, generator=g).to(dtype) if bias else None
    state = torch.randn(b, L, C, K - 1, generator=g).to(dtype).transpose(0, 1).contiguous().transpose(0, 1)
    before = state.clone()
    dev = [t.to(DEVICE) if t is not None else None for t in (x, w, bb, state)]
    y = T.conv_roll(dev[0], dev[3][:, 1], dev[1], dev[2])
    window = torch.cat([before[:, 1].double(), x.double()[..., None]], dim=-1)  # [b, C, K], oldest first
    pre = (window * w.double()[:, 0]).sum(-1) + (bb.double() if bias else 0)
    torch.testing.assert_close(y.cpu().double(), F.silu(pre), **TOL[dtype])
    assert y.dtype == dtype
    after = dev[3].cpu()
    torch.testing.assert_close(after[:, 1], window[..., 1:].to(dtype), rtol=0, atol=0)  # rolled: exact copies
    torch.testing.assert_close(after[:, 0], before[:, 0], rtol=0, atol=0)  # the other layer untouched


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_dt_is_the_conv_roll_and_the_dt_step_in_one_launch(T, dtype):
    """conv_dt against the equations in float64: the causal conv of the window, the rolled state, the
    softplus'ed step sizes, A and the accumulated log-decay, each row its own; other layers untouched."""
    g = torch.Generator().manual_seed(4)
    b, L, C, K, H = 3, 2, 1100, 4, 24  # C spans two conv blocks, the second partial
    proj = torch.randn(b, C + 2 * H, generator=g).to(dtype)  # in_proj's row: [xBC, ..., dt], a view of each
    x, raw = proj[:, :C], proj[:, C + H:]
    raw[0, 0], raw[-1, 1] = 25.0, -30.0
    w, cb = torch.randn(C, 1, K, generator=g).to(dtype), torch.randn(C, generator=g).to(dtype)
    bias, A_log = torch.randn(H, generator=g).to(dtype), torch.rand(H, generator=g).mul(3).to(dtype)
    state = torch.randn(b, L, C, K - 1, generator=g).to(dtype).transpose(0, 1).contiguous().transpose(0, 1)
    ld = torch.randn(b, L, H, 1, 1, generator=g).transpose(0, 1).contiguous().transpose(0, 1)
    before, ld_before = state.clone(), ld.double().clone()
    dev = [t.to(DEVICE) for t in (proj, w, cb, bias, A_log, state, ld)]
    dproj, dw, dcb, dbias, dA_log, dstate, dld = dev
    y, dt, A = T.conv_dt(dproj[:, :C], dstate[:, 1], dw, dcb, dproj[:, C + H:], dbias, dA_log, dld[:, 0])

    window = torch.cat([before[:, 1].double(), x.double()[..., None]], dim=-1)  # oldest first
    want_y = F.silu((window * w.double()[:, 0]).sum(-1) + cb.double())
    xr = raw.double() + bias.double()
    want_dt = torch.where(xr > 20, xr, torch.log1p(torch.exp(xr)))
    want_A = -torch.exp(A_log.double())
    torch.testing.assert_close(y.cpu().double(), want_y, **TOL[dtype])
    torch.testing.assert_close(dt.cpu().double(), want_dt, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(A.cpu().double(), want_A, rtol=1e-6, atol=0)
    after = dstate.cpu()
    torch.testing.assert_close(after[:, 1], window[..., 1:].to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(after[:, 0], before[:, 0], rtol=0, atol=0)
    ld_before[:, 0, :, 0, 0] += want_dt * want_A
    torch.testing.assert_close(dld.cpu().double(), ld_before, rtol=1e-5, atol=1e-6)  # layer 1 untouched
    assert y.dtype == dtype and dt.dtype == A.dtype == torch.float32


def test_bad_layouts_are_refused(T):
    with pytest.raises(ValueError, match="conv_roll"):
        T.conv_roll(torch.zeros(2, 8), torch.zeros(2, 8, 5), torch.zeros(8, 1, 4), None)
    with pytest.raises(ValueError, match="dt_step"):
        T.dt_step(torch.zeros(2, 8), torch.zeros(8), torch.zeros(8), torch.zeros(2, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="conv_dt: dt"):  # a float64 log-decay
        T.conv_dt(torch.zeros(2, 8), torch.zeros(2, 8, 3), torch.zeros(8, 1, 4), None,
                  torch.zeros(2, 4), torch.zeros(4), torch.zeros(4), torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="conv_dt: x and dt have different rows"):
        T.conv_dt(torch.zeros(2, 8), torch.zeros(2, 8, 3), torch.zeros(8, 1, 4), None,
                  torch.zeros(3, 4), torch.zeros(4), torch.zeros(4), torch.zeros(3, 4))


@pytest.mark.parametrize("family, fused", [("Mamba2", False), ("Mamba2", True), ("Mamba1", True)])
def test_the_model_steps_the_same_through_the_kernels(T, family, fused, monkeypatch):
    """SSMLanguageModel.step and generate_batch with dt_step / conv_roll (fused: conv_dt, which the
    step prefers) in place of the pure-torch ops (interpreted on CPU): the same logits, states and
    tokens as without them, and each kernel really ran."""
    from picaso_core.engine import kernels
    from picaso_core.engine.state import ContextState
    from tests.conftest import TINY_VOCAB, tiny_model

    m = tiny_model(family, seed=2).to(DEVICE)
    g = torch.Generator().manual_seed(3)
    states = ContextState.stack([m.encode_context(torch.randint(0, TINY_VOCAB, (n,), generator=g).to(DEVICE))
                                 for n in (5, 9, 14)])
    ids = torch.tensor([4, 7, 1], device=DEVICE)
    want_logits, want_state = m.step(ids, states)
    want_tokens = m.generate_batch([2, 5], states, max_new_tokens=6, temperature=0.0, stop_at_eos=False)

    fns = {"dt_step": T.dt_step, "conv_roll": T.conv_roll, **({"conv_dt": T.conv_dt} if fused else {})}
    for op, fn in fns.items():
        monkeypatch.setitem(kernels._KERNELS, op, fn)
    monkeypatch.setattr(kernels, "get", lambda op, like: fns.get(op) if not torch.is_grad_enabled() or not like.requires_grad else None)
    monkeypatch.setattr(kernels, "broken", {})
    before = {op: kernels.calls[op] for op in fns}
    logits, state = m.step(ids, states)
    tokens = m.generate_batch([2, 5], states, max_new_tokens=6, temperature=0.0, stop_at_eos=False)
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-5)
    for a, b in ((state.ssm, want_state.ssm), (state.conv, want_state.conv), (state.log_decay, want_state.log_decay)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert tokens == want_tokens and not kernels.broken
    ran = {op: kernels.calls[op] > before[op] for op in fns}
    if family == "Mamba1":  # Mamba-1's dt is per channel: the conv alone
        assert ran == {"dt_step": False, "conv_roll": True, "conv_dt": False}
    else:  # Mamba-2: conv_dt where there, else the two
        assert ran == ({"dt_step": False, "conv_roll": False, "conv_dt": True} if fused
                       else {"dt_step": True, "conv_roll": True})

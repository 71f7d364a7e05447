"""Fast scans against their step-by-step reference twins, gradients through initial states."""

import pytest
import torch

from picaso_core.engine.scan import (causal_conv, selective_scan, selective_scan_ref, ssd_scan_chunked,
                              ssd_scan_ref)

TOL = {torch.float32: 2e-5, torch.float64: 1e-12}


def _ssd_inputs(b=2, l=37, h=4, p=3, g=2, n=5, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return dict(
        x=torch.randn(b, l, h, p, dtype=dtype), dt=torch.rand(b, l, h, dtype=dtype),
        A=-torch.rand(h, dtype=dtype) * 3, B=torch.randn(b, l, g, n, dtype=dtype),
        C=torch.randn(b, l, g, n, dtype=dtype), initial_state=torch.randn(b, h, p, n, dtype=dtype))


def _s6_inputs(b=2, d=6, l=29, n=4, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return dict(u=torch.randn(b, d, l, dtype=dtype), delta=torch.rand(b, d, l, dtype=dtype),
                A=-torch.rand(d, n, dtype=dtype) * 3, B=torch.randn(b, n, l, dtype=dtype),
                C=torch.randn(b, n, l, dtype=dtype), initial_state=torch.randn(b, d, n, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [1, 4, 8, 64])
@pytest.mark.parametrize("with_state", [False, True])
def test_ssd_chunked_matches_reference(dtype, chunk, with_state):
    kw = _ssd_inputs(dtype=dtype)
    if not with_state:
        kw["initial_state"] = None
    y, s, d = ssd_scan_chunked(chunk_size=chunk, **kw)
    y_ref, s_ref, d_ref = ssd_scan_ref(**kw)
    assert y.dtype == s.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    for a, b in ((y, y_ref), (s, s_ref), (d, d_ref)):
        torch.testing.assert_close(a, b, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("l", [1, 2, 7, 29, 64])
def test_selective_scan_matches_reference(dtype, l):
    kw = _s6_inputs(l=l, dtype=dtype)
    for a, b in zip(selective_scan(**kw), selective_scan_ref(**kw)):
        torch.testing.assert_close(a, b, atol=TOL[dtype], rtol=TOL[dtype])


def test_scans_stay_finite_when_decay_underflows():
    """dt·A of -200 per step: exp underflows to 0 in float32; the state must be the last input."""
    kw = _ssd_inputs(dtype=torch.float32)
    kw["A"] = torch.full_like(kw["A"], -2000.0)
    y, s, d = ssd_scan_chunked(chunk_size=8, **kw)
    assert torch.isfinite(y).all() and torch.isfinite(s).all()
    torch.testing.assert_close(s, ssd_scan_ref(**kw)[1])


def test_dt_zero_steps_are_identity():
    """Padding semantics: steps with dt = 0 neither decay nor write the state."""
    kw = _ssd_inputs(dtype=torch.float64)
    kw["dt"][:, 10:] = 0
    _, s_full, d_full = ssd_scan_chunked(chunk_size=8, **kw)
    short = {k: (v[:, :10] if k in ("x", "dt", "B", "C") else v) for k, v in kw.items()}
    _, s_short, d_short = ssd_scan_chunked(chunk_size=8, **short)
    torch.testing.assert_close(s_full, s_short)
    torch.testing.assert_close(d_full, d_short)


@pytest.mark.parametrize("chunk", [4, 1])  # 2 chunks; 7 chunks
def test_gradcheck_ssd_scan_through_initial_state(chunk):
    kw = _ssd_inputs(b=1, l=7, h=2, p=2, g=1, n=2)
    x, A, h0 = (kw[k].requires_grad_() for k in ("x", "A", "initial_state"))

    def f(x, A, h0):
        y, s, d = ssd_scan_chunked(x, kw["dt"], A, kw["B"], kw["C"], chunk, h0)
        return y, s, d

    assert torch.autograd.gradcheck(f, (x, A, h0))


def test_gradcheck_selective_scan_through_initial_state():
    kw = _s6_inputs(b=1, d=2, l=5, n=2)
    u, delta, h0 = (kw[k].requires_grad_() for k in ("u", "delta", "initial_state"))
    assert torch.autograd.gradcheck(
        lambda u, delta, h0: selective_scan(u, delta, kw["A"], kw["B"], kw["C"], h0), (u, delta, h0))


def test_causal_conv_carries_window_and_gathers_per_row():
    torch.manual_seed(0)
    b, C, l, K = 3, 4, 9, 4
    x, w, bias = torch.randn(b, C, l), torch.randn(C, 1, K), torch.randn(C)
    y_full, s_full = causal_conv(x, w, bias, torch.zeros(b, C, K - 1))
    y1, s1 = causal_conv(x[..., :5], w, bias, torch.zeros(b, C, K - 1))
    y2, s2 = causal_conv(x[..., 5:], w, bias, s1)
    torch.testing.assert_close(torch.cat([y1, y2], -1), y_full)
    torch.testing.assert_close(s2, s_full)
    lengths = torch.tensor([9, 2, 5])
    _, s_pad = causal_conv(x, w, bias, torch.zeros(b, C, K - 1), lengths)
    for i, n in enumerate(lengths.tolist()):
        _, s_row = causal_conv(x[i:i + 1, :, :n], w, bias, torch.zeros(1, C, K - 1))
        torch.testing.assert_close(s_pad[i], s_row[0])


@pytest.mark.parametrize("c", [1, 2, 3, 100])
def test_inter_chunk_pass_matches_the_segsum_form(c):
    """The inter-chunk pass (one chunk at a time) against ssd_minimal.py's segsum form (the decay
    between every two chunks, exp of a masked cumulative sum), with decays from ~1 down to
    underflow (log decay -800)."""
    from picaso_core.engine.scan import _pass_states_segsum, _pass_states_sequential

    torch.manual_seed(c)
    cs = torch.randn(2, c, 3, 2, 4, 5, dtype=torch.float64)
    la = -torch.rand(2, c, 3, 2, dtype=torch.float64) * torch.tensor([0.01, 5.0, 800.0])[None, None, :, None]
    h0 = torch.randn(2, 3, 2, 4, 5, dtype=torch.float64)
    a = torch.nn.functional.pad(la.permute(0, 2, 3, 1), (1, 0))  # [b, g, r, c+1]
    seg = a[..., None, :].expand(*a.shape[:-1], c + 1, c + 1)  # [i, j] = a[j]
    tri = torch.ones(c + 1, c + 1, dtype=torch.bool)
    seg = seg.transpose(-1, -2).masked_fill(~tri.tril(-1), 0.0).cumsum(-2).masked_fill(~tri.tril(0), float("-inf"))
    want = torch.einsum("bgrzc,bcgrpn->bzgrpn", torch.exp(seg), torch.cat([h0[:, None], cs], dim=1))
    # both of the engine's forms (CPU: sequential, CUDA: segsum), and the recurrence itself
    h, rec = h0, []
    for k in range(c):
        rec.append(h)
        h = torch.exp(la[:, k])[..., None, None] * h + cs[:, k]
    for form in (_pass_states_sequential, _pass_states_segsum):
        entering, final = form(cs, la, h0)
        torch.testing.assert_close(entering, want[:, :-1], atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(final, want[:, -1], atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(entering, torch.stack(rec, 1), atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(final, h, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("form", ["sequential", "segsum", "segsum past its chunk limit"])
def test_scan_with_either_pass_form_matches_reference(monkeypatch, form):
    """The whole scan with the inter-chunk pass forced to each form (scan.PASS_FORM: CUDA uses
    segsum, the CPU sequential), in blocks of two chunks and in one piece: outputs, state, decay
    and gradients equal the step-by-step reference."""
    from picaso_core.engine import scan

    monkeypatch.setitem(scan.PASS_FORM, "cpu", form.split()[0])
    if form.endswith("limit"):  # more chunks than SEGSUM_MAX_CHUNKS: the sequential fallback
        monkeypatch.setattr(scan, "SEGSUM_MAX_CHUNKS", 1)
    calls = {"segsum": 0}
    segsum = scan._pass_states_segsum

    def spy(*a):
        calls["segsum"] += 1
        return segsum(*a)

    monkeypatch.setattr(scan, "_pass_states_segsum", spy)
    kw = _ssd_inputs(b=2, l=45, h=4, dtype=torch.float64)  # chunk 8: 6 chunks
    ref = ssd_scan_ref(**kw)
    for elements in (2 * 4 * 8 * 8 * 2, 1 << 40):
        monkeypatch.setitem(scan.BLOCK_ELEMENTS, "cpu", elements)
        for a, r in zip(ssd_scan_chunked(chunk_size=8, **kw), ref):
            torch.testing.assert_close(a, r, atol=1e-12, rtol=1e-12)
    assert (calls["segsum"] > 0) == (form == "segsum")
    small = _ssd_inputs(b=1, l=9, h=2, p=2, g=1, n=2)
    x, h0 = (small[k].requires_grad_() for k in ("x", "initial_state"))
    assert torch.autograd.gradcheck(
        lambda x, h0: ssd_scan_chunked(x, small["dt"], small["A"], small["B"], small["C"], 2, h0), (x, h0))


def test_long_sequence_many_chunks_matches_reference():
    """3000 steps in 94 chunks of 32 (float32): the fast scan's state equals the step-by-step one."""
    kw = _ssd_inputs(b=1, l=3000, h=2, p=2, g=1, n=3, dtype=torch.float32)
    kw["dt"] = kw["dt"] * 0.05  # slow decay: early chunks still matter at the end
    y, s, d = ssd_scan_chunked(chunk_size=32, **kw)
    y_ref, s_ref, d_ref = ssd_scan_ref(**kw)
    torch.testing.assert_close(s, s_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(y, y_ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("elements", [1, 2 * 4 * 8 * 8 * 2])  # a block per chunk; two chunks per block
def test_blocks_of_chunks_change_nothing(monkeypatch, elements):
    """Long sequences run in blocks of chunks, the state carried across: forced down to one or two
    chunks per block, output, state, decay and gradients equal the reference's."""
    from picaso_core.engine import scan

    kw = _ssd_inputs(b=2, l=37, h=4, dtype=torch.float64)  # chunk 8: 5 chunks (the last one padded)
    whole = ssd_scan_chunked(chunk_size=8, **kw)
    monkeypatch.setitem(scan.BLOCK_ELEMENTS, "cpu", elements)
    blocked = ssd_scan_chunked(chunk_size=8, **kw)
    for a, b, c in zip(blocked, whole, ssd_scan_ref(**kw)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(a, c, atol=1e-12, rtol=1e-12)
    small = _ssd_inputs(b=1, l=7, h=2, p=2, g=1, n=2)
    x, h0 = (small[k].requires_grad_() for k in ("x", "initial_state"))
    assert torch.autograd.gradcheck(
        lambda x, h0: ssd_scan_chunked(x, small["dt"], small["A"], small["B"], small["C"], 2, h0), (x, h0))

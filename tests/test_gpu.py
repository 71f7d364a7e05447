"""GPU fast path (mamba_ssm / causal_conv1d kernels) against the pure-torch reference.

Skipped without CUDA and the optional kernels (requirements-gpu.txt)."""

import pytest
import torch

from picaso_core.engine import scan
from tests.conftest import TINY_VOCAB, tiny_model

kernels = scan.gpu_kernels_available()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.skipif(not kernels["mamba_chunk_scan_combined"], reason="mamba_ssm not installed")
# Tolerances measured on an H100: the Triton kernel's float32 path computes at TF32
# precision (kernel vs reference 1.3-1.9e-3 relative, measured), so float32 gets 5e-3 (a 2.5x margin),
# not a float32-level 1e-3, which it failed; bfloat16 measured 3-6e-3 and keeps 3e-2.
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 5e-3), (torch.bfloat16, 3e-2)])
def test_ssd_kernel_matches_reference(dtype, tol):
    torch.manual_seed(0)
    b, l, h, p, g, n = 2, 300, 8, 64, 2, 64
    dev = "cuda"
    x = torch.randn(b, l, h, p, device=dev, dtype=dtype)
    dt = torch.nn.functional.softplus(torch.randn(b, l, h, device=dev) - 2)
    A = -torch.rand(h, device=dev) * 4
    B, C = (torch.randn(b, l, g, n, device=dev, dtype=dtype) for _ in range(2))
    h0 = torch.randn(b, h, p, n, device=dev)
    y, s, d = scan.ssd_scan(x, dt, A, B, C, 64, h0)
    y_ref, s_ref, d_ref = scan.ssd_scan_chunked(x, dt, A, B, C, 64, h0)
    for a, r in ((y, y_ref), (s, s_ref), (d, d_ref)):
        assert (a - r).abs().max().item() <= tol * max(1.0, r.abs().max().item())


@pytest.mark.skipif(not kernels["causal_conv1d_fn"], reason="causal_conv1d not installed")
def test_conv_kernel_matches_reference():
    torch.manual_seed(0)
    b, C, l, K = 2, 64, 50, 4
    x = torch.randn(b, C, l, device="cuda")
    w, bias, st = torch.randn(C, 1, K, device="cuda"), torch.randn(C, device="cuda"), torch.randn(b, C, K - 1, device="cuda")
    y, s = scan.causal_conv(x, w, bias, st)
    y_ref, s_ref = scan.causal_conv(x.cpu(), w.cpu(), bias.cpu(), st.cpu())
    torch.testing.assert_close(y.cpu(), y_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s.cpu(), s_ref)


def test_model_on_gpu_matches_cpu_with_states():
    m = tiny_model("Mamba2")
    ids = torch.randint(0, TINY_VOCAB, (2, 40))
    st = m.encode_context(torch.randint(0, TINY_VOCAB, (17,)))
    ref, ref_state = m(ids, st)
    got, got_state = m.to("cuda")(ids.cuda(), st)
    # measured on an H100 (demo model): pure torch on CUDA 1.7e-6 (state) / 1.6e-5 (loss)
    # relative to the CPU; with the Triton SSD kernel (TF32) 1.3e-3 / 6.5e-4. Limits ~4x above.
    tol = 5e-3 if kernels["mamba_chunk_scan_combined"] else 1e-4
    assert (got.cpu() - ref).abs().max().item() <= tol * ref.abs().max().item()
    assert (got_state.ssm.cpu() - ref_state.ssm).abs().max().item() <= tol * ref_state.ssm.abs().max().item()


@pytest.mark.parametrize("family", ["Mamba2", "Mamba1"])
def test_decode_step_on_gpu_matches_cpu(family):
    """`step` on CUDA (selective_state_update / causal_conv1d_update when installed, else pure
    torch) against the CPU reference; the one-token kernels are elementwise float32 (no TF32)."""
    m = tiny_model(family)
    st = m.encode_context(torch.randint(0, TINY_VOCAB, (13,)))
    ids = torch.randint(0, TINY_VOCAB, (3,))
    ref, ref_state = m.step(ids, st)
    got, got_state = m.to("cuda").step(ids.cuda(), st)
    for a, r in ((got, ref), (got_state.ssm, ref_state.ssm), (got_state.conv, ref_state.conv),
                 (got_state.log_decay, ref_state.log_decay)):
        assert (a.cpu() - r).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())


def test_cuda_graph_decode_equals_eager(monkeypatch):
    """The CUDA-graph decode (captured once per batch size, replayed per token) gives the eager
    path's tokens, also when a second call reuses the captured graph with other states."""
    from picaso_core.engine import decode

    m = tiny_model("Mamba2").to("cuda")
    states = [None, m.encode_context(torch.randint(0, TINY_VOCAB, (9,)))]
    prompt = torch.randint(0, TINY_VOCAB, (5,)).tolist()
    monkeypatch.setattr(decode, "CUDA_GRAPHS", False)
    eager = [m.generate_batch(prompt, s, max_new_tokens=12) for s in (states, states[::-1])]
    monkeypatch.setattr(decode, "CUDA_GRAPHS", True)
    graphed = [m.generate_batch(prompt, s, max_new_tokens=12) for s in (states, states[::-1])]
    assert graphed == eager and len(m._decode_graphs) == 1


def test_scan_pass_forms_agree_on_gpu():
    """On CUDA the inter-chunk pass defaults to the segsum form (one matmul; the sequential loop is
    launch-bound there, bench/scan_scaling.py): both forms agree on the GPU (64 chunks of a
    mamba2-130m-shaped layer), and the whole scan on the GPU (segsum) equals the CPU's (sequential)."""
    torch.manual_seed(0)
    assert scan.PASS_FORM["cuda"] == "segsum"
    cs = torch.randn(1, 64, 1, 24, 64, 128, device="cuda")
    la = -torch.rand(1, 64, 1, 24, device="cuda") * 5
    h0 = torch.randn(1, 1, 24, 64, 128, device="cuda")
    seq, seg = scan._pass_states_sequential(cs, la, h0), scan._pass_states_segsum(cs, la, h0)
    for a, b in zip(seg, seq):
        assert (a - b).abs().max().item() <= 1e-4 * b.abs().max().item()
    b, l, h, p, g, n = 1, 2000, 8, 16, 1, 32
    x, B, C = torch.randn(b, l, h, p), torch.randn(b, l, g, n), torch.randn(b, l, g, n)
    dt, A = torch.rand(b, l, h) * 0.1, -torch.rand(h) * 2 - 0.1
    ref = scan.ssd_scan_chunked(x, dt, A, B, C, 64)
    got = scan.ssd_scan_chunked(*(t.cuda() for t in (x, dt, A, B, C)), 64)
    for a, r in zip(got, ref):
        assert (a.cpu() - r).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())

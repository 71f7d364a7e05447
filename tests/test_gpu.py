"""GPU fast path (mamba_ssm / causal_conv1d kernels) against the pure-torch reference.

Skipped without CUDA and the optional kernels (requirements-gpu.txt)."""

import pytest
import torch

from picaso_core import scan
from tests.conftest import TINY_VOCAB, tiny_model

kernels = scan.gpu_kernels_available()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.skipif(not kernels["mamba_chunk_scan_combined"], reason="mamba_ssm not installed")
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 3e-2)])
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
    assert (got.cpu() - ref).abs().max().item() < 1e-3
    assert (got_state.ssm.cpu() - ref_state.ssm).abs().max().item() < 1e-3

"""The SSM primer's computations (picaso_core.lab.primer): recurrence = convolution for real and
complex, diagonal and full A; memory_length against the impulse response; the semiseparable M of a
real layer of the demo model against the engine's scan; measured complexity; rejected input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_model
from picaso_core.lab import complexity, primer as lab
from picaso_core.engine.scan import state_update

TOL = {torch.float64: 1e-5, torch.float32: 1e-4}


def random_system(kind: str, N: int, dtype: torch.dtype, seed: int, radius: float = 0.97):
    """A stable random system: "diag" (real λ), "full" (real A, complex eigenvalue pairs in general),
    "complex_diag" and "complex_full" (complex A, B, C)."""
    g = torch.Generator().manual_seed(seed)
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    if kind == "diag":
        A = (torch.rand(N, generator=g, dtype=torch.float64) * 2 - 1) * radius
        B, C = torch.randn(N, generator=g, dtype=torch.float64), torch.randn(N, generator=g, dtype=torch.float64)
        return A.to(dtype), B.to(dtype), C.to(dtype)
    if kind == "complex_diag":
        A = torch.polar(torch.rand(N, generator=g, dtype=torch.float64) * radius,
                        torch.rand(N, generator=g, dtype=torch.float64) * 2 * math.pi)
    else:
        A = torch.randn(N, N, generator=g, dtype=torch.float64)
        if kind == "complex_full":
            A = torch.complex(A, torch.randn(N, N, generator=g, dtype=torch.float64))
        A = A * radius / lab.spectral_radius(A)
    B = torch.complex(torch.randn(N, generator=g, dtype=torch.float64), torch.randn(N, generator=g, dtype=torch.float64))
    C = torch.complex(torch.randn(N, generator=g, dtype=torch.float64), torch.randn(N, generator=g, dtype=torch.float64))
    if kind == "full":  # real A (its eigenvalues come in complex pairs), real B, C
        return A.to(dtype), B.real.to(dtype), C.real.to(dtype)
    return A.to(cdtype), B.to(cdtype), C.to(cdtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kind", ["diag", "full", "complex_diag", "complex_full"])
@pytest.mark.parametrize("N", [1, 3, 8])
def test_recurrence_direct_and_fft_convolution_agree(dtype, kind, N):
    A, B, C = random_system(kind, N, dtype, seed=N)
    if kind == "full" and N > 1:
        assert torch.linalg.eigvals(A.double()).imag.abs().max() > 1e-3  # complex eigenvalues, real A
    x = torch.randn(2, 200, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype)
    y_rec = lab.lti_recurrence(A, B, C, x)
    assert y_rec.shape == x.shape and y_rec.dtype == dtype
    for f in (lab.lti_convolution, lab.lti_convolution_fft):
        y = f(A, B, C, x)
        assert y.shape == x.shape and y.dtype == dtype
        assert lab.relative_error(y, y_rec) <= TOL[dtype], f.__name__
    # a 1-D x gives a 1-D y, equal to its row of the batch
    assert lab.relative_error(lab.lti_convolution_fft(A, B, C, x[1]), y_rec[1]) <= TOL[dtype]


def test_kernel_is_the_impulse_response_and_K0_is_CB():
    A, B, C = random_system("complex_full", 4, torch.float64, seed=3)
    K = lab.lti_kernel(A, B, C, 50)
    assert K.shape == (50,) and K.is_complex()
    assert K[0] == pytest.approx(complex((C * B).sum()))
    assert complex(K[7]) == pytest.approx(complex(C @ torch.linalg.matrix_power(A, 7) @ B), rel=1e-12)
    impulse = torch.zeros(50, dtype=torch.float64)
    impulse[0] = 1
    assert torch.allclose(lab.lti_recurrence(A, B, C, impulse), K.real, atol=1e-12)
    # y_t = sum_i K_i x_{t-i} (the slides' convention: h_t = A h_{t-1} + B x_t, y_t = C h_t)
    x = torch.randn(50, dtype=torch.float64)
    y5 = sum(K[i] * x[5 - i] for i in range(6)).real
    assert float(lab.lti_convolution(A, B, C, x)[5]) == pytest.approx(float(y5), rel=1e-10)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, -0.8, 0.9, 0.99, 0.6 + 0.6j, -0.2 + 0.95j])
@pytest.mark.parametrize("tol", [0.125, 1e-2, 1e-4])
def test_memory_length_is_where_the_impulse_response_crosses_tol(lam, tol):
    T = 2000
    envelope = np.asarray(lab.impulse_responses([lam], T)["responses"][0]["envelope"])  # |K_t| = |λ^t|
    below = np.nonzero(envelope < tol)[0]
    assert lab.memory_length(lam, tol) == int(below[0])
    assert (envelope[below[0]:] < tol).all()
    assert isinstance(lab.memory_length(lam, tol), int)


def test_memory_length_of_arrays_and_an_exact_power():
    assert lab.memory_length(0.5, 0.125) == 4  # 0.5^3 = 0.125 is not below 0.125
    got = lab.memory_length(torch.tensor([0.1, 0.9, 0.99], dtype=torch.float64), 0.01)
    assert got.tolist() == [3, 44, 459] and got.dtype == np.int64  # 0.1^2 is not below 0.01


@pytest.fixture(scope="module")
def demo():
    from picaso_core import load_model

    model = load_model("demo")
    text = "Velmora is a city on the river Quell. It was founded in 1423 by Osric Dallen."
    return model, model.tokenizer.encode(text)


MAX_M_TOKENS = 128  # the Primer tab's longest text for M (picaso_core.ui.tabs.primer.MAX_M_TOKENS)


def test_semiseparable_M_times_x_equals_the_demo_models_scan(demo):
    """One chunk (the short text, < chunk_size 64) and the tab's longest text, 128 tokens = two chunks:
    there M x also checks the engine's pass of the state from one chunk to the next."""
    model, short = demo
    long = (short * (MAX_M_TOKENS // len(short) + 1))[:MAX_M_TOKENS]  # the sentence repeated, cut
    assert len(short) < model.config.ssm_cfg.chunk_size < MAX_M_TOKENS == len(long)
    for ids, layers in ((short, (0, model.config.n_layer - 1)), (long, range(model.config.n_layer))):
        for layer in layers:
            for head in (0, 7, model.config.nheads - 1):
                d = lab.semiseparable(model, ids, layer, head)
                M = torch.tensor(d["M"])
                assert M.shape == (len(ids), len(ids)) and torch.equal(M.triu(1), torch.zeros_like(M))  # causal
                assert d["relative_error"] <= 1e-4, (len(ids), layer, head, d["relative_error"])
                L = torch.tensor(d["L"])
                assert torch.allclose(L.diagonal(), torch.ones(len(ids))) and (L <= 1).all() and (L >= 0).all()


def test_semiseparable_of_a_mamba1_model():
    model = tiny_model("Mamba1")
    d = lab.semiseparable(model, list(range(1, 30)), 1, 5)  # a head is a channel, one decay per state
    assert d["relative_error"] <= 1e-4


def test_captured_dt_is_the_models_own_step(demo):
    """Layer 0's recorded Δ equals softplus(in_proj(norm(embedding))[dt] + dt_bias), computed here by hand."""
    model, ids = demo
    mixer, H = model.backbone.layers[0].mixer, model.config.nheads
    with torch.no_grad():
        u = model.backbone.layers[0].norm(model.backbone.embedding(torch.tensor([ids])))
        dt = F.softplus(mixer.in_proj(u)[0, :, -H:] + mixer.dt_bias)
    prof = lab.decay_profile(model, ids)
    assert torch.allclose(torch.tensor(prof["layers"][0]["dt"]), dt, rtol=1e-5, atol=1e-6)
    A = -torch.exp(mixer.A_log.double())
    mean_decay = torch.exp((dt.double() * A).mean(0))
    assert prof["layers"][0]["memory"] == [float(m) for m in lab.memory_length(mean_decay)]
    # a head that does not decay at all (Δ = 0 throughout) has no finite memory: None, not inf
    assert lab._steps_below(np.array([0.0, -0.1]), 0.01).tolist() == [math.inf, 47.0]
    assert len(prof["layers"]) == model.config.n_layer


def test_toy_selective_is_static_at_zero_and_lets_large_inputs_in():
    x = lab.toy_sequence(64)
    same = lab.toy_selective(x, 0.0)
    assert same["static"] == same["selective"]
    d = lab.toy_selective(x, 1.5)
    dt = torch.tensor(d["selective"]["dt"])
    big = x.abs() > 0.5
    assert dt[big].min() > dt[~big].max()  # the content tokens get the largest steps
    # after the last content token, the selective SSM still holds its value better than the static one
    last = int(torch.nonzero(big)[-1])
    assert abs(d["selective"]["y"][last + 5] - float(x[last])) < abs(d["static"]["y"][last + 5] - float(x[last]))


def test_measure_complexity_series_and_slope_order(monkeypatch):
    steps = []

    def engine_step(h, *args):  # the engine's own decode step, counted
        steps.append(tuple(h.shape))
        return state_update(h, *args)

    monkeypatch.setattr(complexity, "state_update", engine_step)
    r = complexity.measure_complexity([128, 512, 2048], threads=1, heads=8, headdim=32, d_state=32)
    assert r["lengths"] == [128, 512, 2048]
    for key in ("seconds", "peak_bytes", "slopes"):
        assert set(r[key]) == set(complexity.SERIES)
    for name in complexity.SERIES:
        assert len(r["seconds"][name]) == 3 and all(s > 0 for s in r["seconds"][name])
        assert all(b > 0 for b in r["peak_bytes"][name])
    s = r["slopes"]
    assert s["attention_prefill"] > s["ssm_scan"] > s["ssm_step"], s
    # the SSM step timed is scan.state_update on Mamba2Mixer.step's state [b, H, P, N]
    assert steps and set(steps) == {(1, 8, 32, 32)}
    assert len(set(r["peak_bytes"]["ssm_step"])) == 1  # the state does not grow with T
    state = 8 * 32 * 32 * 4  # the float32 state, updated in place: held once, not counted again as new memory
    assert state <= r["peak_bytes"]["ssm_step"][0] < 1.25 * state
    assert r["peak_bytes"]["attention_step"] == sorted(r["peak_bytes"]["attention_step"])  # the KV cache does


def test_peak_bytes_counts_new_storage_only():
    """On CPU: an in-place op, a view or a slice written on an existing tensor allocates nothing; a
    new result counts its bytes, and the inputs are counted once."""
    h = torch.zeros(1024)  # 4096 bytes
    cpu = torch.device("cpu")
    assert complexity._peak_bytes(lambda: h.mul_(2), [h], cpu) == 4096
    assert complexity._peak_bytes(lambda: h[10:], [h], cpu) == 4096
    assert complexity._peak_bytes(lambda: h.__setitem__(slice(5, None), 1.0), [h], cpu) == 4096
    assert complexity._peak_bytes(lambda: h * 2, [h], cpu) == 2 * 4096
    assert complexity._peak_bytes(lambda: (h * 2) * 2, [h], cpu) == 3 * 4096  # two temporaries alive at once


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_measure_complexity_on_cuda():
    """The CUDA path: a generator and synchronisation on the device, peak bytes from the allocator."""
    r = complexity.measure_complexity([128, 512], device="cuda")
    assert r["device"].startswith("cuda") and r["lengths"] == [128, 512]
    for name in complexity.SERIES:
        assert all(t > 0 for t in r["seconds"][name]) and all(b > 0 for b in r["peak_bytes"][name])
    assert r["peak_bytes"]["attention_step"][1] > r["peak_bytes"]["attention_step"][0]  # the KV cache grows
    assert r["peak_bytes"]["ssm_step"][0] == r["peak_bytes"]["ssm_step"][1]  # the state does not


def test_bad_input_is_a_clear_value_error():
    A, B, C = torch.tensor([0.5, 0.9]), torch.ones(2), torch.ones(2)
    x = torch.randn(10)
    for f in (lab.lti_recurrence, lab.lti_convolution, lab.lti_convolution_fft):
        with pytest.raises(ValueError, match="not stable"):
            f(torch.tensor([0.5, 1.0]), B, C, x)
        with pytest.raises(ValueError, match="not stable"):
            f(torch.tensor([[0.0, 1.2], [1.2, 0.0]]), B, C, x)
        with pytest.raises(ValueError, match="B and C must have shape"):
            f(A, torch.ones(3), C, x)
        with pytest.raises(ValueError, match=r"A must have shape"):
            f(torch.ones(2, 3) * 0.1, B, C, x)
        with pytest.raises(ValueError, match="x must have shape"):
            f(A, B, C, torch.randn(2, 0))
        with pytest.raises(ValueError, match="x must have shape"):
            f(A, B, C, torch.randn(2, 3, 4))
    for T in (0, -3, 2.5):
        with pytest.raises(ValueError, match="T must be"):
            lab.lti_kernel(A, B, C, T)
    with pytest.raises(ValueError, match="not stable"):
        lab.lti_kernel(torch.tensor([1.0j]), B[:1], C[:1], 5)
    with pytest.raises(ValueError, match=r"\|λ\| < 1"):
        lab.memory_length(1.0)
    with pytest.raises(ValueError, match=r"\|λ\| < 1"):
        lab.memory_length([0.5, -1.2 + 0j])
    with pytest.raises(ValueError, match="tol"):
        lab.memory_length(0.5, 1.5)
    with pytest.raises(ValueError, match="lengths"):
        complexity.measure_complexity([256])
    with pytest.raises(ValueError, match="lengths"):
        complexity.measure_complexity([0, 256])
    with pytest.raises(ValueError, match="magnitude"):
        lab.demo_system(1.0, 0.0, 4)
    model = tiny_model("Mamba2")
    with pytest.raises(ValueError, match="layer must be"):
        lab.semiseparable(model, [1, 2, 3], 5, 0)
    with pytest.raises(ValueError, match="head must be"):
        lab.semiseparable(model, [1, 2, 3], 0, 99)
    with pytest.raises(ValueError, match="at least one token"):
        lab.decay_profile(model, [])

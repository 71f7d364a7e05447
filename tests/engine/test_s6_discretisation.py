"""The COFFEE lab's layers against their equations, written here apart from the model code.

S6's fast (scan) and reference (loop) paths share `S6.coefficients`, so their agreement says
nothing about the discretisation itself. Here eq. 2 (COFFEE paper; zero-order hold of
dx/dt = A x + B(k) u_i(k) over a step Delta_i(k), eq. 3) is checked against the continuous system
itself, integrated by classical Runge-Kutta with many substeps over each Delta: an Euler B
(Delta * B * u) or a wrong exponent shows as a gap far above RK4's error. COFFEE's eq. 5-7 (and
eq. 6 with Remark 3's output filter) are checked against the printed matrix form, one subsystem
and one sequence at a time in numpy, not the vectorised recursion of the fast path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from picaso_core.lab.coffee.model import S6
from conftest import random_coffee


def _softplus(z):
    return np.log1p(np.exp(z))


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def s6_by_integration(u, lam, w_b, w_c, w_d, substeps=256):
    """Eq. 2-3 from the continuous system: for each step k hold u(k), B(k) = W_B u(k) fixed for a time
    Delta(k) = softplus(W_D u(k)) and integrate dx/dt = lam x + B(k) u_i(k) from x(k-1) by RK4.
    u (l, D); lam (D, n); w_b, w_c (n, D); w_d (D, D). Returns y (l, D), X (l, D, n)."""
    x = np.zeros_like(lam)
    ys, xs = [], []
    for k in range(len(u)):
        delta = _softplus(w_d @ u[k])                       # (D,)
        drive = (w_b @ u[k])[None, :] * u[k][:, None]       # (D, n): B(k) u_i(k)
        h = (delta / substeps)[:, None]

        def f(z, drive=drive):                              # dx/dt, u and B held over the step
            return lam * z + drive

        for _ in range(substeps):
            k1 = f(x)
            k2 = f(x + h / 2 * k1)
            k3 = f(x + h / 2 * k2)
            k4 = f(x + h * k3)
            x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        xs.append(x.copy())
        ys.append(x @ (w_c @ u[k]))                         # y_i = C(k) x^(i), C(k) = (W_C u(k))^T
    return np.stack(ys), np.stack(xs)


@pytest.mark.parametrize("fast", [True, False])
def test_s6_is_the_zero_order_hold_of_its_continuous_system(fast):
    torch.manual_seed(0)
    d, n, l = 3, 4, 6
    layer = S6(d, n).double()
    with torch.no_grad():       # spread the decays and step sizes: lam in [-4, -0.25], Delta up to ~3
        layer.mu.copy_(torch.linspace(-1.4, 1.4, d * n, dtype=torch.float64).reshape(d, n))
        layer.w_d.mul_(0.8)
    u = torch.randn(2, l, d, dtype=torch.float64)
    y, X = layer(u, fast=fast)
    lam = (-torch.exp(layer.mu)).detach().numpy()
    w_b, w_c, w_d = (p.detach().numpy() for p in (layer.w_b, layer.w_c, layer.w_d))
    for b in range(len(u)):
        y_ref, X_ref = s6_by_integration(u[b].numpy(), lam, w_b, w_c, w_d)
        np.testing.assert_allclose(X[b].detach().numpy(), X_ref, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(y[b].detach().numpy(), y_ref, rtol=1e-6, atol=1e-9)


def coffee_by_the_equations(u, lam, c, wd, b=None, wg=None):
    """Eq. 5-7 (eq. 6 when B is given; Remark 3 when w_gamma is), one subsystem at a time as printed:
    Delta_i(k) = sigma(w_D^(i) (.) x(k-1)^(i)); x(k) = (I + A diag(Delta)) x(k-1) + diag(Delta) B u_i(k);
    y_i(k) = C^(i) x(k) (times gamma = sigma(w_gamma^T x(k)) with the filter).
    u (l, D); lam, c, wd, b, wg (D, n). Returns y (l, D), X (l, D, n)."""
    l, d = u.shape
    n = lam.shape[1]
    y, X = np.zeros((l, d)), np.zeros((l, d, n))
    for i in range(d):
        A = np.diag(lam[i])
        B = np.ones(n) if b is None else b[i]
        x = np.zeros(n)                                      # x(-1) = 0
        for k in range(l):
            gate = np.diag(_sigmoid(wd[i] * x))             # diag(Delta_i(k)), from x(k-1)
            x = (np.eye(n) + A @ gate) @ x + gate @ B * u[k, i]
            X[k, i] = x
            gamma = 1.0 if wg is None else _sigmoid(wg[i] @ x)
            y[k, i] = (c[i] * gamma) @ x
    return y, X


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("learn_b,output_filter", [(False, False), (True, True)])
def test_coffee_follows_eq_5_to_7(fast, learn_b, output_filter):
    torch.manual_seed(1)
    d, n, l = 3, 2, 7
    layer = random_coffee(d, n, learn_b, output_filter)
    u = torch.randn(2, l, d, dtype=torch.float64)
    y, X = layer(u, fast=fast)
    p = {k: (v.detach().numpy() if v is not None else None)
         for k, v in (("lam", layer.lam), ("c", layer.c), ("wd", layer.wd), ("b", layer.b), ("wg", layer.wg))}
    for s in range(len(u)):
        y_ref, X_ref = coffee_by_the_equations(u[s].numpy(), **p)
        np.testing.assert_allclose(X[s].detach().numpy(), X_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(y[s].detach().numpy(), y_ref, rtol=1e-12, atol=1e-12)

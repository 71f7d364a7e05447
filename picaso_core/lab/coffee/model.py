"""COFFEE (COntext From FEEdback, Zattra et al.) and the S6 layer it is compared with: the
single-input single-output (SISO) layers of eq. 2-7 and the architectures of appendices E/G
(induction head) and H (digits), pure torch.

    python -m picaso_core.lab.coffee --task ih --model coffee     # table 1, COFFEE (784 parameters; cli.py)

Glossary (paper symbol -> code name, shape):
    b, l        batch, sequence length
    D           embedding dimension = number of SISO subsystems Sigma^(i)            (d)
    n           state dimension of each subsystem                                    (n)
    u(k)        embedded input                                                       u (b, l, D)
    x(k)^(i)    state of subsystem i                                                 x (b, D, n); all steps X (b, l, D, n)
    lambda      diagonal of A^(i)                                                    lam (D, n)
    Delta       S6: softplus(W_D u(k)) (eq. 3), one per feature                      (b, l, D)
                COFFEE: sigmoid(w_D^(i) * x(k-1)^(i)) (eq. 5), one per state entry   (b, D, n)
    W_B, W_C    S6's shared input/output maps (eq. 2)                                w_b, w_c (n, D)
    W_D         S6's step-size map (eq. 3)                                           w_d (D, D)
    w_D^(i)     COFFEE's feedback vectors (eq. 5)                                    wd (D, n)
    B^(i), C^(i) COFFEE's input/output vectors (eq. 6; eq. 7 fixes B^(i) = 1)        b (D, n), c (D, n)
    w_gamma     Remark 3's output filter                                             wg (D, n)

Each layer has a step-by-step reference (`fast=False`: the recursion as printed) and a fast path:
S6's linear recursion is a parallel (Hillis-Steele) scan in log2(l) vectorised steps; COFFEE's
feedback makes Delta(k) depend on x(k-1), so its recursion stays sequential, and the fast path is
a TorchScript loop with a hand-written adjoint (one autograd node instead of ~10 per step; see
bench/coffee_speed.py for what it saves).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LAMBDA_MIN, LAMBDA_MAX = -2.0, 0.0  # sec. 3.2: lambda in [-2, 0] keeps I + A^(i) diag(Delta) stable


# ---- S6 (eq. 2-3, appendix B) -------------------------------------------------------------------
def linear_scan(a: torch.Tensor, bu: torch.Tensor) -> torch.Tensor:
    """All states of x(k) = a(k) * x(k-1) + bu(k), x(-1) = 0, as a Hillis-Steele scan: log2(l)
    vectorised steps of the associative map (a1, b1) o (a2, b2) = (a1 a2, a2 b1 + b2).

    Args: a, bu (b, l, ...). Returns X (b, l, ...)."""
    a, x = a.clone(), bu.clone()
    off = 1
    while off < x.shape[1]:
        x = torch.cat([x[:, :off], a[:, off:] * x[:, :-off] + x[:, off:]], 1)
        a = torch.cat([a[:, :off], a[:, off:] * a[:, :-off]], 1)
        off *= 2
    return x


class S6(nn.Module):
    """D parallel SISO S6 subsystems (eq. 2, 3; appendix B), 3nD + D^2 parameters, G.2's init."""

    def __init__(self, d: int, n: int):
        super().__init__()
        # lambda_j = -exp(mu_j) (appendix B), HiPPO init lambda_j = -(j + 1) (G.2)
        self.mu = nn.Parameter(torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(d, 1))
        self.w_b = nn.Parameter(torch.randn(n, d))
        self.w_c = nn.Parameter(torch.randn(n, d))
        self.w_d = nn.Parameter(torch.randn(d, d))

    def coefficients(self, u: torch.Tensor):
        """ZOH-discretised coefficients of eq. 2 for u (b, l, D): abar, bbar*u (b, l, D, n), C(k) (b, l, n)."""
        lam = -torch.exp(self.mu)                                   # (D, n)
        delta = F.softplus(u @ self.w_d.T)                          # (b, l, D), eq. 3
        abar = torch.exp(lam * delta[..., None])                    # (b, l, D, n)
        bk = u @ self.w_b.T                                         # (b, l, n): B(k) = W_B u(k)
        bu = (abar - 1) / lam * bk[:, :, None, :] * u[..., None]    # A^-1 (e^{A Delta} - I) B(k) u_i(k)
        return abar, bu, u @ self.w_c.T

    def forward(self, u: torch.Tensor, fast: bool = True, tail: int | None = None):
        """u (b, l, D) -> (y (b, l, D), X (b, l, D, n)); X[:, -1] is the state after the sequence.
        tail: compute y for the last `tail` steps only (y (b, tail, D)), all a loss at the end needs."""
        abar, bu, ck = self.coefficients(u)
        if fast:
            X = linear_scan(abar, bu)
        else:
            x, xs = torch.zeros_like(bu[:, 0]), []
            for k in range(u.shape[1]):
                x = abar[:, k] * x + bu[:, k]
                xs.append(x)
            X = torch.stack(xs, 1)
        t = -(tail or X.shape[1])
        return (X[:, t:] * ck[:, t:, None, :]).sum(-1), X

    def project_(self) -> None:
        """Nothing to project: lambda = -exp(mu) is negative by construction."""


# ---- COFFEE (eq. 5-7, Remark 3) -----------------------------------------------------------------
def coffee_step(x: torch.Tensor, v: torch.Tensor, lam: torch.Tensor, wd: torch.Tensor) -> torch.Tensor:
    """One step of eq. 7 (eq. 6 with v = B^(i) u_i(k)): Delta = sigmoid(w_D * x(k-1)) (eq. 5),
    x(k) = (I + A diag(Delta)) x(k-1) + Delta * v."""
    delta = torch.sigmoid(wd * x)
    return x + delta * (lam * x + v)


@torch.jit.script
def _coffee_forward(v: torch.Tensor, lam: torch.Tensor, wd: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    xs = []
    x = x0
    for k in range(v.shape[1]):
        x = x + torch.sigmoid(wd * x) * (lam * x + v[:, k])
        xs.append(x)
    return torch.stack(xs, 1)


@torch.jit.script
def _coffee_backward(gX: torch.Tensor, X: torch.Tensor, v: torch.Tensor, lam: torch.Tensor, wd: torch.Tensor,
                     x0: torch.Tensor):
    # Adjoint of eq. 7, entry by entry (the Jacobian is diagonal, Remark 2):
    #   dx(k)/dx(k-1) = 1 + s lam + s (1 - s) wd (lam x(k-1) + v(k)),  dx(k)/dv(k) = s,
    #   dx(k)/dlam = s x(k-1),  dx(k)/dwd = s (1 - s) x(k-1) (lam x(k-1) + v(k)),  s = sigmoid(wd x(k-1))
    adj = torch.zeros_like(x0)
    glam = torch.zeros_like(x0)
    gwd = torch.zeros_like(x0)
    gv = torch.empty_like(v)
    for k in range(v.shape[1] - 1, -1, -1):
        xp = X[:, k - 1] if k > 0 else x0
        adj = adj + gX[:, k]
        s = torch.sigmoid(wd * xp)
        r = lam * xp + v[:, k]
        gv[:, k] = adj * s
        dz = adj * r * s * (1 - s)
        glam = glam + adj * s * xp
        gwd = gwd + dz * xp
        adj = adj * (1 + s * lam) + dz * wd
    return gv, glam.sum(0), gwd.sum(0), adj


class _CoffeeScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v, lam, wd, x0):
        X = _coffee_forward(v, lam, wd, x0)
        ctx.save_for_backward(X, v, lam, wd, x0)
        return X

    @staticmethod
    def backward(ctx, gX):
        X, v, lam, wd, x0 = ctx.saved_tensors
        gv, glam, gwd, gx0 = _coffee_backward(gX.contiguous(), X, v, lam, wd, x0)
        return gv, glam, gwd, gx0


def coffee_scan(v: torch.Tensor, lam: torch.Tensor, wd: torch.Tensor, x0: torch.Tensor | None = None,
                fast: bool = True) -> torch.Tensor:
    """All states of eq. 7. Args: v (b, l, D, n) = B^(i) u_i(k); lam, wd (D, n); x0 (b, D, n) or None
    (zeros). Returns X (b, l, D, n). fast=False is the step-by-step reference (autograd per step)."""
    x0 = torch.zeros_like(v[:, 0]) if x0 is None else x0
    if not fast:
        x, xs = x0, []
        for k in range(v.shape[1]):
            x = coffee_step(x, v[:, k], lam, wd)
            xs.append(x)
        return torch.stack(xs, 1)
    return _CoffeeScan.apply(v.contiguous(), lam, wd, x0.contiguous())


class Coffee(nn.Module):
    """D parallel COFFEE SISO subsystems (eq. 5-7), G.2's init: lambda = 0, C, w_D ~ N(0, 1).

    learn_b: eq. 6 (B^(i) learned, init 1) instead of eq. 7 (B^(i) = 1, Prop. 1); +nD parameters.
    output_filter: Remark 3, y = (C gamma) x with gamma = sigmoid(w_gamma^T x); +nD parameters.
    Parameters: 3nD (eq. 7), 4nD with learn_b, +nD with output_filter."""

    def __init__(self, d: int, n: int, learn_b: bool = False, output_filter: bool = False):
        super().__init__()
        self.lam = nn.Parameter(torch.zeros(d, n))
        self.c = nn.Parameter(torch.randn(d, n))
        self.wd = nn.Parameter(torch.randn(d, n))
        self.b = nn.Parameter(torch.ones(d, n)) if learn_b else None
        # Remark 3 gives no init; zeros start every gamma at 1/2, the filter's neutral point
        self.wg = nn.Parameter(torch.zeros(d, n)) if output_filter else None

    def forward(self, u: torch.Tensor, fast: bool = True, tail: int | None = None):
        """u (b, l, D) -> (y (b, l, D), X (b, l, D, n)); tail as in S6.forward."""
        n = self.lam.shape[1]
        v = u[..., None].expand(*u.shape, n) if self.b is None else u[..., None] * self.b   # (b, l, D, n)
        # the constraint is kept by project_() after each optimiser step; the clamp here also covers
        # a model whose parameters were set by hand
        X = coffee_scan(v, self.lam.clamp(LAMBDA_MIN, LAMBDA_MAX), self.wd, fast=fast)
        Xo = X[:, -(tail or X.shape[1]):]
        if self.wg is not None:
            gamma = torch.sigmoid((Xo * self.wg).sum(-1, keepdim=True))    # (b, l, D, 1), Remark 3
            return (Xo * self.c * gamma).sum(-1), X
        return (Xo * self.c).sum(-1), X

    @torch.no_grad()
    def project_(self) -> None:
        """Projected gradient step for sec. 3.2's constraint lambda in [-2, 0]."""
        self.lam.clamp_(LAMBDA_MIN, LAMBDA_MAX)


# ---- architectures ------------------------------------------------------------------------------
def softmin_logits(y: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
    """Appendix E, steps 5-7: Euclidean distances of y (..., D) to every embedding (m, D), softmin,
    then logit(p) = log p - log(1 - p). Returns (..., m); argmax = the nearest embedding (Remark 7).
    log(1 - p_i) is computed as logsumexp_{j != i}(-d_j) - logsumexp_j(-d_j), stable when p_i -> 1."""
    dist = torch.sqrt(((y[..., None, :] - emb) ** 2).sum(-1) + 1e-12)      # (..., m)
    z = -dist
    m = emb.shape[0]
    others = z[..., None, :].expand(*z.shape, m).masked_fill(torch.eye(m, dtype=torch.bool, device=z.device), -math.inf)
    return z - torch.logsumexp(others, -1)     # log p_i - log(1 - p_i); the common logsumexp cancels


class IHModel(nn.Module):
    """Appendix E's core module: embedding (m, D) -> one SISO layer -> softmin logits over the
    embeddings. COFFEE's 'full' variant (eq. 6 + Remark 3, free embedding) has 5nD + mD parameters,
    784 at table 1's n = 8, D = 16, m = 9 (as many as S6's 3nD + D^2 + mD); 'minimal' (eq. 7, one
    embedding fixed to 1 by Prop. 1) has 3nD + (m - 1)D, 99 at table 2's n = 1, D = 9."""

    def __init__(self, model: str, n: int, d: int, m: int, variant: str = "full", embedding=None,
                 fix_embedding: bool | None = None):
        super().__init__()
        if model not in ("coffee", "s6"):
            raise ValueError(f"unknown model {model!r}: use 'coffee' or 's6'")
        if variant not in ("full", "minimal"):
            raise ValueError(f"unknown variant {variant!r}: use 'full' or 'minimal'")
        self.kind, self.variant = model, variant
        if model == "s6":
            self.layer = S6(d, n)
            emb = torch.randn(m, d)                                              # G.2: N(0, 1)
        else:
            self.layer = Coffee(d, n, learn_b=variant == "full", output_filter=variant == "full")
            emb = orthonormal_embedding(m, d)
        if embedding is not None:
            emb = torch.as_tensor(embedding, dtype=torch.float32)
        self.fixed = model == "coffee" and variant == "minimal" if fix_embedding is None else fix_embedding
        if self.fixed:  # Prop. 1 (ii): symbol 0's embedding is 1; the others are learned
            self.register_buffer("emb0", torch.ones(1, d))
            self.emb_rest = nn.Parameter(emb[1:].clone())
        else:
            self.emb = nn.Parameter(emb.clone())

    def embedding(self) -> torch.Tensor:
        return torch.cat([self.emb0, self.emb_rest]) if self.fixed else self.emb

    def forward(self, tokens: torch.Tensor, fast: bool = True, tail: int | None = None):
        """tokens (b, l) -> (y (b, l, D), X (b, l, D, n)); logits at chosen positions by `logits`;
        tail: y for the last `tail` positions only."""
        return self.layer(self.embedding()[tokens], fast=fast, tail=tail)

    def logits(self, y: torch.Tensor) -> torch.Tensor:
        return softmin_logits(y, self.embedding())

    def project_(self) -> None:
        self.layer.project_()


def orthonormal_embedding(m: int, d: int) -> torch.Tensor:
    """G.2: Q^T from the QR decomposition of a uniform [0, 1) (D, m) matrix; orthonormal rows need
    D >= m, otherwise (the IH0 toy, D = 2) rows of N(0, 1/D)."""
    if d < m:
        return torch.randn(m, d) / math.sqrt(d)
    q, _ = torch.linalg.qr(torch.rand(d, m))
    return q.T.contiguous()


class DigitsModel(nn.Module):
    """Appendix H, fig. 3: an image (b, H, W) read as four sequences (rows, columns, rows reversed,
    columns reversed), one SISO layer each with D = W features; the last output of each, stacked
    (4D), -> Linear(4D, D) -> GELU -> Linear(D, 10). COFFEE layers follow eq. 7 (3nD each, the pixel
    rows are the inputs, no embedding); MNIST 25x25 with n = 2: 3385 parameters, 3585 with the output
    filter, S6 5885 (the table's 5585 is a typo: the text and 4(3nD + D^2) + 2785 give 5885)."""

    def __init__(self, model: str, n: int, d: int, output_filter: bool = False, classes: int = 10):
        super().__init__()
        if model not in ("coffee", "s6"):
            raise ValueError(f"unknown model {model!r}: use 'coffee' or 's6'")
        make = (lambda: S6(d, n)) if model == "s6" else (lambda: Coffee(d, n, output_filter=output_filter))
        self.kind = model
        self.layers = nn.ModuleList(make() for _ in range(4))
        self.head = nn.Sequential(nn.Linear(4 * d, d), nn.GELU(), nn.Linear(d, classes))

    def forward(self, img: torch.Tensor, fast: bool = True) -> torch.Tensor:
        """img (b, H, W) with H = W = D -> class logits (b, classes)."""
        cols = img.transpose(1, 2)
        views = (img, cols, img.flip(1), cols.flip(1))
        last = [layer(v, fast=fast, tail=1)[0][:, -1] for layer, v in zip(self.layers, views)]   # 4 x (b, D)
        return self.head(torch.cat(last, -1))

    def project_(self) -> None:
        for layer in self.layers:
            layer.project_()


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

"""token_nll: every position's NLL in the row layout, equal to the definition."""

import math

import torch

from picaso_core.engine.losses import token_nll


def test_token_nll_is_the_definition():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 11, (3, 5), generator=g)
    targets[1, 2] = -100
    got = token_nll(logits, targets)
    assert got.shape == (3, 5)
    for i in range(3):
        for j in range(5):
            if targets[i, j] == -100:
                assert got[i, j] == 0
                continue
            row = logits[i, j]
            want = math.log(sum(math.exp(v) for v in row.tolist())) - row[targets[i, j]].item()
            assert abs(got[i, j].item() - want) < 1e-12


def test_token_nll_keeps_gradients():
    logits = torch.randn(2, 4, 7, requires_grad=True)
    token_nll(logits, torch.randint(0, 7, (2, 4))).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()

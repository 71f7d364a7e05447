"""Mimetic initialisation (picaso_core/engine/init.py): the layer it builds, and that it makes copying from
context learnable in a few steps where mamba_ssm's default init is still at chance."""

import math

import pytest
import torch

from picaso_core import ModelConfig, SSMLanguageModel
from picaso_core.engine.init import mimetic_init_


def small(layer="Mamba2", seed=0, d_model=64, n_layer=2):
    torch.manual_seed(seed)
    ssm = dict(layer=layer, d_state=16, headdim=16, chunk_size=16) if layer == "Mamba2" else dict(layer=layer, d_state=8)
    return SSMLanguageModel(ModelConfig(d_model=d_model, n_layer=n_layer, vocab_size=128, ssm_cfg=ssm))


@pytest.mark.parametrize("key_len", [1, 3])
def test_layers_become_previous_token_key_linear_attention(key_len):
    model = mimetic_init_(small(), key_len=key_len)
    cfg = model.config
    E, GN, K = cfg.d_inner, cfg.ssm_cfg.d_state, cfg.ssm_cfg.d_conv
    for layer in model.backbone.layers:
        m = layer.mixer
        W = m.in_proj.weight
        torch.testing.assert_close(W[2 * E + GN : 2 * E + 2 * GN], W[2 * E : 2 * E + GN], rtol=0, atol=0)
        w = m.conv1d.weight[:, 0]  # [channels, K]; tap K-1 = current token
        taps = torch.tensor([0.5**i for i in range(key_len)])
        assert torch.equal(w[:E], torch.nn.functional.one_hot(torch.tensor(K - 1), K).float().expand(E, K))
        assert torch.equal(w[E : E + GN, K - 1 - key_len : K - 1].flip(-1), taps.expand(GN, key_len))
        assert torch.equal(w[E + GN :, K - key_len :].flip(-1), taps.expand(GN, key_len))
        assert w[E : E + GN].sum(-1).allclose(taps.sum().expand(GN)) and w[E : E + GN, K - 1].eq(0).all()
        A = m.A_log.exp()
        assert A.min() >= 0.01 and A.max() <= 1.0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="Mamba-2"):
        mimetic_init_(small("Mamba1"))
    with pytest.raises(ValueError, match="key_len"):
        mimetic_init_(small(), key_len=4)  # d_conv 4 holds at most 3 earlier tokens
    with pytest.raises(ValueError, match="a_range"):
        mimetic_init_(small(), a_range=(0.0, 1.0))


def _copy_loss_after_training(model, steps=120, half=12, vocab=32, batch=16, seed=0):
    """Train on `x x` (x: `half` random tokens) with the loss on the second copy only; return the
    mean second-copy loss of the last 10 steps (chance: ln(vocab))."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    last = []
    for step in range(steps):
        a = torch.randint(4, 4 + vocab, (batch, half), generator=g)
        x = torch.cat([a, a], 1)
        logits, _ = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits[:, half:].flatten(0, 1), x[:, half + 1 :].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= steps - 10:
            last.append(loss.item())
    return sum(last) / len(last)


def test_mimetic_init_learns_to_copy_where_the_default_init_has_not_started():
    chance = math.log(32)
    default = _copy_loss_after_training(small(seed=1))
    mimetic = _copy_loss_after_training(mimetic_init_(small(seed=1)))
    # measured: default 3.48, mimetic 2.76 nats after 120 steps (chance 3.47)
    assert default > chance - 0.2, default  # still at chance
    assert mimetic < default - 0.5, (default, mimetic)

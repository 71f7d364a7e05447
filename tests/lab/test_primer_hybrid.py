"""The Primer's model views on a hybrid (issue 49): lab.primer captures the scans of a hybrid's Mamba-2
layers (Mamba2Mixers, as a pure Mamba-2's; its attention layers run none), numbered among the Mamba
layers. Checked on a tiny random Nemotron-H (M-M*-M-M-): one capture per Mamba layer, in the per-head
form of a pure Mamba-2 (heads x head dim, groups repeated per head), the semiseparable matrix M of each
Mamba layer reproducing that layer's scan, and a layer past the Mamba layers refused."""

import pytest
import torch

from picaso_core.engine.hybrid import HybridLanguageModel
from picaso_core.engine.hybrid_config import HybridConfig
from picaso_core.lab import primer as lab

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():
    cfg = transformers.NemotronHConfig(
        vocab_size=300, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        hybrid_override_pattern="M-M*-M-M-", head_dim=16, intermediate_size=96, mamba_num_heads=8,
        mamba_head_dim=16, n_groups=2, ssm_state_size=8, chunk_size=8)
    torch.manual_seed(0)
    return HybridLanguageModel(HybridConfig.from_transformers(cfg.to_dict())).eval()


IDS = list(range(5, 29))


def test_capture_reads_the_mamba_layers_of_a_hybrid(model):
    cfg = model.config
    assert lab.mamba_layers(cfg) == [0, 2, 5, 7]  # the M's of M-M*-M-M-
    layers = lab.capture_layers(model, IDS)
    assert len(layers) == cfg.n_ssm_layers == 4
    T, H, P, N = len(IDS), cfg.nheads, cfg.ssm_cfg.headdim, cfg.ssm_cfg.d_state
    for L in layers:
        assert L["x"].shape == (T, H, P) and L["dt"].shape == (T, H) and L["A"].shape == (H, N)
        assert L["B"].shape == L["C"].shape == (T, H, N) and L["y"].shape == (T, H, P)
        # two groups of 4 heads: a head's B is its group's
        assert torch.equal(L["B"][:, 0], L["B"][:, 3]) and not torch.equal(L["B"][:, 0], L["B"][:, 4])
    assert len(lab.decay_profile(model, IDS)["layers"]) == 4


@pytest.mark.parametrize("layer", range(4))
def test_semiseparable_matrix_reproduces_each_mamba_layers_scan(model, layer):
    d = lab.semiseparable(model, IDS, layer, head=5)
    assert d["relative_error"] <= 1e-4, d["relative_error"]


def test_a_layer_past_the_mamba_layers_is_refused(model):
    with pytest.raises(ValueError, match="layer must be from 0 to 3"):
        lab.semiseparable(model, IDS, 4, head=0)

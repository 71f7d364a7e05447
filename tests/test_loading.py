"""load_model against transformers' reference implementation and both folder layouts."""

import json
import shutil
import time

import pytest
import torch

from picaso_core import ModelConfig, load_model
from picaso_core.loading import save_model
from tests.conftest import TINY_VOCAB, tiny_model

transformers = pytest.importorskip("transformers")


def _randomise_ssm_params(model):
    """Random init leaves D = 1 and norms = 1; perturb every parameter so parity is not luck."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "dt_bias", "D")) or "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))


def _hf_model(family, ngroups=1):
    torch.manual_seed(0)
    if family == "Mamba2":
        cfg = transformers.Mamba2Config(
            vocab_size=TINY_VOCAB, hidden_size=32, num_hidden_layers=2, state_size=8, expand=2,
            head_dim=8, num_heads=8, n_groups=ngroups, conv_kernel=4, chunk_size=8,
            tie_word_embeddings=True, residual_in_fp32=True)
        model = transformers.Mamba2ForCausalLM(cfg)
    else:
        cfg = transformers.MambaConfig(vocab_size=TINY_VOCAB, hidden_size=32, num_hidden_layers=2,
                                       state_size=4, expand=2, conv_kernel=4, tie_word_embeddings=True)
        model = transformers.MambaForCausalLM(cfg)
    _randomise_ssm_params(model)
    return model.eval()


@pytest.mark.parametrize("family,ngroups", [("Mamba2", 1), ("Mamba2", 2), ("Mamba1", 1)])
def test_logits_match_transformers(tmp_path, tokenizer_json, family, ngroups):
    hf = _hf_model(family, ngroups)
    hf.save_pretrained(tmp_path)
    shutil.copy(tokenizer_json, tmp_path / "tokenizer.json")
    ours = load_model(str(tmp_path))
    assert ours.config.family == family and ours.config.ssm_cfg.ngroups == ngroups
    ids = torch.randint(0, TINY_VOCAB, (2, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits
    got, _ = ours(ids)
    assert (got - ref).abs().max().item() <= 1e-4


def test_mamba_ssm_layout_with_pytorch_bin(tmp_path, tokenizer_json):
    """The state-spaces layout: config.json (mamba_ssm schema) + pytorch_model.bin with every key,
    the tied lm_head included, read with torch.load(weights_only=True)."""
    src = tiny_model("Mamba2", seed=4)
    (tmp_path / "config.json").write_text(json.dumps({
        "d_model": 32, "n_layer": 2, "vocab_size": TINY_VOCAB, "d_intermediate": 0,
        "ssm_cfg": {"layer": "Mamba2", "d_state": 8, "headdim": 8, "ngroups": 2, "chunk_size": 8},
        "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": True,
        "fused_add_norm": True, "pad_vocab_size_multiple": 8, "tie_embeddings": True}))
    torch.save(src.state_dict(), tmp_path / "pytorch_model.bin")
    shutil.copy(tokenizer_json, tmp_path / "tokenizer.json")
    m = load_model(str(tmp_path))
    ids = torch.randint(0, TINY_VOCAB, (1, 15))
    assert torch.equal(m(ids)[0], src(ids)[0])
    assert m.tokenizer.decode(m.tokenizer.encode("Velmora was founded")) == "Velmora was founded"


def test_save_model_round_trip(tmp_path, tiny_model_dir):
    m = load_model(str(tiny_model_dir))
    save_model(m, tmp_path / "copy")
    m2 = load_model(str(tmp_path / "copy"))
    assert m2.fingerprint() == m.fingerprint()
    ids = torch.randint(0, TINY_VOCAB, (1, 9))
    assert torch.equal(m(ids)[0], m2(ids)[0])


def test_fingerprint_depends_on_weights(tiny_model_dir):
    a, b = load_model(str(tiny_model_dir)), load_model(str(tiny_model_dir))
    assert a.fingerprint() == b.fingerprint()
    with torch.no_grad():
        b.backbone.norm_f.weight[0] += 1e-3
    assert b.fingerprint(refresh=True) != a.fingerprint()


def test_missing_and_mismatched_weights_name_the_key(tmp_path, tiny_model_dir):
    from safetensors.torch import load_file, save_file

    sd = load_file(tiny_model_dir / "model.safetensors")
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(tiny_model_dir / f, tmp_path / f)
    missing = dict(sd)
    missing.pop("backbone.layers.1.mixer.A_log")
    save_file(missing, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"backbone\.layers\.1\.mixer\.A_log"):
        load_model(str(tmp_path))
    bad = dict(sd)
    bad["backbone.layers.0.mixer.D"] = torch.ones(3)
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"backbone\.layers\.0\.mixer\.D has shape \[3\]"):
        load_model(str(tmp_path))
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        load_model(str(tmp_path))


def test_hub_id_offline_fails_fast_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # empty cache: nothing to fall back on
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match="demo"):
        load_model("state-spaces/mamba2-130m")
    assert time.perf_counter() - t0 < 10


def test_hub_id_without_network_fails_fast_naming_the_fix(monkeypatch, tmp_path):
    """Not in offline mode: the one short metadata request fails (no network here, a 404 online:
    the repo does not exist, so nothing can be downloaded) before any download retries."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match="demo"):
        load_model("picaso-explorer-tests/no-such-model")
    assert time.perf_counter() - t0 < 15


def test_not_a_model_name_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="demo"):
        load_model("no/such/folder/here")


def test_config_readers():
    c = ModelConfig.from_dict({"d_model": 768, "n_layer": 24, "vocab_size": 50277,
                               "ssm_cfg": {"layer": "Mamba2"}, "pad_vocab_size_multiple": 16})
    assert (c.nheads, c.ssm_cfg.d_state, c.padded_vocab_size) == (24, 128, 50288)
    c1 = ModelConfig.from_dict({"d_model": 768, "n_layer": 24, "vocab_size": 50277, "ssm_cfg": {}})
    assert c1.family == "Mamba1" and c1.ssm_cfg.d_state == 16 and c1.dt_rank == 48
    with pytest.raises(ValueError, match="layer"):
        ModelConfig.from_dict({"d_model": 8, "n_layer": 1, "ssm_cfg": {"layer": "Mamba3"}})
    with pytest.raises(ValueError, match="model_type"):
        ModelConfig.from_transformers({"model_type": "llama"})


@pytest.mark.parametrize("family,ngroups", [("Mamba2", 2), ("Mamba1", 1)])
def test_gradients_match_transformers(tmp_path, tokenizer_json, family, ngroups):
    """Backward parity: the same loss gives the same gradient for every weight (training and
    fine-tuning through this engine are the reference model's training)."""
    hf = _hf_model(family, ngroups).train()
    hf.save_pretrained(tmp_path)
    shutil.copy(tokenizer_json, tmp_path / "tokenizer.json")
    ours = load_model(str(tmp_path)).train()
    ids = torch.randint(0, TINY_VOCAB, (2, 19), generator=torch.Generator().manual_seed(2))

    def loss(logits):
        return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())

    loss(hf(ids).logits).backward()
    loss(ours(ids)[0]).backward()
    ref = {k.replace("backbone.embeddings.", "backbone.embedding."): p.grad for k, p in hf.named_parameters()}
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        scale = max(1.0, ref[name].abs().max().item())
        assert (p.grad - ref[name]).abs().max().item() <= 1e-4 * scale, name

"""load_model against transformers' reference implementation and both folder layouts."""

import json
import shutil
import time

import pytest
import torch

from picaso_core import ModelConfig, load_model
from picaso_core.engine.loading import save_model
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


def test_loading_leaves_the_global_generator_alone(tiny_model_dir):
    """The app loads the fine-tuned model in a handler thread: the throwaway initial weights must not
    move torch's generator under the other threads (engine/rng.py)."""
    torch.manual_seed(5)
    before = torch.get_rng_state()
    load_model(str(tiny_model_dir))
    assert torch.equal(torch.get_rng_state(), before)


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


def _eos_checkpoint(folder, special, config_eos=None):
    """A transformers-layout Mamba-2 checkpoint (as save_pretrained writes it) whose tokenizer.json
    has the special tokens `special` and no '<|endoftext|>'."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = _hf_model("Mamba2")
    hf.config.eos_token_id = hf.generation_config.eos_token_id = config_eos
    hf.save_pretrained(folder)
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["Velmora was founded in 1423 by Osric Dallen."] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_checkpoint_with_its_own_eos_loads_and_generation_stops_there(tmp_path):
    """A checkpoint whose EOS is '</s>' (named by config.json) loads, and generate stops at it."""
    m = load_model(str(_eos_checkpoint(tmp_path, ["<unk>", "<s>", "</s>"], config_eos=2)))
    assert (m.tokenizer.eos_token, m.tokenizer.eos_id) == ("</s>", 2)
    with torch.no_grad():  # make '</s>' the certain next token: generation must stop right after it
        m.lm_head.weight[2] += 100 * m.backbone.norm_f.weight.sign()
    assert m.generate(m.tokenizer.encode("Velmora"), max_new_tokens=10, temperature=0) == []  # EOS not returned


def test_checkpoint_without_any_eos_loads_and_generates_to_its_budget(tmp_path):
    folder = _eos_checkpoint(tmp_path, ["<unk>", "<pad>"], config_eos=None)
    with pytest.warns(UserWarning, match="names no end-of-text token"):
        m = load_model(str(folder))
    assert m.tokenizer.eos_id is None
    assert len(m.generate(m.tokenizer.encode("Velmora"), max_new_tokens=7, temperature=0)) == 7

"""The bundled hybrid demo model `demo-hybrid` (issue 49, item 4): a Nemotron-H in transformers' layout that
picaso_core and transformers' own NemotronHForCausalLM read to the same logits, made by train_demo.py's
hybrid recipe, whose training path is smoke-tested here on a tiny config."""

import json

import pytest
import torch
from conftest import ROOT, script_module

from picaso_core import load_model
from picaso_core.data import load_corpus
from picaso_core.data.demo_world import CONTEXT_SEP
from picaso_core.engine.hybrid import HybridLanguageModel
from picaso_core.engine.loading import BUNDLED
from picaso_core.engine.model import Mamba2Mixer

transformers = pytest.importorskip("transformers")

FOLDER = BUNDLED["demo-hybrid"][0]


@pytest.fixture(scope="module")
def train_demo():
    return script_module("train_demo")


pytestmark = pytest.mark.usefixtures("one_thread")  # small models on a shared machine


@pytest.fixture(scope="module")
def model():
    return load_model("demo-hybrid")


def test_loads_through_picaso_and_transformers_with_equal_logits(model):
    s = load_corpus("demo", "test").samples[0]
    text = CONTEXT_SEP.join(c for _, c in s.contexts) + CONTEXT_SEP + s.query + s.continuation
    ids = torch.tensor([model.tokenizer.encode(text)])
    assert ids.shape[1] > 2 * model.config.ssm_cfg.chunk_size  # several scan chunks, attention over them all
    hf = transformers.NemotronHForCausalLM.from_pretrained(FOLDER, dtype=torch.float32).eval()
    with torch.no_grad():
        ours, theirs = model(ids)[0], hf(ids).logits.float()
    assert ours.dtype == torch.float32 and ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() <= 1e-4
    # trained: the sample's tokens cost far less than the uniform guess's ln(V) ≈ 8.3 nats (random init: ~8.4)
    loss = torch.nn.functional.cross_entropy(ours[0, :-1], ids[0, 1:]).item()
    assert loss < 0.6 * torch.log(torch.tensor(float(ours.shape[-1]))).item()
    # the demo tokenizer ships with it and is the demo model's
    assert model.tokenizer.vocab_size == load_model("demo").tokenizer.vocab_size


def test_config_is_a_position_free_nemotron_h_with_one_attention_layer_in_four_or_five(model, train_demo):
    cfg = model.config
    assert isinstance(model, HybridLanguageModel) and cfg.model_type == "nemotron_h"
    assert cfg.rope_theta is None and cfg.rotary_dim == 0  # position-free attention
    mixing = cfg.n_attn_layers + cfg.n_ssm_layers
    assert cfg.n_attn_layers >= 1 and 4 <= mixing / cfg.n_attn_layers <= 5
    assert "mlp" in cfg.layer_types  # Nemotron-H's MLP blocks
    # the shipped folder is what the recipe builds (scripts/train_demo.py --arch hybrid): hybrid_config(...) as written
    shipped = json.loads((FOLDER / "config.json").read_text())
    assert shipped == train_demo.hybrid_config(model.tokenizer.vocab_size, model.tokenizer.eos_id)
    log = json.loads((FOLDER / "train_log.json").read_text())
    assert log["args"]["arch"] == "hybrid" and log["args"]["init"] is None  # from random weights, not a warm start
    demo = json.loads((ROOT / "assets" / "demo_model" / "train_log.json").read_text())["args"]
    recipe = ("minutes", "batch", "seq_len", "lr", "warmup", "seed", "key_len", "init_scheme", "mix", "copy_drills")
    assert {k: log["args"][k] for k in recipe} == {k: demo[k] for k in recipe}  # the demo model's recipe
    assert 2e6 < sum(p.numel() for p in model.parameters()) < 10e6  # a few million parameters


TINY = {"hidden_size": 32, "hybrid_override_pattern": "M*-", "num_hidden_layers": 3, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64, "mamba_num_heads": 4, "mamba_head_dim": 16,
        "ssm_state_size": 8, "chunk_size": 16}


def test_hybrid_training_path_runs_and_writes_a_loadable_nemotron_h(train_demo, monkeypatch, tmp_path):
    recipe = train_demo.hybrid_config
    monkeypatch.setattr(train_demo, "hybrid_config", lambda v, eos: {**recipe(v, eos), **TINY})
    built = []
    build = train_demo.build_hybrid
    monkeypatch.setattr(train_demo, "build_hybrid", lambda *a: built.append(build(*a)) or built[-1])
    train_demo.main(["--arch", "hybrid", "--max-steps", "2", "--minutes", "5", "--batch", "2", "--seq-len", "128",
                     "--no-compile", "--threads", "1", "--log-every", "1", "--save-dtype", "bfloat16",
                     "--out", str(tmp_path)])
    log = json.loads((tmp_path / "train_log.json").read_text())
    assert log["steps"] == 2 and log["tokens"] == 2 * 2 * 128 and log["args"]["arch"] == "hybrid"
    assert all(0 < e["loss"] < 20 for e in log["log"])
    saved = load_model(tmp_path)
    assert isinstance(saved, HybridLanguageModel) and saved.config.layer_types == ["mamba", "attention", "mlp"]
    assert json.loads((tmp_path / "config.json").read_text())["hybrid_override_pattern"] == "M*-"
    # trained weights, stored in bfloat16 and read back in float32
    assert saved.model.embeddings.weight.dtype == torch.float32
    assert torch.equal(saved.model.embeddings.weight, built[0].model.embeddings.weight.detach().bfloat16().float())


def test_hybrid_init_makes_mamba_layers_mimetic(train_demo):
    hf = {**train_demo.hybrid_config(4096, 0), **TINY, "hybrid_override_pattern": "M*-M", "num_hidden_layers": 4}
    m = train_demo.build_hybrid(hf, "mimetic", 1)
    mambas = [layer.mixer for layer in m.model.layers if isinstance(layer.mixer, Mamba2Mixer)]
    assert len(mambas) == 2
    E, GN = 4 * 16, 8
    for mixer in mambas:
        W = mixer.in_proj.weight
        assert torch.equal(W[2 * E + GN: 2 * E + 2 * GN], W[2 * E: 2 * E + GN])  # W_C = W_B: a previous-token key
        assert mixer.conv1d.weight[:E, 0, -1].eq(1).all() and mixer.conv1d.weight[:E, 0, :-1].eq(0).all()
    plain = train_demo.build_hybrid(hf, "default", 1)
    W = plain.model.layers[0].mixer.in_proj.weight
    assert not torch.equal(W[2 * E + GN: 2 * E + 2 * GN], W[2 * E: 2 * E + GN])


def test_the_graft_computes_the_demo_models_function_exactly(train_demo):
    """scripts/graft_demo_hybrid.py, demo-hybrid's starting point: the demo model's blocks in the hybrid
    layout, the new blocks' output projections at zero, so the logits are the demo model's."""
    graft = script_module("graft_demo_hybrid")
    from picaso_core.engine.hybrid_config import HybridConfig

    base = load_model("demo")
    tok = base.tokenizer
    hybrid = HybridLanguageModel(HybridConfig.from_transformers(
        {**train_demo.hybrid_config(tok.vocab_size, tok.eos_id), "time_step_min": 0.0,
         "time_step_limit": [0.0, float("inf")]})).eval()  # the demo model's clamp (none)
    zeroed = graft.graft(base, hybrid)
    assert len(zeroed) == 5  # the attention block's o_proj and four MLPs' down_proj
    ids = torch.tensor([tok.encode("Sifenyl is one of the older cities of the eastern province.")])
    with torch.no_grad():
        ours, theirs = hybrid(ids)[0], base(ids)[0][..., :tok.vocab_size]
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
    with torch.no_grad():  # and the grafted blocks are not identities by accident: a new block that adds
        next(p for n, p in hybrid.named_parameters() if n.endswith("o_proj.weight")).fill_(0.01)
        assert not torch.allclose(hybrid(ids)[0], theirs, atol=1e-3)

"""Hybrid Mamba-2 + attention checkpoints (Nemotron-H, Granite-4.0-H, Bamba) and Falcon-Mamba: logits
against transformers' own classes, the state of a context as a value (continuation, save / load, the
store, decoding, batched encoding) and the one-line refusals of bad folders."""

import json
import shutil

import pytest
from conftest import perturb_
import torch

from picaso_core import ContextState, load_model
from picaso_core.engine.hybrid import HybridLanguageModel
from picaso_core.engine.loading import save_model
from picaso_core.store.store import StateStore

transformers = pytest.importorskip("transformers")

V = 300
COMMON = dict(vocab_size=V, hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
MAMBA = dict(mamba_n_heads=8, mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8)


def _hf(family: str):
    """A random-weight transformers model of `family`: a few layers, at least one attention and one Mamba."""
    if family == "nemotron_h":  # Mamba-2, attention, relu² MLP, Mamba-2, MoE, MLP
        cfg = transformers.NemotronHConfig(
            **COMMON, hybrid_override_pattern="M*-ME-", head_dim=16, intermediate_size=96, mamba_num_heads=8,
            mamba_head_dim=16, n_groups=2, ssm_state_size=8, chunk_size=8, n_routed_experts=4, num_experts_per_tok=2,
            n_group=2, topk_group=1, moe_intermediate_size=32, moe_shared_expert_intermediate_size=32)
        return transformers.NemotronHForCausalLM(cfg)
    if family.startswith("granite"):  # RoPE + MoE + Granite's multipliers, or position-free and dense
        rope = family == "granite_rope_moe"
        cfg = transformers.GraniteMoeHybridConfig(
            **COMMON, **MAMBA, num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "attention"],
            shared_intermediate_size=96, intermediate_size=32, num_local_experts=4 if rope else 0,
            num_experts_per_tok=2, position_embedding_type="rope" if rope else "nope", embedding_multiplier=2.0,
            residual_multiplier=0.7, attention_multiplier=0.2, logits_scaling=1.5, tie_word_embeddings=rope)
        return transformers.GraniteMoeHybridForCausalLM(cfg)
    if family == "bamba":  # RoPE on half of each head, gated MLP
        cfg = transformers.BambaConfig(**COMMON, **MAMBA, num_hidden_layers=3, attn_layer_indices=[1],
                                       intermediate_size=96)
        return transformers.BambaForCausalLM(cfg)
    cfg = transformers.FalconMambaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, state_size=8, expand=2)
    return transformers.FalconMambaForCausalLM(cfg)


FAMILIES = ["nemotron_h", "granite_rope_moe", "granite_nope_dense", "bamba", "falcon_mamba"]
HYBRIDS = ["nemotron_h", "granite_rope_moe", "granite_nope_dense", "bamba"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models on a shared machine


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer_json):
    made = {}

    def get(family):
        if family not in made:
            torch.manual_seed(0)
            hf = _hf(family)
            perturb_(hf)
            folder = tmp_path_factory.mktemp(family)
            hf.eval().save_pretrained(folder)
            shutil.copy(tokenizer_json, folder / "tokenizer.json")
            made[family] = (folder, hf, load_model(str(folder)))
        return made[family]
    return get


def _ids(n, seed):
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(folders, family):
    _, hf, ours = folders(family)
    assert isinstance(ours, HybridLanguageModel) == (family in HYBRIDS)
    ids = torch.stack([_ids(23, 1), _ids(23, 2)])
    with torch.no_grad():
        ref = hf(ids).logits
    got, st = ours(ids)
    assert ref.abs().max() > 1.0  # not a trivially small output
    assert (got - ref).abs().max().item() <= 1e-4
    if family in HYBRIDS:
        A = ours.config.n_attn_layers
        assert st.keys.shape == (2, A, 2, 23, 16) and st.ssm.shape[1] == ours.config.n_ssm_layers


@pytest.mark.parametrize("family", FAMILIES)
def test_continuation_from_a_stored_state_equals_one_pass(folders, family, tmp_path):
    folder, hf, ours = folders(family)
    ctx, query = _ids(13, 3), _ids(9, 4)
    with torch.no_grad():
        ref = hf(torch.cat([ctx, query])[None]).logits[:, 13:]
    st = ours.encode_context(ctx)
    assert st.num_tokens == 13
    got, _ = ours(query[None], st)
    assert (got - ref).abs().max().item() <= 1e-4
    st.save(tmp_path / "s.safetensors")  # saved and loaded: the same continuation
    back = ContextState.load(tmp_path / "s.safetensors")
    assert back.shapes == st.shapes and all(torch.equal(a, b) for a, b in zip(back.to_tensors().values(),
                                                                              st.to_tensors().values()))
    got2, _ = ours(query[None], back)
    assert (got2 - ref).abs().max().item() <= 1e-4
    # the step is the forward's last position, and its keys grow by one position; its input stays as it was
    kept = {k: v.clone() for k, v in st.to_tensors().items()}
    logits, after = ours.step(query[:1], st)
    assert all(torch.equal(kept[k], v) for k, v in st.to_tensors().items())
    one, full = ours(query[:1][None], st)
    assert (logits - one[:, -1]).abs().max().item() <= 1e-4
    for a, b in zip(after.to_tensors().values(), full.to_tensors().values()):
        assert a.shape == b.shape and (a - b).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", ["nemotron_h", "granite_rope_moe", "bamba"])
def test_generate_batch_continues_each_state_as_one_pass_would(folders, family):
    _, _, ours = folders(family)
    contexts = [_ids(13, 5), _ids(4, 6)]  # rows holding different numbers of key positions
    prompt = _ids(5, 7).tolist()
    states = [ours.encode_context(c) for c in contexts] + [None]
    got = ours.generate_batch(prompt, states, max_new_tokens=7, stop_at_eos=False)
    for ctx, gen in zip(contexts + [torch.zeros(0, dtype=torch.long)], got):
        seq = torch.cat([ctx, torch.tensor(prompt)])
        want = []
        for _ in range(7):  # greedy by whole passes over everything read so far
            nxt = int(ours(seq[None])[0][0, -1, :V].argmax())
            want.append(nxt)
            seq = torch.cat([seq, torch.tensor([nxt])])
        assert gen == want


@pytest.mark.parametrize("family", ["granite_rope_moe", "bamba"])
def test_encode_contexts_batched_equals_one_at_a_time(folders, family):
    _, _, ours = folders(family)
    contexts = [_ids(n, 10 + n) for n in (5, 17, 11, 1)]
    starts = [ours.encode_context(_ids(n, 20 + n)) for n in (3, 9, 1, 6)]  # rows of different lengths
    for kw in ({}, {"states": starts}):
        batched = ours.encode_contexts(contexts, batch_size=4, **kw)
        for i, (c, got) in enumerate(zip(contexts, batched)):
            want = ours.encode_context(c, kw["states"][i] if kw else None)
            assert got.num_tokens == want.num_tokens and got.shapes == want.shapes
            for a, b in zip(got.to_tensors().values(), want.to_tensors().values()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_hybrid_state_round_trips_through_the_store(folders, tmp_path):
    _, _, ours = folders("nemotron_h")
    texts = [("a", "the cat sat on the mat"), ("b", "hello world"), ("c", "the mat")]
    store = StateStore.build(ours, texts, tmp_path / "store", progress=False)
    for cid, text in texts:
        want, got = ours.encode_context(ours.tokenizer.encode(text)), store.get(cid)
        assert got.keys is not None and got.keys.shape[-2] == got.num_tokens == want.num_tokens
        assert got.shapes == want.shapes
        for a, b in zip(got.to_tensors().values(), want.to_tensors().values()):  # the build encodes in batches
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    half = StateStore.build(ours, texts, tmp_path / "half", progress=False, dtype="float16").get("a")
    assert half.keys.dtype == torch.float32 and half.shapes == store.get("a").shapes
    assert ours.config.state_nbytes(7) - ours.config.state_nbytes(6) == ours.config.kv_nbytes_per_token()


def test_a_pure_state_is_stored_as_before_and_a_step_leaves_it_alone(tmp_path):
    from tests.conftest import tiny_model
    model = tiny_model("Mamba2")
    st = model.encode_context([1, 2, 3])
    kept = {k: v.clone() for k, v in st.to_tensors().items()}
    model.step(torch.tensor([4]), st)  # a one-row step updates copies, never the state it was given
    assert all(torch.equal(kept[k], v) for k, v in st.to_tensors().items())
    assert set(st.to_tensors()) == {"ssm", "conv", "log_decay"} and st.keys is None
    st.save(tmp_path / "p.safetensors")
    from safetensors import safe_open
    with safe_open(str(tmp_path / "p.safetensors"), "pt") as f:
        assert set(f.keys()) == {"ssm", "conv", "log_decay"} and set(f.metadata()) == {"format", "num_tokens"}


def test_save_model_writes_what_transformers_loads(folders, tmp_path):
    _, hf, ours = folders("granite_rope_moe")
    save_model(ours, tmp_path)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = _ids(11, 9)[None]
    with torch.no_grad():
        assert (again(ids).logits - hf(ids).logits).abs().max().item() <= 1e-5


def _one_line(excinfo, *parts):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for p in parts:
        assert p in msg, (p, msg)


def test_bad_folders_are_refused_in_one_line_naming_the_file_and_fix(folders, tmp_path):
    folder, _, _ = folders("nemotron_h")
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    cfg = json.loads((folder / "config.json").read_text())
    for mt in ("llama", "falcon_h1"):
        (bad / "config.json").write_text(json.dumps({**cfg, "model_type": mt}))
        with pytest.raises(ValueError) as e:
            load_model(str(bad))
        _one_line(e, "config.json", mt, "nemotron_h, granitemoehybrid, bamba")
    # the pattern says attention where the weights hold a Mamba mixer (layers 0 and 1 swapped)
    swapped = {k: v for k, v in cfg.items() if k != "layers_block_type"}
    (bad / "config.json").write_text(json.dumps({**swapped, "hybrid_override_pattern": "*M-ME-"}))
    with pytest.raises(ValueError) as e:
        load_model(str(bad))
    _one_line(e, "config.json", "hybrid_override_pattern", "layer 0 attention", "model.safetensors", "holds mamba")
    # a missing weight
    from safetensors.torch import load_file, save_file
    (bad / "config.json").write_text(json.dumps(cfg))
    sd = load_file(folder / "model.safetensors")
    sd.pop("backbone.layers.1.mixer.q_proj.weight")  # save_pretrained writes Nemotron-H's original names
    save_file(sd, str(bad / "model.safetensors"))
    with pytest.raises(ValueError) as e:
        load_model(str(bad))
    _one_line(e, "model.safetensors", "layers.1.mixer.q_proj.weight", "re-download")

"""Composition on a hybrid (issue 49 item 3): the SSM part as on a pure model, the attention layers'
keys and values joined (picaso_core.compose.attention), on tiny random hybrids built from
transformers' config classes.

What is asserted exactly: Concat is the reading of the concatenation; position-free attention makes
PICASO-R invariant to cyclic shifts and PICASO-S / Soup to any permutation (the continuation's
logits, <= 1e-5); an attention layer with nothing before it gets, from the joined keys re-rotated,
the keys the model computes for a context read at that offset; a pure model's composition is
byte for byte the paper's formula where every step is exact in float32.
"""

import copy
import itertools
import math

import pytest
import torch

from conftest import perturb_, tiny_model
from picaso_core import ContextState
from picaso_core.analysis.compose_cache import ComposeCache, state_nbytes
from picaso_core.compose import compose, compose_tokens, mean_of_rotations, nested_token_states
from picaso_core.compose.attention import shift_positions
from picaso_core.engine.hybrid import HybridLanguageModel
from picaso_core.engine.hybrid_config import HybridConfig
from picaso_core.engine.tokenizer import Tokenizer
from picaso_core.store import format as store_format
from picaso_core.store.store import StateStore

transformers = pytest.importorskip("transformers")

V = 300
COMMON = dict(vocab_size=V, hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
MAMBA = dict(mamba_n_heads=8, mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8)
LENGTHS = (7, 4, 9, 5)  # the contexts' tokens


def _config(kind: str):
    """Attention first where it can be (an attention layer with nothing before it reads only its own
    token's embedding: its keys are exactly known), then Mamba-2 and attention again."""
    if kind.startswith("granite"):
        return transformers.GraniteMoeHybridConfig(
            **COMMON, **MAMBA, num_hidden_layers=4, layer_types=["attention", "mamba", "attention", "mamba"],
            shared_intermediate_size=96, num_local_experts=0, intermediate_size=32,
            position_embedding_type=kind.split("_")[1], attention_multiplier=0.25)
    if kind == "bamba":  # RoPE on half of each head
        return transformers.BambaConfig(**COMMON, **MAMBA, num_hidden_layers=3, attn_layer_indices=[0, 2],
                                        intermediate_size=96)
    return transformers.NemotronHConfig(  # position-free, one block per layer
        **COMMON, hybrid_override_pattern="*M-M*-", head_dim=16, intermediate_size=96, mamba_num_heads=8,
        mamba_head_dim=16, n_groups=2, ssm_state_size=8, chunk_size=8)


@pytest.fixture(scope="module")
def models(one_thread):
    """kind -> a random HybridLanguageModel, every parameter perturbed (norms at 1 and zero biases
    would hide mistakes), logits of order 1."""
    made = {}

    def get(kind, dtype=torch.float32):
        if dtype != torch.float32:  # float64: the exact math without float32's rounding
            if (kind, dtype) not in made:
                made[kind, dtype] = copy.deepcopy(get(kind)).to(dtype)
            return made[kind, dtype]
        if kind not in made:
            torch.manual_seed(0)
            made[kind] = perturb_(HybridLanguageModel(HybridConfig.from_transformers(_config(kind).to_dict())).eval(),
                                  seed=1)
        return made[kind]
    return get


def _ids(n, seed):
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _contexts(model, lengths=LENGTHS, seed=0):
    ids = [_ids(n, seed + i) for i, n in enumerate(lengths)]
    return ids, [model.encode_context(c) for c in ids]


def _logits(model, state, seed=99):
    return model(torch.tensor([_ids(6, seed)]), state)[0][0]


def _close(a, b, tol=1e-5):
    assert a.shape == b.shape
    assert (a - b).abs().max().item() <= tol


def _tol(dtype, ref):
    """1e-5 absolute in float64; in float32, 1e-5 relative to the largest |ref| (logits of order 5-10,
    states up to ~90: rounding alone reaches 1e-5 absolute there)."""
    return 1e-5 * (1.0 if dtype == torch.float64 else max(1.0, ref.abs().max().item()))


# ---- Concat: exact ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["nemotron_h", "granite_rope", "bamba"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_concat_is_the_state_of_the_concatenation(models, kind, dtype):
    """<= 1e-5 absolute in float64 (seen ~1e-14); in float32 the states reach ~90 and the chunked scan
    sums in another order over pieces than over the whole: <= 1e-5 relative to each tensor's largest."""
    model = models(kind, dtype)
    ids, states = _contexts(model)
    got = compose_tokens(model, ids, "concat", states=states)
    want = model.encode_context([t for c in ids for t in c])
    assert got.num_tokens == want.num_tokens == got.keys.shape[-2] == sum(LENGTHS)
    assert got.keys.dtype == dtype
    for name, a in want.to_tensors().items():  # ssm, conv, log_decay, keys, values
        _close(got.to_tensors()[name], a, _tol(dtype, a))


# ---- position-free attention: the method's symmetry holds for the whole state ---------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_picaso_r_on_a_position_free_hybrid_is_invariant_to_cyclic_shifts(models, dtype):
    model = models("granite_nope", dtype)
    _, states = _contexts(model)
    n = len(states)
    base = compose("picaso_r", states, config=model)
    ref = _logits(model, base)
    assert (ref - _logits(model, compose("picaso_r", states, attention="drop"))).abs().max() > 1e-2  # not vacuous
    for r in range(1, n):
        shifted = compose("picaso_r", states[r:] + states[:r], config=model)
        _close(shifted.ssm, base.ssm, _tol(dtype, base.ssm))  # the SSM part, as on a pure model
        assert shifted.keys.shape == base.keys.shape
        _close(_logits(model, shifted), ref, _tol(dtype, ref))  # the attention output (and all after it)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("method", ["picaso_s", "soup"])
def test_picaso_s_and_soup_on_a_position_free_hybrid_are_invariant_to_any_permutation(models, method, dtype):
    model = models("nemotron_h", dtype)
    _, states = _contexts(model)
    ref = _logits(model, compose(method, states, config=model))
    for order in itertools.islice(itertools.permutations(range(len(states))), 1, None, 5):
        _close(_logits(model, compose(method, [states[i] for i in order], config=model)), ref, _tol(dtype, ref))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_picconcat_r_joins_every_rotation_and_is_invariant_to_cyclic_shifts(models, dtype):
    model = models("granite_nope", dtype)
    ids, states = _contexts(model, LENGTHS[:3])
    total = sum(LENGTHS[:3])
    base = compose_tokens(model, ids, "picconcat_r", states=states)
    assert base.keys.shape[-2] == 3 * total and base.num_tokens == total  # no rotation's keys dropped
    ref = _logits(model, base)
    shifted = compose_tokens(model, ids[1:] + ids[:1], "picconcat_r", states=states[1:] + states[:1])
    _close(_logits(model, shifted), ref, _tol(dtype, ref))
    # nested_token_states builds the same rotations in another order: the same attention output
    nested = nested_token_states(model, ids[::-1], states[::-1], [3])[3]["picconcat_r"]
    _close(_logits(model, nested), ref, _tol(dtype, ref))


# ---- RoPE: keys re-rotated to their offsets ----------------------------------------------------
@pytest.mark.parametrize("kind", ["granite_rope", "bamba"])
def test_rope_keys_rotated_to_their_offset_are_the_keys_read_there(models, kind):
    """Layer 0 is attention: its key for a token is a function of that token and its position only.
    So context k read after the others (Concat) holds at layer 0 its own keys rotated to its offset:
    what rope="joined" builds; rope="own" keeps them at 0..T_k-1."""
    model = models(kind)
    ids, states = _contexts(model)
    concat = model.encode_context([t for c in ids for t in c])
    joined = compose("caso", states, config=model)
    own = compose("caso", states, config=model, rope="own")
    scale = concat.keys[0].abs().max().item()
    assert scale > 1.0
    _close(joined.keys[0], concat.keys[0], tol=2e-6 * scale)  # the angles of (p + o) vs p then o: rounding
    assert torch.equal(joined.values[0], own.values[0]) and not torch.equal(joined.keys, own.keys)
    _close(joined.values[0], concat.values[0])
    cfg, o = model.config, LENGTHS[0]
    one = shift_positions(states[1].keys, o, cfg.rope_theta, cfg.rotary_dim)
    _close(one[0], concat.keys[0, :, o:o + LENGTHS[1]], tol=2e-6 * scale)
    assert (own.keys[0, :, o:o + LENGTHS[1]] - concat.keys[0, :, o:o + LENGTHS[1]]).abs().max() > 1e-2 * scale
    # picconcat_r: rotation 0 (the concatenation itself) first, at offset 0
    pc = compose_tokens(model, ids[:2], "picconcat_r", states=states[:2])
    _close(pc.keys[..., :LENGTHS[0] + LENGTHS[1], :], compose_tokens(model, ids[:2], "concat", states=states[:2]).keys)


def test_position_free_keys_are_joined_as_stored(models):
    model = models("nemotron_h")
    _, states = _contexts(model)
    joined = compose("caso", states, config=model)
    assert torch.equal(joined.keys, torch.cat([s.keys for s in states], dim=-2))
    assert torch.equal(compose("caso", states, config=model, rope="own").keys, joined.keys)
    w = compose("weighted", states, weights=[0.0, 1.0, 0.0, 1.0], config=model)  # weight 0: left out
    assert torch.equal(w.values, torch.cat([states[1].values, states[3].values], dim=-2))


# ---- the ablation ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["soup", "caso", "picaso_s", "picaso_r"])
def test_attention_drop_keeps_the_ssm_part_and_no_positions(models, method):
    model = models("granite_rope")
    _, states = _contexts(model)
    join, drop = compose(method, states, config=model), compose(method, states, attention="drop", config=model)
    assert drop.keys.shape == (model.config.n_attn_layers, 2, 0, 16) == drop.values.shape
    assert drop.num_tokens == join.num_tokens == sum(LENGTHS)
    for name in ("ssm", "conv", "log_decay"):
        assert torch.equal(getattr(drop, name), getattr(join, name))
    logits = _logits(model, drop)  # the model reads it
    assert torch.isfinite(logits).all() and (logits - _logits(model, join)).abs().max() > 1e-2


# ---- what holds composed and stored hybrid states counts their keys and values ---------------------
def test_the_compose_cache_counts_keys_and_values(models):
    model = models("granite_rope")
    _, states = _contexts(model)
    st = compose("picaso_r", states, config=model)
    ssm_part = sum(t.numel() * 4 for t in (st.ssm, st.conv, st.log_decay))
    assert state_nbytes(st) == ssm_part + 2 * st.keys.numel() * 4 == st.nbytes
    cache = ComposeCache(budget=ssm_part + st.keys.numel() * 4)  # room for the SSM part, not the keys and values
    _, look = cache.state("picaso_r", ["a", "b", "c", "d"], states, lambda ids, sts: compose("picaso_r", sts),
                          model_fp="m", store_fp="s")
    assert not look.stored and cache.nbytes == 0


def test_a_hybrid_store_sizes_its_shards_by_their_real_bytes(models, tokenizer_json, tmp_path, monkeypatch):
    model = copy.deepcopy(models("nemotron_h"))
    model.tokenizer = Tokenizer.from_file(tokenizer_json)
    texts = [(f"c{i}", "the cat sat on the mat. " * (1 + i)) for i in range(8)]
    cfg = model.config
    longest = len(model.tokenizer.encode(texts[-1][1]))  # the store appends no suffix by default
    assert cfg.kv_nbytes_per_token() * longest > cfg.state_nbytes(0)  # the keys and values outweigh the SSM part
    monkeypatch.setattr(store_format, "SHARD_BYTES", int(2.5 * cfg.state_nbytes(longest)))
    store = StateStore.build(model, texts, tmp_path / "store", progress=False)
    assert len(store._shards) > 1
    for shard in store._shards:
        nbytes = sum(cfg.state_nbytes(store.get(c).num_tokens) for c in shard.ids)
        assert len(shard.ids) == 1 or nbytes <= store_format.SHARD_BYTES
        assert store.get(shard.ids[0]).keys.shape[-2] == store.get(shard.ids[0]).num_tokens


# ---- a pure model: unchanged, byte for byte ------------------------------------------------------
def _dyadic_states(n, seed):
    """float32 states where every step of every method is exact: decays 2^-k (k in 0..3), small
    integer states, so any correct order of operations gives the same bytes."""
    g = torch.Generator().manual_seed(seed)
    k = lambda *s: torch.randint(0, 4, s, generator=g).float()  # noqa: E731
    x = lambda *s: torch.randint(-8, 9, s, generator=g).float()  # noqa: E731
    return [ContextState(ssm=x(2, 3, 2, 4), conv=x(2, 5, 3), log_decay=-k(2, 3, 1, 1) * math.log(2), num_tokens=3 + i)
            for i in range(n)]


def _paper(method, states, weights=None):
    """eq. 4 with the weights of props. 1-3 (the mean of CASO over all orders / rotations), State
    Soup's mean and weighted sum; conv the (weighted) mean; log_decay and num_tokens the sums."""
    n = len(states)
    caso = lambda order: sum(math.prod([states[j].log_decay.exp() for j in order[p + 1:]], start=1.0)  # noqa: E731
                             * states[i].ssm for p, i in enumerate(order))
    if method == "caso":
        ssm = caso(list(range(n)))
    elif method == "picaso_r":
        ssm = sum(caso([(r + i) % n for i in range(n)]) for r in range(n)) / n
    elif method == "picaso_s":
        orders = list(itertools.permutations(range(n)))
        ssm = sum(caso(list(o)) for o in orders) / len(orders)
    else:
        w = weights or [1 / n] * n
        ssm = sum(wi * s.ssm for wi, s in zip(w, states))
    c = [w / sum(weights) for w in weights] if weights else [1 / n] * n
    log_decay = states[0].log_decay
    for s in states[1:]:
        log_decay = log_decay + s.log_decay
    return ssm, sum(ci * s.conv for ci, s in zip(c, states)), log_decay, sum(s.num_tokens for s in states)


@pytest.mark.parametrize("method,n,weights", [("soup", 4, None), ("caso", 4, None), ("picaso_r", 4, None),
                                              ("picaso_s", 2, None), ("weighted", 4, [0.5, -1.0, 2.0, 0.5])])
def test_a_pure_model_composes_byte_for_byte_as_the_paper(method, n, weights):
    states = _dyadic_states(n, seed=n)
    for s in states:  # the premise: exp gives the exact powers of two
        assert torch.equal(s.log_decay.exp(), torch.exp2((s.log_decay / math.log(2)).round()))
    got = compose(method, states, weights=weights)
    assert got.keys is None and set(got.to_tensors()) == {"ssm", "conv", "log_decay"}
    ssm, conv, log_decay, num_tokens = _paper(method, states, weights)
    assert torch.equal(got.ssm, ssm) and torch.equal(got.conv, conv) and torch.equal(got.log_decay, log_decay)
    assert got.num_tokens == num_tokens
    # the hybrid's options leave a pure state alone
    for kw in ({"attention": "drop"}, {"rope": "own"}):
        again = compose(method, states, weights=weights, **kw)
        assert again.keys is None and all(torch.equal(t, got.to_tensors()[k]) for k, t in again.to_tensors().items())


def test_a_pure_models_token_composition_has_no_keys():
    model = tiny_model("Mamba2")
    ids = [_ids(5, 1), _ids(3, 2)]
    st = compose_tokens(model, [[t % 100 for t in c] for c in ids], "picconcat_r")
    assert st.keys is None and mean_of_rotations([st, st]).keys is None


# ---- bad input: one line each --------------------------------------------------------------------
def test_a_hybrid_and_a_pure_state_do_not_compose(models):
    hybrid = models("granite_nope").encode_context(_ids(4, 1))
    pure = tiny_model("Mamba2").encode_context([1, 2, 3])
    for states in ([hybrid, pure], [pure, hybrid]):
        with pytest.raises(ValueError, match=r"^state 1 of 2 .*keys and values.*\(encode the context") as e:
            compose("picaso_r", states)
        assert "\n" not in str(e.value)


def test_keys_of_other_heads_do_not_compose(models):
    a, b = (models(k).encode_context(_ids(4, 1)) for k in ("granite_nope", "nemotron_h"))
    other = ContextState(a.ssm, a.conv, a.log_decay, 4, keys=b.keys[:, :1], values=b.values[:, :1])  # 1 head, not 2
    with pytest.raises(ValueError, match=r"^state 1 of 2 .*`keys` has shape \[2, 1, 4, 16\] .*expects \[2, 2, -1, 16\]"
                       ) as e:
        compose("soup", [a, other])
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"^attention='keep': valid values are \('join', 'drop'\)$"):
        compose("soup", [a, a], attention="keep")
    with pytest.raises(ValueError, match=r"^rope='mean': valid values are \('joined', 'own'\)$"):
        compose("soup", [a, a], rope="mean")

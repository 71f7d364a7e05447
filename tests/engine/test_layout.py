"""The model built from layer kinds (engine/layers/, engine/layout.py) and what the engine shows the
lab (engine/observe.py): the layout agrees with the modules it stacked and with the state, every
kind keeps the contract, a kind the registry lacks is refused, and a recording sees the engine's own
numbers in its own thread only."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest
import torch
from conftest import granite_rope_hybrid, tiny_model

from picaso_core.engine import observe
from picaso_core.engine.layers import KINDS, STATE_PARTS, kind
from picaso_core.engine.layout import FAMILIES, layout_of
from picaso_core.engine.state import VARIABLE


def _state_modules(model):
    """(checkpoint layer, module class name) of every module that holds state, read off the module
    tree by what each module IS (its parameters), not from the layout."""
    out = []
    for i, layer in enumerate(model.layers):
        for name, m in layer.named_children():
            if hasattr(m, "A_log"):
                out.append((i, "ssm"))
            elif hasattr(m, "q_proj"):
                out.append((i, "kv"))
    return out


@pytest.mark.parametrize("family", ["Mamba2", "Mamba1"])
def test_a_pure_layout_is_every_layer_one_ssm_mixer(family):
    m = tiny_model(family, n_layer=3)
    lay = m.layout
    assert lay.family == family and lay.pure_ssm and not lay.has_attention
    assert lay.layers == ((family.lower(),),) * 3
    assert lay.ssm_layers == (0, 1, 2) and lay.attention_layers == () and lay.ssm_kind == family.lower()
    assert lay.shapes() == m.config.state_shapes() and lay.line() == family
    assert lay.nbytes(1000) == lay.state_bytes == m.empty_state().nbytes  # nothing grows with the tokens
    assert _state_modules(m) == [(0, "ssm"), (1, "ssm"), (2, "ssm")]


def test_a_hybrid_layout_matches_its_modules_and_its_state():
    m = granite_rope_hybrid()
    lay = m.layout
    assert lay.family == "granitemoehybrid" and lay.name == "Granite-4.0-H"
    assert lay.has_attention and not lay.pure_ssm
    assert lay.layers == (("mamba2", "mlp"), ("attention", "mlp")) * 2
    assert _state_modules(m) == [(0, "ssm"), (1, "kv"), (2, "ssm"), (3, "kv")]
    assert lay.ssm_layers == (0, 2) and lay.attention_layers == (1, 3) and lay.n_state_layers == 2
    assert lay.position == "rope" and lay.rope == (m.config.rope_theta, m.config.rotary_dim)
    assert lay.line() == "Granite-4.0-H hybrid: 2 Mamba-2 + 2 attention layers"
    # the state: its SSM axis has a slice per SSM layer, its keys one per attention layer, and what a
    # token adds is exactly the keys' and values' growth
    st = m.encode_context(list(range(1, 8)))
    assert st.ssm.shape[0] == len(lay.ssm_layers) and st.keys.shape[0] == len(lay.attention_layers)
    assert lay.shapes()["keys"][2] == VARIABLE
    assert st.nbytes == lay.nbytes(7)
    assert st.nbytes - m.encode_context([1]).nbytes == 6 * lay.bytes_per_token


def test_the_layout_is_frozen_and_public():
    m = tiny_model()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.layout.family = "x"
    with pytest.raises(AttributeError):
        m.layout = layout_of(m.config)  # a property: the model's layout is the one it was built from


def test_every_kind_keeps_the_contract():
    assert set(KINDS) == {"mamba1", "mamba2", "attention", "mlp", "moe"}
    for name, k in KINDS.items():
        assert k.name == name and k.label
        assert k.state in (None, *STATE_PARTS)
        assert callable(k.build) and callable(k.chunk) and callable(k.step)
        assert k.weights, f"{name} names its weights for no family"
        assert set(k.weights) <= set(FAMILIES), f"{name} names weights for an unknown family"
    for fam in FAMILIES.values():  # each family's kinds are registered
        users = [k for k in KINDS.values() if fam.key in k.weights]
        assert users, fam.key
    with pytest.raises(ValueError, match="unknown layer kind 'gated_deltanet'; the engine has mamba1"):
        kind("gated_deltanet")


def test_a_family_the_engine_lacks_is_refused_in_one_line():
    cfg = tiny_model().config
    other = dataclasses.replace(cfg, ssm_cfg=dataclasses.replace(cfg.ssm_cfg))
    object.__setattr__(other.ssm_cfg, "layer", "Mamba3")
    with pytest.raises(ValueError, match="no layout for family 'Mamba3'"):
        layout_of(other)


def test_the_stages_are_the_engines_numbers_and_only_this_threads():
    m = tiny_model("Mamba2", n_layer=2)
    ids = torch.tensor([[3, 7, 11, 5, 2]])
    seen = []
    with observe.recording(lambda name, args, out: seen.append((name, args, out))):
        _, st = m.hidden_states(ids)
    assert [n for n, *_ in seen] == ["conv", "dt", "scan"] * 2
    # the scan's last state is the state the forward returned, layer by layer
    scans = [out for n, _, out in seen if n == "scan"]
    for i, (_y, h_last, _ld) in enumerate(scans):
        assert torch.equal(h_last.to(st.ssm.dtype), st.ssm[:, i])
    # a step shows one read-out per layer
    seen.clear()
    with observe.recording(lambda name, args, out: seen.append(name)):
        m.step(torch.tensor([4]), st[0])
    assert seen == ["readout", "readout"]
    # another thread's forward is not recorded, and nothing is once the block ends
    seen.clear()
    with observe.recording(lambda name, args, out: seen.append(name)):
        t = threading.Thread(target=lambda: m.hidden_states(ids))
        t.start()
        t.join()
    m.hidden_states(ids)
    assert seen == [] and not observe.is_recording()


def test_a_kind_added_to_the_registry_runs_without_touching_the_model():
    """The model's loop asks no kind's name: a new stateless kind registered under an existing name's
    weights runs through the same forward and step (here: an identity-scaled MLP twin)."""
    m = granite_rope_hybrid()
    ids = torch.tensor([[5, 9, 13, 2]])
    before = m(ids)[0]
    calls = []
    mlp = KINDS["mlp"]

    def chunk(mods, x, run):
        calls.append(x.shape)
        return mlp.chunk(mods, x, run)

    twin = dataclasses.replace(mlp, name="mlp_twin", chunk=chunk, step=chunk)
    for layer in m.layers:  # every sub-block that ran "mlp" now runs the twin
        layer.plan = [(n, twin if k is mlp else k, names) for n, k, names in layer.plan]
    after = m(ids)[0]
    assert len(calls) == 4 and torch.equal(before, after)
    calls.clear()
    assert math.isfinite(float(m.step(torch.tensor([3]))[0].sum())) and len(calls) == 4


def test_the_state_is_the_kinds_parts_stacked_over_their_layers(monkeypatch):
    """Each kind declares its part of a state for one layer (kind.part); the layout stacks them and
    checks the sum against the config's own shapes: a kind that declared another shape is refused."""
    import transformers

    from picaso_core.engine.hybrid_config import HybridConfig

    hyb = granite_rope_hybrid()
    one = KINDS["attention"].part(hyb.config)
    assert one == {"keys": (2, VARIABLE, 16), "values": (2, VARIABLE, 16)}
    assert hyb.layout.shapes()["keys"] == (2, *one["keys"])  # two attention layers
    # a Nemotron-H without attention layers: its keys are declared for 0 layers, none held
    cfg = HybridConfig.from_transformers(transformers.NemotronHConfig(
        vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, hybrid_override_pattern="M-M-",
        head_dim=8, intermediate_size=48, mamba_num_heads=4, mamba_head_dim=8, n_groups=1, ssm_state_size=8,
        chunk_size=8).to_dict())
    lay = layout_of(cfg)
    assert not lay.has_attention and lay.shapes()["keys"][0] == 0 and lay.shapes() == cfg.state_shapes()
    # a kind whose declared part disagrees with the config is refused, naming both
    wrong = dataclasses.replace(KINDS["attention"], part=lambda c: {"keys": (3, VARIABLE, 16), "values": (3, VARIABLE, 16)})
    monkeypatch.setitem(KINDS, "attention", wrong)
    with pytest.raises(ValueError, match="the layer kinds' state parts .* are not the config's"):
        layout_of(hyb.config)


def test_a_model_pickles_and_computes_the_same_after():
    """torch.save(model) and multiprocessing pickle the model: its layout, its layers' plans and their
    kinds hold module-level functions only (a closure or lambda there failed to pickle)."""
    import pickle

    for m in (tiny_model("Mamba2"), tiny_model("Mamba1"), granite_rope_hybrid()):
        back = pickle.loads(pickle.dumps(m))
        ids = torch.tensor([[3, 7, 11]])
        assert back.layout == m.layout and torch.equal(back(ids)[0], m(ids)[0])

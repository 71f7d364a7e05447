"""The callers of compose on a RoPE hybrid (issue 49): compose re-rotates each context's keys to its
offset in the joined sequence only when it is given the model (config=model); without it the keys
keep their own positions. Every caller that has the model passes it, so the Compose tab's losses
(analysis.evaluate.run_methods) and the fine-tuning's composed states are those of
compose(..., config=model), and not those of config=None.

The model: a tiny random Granite-4.0-H with RoPE attention after a Mamba-2 layer (the recipe of
tests/test_compose_hybrid.py: weights x 3, norms and biases perturbed, so that positions matter).
"""

import pytest
from conftest import granite_rope_hybrid
import torch

from picaso_core.analysis.evaluate import run_methods
from picaso_core.compose import compose
from picaso_core.finetune.train import composed_states

transformers = pytest.importorskip("transformers")

V = 300


@pytest.fixture(scope="module")
def rope_model(one_thread):
    model = granite_rope_hybrid(V)
    assert model.config.rope_theta is not None  # the point of the test: keys hold positions
    return model


@pytest.fixture(scope="module")
def contexts():
    g = torch.Generator().manual_seed(7)
    ids = [torch.randint(1, V, (n,), generator=g).tolist() for n in (9, 13, 6, 11)]
    query = torch.randint(1, V, (6,), generator=g).tolist()
    answer = torch.randint(1, V, (5,), generator=g).tolist()
    return ids, query, answer


@pytest.mark.parametrize("method", ["caso", "picaso_r", "picaso_s", "soup"])
def test_run_methods_composes_with_the_models_rope(rope_model, contexts, method):
    ids, query, answer = contexts
    states = rope_model.encode_contexts(ids)
    got = {r.method: r.loss for r in run_methods(rope_model, query, answer, ids, states, methods=(method,))}[method]
    joined = rope_model.continuation_loss(query, answer, compose(method, states, config=rope_model))
    own = rope_model.continuation_loss(query, answer, compose(method, states))  # config=None: each at 0..T_k-1
    assert abs(own - joined) > 1e-3, "the test model does not tell the two layouts apart"
    assert got == pytest.approx(joined, abs=2e-5), (got, joined, own)


def test_fine_tuning_composes_with_the_models_rope(rope_model, contexts):
    ids, _, _ = contexts
    got = composed_states(rope_model, [ids], "picaso_r", grad=False)[0]
    want = compose("picaso_r", rope_model.encode_contexts(ids), config=rope_model)
    assert torch.allclose(got.keys, want.keys, atol=1e-4) and torch.allclose(got.ssm, want.ssm, atol=1e-4)

"""Fast decode: the recurrent `step` is the twin of `forward`, and `generate_batch` is
many `generate`s at once (greedy token-identical, EOS per row, clear errors)."""

from types import SimpleNamespace

import pytest
import torch

from conftest import TINY_VOCAB, tiny_model
from picaso_core import ContextState, load_model


def _ids(n, seed=0):
    return torch.randint(0, TINY_VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def _rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


CONTEXT_LENGTHS = (0, 5, 1, 13)  # the empty state, shorter than the conv window, longer than a chunk


def test_step_equals_forward_logits_and_states(family):
    """Feeding a sequence one token at a time through `step`, from a batch of states holding
    different numbers of tokens (the empty one included): every position's logits equal
    `forward`'s over the whole sequence, and the final state equals `encode_context` of context +
    sequence (conv, ssm, log_decay, num_tokens), float32, <= 1e-5 relative."""
    m = tiny_model(family)
    contexts = [_ids(n, seed=10 + n) for n in CONTEXT_LENGTHS]
    start = ContextState.stack([m.encode_context(c) for c in contexts])
    seq = torch.stack([_ids(9, seed=i) for i in range(len(contexts))])  # [b, 9]
    full, _ = m(seq, start)
    st, steps = start, []
    for t in range(seq.shape[1]):
        logits, st = m.step(seq[:, t], st)
        steps.append(logits)
    assert _rel(torch.stack(steps, 1), full) <= 1e-5
    assert st.num_tokens == tuple(n + 9 for n in CONTEXT_LENGTHS)
    for i, c in enumerate(contexts):
        ref = m.encode_context(torch.cat([c, seq[i]]))
        assert st[i].num_tokens == ref.num_tokens
        for k in ("conv", "ssm", "log_decay"):
            assert _rel(getattr(st[i], k), getattr(ref, k)) <= 1e-5, (i, k)


def test_step_leaves_its_input_state_alone_and_shares_a_single_state(family):
    m = tiny_model(family)
    st = m.encode_context(_ids(6))
    before = st.ssm.clone()
    logits, new = m.step(torch.tensor([3, 7]), st)  # one state shared by 2 rows
    assert torch.equal(st.ssm, before) and new.batch_size == 2 and new.num_tokens == (7, 7)
    torch.testing.assert_close(logits, m(torch.tensor([[3], [7]]), st)[0][:, -1], atol=1e-5, rtol=1e-5)
    _, from_none = m.step(torch.tensor([3]))  # None: the empty state
    assert from_none.num_tokens == (1,)


def test_generate_batch_greedy_equals_forward_argmax_and_one_row_generate(family):
    m = tiny_model(family)
    prompt = _ids(6, seed=1).tolist()
    states = [None, m.encode_context(_ids(5, 2)), m.encode_context(_ids(17, 3))]
    rows = m.generate_batch(prompt, states, max_new_tokens=8)
    for st, row in zip(states, rows):
        assert row == m.generate(prompt, st, max_new_tokens=8, temperature=0)
        logits, _ = m(torch.tensor([prompt + row]), st)  # the scan path's greedy continuation
        assert logits[0, len(prompt) - 1:-1, :TINY_VOCAB].argmax(-1).tolist() == row


def test_generate_batch_sampling_is_reproducible_and_per_row_equals_generate(family):
    m = tiny_model(family)
    prompt = _ids(4, seed=5).tolist()
    states = [m.encode_context(_ids(3, 6)), None]
    kw = dict(max_new_tokens=6, temperature=1.0, top_k=7, seed=11)
    a, b = m.generate_batch(prompt, states, **kw), m.generate_batch(prompt, states, **kw)
    assert a == b
    assert a == [m.generate(prompt, s, **kw) for s in states]


def test_eos_stops_each_row_on_its_own_and_is_not_returned():
    m = tiny_model("Mamba2")
    prompt = _ids(5, seed=2).tolist()
    # a random tiny model barely listens to its state: scaled states make the rows' greedy paths differ
    states = [m.encode_context(_ids(n, seed=20 + n)) for n in (3, 8, 12)]
    states = [ContextState(s.ssm * 300, s.conv * 30, s.log_decay, s.num_tokens) for s in states]
    free = m.generate_batch(prompt, states, max_new_tokens=12, stop_at_eos=False)
    eos = free[0][2]  # the third token of row 0 becomes the end-of-text token
    assert eos not in free[0][:2] and all(eos not in f for f in free[1:]), free
    m.tokenizer = SimpleNamespace(eos_id=eos)
    assert m.generate_batch(prompt, states, max_new_tokens=12) == [free[0][:2], free[1], free[2]]
    assert m.generate_batch(prompt, states, max_new_tokens=12, stop_at_eos=False) == free


def test_decode_reuses_its_buffers(family):
    """Nothing that grows with the tokens generated: every step updates the same state tensors."""
    m = tiny_model(family)
    seen = []
    real = m._step_

    def spy(ids, ssm, conv, log_decay):
        seen.append((ssm.data_ptr(), conv.data_ptr(), log_decay.data_ptr()))
        return real(ids, ssm, conv, log_decay)

    m._step_ = spy
    m.generate_batch(_ids(3).tolist(), [None, None], max_new_tokens=10)
    assert len(seen) == 9 and len(set(seen)) == 1


def test_generate_batch_rejects_bad_input_clearly(family):
    m = tiny_model(family)
    other = tiny_model("Mamba1" if family == "Mamba2" else "Mamba2")
    with pytest.raises(ValueError, match="at least one state"):
        m.generate_batch([1, 2], [])
    with pytest.raises(ValueError, match="at least one token"):
        m.generate_batch([], [None])
    with pytest.raises(ValueError, match="different model"):
        m.generate_batch([1, 2], [None, other.encode_context([1, 2, 3])])
    with pytest.raises(ValueError, match="max_new_tokens"):
        m.generate_batch([1, 2], [None], max_new_tokens=-1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.generate_batch([1, TINY_VOCAB], [None], max_new_tokens=0)
    assert m.generate_batch([1, 2], [None, None], max_new_tokens=0) == [[], []]
    with pytest.raises(ValueError, match="one token per row"):
        m.step(torch.tensor([[1, 2]]), None)
    with pytest.raises(ValueError, match="different model"):
        m.step(torch.tensor([1]), other.encode_context([1]))


@pytest.fixture(scope="module")
def demo():
    from picaso_core.data import load_corpus

    model = load_model("demo")
    sample = load_corpus("demo", "test").samples[0]
    return model, sample


def test_demo_generate_batch_equals_per_method_generate_for_all_seven_methods(demo):
    """The Compose & compare case: the 7 methods' states of one demo sample, greedy."""
    from picaso_core.analysis.evaluate import METHODS, run_methods
    from picaso_core.compose import build_state

    model, s = demo
    tok = model.tokenizer
    ctx = [tok.encode(text) for _, text in s.contexts]
    store = model.encode_contexts(ctx)
    states = [build_state(model, m, ctx, store) for m in METHODS]
    query = tok.encode(s.query)
    batched = model.generate_batch(query, states, max_new_tokens=16)
    assert batched == [model.generate(query, st, max_new_tokens=16, temperature=0) for st in states]
    assert any(batched), batched
    res = run_methods(model, query, tok.encode(s.continuation), ctx, store, generate_tokens=16)
    assert [r.generation for r in res] == batched


def test_score_and_generate_reads_the_query_once_for_both(family):
    """score_and_generate = continuation_losses + generate_batch (the prefill shared): losses equal
    to float rounding, generations identical, from states of different lengths (the empty one too),
    for a one-token continuation as well; timings split into scoring and generation."""
    from picaso_core.engine.decode import score_and_generate

    m = tiny_model(family)
    states = [m.encode_context(_ids(n, seed=20 + n)) for n in CONTEXT_LENGTHS]
    query = _ids(7, seed=1).tolist()
    for cont in (_ids(11, seed=2).tolist(), _ids(1, seed=3).tolist()):
        timings = {}
        losses, gens = score_and_generate(m, query, cont, states, max_new_tokens=6, timings=timings)
        ref = m.continuation_losses(query, cont, states)
        assert losses == pytest.approx(ref, rel=1e-5, abs=1e-6)
        assert gens == m.generate_batch(query, states, max_new_tokens=6)
        assert timings["score_s"] > 0 and timings["generate_s"] > 0
    losses, gens = score_and_generate(m, query, cont, states, max_new_tokens=0)
    assert gens == [[] for _ in states] and losses == pytest.approx(m.continuation_losses(query, cont, states), rel=1e-5)
    for bad in (dict(continuation_ids=[]), dict(prompt_ids=[]), dict(max_new_tokens=-1), dict(states=[])):
        kw = dict(prompt_ids=query, continuation_ids=cont, states=states, max_new_tokens=4) | bad
        with pytest.raises(ValueError):
            score_and_generate(m, **kw)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("shape", ["mamba2", "mamba2_groups", "mamba1"])
def test_state_update_in_blocks_equals_its_reference(shape, dtype, tol, monkeypatch):
    """scan.state_update's CPU path (blocks of heads / rows kept in cache) equals state_update_ref,
    with blocks of one head, of a few heads that straddle rows, and of the whole batch."""
    from picaso_core.engine import scan

    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    b, N = 3, 8
    if shape == "mamba1":
        E = 6
        h, x, dt, A, B, C = r(b, E, N), r(b, E), r(b, E).abs(), -r(E, N).abs(), r(b, N), r(b, N)
        one = E * N * h.element_size()  # a row
    else:
        H, P, G = 6, 5, (3 if shape == "mamba2_groups" else 1)
        h, x, dt, A, B, C = r(b, H, P, N), r(b, H, P), r(b, H).abs(), -r(H).abs(), r(b, G, N), r(b, G, N)
        one = P * N * h.element_size()  # a head
    y_ref, h_ref = scan.state_update_ref(h, x, dt, A, B, C)
    for blocks in (1, 4, 10 ** 6):  # one unit per block, 4 (not a divisor of the rows), everything
        monkeypatch.setattr(scan, "STATE_BLOCK_BYTES", blocks * one)
        hh = h.clone()
        y = scan.state_update(hh, x, dt, A, B, C)
        assert y.dtype == dtype and y.shape == y_ref.shape
        assert _rel(y, y_ref) < tol and _rel(hh, h_ref) < tol, blocks
    assert not torch.equal(h_ref, h)  # the update does something: the reference is not the input
    apart = torch.stack([h, h], 1)[:, 0]  # rows not adjacent (a layer of a batch-major state)
    assert not apart.is_contiguous()
    y = scan.state_update(apart, x, dt, A, B, C)
    assert _rel(y, y_ref) < tol and _rel(apart, h_ref) < tol


def test_greedy_generate_batch_leaves_torchs_global_rng_alone(family):
    """Greedy decoding draws no random numbers, so it must not reseed the process-wide generator
    (the attribution answer and the soup mix run with seed=None); sampling with seed=None still
    draws a fresh seed, from outside torch's global generator."""
    m = tiny_model(family)
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    m.generate_batch([1, 2, 3], [None, None], max_new_tokens=4)
    assert torch.equal(torch.rand(4), expected)
    torch.manual_seed(123)
    m.generate_batch([1, 2, 3], [None], max_new_tokens=4, temperature=1.0)
    assert torch.equal(torch.rand(4), expected)


def test_compose_click_uses_the_fewest_forwards(demo):
    """run_methods with 7 methods: the query and the continuation are each ONE 7-row forward, and
    generation is 7-row steps (one per token after the first); no per-method generate. A return to
    per-method generation or scoring makes more, or 1-row, forwards."""
    from picaso_core.analysis.evaluate import METHODS, run_methods

    assert len(METHODS) == 7
    model = load_model("demo")  # a fresh instance: the spies are set on it
    _, s = demo
    tok = model.tokenizer
    ctx = [tok.encode(t + "\n\n") for _, t in s.contexts[-5:]]
    store = model.encode_contexts(ctx)
    q, c = tok.encode(s.query), tok.encode(s.continuation)
    forwards, steps, gens = [], [], []
    hs, st_ = model.hidden_states, model._step_

    def spy_forward(ids, state=None, lengths=None):
        forwards.append(tuple(ids.shape))
        return hs(ids, state, lengths)

    def spy_step(ids, *bufs):
        steps.append(ids.shape[0])
        return st_(ids, *bufs)

    model.hidden_states, model._step_ = spy_forward, spy_step
    model.generate = lambda *a, **k: gens.append(1)
    res = run_methods(model, q, c, ctx, store, generate_tokens=24)
    lengths = [len(r.generation) for r in res]
    assert len(res) == 7 and not gens
    assert [f for f in forwards if f[0] == 7] == [(7, len(q)), (7, len(c))]  # query once, continuation once
    assert len(forwards) == 4, forwards  # + Concat's one forward and PICConcat-R's one batch of rotations
    assert steps == [7] * min(23, max(lengths)), (steps, lengths)
    assert max(lengths) == 24  # the run made all its tokens: the count above is the full 23


def test_two_task_mix_generates_in_one_batch(tiny_model_dir, monkeypatch):
    """soup_mixing.two_task_mix generates for all its weights in ONE generate_batch call (the attribution
    answer's single call: tests/ui/tabs/test_attribution_app.py)."""
    from picaso_core.analysis import soup_mixing

    model = load_model(str(tiny_model_dir))
    calls = []
    real = model.generate_batch
    monkeypatch.setattr(model, "generate_batch", lambda p, states, *a, **k: calls.append(len(states)) or real(p, states, *a, **k))
    a, b = (model.encode_context(_ids(n, seed=n)) for n in (6, 9))
    rows = soup_mixing.two_task_mix(model, a, b, "one →", ["two"], ws=[0.0, 0.25, 0.5, 1.0], max_new_tokens=3)
    assert len(rows) == 4 and calls == [4]

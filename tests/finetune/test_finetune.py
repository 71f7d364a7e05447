"""BPTC / BP2C fine-tuning (picaso_core/finetune/train.py, PICASO sec. 5): where the gradient goes, that
training lowers the loss, exact checkpoint resume, and bad input."""

from __future__ import annotations

import random

import pytest
import torch

from picaso_core.finetune import train as FT
from picaso_core.data import Corpus, RetrievalSample
from picaso_core.engine.loading import load_model
from tests.conftest import tiny_model

CONTEXT_ONLY = list(range(200, 220))  # token ids that occur in contexts and nowhere else


def _examples(n: int = 6, seed: int = 0) -> list[FT.Example]:
    """Tiny examples: the continuation repeats a context token so that reading the contexts helps."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        contexts = [[rng.choice(CONTEXT_ONLY) for _ in range(rng.randint(3, 9))] for _ in range(rng.randint(2, 4))]
        out.append(FT.Example(query=[rng.randint(10, 60) for _ in range(5)],
                              continuation=[rng.randint(10, 60) for _ in range(4)], contexts=contexts))
    return out


def _grad_rows(objective: str, method: str) -> tuple[torch.Tensor, torch.Tensor]:
    model = tiny_model("Mamba2", seed=3, tie_embeddings=False)  # untied: the head does not touch the embedding
    model.train()
    batch = [(e.query, e.continuation, e.contexts) for e in _examples()]
    loss, _ = FT.CompositionObjective(model, objective, method)(batch)
    loss.backward()
    g = model.backbone.embedding.weight.grad
    query_rows = sorted({t for e in _examples() for t in e.query})
    return g[CONTEXT_ONLY].abs().sum(1), g[query_rows].abs().sum(1)


@pytest.mark.parametrize("method", FT.COMPOSE_METHODS)
def test_bptc_gradient_reaches_context_only_embeddings_and_bp2c_does_not(method):
    ctx, query = _grad_rows("bptc", method)
    assert (ctx > 0).sum() >= len(CONTEXT_ONLY) // 2, "BPTC: no gradient through the context encoding"
    ctx2, query2 = _grad_rows("bp2c", method)
    assert torch.count_nonzero(ctx2) == 0, "BP2C must stop the gradient at the composed state"
    assert (query2 > 0).all() and (query > 0).all()  # both train the query path


def test_composed_states_match_encoding_each_context_alone():
    model = tiny_model("Mamba2", seed=4)
    ex = _examples(3)
    got = FT.composed_states(model, [e.contexts for e in ex], "picaso_r", grad=False)
    from picaso_core.compose import compose

    for i, e in enumerate(ex):
        want = compose("picaso_r", [model.encode_context(c) for c in e.contexts])
        torch.testing.assert_close(got[i].ssm, want.ssm, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got[i].conv, want.conv, rtol=1e-4, atol=1e-5)
    # and the batched continuation NLL equals the engine's continuation_loss
    nll = FT.continuation_nll(model, [e.query for e in ex], [e.continuation for e in ex], got)
    for i, e in enumerate(ex):
        assert abs(float(nll[i].detach()) - model.continuation_loss(e.query, e.continuation, got[i])) < 1e-4


def _loss_on(model, examples, objective="bptc") -> float:
    with torch.no_grad():
        return float(FT.CompositionObjective(model, objective)([(e.query, e.continuation, e.contexts[::-1])
                                                                for e in examples])[0])


@pytest.mark.parametrize("objective", FT.OBJECTIVES)
def test_a_few_steps_lower_the_training_loss(objective):
    model = tiny_model("Mamba2", seed=5)
    ex = _examples(6)
    before = _loss_on(model, ex)
    cfg = FT.FinetuneConfig(objective=objective, data="qa", max_steps=12, batch_size=3, lm_share=0.0, lr=1e-2,
                            warmup=1, seed=0)
    res = FT.train(model, ex, cfg, progress=False)
    assert res.steps == 12 and len(res.history) == 12
    assert _loss_on(model, ex) < before - 0.1


def _lm_docs():
    rng = random.Random(1)
    return [[rng.randint(1, 100) for _ in range(rng.randint(5, 20))] for _ in range(8)]


def test_checkpoint_round_trips_and_resumes_to_the_same_next_step(tmp_path, tokenizer_json):
    from picaso_core.engine.tokenizer import Tokenizer

    def fresh():
        m = tiny_model("Mamba2", seed=6)
        m.tokenizer = Tokenizer.from_file(tokenizer_json)
        return m

    ex = _examples(8)
    cfg = FT.FinetuneConfig(objective="bptc", data="retrieval", k_max=3, max_steps=5, batch_size=4, lm_share=0.25,
                            grad_accum=2, lr=5e-3, warmup=2, save_every=2, seed=7)
    full = FT.train(fresh(), ex, cfg, lm_docs=_lm_docs(), progress=False)

    cut = fresh()
    part = FT.train(cut, ex, cfg, out_dir=tmp_path / "run", lm_docs=_lm_docs(), progress=False,
                    should_stop=lambda: len(stopper) > 1, callback=lambda rec, n: stopper.append(rec)) \
        if (stopper := []) == [] else None
    assert part.cancelled and part.steps == 2
    ckpt = tmp_path / "run" / "checkpoint-00002"
    for f in ("config.json", "model.safetensors", "tokenizer.json", FT.STATE_FILE):
        assert (ckpt / f).is_file()
    loaded = load_model(ckpt)  # the bundled model's layout: load_model reads it as it is
    for k, v in cut.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v, rtol=0, atol=0)

    resumed = FT.train(fresh(), ex, cfg, resume_from=ckpt, lm_docs=_lm_docs(), progress=False)
    assert [h["step"] for h in resumed.history] == [1, 2, 3, 4, 5]
    for a, b in zip(full.history, resumed.history):
        assert abs(a["loss"] - b["loss"]) < 1e-6, (a, b)
        assert a["k"] == b["k"]


def test_training_leaves_the_global_generator_alone():
    """The app fine-tunes in a worker thread: training must not reseed torch's generator under the
    other handlers (it draws nothing from it: micro-batches are a function of the seed)."""
    model = tiny_model("Mamba2", seed=5)
    torch.manual_seed(11)
    before = torch.get_rng_state()
    FT.train(model, _examples(4), FT.FinetuneConfig(data="qa", max_steps=2, batch_size=2, lm_share=0.0, seed=3),
             progress=False)
    assert torch.equal(torch.get_rng_state(), before)


def test_bad_input_names_the_fix():
    model = tiny_model("Mamba2", seed=0)
    for kw, match in [(dict(k_max=-1), "k_max"), (dict(k_max=FT.K_LIMIT + 1), "k_max"),
                      (dict(objective="bptt"), "objective.*bptc"), (dict(method="soup"), "picaso_r"),
                      (dict(data="wiki"), "retrieval"), (dict(lm_share=1.0), "lm_share"),
                      (dict(batch_size=1, lm_share=0.9), "batch_size"), (dict(k_min=4, k_max=3), "k_min"),
                      (dict(k_min=-1), "k_min")]:
        with pytest.raises(ValueError, match=match):
            FT.FinetuneConfig(**kw).check()
        with pytest.raises(ValueError, match=match):
            FT.train(model, _examples(2), FT.FinetuneConfig(**kw), progress=False)
    with pytest.raises(ValueError, match="no training examples"):
        FT.train(model, [], FT.FinetuneConfig(lm_share=0), progress=False)
    with pytest.raises(ValueError, match="objective"):
        FT.CompositionObjective(model, "sgd")
    with pytest.raises(ValueError, match="not a fine-tuning checkpoint"):
        FT.train(model, _examples(2), FT.FinetuneConfig(lm_share=0), resume_from="/nonexistent", progress=False)
    s = RetrievalSample("a", "q", " c", [("x", "chunk text")])
    with pytest.raises(ValueError, match="disjoint"):
        FT.check_disjoint(Corpus("t", "train", [s], {"x": "chunk text"}),
                          [Corpus("e", "test", [RetrievalSample("b", "q", " c")], {"y": "chunk text"})])


def test_skill_paired_compares_the_same_items_of_two_models():
    """finetune_eval.skill_paired: accuracy = mean over tasks, the paired SE of the per-item
    differences, and the exact sign test over the items only one model answers."""
    from picaso_core.finetune.evaluate import skill_paired

    base = {"a": {"1": "1111100000"}, "b": {"1": "11110000"}}
    same = skill_paired(base, base)["1"]
    assert same["diff"] == 0 and same["diff_se"] == 0 and same["p_sign"] == 1 and not same["lower"]
    assert same["n_items"] == 18 and same["base"] == pytest.approx((0.5 + 0.5) / 2)
    assert same["base_se"] == pytest.approx(((0.25 / 10 + 0.25 / 8) ** 0.5) / 2)
    worse = skill_paired(base, {"a": {"1": "0000000000"}, "b": {"1": "00000000"}})["1"]  # loses all 9 right items
    assert (worse["lost"], worse["won"]) == (9, 0) and worse["p_sign"] == pytest.approx(2 / 2 ** 9) and worse["lower"]
    assert worse["diff"] == pytest.approx(-0.5)
    # per task: d = -1 on half the items; SE = sqrt(sum_t s_t^2 / n_t) / T with the sample variance s_t^2
    var_a = sum((x - (-0.5)) ** 2 for x in [-1] * 5 + [0] * 5) / 9 / 10
    var_b = sum((x - (-0.5)) ** 2 for x in [-1] * 4 + [0] * 4) / 7 / 8
    assert worse["diff_se"] == pytest.approx((var_a + var_b) ** 0.5 / 2)
    mixed = skill_paired(base, {"a": {"1": "0111110000"}, "b": {"1": "11110000"}})["1"]  # one lost, one won
    assert (mixed["lost"], mixed["won"], mixed["diff"], mixed["p_sign"], mixed["lower"]) == (1, 1, 0, 1, False)


def test_the_loss_weights_each_term_by_its_count_of_examples_and_documents():
    """CompositionObjective: loss = (n_c · mean_i CE_i + n_d · LM) / (n_c + n_d), checked against a reference
    written from the engine's own entry points (compose + continuation_loss per example; one forward per LM
    document, NLL summed over its tokens, divided by all documents' tokens). With 2 examples and 5 documents
    the unweighted mean (CE + LM) / 2 is far from it."""
    from picaso_core.compose import compose

    model = tiny_model("Mamba2", seed=8, tie_embeddings=False)
    with torch.no_grad():  # a sharper head: a random model's losses all sit near log(vocab) otherwise
        model.lm_head.weight.mul_(30)
    ex, docs = _examples(2, seed=3), _lm_docs()[:5]
    batch = [(e.query, e.continuation, e.contexts) for e in ex]
    with torch.no_grad():
        loss, stats = FT.CompositionObjective(model, "bptc")(batch, docs)
        ce = sum(model.continuation_loss(e.query, e.continuation,
                                         compose("picaso_r", [model.encode_context(c) for c in e.contexts]))
                 for e in ex) / len(ex)
        nll, n_tok = 0.0, 0
        for d in docs:
            logits, _ = model(torch.tensor([d]))
            nll += float(torch.nn.functional.cross_entropy(logits[0, :-1], torch.tensor(d[1:]), reduction="sum"))
            n_tok += len(d) - 1
    lm = nll / n_tok
    assert abs(ce - lm) > 1.0, (ce, lm)  # the weighting matters for this batch
    assert stats["composition_loss"] == pytest.approx(ce, rel=1e-5)
    assert stats["lm_loss"] == pytest.approx(lm, rel=1e-5)
    assert float(loss) == pytest.approx((2 * ce + 5 * lm) / 7, rel=1e-5)
    with torch.no_grad():  # one term alone is that term
        assert float(FT.CompositionObjective(model, "bp2c")(batch)[0]) == pytest.approx(ce, rel=1e-5)
        assert float(FT.CompositionObjective(model, "bptc")([], docs)[0]) == pytest.approx(lm, rel=1e-5)


def test_k_is_drawn_from_k_min_to_k_max_per_micro_batch():
    """Retrieval data: one k per micro-batch, uniform on {k_min..k_max}, the top k contexts most relevant LAST."""
    ex = [FT.Example([i + 1], [i + 2], [[100 * i + j] for j in range(6)]) for i in range(12)]  # 6 contexts each
    for k_min, k_max in ((0, 3), (2, 5), (4, 4)):
        cfg = FT.FinetuneConfig(k_min=k_min, k_max=k_max, batch_size=2, lm_share=0.0)
        seen = []
        for i in range(80):
            batch, _ = FT.micro_batch(cfg, ex, [], i)
            for q, _, ctx in batch:
                assert ctx == ex[q[0] - 1].contexts[:len(batch[0][2])][::-1]
            seen.append(len(batch[0][2]))
        assert set(seen) == set(range(k_min, k_max + 1))


def test_concat_share_reads_the_last_examples_of_a_batch_as_one_token_sequence():
    """micro_batch with concat_share: the same examples and k as without it; the last n_concat of them carry
    their k contexts (most relevant last) and the query as one sequence and no context to compose."""
    ex = [FT.Example([1000 + i], [2000 + i], [[100 * i + j, 100 * i + j] for j in range(6)]) for i in range(24)]
    plain = FT.FinetuneConfig(k_min=2, k_max=6, batch_size=8, lm_share=0.0)
    mixed = FT.FinetuneConfig(k_min=2, k_max=6, batch_size=8, lm_share=0.0, concat_share=0.25)
    assert FT.n_concat(mixed) == 2 and FT.n_concat(plain) == 0
    for i in range(10):
        want, _ = FT.micro_batch(plain, ex, [], i)
        got, _ = FT.micro_batch(mixed, ex, [], i)
        assert got[:6] == want[:6]
        for (q, c, ctx), (wq, wc, wctx) in zip(got[6:], want[6:]):
            e = ex[wq[0] - 1000]
            k = len(wctx)
            assert ctx == [] and c == wc and k >= 2
            expect = []
            for j in reversed(range(k)):  # the k most relevant, the most relevant last, then the query
                expect += e.contexts[j]
            assert q == expect + e.query
    with pytest.raises(ValueError, match="concat_share"):
        FT.FinetuneConfig(concat_share=1.0).check()
    with pytest.raises(ValueError, match="none composed"):
        FT.FinetuneConfig(batch_size=4, lm_share=0.5, concat_share=0.9).check()


def test_a_concat_example_is_scored_as_the_engine_reads_concat():
    """CompositionObjective on a batch mixing composed and Concat examples: the mean CE over all of them, each
    Concat example's CE equal to the engine's continuation loss from the state of its contexts concatenated
    most relevant last (an Example lists them most relevant first)."""
    from picaso_core.compose import compose

    model = tiny_model("Mamba2", seed=9, tie_embeddings=False)
    with torch.no_grad():
        model.lm_head.weight.mul_(30)
    ex = _examples(4, seed=5)
    cfg = FT.FinetuneConfig(data="qa", batch_size=4, lm_share=0.0, concat_share=0.25)
    batch, _ = FT.micro_batch(cfg, ex, [], 0)
    assert [len(b[2]) > 0 for b in batch] == [True, True, True, False]
    order = FT._epoch_order(0, 0, len(ex))
    with torch.no_grad():
        loss, stats = FT.CompositionObjective(model, "bptc")(batch)
        composed = [model.continuation_loss(ex[j].query, ex[j].continuation,
                                            compose("picaso_r", [model.encode_context(c) for c in ex[j].contexts]))
                    for j in order[:3]]
        concat = model.continuation_loss(ex[order[3]].query, ex[order[3]].continuation,
                                         model.encode_context([t for c in ex[order[3]].contexts[::-1] for t in c]))
    # batched padded forwards against one per example, and one forward over contexts + query against a state
    # handed on: float32 rounding of losses near 50 nats (about 1e-4 relative)
    assert stats["composition_loss"] == pytest.approx(sum(composed) / 3, rel=5e-4)
    assert stats["concat_loss"] == pytest.approx(concat, rel=5e-4)
    assert float(loss) == pytest.approx((sum(composed) + concat) / 4, rel=5e-4)  # each example weighs the same
    assert abs(sum(composed) / 3 - concat) > 1e-3  # so a mean of the two means would fail

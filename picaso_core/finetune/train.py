"""Learning to use composed states: BPTC and BP2C fine-tuning (PICASO sec. 5, 6.1, 6.3.2).

    L_BPTC(θ) = Σ_i CE(f_θ(u_i, x^PICASO(S_i)), u'_i)        gradients through the composition and
                                                           through the encoding of every context
    L_BP2C(θ) = Σ_i CE(f_θ(u_i, sg[x^PICASO(S_i)]), u'_i)    the composed state detached (sg): the
                                                           contexts are encoded without gradient

Glossary (paper -> code): u_i the query (`Example.query`), u'_i its continuation
(`Example.continuation`), S_i the retrieved contexts (`Example.contexts`, token ids, most relevant
FIRST as a ranker returns them; a batch presents the top k most relevant LAST, sec. 6.2),
x^PICASO the PICASO-R composition (option PICASO-S), CE the mean NLL per continuation token
(`SSMLanguageModel.continuation_loss`, averaged over the batch's examples).

Data (sec. 6.1): retrieval samples (WikiText protocol) use the top-k chunks of a database with k
drawn uniformly from 0..k_max (10) for each micro-batch; QA samples (MS MARCO shape) use all of
their passages. A share `lm_share` of each batch is plain language-model documents of the base
model's training mix, so that general ability holds (appendix B.4, table 2).

The trainer runs through accelerate: CPU, one GPU or several (each process takes its slice of every
micro-batch), bf16 autocast where the GPU has it, gradient accumulation, tqdm, checkpoints in the
bundled model's layout (config.json + model.safetensors + tokenizer.json, so `load_model(folder)`
reads them) plus trainer_state.pt (optimizer, scheduler, history), and exact resume: which examples,
which k and which LM documents a step uses is a pure function of (seed, step).
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from picaso_core.compose import compose
from picaso_core.data.demo_world import MIXES, render_concat, training_examples
from picaso_core.engine.loading import load_weights, save_model
from picaso_core.engine.losses import token_nll
from picaso_core.engine.state import ContextState
from picaso_core.retrieval.rankers import rank_sample

OBJECTIVES = ("bptc", "bp2c")
COMPOSE_METHODS = ("picaso_r", "picaso_s")
DATA_KINDS = ("retrieval", "qa")
K_LIMIT = 50  # the largest k_max accepted (the paper draws k from 0..10; fig. 6 goes to 50)
PRECISIONS = ("auto", "no", "bf16", "fp16")
CONTEXT_SUFFIX = "\n\n"  # the separator the demo model saw between contexts (sweep.CONTEXT_SUFFIX)


@dataclass
class Example:
    """One fine-tuning example as token ids. contexts: the retrieved contexts, most relevant FIRST."""

    query: list[int]
    continuation: list[int]
    contexts: list[list[int]] = field(default_factory=list)


@dataclass
class FinetuneConfig:
    objective: str = "bptc"  # "bptc" (through composition and encoding) | "bp2c" (composed state detached)
    method: str = "picaso_r"  # the composition trained for: "picaso_r" (paper) | "picaso_s"
    data: str = "retrieval"  # "retrieval": k ~ U{0..k_max} per micro-batch | "qa": every passage
    k_max: int = 10  # sec. 6.1: k drawn from {0, ..., 10}
    k_min: int = 0  # the smallest k drawn; > 1 spends no step on k = 0 or 1, where PICASO-R equals Concat
    epochs: float = 1.0  # sec. 6.1: one epoch; max_steps overrides
    max_steps: int | None = None
    batch_size: int = 8  # examples per micro-batch (composition examples + LM documents)
    grad_accum: int = 1  # micro-batches per optimizer step
    lm_share: float = 0.25  # share of each micro-batch that is plain LM documents of the base mix
    concat_share: float = 0.0  # share of the composition examples read as Concat instead (`micro_batch`)
    lm_mix: str = "v4"  # demo_world.MIXES preset of those documents (the bundled model's)
    lm_max_tokens: int = 512  # longer LM documents are skipped (the base model's row length)
    lr: float = 3e-4
    warmup: int = 10  # linear warmup steps, then cosine decay to 10%
    weight_decay: float = 0.0
    clip: float = 1.0
    seed: int = 0
    mixed_precision: str = "auto"  # "auto": bf16 on a GPU that has it, else full precision
    save_every: int = 0  # steps between checkpoints (0: only the final model)

    def check(self) -> None:
        """Raise ValueError naming the fix for any bad field."""
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}: use 'bptc' (backpropagate through "
                             "composition) or 'bp2c' (composed state detached)")
        if self.method not in COMPOSE_METHODS:
            raise ValueError(f"unknown composition method {self.method!r}: fine-tuning composes with "
                             f"{' or '.join(COMPOSE_METHODS)}")
        if self.data not in DATA_KINDS:
            raise ValueError(f"unknown data kind {self.data!r}: use 'retrieval' (k drawn per batch) or 'qa' "
                             "(all passages)")
        if not (isinstance(self.k_max, int) and 0 <= self.k_max <= K_LIMIT):
            raise ValueError(f"k_max = {self.k_max!r} is out of range: give a whole number from 0 to {K_LIMIT} "
                             "(the paper draws k from 0..10)")
        if not (isinstance(self.k_min, int) and 0 <= self.k_min <= self.k_max):
            raise ValueError(f"k_min = {self.k_min!r} is out of range: give a whole number from 0 to k_max "
                             f"({self.k_max})")
        if not 0 <= self.lm_share < 1:
            raise ValueError(f"lm_share = {self.lm_share} must be in [0, 1): it is the share of plain LM "
                             "documents in each batch")
        if not 0 <= self.concat_share < 1:
            raise ValueError(f"concat_share = {self.concat_share} must be in [0, 1): it is the share of each "
                             "batch's composition examples read as Concat")
        if self.batch_size < 1 or self.grad_accum < 1 or n_lm(self) >= self.batch_size:
            raise ValueError(f"batch_size {self.batch_size} with lm_share {self.lm_share} leaves no composition "
                             "example: raise batch_size or lower lm_share")
        if n_concat(self) >= self.batch_size - n_lm(self):
            raise ValueError(f"concat_share {self.concat_share} reads all {self.batch_size - n_lm(self)} composition "
                             "examples of a batch as Concat, leaving none composed: lower concat_share")
        if self.max_steps is not None and self.max_steps < 1 or self.epochs <= 0:
            raise ValueError("max_steps must be >= 1 (or None) and epochs > 0")
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(f"mixed_precision {self.mixed_precision!r}: use one of {PRECISIONS}")


def n_lm(cfg: FinetuneConfig) -> int:
    """LM documents per micro-batch."""
    return round(cfg.lm_share * cfg.batch_size)


def n_concat(cfg: FinetuneConfig) -> int:
    """Composition examples per micro-batch read as Concat (the rest are composed)."""
    return round(cfg.concat_share * (cfg.batch_size - n_lm(cfg)))


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def build_examples(tokenizer, samples, ranker, database: dict[str, str], k_max: int = 10,
                   suffix: str = CONTEXT_SUFFIX) -> list[Example]:
    """RetrievalSamples -> Examples with the experiments' rankers (picaso_core.retrieval.rankers).

    Retrieval samples keep their top `k_max` chunks of `database` (their own chunks excluded);
    QA samples keep all their passages, ranked. Contexts are tokenised as text + `suffix`, as the
    state store encodes them, so that the training states are the ones evaluation composes."""
    cache: dict[str, list[int]] = {}
    out = []
    for s in samples:
        ranking = rank_sample(ranker, s, None if s.kind == "qa" else k_max)
        for cid in ranking:
            if cid not in cache:
                cache[cid] = tokenizer.encode(database[cid] + suffix)
        out.append(Example(tokenizer.encode(s.query), tokenizer.encode(s.continuation), [cache[c] for c in ranking]))
    return out


def check_disjoint(train, evals) -> None:
    """Sec. 6.1: the training examples and their chunk database must be disjoint from evaluation.
    Raises ValueError naming the first shared sample id, chunk id or chunk text."""
    for ev in evals:
        for what, a, b in (("sample id", {s.sample_id for s in train}, {s.sample_id for s in ev}),
                           ("chunk id", set(train.database), set(ev.database)),
                           ("chunk text", set(train.database.values()), set(ev.database.values()))):
            shared = a & b
            if shared:
                raise ValueError(f"training data shares {len(shared)} {what}s with {ev.name}/{ev.split} "
                                 f"(e.g. {sorted(shared)[0][:60]!r}): train on a split disjoint from evaluation")


def lm_documents(tokenizer, n: int, seed: int, mix: str = "v4", max_tokens: int = 512) -> list[list[int]]:
    """`n` whole documents of the base model's training stream (train split), each ending in EOS."""
    if mix not in MIXES:
        raise ValueError(f"unknown LM mix {mix!r}: use one of {sorted(MIXES)}")
    docs, stream = [], training_examples(seed, "train", mix=MIXES[mix])
    eos = [tokenizer.eos_id] if getattr(tokenizer, "eos_id", None) is not None else []
    while len(docs) < n:
        ids = tokenizer.encode(render_concat(next(stream))) + eos
        if 2 <= len(ids) <= max_tokens + 1:
            docs.append(ids)
    return docs


def total_steps(cfg: FinetuneConfig, n_examples: int) -> int:
    per_step = (cfg.batch_size - n_lm(cfg)) * cfg.grad_accum
    return cfg.max_steps or max(1, math.ceil(cfg.epochs * n_examples / per_step))


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, n: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"{seed}-epoch-{epoch}").shuffle(order)
    return tuple(order)


def micro_batch(cfg: FinetuneConfig, examples: Sequence[Example], lm_docs: Sequence[list[int]], index: int):
    """The composition examples (with their k presented contexts) and LM documents of micro-batch
    `index` (= step * grad_accum + j): a pure function of (cfg.seed, index), so resuming replays it.

    Examples run through one seeded permutation per epoch; k ~ U{k_min..k_max} per micro-batch
    (retrieval) or every passage (QA). The last `n_concat(cfg)` examples are read as Concat: their
    k contexts (most relevant last) and query as one token sequence, with no context to compose, so
    the model is trained on both readings of the same data (measured in docs/finetuning.md: Concat
    learns from them faster than PICASO-R, and the gap widens). Returns (list of (query, continuation, contexts most
    relevant LAST)), list of LM documents."""
    n_c, n_d = cfg.batch_size - n_lm(cfg), n_lm(cfg)
    picked = []
    for pos in range(index * n_c, (index + 1) * n_c):
        epoch, j = divmod(pos, len(examples))
        picked.append(examples[_epoch_order(cfg.seed, epoch, len(examples))[j]])
    k = random.Random(f"{cfg.seed}-k-{index}").randint(cfg.k_min, cfg.k_max) if cfg.data == "retrieval" else None
    batch = [(e.query, e.continuation, list(e.contexts if k is None else e.contexts[:k])[::-1]) for e in picked]
    for i in range(n_c - n_concat(cfg), n_c):
        q, c, ctx = batch[i]
        batch[i] = ([t for x in ctx for t in x] + list(q), c, [])
    docs = [lm_docs[(index * n_d + i) % len(lm_docs)] for i in range(n_d)] if n_d and lm_docs else []
    return batch, docs


# --------------------------------------------------------------------------------------------
# The objective
# --------------------------------------------------------------------------------------------
def _pad(rows: Sequence[Sequence[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [b, t] (pad id 0: causal, so padding after a row's end changes nothing before
    it) and lengths [b]."""
    lengths = torch.tensor([len(r) for r in rows], device=device)
    ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return ids, lengths


def composed_states(model, batch_contexts: Sequence[Sequence[Sequence[int]]], method: str, grad: bool) -> ContextState:
    """One composed state per example (a batched ContextState): every context of the micro-batch
    encoded in ONE padded forward (dt = 0 on padding, so states equal encoding each alone), then
    composed per example; no context is the identity (the empty state). With grad=False (BP2C)
    nothing is recorded for backward: sg[x^PICASO(S_i)]."""
    flat = [c for ctx in batch_contexts for c in ctx if len(c)]
    with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
        parts: list[ContextState] = []
        if flat:
            ids, lengths = _pad(flat, model.device)
            parts = model.hidden_states(ids, None, lengths)[1].unbind()
        out, i = [], 0
        for ctx in batch_contexts:
            n = sum(1 for c in ctx if len(c))
            out.append(compose(method, parts[i:i + n], config=model) if n else model.empty_state())
            i += n
        return ContextState.stack(out)


def continuation_nll(model, queries, continuations, state: ContextState | None) -> torch.Tensor:
    """Mean NLL per continuation token of each example [b] from `state` (batched or None), as
    `SSMLanguageModel.continuation_loss` computes it, for a right-padded batch."""
    rows = [list(q) + list(c) for q, c in zip(queries, continuations)]
    ids, _ = _pad(rows, model.device)
    targets = torch.full_like(ids, -100)
    for i, (q, c) in enumerate(zip(queries, continuations)):
        targets[i, len(q) - 1: len(q) - 1 + len(c)] = torch.as_tensor(c, dtype=torch.long)
    hidden, _ = model.hidden_states(ids, state)
    logits = model.lm_head(hidden).float()  # [b, t, V]
    nll = token_nll(logits, targets)  # [b, t]
    return nll.sum(1) / (targets != -100).sum(1)


def lm_nll(model, docs: Sequence[Sequence[int]]) -> torch.Tensor:
    """Plain language-model loss: mean NLL per next token over the documents (padding ignored)."""
    ids, lengths = _pad(docs, model.device)
    targets = torch.full_like(ids, -100)
    targets[:, :-1] = ids[:, 1:]
    targets[torch.arange(ids.shape[1], device=ids.device)[None] >= (lengths[:, None] - 1)] = -100
    logits = model.lm_head(model.hidden_states(ids)[0]).float()
    return token_nll(logits, targets).sum() / (targets != -100).sum()


class CompositionObjective(nn.Module):
    """The loss of one micro-batch as a module, so that accelerate's wrappers (DDP, autocast) see a
    `forward`. Loss = (n_c · mean_i CE_i + n_d · LM) / (n_c + n_d) with n_c composition examples
    and n_d LM documents. An example without contexts is read from the empty state (Concat examples
    carry their contexts in the query); those rows run in their own forward, so that the short
    composed rows are not padded to their length."""

    def __init__(self, model, objective: str = "bptc", method: str = "picaso_r"):
        super().__init__()
        FinetuneConfig(objective=objective, method=method).check()
        self.model, self.objective, self.method = model, objective, method

    def forward(self, batch, docs=()) -> tuple[torch.Tensor, dict]:
        queries, conts, contexts = zip(*batch) if batch else ((), (), ())
        stats = {}
        terms, weights = [], []
        if batch:
            composed = [i for i, c in enumerate(contexts) if any(len(x) for x in c)]
            plain = [i for i, c in enumerate(contexts) if not any(len(x) for x in c)]
            ces = []
            if composed:
                state = composed_states(self.model, [contexts[i] for i in composed], self.method,
                                        grad=self.objective == "bptc")
                ces.append(continuation_nll(self.model, [queries[i] for i in composed], [conts[i] for i in composed], state))
            if plain:
                ces.append(continuation_nll(self.model, [queries[i] for i in plain], [conts[i] for i in plain], None))
            ce = torch.cat(ces).mean()
            terms.append(ce)
            weights.append(len(batch))
            stats["composition_loss"] = float((ces[0] if composed else ce).detach().mean())
            if composed and plain:
                stats["concat_loss"] = float(ces[1].detach().mean())
        if docs:
            lm = lm_nll(self.model, docs)
            terms.append(lm)
            weights.append(len(docs))
            stats["lm_loss"] = float(lm.detach())
        if not terms:
            raise ValueError("empty micro-batch: give composition examples or LM documents")
        loss = sum(w * t for w, t in zip(weights, terms)) / sum(weights)
        return loss, stats


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------
STATE_FILE = "trainer_state.pt"


def save_checkpoint(folder, model, optimizer, scheduler, step: int, cfg: FinetuneConfig, history: list[dict]) -> Path:
    """The model in the bundled layout (config.json, model.safetensors, tokenizer.json) plus
    trainer_state.pt (optimizer, scheduler, step, config, history) and train_log.json."""
    folder = Path(folder)
    save_model(model, folder)
    torch.save({"step": step, "config": asdict(cfg), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "history": history}, folder / STATE_FILE)
    (folder / "train_log.json").write_text(json.dumps({"config": asdict(cfg), "step": step, "history": history}, indent=1))
    return folder


def _resume_state(folder: Path, cfg: FinetuneConfig) -> dict:
    path = Path(folder) / STATE_FILE
    if not path.is_file():
        raise ValueError(f"{folder} is not a fine-tuning checkpoint (no {STATE_FILE}): pass a folder written by "
                         "train(..., out_dir=...), e.g. <out>/checkpoint-00050")
    state = torch.load(path, map_location="cpu", weights_only=False)  # our own file: optimizer state
    saved = {"k_min": 0, "concat_share": 0.0,  # fields older checkpoints predate, at their defaults
             **{k: v for k, v in state["config"].items() if k != "save_every"}}
    mine = {k: v for k, v in asdict(cfg).items() if k != "save_every"}
    if saved != mine:
        diff = sorted(k for k in mine if saved.get(k) != mine[k])
        raise ValueError(f"{folder} was trained with another config ({', '.join(diff)} differ): resume with "
                         "the same FinetuneConfig")
    return state


# --------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------
@dataclass
class TrainResult:
    steps: int
    history: list[dict]  # per optimizer step: step, loss, composition_loss, lm_loss, k, lr, seconds
    seconds: float
    seconds_per_step: float
    cancelled: bool = False
    out_dir: str | None = None


def _precision(cfg: FinetuneConfig) -> str:
    if cfg.mixed_precision != "auto":
        return cfg.mixed_precision
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def train(model, examples: Sequence[Example], cfg: FinetuneConfig | None = None, *, out_dir=None, resume_from=None,
          lm_docs: Sequence[list[int]] | None = None, progress: bool = True,
          callback: Callable[[dict, int], None] | None = None,
          should_stop: Callable[[], bool] | None = None) -> TrainResult:
    """Fine-tune `model` in place with BPTC or BP2C on `examples`.

    Args:
        model: an SSMLanguageModel (train a copy to keep the original).
        examples: composition examples (`build_examples`); must not be empty.
        cfg: FinetuneConfig (checked: a bad field raises ValueError naming the fix).
        out_dir: where the final model (bundled layout) and checkpoint-<step>/ folders go; None: nowhere.
        resume_from: a checkpoint folder: its weights, optimizer and scheduler are loaded and training
            goes on from its step, replaying the same micro-batches an uninterrupted run would see.
        lm_docs: the plain LM documents (None: `lm_documents` of the base mix, needs a tokenizer).
        callback: callback(record, total_steps) after every optimizer step (the app's live curve).
        should_stop: polled after every step; True ends the run early (cancel), result.cancelled.
    """
    from accelerate import Accelerator  # heavy, on first use: training runs only

    cfg = cfg or FinetuneConfig()
    cfg.check()
    if not examples:
        raise ValueError("no training examples: build them from a corpus split disjoint from evaluation, e.g. "
                         "build_examples(tok, load_corpus('demo', 'train').samples, ranker, database)")
    steps = total_steps(cfg, len(examples))
    if n_lm(cfg) and lm_docs is None:
        if getattr(model, "tokenizer", None) is None:
            raise ValueError("lm_share > 0 needs LM documents: pass lm_docs or a model with a tokenizer")
        lm_docs = lm_documents(model.tokenizer, min(steps * cfg.grad_accum * n_lm(cfg), 4096), cfg.seed + 1,
                               cfg.lm_mix, cfg.lm_max_tokens)
    acc = Accelerator(mixed_precision=_precision(cfg), gradient_accumulation_steps=cfg.grad_accum)
    # nothing here draws from torch's generator (micro_batch seeds its own): the global one is left
    # alone, as a run in the app's worker thread must not reseed it under other handlers (engine/rng.py)
    start, history = 0, []
    state = None
    if resume_from is not None:
        state = _resume_state(Path(resume_from), cfg)
        load_weights(model, Path(resume_from))
        start, history = int(state["step"]), list(state["history"])
    model.to(acc.device).train()
    # no weight decay on norms, biases, A_log, D, dt_bias (as scripts/train_demo.py)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))

    def lr_at(step: int) -> float:  # linear warmup, cosine to 10% over the run
        warm = min(1.0, (step + 1) / max(1, cfg.warmup))
        return warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / steps))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
    objective, opt = acc.prepare(CompositionObjective(model, cfg.objective, cfg.method), opt)
    rank, world = acc.process_index, acc.num_processes
    bar = None
    if progress and acc.is_local_main_process:
        bar = tqdm(total=steps, initial=start, desc=f"{cfg.objective.upper()} ({cfg.data})", unit="step", dynamic_ncols=True)
    t0, cancelled, step = time.perf_counter(), False, start
    while step < steps:
        ts = time.perf_counter()
        losses, parts, ks = [], {}, []
        for j in range(cfg.grad_accum):
            batch, docs = micro_batch(cfg, examples, lm_docs or [], step * cfg.grad_accum + j)
            ks.append(len(batch[0][2]) if batch else 0)
            with acc.accumulate(objective):
                loss, stats = objective(batch[rank::world], docs[rank::world])
                acc.backward(loss)
                if acc.sync_gradients and cfg.clip:
                    acc.clip_grad_norm_(model.parameters(), cfg.clip)
                opt.step()
                opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            for k, v in stats.items():
                parts.setdefault(k, []).append(v)
        lr = sched.get_last_lr()[0]
        sched.step()
        step += 1
        rec = {"step": step, "loss": sum(losses) / len(losses), "k": ks, "lr": lr,
               "seconds": round(time.perf_counter() - ts, 4), **{k: sum(v) / len(v) for k, v in parts.items()}}
        history.append(rec)
        if bar is not None:
            bar.set_postfix(loss=f"{rec['loss']:.4f}", k=ks[0])
            bar.update(1)
        if callback is not None:
            callback(rec, steps)
        if out_dir and cfg.save_every and step % cfg.save_every == 0 and step < steps and acc.is_main_process:
            save_checkpoint(Path(out_dir) / f"checkpoint-{step:05d}", model, opt, sched, step, cfg, history)
        if should_stop is not None and should_stop() and step < steps:
            cancelled = True
            break
    if bar is not None:
        bar.close()
    model.eval()
    if out_dir and acc.is_main_process:
        save_checkpoint(out_dir, model, opt, sched, step, cfg, history)
    seconds = time.perf_counter() - t0
    done = max(1, step - start)
    return TrainResult(step, history, seconds, seconds / done, cancelled, str(out_dir) if out_dir else None)

"""Mixing states of the skill library (State Soup, Pióro et al. 2024, sec. 2.2-2.3): answers scored
from states, the soup of k-shot states vs the shots themselves, retrieval + mixing, weighted mixing of
two tasks' states, and A-decay mixing of sequential chunks. The library is picaso_core.analysis.soup.

Glossary (paper -> code):
    mixing      soup (mean) of states (sec. 2.2); weighted: w x_a + (1-w) x_b; A-decay
                (sec. 2.3): x_2 + A_2 x_1 (compose.decay_mix)
    task state  the soup of one task's library states (task_state)

Sections of the paper and the functions here:
    sec. 2.2, fig. 2         mixing_table (left), retrieval_mixing (right), two_task_mix
    sec. 2.3, fig. 3         decay_comparison, decay_table

Accuracy is greedy exact match read off one teacher-forced forward: every answer token and the
newline closing the line must be the model's argmax (what greedy decoding would write, scored for
many states in one batched forward instead of one generation each). Loss is the mean NLL per
answer token, as model.continuation_loss. Everything returns plain data (lists, dicts, numpy).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from picaso_core.analysis.soup import Progress, SkillLibrary, _check_ks, _draw, _noop, skill_tasks, task_names
from picaso_core.compose import compose, decay_mix
from picaso_core.data.skills import SHUFFLED_SUFFIX, format_demos, format_query
from picaso_core.engine.losses import token_nll
from picaso_core.engine.state import ContextState

DECAY_METHODS = ("concat", "a_decay", "mean", "c2_only")  # sec. 2.3, in the paper's order, best first


# --------------------------------------------------------------------------------------------
# Scoring answers from states
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def score_answer(model, states: Sequence[ContextState], prompt: str, answer: str) -> tuple[list[float], list[bool]]:
    """Loss of ` answer` after `prompt` from each state, and greedy exact match (every answer token
    and the closing newline is the argmax), in one batched forward.

    Returns (losses, exact), one per state."""
    tok = model.tokenizer
    p, a, nl = tok.encode(prompt), tok.encode(answer), tok.encode("\n")
    if not p or not a:
        raise ValueError("prompt and answer must each have at least one token")
    target = torch.tensor(a + nl)
    ids = torch.tensor(p + a + nl)[None].expand(len(states), -1)
    hidden, _ = model.hidden_states(ids, ContextState.stack([s.to(model.device) for s in states]))
    logits = model.lm_head(hidden[:, len(p) - 1: -1]).float()[..., : model.config.vocab_size]  # [b, |a|+|nl|, V]
    tgt = target.to(logits.device)[None].expand(len(states), -1)
    nll = token_nll(logits, tgt)[:, : len(a)].mean(1)
    exact = (logits.argmax(-1) == tgt).all(1)
    return nll.tolist(), exact.tolist()


def _encode(model, texts: Sequence[str]) -> list[ContextState]:
    tok = model.tokenizer
    return model.encode_contexts([tok.encode(t) for t in texts])


# --------------------------------------------------------------------------------------------
# Mixing (sec. 2.2, fig. 2)
# --------------------------------------------------------------------------------------------
def mixing_table(model, tasks: Sequence[str] | None = None, total: int = 16, ks: Sequence[int] = (1, 2, 4, 8, 16),
                 queries: int = 10, seed: int = 0, progress: Progress | None = None) -> list[dict]:
    """Fig. 2 left: for each k, the soup of m = total/k states of k-shot demonstrations vs k shots
    alone vs one state of all m*k = total shots, on test queries of each base task.

    The k-shot set is the soup's first part and the total-shot state reads the same items, so
    the three differ only in how the demonstrations reach the state.
    Returns rows {"k", "m", "method" ("k_shots" | "soup" | "all_shots"), "accuracy", "loss", "n"}."""
    ks = _check_ks(ks)
    if any(total % k for k in ks):
        raise ValueError(f"every k must divide total = {total}, got {ks}")
    names = [t for t in task_names(tasks, include_shuffled=False) if not t.endswith(SHUFFLED_SUFFIX)]
    train, test = skill_tasks("train", False), skill_tasks("test", False)
    progress = progress or _noop
    acc: dict = {}
    jobs = [(t, i) for t in names for i in range(queries)]
    for j, (task, i) in enumerate(jobs):
        rng = random.Random(f"soup-mix:{seed}:{task}:{i}")
        q, a = rng.choice(test[task])
        demo = rng.sample(train[task], total)
        parts = {k: [demo[s: s + k] for s in range(0, total, k)] for k in ks}
        texts = [format_demos(demo)] + [format_demos(p) for k in ks for p in parts[k]]
        enc = _encode(model, texts)
        full, rest = enc[0], enc[1:]
        cand, keys = [full], [(None, "all_shots")]
        for k in ks:
            sts, rest = rest[: len(parts[k])], rest[len(parts[k]):]
            cand += [sts[0], compose("soup", sts, config=model)]
            keys += [(k, "k_shots"), (k, "soup")]
        losses, exact = score_answer(model, cand, format_query(q), f" {a}")
        for key, loss, ok in zip(keys, losses, exact):
            acc.setdefault(key, []).append((loss, ok))
        progress(j + 1, len(jobs))
    rows = []
    for k in ks:
        for method in ("k_shots", "soup", "all_shots"):
            vals = acc[(k, method) if method != "all_shots" else (None, method)]
            rows.append({"k": k, "m": total // k, "method": method, "accuracy": float(np.mean([v[1] for v in vals])),
                         "loss": float(np.mean([v[0] for v in vals])), "n": len(vals)})
    return rows


def retrieval_mixing(model, lib: SkillLibrary, ks: Sequence[int] = (1, 2, 4, 8), top: int = 1, layer: int | None = None,
                     part: str = "ssm", queries: int = 10, seed: int = 0, progress: Progress | None = None) -> list[dict]:
    """Fig. 2 right: the state of a k-shot demonstration (test items) alone vs mixed (soup) with
    the `top` library states nearest to it, scored on another test query of the same task.

    Returns rows {"k", "method" ("query" | "retrieved_mix"), "accuracy", "loss", "retrieval_hit", "n"}."""
    ks = _check_ks(ks)
    layer = lib.n_layer // 2 if layer is None else layer
    names = [t for t in lib.task_list if not t.endswith(SHUFFLED_SUFFIX)]
    test = skill_tasks("test", False)
    progress = progress or _noop
    res: dict = {}
    jobs = [(t, k, i) for t in names for k in ks for i in range(queries)]
    for j, (task, k, i) in enumerate(jobs):
        rng = random.Random(f"soup-rmix:{seed}:{task}:{k}:{i}")
        q, a = rng.choice(test[task])
        demo = _draw([p for p in test[task] if p[0] != q], k, rng)
        qstate = _encode(model, [format_demos(demo)])[0]
        near = lib.nearest(qstate, layer, part, top)
        mixed = compose("soup", [lib.states[n] for n, _ in near] + [qstate], config=model)
        losses, exact = score_answer(model, [qstate, mixed], format_query(q), f" {a}")
        hit = lib.tasks[near[0][0]] == task
        for method, loss, ok in zip(("query", "retrieved_mix"), losses, exact):
            res.setdefault((k, method), []).append((loss, ok, hit))
        progress(j + 1, len(jobs))
    return [{"k": k, "method": m, "accuracy": float(np.mean([v[1] for v in vals])),
             "loss": float(np.mean([v[0] for v in vals])), "retrieval_hit": float(np.mean([v[2] for v in vals])),
             "n": len(vals)} for (k, m), vals in res.items()]


def task_state(lib: SkillLibrary, task: str) -> ContextState:
    """A task's skill: the soup of its library states."""
    idx = [i for i, t in enumerate(lib.tasks) if t == task]
    if not idx:
        raise ValueError(f"task {task!r} is not in the library; it holds: {', '.join(lib.task_list)}")
    return compose("soup", [lib.states[i] for i in idx])


@torch.no_grad()
def two_task_mix(model, state_a: ContextState, state_b: ContextState, prompt: str, answers: Sequence[str],
                 ws: Sequence[float] = tuple(np.round(np.linspace(0, 1, 11), 2)), max_new_tokens: int = 8) -> list[dict]:
    """Weighted mixing of two tasks' states, x = w x_a + (1-w) x_b (sec. 2.2's counting +
    English-French example), as w moves: the greedy generation after `prompt` and the loss of each
    answer in `answers`.

    Returns rows {"w", "generation", "losses": {answer: loss}}."""
    if not prompt.strip():
        raise ValueError("the prompt is empty: type a query line such as 'bat →'")
    answers = [a if a.startswith(" ") else " " + a for a in answers if a.strip()]
    tok = model.tokenizer
    mixes = [compose("weighted", [state_a, state_b], weights=[float(w), 1.0 - float(w)], config=model) for w in ws]
    gens = model.generate_batch(tok.encode(prompt), mixes, max_new_tokens=max_new_tokens)  # all w at once
    losses = {a.strip(): score_answer(model, mixes, prompt, a)[0] for a in answers}  # one forward per answer
    return [{"w": float(w), "generation": tok.display_text(gen).split("\n")[0].strip(),
             "losses": {a: v[i] for a, v in losses.items()}} for i, (w, gen) in enumerate(zip(ws, gens))]


# --------------------------------------------------------------------------------------------
# Mixing sequential chunks (sec. 2.3, fig. 3)
# --------------------------------------------------------------------------------------------
@dataclass
class DecayComparison:
    losses: dict[str, float]  # DECAY_METHODS -> loss on the test chunk
    order: list[str]  # the methods sorted by loss, best first


@torch.no_grad()
def decay_comparison(model, c1: Sequence[int], c2: Sequence[int], test: Sequence[int]) -> DecayComparison:
    """Loss on chunk `test` after c1 ⧺ c2 from four states (token ids in):
        concat    c1 then c2 processed in sequence (the reference)
        a_decay   decay_mix(x(c1), x(c2)) = x(c2) + A(c2) x(c1); exact for one layer. Its conv window
                  is c2's last inputs (conv="last"), as after reading c1 ⧺ c2.
        mean      the soup of x(c1) and x(c2) (mean-mixing)
        c2_only   x(c2)
    The test chunk's first token is predicted from the state as well (query = its first token is
    not possible without a prompt, so the loss is over test[1:] given test[0])."""
    if len(c1) == 0 or len(c2) == 0 or len(test) < 2:
        raise ValueError("c1 and c2 need at least one token each and the test chunk at least two")
    s1, s2 = model.encode_contexts([list(c1), list(c2)])
    states = {
        "concat": model.encode_context(list(c2), state=s1),
        "a_decay": decay_mix(s1, s2, conv="last"),
        "mean": compose("soup", [s1, s2], config=model),
        "c2_only": s2,
    }
    vals = model.continuation_losses(list(test[:1]), list(test[1:]), list(states.values()))
    losses = dict(zip(states, vals))
    return DecayComparison(losses, sorted(losses, key=losses.get))


def document_chunks(texts: Sequence[str], tokenizer, chunk_tokens: int = 100, documents: int = 20,
                    sep: str = "\n\n") -> list[tuple[list[int], list[int], list[int]]]:
    """(c1, c2, test) chunks of `chunk_tokens` tokens each, cut from consecutive windows of the
    texts joined by `sep` (the paper: 3 x 100 tokens of one news article)."""
    if chunk_tokens < 2:
        raise ValueError(f"chunk_tokens must be >= 2, got {chunk_tokens}")
    ids = tokenizer.encode(sep.join(texts))
    n = 3 * chunk_tokens
    out = []
    for s in range(0, len(ids) - n + 1, n):
        w = ids[s: s + n]
        out.append((w[:chunk_tokens], w[chunk_tokens: 2 * chunk_tokens], w[2 * chunk_tokens:]))
        if len(out) == documents:
            break
    if not out:
        raise ValueError(f"the texts hold {len(ids)} tokens, fewer than 3 x {chunk_tokens}; give longer texts")
    return out


def decay_table(model, chunks: Sequence[tuple], progress: Progress | None = None) -> dict:
    """Mean loss per method over many (c1, c2, test) chunks, and how often each method beats
    the next in the paper's order. Returns {"mean_loss", "wins": {"a_decay<mean": frac, ...}, "n",
    "order" (by mean loss)}."""
    progress = progress or _noop
    rows = []
    for i, (c1, c2, t) in enumerate(chunks):
        rows.append(decay_comparison(model, c1, c2, t).losses)
        progress(i + 1, len(chunks))
    mean = {m: float(np.mean([r[m] for r in rows])) for m in DECAY_METHODS}
    pairs = [("concat", "a_decay"), ("a_decay", "mean"), ("a_decay", "c2_only"), ("mean", "c2_only")]
    wins = {f"{a}<{b}": float(np.mean([r[a] < r[b] for r in rows])) for a, b in pairs}
    return {"mean_loss": mean, "wins": wins, "n": len(rows), "order": sorted(mean, key=mean.get)}

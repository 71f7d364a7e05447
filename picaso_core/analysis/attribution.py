"""Which context does an answer rest on? Attribution from a database of states (PICASO appendix C).

Glossary (paper appendix C -> code). A query u_q, an answer u_a, candidate contexts S = (u_0..u_{n-1})
in presentation order, their stored states x_i = `states[i]`.
    L(X)          mean NLL per answer token of u_a after u_q, starting from state X (nats)
    x̂(T)          the state composed from the contexts of a subset T of S with a method (compose.py)
    LOI_i         L(x(u_i)): leave-one-in, each context alone; the LOWEST is the most relevant
    LOO_i         L(x̂(S without i)) - L(x̂(S)): leave-one-out; the HIGHEST is the most relevant
    mask          a subset T as a 0/1 row over the n contexts, [m, n] for m subsets
    per token     L_t(X): the NLL of answer token t alone; LOO per token = [n, T_a] loss changes

Why states make this cheap: removing a context from a state composition is another weighted sum of
the stored states (the weights are functions of the decays alone, compose.py), so the n
leave-one-out states, or the 64 random subsets of an ablation surrogate (ContextCite, Cohen-Wang
et al. 2024), cost no forward pass over any context; only the query and answer are read, once per
subset, in one batched forward. Concat / PICConcat-R re-process the kept contexts' tokens for
every subset: the cost every public attribution tool pays (ContextCite, AttriBoT).

Every function returns plain data (lists, numpy arrays, small dataclasses).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from picaso_core.compose import compose, composition_weights, mean_of_rotations
from picaso_core.compose.attention import comparable_shapes
from picaso_core.compose.registry import REGISTRY
from picaso_core.engine.losses import token_nll as engine_token_nll
from picaso_core.engine.state import ContextState

# the paper's six methods (compose/registry.py): its state methods are composed from the stored states,
# its token methods re-process the kept contexts' tokens per subset
_PAPER = [m for m in REGISTRY if m.cached]
STATE_METHODS = tuple(m.name for m in _PAPER if m.kind == "state")
TOKEN_METHODS = tuple(m.name for m in _PAPER if m.kind == "tokens")
LOO_METHODS = tuple(m.name for m in _PAPER)
NAMES = {"loi": "LOI", **{m.name: m.label for m in _PAPER}, "surrogate": "Surrogate"}
# Table 4 of the paper: precision on MS MARCO with Mamba2-2.7B (LOO with each composition method).
PAPER_TABLE4 = {"loi": 0.699, "concat": 0.690, "soup": 0.629, "caso": 0.725, "picaso_r": 0.732, "picaso_s": 0.731}

Progress = Callable[[int, int], None]


# --------------------------------------------------------------------------------------------
# Subsets of the stored states, composed and scored in batches
# --------------------------------------------------------------------------------------------
def subset_weights(method: str, log_decays: Tensor, masks: Tensor) -> Tensor:
    """W of `method` for each subset: log_decays [n, *A], masks [m, n] (0/1) -> [m, n, *A].

    Row r holds the method's weights over the kept contexts (in their order), 0 for the dropped
    ones; an empty subset is all zeros (the empty state). The weights are tiny (Mamba-2: one per
    head per layer), so each row runs compose.py's weight function on the kept decays."""
    m, n = masks.shape
    W = torch.zeros(m, *log_decays.shape, dtype=log_decays.dtype, device=log_decays.device)
    for r in range(m):
        kept = masks[r].nonzero().flatten()
        if kept.numel():
            W[r, kept] = composition_weights(method, log_decays[kept])
    return W


def compose_subsets(method: str, states: Sequence[ContextState], masks, config=None) -> ContextState:
    """The m states composed from the subsets `masks` [m, n] of `states`, as one batched state.

    Row r equals `compose(method, [states[i] for kept i], config=config)` (conv: the mean of the kept
    windows) and the empty state for an empty row; all rows come from one weighted sum over the n stored
    states, Σ_k W[:, k] x_k, accumulated in place as compose.weighted_sum does. A hybrid's states (keys
    and values beside the SSM part) are composed row by row by compose itself, which joins the kept
    contexts' keys (re-rotated under RoPE: `config`, the model); the batch pads them to the longest row."""
    if method not in STATE_METHODS:
        raise ValueError(f"compose_subsets composes stored states ({', '.join(STATE_METHODS)}), got {method!r}")
    masks = _as_masks(masks, len(states))
    ref = states[0]
    if ref.has_attention:
        empty = ContextState.zeros(comparable_shapes(ref), device=ref.ssm.device).to(dtype=ref.ssm.dtype)
        return ContextState.stack([compose(method, [s for s, keep in zip(states, row) if keep], config=config)
                                   if any(row) else empty for row in masks.tolist()])
    mk = masks.to(ref.ssm.device, ref.log_decay.dtype)  # [m, n]
    log_decays = torch.stack([s.log_decay for s in states])  # [n, *A]
    W = subset_weights(method, log_decays, mk)  # [m, n, *A]
    ssm = _subset_sum(W, [s.ssm for s in states])  # [m, *x]
    count = mk.sum(1, keepdim=True)  # [m, 1]
    c = mk / count.clamp(min=1)  # the mean of the kept conv windows; 0 for an empty row
    conv = torch.einsum("mn,n...->m...", c, torch.stack([s.conv for s in states]))
    log_decay = torch.einsum("mn,n...->m...", mk, log_decays)  # the decay of the kept tokens
    tokens = [int(s.num_tokens) for s in states]
    num_tokens = tuple(sum(t for t, keep in zip(tokens, row) if keep) for row in masks.tolist())
    return ContextState(ssm=ssm, conv=conv, log_decay=log_decay, num_tokens=num_tokens)


def _subset_sum(W: Tensor, xs: Sequence[Tensor]) -> Tensor:
    """out[r] = Σ_k W[r, k] x_k for m rows at once. W [m, n, *A], xs n tensors [*X], A broadcastable to X.

    Mamba-2 (A = [L, H, 1, 1]: one weight per head) is a batched matmul over the L·H heads,
    [L·H, m, n] @ [L·H, n, P·N]: it reads each state once and writes each row once. The per-k
    accumulation of compose.weighted_sum would read and write all m rows n times (10x the memory
    traffic at n = 10; measured 1.2 s vs ~0.2 s for the 11 LOO states of mamba2-130m on CPU).
    Mamba-1's decays have the state's shape, so there it accumulates per k."""
    m, n = W.shape[:2]
    A, X = W.shape[2:], xs[0].shape
    lead = len(A)  # the weights vary over A[:lead] and broadcast over the rest
    while lead and A[lead - 1] == 1:
        lead -= 1
    if len(A) == len(X) and 0 < lead < len(X) and tuple(A[:lead]) == tuple(X[:lead]):
        k = math.prod(X[:lead])
        x = torch.stack([t.reshape(k, -1) for t in xs], 1)  # [k, n, q]
        w = W.reshape(m, n, k).permute(2, 0, 1).to(x.dtype)  # [k, m, n]
        return torch.bmm(w, x).permute(1, 0, 2).reshape(m, *X)  # [m, *X]
    out = W[:, 0] * xs[0]
    for j in range(1, n):
        out.addcmul_(W[:, j], xs[j])
    return out


def _token_subset_states(model, method: str, states, context_ids, masks: Tensor) -> list[ContextState]:
    """States of the subsets by processing tokens. concat: the kept contexts' concatenation, started
    from the first kept context's stored state (paper sec. 6.2), all rows in one ragged batched
    forward; picconcat_r: compose_tokens' mean over the rotations of each subset, every rotation
    of every subset in one ragged `encode_contexts` call."""
    out: list[ContextState | None] = [None] * masks.shape[0]
    rows, rotations = [], []
    for r, row in enumerate(masks.tolist()):
        kept = [i for i, keep in enumerate(row) if keep]
        if not kept:
            out[r] = model.empty_state()
        elif method == "picconcat_r":
            parts = [context_ids[i] for i in kept]
            rotations += [(r, [t for c in parts[j:] + parts[:j] for t in c]) for j in range(len(parts))]
        else:
            rest = [t for i in kept[1:] for t in context_ids[i]]
            if rest:
                rows.append((r, kept[0], rest))
            else:
                out[r] = states[kept[0]]
    if rows:
        with torch.no_grad():
            lengths = torch.tensor([len(rest) for _, _, rest in rows], device=model.device)
            ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)  # right-padded
            for j, (_, _, rest) in enumerate(rows):
                ids[j, : len(rest)] = torch.tensor(rest)
            first = ContextState.stack([states[f].to(model.device) for _, f, _ in rows])
            _, st = model.hidden_states(ids, first, lengths)
        for j, (r, _, _) in enumerate(rows):
            out[r] = st[j]
    if rotations:
        encoded = model.encode_contexts([ids for _, ids in rotations], batch_size=64)
        for r in dict.fromkeys(r for r, _ in rotations):
            out[r] = mean_of_rotations([e for (rr, _), e in zip(rotations, encoded) if rr == r],  # as compose_tokens
                                        config=model)
    return out


@torch.no_grad()
def token_nll(model, query_ids, answer_ids, state: ContextState) -> Tensor:
    """NLL of each answer token after the query from each row of a batched state: [b, T_a].

    The same forward as model.continuation_loss (whose mean over tokens it is), kept per token."""
    q, a = list(query_ids), list(answer_ids)
    b = state.batch_size if state.batched else 1
    ids = torch.tensor(q + a, dtype=torch.long)[None].expand(b, -1)
    hidden, _ = model.hidden_states(ids, state)
    logits = model.lm_head(hidden[:, len(q) - 1: -1]).float()  # the positions that predict a
    target = torch.tensor(a, device=logits.device)[None].expand(b, -1)
    return engine_token_nll(logits, target)  # [b, T_a]


def subset_token_losses(model, query_ids, answer_ids, states: Sequence[ContextState], method: str, masks,
                        context_ids=None, batch_size: int = 32) -> np.ndarray:
    """Per-token answer NLL from the state `method` builds from each subset: masks [m, n] -> [m, T_a].

    State methods compose `batch_size` subsets at a time from the stored states (no context is
    read) and score them in one batched forward; token methods process the kept contexts."""
    _check(query_ids, answer_ids, states, method, context_ids, LOO_METHODS)
    masks = _as_masks(masks, len(states))
    out = []
    for r0 in range(0, masks.shape[0], batch_size):
        chunk = masks[r0:r0 + batch_size]
        if method in STATE_METHODS:
            st = compose_subsets(method, states, chunk, config=model)
        else:
            st = ContextState.stack([s.to(model.device) for s in
                                     _token_subset_states(model, method, states, context_ids, chunk)])
        out.append(token_nll(model, query_ids, answer_ids, st).cpu())
    return torch.cat(out).numpy()


# --------------------------------------------------------------------------------------------
# Leave-one-in, leave-one-out
# --------------------------------------------------------------------------------------------
def leave_one_in(model, query_ids, answer_ids, states: Sequence[ContextState], batch_size: int = 32) -> list[float]:
    """LOI_i = L(x(u_i)): the answer's mean NLL per token from each context's state alone (paper
    appendix C). The LOWEST is the most relevant. One batched forward per `batch_size` states."""
    _check(query_ids, answer_ids, states, "soup", None, STATE_METHODS)
    out = []
    for r0 in range(0, len(states), batch_size):
        st = ContextState.stack([s.to(model.device) for s in states[r0:r0 + batch_size]])
        out += token_nll(model, query_ids, answer_ids, st).mean(1).tolist()
    return out


@dataclass
class LeaveOneOut:
    """Leave-one-out with one method. All losses in nats per answer token."""

    method: str
    full: np.ndarray  # [T_a] per-token NLL from the state of all n contexts, x̂(S)
    without: np.ndarray  # [n, T_a] per-token NLL from x̂(S without i)
    seconds: float  # to build and score the n + 1 states

    @property
    def token_deltas(self) -> np.ndarray:
        """[n, T_a]: how much each answer token's loss rises when context i is left out."""
        return self.without - self.full[None]

    @property
    def scores(self) -> list[float]:
        """LOO_i = L(S without i) - L(S), the mean of the token deltas; HIGHEST = most relevant."""
        return (self.without.mean(1) - self.full.mean()).tolist()

    @property
    def full_loss(self) -> float:
        return float(self.full.mean())


def leave_one_out_tokens(model, query_ids, answer_ids, states: Sequence[ContextState], method: str,
                         context_ids=None, batch_size: int = 32) -> LeaveOneOut:
    """Leave-one-out per answer token: the full set and the n sets without one context, scored
    together (rows of one mask matrix: all ones, then the identity's complement)."""
    t0 = time.perf_counter()
    n = len(states) if isinstance(states, (list, tuple)) else 0
    masks = torch.ones(n + 1, n, dtype=torch.bool)
    masks[1:] &= ~torch.eye(n, dtype=torch.bool)  # row 1 + i leaves context i out
    nll = subset_token_losses(model, query_ids, answer_ids, states, method, masks, context_ids, batch_size)
    return LeaveOneOut(method, nll[0], nll[1:], time.perf_counter() - t0)


def leave_one_out(model, query_ids, answer_ids, states: Sequence[ContextState], method: str,
                  context_ids=None, batch_size: int = 32) -> list[float]:
    """LOO_i = L(x̂(S without i)) - L(x̂(S)) with `method` (paper appendix C); higher = more important.

    Args:
        method: concat, soup, caso, picaso_s, picaso_r or picconcat_r. The state methods compose
            the n subsets from `states` (no context is re-encoded); concat and picconcat_r
            re-process tokens and need `context_ids` (the contexts' token ids, in the order of
            `states`), the order kept minus the removed context. n = 1 leaves the empty state.
    Returns: n floats (nats per answer token)."""
    return leave_one_out_tokens(model, query_ids, answer_ids, states, method, context_ids, batch_size).scores


# --------------------------------------------------------------------------------------------
# The ablation surrogate (ContextCite: random keep-masks, a sparse linear model of the loss)
# --------------------------------------------------------------------------------------------
@dataclass
class SurrogateResult:
    """A LASSO fit loss ≈ intercept + Σ_i weights_i · mask_i over random ablations."""

    weights: list[float]  # nats of answer loss per kept context; NEGATIVE = the context supports the answer
    intercept: float  # predicted loss with no context kept
    lds: float  # Spearman(prediction, actual loss) on held-out masks (linear datamodeling score)
    alpha: float  # the L1 penalty used
    masks: np.ndarray  # [n_ablations, n] the fitted masks (0/1)
    losses: np.ndarray  # [n_ablations] their actual losses
    heldout_masks: np.ndarray  # [n_heldout, n]
    heldout_losses: np.ndarray
    heldout_predictions: np.ndarray
    seconds: float = 0.0  # to build and score every ablation and fit

    @property
    def scores(self) -> list[float]:
        """-weights: the loss a context removes, higher = more important (LOO's convention)."""
        return [-w for w in self.weights]


def ablation_masks(n: int, count: int, keep: float, rng: np.random.Generator) -> np.ndarray:
    """[count, n] 0/1 masks, each context kept with probability `keep` (ContextCite's sampling)."""
    return (rng.random((count, n)) < keep).astype(np.int8)


def fit_surrogate(masks, losses, heldout_masks, heldout_losses, alpha: float | None = None) -> SurrogateResult:
    """Fit sklearn's Lasso of `losses` on `masks` and score it on the held-out masks (LDS).

    alpha: the L1 penalty; None: 0.01 x the standard deviation of the losses, so that the fit does
    not depend on the scale of the losses (a LASSO's weights scale with y when alpha does): a
    trained model's contexts move the loss by nats, a random model's by thousandths."""
    from scipy.stats import spearmanr  # heavy, on first use: the surrogate fit only
    from sklearn.linear_model import Lasso  # heavy, on first use: the surrogate fit only

    X, y = np.asarray(masks, dtype=np.float64), np.asarray(losses, dtype=np.float64)
    Xh, yh = np.asarray(heldout_masks, dtype=np.float64), np.asarray(heldout_losses, dtype=np.float64)
    if alpha is None:
        alpha = 0.01 * float(y.std()) or 1e-6
    fit = Lasso(alpha=alpha, fit_intercept=True, max_iter=10_000).fit(X, y)
    pred = fit.predict(Xh) if len(Xh) else np.zeros(0)
    lds = float(spearmanr(pred, yh).statistic) if len(Xh) > 2 and np.ptp(pred) > 0 and np.ptp(yh) > 0 else math.nan
    return SurrogateResult([float(w) for w in fit.coef_], float(fit.intercept_), lds, alpha, np.asarray(masks),
                           y, np.asarray(heldout_masks), yh, pred)


def ablation_surrogate(score: Callable[[np.ndarray], np.ndarray], n: int, n_ablations: int = 64, keep: float = 0.5,
                       seed: int = 0, n_heldout: int | None = None, alpha: float | None = None) -> SurrogateResult:
    """The surrogate for any scorer: `score(masks [m, n]) -> losses [m]` is called once on all masks
    (fitted + held-out); deterministic per `seed`. n_heldout: default max(8, n_ablations // 4)."""
    if n < 1:
        raise ValueError("no contexts to attribute: give at least one")
    if n_ablations < 2 or not 0 < keep < 1:
        raise ValueError(f"need n_ablations >= 2 and 0 < keep < 1, got {n_ablations} and {keep}")
    n_heldout = max(8, n_ablations // 4) if n_heldout is None else n_heldout
    t0 = time.perf_counter()
    masks = ablation_masks(n, n_ablations + n_heldout, keep, np.random.default_rng(seed))
    losses = np.asarray(score(masks), dtype=np.float64)
    res = fit_surrogate(masks[:n_ablations], losses[:n_ablations], masks[n_ablations:], losses[n_ablations:], alpha)
    res.seconds = time.perf_counter() - t0
    return res


def surrogate(model, query_ids, answer_ids, states: Sequence[ContextState], method: str = "picaso_r",
              n_ablations: int = 64, keep: float = 0.5, seed: int = 0, n_heldout: int | None = None,
              alpha: float | None = None, context_ids=None, batch_size: int = 32) -> SurrogateResult:
    """ContextCite's ablation surrogate with every ablation composed from the stored states.

    Draws `n_ablations` (+ `n_heldout`) random keep-masks, builds each kept subset's state with
    `method` (a state method: a weighted sum, no forward pass over any context; concat /
    picconcat_r: the ContextCite way, re-processing the kept tokens, needs `context_ids`), scores
    them all batched, fits a LASSO of the answer loss on the mask and returns its weights, its
    intercept and the LDS on the held-out masks."""
    _check(query_ids, answer_ids, states, method, context_ids, LOO_METHODS)

    def score(masks: np.ndarray) -> np.ndarray:
        return subset_token_losses(model, query_ids, answer_ids, states, method, masks, context_ids,
                                   batch_size).mean(1)

    return ablation_surrogate(score, len(states), n_ablations, keep, seed, n_heldout, alpha)


# --------------------------------------------------------------------------------------------
# Precision on labelled samples (paper table 4)
# --------------------------------------------------------------------------------------------
@dataclass
class PrecisionResult:
    methods: tuple[str, ...]  # "loi", LOO methods, optionally "surrogate"
    precision: dict[str, float]  # fraction of samples whose top-scored context is gold
    spearman_vs_concat: dict[str, float]  # per method: mean over samples of Spearman(its LOO, Concat-LOO)
    top1_agrees_with_concat: dict[str, float]  # fraction of samples with the same top context as Concat-LOO
    seconds: dict[str, float]  # mean seconds per sample to build and score each method's states
    records: list[dict] = field(default_factory=list)  # per sample: id, contexts, gold, scores per method

    @property
    def n_samples(self) -> int:
        return len(self.records)

    def table(self, paper: dict[str, float] = PAPER_TABLE4) -> str:
        """Markdown: one row per method, beside the paper's table 4."""
        rows = ["| attribution | precision | paper (MS MARCO, Mamba2-2.7B) | Spearman vs Concat-LOO | "
                "same top-1 as Concat-LOO | ms / sample |", "|---|---|---|---|---|---|"]
        for m in self.methods:
            label = "LOI" if m == "loi" else ("Surrogate (PICASO-R, 64 ablations)" if m == "surrogate"
                                               else f"LOO {NAMES[m]}")
            p = f"{paper[m]:.3f}" if m in paper else "-"
            rho = self.spearman_vs_concat.get(m, math.nan)
            agree = self.top1_agrees_with_concat.get(m, math.nan)
            rows.append(f"| {label} | {self.precision[m]:.3f} | {p} | {_fmt(rho)} | {_fmt(agree)} | "
                        f"{1e3 * self.seconds[m]:.1f} |")
        return "\n".join(rows)


def attribution_precision(model, samples, methods: Sequence[str] = ("loi",) + LOO_METHODS,
                          context_suffix: str = "", get_states: Callable[[list[str]], list] | None = None,
                          progress: Progress | None = None, surrogate_kw: dict | None = None) -> PrecisionResult:
    """Table 4's protocol: precision = the fraction of samples whose top-scored context is a gold one.

    Args:
        samples: RetrievalSample-like objects with query, continuation (the answer), contexts
            [(id, text)] and gold_ids; samples without gold ids are skipped. Contexts are used in
            the sample's order (Concat-LOO keeps it).
        methods: "loi" (top = lowest loss), LOO methods (top = highest score), "surrogate" (top =
            highest -weight, `surrogate_kw` passed to `surrogate`).
        context_suffix: appended to each context text before tokenising (the store's suffix).
        get_states: ids -> states (a StateStore / the app's Resources.states); default: encoded
            here once per distinct context.
        progress: progress(i, n) after each sample.
    Returns: PrecisionResult, with the Spearman correlation of each method's scores with
        Concat-LOO's per sample (LOI negated: lower loss = more important), averaged over samples
        where both vary."""
    methods = tuple(methods)
    bad = [m for m in methods if m not in ("loi", "surrogate") + LOO_METHODS]
    if bad or not methods:
        raise ValueError(f"unknown attribution methods {bad or '(none)'}; valid: loi, surrogate, {', '.join(LOO_METHODS)}")
    samples = [s for s in samples if s.gold_ids and s.contexts]
    if not samples:
        raise ValueError("no samples with gold context ids and contexts: precision needs labelled samples")
    tok = model.tokenizer
    enc = (lambda x: tok.encode(x)) if tok is not None else None
    ids_of = lambda x: [int(t) for t in x] if not isinstance(x, str) else enc(x)  # noqa: E731
    cache_ids: dict[str, list[int]] = {}
    cache_states: dict[str, ContextState] = {}
    records = []
    for j, s in enumerate(samples):
        cids = [cid for cid, _ in s.contexts]
        for cid, text in s.contexts:
            if cid not in cache_ids:
                cache_ids[cid] = ids_of(text + context_suffix if isinstance(text, str) else text)
        new = [c for c in cids if c not in cache_states]
        if new:
            got = get_states(new) if get_states is not None else model.encode_contexts([cache_ids[c] for c in new])
            cache_states.update(zip(new, got))
        states, ctx_ids = [cache_states[c] for c in cids], [cache_ids[c] for c in cids]
        q, a = ids_of(s.query), ids_of(s.continuation)
        scores, seconds = {}, {}
        for m in methods:
            t0 = time.perf_counter()
            if m == "loi":
                scores[m] = [-x for x in leave_one_in(model, q, a, states)]  # higher = more important
            elif m == "surrogate":
                scores[m] = surrogate(model, q, a, states, context_ids=ctx_ids, **(surrogate_kw or {})).scores
            else:
                scores[m] = leave_one_out(model, q, a, states, m, context_ids=ctx_ids)
            seconds[m] = time.perf_counter() - t0
        records.append({"sample_id": s.sample_id, "context_ids": cids, "gold_ids": list(s.gold_ids),
                        "scores": scores, "seconds": seconds})
        if progress is not None:
            progress(j + 1, len(samples))
    return summarize_precision(records, methods)


def summarize_precision(records: list[dict], methods: Sequence[str]) -> PrecisionResult:
    """PrecisionResult from per-sample records ({context_ids, gold_ids, scores, seconds}), e.g. the
    records of several runs joined."""
    from scipy.stats import spearmanr  # heavy, on first use: the precision summary only

    methods = tuple(methods)
    n = max(1, len(records))
    top = lambda r, m: r["context_ids"][int(np.argmax(r["scores"][m]))]  # noqa: E731
    precision = {m: sum(top(r, m) in r["gold_ids"] for r in records) / n for m in methods}
    seconds = {m: sum(r["seconds"][m] for r in records) / n for m in methods}
    rho, agree = {}, {}
    if "concat" in methods:
        for m in methods:
            agree[m] = sum(top(r, m) == top(r, "concat") for r in records) / n
            vals = [float(spearmanr(r["scores"][m], r["scores"]["concat"]).statistic) for r in records
                    if len(r["context_ids"]) > 1 and np.ptp(r["scores"][m]) > 0 and np.ptp(r["scores"]["concat"]) > 0]
            rho[m] = float(np.mean(vals)) if vals else math.nan
    return PrecisionResult(methods, precision, rho, agree, seconds, records)


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------
def _check(query_ids, answer_ids, states, method: str, context_ids, valid: tuple[str, ...]) -> None:
    if method not in valid:
        raise ValueError(f"unknown attribution method {method!r}; valid: {', '.join(valid)}")
    if isinstance(states, ContextState) or not isinstance(states, (list, tuple)):
        raise ValueError("states must be a list of ContextStates, one per context (for a batch: batch.unbind())")
    if not states:
        raise ValueError("no contexts to attribute: give at least one context state")
    if len(query_ids) == 0:
        raise ValueError("the query is empty: give at least one query token")
    if len(answer_ids) == 0:
        raise ValueError("the answer is empty: give at least one answer token to score")
    if method in TOKEN_METHODS:
        if context_ids is None:
            raise ValueError(f"{method} re-processes the contexts' tokens: pass context_ids (one token list per state)")
        if len(context_ids) != len(states):
            raise ValueError(f"{len(context_ids)} token lists for {len(states)} states")


def _as_masks(masks, n: int) -> Tensor:
    m = torch.as_tensor(np.asarray(masks)).to(torch.bool)
    if m.dim() != 2 or m.shape[1] != n:
        raise ValueError(f"masks must be [m, {n}] (one 0/1 column per context), got {list(m.shape)}")
    return m


def _fmt(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"

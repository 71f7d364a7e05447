"""Composing the states of many contexts into one (PICASO paper sec. 3.3 and appendix A).

Glossary (paper symbol -> code). Contexts are numbered k = 0..n-1 in presentation order, most
relevant LAST (the paper's Concat order, sec. 6.2); every decay is diagonal, so every product
below is element-wise and broadcasts over the state.
    u_k           the k-th context (its token ids)
    x_k = x(u_k)  its state, `states[k].ssm`              Mamba-2 [L, H, P, N] / Mamba-1 [L, D, N]
    A_k = A(u_k)  its accumulated decay (eq. 2), exp(`states[k].log_decay`)
                                                          Mamba-2 [L, H, 1, 1] / Mamba-1 [L, D, N]
    W_k           the weight of x_k in the composed state  Σ_k W_k x_k  (eq. 4); shape of A_k
    e_m           the m-th elementary symmetric polynomial of decays (prop. 2)
    ê_m           e_m / C(j, m) over j decays: the MEAN product of m of them (our normalised DP)
    `log_decays`  the n log-decays stacked, [n, *A_k.shape]; the weight functions take logs, not
                  decays, so that nothing is lost before the products are formed.

Methods, all of the form  ssm = Σ_k W_k x_k:
    soup      W_k = 1/n                                         (State Soup; paper sec. 6.2)
    caso      W_k = A_{k+1} ⋯ A_{n-1}                           (prop. 1, eq. 3); two states:
              State Soup's "A-decay mixing" of sequential chunks, see `decay_mix`
    picaso_s  W_k = (1/n) Σ_m e_m(A_{-k}) / C(n-1, m)           (prop. 2): mean of CASO over all n!
              orders
    picaso_r  W_k = (1/n) Σ_{m<n} A_{k+1} ⋯ A_{k+m}, indices mod n  (prop. 3): mean of CASO over
              the n rotations
    weighted  W_k = w_k, any real weights given by the caller   (State Soup's weighted mean; task
              arithmetic such as x_a + x_b - x_c)
and, from tokens with forward passes (`compose_tokens`):
    concat       the state of u_0 ⧺ ... ⧺ u_{n-1}, started from the stored state of u_0 (sec. 6.2)
    picconcat_r  the mean of the states of the n cyclic concatenations (sec. 3.3)

The rest of the composed state, the same for every method:
    conv        the mean of the parts' conv windows (sec. 3.3: "we perform simple averaging"), also
                for the order-dependent caso, so that its numbers match the paper's; `weighted`
                averages with the weights normalised to sum 1 (a conv window holds raw inputs: a
                weighted MEAN of inputs stays one whatever the scale of the weights).
                conv="last" takes the last context's window instead: what Concat holds at layer 0
                when that context has at least K-1 tokens.
    log_decay   Σ_k log_decay_k: the decay of the whole concatenation, the same in every order.
                For soup and weighted too: it records which tokens the state summarises, not how
                they were weighted, so a composed state can itself be composed again with CASO.
    num_tokens  Σ_k num_tokens_k.
All of it is torch ops, differentiable with respect to the states, the log-decays and the weights
(backpropagation through composition, sec. 5).

A hybrid model's states (attention layers beside the Mamba layers) compose their SSM part as above,
stacked over the SSM layers; each attention layer's keys and values are the contexts' own, joined
along the positions in presentation order, re-rotated to their offsets in the joined sequence under
RoPE (`compose/attention.py`; the math, and what is exact, in docs/hybrid.md "Composition").
attention="drop" is the ablation without them. A pure model's composition is unchanged.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import torch
from torch import Tensor

from picaso_core.light import deadline
from picaso_core.compose.attention import check_modes, comparable_shapes, composed_kv, join_kv, rotary
from picaso_core.engine.state import ContextState

__all__ = [
    "METHODS", "TOKEN_METHODS", "CONV_MODES", "compose", "compose_tokens", "composition_weights", "soup_weights",
    "caso_weights", "picaso_r_weights", "picaso_s_weights", "decay_mix", "weighted_sum", "mean_of_rotations",
    "nested_token_states",
]

METHODS = ("soup", "caso", "picaso_s", "picaso_r", "weighted")
TOKEN_METHODS = ("concat", "picconcat_r")
CONV_MODES = ("mean", "last")


# --------------------------------------------------------------------------------------------
# The weights W_k as functions of the decays alone
# --------------------------------------------------------------------------------------------
def soup_weights(log_decays: Tensor) -> Tensor:
    """W_k = 1/n. log_decays [n, ...] -> [n, ...] (a broadcast view)."""
    n = log_decays.shape[0]
    return torch.full((), 1.0 / n, dtype=log_decays.dtype, device=log_decays.device).expand_as(log_decays)


def caso_weights(log_decays: Tensor) -> Tensor:
    """CASO (prop. 1, eq. 3): W_k = A_{k+1} ⋯ A_{n-1}, W_{n-1} = 1. [n, ...] -> [n, ...].

    A reverse cumulative product of the decays: products of numbers in [0, 1] only, so a decay
    that underflows to 0 gives weight 0 to everything before it, as it should."""
    a = log_decays.exp()
    after = a[1:].flip(0).cumprod(0).flip(0)  # [n-1, ...]: row k = A_{k+1} ⋯ A_{n-1}
    return torch.cat([after, torch.ones_like(a[:1])])


def picaso_r_weights(log_decays: Tensor) -> Tensor:
    """PICASO-R (prop. 3) without dividing by decay products. [n, ...] -> [n, ...].

    n W_k = Σ_{m=0}^{n-1} A_{k+1} ⋯ A_{k+m} (indices mod n) splits where the rotation wraps:
        the contexts after k:   T_k = 1 + A_{k+1} T_{k+1},  T_{n-1} = 1       (Horner, suffix)
        then around to 0..k-1:  P_k (Q_0 + ... + Q_{k-1})                    (P_k = CASO weight,
                                                                              Q_i = A_0 ⋯ A_i)
    so n W_k = T_k + P_k R_k. The paper's Algorithm 3 instead divides cumulative sums by cumulative
    products, which gives inf/NaN once a product underflows (a few hundred tokens in float32);
    here every term is a sum of products of numbers in [0, 1]. O(n) operations."""
    n = log_decays.shape[0]
    a = log_decays.exp()
    T = [torch.ones_like(a[0])]
    for k in range(n - 2, -1, -1):
        T.append(1 + a[k + 1] * T[-1])
    T = torch.stack(T[::-1])  # [n, ...]
    Q = a.cumprod(0)  # Q_i = A_0 ⋯ A_i
    R = torch.cat([torch.zeros_like(a[:1]), Q[:-1].cumsum(0)])  # R_k = Q_0 + ... + Q_{k-1}
    return (T + caso_weights(log_decays) * R) / n


def picaso_s_weights(log_decays: Tensor, max_table_bytes: int = 256 << 20) -> Tensor:
    """PICASO-S (prop. 2; Algorithms 1-2): W_k = (1/n) Σ_{m=0}^{n-1} e_m(A_{-k}) / C(n-1, m).

    The DP of Algorithm 2, e_m(j) = e_m(j-1) + a_j e_{m-1}(j-1), run on ê_m(j) = e_m(j) / C(j, m)
    directly. Dividing the recurrence by C(j, m) gives a convex combination,
        ê_m(j) = ((j-m)/j) ê_m(j-1) + (m/j) a_j ê_{m-1}(j-1),
    so every ê stays in [0, 1]: no binomials of size C(49, 24) ~ 6e13, no overflow at n = 50, and
    W_k = (1/n) Σ_m ê_m(A_{-k}). As Algorithm 1, the DP runs on the n-1 decays other than A_k, for
    many k at once: O(n^3) operations as in the paper, on a table [k, m, ...] of n decays per k.
    That is tiny for Mamba-2 (576 floats per decay for mamba2-130m: every k in one table), but a
    Mamba-1 decay has the size of the state, so the k's are split to keep each table under
    `max_table_bytes`.
    log_decays [n, ...] -> W [n, ...]."""
    n = log_decays.shape[0]
    a = log_decays.exp()
    others = torch.tensor([[j for j in range(n) if j != k] for k in range(n)], dtype=torch.long,
                          device=a.device).view(n, n - 1)  # row k: the indices of A_{-k}
    rows = max(1, max_table_bytes // (n * a[0].numel() * a.element_size()))  # k's per table
    return torch.cat([_sum_mean_esp(a[others[k0:k0 + rows]]) for k0 in range(0, n, rows)]) / n


def _sum_mean_esp(a: Tensor) -> Tensor:
    """Σ_{m=0}^{J} ê_m(a_1..a_J) for r independent sets of J decays: a [r, J, ...] -> [r, ...]."""
    r, J = a.shape[:2]
    m = torch.arange(J + 1, dtype=a.dtype, device=a.device).view(1, J + 1, *(1,) * (a.dim() - 2))
    e_hat = torch.zeros(r, J + 1, *a.shape[2:], dtype=a.dtype, device=a.device)  # [r, m, ...]
    e_hat[:, 0] = 1  # ê_0 = 1 (the empty product); ê_m = 0 for m > j
    for j in range(1, J + 1):
        shifted = torch.cat([torch.zeros_like(e_hat[:, :1]), e_hat[:, :-1]], dim=1)  # ê_{m-1}(j-1)
        keep = ((j - m) / j).clamp(min=0)  # zero for m >= j, so ê_m stays 0 for m > j
        e_hat = keep * e_hat + (m / j) * a[:, j - 1, None] * shifted
    return e_hat.sum(1)


_WEIGHT_FNS = {"soup": soup_weights, "caso": caso_weights, "picaso_s": picaso_s_weights,
               "picaso_r": picaso_r_weights}


def composition_weights(method: str, log_decays: Tensor, weights=None) -> Tensor:
    """W_k of `method` for decays exp(log_decays [n, ...]) -> [n, ...] (for plots and tests)."""
    _check_method(method, weights)
    if method == "weighted":
        w = _as_weights(weights, log_decays.shape[0], log_decays)
        return w.view(-1, *(1,) * (log_decays.dim() - 1)).expand_as(log_decays)
    return _WEIGHT_FNS[method](log_decays)


# --------------------------------------------------------------------------------------------
# Composition of states
# --------------------------------------------------------------------------------------------
def compose(method: str, states: Sequence[ContextState], *, weights=None, conv: str = "mean", attention: str = "join",
            rope: str = "joined", config=None) -> ContextState:
    """Compose context states without touching the model (paper sec. 3.3).

    Args:
        method: one of METHODS: "soup", "caso", "picaso_s", "picaso_r", "weighted".
        states: n single (unbatched) ContextStates of one model, in presentation order: most
            relevant last, as the paper's Concat; picaso_s ignores the order, picaso_r the
            rotation.
        weights: "weighted" only: n real numbers (list or 1-D tensor, differentiable).
        conv: "mean" (paper) or "last": see the module docstring.
        attention: a hybrid's attention layers: "join" the contexts' keys and values (presentation
            order; "weighted": those of weight != 0) or "drop" them (the ablation: T = 0 positions).
        rope: "joined" (RoPE keys rotated to their offsets in the joined sequence) or "own" (each
            context keeps its positions 0..T_k-1); no effect without RoPE.
        config: the model (or model.config) the states come from: its RoPE. None: keys are joined as
            stored, which is "own" for a RoPE model (pass it there) and exact without RoPE.
    Returns:
        one ContextState: ssm Σ_k W_k x_k, conv, log_decay Σ_k log_decay_k, num_tokens Σ_k; a hybrid's
        keys and values [A, Hkv, Σ_k T_k, dh] (join) or [A, Hkv, 0, dh] (drop).
    Raises:
        ValueError for an unknown method, conv, attention or rope mode, an empty list, a batched
        state, states of different shapes (different models, a pure and a hybrid state, other
        attention heads), NaN/inf in a state, or bad weights.
    """
    _check_method(method, weights)
    if conv not in CONV_MODES:
        raise ValueError(f"conv={conv!r}: valid values are {CONV_MODES}")
    check_modes(attention, rope)
    _check_states(states)
    n = len(states)
    log_decays = torch.stack([s.log_decay for s in states])  # [n, *A.shape]
    W = composition_weights(method, log_decays, weights)  # [n, *A.shape]
    ssm = weighted_sum(W, [s.ssm for s in states])
    if conv == "last":
        conv_state = states[-1].conv
    else:
        if method == "weighted":
            w = _as_weights(weights, n, log_decays)
            total = w.sum()
            if total.abs() <= 1e-6 * w.abs().sum():
                raise ValueError("weights sum to ~0: the conv window is a weighted mean of inputs and needs "
                                 "weights with a nonzero sum; pass conv='last' to keep the last state's window")
            c = w / total
        else:
            c = torch.full((n,), 1.0 / n, dtype=log_decays.dtype, device=log_decays.device)
        conv_state = torch.einsum("k,k...->...", c, torch.stack([s.conv for s in states]))  # small: 2 ops
    w = _as_weights(weights, n, log_decays) if method == "weighted" else None
    out = ContextState(ssm=ssm, conv=conv_state, log_decay=log_decays.sum(0),
                       num_tokens=sum(int(s.num_tokens) for s in states),
                       **composed_kv(states, method, w, attention, rotary(config), rope))
    _check_output(out, states)
    return out


def decay_mix(earlier: ContextState, later: ContextState, *, conv: str = "mean") -> ContextState:
    """State Soup's "A-decay mixing" (Pióro et al. 2024, sec. 2.3) of two sequential chunks.

    f(x_1..x_t) = f(x_{k+1}..x_t) + (Π A) f(x_1..x_k): the state of `earlier` decayed by the
    accumulated decay of `later`, plus the state of `later`. This is CASO (eq. 3) for n = 2, exact
    for one SSM layer, approximate for a stacked model."""
    return compose("caso", [earlier, later], conv=conv)


def weighted_sum(W: Tensor, xs: Sequence[Tensor]) -> Tensor:
    """Σ_k W_k x_k. W [n, ...] broadcastable to each x_k (or [n] scalars); xs n tensors [L, ...].

    The cost of every composition: memory-bound, it should read each x_k once and write the
    result once. Stacking the states first would itself copy all of them, and a chain of
    out-of-place adds allocates n fresh state-sized buffers (page faults: 1.7x slower for
    mamba2-130m at n = 10, measured), so the sum accumulates in place into one fresh tensor.
    That is safe for autograd and keeps compose pure: the accumulator is new, and addcmul's
    backward needs W_k and x_k, not the running sum (test_gradcheck).
    """
    if W.dim() == 1:
        W = W.view(-1, *(1,) * xs[0].dim())
    acc = W[0] * xs[0]
    for k in range(1, len(xs)):
        acc.addcmul_(W[k], xs[k])
    return acc


# --------------------------------------------------------------------------------------------
# Composition from tokens (forward passes)
# --------------------------------------------------------------------------------------------
def compose_tokens(model, contexts_ids: Sequence[Sequence[int]], method: str,
                   states: Sequence[ContextState] | None = None, threads: int = 1, *,
                   rope: str = "joined") -> ContextState:
    """Compose contexts by running the model on their tokens (the baselines of sec. 3.3 / 6.2).

    Args:
        model: an SSMLanguageModel (encode_context / encode_contexts).
        contexts_ids: n token-id lists, in presentation order (most relevant last).
        method: "concat": the state of the concatenation u_0 ⧺ ... ⧺ u_{n-1}, started from the
                stored state of u_0 (`states[0]`, else encoded here) as the paper does;
            "picconcat_r": the mean of the states of the n rotations u_r ⧺ ... ⧺ u_{r-1}, in one
                batched forward (each from u_r's stored state `states[r]` when given). The mean
                is the soup of the rotation states: ssm and conv (each rotation's own last inputs)
                averaged; log_decay is their mean (all equal up to
                rounding: each is the decay of all the tokens) and num_tokens the total.
        states: the contexts' stored states (optional; concat starts from states[0], picconcat_r's
            rotation r from states[r]).
        threads: picconcat_r reads its rotations in this many groups at once, each group's batched
            forward in its own thread (torch's ops release the GIL). For a caller whose torch runs
            on fewer threads than it has cores: the app's jobs run one torch thread each, and on 2
            cores two groups read the 5 rotations of a click in 0.58x the time of one batch. Each
            group is padded on its own, so the state equals the one-batch state up to float rounding.
        rope: picconcat_r on a RoPE hybrid: see `mean_of_rotations`.
    Returns:
        one ContextState.
    """
    if method not in TOKEN_METHODS:
        raise ValueError(f"unknown token composition method {method!r}; valid: {TOKEN_METHODS} "
                         f"(state methods {METHODS} go through compose)")
    ids = [[int(t) for t in c] for c in contexts_ids]
    if not ids:
        raise ValueError("no contexts to compose")
    if states is not None:
        if len(states) != len(ids):
            raise ValueError(f"{len(states)} states for {len(ids)} contexts")
        _check_states(states)
        states[0].check_shapes(model.state_shapes, what="stored state of the first context")
    if method == "concat":
        first = states[0] if states is not None else model.encode_context(ids[0])
        rest = [t for c in ids[1:] for t in c]
        return model.encode_context(rest, state=first) if rest else first
    n = len(ids)
    if states is None:
        rotations = [[t for c in ids[r:] + ids[:r] for t in c] for r in range(n)]
        return mean_of_rotations(_encode_in_groups(model, rotations, None, threads),  # each rotation: the whole text
                                 config=model.config, rope=rope)
    # rotation r opens with context r, and its stored state is the reading of it: each rotation
    # reads the other n-1 contexts from there (one batched forward, 1/n fewer tokens)
    rests = [[t for c in ids[r + 1:] + ids[:r] for t in c] for r in range(n)]
    return mean_of_rotations(_encode_in_groups(model, rests, list(states), threads), config=model.config, rope=rope)


def _encode_in_groups(model, seqs: list, states: list | None, threads: int) -> list[ContextState]:
    """model.encode_contexts(seqs, states=states), as `threads` contiguous groups read at once (the
    calling thread reads the first); the states in the order of seqs."""
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    groups = min(int(threads), len(seqs))
    if groups <= 1:
        return model.encode_contexts(seqs, states=states)
    bounds = [round(i * len(seqs) / groups) for i in range(groups + 1)]
    parts = [(seqs[a:b], None if states is None else states[a:b]) for a, b in zip(bounds, bounds[1:])]
    limit = deadline.current() or (None, None)  # a served job's time limit holds in the other groups' threads

    def encode(sq, st):
        with deadline.until(*limit):
            return model.encode_contexts(sq, states=st)

    with ThreadPoolExecutor(groups - 1) as pool:
        rest = [pool.submit(encode, sq, st) for sq, st in parts[1:]]
        first = model.encode_contexts(parts[0][0], states=parts[0][1])
        return first + [x for f in rest for x in f.result()]


def mean_of_rotations(rotations: Sequence[ContextState], *, config=None, rope: str = "joined") -> ContextState:
    """PICConcat-R's state from the states of the n rotations of one concatenation: ssm and conv
    (each rotation's own last inputs) averaged; log_decay their mean (all equal up to rounding:
    each is the decay of all the tokens); num_tokens that of one rotation, the whole text.

    A hybrid's attention layers: every rotation's keys and values joined, rotation after rotation
    (n T positions; under RoPE with rope="joined", rotation r's keys at offset r T: `config` gives the
    RoPE, see `compose`). Their mean has no other meaning that a cache can hold (position t holds a
    different token in each rotation), and the join is the mean where it can be: attention over n
    copies of one cache gives that cache's output, and, without position encoding, a cyclic shift of
    the contexts only reorders the rotations, so the state stays invariant as PICConcat-R's is."""
    rot = ContextState.stack(list(rotations))
    kv = {}
    if rot.keys is not None:
        check_modes("join", rope)
        kv = dict(zip(("keys", "values"), join_kv([(r.keys, r.values) for r in rotations], rotary(config), rope)))
    return ContextState(ssm=rot.ssm.mean(0), conv=rot.conv.mean(0), log_decay=rot.log_decay.mean(0),
                        num_tokens=int(rotations[0].num_tokens), **kv)


def nested_token_states(model, ranked_ids: Sequence[Sequence[int]], ranked_states: Sequence[ContextState],
                        ks: Sequence[int], picconcat: bool = True) -> dict[int, dict[str, ContextState]]:
    """Concat and PICConcat-R at several k for one ranking, from shared prefixes: the states
    `compose_tokens` builds for `presented` = the top k in reverse (most relevant last), at every
    k in `ks`, with about half the forward work of building each k on its own.

    With c_1 the most relevant context, the list at k is [c_k, ..., c_1], and
        S_j  = the state of c_j ⧺ c_{j-1} ⧺ ... ⧺ c_1 (from c_j's stored state) = Concat at k = j,
        PICConcat-R at k = the mean over j = 1..k of the rotation that starts at c_j, which is
               S_j continued with c_k ⧺ ... ⧺ c_{j+1} (S_k itself for j = k).
    So S_j is computed once for every k, and the rotations of k only read the contexts ranked
    above j: Σ_k k(k-1)/2 contexts for k = 1..10 instead of Σ_k k² (165 instead of 385), and the
    Concat states come free. Every state equals `compose_tokens` up to float rounding (tests).

    Args:
        ranked_ids, ranked_states: token ids and stored states of the ranking, most relevant
            FIRST, at least max(ks) of them.
        ks: the numbers of contexts wanted (k >= 1).
        picconcat: also build PICConcat-R (needs S_j for every j <= max(ks)).
    Returns:
        {k: {"concat": state, "picconcat_r": state}} (no "picconcat_r" when picconcat is False).
    """
    ks = sorted({int(k) for k in ks})
    if not ks:
        return {}
    if len(ranked_states) != len(ranked_ids):
        raise ValueError(f"{len(ranked_states)} stored states for {len(ranked_ids)} contexts")
    if ks[0] < 1 or ks[-1] > len(ranked_ids):
        raise ValueError(f"ks must lie in 1..{len(ranked_ids)}, got {ks}")
    ids = [[int(t) for t in c] for c in ranked_ids]
    need = set(range(1, ks[-1] + 1)) if picconcat else set(ks)
    js = sorted(need)
    # S_j: c_j's stored state continued with c_{j-1} ⧺ ... ⧺ c_1
    tails = [[t for c in reversed(ids[:j - 1]) for t in c] for j in js]
    # one call per row: rows differ in length, and padding them into a batch costs more on CPU
    # than it saves (bench/sweep_speed.py)
    S = {j: model.encode_context(t, state=ranked_states[j - 1]) for j, t in zip(js, tails)}
    out = {k: {"concat": S[k]} for k in ks}
    if not picconcat:
        return out
    jobs = [(k, j) for k in ks for j in range(1, k)]  # rotation of k that starts at c_j, j < k
    rots = [model.encode_context([t for c in reversed(ids[j:k]) for t in c], state=S[j]) for k, j in jobs]
    by_k: dict[int, list[ContextState]] = {k: [S[k]] for k in ks}
    for (k, _), st in zip(jobs, rots):
        by_k[k].append(st)
    for k, parts in by_k.items():
        out[k]["picconcat_r"] = mean_of_rotations(parts, config=model.config)
    return out


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------
def _check_method(method: str, weights) -> None:
    if method not in METHODS:
        hint = " (it needs the tokens: use compose_tokens)" if method in TOKEN_METHODS else ""
        raise ValueError(f"unknown composition method {method!r}{hint}; valid methods: {', '.join(METHODS)}")
    if method == "weighted" and weights is None:
        raise ValueError("method 'weighted' needs weights=[w_0, ..., w_(n-1)], one number per state")
    if method != "weighted" and weights is not None:
        raise ValueError(f"weights= is for method 'weighted' only; {method!r} computes its own")


def _as_weights(weights, n: int, like: Tensor) -> Tensor:
    w = torch.as_tensor(weights, dtype=like.dtype, device=like.device)
    if w.shape != (n,):
        raise ValueError(f"weights must be {n} numbers, one per state; got shape {list(w.shape)}")
    if not torch.isfinite(w).all():
        raise ValueError("weights contain NaN or inf")
    return w


def _check_states(states: Sequence[ContextState]) -> None:
    if isinstance(states, ContextState) or not isinstance(states, (list, tuple)):
        raise ValueError("states must be a list of ContextStates (for a batch, pass batch.unbind())")
    if not states:
        raise ValueError("cannot compose an empty list of states (no context: use model.empty_state())")
    n = len(states)
    for i, s in enumerate(states):
        if not isinstance(s, ContextState):
            raise ValueError(f"state {i} is a {type(s).__name__}, not a ContextState")
        if s.batched:
            raise ValueError(f"state {i} is a batch of {s.batch_size} states; compose takes a list of single "
                             "states: pass batch.unbind()")
    expected = comparable_shapes(states[0])  # a hybrid's states hold any number of key positions each
    for i, s in enumerate(states):
        s.check_shapes(expected, what=f"state {i} of {n} (shapes differ from state 0)")
        ld = s.log_decay
        if not torch.isfinite(ld).all() or (ld > 0).any():
            s.check_finite(what=f"state {i} of {n}")


def _check_output(out: ContextState, states: Sequence[ContextState]) -> None:
    """NaN/inf in any input reaches the weighted sum (even with weight 0: 0 * nan = nan), so one
    check of the result finds it at 1/n of the cost of checking every input; the check is a sum
    (a NaN or inf anywhere makes it non-finite; no boolean tensor to allocate), and only when it
    fails are the elements and then the inputs searched, to name the culprit."""
    parts = (out.ssm, out.conv) if out.keys is None else (out.ssm, out.conv, out.keys, out.values)
    if all(torch.isfinite(t.sum()) or torch.isfinite(t).all() for t in parts):
        return
    for i, s in enumerate(states):
        s.check_finite(what=f"state {i} of {len(states)}")
    raise ValueError("the composed state overflowed (inf) although every input is finite")

"""Cost caps, decided before any work: each model-bound endpoint estimates its cost from its checked
inputs (contexts x tokens x methods, grid points, ablations, steps, samples) in one place and
refuses in ONE line that names what exceeds which cap ("40 picked contexts: at most 10 (like k);
pick fewer"). The tabs' own input checks (a text's length, a slider's range) stay where they are;
this is the bound on what they allow together. What is left of a request's time after its caps is
bounded by its endpoint's time limit (picaso_core/ui/server/jobs.py); the worst capped request of
each endpoint is measured by bench/caps_worst.py (docs/serving.md, "Bounded work").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gradio as gr

from picaso_core.ui.errors import bad_input

# picked contexts are capped like k: the paper retrieves up to 10 chunks (sec. 6.1), gains saturate
# beyond, and PICConcat-R's cost grows with their square (55 picked ids held a worker for 90 s)
PICKED_CONTEXTS = 10


@dataclass(frozen=True)
class Cap:
    """The most of `unit` one request of an endpoint may cost, why (shown in brackets) and the fix."""

    unit: str
    most: int
    why: str = ""
    fix: str = "ask for less"


# Each endpoint's work as one number, where its inputs multiply (the tabs' checks bound each alone).
# The caps are set so that the worst request under them finishes within the endpoint's time limit
# on a loaded 2-core machine (bench/caps_worst.py, docs/serving.md "Bounded work"): the time limit is
# a backstop, not the usual answer. Every tab's defaults and the tour's runs are well under them.
CAPS: dict[str, Cap] = {
    "/compose": Cap("picked contexts", PICKED_CONTEXTS, "like k", "pick fewer"),
    "/generate_answer": Cap("contexts", PICKED_CONTEXTS, "like k", "pick fewer"),
    # forward passes weighted by the tokens each reads (query + answer; + contexts where re-encoded)
    "/attribute": Cap("token-forwards", 80_000, "", "fewer ablations, contexts or methods, or the context grain"),
    "/attribution_precision": Cap("example-methods", 160, "", "fewer examples or methods"),
    "/landscape": Cap("grid points", 1_700, "41x41 on one sample", "fewer grid steps, or one sample"),
    "/soup_map": Cap("demonstration lines", 64, "", "fewer demonstrations"),
    "/soup_retrieve": Cap("demonstration lines", 64, "", "fewer demonstrations"),
    "/soup_retrieval": Cap("query-ks", 100, "20 queries x 5 ks", "fewer queries"),
    "/soup_mixing": Cap("queries per task", 5, "", "fewer queries"),  # 20 took 232 s loaded
    "/soup_two_task": Cap("answer-tokens", 1_000, "", "fewer or shorter answers, or a shorter prompt"),
    "/soup_decay": Cap("tokens", 10_000, "", "fewer windows or tokens per chunk"),
    "/primer_model": Cap("tokens", 256, "", "shorten the text"),
    "/primer_attention": Cap("matrix entries", 128 * 128, "", "shorten the text"),
    # the attention baseline it times is quadratic: the longest length decides (16,384 took 53 s loaded)
    "/primer_complexity": Cap("tokens in the longest length", 8_192, "", "shorter lengths"),
    "/primer_lti": Cap("state-steps", 64 * 512, "", "a smaller N or T"),  # light: numpy, no model
    # the block walk sends every token's state of one head to the page (~8 KiB a token on the demo)
    "/block_walk_view": Cap("tokens", 48, "", "shorten the text"),
    "/block_walk": Cap("tokens", 48, "like the walk it reads from", "shorten the text"),
    "/benchmarks": Cap("sample-k-methods", 400, "", "fewer samples, ks or methods"),
    "/coffee_train": Cap("seconds of training", 300, "", "a smaller time budget"),
    "/coffee_ih0": Cap("Adam steps", 2_000, "", "fewer steps"),
    "/finetune": Cap("sample-forwards", 1_000, "", "fewer steps or a smaller k_max"),
    "/tour_step": Cap("runs", 1, "a step runs the tabs' defaults, cached", "one step at a time"),
}

# /attribute: the methods that score each leave-one-out subset (S+1 of them for S sources)
LOO = ("concat", "soup", "caso", "picaso_s", "picaso_r")
SURROGATE_HELDOUT = 0.25  # the surrogate scores a quarter more masks than its ablations (held out for LDS)


def refuse(endpoint: str, what: str, cap: Cap) -> gr.Error:
    """The one-line refusal (logged as one line, no traceback): '<what>: at most <cap> (<why>); <fix>'."""
    why = f" ({cap.why})" if cap.why else ""
    return bad_input(f"{what}: at most {cap.most:,}{why}; {cap.fix}", endpoint)


def within(endpoint: str, n: int, what: str = "", cap: Cap | None = None, key: str | None = None) -> int:
    """`n` if it is within the endpoint's cap (CAPS[key or endpoint], or `cap`), else refuse: `what`
    names the request's n ("40 picked contexts"; default: n and the cap's unit)."""
    cap = cap or CAPS[key or endpoint]
    if n > cap.most:
        raise refuse(endpoint, what or f"{n:,} {cap.unit}", cap)
    return n


def check(endpoint: str, estimate: tuple[int, str]) -> int:
    """An estimate function's (cost, how it is made up) within the endpoint's cap, else refuse naming
    both: '/attribute: 10 contexts x ... is 131,000 token-forwards: at most 60,000; fewer ablations'."""
    n, how = estimate
    cap = CAPS[endpoint]
    return within(endpoint, n, f"{how} is {n:,} {cap.unit}" if how else "", cap)


# ---- estimates: (cost in the cap's unit, how it is made up), from checked inputs, before any work ----
def attribute(n_contexts: int, sources: int, context_tokens: int, query_tokens: int, answer_tokens: int,
              methods, ablations: int, reencode: bool, picconcat: bool) -> tuple[int, str]:
    """Forward passes of every method, each weighted by the tokens it reads: the query and answer
    from a composed state, plus the contexts where they are re-read (Concat-LOO, PICConcat-R, and
    every method when `reencode`). PICConcat-R re-reads each subset once per rotation."""
    qa = query_tokens + answer_tokens
    full = context_tokens + qa
    per = full if reencode else qa
    passes = {"loi": sources * per, "surrogate": math.ceil(ablations * (1 + SURROGATE_HELDOUT)) * per,
              "picconcat_r": (sources + 1) * n_contexts * full if picconcat else 0}
    for m in LOO:
        passes[m] = (sources + 1) * (full if m == "concat" else per)
    n = sum(passes.get(m, 0) for m in dict.fromkeys(methods))
    return n, (f"{n_contexts} contexts ({sources} sources, {context_tokens:,} tokens) x {len(set(methods))} methods "
               f"x {qa} query+answer tokens, {ablations} ablations")


def attribution_precision(examples: int, methods: int) -> tuple[int, str]:
    return examples * methods, f"{examples} examples x {methods} methods"


def landscape(samples: int, steps: int) -> tuple[int, str]:
    return samples * steps * steps, f"{samples} samples x {steps}x{steps} grid steps"


def lines(n: int) -> tuple[int, str]:
    return n, f"{n} demonstration lines"


def soup_retrieval(queries: int, ks: int) -> tuple[int, str]:
    return queries * ks, f"{queries} queries x {ks} ks"


def soup_two_task(answers: int, prompt_tokens: int) -> tuple[int, str]:
    return answers * prompt_tokens, f"{answers} answers x {prompt_tokens} prompt tokens"


def soup_decay(chunk_tokens: int, documents: int) -> tuple[int, str]:
    return chunk_tokens * documents, f"{documents} windows x {chunk_tokens} tokens"


def primer_attention(tokens: int) -> tuple[int, str]:
    return tokens * tokens, f"{tokens} tokens x {tokens}"


def primer_complexity(lengths) -> tuple[int, str]:
    return max(lengths), f"lengths {', '.join(map(str, lengths))}"


def benchmarks(samples: int, ks: int, methods: int) -> tuple[int, str]:
    return samples * ks * methods, f"{samples} samples x {ks} ks x {methods} methods"


def finetune(steps: int, k_max: int) -> tuple[int, str]:
    return steps * (k_max + 1), f"{steps} steps x (k_max {k_max} + 1)"

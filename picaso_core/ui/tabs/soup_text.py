"""The State soup tab's sentences, read off the data each panel shows, so that a sentence
agrees with its plot on whatever model is loaded. Plain strings (Markdown) from plain data."""

from __future__ import annotations

import html

import numpy as np


def best_layer_sentence(q: dict) -> str:
    """Where the SSM states separate tasks best, read off cluster_quality's numbers (the paper found
    intermediate layers best in Mamba 2.8B; a small model can differ, so the sentence says which)."""
    acc = q["ssm"]["nn_accuracy"]
    b = int(np.argmax(acc))
    layer, n = q["layers"][b], len(q["layers"])
    where = ("the first layer" if b == 0 else "the last layer" if b == n - 1 else "a middle layer")
    return (f"Tasks separate best at layer **{layer}** of {q['layers'][0]}–{q['layers'][-1]} (SSM state, "
            f"{acc[b]:.0%}), {where} here; the paper found the middle layers best in Mamba 2.8B (64 layers).")


def mixing_summary(rows: list[dict], rmix: list[dict], total: int = 16) -> str:
    """Fig. 2's numbers as a small table and one computed sentence each (left: soup vs shots;
    right: a query state alone vs mixed with its retrieved library state)."""
    by = {(r["k"], r["method"]): r["accuracy"] for r in rows}
    ks = sorted({r["k"] for r in rows if r["k"] < total})
    cells = lambda m: " | ".join(f"{by[(k, m)]:.0%}" for k in ks)  # noqa: E731
    out = (f"Answer accuracy, {total} demonstrations in total, read as states of k shots each:\n\n"
           f"| k shots per state | " + " | ".join(str(k) for k in ks) + " |\n|---|" + "---|" * len(ks) + "\n"
           f"| soup of {total}/k states | {cells('soup')} |\n| one k-shot state alone | {cells('k_shots')} |\n\n")
    wins = [k for k in ks if by[(k, "soup")] > by[(k, "k_shots")]]
    full = by[(total, "all_shots")]
    out += (f"One state of all {total} shots: **{full:.0%}**. The soup beats one k-shot state at "
            + (f"k = {', '.join(map(str, wins))}" if wins else "no k") + "; "
            + (f"the soup of 4-shot states is {abs(full - by[(4, 'soup')]) * 100:.0f} points "
               f"{'below' if by[(4, 'soup')] < full else 'above'} all {total} shots in one state "
               "(the paper: soups of 4-shot states match or beat one 32-shot state)." if 4 in ks else ""))
    rm = {(r["k"], r["method"]): r for r in rmix}
    rks = sorted({r["k"] for r in rmix})
    if rks:
        out += (" Mixing a k-shot query state with its retrieved library state: "
                + ", ".join(f"k = {k} {rm[(k, 'query')]['accuracy']:.0%} → {rm[(k, 'retrieved_mix')]['accuracy']:.0%}"
                            for k in rks) + " (the paper: it helps most at small k).")
    return out


def _spans(rows: list[dict], label) -> list[tuple[str, float, float]]:
    """(label, first w, last w) of each run of rows (sorted by w) sharing label(row)."""
    out: list = []
    for r in rows:
        v = label(r)
        if out and out[-1][0] == v:
            out[-1][2] = r["w"]
        else:
            out.append([v, r["w"], r["w"]])
    return [tuple(x) for x in out]


def _w_range(lo: float, hi: float) -> str:
    return f"w = {lo:g}" if lo == hi else f"w = {lo:g}–{hi:g}"


def two_task_story(rows: list[dict], w: float, task_a: str, task_b: str, prompt: str) -> str:
    """The two-skill summary, read off the rows (so it says what the plot shows): what the model
    writes at w, where along w each generation and each lowest-loss answer holds, and which scored
    answers are never the most likely (a composition such as the paper's "quinze" would show up as
    the lowest-loss answer between the two skills' ranges)."""
    rows = sorted(rows, key=lambda r: r["w"])
    at = min(rows, key=lambda r: abs(r["w"] - w))
    gen = lambda r: html.escape(r["generation"]) or "(nothing)"  # noqa: E731
    gens = _spans(rows, gen)
    out = (f"At w = {w:g} ({w:.0%} {task_a}, {1 - w:.0%} {task_b}) the model writes **{gen(at)}** after "
           f"`{html.escape(prompt)}`. ")
    if len(gens) == 1:
        out += f"It writes **{gens[0][0]}** at every w from 0 to 1: the mix does not change the answer. "
    else:
        out += "From w = 0 to 1 it writes " + ", then ".join(f"**{g}** ({_w_range(a, b)})" for g, a, b in gens) + ". "
    if rows and rows[0]["losses"]:
        best = _spans(rows, lambda r: min(r["losses"], key=r["losses"].get))
        out += "Lowest loss of the answers scored: " + ", then ".join(
            f"“{html.escape(a)}” ({_w_range(lo, hi)})" for a, lo, hi in best)
        never = [a for a in rows[0]["losses"] if a not in {b for b, _, _ in best}]
        if never:
            out += "; never the lowest: " + ", ".join(
                f"“{html.escape(a)}” (loss ≥ {min(r['losses'][a] for r in rows):.2f})" for a in never)
        out += ". "
    return out + f"w = 0 is {task_b}'s state alone, w = 1 {task_a}'s."


def shuffled_twin_sentence(top: str, tasks: list[str]) -> str:
    """Why a demonstration can land nearest a label-shuffled twin (the same questions and answers,
    paired at random): said only when it does, with the rank of the task itself among `tasks`."""
    twin = top.removesuffix("_shuffled")
    if twin == top:
        return ""
    rank = f" ({twin} itself is rank {tasks.index(twin) + 1})" if twin in tasks else ""
    return (f" That is {twin}'s label-shuffled twin: the same words, answers paired at random. A state of a few "
            f"lines records which words occur more than how they pair{rank}.")

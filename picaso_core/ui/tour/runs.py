"""What each tour step computes: a runner per step kind, a plain function of the app's Resources and
the step's inputs, calling the tab's own handlers and returning a `View`: figures, tables and a
sentence or two read off the numbers on screen (as the tabs' findings are).

Runners hold no state; `memo` (a dict the tour's build passes) lets steps that share a run (the
same Compose inputs) compute it once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go

from picaso_core.session import TUNED_DIR, Resources
from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import coffee as coffee_tab
from picaso_core.ui.tabs import compose as C
from picaso_core.ui.tabs import landscape as landscape_tab
from picaso_core.ui.tabs import primer as primer_tab
from picaso_core.ui.tabs import soup_handlers
from picaso_core.ui.tour.links import TABS


@dataclass
class View:
    """What a step shows: markdown text, figures, and (title, table) pairs."""

    text: str
    figures: list[go.Figure] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)


def resolve(res: Resources, tab: str, inputs: dict) -> dict:
    """A step's inputs for the loaded corpus and model: the demo's example ids where the corpus has
    them, else the corpus's first (labelled) example; a layer within the model's."""
    out = dict(inputs)
    if tab == "compose":  # every input a Compose link names is set: what the step leaves out, at its default
        out = {**{k: v for k, v in C.DEFAULTS.items() if k in TABS["compose"].inputs}, **out}
    ids = {s.sample_id for s in res.corpus.samples}
    if tab == "compose" and out.get("example") not in ids:
        out["example"] = res.corpus.samples[0].sample_id if res.corpus.samples else None
    if tab == "attribution" and out.get("example") not in ids:
        qa = attribution_tab.qa_samples(res)
        out["example"] = qa[0].sample_id if qa else None
    if tab == "landscape" and out.get("sample") not in ids | {"average"}:
        out["sample"] = res.corpus.samples[0].sample_id if res.corpus.samples else "average"
    if "layer" in out:
        out["layer"] = min(int(out["layer"]), res.model.config.n_layer - 1)
    return out


def _memo(memo: dict | None, key, fn):
    if memo is None:
        return fn()
    if key not in memo:
        memo[key] = fn()
    return memo[key]


# ---- Compose & compare ------------------------------------------------------------------------
def _compose(res: Resources, memo, example, **inputs):
    """The Compose tab's run for a step's inputs (the request's fields it names; the rest DEFAULTS)."""
    # the example's own continuation, not the one a step's resolved inputs carry for its text box
    named = {k: v for k, v in inputs.items() if k in C.DEFAULTS and k != "continuation"}

    def run():
        query, continuation = C.pick_example(res, example)
        req = C.ComposeRequest.of(res, query, continuation, example=example, **named)
        ctxs, results, scored = C.run_compose(C.model_resources(res, req), req)
        return ctxs, {x.method: x for x in results}, results, scored

    return _memo(memo, ("compose", example, *sorted(named.items())), run)


def compose_none_vs_concat(res: Resources, memo=None, **inputs) -> View:
    ctxs, by, results, scored = _compose(res, memo, **inputs)
    none, concat = by["none"], by["concat"]
    tok = res.model.tokenizer
    gen = pd.DataFrame([{"Method": C.LABEL[m], "Loss": round(by[m].loss, 3),
                         "Generated": tok.display_text(by[m].generation or [])} for m in ("none", "concat")])
    text = (f"**Look at** the loss of the expected answer: **{none.loss:.3f}** nats per token from the question alone, "
            f"**{concat.loss:.3f}** when the model first reads the {len(ctxs)} retrieved contexts "
            f"({sum(c.num_tokens for c in ctxs)} tokens, Concat). The contexts hold what the answer needs; "
            "the rest of the tour asks how to get there without reading them again.")
    return View(text, [C.results_plot(results, scored)], [("No context vs Concat", gen)])


def compose_methods(res: Resources, memo=None, **inputs) -> View:
    _, by, results, scored = _compose(res, memo, **inputs)
    state = [m for m in ("soup", "caso", "picaso_s", "picaso_r") if m in by]
    best = min(state, key=lambda m: by[m].loss)
    text = (f"**Look at** the state methods against Concat ({by['concat'].loss:.3f}): the plain mean of states "
            f"(Soup) scores {by['soup'].loss:.3f}, the best composition of stored states is "
            f"**{C.LABEL[best]} at {by[best].loss:.3f}**, and PICConcat-R, which re-reads every rotation, "
            f"{by['picconcat_r'].loss:.3f}.")
    return View(text, [C.results_plot(results, scored)], [("Per method", C.results_table(results))])


def compose_order(res: Resources, memo=None, **inputs) -> View:
    flipped = not inputs.get("most_relevant_last", C.DEFAULTS["most_relevant_last"])
    _, a, _, _ = _compose(res, memo, **{**inputs, "most_relevant_last": not flipped})
    _, b, _, _ = _compose(res, memo, **{**inputs, "most_relevant_last": flipped})
    rows = [{"Method": C.LABEL[m], "Most relevant last": round(a[m].loss, 4), "Most relevant first": round(b[m].loss, 4),
             "Change": round(b[m].loss - a[m].loss, 4)} for m in a if m != "none"]
    table = pd.DataFrame(rows)
    fig = go.Figure([go.Bar(name=col, x=table["Method"], y=table[col]) for col in ("Most relevant last",
                                                                                   "Most relevant first")])
    fig.update_layout(barmode="group", height=380, template="plotly_white", margin=dict(l=40, r=20, t=60, b=40),
                      title="Continuation loss in two orders of the same contexts",
                      legend=dict(orientation="h", x=1, xanchor="right", y=-0.15))
    d = {m: abs(b[m].loss - a[m].loss) for m in a}
    # PICASO-S averages over all n! orders, so any reordering leaves its state unchanged; PICASO-R
    # averages over the n rotations only, and a reversal of n > 2 contexts is not a rotation.
    r_vs_caso = "less than" if d["picaso_r"] < d["caso"] else "no less than"
    text = (f"**Look at** the change column: the same contexts in the reverse order move CASO's loss by "
            f"**{d['caso']:.4f}** and Concat's by {d['concat']:.4f}. PICASO-S averages CASO over every order, "
            f"so its state is the same and its loss moves by {d['picaso_s']:.4f}; PICASO-R averages over the "
            f"rotations of the order only (a reversal is not one), so it moves by **{d['picaso_r']:.4f}**, "
            f"{r_vs_caso} CASO.")
    return View(text, [fig], [("Loss in both orders", table)])


def compose_time(res: Resources, memo=None, **inputs) -> View:
    ctxs, by, results, scored = _compose(res, memo, **inputs)
    fast = min(("soup", "caso", "picaso_s", "picaso_r"), key=lambda m: by[m].compose_s)
    text = (f"**Look at** the right panel (log scale): reading the {sum(c.num_tokens for c in ctxs)} tokens of "
            f"{len(ctxs)} contexts (Concat) takes **{by['concat'].compose_s * 1e3:.1f} ms**; composing their stored "
            f"states takes **{by['picaso_r'].compose_s * 1e3:.2f} ms** with PICASO-R, "
            f"**{by['concat'].compose_s / max(by['picaso_r'].compose_s, 1e-9):.0f}x** less"
            + ("" if fast == "picaso_r" else f" ({by[fast].compose_s * 1e3:.2f} ms with {C.LABEL[fast]}, the fastest)")
            + ". The state methods' cost does not grow with the contexts' length, Concat's does.")
    return View(text, [C.results_plot(results, scored)], [("Per method", C.results_table(results))])


def compose_finetuned(res: Resources, memo=None, **inputs) -> View:
    if res.model_name != "demo" or not (TUNED_DIR / "config.json").is_file():
        return View("The bundled fine-tuned model goes with the demo model only: this step needs `--model demo`.")
    _, base, _, _ = _compose(res, memo, **{**inputs, "model": "base"})
    _, tuned, _, _ = _compose(res, memo, **{**inputs, "model": "bptc"})
    rows = [{"Method": C.LABEL[m], "Base": round(base[m].loss, 3), "Fine-tuned (BPTC)": round(tuned[m].loss, 3)}
            for m in base]
    table = pd.DataFrame(rows)
    fig = go.Figure([go.Bar(name=col, x=table["Method"], y=table[col]) for col in ("Base", "Fine-tuned (BPTC)")])
    fig.update_layout(barmode="group", height=380, template="plotly_white", margin=dict(l=40, r=20, t=60, b=40),
                      title="Continuation loss, base vs fine-tuned to compose",
                      legend=dict(orientation="h", x=1, xanchor="right", y=-0.15))
    gap = lambda r: r["picaso_r"].loss - r["concat"].loss
    text = (f"**Look at** PICASO-R against Concat: the base model's gap is **{gap(base):+.3f}** nats, the model "
            f"fine-tuned to compose states (BPTC, Fine-tuning tab) has **{gap(tuned):+.3f}** "
            f"(PICASO-R {base['picaso_r'].loss:.3f} → {tuned['picaso_r'].loss:.3f}).")
    return View(text, [fig], [("Loss per method, base vs fine-tuned", table)])


# ---- other tabs -------------------------------------------------------------------------------
def soup_map(res: Resources, memo=None, layer=2, part="ssm", method="pca", dim=2, **_) -> View:
    fig, quality, summary, *_ = soup_handlers.soup_map(res, layer, part, method, dim)
    return View("**Look at** the clusters: one colour per skill. " + summary, [fig, quality])


def soup_two_task(res: Resources, memo=None, w=0.5, **_) -> View:
    fig, summary, table, *_ = soup_handlers.two_task(res, w=w)
    return View(summary, [fig], [("Generations at every w", table)])


def landscape(res: Resources, memo=None, sample="average", steps=21, pair="u2-u3", view="contour", **_) -> View:
    summary, soup, caso, _line, prop4, *_ = landscape_tab.landscape(res, sample, steps, pair, view)
    return View(summary, [soup, caso], [("Distances and losses (prop. 4)", prop4)])


def attribution(res: Resources, memo=None, example=None, k=5, **_) -> View:
    query, answer, picked = attribution_tab.pick_example(res, example)
    _, summary, bars, *_ = attribution_tab.attribute(res, query, answer, k, picked or None, None, example)
    return View(summary, [bars])


def primer(res: Resources, memo=None, magnitude=0.9, phase=20, selectivity=1.0, **_) -> View:
    _kernel, eigen, md, *_ = primer_tab.lti(magnitude, phase)
    sel, _ = primer_tab.selective(selectivity)
    return View(md + " **Below**, a static Δ forgets at one rate, a selective Δ decides per input what to keep.",
                [eigen, sel])


def coffee(res: Resources, memo=None, task="ih", steps=300, seconds=6, **_) -> View:
    *_, last = coffee_tab.train_live(task=task, steps=steps, seconds=seconds)
    _loss, acc, status, table, *_ = last
    return View(status, [acc], [("This run vs the paper", table)])


RUNNERS = {f.__name__: f for f in (compose_none_vs_concat, compose_methods, compose_order, compose_time,
                                   compose_finetuned, soup_map, soup_two_task, landscape, attribution, primer, coffee)}

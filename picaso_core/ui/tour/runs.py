"""What each tour step computes: a runner per step kind, a plain function of the app's Resources and
the step's inputs, calling the tab's own handlers and returning a `View`: figures, tables and a
sentence or two read off the numbers on screen (as the tabs' findings are).

Runners hold no state; `memo` (a dict the tour's build passes) lets steps that share a run (the
same Compose inputs) compute it once.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from picaso_core.compose.registry import names
from picaso_core.engine.loading import BUNDLED, load_model
from picaso_core.session import TUNED_DIR, Resources, family_line, open_or_build_store, store_folder
from picaso_core.ui.tabs import attribution as attribution_tab
from picaso_core.ui.tabs import coffee as coffee_tab
from picaso_core.ui.tabs import compose as C
from picaso_core.ui.tabs import landscape as landscape_tab
from picaso_core.ui.tabs import primer as primer_tab
from picaso_core.ui.tabs import primer_block
from picaso_core.ui.tabs import soup_handlers
from picaso_core.ui.tour.links import TABS


@dataclass
class View:
    """What a step shows: markdown text, figures, and (title, table) pairs. `endpoint` and `outputs`:
    the tab's own event (its api_name) and what its handler returned for the step's inputs, in the
    event's outputs' order (None: an output left as it is), so that the step fills the tab below the
    bar too. `facts`: the numbers the text is read from (tests/ui/tour/test_tour_story.py)."""

    text: str
    figures: list[go.Figure] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    endpoint: str | None = None
    outputs: tuple | None = None
    facts: dict = field(default_factory=dict)


def resolve(res: Resources, tab: str, inputs: dict) -> dict:
    """A step's inputs for the loaded corpus and model: the demo's example ids where the corpus has
    them, else the corpus's first (labelled) example; a layer within the model's (the soup tab's
    middle one where the step names none)."""
    out = dict(inputs)
    if tab == "compose":  # every input a Compose link names is set: what the step leaves out, at its default
        out = {**{k: v for k, v in C.DEFAULTS.items() if k in TABS["compose"].inputs}, **out}
    ids = {s.sample_id for s in res.corpus.samples}
    if tab == "compose" and out.get("example") not in ids:
        out["example"] = res.corpus.samples[0].sample_id if res.corpus.samples else None
    if tab == "attribution":  # its examples are the labelled ones (the demo's: its QA split, not the corpus's)
        qa = attribution_tab.qa_samples(res)
        if out.get("example") not in {s.sample_id for s in qa}:
            out["example"] = qa[0].sample_id if qa else None
    if tab == "landscape" and out.get("sample") not in ids | {"average"}:
        out["sample"] = res.corpus.samples[0].sample_id if res.corpus.samples else "average"
    if tab == "soup" and "demos" in out and "layer" not in out:
        out["layer"] = res.model.config.n_layer // 2  # the tab's default layer
    if "layer" in out:
        out["layer"] = min(int(out["layer"]), res.model.config.n_layer - 1)
    if tab == "primer" and "walk_start" in out:  # the block walk reads the Compose example's query
        out.setdefault("walk_text", primer_block.default_text(res))
        out["walk_layer"] = min(int(out.get("walk_layer", 0)), res.model.config.n_layer - 1)
    return out


def _memo(memo: dict | None, key, fn):
    if memo is None:
        return fn()
    if key not in memo:
        memo[key] = fn()
    return memo[key]


# ---- Compose & compare ------------------------------------------------------------------------
def _compose(res: Resources, memo, example, **inputs) -> tuple[tuple, dict]:
    """The Compose tab's /compose handler for a step's inputs (the request's fields it names; the rest
    DEFAULTS): (its outputs, the run as plain data)."""
    # the example's own continuation, not the one a step's resolved inputs carry for its text box
    named = {k: v for k, v in inputs.items() if k in C.DEFAULTS and k != "continuation"}

    def run():
        query, continuation = C.pick_example(res, example)
        out = C.compose(res, query, continuation, example=example, **named)
        # the session's own history (its table and its gr.State) is left as it is
        return (*out[:5], None, out[6], out[7], out[8], None), out[6]

    return _memo(memo, ("compose", example, *sorted(named.items())), run)


def _fig(value) -> go.Figure:
    return value if isinstance(value, go.Figure) else go.Figure(value)


def _loss(data, m) -> float:
    return data["methods"][m]["loss"]


def none_vs_concat_text(f: dict) -> str:
    """Step 1's text from its facts: none and concat (losses), contexts, tokens."""
    d = f["none"] - f["concat"]
    read = (f"The contexts hold what the answer needs: reading them lowers its loss by **{d:.3f}**; the rest of the "
            "tour asks how to get there without reading them again." if d > 0 else
            f"Here reading them does not lower the loss ({d:+.3f}): these contexts do not hold the answer.")
    return (f"**Look at** the loss of the expected answer: **{f['none']:.3f}** nats per token from the question alone, "
            f"**{f['concat']:.3f}** when the model first reads the {f['contexts']} retrieved contexts "
            f"({f['tokens']} tokens, Concat). " + read)


def compose_none_vs_concat(res: Resources, memo=None, **inputs) -> View:
    out, data = _compose(res, memo, **inputs)
    gen = pd.DataFrame([{"Method": C.LABEL[m], "Loss": round(_loss(data, m), 3),
                         "Generated": data["methods"][m]["generation"]} for m in ("none", "concat")])
    facts = {"none": _loss(data, "none"), "concat": _loss(data, "concat"), "contexts": len(data["contexts"]),
             "tokens": sum(c["num_tokens"] for c in data["contexts"])}
    # a retrieved context the store cannot serve was passed over: the step says so, as the tab does
    text = none_vs_concat_text(facts) + (f"\n\n{data['skipped']}" if data.get("skipped") else "")
    return View(text, [_fig(out[3])], [("No context vs Concat", gen)], "compose", out, facts)


STATE_METHODS = names(kind="state")  # soup, caso, picaso_s, picaso_r (the registry's)


def methods_text(f: dict) -> str:
    """Step 2's text from the losses of every method (facts: method -> loss)."""
    best = min(STATE_METHODS, key=f.get)
    vs = "below" if f[best] < f["concat"] else "above"
    return (f"**Look at** the state methods against Concat ({f['concat']:.3f}): the plain mean of states "
            f"(Soup) scores {f['soup']:.3f}, the best composition of stored states is "
            f"**{C.LABEL[best]} at {f[best]:.3f}**, {abs(f[best] - f['concat']):.3f} {vs} Concat, and PICConcat-R, "
            f"which re-reads every rotation, {f['picconcat_r']:.3f}.")


def compose_methods(res: Resources, memo=None, **inputs) -> View:
    out, data = _compose(res, memo, **inputs)
    facts = {m: _loss(data, m) for m in data["methods"]}
    return View(methods_text(facts), [_fig(out[3])], [("Per method", out[2])], "compose", out, facts)


def order_text(f: dict) -> str:
    """Step 3's text from each method's |change| of loss between the two orders (facts: method -> change)."""
    same = f["picaso_s"] < 1e-3
    r_vs_caso = "less than" if f["picaso_r"] < f["caso"] else "no less than"
    # PICASO-S averages over all n! orders, so any reordering leaves its state unchanged; PICASO-R
    # averages over the n rotations only, and a reversal of n > 2 contexts is not a rotation.
    return (f"**Look at** the change column: the same contexts in the reverse order move CASO's loss by "
            f"**{f['caso']:.4f}** and Concat's by {f['concat']:.4f}. PICASO-S averages CASO over every order, "
            + (f"so its state is the same and its loss moves by {f['picaso_s']:.4f}" if same else
               f"yet its loss moves by {f['picaso_s']:.4f} here") +
            f"; PICASO-R averages over the rotations of the order only (a reversal is not one), so it moves by "
            f"**{f['picaso_r']:.4f}**, {r_vs_caso} CASO.")


def compose_order(res: Resources, memo=None, **inputs) -> View:
    mine = inputs.get("most_relevant_last", C.DEFAULTS["most_relevant_last"])
    out, _ = _compose(res, memo, **inputs)  # the step's own order: what the tab shows
    _, last = _compose(res, memo, **{**inputs, "most_relevant_last": True})
    _, first = _compose(res, memo, **{**inputs, "most_relevant_last": False})
    ms = [m for m in last["methods"] if m != "none"]
    rows = [{"Method": C.LABEL[m], "Most relevant last": round(_loss(last, m), 4),
             "Most relevant first": round(_loss(first, m), 4),
             "Change": round(_loss(first, m) - _loss(last, m), 4)} for m in ms]
    table = pd.DataFrame(rows)
    cols = ("Most relevant last", "Most relevant first") if mine else ("Most relevant first", "Most relevant last")
    fig = go.Figure([go.Bar(name=col, x=table["Method"], y=table[col]) for col in cols])
    fig.update_layout(barmode="group", height=380, template="plotly_white", margin=dict(l=40, r=20, t=60, b=40),
                      title="Continuation loss in two orders of the same contexts",
                      legend=dict(orientation="h", x=1, xanchor="right", y=-0.15))
    facts = {m: round(abs(_loss(first, m) - _loss(last, m)), 4) for m in ms}
    return View(order_text(facts), [fig], [("Loss in both orders", table)], "compose", out, facts)


def time_text(f: dict) -> str:
    """Step 4's text from the contexts, their tokens and each method's compose time in ms."""
    fast = min(STATE_METHODS, key=lambda m: f["ms"][m])
    ratio = f["ms"]["concat"] / max(f["ms"]["picaso_r"], 1e-9)
    than = f"**{ratio:.0f}x** less" if ratio >= 1 else f"{1 / ratio:.1f}x more (a busy machine's timing)"
    return (f"**Look at** the right panel (log scale): reading the {f['tokens']} tokens of {f['contexts']} contexts "
            f"(Concat) takes **{f['ms']['concat']:.1f} ms**; composing their stored states takes "
            f"**{f['ms']['picaso_r']:.2f} ms** with PICASO-R, {than}"
            + ("" if fast == "picaso_r" else f" ({f['ms'][fast]:.2f} ms with {C.LABEL[fast]}, the fastest)")
            + ". Composing stored states costs the same whatever the contexts' length; reading them grows with it. "
              "The times are the machine's that computed this step (the bar says which).")


def compose_time(res: Resources, memo=None, **inputs) -> View:
    out, data = _compose(res, memo, **inputs)
    facts = {"tokens": sum(c["num_tokens"] for c in data["contexts"]), "contexts": len(data["contexts"]),
             "ms": {m: r["compose_ms"] for m, r in data["methods"].items()}}
    return View(time_text(facts), [_fig(out[3])], [("Per method", out[2])], "compose", out, facts)


def finetuned_text(f: dict) -> str:
    """Step 9's text from PICASO-R's and Concat's losses, base and fine-tuned."""
    base, tuned = f["base"]["picaso_r"] - f["base"]["concat"], f["bptc"]["picaso_r"] - f["bptc"]["concat"]
    closes = ("closes most of it" if abs(tuned) < abs(base) / 2 else "narrows it" if abs(tuned) < abs(base)
              else "does not narrow it here")
    return (f"**Look at** PICASO-R against Concat: the base model's gap is **{base:+.3f}** nats; the model "
            f"fine-tuned to compose states (BPTC, Fine-tuning tab) has **{tuned:+.3f}**, it {closes} "
            f"(PICASO-R {f['base']['picaso_r']:.3f} → {f['bptc']['picaso_r']:.3f}).")


def compose_finetuned(res: Resources, memo=None, **inputs) -> View:
    if res.model_name != "demo" or not (TUNED_DIR / "config.json").is_file():
        return View("The bundled fine-tuned model goes with the demo model only: this step needs `--model demo`.")
    _, base = _compose(res, memo, **{**inputs, "model": "base"})
    out, tuned = _compose(res, memo, **{**inputs, "model": "bptc"})
    rows = [{"Method": C.LABEL[m], "Base": round(_loss(base, m), 3), "Fine-tuned (BPTC)": round(_loss(tuned, m), 3)}
            for m in base["methods"]]
    table = pd.DataFrame(rows)
    fig = go.Figure([go.Bar(name=col, x=table["Method"], y=table[col]) for col in ("Base", "Fine-tuned (BPTC)")])
    fig.update_layout(barmode="group", height=380, template="plotly_white", margin=dict(l=40, r=20, t=60, b=40),
                      title="Continuation loss, base vs fine-tuned to compose",
                      legend=dict(orientation="h", x=1, xanchor="right", y=-0.15))
    facts = {name: {m: _loss(d, m) for m in ("picaso_r", "concat")} for name, d in (("base", base), ("bptc", tuned))}
    return View(finetuned_text(facts), [fig], [("Loss per method, base vs fine-tuned", table)], "compose", out, facts)


# ---- the same question on a hybrid model (issue 49) ---------------------------------------------
HYBRID_MODEL = "demo-hybrid"  # the bundled hybrid: Nemotron-H's layout, trained as the demo model was
_digests: dict[tuple, str] = {}


def hybrid_fingerprint() -> str:
    """sha256 of the bundled hybrid's files (config, weights, tokenizer), 16 hex digits ("absent" without
    them): in the last step's cache key (tour.cache.step_key), so that retraining it rebuilds the step.
    Hashed again only when a file's size or time changes."""
    folder = BUNDLED[HYBRID_MODEL][0]
    files = sorted(p for p in folder.glob("*") if p.suffix in (".json", ".safetensors")) if folder.is_dir() else []
    if not any(p.name == "config.json" for p in files):
        return "absent"
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    if stamp not in _digests:
        h = hashlib.sha256()
        for p in files:
            h.update(p.name.encode() + b"\0" + p.read_bytes())
        _digests[stamp] = h.hexdigest()[:16]
    return _digests[stamp]


@functools.lru_cache(maxsize=2)
def _hybrid_model(device: str, files: str):
    """The bundled hybrid, loaded once per process (and per version of its files: `files` is their digest)."""
    model = load_model(HYBRID_MODEL, device=device)
    model.name_or_path = HYBRID_MODEL
    return model


def hybrid_resources(res: Resources) -> Resources:
    """`res` with the bundled hybrid and its own state store (same corpus and retriever), as
    session.tuned_resources does for the fine-tuned model: states of one model are never read by another."""
    def make():
        model = _hybrid_model(str(res.model.device), hybrid_fingerprint())
        folder = store_folder(Path(res.cache_dir), res.corpus.name, res.corpus.split, model.fingerprint())
        store = open_or_build_store(model, res.database, folder, log=lambda *_: None)
        return replace(res, model=model, model_name=HYBRID_MODEL, store=store)

    return res.derived(f"tour_hybrid_{hybrid_fingerprint()}", make)


def _share(d: dict) -> float | None:
    """PICASO-R's share of Concat's gain over no context; None where Concat gains nothing."""
    gain = d["none"] - d["concat"]
    return (d["none"] - d["picaso_r"]) / gain if gain > 0 else None


def _recovers(d: dict) -> str:
    share = _share(d)
    if share is None:
        return f"Concat does not lower the loss ({d['none']:.3f} → {d['concat']:.3f}): there is no gain to recover"
    if share <= 0:
        return (f"Concat lowers the loss from {d['none']:.3f} to {d['concat']:.3f}; PICASO-R ({d['picaso_r']:.3f}) "
                "recovers none of that gain")
    return (f"Concat lowers the loss from {d['none']:.3f} to {d['concat']:.3f}; PICASO-R, composing stored states, "
            f"reaches **{d['picaso_r']:.3f}**, **{share:.0%}** of Concat's gain")


def hybrid_text(f: dict) -> str:
    """The last step's text from its facts: the hybrid's losses per method (and "picaso_r_drop", the
    attention keys and values dropped), the pure model's where the step computed them, and whose
    results the tab below shows."""
    h, p = f["hybrid"], f["pure"]
    text = (f"**Look at** the same question and contexts on **{f['model']}** ({f['family']}). A hybrid's attention "
            "layers keep every context's keys and values, joined when composed (docs/hybrid.md). "
            f"On it, {_recovers(h)}.")
    if p is not None:
        text += f" On the pure **{f['app_model']}** model: {_recovers(p)}."
    drop = h["picaso_r_drop"] - h["picaso_r"]
    if drop > 0.005:
        text += (f" Dropping the attention layers' keys and values (the last row) raises PICASO-R's loss to "
                 f"**{h['picaso_r_drop']:.3f}**: the attention layers carry part of what the contexts hold.")
    elif drop < -0.005:
        text += (f" Dropping the attention layers' keys and values (the last row) lowers PICASO-R's loss to "
                 f"{h['picaso_r_drop']:.3f}: here the joined keys and values do not help.")
    else:
        text += (f" Dropping the attention layers' keys and values (the last row) leaves PICASO-R's loss about where "
                 f"it is ({h['picaso_r_drop']:.3f}): here the SSM part carries what the answer needs.")
    if f["own"]:
        return text + (" The app serves this hybrid itself: the tab below shows its results; the pure model's column "
                       "is left out (this step loads no second model).")
    return text + (f" The table is in this bar only: the tab below keeps the results of the app's own model, "
                   f"{f['app_model']} (start the app with `--model {f['model']}` to run the hybrid there).")


def compose_hybrid(res: Resources, memo=None, **inputs) -> View:
    """The Compose tab's run on the bundled hybrid beside the app's model: every method and the ablation.
    On a hybrid app, the app's own model alone (no second model is loaded)."""
    own = res.layout.has_attention
    if not own and hybrid_fingerprint() == "absent":
        return View(f"The bundled hybrid model is missing: make it with `python {BUNDLED[HYBRID_MODEL][1]}`.")
    hy_res = res if own else hybrid_resources(res)
    # the hybrid's runs memoised apart: _compose's key names the inputs, not the model
    hy_memo = memo if own or memo is None else memo.setdefault(("hybrid", hy_res.model.fingerprint()), {})
    out, hy = _compose(hy_res, hy_memo, **inputs)
    pure = None if own else _compose(res, memo, **inputs)[1]
    cols = [(f"{res.model_name} ({family_line(res.model.config)})", pure)] if pure is not None else []
    cols.append((f"{hy_res.model_name} (hybrid)", hy))
    rows = [{"Method": C.LABEL[m], **{c: round(_loss(d, m), 3) if m in d["methods"] else None for c, d in cols}}
            for m in hy["methods"]]
    table = pd.DataFrame(rows)
    fig = go.Figure([go.Bar(name=c, x=table["Method"], y=table[c]) for c, _ in cols])
    fig.update_layout(barmode="group", height=380, template="plotly_white", margin=dict(l=40, r=20, t=60, b=40),
                      title="Continuation loss per method, pure vs hybrid" if pure is not None else
                      "Continuation loss per method on the hybrid",
                      legend=dict(orientation="h", x=1, xanchor="right", y=-0.15))
    facts = {"model": hy_res.model_name, "family": family_line(hy_res.model.config), "own": own,
             "app_model": res.model_name, "fingerprint": hy_res.model.fingerprint(),
             "hybrid": {m: _loss(hy, m) for m in hy["methods"]},
             "pure": None if pure is None else {m: _loss(pure, m) for m in pure["methods"]}}
    # the tab's own outputs only when they are the app's model's (the bar holds another model's)
    return View(hybrid_text(facts), [fig], [("Loss per method, pure vs hybrid", table)],
                "compose" if own else None, out if own else None, facts)


# extra parts of a runner's cache key (tour.cache.step_key): what it reads besides the app's model and corpus
RUN_KEYS = {"compose_hybrid": hybrid_fingerprint}


# ---- other tabs -------------------------------------------------------------------------------
def soup_map_text(f: dict) -> str:
    """Step 5's lead, before the tab's own summary (which says where the typed demonstration lands, and
    why when that is a label-shuffled twin): whether skills cluster, nearest-neighbour accuracy against
    chance."""
    if f["nn_accuracy"] >= 2 * f["chance"]:
        return (f"**Look at** the clusters: one colour per skill; a state's nearest neighbour is of its own skill "
                f"{f['nn_accuracy']:.0%} of the time against {f['chance']:.0%} by chance. ")
    return (f"**Look at** the colours: one per skill; at this layer skills barely cluster ({f['nn_accuracy']:.0%} "
            f"against {f['chance']:.0%} by chance). ")


def soup_map(res: Resources, memo=None, layer=2, part="ssm", method="pca", dim=2, demos="", top=5, **_) -> View:
    out = soup_handlers.soup_map(res, layer, part, method, dim, demos, top)
    fig, quality, summary, retrieved, data = out[:5]
    q, i = data["quality"], data["quality"]["layers"].index(data["layer"])
    tasks = list(retrieved["task"]) if len(retrieved) else []
    facts = {"nn_accuracy": q[part]["nn_accuracy"][i], "chance": q["chance"], "nearest": tasks}
    return View(soup_map_text(facts) + summary, [fig, quality], [], "soup_map", tuple(out), facts)


def soup_two_task(res: Resources, memo=None, w=0.5, **_) -> View:
    out = soup_handlers.two_task(res, w=w)
    fig, summary, table = out[:3]
    return View(summary, [fig], [("Generations at every w", table)], "soup_two_task", tuple(out))


def landscape(res: Resources, memo=None, sample="average", steps=21, pair="u2-u3", view="contour", **_) -> View:
    out = landscape_tab.landscape(res, sample, steps, pair, view)
    summary, soup, caso, _line, prop4 = out[:5]
    return View(summary, [soup, caso], [("Distances and losses (prop. 4)", prop4)], "landscape", tuple(out))


def attribution_text(f: dict) -> str:
    """Step 8's lead from its facts: how many methods rank the gold context first, and the losses with
    no context and with all of them (why the methods can disagree)."""
    hits, n = f["gold_top"], f["methods"]
    if not f["gold"]:
        return "**Look at** the bars: this example names no gold context, so no method can be checked against one. "
    if hits * 2 > n:
        return (f"**Look at** the bars: the answer rests on the gold context, **{hits} of {n}** methods rank it "
                "first. ")
    return (f"**Look at** the bars: the methods disagree, only **{hits} of {n}** rank the gold context first. "
            f"Without any context the answer's loss is {f['none']:.3f}, with all of them {f['all']:.3f}: "
            + ("removing one context changes little, so each method's ranking rests on small differences. "
               if f["none"] - f["all"] < 0.5 else "the contexts matter together more than any one alone. "))


def attribution(res: Resources, memo=None, example=None, k=5, grain="context", **_) -> View:
    query, answer, picked = attribution_tab.pick_example(res, example)
    out = _memo(memo, ("attribution", example, k, grain), lambda: attribution_tab.attribute(
        res, query, answer, k, picked or None, None, example, grain=grain))
    _, summary, bars, *_ = out
    data = out[-1]
    gold = {c["id"] for c in data["contexts"] if c["gold"]}
    full = data["losses"]["all"]
    facts = {"gold": sorted(gold), "gold_top": sum(c in gold for c in data["top"].values()),
             "methods": len(data["top"]),
             "none": data["losses"]["none"], "all": full.get("picaso_r", min(full.values(), default=float("nan")))}
    return View(attribution_text(facts) + summary, [bars], [], "attribute", tuple(out), facts)


def primer(res: Resources, memo=None, magnitude=0.9, phase=20, selectivity=1.0, **_) -> View:
    _kernel, eigen, md, *_ = primer_tab.lti(magnitude, phase)
    sel, _ = primer_tab.selective(selectivity)
    return View(md + " **Below**, a static Δ forgets at one rate, a selective Δ decides per input what to keep.",
                [eigen, sel])


def block_walk_text(f: dict) -> str:
    """Step 11's text from the walk's facts: the state's size (the same after any number of tokens), this
    head's decay per token, and whether its state grew, held or shrank from the first token to the last."""
    ratio = f["norm_last"] / max(f["norm_first"], 1e-12)
    how = ("grows" if ratio > 1.1 else "shrinks" if ratio < 0.9 else "stays about the same") + \
        f" from **{f['norm_first']:.3f}** after the first token to **{f['norm_last']:.3f}** after token {f['tokens']}"
    # the walk's facts are plain data (the step's text is made from them alone): their family, not a layout
    unit = "head" if f["family"] == "Mamba2" else "channel group"
    return (f"**Look at** the state of layer {f['layer']}, {unit} {f['head']}: a {f['P']} × {f['N']} matrix that every "
            f"token updates, h ← a·h + Δ·x·Bᵀ. It keeps a share a = exp(Δ·A) of what it held, here between "
            f"**{f['decay_min']:.3f}** and **{f['decay_max']:.3f}** per token, and adds what the token writes; its size "
            f"(|h|) {how}. A layer's state is {f['layer_numbers']:,} numbers and the model's {f['model_numbers']:,} "
            f"({f['bytes'] / 1024:.0f} KiB), the same after {f['tokens']} tokens or 10,000: that fixed-size state is what "
            "PICASO stores for each context and composes. **Below**, Step ▶ and ▶ Play walk the block stage by stage.")


def block_walk(res: Resources, memo=None, walk_text=None, walk_layer=1, walk_head=0, walk_start="zeros", **_) -> View:
    outputs, facts, fig = primer_block.tour_view(res, walk_text, walk_layer, walk_head, walk_start)
    return View(block_walk_text(facts), [fig], [], "block_walk_view", tuple(outputs), facts)


SEPARATE = (0.9, 0.7)  # COFFEE at or above the first, S6 at or below the second: the paper's gap, shown


def coffee_text(f: dict) -> str:
    """Step 12's lead from the two accuracies after the run's steps: the paper's separation, or what
    the run shows where it does not reach it."""
    c, s, steps = f["coffee"], f["s6"], f["steps"]
    if c >= SEPARATE[0] and s <= SEPARATE[1]:
        return (f"**Look at** the accuracy curves: after {steps} steps each, COFFEE reaches **{c:.2f}** while S6 "
                f"stays at **{s:.2f}**, as in the paper (0.99 vs 0.68): feeding the state back lets COFFEE keep "
                "the symbol after the trigger. ")
    lead = "ahead of" if c > s else "not ahead of"
    return (f"**Look at** the accuracy curves: after {steps} steps each, COFFEE is at **{c:.2f}**, {lead} S6 "
            f"(**{s:.2f}**), short of the paper's separation (0.99 vs 0.68): this run is too short to show it. ")


def coffee(res: Resources, memo=None, task="ih", steps=300, **_) -> View:
    # no time budget: the same number of steps on every machine (a time budget stops a busy one early)
    *_, last = coffee_tab.train_live(task=task, steps=steps, time_budget=False)
    _loss, acc, status, table, data, *_ = last
    h = data["history"]
    facts = {"coffee": h["coffee"][-1]["accuracy"], "s6": h["s6"][-1]["accuracy"], "steps": h["coffee"][-1]["step"]}
    return View(coffee_text(facts) + status, [acc], [("This run vs the paper", table)], "coffee_train", tuple(last),
                facts)


RUNNERS = {f.__name__: f for f in (compose_none_vs_concat, compose_methods, compose_order, compose_time,
                                   compose_finetuned, soup_map, soup_two_task, landscape, attribution, primer,
                                   block_walk, coffee, compose_hybrid)}

"""What the Attribution tab shows from /attribute's plain data: the shaded contexts, the summary,
the figures and the code that reproduces them. Plain functions of that data (no model, no layout)."""

from __future__ import annotations

import math

from picaso_core.compose.registry import label, names
from picaso_core.plots import attribution as plots
from picaso_core.ui.code import client_snippet
from picaso_core.ui.errors import clip
from picaso_core.ui.tabs import attribution_panel as src

LOO = tuple(m for m in names() if m != "none")  # every composition method of the registry, leaving one out
METHODS = ("loi", *LOO, "surrogate")
NAMES = {"loi": "LOI", **{m: f"{label(m)}-LOO" for m in LOO}, "surrogate": f"Surrogate ({label('picaso_r')})"}


def contexts_html(data: dict) -> str:
    """The contexts' text, each source shaded by its score, a legend in nats, the top sources."""
    return src.sources_html(data, NAMES)


def summary_md(data: dict) -> str:
    ctx, rows = data["contexts"], data["sources"]
    gold = {c["id"] for c in ctx if c["gold"]}
    unit = src.GRAIN_NAMES[data["grain"]]
    sp = data["span"]
    whole = sp["tokens"] == [0, len(data["answer_tokens"])]
    span = ("the whole answer" if whole else
            f"the span `{clip(sp['text'], 60)}` (characters {sp['start']}-{sp['end']}, answer tokens "
            f"{sp['tokens'][0]}-{sp['tokens'][1] - 1})")
    lines = [f"**Answer** ({data['answer_source']}): `{clip(data['answer'], 120)}` · {len(ctx)} contexts, "
             f"{len(rows)} sources ({unit}) · scoring {span} · loss with no context "
             f"{data['losses']['none']:.3f} nats/token"]
    if data["grain"] != "context":
        lines.append(f"Ablated contexts: {src.WAY_NAMES[data['way']]}. Select words of the answer (above) to "
                     "attribute that span.")
    if gold:
        hits = [NAMES[m] for m, cid in data["top"].items() if cid in gold]
        what = "top source lies in the gold context" if data["grain"] != "context" else "gold context is the top one"
        lines.append(f"The {what} for **{len(hits)} of {len(data['top'])}** methods"
                     + (f" ({', '.join(hits)})." if hits else "."))
    sec, n_abl = data["seconds"], data.get("ablations", {})
    if "picaso_r" in sec and "concat" in sec:
        lines.append(f"Leave-one-out of {len(rows)} sources: PICASO-R **{1e3 * sec['picaso_r']:.0f} ms** vs Concat "
                     f"**{1e3 * sec['concat']:.0f} ms** ({sec['concat'] / max(sec['picaso_r'], 1e-9):.1f}x).")
    if "surrogate" in data:
        s = data["surrogate"]
        lds = f"{s['lds']:.2f}" if s["lds"] is not None and math.isfinite(s["lds"]) else "n/a"
        lines.append(f"Surrogate: **LDS {lds}** on {s['n_heldout']} held-out subsets (Spearman of its predicted "
                     f"vs actual loss; 1 = it ranks subsets perfectly), fitted on {s['n_ablations']} random subsets; "
                     f"{n_abl.get('surrogate', 0)} states built and scored in {1e3 * sec['surrogate']:.0f} ms.")
    lines += data.get("skipped", [])
    return "  \n".join(lines)


def unit_labels(data: dict) -> tuple[list[str], list[bool]]:
    """Axis labels of the sources (context id, and the source's number within it below the
    context) and whether each lies in a gold context."""
    gold = {c["id"] for c in data["contexts"] if c["gold"]}
    rows = data["sources"]
    if data["grain"] == "context":
        return [r["context_id"] for r in rows], [r["context_id"] in gold for r in rows]
    labels, seen = [], {}
    for r in rows:
        seen[r["context_id"]] = seen.get(r["context_id"], 0) + 1
        labels.append(f"{r['context_id']}·{seen[r['context_id']]}")
    return labels, [r["context_id"] in gold for r in rows]


def figures(data: dict):
    ids, gold = unit_labels(data)
    bars = plots.score_bars(ids, gold, data["scores"], NAMES, data["seconds"])
    heat = plots.method_heatmap(ids, gold, data["scores"], NAMES)
    tokens = plots.token_heatmap(ids, gold, data["answer_tokens"], data["token_deltas"], NAMES[data["token_method"]],
                                 span=tuple(data["span"]["tokens"]))
    return bars, heat, tokens


def code_snippets(query, answer, k, picked, methods, grain="context", way="states", span=(None, None)) -> tuple[str, str]:
    py = (
        "from picaso_core import load_model\n"
        "from picaso_core.analysis.sources import make_sources, encode_sources\n"
        "from picaso_core.analysis.attribution_sources import score_sources, span_tokens\n\n"
        "model = load_model('demo'); tok = model.tokenizer\n"
        f"contexts = {list(picked or [])!r}  # ids; texts from the corpus (empty: retrieved top-{int(float(k))})\n"
        f"sources = make_sources(tok, list(zip(contexts, texts)), {grain!r}, suffix='\\n\\n')  # texts of those contexts\n"
        "states = encode_sources(model, sources)  # at context grain: StateStore.get_many(contexts)\n"
        f"q, a = tok.encode({query!r}), tok.encode({answer!r})\n"
        f"span = span_tokens(tok, a, {span[0]!r}, {span[1]!r})  # answer tokens of the characters selected\n"
        f"r = score_sources(model, q, a, sources, states, {list(methods or METHODS)!r}, way={way!r}, span=span)\n"
        "r.method_scores  # {method: [score per source]}, higher = more important; r.surrogate.lds\n"
    )
    kw = dict(query=query, answer=answer, k=int(float(k)), contexts=list(picked or []), methods=list(methods or METHODS))
    if grain != "context" or way != "states":
        kw.update(grain=grain, way=way)
    if span[0] is not None or span[1] is not None:
        kw.update(span_start=span[0], span_end=span[1])
    return py, client_snippet("/attribute", **kw)


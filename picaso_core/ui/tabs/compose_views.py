"""What the Compose & compare tab shows, as plain functions of a run: the methods' labels and
colours, the contexts in composition order, the per-method table and figure, the generations, the
summary sentence, the run as plain data, and the two code snippets (picaso_core and gradio_client).
The tab (compose.py) computes the run and lays these out.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from picaso_core.compose.registry import REGISTRY, methods_for, names
from picaso_core.plots.compose import method_figure
from picaso_core.session import Resources
from picaso_core.ui.code import client_snippet
from picaso_core.ui.errors import clip

ENDPOINT = "/compose"

# the methods' rows, labels, legend lines and colours: the registry's (picaso_core/compose/registry.py)
# (name, label, one line for the legend, colour) of a pure model's rows; a hybrid adds the ablation (methods_for(True))
METHODS = tuple((m.name, m.label, m.paper, m.colour) for m in methods_for(has_attention=False))
LABEL = {m.name: m.label for m in REGISTRY}
COLOR = {m.name: m.colour for m in REGISTRY}
TABLE_NOTE = (
    "Loss: mean negative log-likelihood of the expected continuation per token (nats); perplexity = e^loss. "
    "Compose: time to build the state the query starts from (state methods: arithmetic on stored "
    "states; Concat and PICConcat-R: forward passes over the context tokens). Process: time to read "
    "the query and score the continuation from that state (all methods are scored in one batched call, "
    "its time split evenly). Encoding the contexts into the store is done once, ahead, and charged to no method. "
    "State: whether this click composed the state (and why it was not cached) or took it from the cache of "
    "composed states; Compose is then the time it took when it was composed."
)
NO_CONTINUATION_NOTE = (
    "No expected continuation given, so there is nothing to score: the loss columns are empty and "
    "the methods are compared by their generations and timings. (Scoring the model's own greedy "
    "continuation would favour whichever method generated it.)"
)


@dataclass
class Context:
    """One context as used in a run, in composition order."""

    cid: str
    text: str
    num_tokens: int
    score: float  # cosine similarity to the query
    gold: bool  # known to hold what the continuation needs (corpus label)


def contexts_html(contexts: list[Context]) -> str:
    """The contexts as numbered cards in composition order, then the query."""
    cards = []
    for i, c in enumerate(contexts, 1):
        gold = '<span class="px-gold" title="labelled as holding the answer">gold</span>' if c.gold else ""
        cards.append(
            f'<div class="px-ctx"><div class="px-ctx-head"><span class="px-num">{i}</span>'
            f'<code>{html.escape(c.cid)}</code>{gold}<span class="px-meta">cos {c.score:.2f} · {c.num_tokens} tok</span></div>'
            f'<div class="px-ctx-text">{html.escape(clip(c.text, 220))}</div></div>'
        )
    cards.append('<div class="px-ctx px-query"><div class="px-ctx-head"><span class="px-num">Q</span>query</div></div>')
    return '<div class="px-order">' + '<span class="px-arrow">→</span>'.join(cards) + "</div>"


RESULT_COLUMNS = ["Method", "Loss", "Perplexity", "Compose (ms)", "State", "Process (ms)"]
CACHE_NOTES = ("state from cache", "composed (", "results from cache")  # run_methods_cached's notes


def results_table(results) -> pd.DataFrame:
    rows = []
    for r in results:
        rows.append({
            "Method": LABEL[r.method],
            "Loss": _num(r.loss, 3),
            "Perplexity": _num(r.ppl, 2),
            "Compose (ms)": round(r.compose_s * 1e3, 2),
            "State": r.note if r.note.startswith(CACHE_NOTES) else "",
            "Process (ms)": round(r.process_s * 1e3, 2),
        })
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def results_plot(results, scored: bool) -> go.Figure:
    """Loss per method (left) and time to compose / process per method, log scale (right)."""
    return method_figure([LABEL[r.method] for r in results], [COLOR[r.method] for r in results],
                         [r.loss for r in results] if scored else None,
                         [r.compose_s * 1e3 for r in results], [r.process_s * 1e3 for r in results])


def generations_html(results, tokenizer) -> str:
    cards = []
    for r in results:
        text = r.generation if isinstance(r.generation, str) else tokenizer.display_text(r.generation or [])
        loss = f"loss {r.loss:.2f}" if _finite(r.loss) else ""
        cards.append(
            f'<div class="px-gen" style="border-top-color:{COLOR[r.method]}"><div class="px-gen-head">'
            f'<b>{LABEL[r.method]}</b><span class="px-meta">{loss}</span></div>'
            f'<div class="px-gen-text">{html.escape(text) or "<i>(nothing generated)</i>"}</div></div>'
        )
    return '<div class="px-gens">' + "".join(cards) + "</div>"


def summary_md(contexts: list[Context], results, scored: bool, query_tokens: int) -> str:
    n_tok = sum(c.num_tokens for c in contexts)
    head = f"**{len(contexts)} contexts** ({n_tok} tokens) composed for a query of {query_tokens} tokens."
    if not scored:
        return head + " " + NO_CONTINUATION_NOTE
    by = {r.method: r for r in results}
    state_methods = [m for m in names(kind="state") if m in by]
    best = min(state_methods, key=lambda m: by[m].loss)
    speed = by["concat"].compose_s / max(by[best].compose_s, 1e-9)
    return (
        f"{head} Loss without context **{by['none'].loss:.3f}**, with Concat **{by['concat'].loss:.3f}**; "
        f"best composition of stored states: **{LABEL[best]} {by[best].loss:.3f}**, composed "
        f"{speed:.0f}× faster than Concat processes the tokens."
    )


def state_sizes(states) -> dict | None:
    """Bytes of the contexts' stored states, from the states: the SSM part (fixed per context) and
    the attention layers' keys and values (growing with its tokens); None for a pure model's."""
    if not states or not states[0].has_attention:
        return None
    ssm = sum(getattr(states[0], k).nbytes for k in ("ssm", "conv", "log_decay"))
    kv = [s.keys.nbytes + s.values.nbytes for s in states]
    positions = [s.keys.shape[-2] for s in states]
    return {"ssm_bytes": ssm, "kv_bytes_per_token": round(sum(kv) / max(sum(positions), 1), 1),
            "contexts": [{"tokens": t, "bytes": ssm + b} for t, b in zip(positions, kv)]}


def state_size_md(sizes: dict) -> str:
    """One line: 'State per context: 1.2 MB SSM + 34 KB per 100 tokens of attention keys/values ...'."""
    each = [c["bytes"] for c in sizes["contexts"]]
    tokens = [c["tokens"] for c in sizes["contexts"]]
    span = lambda xs, f: f(min(xs)) if min(xs) == max(xs) else f"{f(min(xs))}–{f(max(xs))}"  # noqa: E731
    ssm, kv = _bytes(sizes["ssm_bytes"]), _bytes(100 * sizes["kv_bytes_per_token"])
    return (f"State per context: **{ssm} SSM** (fixed) + **{kv} per 100 tokens** of attention keys/values: "
            f"these contexts ({span(tokens, str)} tokens) hold {span(each, _bytes)} each.")


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.3g} {unit}"
        n /= 1000


def history_row(query: str, contexts: list[Context], results, scored: bool) -> dict:
    row = {"Query": clip(query, 50), "k": len(contexts)}
    row.update({LABEL[r.method]: _num(r.loss, 3) if scored else None for r in results})
    return row


def results_data(res: Resources, query: str, continuation: str, contexts: list[Context], results, scored: bool) -> dict:
    """The run as plain data (JSON-ready; NaN as null): what a scripted user reads."""
    tok = res.model.tokenizer
    return {
        "query": query,
        "continuation": continuation,
        "scored": scored,
        "contexts": [{"id": c.cid, "num_tokens": c.num_tokens, "cosine": round(float(c.score), 4), "gold": c.gold}
                     for c in contexts],
        "methods": {
            r.method: {"label": LABEL[r.method], "loss": _num(r.loss, 4), "perplexity": _num(r.ppl, 3),
                       "compose_ms": round(r.compose_s * 1e3, 3), "process_ms": round(r.process_s * 1e3, 3),
                       "generation": tok.display_text(r.generation or [])}
            for r in results
        },
        "model": res.model_name,
        "corpus": f"{res.corpus.name}/{res.corpus.split}",
    }


def python_snippet(res: Resources, run, contexts: list[Context]) -> str:
    """picaso_core code that recomputes this run's table (same contexts, same stored states); `run`: its
    compose.ComposeRequest."""
    corpus = res.corpus.name if res.corpus.name in ("demo", "wikitext", "msmarco") else f"path/to/{res.corpus.name}.jsonl"
    ids = [c.cid for c in contexts]
    sample = next((x for x in res.corpus.samples if x.sample_id == run.example and x.query == run.query), None)
    exclude = f", exclude={list(sample.exclude_ids)!r}" if sample is not None and sample.exclude_ids else ""
    how = ("picked by hand" if run.contexts else
           f"= [c for c, _ in res.retriever.retrieve(query, {len(ids)}{exclude}, best_last={run.most_relevant_last})]")
    cont = "tok.encode(continuation)" if run.continuation else "[tok.eos_id]  # no continuation: losses meaningless"
    methods = names()
    return (
        "from picaso_core.analysis.evaluate import run_methods\n"
        "from picaso_core.session import load_resources\n\n"
        f"res = load_resources({res.model_name!r}, {corpus!r}, {res.corpus.split!r})  # model, corpus, state store, retriever\n"
        "tok = res.model.tokenizer\n"
        f"query = {run.query!r}\n"
        f"continuation = {run.continuation!r}\n"
        f"ids = {ids!r}  # composed in this order; {how}\n"
        "results = run_methods(\n"
        f"    res.model, tok.encode(query), {cont},\n"
        "    [res.token_ids(c) for c in ids], context_states=res.states(ids),\n"
        f"    methods={methods!r}, generate_tokens={run.max_new_tokens}, seed=0)\n"
        "for r in results:\n"
        "    print(f\"{r.method:12s} loss {r.loss:.3f}  compose {r.compose_s * 1e3:8.2f} ms  {tok.display_text(r.generation or [])!r}\")\n"
    )


def api_snippet(run) -> str:
    """The gradio_client call of this run (a compose.ComposeRequest), then where its plain results are."""
    api = {k: list(v) if isinstance(v, tuple) else v for k, v in run.api().items()}
    return client_snippet(ENDPOINT, **api) + (
        "order, summary, table, plot, generations, runs, results, python_code, client_code = result\n"
        'for method, r in results["methods"].items():\n'
        '    print(method, r["loss"], r["compose_ms"], r["generation"])\n'
    )


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _num(x, digits: int):
    return round(x, digits) if _finite(x) else None

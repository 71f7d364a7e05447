"""Compose & compare: retrieve (or pick) contexts for a query, run every composition method on their
stored states, and compare continuation loss, time and generations side by side.

Handlers are plain functions at the top (tested without a server); `render` lays the tab out and
wires them. The API endpoint `/compose` takes `query` (required) and optional settings, so it can
be scripted with gradio_client: Client(url).predict(query="...", k=5, api_name="/compose")
Every output is named (view_api); `results` is the run as plain data (a dict). The event runs with
preprocess=False: `compose` checks the raw inputs itself (picaso_core.ui.errors), so a bad input
gets one short message naming the fix and one line in the server log.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, fields, replace

import gradio as gr
import pandas as pd

from picaso_core.compose.registry import methods_for, names
from picaso_core.data import DEMO_COMPOSE_EXAMPLE
from picaso_core.retrieval.rankers import own_passages
from picaso_core.session import TUNED_DIR, Resources, TunedModelError, tuned_resources
from picaso_core.store.servable import Noted
from picaso_core.ui import budget
from picaso_core.ui.code import show_code
from picaso_core.ui.errors import bad_input, clip, flag, id_list, text, whole_number
from picaso_core.ui.limits import corpus_counts, count_slider, note
from picaso_core.ui.pickers import EXAMPLES_SHOWN, context_picker
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import HISTORY_ROWS, LIGHT, MODEL
from picaso_core.ui.tabs.compose_runs import FIGURES, cache_stats, memo, retrieve, run_methods_cached
from picaso_core.ui.tabs.compose_views import (ENDPOINT, LABEL, METHODS, RESULT_COLUMNS, TABLE_NOTE,
                                               Context, api_snippet, contexts_html, generations_html, history_row,
                                               python_snippet, results_data, results_plot, results_table,
                                               state_size_md, state_sizes, summary_md)

TITLE = "Compose & compare"
K_MAX = budget.PICKED_CONTEXTS  # the paper retrieves up to 10 chunks (sec. 6.1); picked ones alike
MAX_NEW_TOKENS = 64
MODELS = (("base model", "base"), ("fine-tuned (BPTC)", "bptc"))  # model choice (the BPTC model: session.tuned_resources)


@dataclass(frozen=True)
class ComposeRequest:
    """One /compose request: the API's parameters, in its order, with its defaults (DEFAULTS). The
    tab's handlers, the endpoint's signature, its code snippets and the tour all read this one list.
    The tab opens on the demo's DEMO_COMPOSE_EXAMPLE (another corpus: its first example)."""

    query: str
    continuation: str = ""
    k: int = 5
    contexts: tuple = ()  # picked context ids, in composition order; empty: the top-k retrieved
    most_relevant_last: bool = True
    max_new_tokens: int = 24
    example: str | None = None
    model: str = "base"

    @classmethod
    def of(cls, res: Resources, *args, **kwargs) -> "ComposeRequest":
        """The request from raw API values (positional in the API's order, or by name), each checked:
        one short message naming the fix (gr.Error) for a bad one. Raw payloads come as they were
        sent (the event runs with preprocess=False)."""
        try:
            raw = inspect.signature(cls).bind(*args, **kwargs).arguments
        except TypeError as e:
            raise bad_input(f"/compose takes {', '.join(f.name for f in fields(cls))}: {e}", ENDPOINT) from None
        get = lambda name: raw.get(name, DEFAULTS.get(name))  # noqa: E731
        query = text("query", raw.get("query"), ENDPOINT)
        if not query.strip():
            raise bad_input("Type a query, or pick an example from the corpus.", ENDPOINT)
        example, model = get("example"), get("model")
        if example is not None and not isinstance(example, str):
            raise bad_input(f"example must be an example id, got {clip(repr(example), 40)}", ENDPOINT)
        if model not in dict(MODELS).values():
            raise bad_input(f"model must be 'base' or 'bptc' (the fine-tuned demo model), got {clip(repr(model), 40)}",
                            ENDPOINT)
        return cls(
            query=query,
            continuation=text("continuation", get("continuation"), ENDPOINT),
            k=whole_number("k", get("k"), 1, min(K_MAX, len(res.database)), ENDPOINT),
            contexts=picked_contexts(get("contexts")),
            most_relevant_last=flag("most_relevant_last", get("most_relevant_last"), ENDPOINT),
            max_new_tokens=whole_number("max_new_tokens (tokens to generate)", get("max_new_tokens"), 0,
                                        MAX_NEW_TOKENS, ENDPOINT),
            example=example or None,
            model=model,
        )

    def api(self) -> dict:
        """The values a gradio_client call must pass: the query and continuation, and what differs
        from DEFAULTS."""
        return {k: v for k, v in asdict(self).items() if k in ("query", "continuation") or v != DEFAULTS.get(k)}


DEFAULTS = {f.name: f.default for f in fields(ComposeRequest) if f.name != "query"}  # the API's defaults


def picked_contexts(value) -> tuple:
    """The picked ids, capped like k before any work (picaso_core.ui.budget): /compose's estimate. With
    at most K_MAX contexts, and their tokens and the query's under res.max_tokens (run_compose), the
    7 methods read at most K_MAX x max_tokens tokens (PICConcat-R's rotations) and generate
    MAX_NEW_TOKENS each."""
    ids = tuple(id_list("contexts", value, ENDPOINT) or ())
    budget.within(ENDPOINT, len(ids), f"{len(ids)} picked contexts")
    return ids
# /compose runs in the app's one model pool (picaso_core.ui.server.serving): the model is shared read-only
# (forward and generate keep no state on the module; the store's ensure is locked; the Rust
# tokenizer's encode takes &self), and 10 concurrent clients get exactly their serial answers
# (tests/ui/server/test_concurrency.py).

# ---- handlers: plain functions --------------------------------------------------------------
def limits(res: Resources) -> list[str]:
    """What this tab cannot show on the loaded corpus, and why (shown above its controls)."""
    n = corpus_counts(res)
    out = []
    if not n["samples"]:
        out.append("No samples in the corpus: the example list is empty. Type a query (and, to score it, its "
                   "continuation); contexts are retrieved from the database.")
    elif not n["labelled"]:
        out.append("No sample names `gold_ids`: no retrieved context can be marked gold.")
    if n["contexts"] < K_MAX:
        out.append(f"The database holds {n['contexts']} context{'s' * (n['contexts'] != 1)}: k goes up to "
                   f"{n['contexts']}.")
    return out


def example_choices(res: Resources) -> list[tuple[str, str]]:
    return [(f"{s.sample_id} · {clip(s.query, 80)}", s.sample_id) for s in res.corpus.samples[:EXAMPLES_SHOWN]]


def pick_example(res: Resources, sample_id: str | None) -> tuple[str, str]:
    """Query and continuation of a corpus example (for the two text boxes)."""
    if not sample_id:
        return "", ""
    s = _sample(res, sample_id)
    return s.query, s.continuation


def choose_contexts(res: Resources, req: ComposeRequest) -> list[Context]:
    """The contexts of a run, in the order they are composed (the last one sits next to the query).

    Hand-picked ids keep the order given; otherwise the top-k retrieved, most relevant last when
    `most_relevant_last` (the paper's best-case order for Concat, sec. 6.2). An example's own chunks
    (`exclude_ids`, the WikiText protocol) are never retrieved.
    """
    query, k, picked, most_relevant_last = req.query, req.k, list(req.contexts), req.most_relevant_last
    sample = _sample(res, req.example) if req.example else None
    if sample is not None and sample.query != query:
        sample = None  # the query was edited: no longer that example
    gold = set(sample.gold_ids) if sample else set()
    if picked:
        unknown = [c for c in picked if c not in res.database]
        if unknown:
            names = ", ".join(clip(repr(c), 40) for c in unknown[:3]) + (" …" if len(unknown) > 3 else "")
            raise bad_input(f"unknown context id {names}: pick ids from 'Pick contexts by hand' "
                            f"(e.g. {next(iter(res.database))!r})", ENDPOINT)
        hits, skipped = list(zip(picked, res.retriever.similarity(query, picked))), ""
    else:  # a QA example (MS MARCO) ranks only its own passages
        qa = sample is not None and sample.kind == "qa" and sample.contexts
        exclude = tuple(sample.exclude_ids) if sample else ()
        # contexts the store cannot serve (a read-only store's damaged shard) give way to the next-ranked
        hits, skipped = res.servable(lambda skip: (
            own_passages(res.retriever, query, [c for c in sample.context_ids if c not in skip], k,
                         best_last=most_relevant_last) if qa else
            retrieve(res.retriever, query, k, exclude + skip, most_relevant_last)))
    chosen = Noted(Context(cid, res.text(cid), res.num_tokens(cid), score, cid in gold) for cid, score in hits)
    chosen.note = skipped
    return chosen


def run_compose(res: Resources, req: ComposeRequest, progress=lambda *a, **kw: None):
    """Run every method on one checked request (`ComposeRequest.of`) with `res`'s model (the
    request's `model` is chosen by `compose`). Returns (contexts, results, scored).

    Raises gr.Error (one short message naming the fix, one log line) where the request does not fit
    this app: unknown ids, or a query or contexts longer than `res.max_tokens` tokens in total.
    """
    query, continuation, max_new_tokens = req.query, req.continuation, req.max_new_tokens
    tok = res.model.tokenizer
    query_ids = tok.encode(query)
    scored = bool(continuation)
    # run_methods scores a continuation of at least one token. With none given, it scores one
    # placeholder token (EOS, or the query's last token for a tokenizer without EOS) and the losses
    # are dropped (see NO_CONTINUATION_NOTE); timings and generations are kept.
    continuation_ids = tok.encode(continuation) if scored else [tok.eos_id if tok.eos_id is not None else query_ids[-1]]
    if len(query_ids) + len(continuation_ids) > res.max_tokens:
        what = f"query and continuation hold {len(query_ids) + len(continuation_ids)}" if scored \
            else f"query holds {len(query_ids)}"
        raise bad_input(f"The {what} tokens; this app reads at most {res.max_tokens}. "
                        f"Shorten {'them' if scored else 'it'}.", ENDPOINT)
    progress(0.05, desc="retrieving contexts")
    contexts = choose_contexts(res, req)
    total = sum(c.num_tokens for c in contexts)
    if total > res.max_tokens:
        raise bad_input(
            f"The {len(contexts)} contexts hold {total} tokens; this app composes at most {res.max_tokens}. "
            "Lower k or pick shorter contexts (or start the app with a larger --max-tokens).", ENDPOINT
        )
    # through the composed-state and scored-run caches (compose_runs); each result's note
    # says whether its state came from the cache
    results = run_methods_cached(res, query_ids, continuation_ids, [c.cid for c in contexts],
                                 methods_of(res), max_new_tokens, progress)
    progress(1.0, desc="done")
    if not scored:
        results = [replace(r, loss=float("nan"), ppl=float("nan")) for r in results]
    return contexts, results, scored


def methods_of(res: Resources) -> tuple[str, ...]:
    """The rows of a run: every method, and on a hybrid the ablation (attention dropped) last."""
    return names(methods_for(has_attention=res.layout.has_attention))


def model_resources(res: Resources, req: ComposeRequest) -> Resources:
    """The Resources that run `req`: the app's, or with model "bptc" the bundled BPTC fine-tune's
    (its own state store)."""
    if req.model != "bptc":
        return res
    try:
        return tuned_resources(res)
    except TunedModelError as e:
        raise bad_input(str(e), ENDPOINT) from None


def compose(res: Resources, *args, history: list[dict] | None = None, progress=lambda *a, **kw: None, **kwargs):
    """The /compose handler: every output of the tab, ready for its components, in OUTPUTS order:
    order, summary, table, plot, generations, runs, results (plain data), the two code snippets,
    then this session's history (gr.State, not part of the API). `args` / `kwargs`: the request's
    raw values (ComposeRequest's fields, checked there)."""
    req = ComposeRequest.of(res, *args, **kwargs)
    res = model_resources(res, req)
    ctxs, results, scored = run_compose(res, req, progress)
    query = req.query
    history = ((history or []) + [history_row(query, ctxs, results, scored)])[-HISTORY_ROWS:]  # bounded per session
    # the snippets repeat the run's own values: with retrieval, k is the contexts it found
    run = replace(req, k=req.k if req.contexts else len(ctxs))
    skipped = getattr(ctxs, "note", "")  # retrieval passed over contexts the store cannot serve
    # a hybrid's states grow with their tokens: their sizes, read from the stored states
    sizes = state_sizes(res.states([c.cid for c in ctxs])) if res.layout.has_attention else None
    return (
        contexts_html(ctxs),
        summary_md(ctxs, results, scored, len(res.model.tokenizer.encode(query)))
        + (f"\n\n{state_size_md(sizes)}" if sizes else "") + (f"\n\n{skipped}" if skipped else ""),
        results_table(results),
        memo(FIGURES, (scored, *((r.method, r.loss, r.compose_s, r.process_s) for r in results)),
             lambda: results_plot(results, scored)),
        generations_html(results, res.model.tokenizer),
        pd.DataFrame(history),
        {**results_data(res, query, req.continuation, ctxs, results, scored),
         **({"skipped": skipped} if skipped else {}), **({"state_bytes": sizes} if sizes else {})},
        python_snippet(res, run, ctxs),
        api_snippet(run),
        history,
    )


def warm(res: Resources) -> None:
    """Score the example the tab opens on with the default settings, so that the scored-run cache
    serves the first visitor's click (app.py runs this in the background at start-up)."""
    sid = first_example(res)
    k = min(DEFAULTS["k"], len(res.database))  # a corpus smaller than the default k is not an error
    if sid is not None:
        compose(res, *pick_example(res, sid), k=k, example=sid)


def first_example(res: Resources) -> str | None:
    """The example the tab opens on: the demo's DEMO_COMPOSE_EXAMPLE, else the corpus's first."""
    ids = [s.sample_id for s in res.corpus.samples[:EXAMPLES_SHOWN]]
    return DEMO_COMPOSE_EXAMPLE if DEMO_COMPOSE_EXAMPLE in ids else (ids[0] if ids else None)


def _sample(res: Resources, sample_id: str):
    for s in res.corpus.samples:
        if s.sample_id == sample_id:
            return s
    first = res.corpus.samples[0].sample_id if res.corpus.samples else ""
    raise bad_input(f"unknown example {clip(repr(sample_id), 40)}: pick one from 'Example from the corpus' "
                    f"(e.g. {first!r}), or leave it empty", ENDPOINT)



def endpoint_signature() -> inspect.Signature:
    """/compose's signature, which Gradio reads for the API's parameter names and defaults: the
    request's fields with DEFAULTS (query required), then the session's history (a gr.State, not
    in the API) and Gradio's progress tracker."""
    param = lambda name, default=inspect.Parameter.empty: inspect.Parameter(  # noqa: E731
        name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
    return inspect.Signature([param(f.name, *([] if f.name == "query" else [DEFAULTS[f.name]]))
                              for f in fields(ComposeRequest)] + [param("history", None), param("progress", gr.Progress())])


# ---- layout ---------------------------------------------------------------------------------
def render(res: Resources) -> None:
    """Lay the tab out inside the current gr.Tab and wire its events."""
    rows = methods_for(has_attention=res.layout.has_attention)
    legend = "\n".join(f"- **{m.label}**: {m.paper}" for m in rows)
    note(limits(res), "compose-limits")
    choices = example_choices(res)
    first = first_example(res)
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=320):
            example = gr.Dropdown(choices, value=first, label="Example from the corpus",
                                  info="fills in a query and the continuation to score", elem_id="compose-example")
            query = gr.Textbox(label="Query", lines=3, placeholder="Type a question or the start of a passage…",
                               elem_id="compose-query")
            continuation = gr.Textbox("", label="Expected continuation (optional)", lines=2, elem_id="compose-continuation",
                                      info="scored under each composed state; leave empty to compare generations only")
            with gr.Row():
                k = count_slider(1, min(K_MAX, len(res.database)), DEFAULTS["k"], label="Contexts to retrieve (k)")
                most_relevant_last = gr.Checkbox(value=DEFAULTS["most_relevant_last"], label="Most relevant last",
                                                 info="next to the query, the paper's best order for Concat")
            with gr.Accordion("Pick contexts by hand", open=False):
                picked = context_picker(res, label="Contexts, in order", elem_id="compose-contexts",
                                        info="when set, used instead of retrieval, in the order picked")
            max_new_tokens = gr.Slider(0, MAX_NEW_TOKENS, value=DEFAULTS["max_new_tokens"], step=1,
                                       label="Tokens to generate per method")
            model_choice = gr.Radio(list(MODELS), value=DEFAULTS["model"], label="Model", elem_id="compose-model",
                                    info="the bundled BPTC fine-tune learned to use composed states (Fine-tuning tab)",
                                    visible=res.model_name == "demo" and (TUNED_DIR / "config.json").is_file())
            run = gr.Button("Compose & compare", variant="primary", elem_id="compose-run")
        with gr.Column(scale=3, min_width=420):
            gr.Markdown("#### Composition order")
            order = gr.HTML('<div class="px-empty">Retrieved contexts appear here, in the order they are composed.</div>',
                            label="Composition order")
            summary = gr.Markdown(label="Summary")
    # empty until the first run: the column names, not Gradio's placeholder headers "1 2 3"
    table = gr.Dataframe(pd.DataFrame(columns=RESULT_COLUMNS), label="Per method", interactive=False,
                         elem_id="compose-results")
    gr.Markdown(TABLE_NOTE, elem_classes="px-note")
    plot = gr.Plot(label="Loss and time per method", elem_id="compose-plot")
    gr.Markdown("#### Generated continuations")
    gens = gr.HTML(label="Generations")
    with gr.Accordion("What each method does", open=False):
        gr.Markdown(legend)
    with gr.Accordion("Runs in this session", open=False):
        runs = pd.DataFrame(columns=["Query", "k", *map(LABEL.get, methods_of(res))])
        history_table = gr.Dataframe(runs, label="Runs", interactive=False)
    with gr.Accordion("Results as data (what the API returns as `results`)", open=False):
        data = gr.JSON(label="Results")
    py_code, client_code = show_code()
    history = gr.State([])

    signature = endpoint_signature()

    @gpu(duration=30)
    def compose_endpoint(*values, **named):
        """Compose the retrieved (or given) contexts' states with every method and compare them."""
        call = signature.bind(*values, **named)  # as Gradio passes them: by position, progress by either
        call.apply_defaults()
        raw = dict(call.arguments)
        history, progress = raw.pop("history"), raw.pop("progress")
        return compose(res, history=history, progress=progress, **raw)

    compose_endpoint.__signature__ = signature

    # filling two text boxes is instant: no queue slot to wait for. On the page's load and on every
    # change of the example (gr.on with no triggers): the tab opens on an example (its query stays
    # empty at build time, so /compose's query has no default), so the main button gives a result
    # with the defaults, not "Type a query"
    gr.on(None, lambda sid: pick_example(res, sid), example, [query, continuation], api_visibility="private", **LIGHT)
    inputs = dict(query=query, continuation=continuation, k=k, contexts=picked, most_relevant_last=most_relevant_last,
                  max_new_tokens=max_new_tokens, example=example, model=model_choice)
    gr.on(
        [run.click, query.submit], compose_endpoint,
        [inputs[f.name] for f in fields(ComposeRequest)] + [history],
        [order, summary, table, plot, gens, history_table, data, py_code, client_code, history],
        api_name="compose", preprocess=False, **MODEL,
    )
    gr.api(cache_stats, api_name="cache_stats", **LIGHT)

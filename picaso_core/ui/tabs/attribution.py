"""Attribution: which retrieved context, or which sentence of one, does an answer rest on?
Leave-one-in and leave-one-out with every composition method, an ablation surrogate, and precision
on labelled samples (PICASO appendix C, table 4), at the grain of whole contexts, sentences or words
(ContextCite's sources), for the whole answer or a selected span of it.

Handlers are plain functions at the top (tested without a server); `render` lays the tab out. The
API endpoint `/attribute` takes `query` (required) and optional answer, k, contexts, methods,
example, grain ("context" | "sentence" | "word"), span_start / span_end (answer characters), way
("states" | "reencode"), pattern (a splitting regex) and ablations (the surrogate's):
    Client(url).predict(query="Question: ...\\nAnswer:", answer=" ...", grain="sentence", api_name="/attribute")
and returns the scores as plain data (its last output), with one entry per source.
"""

from __future__ import annotations

import math
import time

import gradio as gr
import pandas as pd

from picaso_core.analysis.attribution import LOO_METHODS, PAPER_TABLE4, attribution_precision
from picaso_core.analysis.attribution_sources import SpanError, score_sources, span_tokens
from picaso_core.analysis.sources import split_spans
from picaso_core.compose import compose
from picaso_core.data import DEMO_ATTRIBUTION_EXAMPLE, load_corpus
from picaso_core.plots import attribution as plots
from picaso_core.session import CONTEXT_SUFFIX, Resources
from picaso_core.store.servable import Noted
from picaso_core.ui import budget
from picaso_core.ui.code import show_code
from picaso_core.ui.errors import bad_input, clip, id_list, text, whole_number
from picaso_core.ui.layout import PageLoad
from picaso_core.ui.limits import count_slider, note
from picaso_core.ui.pickers import EXAMPLES_SHOWN, context_picker
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import LIGHT, MODEL
from picaso_core.ui.tabs import attribution_panel as src
from picaso_core.ui.tabs.attribution_views import METHODS, NAMES, code_snippets, contexts_html, figures, summary_md  # noqa: F401

TITLE = "Attribution"
MAX_CONTEXTS = 10  # the app's context limit: at most this many contexts per attribution request
MAX_ANSWER_TOKENS = 64
# Characters a query or a typed answer may hold: the cost of every method grows with the query's
# tokens (a 20,000-character query took 3 minutes), and the demo's questions are ~100 characters.
MAX_QUERY_CHARS, MAX_ANSWER_CHARS = 1000, 500
ENDPOINT = "/attribute"
# PICConcat-R-LOO re-reads every rotation of every leave-one-out subset, n(n-1) concatenations: at the
# caps (a 1,000-character query, 10 contexts) it alone took 133 s of a 198 s request on 2 shared cores
# (the others 65 s in all). Above this many contexts it is skipped, with a line in the summary.
PICCONCAT_MAX_CONTEXTS = 5
PRECISION_MAX_SAMPLES = 200
# the slider's most: every method on this many examples is within /attribution_precision's cost cap
PRECISION_SLIDER_MAX = budget.CAPS["/attribution_precision"].most // len(METHODS)
DESCRIBE = {
    "loi": "leave-one-in: each context's state alone; score = loss drop from the empty state",
    "concat": "leave-one-out, each subset's tokens re-processed in order (the costly reference)",
    "soup": "leave-one-out, mean of the other stored states",
    "caso": "leave-one-out, CASO of the other stored states (order kept)",
    "picaso_s": "leave-one-out, PICASO-S of the other stored states (all orders)",
    "picaso_r": "leave-one-out, PICASO-R of the other stored states (rotations)",
    "picconcat_r": "leave-one-out, rotations of each subset's concatenation re-processed",
    "surrogate": "ContextCite-style: LASSO over 64 random subsets composed with PICASO-R; score = -weight",
}
INTRO = (
    "**Which context, which sentence, does the answer rest on?** Leave a source out and see how much the "
    "answer's loss rises. With a database of states, leaving one out costs a weighted sum of the other "
    "stored states (no context re-read), where Concat re-processes the text for every subset. **Look at:** "
    "the shaded sentence that states the answer, whether the gold bar (★) is the top one for each method, "
    "and the times in the panel titles; select words of the answer to attribute just that span."
)
PAPER_NOTE = ("Paper (table 4): MS MARCO, Mamba2-2.7B, precision of the top-scored passage. LOI 0.699, "
              "Concat 0.690, Soup 0.629, CASO 0.725, PICASO-R 0.732, PICASO-S 0.731.")
TOKEN_METHOD = "picaso_r"
_QA_CACHE: dict[int, list] = {}


# ---- handlers: plain functions --------------------------------------------------------------
def qa_samples(res: Resources) -> list:
    """Labelled examples (a gold context id) whose contexts are all in the app's database: the demo's
    QA split (MS MARCO shape) for the demo corpus, else the corpus's own samples with gold ids."""
    key = id(res)
    if key not in _QA_CACHE:
        samples = list(res.corpus.samples)
        if res.corpus.name == "demo":
            samples = load_corpus("demo", res.corpus.split, kind="qa").samples
        _QA_CACHE[key] = [s for s in samples if s.gold_ids and s.contexts
                          and all(cid in res.database for cid in s.context_ids)]
    return _QA_CACHE[key]


def limits(res: Resources) -> list[str]:
    """What this tab cannot show on the loaded corpus, and why (shown above its controls)."""
    out = []
    if not qa_samples(res):
        out.append("No labelled examples (samples whose `gold_ids` name one of their own `contexts`): the example "
                   "list is empty, no context is marked gold and the precision table (paper table 4) cannot run. "
                   "Type a query (and its answer) to attribute it to retrieved or hand-picked contexts.")
    elif len(qa_samples(res)) == 1:
        out.append("One labelled example: the precision table averages over that one example only.")
    if len(res.database) == 1:
        out.append("One context in the database: leave-one-out can only compare it with no context at all.")
    return out


def example_choices(res: Resources) -> list[tuple[str, str]]:
    return [(f"{s.sample_id} · {clip(s.query.replace(chr(10), ' '), 70)}", s.sample_id)
            for s in qa_samples(res)[:EXAMPLES_SHOWN]]


def pick_example(res: Resources, sample_id: str | None) -> tuple[str, str, list[str]]:
    """Query, answer and the example's own candidate contexts (in the corpus's order)."""
    if not sample_id:
        return "", "", []
    s = _sample(res, sample_id)
    return s.query, s.continuation, list(s.context_ids)


def check_query(query, endpoint: str = ENDPOINT) -> str:
    """The raw query input: text of at most MAX_QUERY_CHARS characters, not blank."""
    query = text("query", query, endpoint, MAX_QUERY_CHARS)
    if not query.strip():
        raise bad_input("Type a query, or pick an example from the corpus.", endpoint)
    return query


def choose_contexts(res: Resources, query: str, k: int, picked: list[str] | None, endpoint: str = ENDPOINT) -> list[str]:
    """Hand-picked ids in their order, else the top-k retrieved, most relevant last. Refuses none,
    unknown ids, more than MAX_CONTEXTS, and more than res.max_tokens context tokens in total."""
    query = check_query(query, endpoint)
    picked = id_list("contexts", picked, endpoint)
    if len(picked) > MAX_CONTEXTS:
        raise bad_input(f"{len(picked)} contexts picked; this app attributes at most {MAX_CONTEXTS}: pick fewer", endpoint)
    if picked:
        unknown = [c for c in picked if c not in res.database]
        if unknown:
            raise bad_input(f"unknown context id {clip(repr(unknown[0]), 40)}: pick ids from 'Contexts, in order'",
                            endpoint)
        if len(set(picked)) != len(picked):
            raise bad_input("a context is picked twice: pick each once", endpoint)
        ids = list(picked)
    else:
        k = whole_number("k", k, 1, min(MAX_CONTEXTS, len(res.database)), endpoint)
        # contexts the store cannot serve (a read-only store's damaged shard) give way to the next-ranked
        hits, skipped = res.servable(lambda skip: res.retriever.retrieve(query, k, exclude=skip, best_last=True))
        ids = Noted(cid for cid, _ in hits)
        ids.note = skipped
    total = sum(res.num_tokens(c) for c in ids)
    if total > res.max_tokens:
        raise bad_input(f"The {len(ids)} contexts hold {total} tokens; this app composes at most {res.max_tokens}. "
                        "Pick fewer or shorter contexts.", endpoint)
    return ids


def generate_answer(res: Resources, query: str, k: int = 5, contexts: list[str] | None = None,
                    max_new_tokens: int = 24, endpoint: str = "/generate_answer") -> str:
    """The model's own greedy answer from the PICASO-R composition of the contexts (to attribute
    it): its first line, cut at EOS, with no special token."""
    query = check_query(query, endpoint)  # normalised (errors.text): the raw text may hold what a tokenizer refuses
    ids = choose_contexts(res, query, k, contexts, endpoint)
    budget.within(endpoint, len(ids), f"{len(ids)} contexts", key="/generate_answer")
    state = compose("picaso_r", res.states(ids), config=res.model)
    tok = res.model.tokenizer
    out = tok.display_text(res.model.generate_batch(tok.encode(query), [state], max_new_tokens=int(max_new_tokens))[0])
    return out.split("\n")[0] or out  # one line: the demo's answers are one sentence


def run_attribution(res: Resources, query: str, answer: str = "", k: int = 5, picked: list[str] | None = None,
                    methods: list[str] | None = None, example: str | None = None,
                    token_method: str = TOKEN_METHOD, progress=lambda *a, **kw: None, grain: str = "context",
                    span_start: int | None = None, span_end: int | None = None, way: str = "states",
                    pattern: str = "", ablations: int = src.DEFAULT_ABLATIONS) -> dict:
    """Score every source (a context, sentence or word) with each method, for the whole answer or
    the characters [span_start, span_end) of it. Returns plain data (the /attribute JSON):
    contexts [{id, gold, tokens, text}], answer, answer_source, answer_tokens, scores {method: [N]}
    (nats per span token, higher = matters more), sources [{context_id, text, start, end, scores}],
    top {method: context id of its top source}, seconds {method: s}, ablations {method: states
    scored}, losses {all: L(S) per LOO method, none: L(empty)}, surrogate {weights, intercept, lds},
    lds {surrogate: LDS}, span {start, end, tokens, text}, token_deltas [N][T] and token_method."""
    # every raw input is checked before any model work (the event runs with preprocess=False)
    query = check_query(query)
    answer = text("answer", answer, ENDPOINT, MAX_ANSWER_CHARS)
    methods = id_list("methods", methods, ENDPOINT) or list(METHODS)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise bad_input(f"unknown method {clip(repr(bad[0]), 30)}: choose from {', '.join(METHODS)}", ENDPOINT)
    if token_method not in LOO_METHODS:
        raise bad_input(f"token_method must be one of {', '.join(LOO_METHODS)}", ENDPOINT)
    if example is not None and not isinstance(example, str):
        raise bad_input(f"example must be an example id, got {clip(repr(example), 30)}", ENDPOINT)
    grain, way, span_start, span_end, pattern, ablations = src.check_source_inputs(
        grain, way, span_start, span_end, pattern, ablations, ENDPOINT)
    sample = None
    if example:
        s = _sample(res, example)
        sample = s if s.query == query else None  # edited query: no longer that example
    progress(0.05, desc="choosing contexts")
    ids = choose_contexts(res, query, k, picked)
    skipped = [ids.note] if getattr(ids, "note", "") else []  # retrieved contexts the store cannot serve
    if "picconcat_r" in methods and len(ids) > PICCONCAT_MAX_CONTEXTS:
        methods = [m for m in methods if m != "picconcat_r"]
        skipped.append(f"{NAMES['picconcat_r']} skipped: it re-reads {len(ids) * (len(ids) - 1)} concatenations for "
                       f"{len(ids)} contexts; this app runs it for at most {PICCONCAT_MAX_CONTEXTS}.")
        if not methods:
            raise bad_input(skipped[-1] + " Pick fewer contexts or other methods.", ENDPOINT)
    budget.check(ENDPOINT, attribute_cost(res, query, answer, ids, methods, token_method, grain, way, ablations))
    source = "given"
    if not answer.strip():
        progress(0.1, desc="generating the model's own answer from the PICASO-R composition")
        answer, source = generate_answer(res, query, k, ids, endpoint=ENDPOINT), "generated (greedy, PICASO-R state)"
        if not answer.strip():
            raise bad_input("The model generated an empty answer: type the answer to attribute.", ENDPOINT)
    tok = res.model.tokenizer
    # a typed "<|endoftext|>" encodes as the special token: a marker, not part of an answer to attribute
    q, typed = tok.encode(query), tok.encode(answer)
    a = [t for t in typed if t not in tok.special_ids]
    if not a:
        raise bad_input("The answer is empty after tokenising: type an answer to attribute.", ENDPOINT)
    if len(a) > MAX_ANSWER_TOKENS:
        raise bad_input(f"The answer has {len(a)} tokens; this app scores at most {MAX_ANSWER_TOKENS}. Shorten it.",
                        ENDPOINT)
    if len(a) < len(typed):
        answer = tok.decode(a)
    try:
        span = span_tokens(tok, a, span_start, span_end)
    except SpanError as e:
        raise bad_input(str(e), ENDPOINT) from None
    gold = set(sample.gold_ids) if sample else set()
    progress(0.15, desc=f"loading the states of {len(ids)} contexts' {src.GRAIN_NAMES[grain]}")
    sources, states = src.sources_for(res, ids, grain, pattern, ENDPOINT)
    if grain != "context" and "picconcat_r" in methods and len(sources) > src.PICCONCAT_MAX_SOURCES:
        methods = [m for m in methods if m != "picconcat_r"]
        skipped.append(f"{NAMES['picconcat_r']} skipped: it re-reads {len(ids)} rotations for each of "
                       f"{len(sources) + 1} subsets; this app runs it for at most {src.PICCONCAT_MAX_SOURCES} sources.")
        if not methods:
            raise bad_input(skipped[-1] + " Pick fewer contexts, a coarser grain or other methods.", ENDPOINT)
    run = list(methods) + ([token_method] if token_method not in methods else [])
    r = score_sources(res.model, q, a, sources, states, run, way=way, span=span, n_ablations=ablations,
                      progress=lambda j, n, m: progress(0.2 + 0.75 * j / n, desc=NAMES[m]))
    progress(1.0, desc="done")
    scores = {m: r.method_scores[m] for m in methods}
    ctx_ids = [res.num_tokens(c) for c in ids]
    offsets = [len(tok.decode(a[:i])) for i in (span[0], span[1])]
    out = {
        "query": query, "answer": answer, "answer_source": source,
        "answer_tokens": [tok.decode([t]) for t in a],
        "contexts": [{"id": c, "gold": c in gold, "tokens": n, "text": res.text(c)} for c, n in zip(ids, ctx_ids)],
        "methods": methods, "scores": scores, "grain": grain, "way": way, "pattern": pattern,
        "sources": src.source_rows(res, sources, scores),
        "top": {m: sources[max(range(len(sources)), key=lambda i: s[i])].context_id for m, s in scores.items()},
        "seconds": {m: r.seconds[m] for m in methods}, "ablations": {m: r.ablations[m] for m in methods},
        "losses": {"none": r.empty_loss, "all": {m: r.full_loss[m] for m in methods if m in r.full_loss}},
        "span": {"start": offsets[0], "end": offsets[1], "tokens": list(span), "text": tok.decode(a[span[0]:span[1]])},
        "token_method": token_method, "token_deltas": r.token_deltas[token_method].tolist(),
        "units": "nats per answer token of the span; higher = the source matters more", "skipped": skipped,
        "lds": {},
    }
    if "surrogate" in methods:
        sur = r.surrogate
        out["surrogate"] = {"weights": sur.weights, "intercept": sur.intercept, "lds": sur.lds,
                            "n_ablations": ablations, "n_heldout": len(sur.heldout_masks), "method": "picaso_r"}
        out["lds"]["surrogate"] = sur.lds
    out["shaded_by"] = src.shade_method(scores)
    return out


def attribute_cost(res: Resources, query: str, answer: str, ids, methods, token_method: str, grain: str, way: str,
                   ablations: int) -> tuple[int, str]:
    """/attribute's estimate (picaso_core.ui.budget), from the checked inputs before any model work: an
    empty answer counts as MAX_ANSWER_TOKENS generated; sentences and words are counted by the
    default split (a pattern's split is still bounded by MAX_SOURCES)."""
    tok = res.model.tokenizer
    n = len(ids) if grain == "context" else sum(len(split_spans(res.text(c), grain)) for c in ids)
    run = list(methods) + ([token_method] if token_method not in methods else [])
    picconcat = len(ids) <= PICCONCAT_MAX_CONTEXTS and (grain == "context" or n <= src.PICCONCAT_MAX_SOURCES)
    answer_tokens = len(tok.encode(answer)) if answer.strip() else MAX_ANSWER_TOKENS
    return budget.attribute(len(ids), n, sum(map(res.num_tokens, ids)), len(tok.encode(query)),
                            min(answer_tokens, MAX_ANSWER_TOKENS), run, ablations, way == "reencode", picconcat)


def attribute(res: Resources, query: str, answer: str = "", k: int = 5, contexts: list[str] | None = None,
              methods: list[str] | None = None, example: str | None = None, progress=lambda *a, **kw: None,
              grain: str = "context", span_start=None, span_end=None, way: str = "states", pattern: str = "",
              ablations: int = src.DEFAULT_ABLATIONS):
    """The /attribute handler: every output of the tab, the plain data last."""
    data = run_attribution(res, query, answer, k, contexts, methods, example, progress=progress, grain=grain,
                           span_start=span_start, span_end=span_end, way=way, pattern=pattern, ablations=ablations)
    bars, heat, tokens = figures(data)
    picked = [c["id"] for c in data["contexts"]] if contexts else []  # the checked ids, one list
    py, cl = code_snippets(query, data["answer"], k, picked, data["methods"], data["grain"], data["way"],
                           (span_start, span_end))
    return contexts_html(data), summary_md(data), bars, heat, tokens, py, cl, data


PRECISION_COLUMNS = ["Method", "Precision", "Paper (table 4)", "Spearman vs Concat-LOO", "Same top-1 as Concat-LOO",
                     "ms / sample"]


def run_precision(res: Resources, n_samples: int = 20, methods: list[str] | None = None,
                  progress=lambda *a, **kw: None):
    """Table 4's protocol over the first n labelled examples. Returns (table, figure, markdown, data)."""
    ep = "/attribution_precision"
    n_samples = whole_number("examples", n_samples, 1, PRECISION_MAX_SAMPLES, ep)
    methods = id_list("methods", methods, ep) or list(METHODS)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise bad_input(f"unknown method {clip(repr(bad[0]), 30)}: choose from {', '.join(METHODS)}", ep)
    samples = qa_samples(res)
    if not samples:
        raise bad_input("This corpus has no examples with gold context labels: precision needs them (use the demo "
                        "corpus or MS MARCO).", ep)
    samples = [s for s in samples if len(s.contexts) <= MAX_CONTEXTS][:n_samples]
    if "concat" not in methods:
        methods.insert(1 if "loi" in methods else 0, "concat")  # the reference of the correlations
    budget.check(ep, budget.attribution_precision(len(samples), len(methods)))
    progress(0, desc="attribution precision")
    t0 = time.perf_counter()
    r = attribution_precision(res.model, samples, methods, context_suffix=CONTEXT_SUFFIX,
                              get_states=res.states, progress=lambda i, n: progress(i / n, desc=f"sample {i} of {n}"),
                              surrogate_kw=dict(n_ablations=64, seed=0))
    chance = sum(len(s.gold_ids) / len(s.contexts) for s in samples) / len(samples)
    rows = [{"Method": NAMES[m], "Precision": round(r.precision[m], 3),
             "Paper (table 4)": PAPER_TABLE4.get(m),
             "Spearman vs Concat-LOO": _num(r.spearman_vs_concat.get(m)),
             "Same top-1 as Concat-LOO": _num(r.top1_agrees_with_concat.get(m)),
             "ms / sample": round(1e3 * r.seconds[m], 1)} for m in methods]
    fig = plots.precision_bars(methods, r.precision, PAPER_TABLE4, NAMES, chance, len(samples))
    md = (f"{len(samples)} labelled examples ({res.corpus.name}/{res.corpus.split}), {time.perf_counter() - t0:.0f} s. "
          f"Chance (1 / contexts): {chance:.3f}. {PAPER_NOTE}")
    data = {"n_samples": len(samples), "precision": r.precision, "spearman_vs_concat": r.spearman_vs_concat,
            "top1_agrees_with_concat": r.top1_agrees_with_concat, "seconds": r.seconds, "chance": chance,
            "paper": PAPER_TABLE4}
    return pd.DataFrame(rows), fig, md, data


def _sample(res: Resources, sample_id: str):
    for s in qa_samples(res):
        if s.sample_id == sample_id:
            return s
    raise bad_input(f"no labelled example {clip(repr(sample_id), 40)} in corpus {res.corpus.name}: pick one "
                    "from the list", ENDPOINT)



def _num(x, digits: int = 2):
    return round(x, digits) if x is not None and math.isfinite(x) else None


# ---- layout ---------------------------------------------------------------------------------
def render(res: Resources) -> list[PageLoad]:
    """Lay the tab out inside the current gr.Tab and wire its events."""
    choices = example_choices(res)
    ids = [sid for _, sid in choices]
    first = DEMO_ATTRIBUTION_EXAMPLE if DEMO_ATTRIBUTION_EXAMPLE in ids else (ids[0] if ids else None)
    q0, a0, c0 = pick_example(res, first)
    gr.Markdown(INTRO)
    note(limits(res), "attribution-limits")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=320):
            example = gr.Dropdown(choices, value=first, label="Labelled example (gold context known)",
                                  info="fills in the question, its answer and its candidate contexts",
                                  elem_id="attribution-example")
            # empty at build time, so that /attribute's query has no default (required); the page's
            # load event fills in the example
            query = gr.Textbox(label="Query", lines=2, elem_id="attribution-query")
            with gr.Row():
                answer = gr.Textbox("", label="Answer to attribute", lines=2, scale=4, elem_id="attribution-answer",
                                    info="empty: the model's own answer from the PICASO-R composition")
                gen = gr.Button("Model's answer", scale=1, elem_id="attribution-generate")
            picked = context_picker(res, label="Contexts, in order", elem_id="attribution-contexts",
                                    info=f"empty: retrieve the top k (at most {MAX_CONTEXTS})")
            k = count_slider(1, min(MAX_CONTEXTS, len(res.database)), 5, label="k: contexts to retrieve when none are picked")
            methods = gr.CheckboxGroup([(NAMES[m], m) for m in METHODS], value=list(METHODS), label="Methods")
            with gr.Row():
                # "context" at build time keeps /attribute's default; the page's load event opens on sentences
                grain = gr.Radio(list(src.GRAINS), value="context", label="Sources", elem_id="attribution-grain",
                                 info="what the contexts are cut into")
                way = gr.Radio([("composed states", "states"), ("re-encoded text", "reencode")], value="states",
                               label="Ablated context", elem_id="attribution-way",
                               info="how a context with sources removed becomes a state")
            with gr.Row():
                pattern = gr.Textbox("", label="Splitting regex (optional)", elem_id="attribution-pattern",
                                     info="each match starts a source, e.g. [,;.] for clauses; needs sentence or word")
                ablations = gr.Slider(2, src.MAX_ABLATIONS, value=src.DEFAULT_ABLATIONS, step=1,
                                      label="Surrogate ablations", elem_id="attribution-ablations")
            # the answer characters selected (hidden; set by selecting words of the answer); None: all of it
            span_start = gr.Number(None, visible=False, label="span_start", precision=0)
            span_end = gr.Number(None, visible=False, label="span_end", precision=0)
            with gr.Row():
                run = gr.Button("Attribute", variant="primary", elem_id="attribution-run", scale=3)
                whole = gr.Button("Whole answer", elem_id="attribution-whole", scale=1)
        with gr.Column(scale=3, min_width=420):
            order = gr.HTML('<div class="px-empty">Click Attribute: the contexts appear here, gold ones marked.</div>',
                            label="Contexts")
            summary = gr.Markdown(label="Summary")
            with gr.Accordion("What each method does", open=False):
                gr.Markdown("\n".join(f"- **{NAMES[m]}**: {DESCRIBE[m]}" for m in METHODS))
    bars = gr.Plot(label="Score per context, per method", elem_id="attribution-bars")
    with gr.Row():
        # min_width: below ~1100 px the two stack instead of squeezing their titles
        heat = gr.Plot(label="Contexts x methods", elem_id="attribution-heatmap", min_width=520)
        tokens = gr.Plot(label="Contexts x answer tokens", elem_id="attribution-tokens", min_width=520)
    with gr.Accordion("Scores as plain data (what /attribute returns)", open=False):
        data = gr.JSON(label="Scores (plain data)")
    with gr.Accordion("Precision over the labelled split (paper table 4)", open=False):
        with gr.Row():
            n_samples = count_slider(1, min(PRECISION_SLIDER_MAX, len(qa_samples(res))), 20, label="examples",
                                     info="the measured 200-example table: scripts/measure_attribution.py")
            prec_run = gr.Button("Run precision table", elem_id="attribution-precision-run",
                                 interactive=bool(qa_samples(res)))
        prec_md = gr.Markdown(PAPER_NOTE, label="About the table")
        prec_table = gr.Dataframe(pd.DataFrame(columns=PRECISION_COLUMNS), label="Precision per method",
                                  interactive=False, elem_id="attribution-precision")
        prec_fig = gr.Plot(label="Precision beside the paper")
        with gr.Accordion("Precision as plain data", open=False):
            prec_data = gr.JSON(label="Precision (plain data)")
    py, cl = show_code(*code_snippets(q0, a0, 5, c0, list(METHODS), "sentence"))

    @gpu(duration=60)
    def attribute_endpoint(query, answer="", k=5, contexts=None, methods=None, example=None, grain="context",
                           span_start=None, span_end=None, way="states", pattern="", ablations=src.DEFAULT_ABLATIONS,
                           progress=gr.Progress()):
        """Attribute an answer (or the characters [span_start, span_end) of it) to the sources of its contexts
        (grain: context, sentence or word; way: states or reencode) with leave-one-in, leave-one-out per
        method and a surrogate."""
        return attribute(res, query, answer, k, contexts, methods, example, progress, grain=grain,
                         span_start=span_start, span_end=span_end, way=way, pattern=pattern, ablations=ablations)

    def select_span(evt: gr.SelectData):
        """Characters selected in the answer box; a click without a selection means the whole answer."""
        lo, hi = (list(evt.index) + [None, None])[:2] if isinstance(evt.index, (list, tuple)) else (None, None)
        return (lo, hi) if lo is not None and hi is not None and hi > lo else (None, None)

    @gpu(duration=120)
    def precision_endpoint(n_samples=20, methods=None, progress=gr.Progress()):
        """Precision of each attribution method over the labelled examples (paper table 4)."""
        return run_precision(res, n_samples, methods, progress)

    example.change(lambda sid: pick_example(res, sid), example, [query, answer, picked], api_visibility="private",
                   **LIGHT)
    # the tab opens on its example at sentence grain: run by the page's load (app.py, Blocks.load)
    opening = PageLoad(lambda sid: (*pick_example(res, sid), "sentence"), [example], [query, answer, picked, grain])
    @gpu(duration=20)
    def generate_endpoint(query, k=5, contexts=None):
        """The model's own greedy answer from the PICASO-R composition of the contexts."""
        return generate_answer(res, query, k, contexts)

    # preprocess=False: the handlers check the raw inputs (picaso_core.ui.errors), one short message
    # and one log line per rejected input
    gen.click(generate_endpoint, [query, k, picked], answer, api_name="generate_answer", preprocess=False,
              **MODEL)
    inputs = [query, answer, k, picked, methods, example, grain, span_start, span_end, way, pattern, ablations]
    outputs = [order, summary, bars, heat, tokens, py, cl, data]
    gr.on([run.click, query.submit], attribute_endpoint, inputs, outputs, api_name="attribute", preprocess=False,
          **MODEL)
    # selecting words of the answer re-attributes that span; "Whole answer" goes back to all of it
    answer.select(select_span, None, [span_start, span_end], api_visibility="private", **LIGHT).then(
        attribute_endpoint, inputs, outputs, api_name="attribute_span", api_visibility="private", preprocess=False,
        **MODEL)
    whole.click(lambda: (None, None), None, [span_start, span_end], api_visibility="private", **LIGHT).then(
        attribute_endpoint, inputs, outputs, api_name="attribute_whole_answer", api_visibility="private",
        preprocess=False, **MODEL)
    # a new answer or example: its old span no longer applies
    gr.on([answer.input, example.change], lambda: (None, None), None, [span_start, span_end],
          api_visibility="private", **LIGHT)
    prec_run.click(precision_endpoint, [n_samples, methods], [prec_table, prec_fig, prec_md, prec_data],
                   api_name="attribution_precision", preprocess=False, **MODEL)
    return [opening]

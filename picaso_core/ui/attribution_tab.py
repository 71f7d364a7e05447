"""Attribution: which retrieved context does an answer rest on? Leave-one-in and leave-one-out with
every composition method, an ablation surrogate, and precision on labelled samples (PICASO
appendix C, table 4).

Handlers are plain functions at the top (tested without a server); `render` lays the tab out. The
API endpoint `/attribute` takes `query` (required) and optional answer, k, contexts, methods:
    Client(url).predict(query="Question: ...\\nAnswer:", answer=" ...", api_name="/attribute")
and returns the scores as plain data (its last output).
"""

from __future__ import annotations

import html
import math
import time

import gradio as gr
import pandas as pd

from picaso_core.plots import attribution as plots
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, id_list, text, whole_number
from picaso_core.ui.gpu import gpu
from picaso_core.ui.limits import count_slider, note
from picaso_core.ui.pickers import EXAMPLES_SHOWN, context_picker
from picaso_core.ui.resources import Resources
from picaso_core.ui.serving import LIGHT, MODEL

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
METHODS = ("loi", "concat", "soup", "caso", "picaso_s", "picaso_r", "picconcat_r", "surrogate")
NAMES = {"loi": "LOI", "concat": "Concat-LOO", "soup": "Soup-LOO", "caso": "CASO-LOO", "picaso_s": "PICASO-S-LOO",
         "picaso_r": "PICASO-R-LOO", "picconcat_r": "PICConcat-R-LOO", "surrogate": "Surrogate (PICASO-R)"}
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
    "**Which context does the answer rest on?** Leave a context out and see how much the answer's loss "
    "rises. With a database of states, leaving one out costs a weighted sum of the other stored states "
    "(no context re-read), where Concat re-processes the text for every subset. **Look at:** whether the "
    "gold bar (★) is the top one for each method, and the times in the panel titles."
)
PAPER_NOTE = ("Paper (table 4): MS MARCO, Mamba2-2.7B, precision of the top-scored passage. LOI 0.699, "
              "Concat 0.690, Soup 0.629, CASO 0.725, PICASO-R 0.732, PICASO-S 0.731.")
TOKEN_METHOD = "picaso_r"
# The demo example the tab opens on: 5 candidates, every method's top one is the gold one, and leaving
# it out costs ~3 nats per answer token (picked from scripts/measure_attribution.py's records).
DEFAULT_EXAMPLE = "demo-test-q0035"
_QA_CACHE: dict[int, list] = {}


# ---- handlers: plain functions --------------------------------------------------------------
def qa_samples(res: Resources) -> list:
    """Labelled examples (a gold context id) whose contexts are all in the app's database: the demo's
    QA split (MS MARCO shape) for the demo corpus, else the corpus's own samples with gold ids."""
    key = id(res)
    if key not in _QA_CACHE:
        samples = list(res.corpus.samples)
        if res.corpus.name == "demo":
            from picaso_core.data import load_corpus

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
    return [(f"{s.sample_id} · {_clip(s.query.replace(chr(10), ' '), 70)}", s.sample_id)
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
            raise bad_input(f"unknown context id {_clip(repr(unknown[0]), 40)}: pick ids from 'Contexts, in order'",
                            endpoint)
        if len(set(picked)) != len(picked):
            raise bad_input("a context is picked twice: pick each once", endpoint)
        ids = list(picked)
    else:
        k = whole_number("k", k, 1, min(MAX_CONTEXTS, len(res.database)), endpoint)
        ids = [cid for cid, _ in res.retriever.retrieve(query, k, best_last=True)]
    total = sum(res.num_tokens(c) for c in ids)
    if total > res.max_tokens:
        raise bad_input(f"The {len(ids)} contexts hold {total} tokens; this app composes at most {res.max_tokens}. "
                        "Pick fewer or shorter contexts.", endpoint)
    return ids


def generate_answer(res: Resources, query: str, k: int = 5, contexts: list[str] | None = None,
                    max_new_tokens: int = 24, endpoint: str = "/generate_answer") -> str:
    """The model's own greedy answer from the PICASO-R composition of the contexts (to attribute
    it): its first line, cut at EOS, with no special token."""
    from picaso_core.compose import compose

    ids = choose_contexts(res, query, k, contexts, endpoint)
    state = compose("picaso_r", res.states(ids))
    tok = res.model.tokenizer
    out = tok.display_text(res.model.generate_batch(tok.encode(query), [state], max_new_tokens=int(max_new_tokens))[0])
    return out.split("\n")[0] or out  # one line: the demo's answers are one sentence


def run_attribution(res: Resources, query: str, answer: str = "", k: int = 5, picked: list[str] | None = None,
                    methods: list[str] | None = None, example: str | None = None,
                    token_method: str = TOKEN_METHOD, progress=lambda *a, **kw: None) -> dict:
    """Score every context with each method. Returns plain data (the /attribute JSON):
    contexts [{id, gold, tokens, text}], answer, answer_source, answer_tokens, scores {method: [n]}
    (nats per answer token, higher = matters more), top {method: id}, seconds {method: s},
    losses {all: L(S) per method, none: L(empty)}, surrogate {weights, intercept, lds},
    token_deltas [n][T] and token_method."""
    from picaso_core.analysis.attribution import (LOO_METHODS, leave_one_in, leave_one_out_tokens, surrogate,
                                         token_nll)

    # every raw input is checked before any model work (the event runs with preprocess=False)
    query = check_query(query)
    answer = text("answer", answer, ENDPOINT, MAX_ANSWER_CHARS)
    methods = id_list("methods", methods, ENDPOINT) or list(METHODS)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise bad_input(f"unknown method {_clip(repr(bad[0]), 30)}: choose from {', '.join(METHODS)}", ENDPOINT)
    if token_method not in LOO_METHODS:
        raise bad_input(f"token_method must be one of {', '.join(LOO_METHODS)}", ENDPOINT)
    if example is not None and not isinstance(example, str):
        raise bad_input(f"example must be an example id, got {_clip(repr(example), 30)}", ENDPOINT)
    sample = None
    if example:
        s = _sample(res, example)
        sample = s if s.query == query else None  # edited query: no longer that example
    progress(0.05, desc="choosing contexts")
    ids = choose_contexts(res, query, k, picked)
    skipped = []
    if "picconcat_r" in methods and len(ids) > PICCONCAT_MAX_CONTEXTS:
        methods = [m for m in methods if m != "picconcat_r"]
        skipped.append(f"{NAMES['picconcat_r']} skipped: it re-reads {len(ids) * (len(ids) - 1)} concatenations for "
                       f"{len(ids)} contexts; this app runs it for at most {PICCONCAT_MAX_CONTEXTS}.")
        if not methods:
            raise bad_input(skipped[0] + " Pick fewer contexts or other methods.", ENDPOINT)
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
    gold = set(sample.gold_ids) if sample else set()
    progress(0.15, desc=f"loading {len(ids)} stored states")
    states = res.states(ids)
    ctx_ids = [res.token_ids(c) for c in ids]
    scores, seconds, full = {}, {}, {}
    tokens_out = None
    empty = float(token_nll(res.model, q, a, res.model.empty_state()).mean())
    for j, m in enumerate(methods):
        progress(0.2 + 0.75 * j / len(methods), desc=f"{NAMES[m]}")
        t0 = time.perf_counter()
        if m == "loi":
            scores[m] = [empty - x for x in leave_one_in(res.model, q, a, states)]
        elif m == "surrogate":
            sur = surrogate(res.model, q, a, states, "picaso_r", n_ablations=64, seed=0)
            scores[m] = sur.scores
        else:
            loo = leave_one_out_tokens(res.model, q, a, states, m, context_ids=ctx_ids)
            scores[m], full[m] = loo.scores, loo.full_loss
            if m == token_method:
                tokens_out = loo.token_deltas.tolist()
        seconds[m] = time.perf_counter() - t0
    if tokens_out is None:  # the per-token view was not among the methods: run it
        tokens_out = leave_one_out_tokens(res.model, q, a, states, token_method, context_ids=ctx_ids).token_deltas.tolist()
    progress(1.0, desc="done")
    out = {
        "query": query, "answer": answer, "answer_source": source,
        "answer_tokens": [tok.decode([t]) for t in a],
        "contexts": [{"id": c, "gold": c in gold, "tokens": len(t), "text": res.text(c)} for c, t in zip(ids, ctx_ids)],
        "methods": methods, "scores": scores,
        "top": {m: ids[max(range(len(ids)), key=lambda i: s[i])] for m, s in scores.items()},
        "seconds": seconds, "losses": {"none": empty, "all": full},
        "token_method": token_method, "token_deltas": tokens_out,
        "units": "nats per answer token; higher = the context matters more", "skipped": skipped,
    }
    if "surrogate" in methods:
        out["surrogate"] = {"weights": sur.weights, "intercept": sur.intercept, "lds": sur.lds,
                            "n_ablations": 64, "method": "picaso_r"}
    return out


def contexts_html(data: dict) -> str:
    cards = []
    for i, c in enumerate(data["contexts"], 1):
        gold = '<span class="px-gold" title="labelled as holding the answer">gold</span>' if c["gold"] else ""
        tops = [NAMES[m] for m, cid in data["top"].items() if cid == c["id"]]
        top = f'<span class="px-meta">top for {len(tops)} of {len(data["top"])}</span>' if tops else ""
        cards.append(
            f'<div class="px-ctx"><div class="px-ctx-head"><span class="px-num">{i}</span>'
            f'<code>{html.escape(c["id"])}</code>{gold}{top}</div>'
            f'<div class="px-ctx-text">{html.escape(_clip(c["text"], 200))}</div></div>')
    return '<div class="px-order">' + "".join(cards) + "</div>"


def summary_md(data: dict) -> str:
    ctx = data["contexts"]
    gold = {c["id"] for c in ctx if c["gold"]}
    lines = [f"**Answer** ({data['answer_source']}): `{_clip(data['answer'], 120)}` · {len(ctx)} contexts · "
             f"loss with no context {data['losses']['none']:.3f} nats/token"]
    if gold:
        hits = [NAMES[m] for m, cid in data["top"].items() if cid in gold]
        lines.append(f"The gold context is the top one for **{len(hits)} of {len(data['top'])}** methods"
                     + (f" ({', '.join(hits)})." if hits else "."))
    sec = data["seconds"]
    if "picaso_r" in sec and "concat" in sec:
        lines.append(f"Leave-one-out of {len(ctx)} contexts: PICASO-R **{1e3 * sec['picaso_r']:.0f} ms** vs Concat "
                     f"**{1e3 * sec['concat']:.0f} ms** ({sec['concat'] / max(sec['picaso_r'], 1e-9):.1f}x).")
    if "surrogate" in data:
        s = data["surrogate"]
        lds = f"{s['lds']:.2f}" if s["lds"] is not None and math.isfinite(s["lds"]) else "n/a"
        lines.append(f"Surrogate: 64 random subsets composed from states in {1e3 * sec['surrogate']:.0f} ms; "
                     f"LDS on 16 held-out subsets {lds} (1 = the linear model ranks subsets perfectly).")
    lines += data.get("skipped", [])
    return "  \n".join(lines)


def figures(data: dict):
    ids = [c["id"] for c in data["contexts"]]
    gold = [c["gold"] for c in data["contexts"]]
    bars = plots.score_bars(ids, gold, data["scores"], NAMES, data["seconds"])
    heat = plots.method_heatmap(ids, gold, data["scores"], NAMES)
    tokens = plots.token_heatmap(ids, gold, data["answer_tokens"], data["token_deltas"], NAMES[data["token_method"]])
    return bars, heat, tokens


def code_snippets(query, answer, k, picked, methods) -> tuple[str, str]:
    py = (
        "from picaso_core import load_model\n"
        "from picaso_core.analysis.attribution import leave_one_in, leave_one_out, surrogate\n\n"
        "model = load_model('demo'); tok = model.tokenizer\n"
        f"contexts = {list(picked or [])!r}  # ids; texts from the corpus (empty: retrieved top-{int(float(k))})\n"
        "ids = [tok.encode(text + '\\n\\n') for text in texts]  # texts of those contexts\n"
        "states = model.encode_contexts(ids)  # or StateStore.get_many(contexts)\n"
        f"q, a = tok.encode({query!r}), tok.encode({answer!r})\n"
        "loi = leave_one_in(model, q, a, states)  # lowest = most relevant\n"
        "loo = leave_one_out(model, q, a, states, 'picaso_r')  # highest = most relevant\n"
        "concat = leave_one_out(model, q, a, states, 'concat', context_ids=ids)\n"
        "sur = surrogate(model, q, a, states, 'picaso_r', n_ablations=64)  # sur.weights, sur.lds\n"
    )
    cl = client_snippet("/attribute", query=query, answer=answer, k=int(float(k)), contexts=list(picked or []),
                        methods=list(methods or METHODS))
    return py, cl


def attribute(res: Resources, query: str, answer: str = "", k: int = 5, contexts: list[str] | None = None,
              methods: list[str] | None = None, example: str | None = None, progress=lambda *a, **kw: None):
    """The /attribute handler: every output of the tab, the plain data last."""
    data = run_attribution(res, query, answer, k, contexts, methods, example, progress=progress)
    bars, heat, tokens = figures(data)
    picked = [c["id"] for c in data["contexts"]] if contexts else []  # the checked ids, one list
    py, cl = code_snippets(query, data["answer"], k, picked, data["methods"])
    return contexts_html(data), summary_md(data), bars, heat, tokens, py, cl, data


PRECISION_COLUMNS = ["Method", "Precision", "Paper (table 4)", "Spearman vs Concat-LOO", "Same top-1 as Concat-LOO",
                     "ms / sample"]


def run_precision(res: Resources, n_samples: int = 20, methods: list[str] | None = None,
                  progress=lambda *a, **kw: None):
    """Table 4's protocol over the first n labelled examples. Returns (table, figure, markdown, data)."""
    from picaso_core.analysis.attribution import PAPER_TABLE4, attribution_precision
    from picaso_core.ui.resources import CONTEXT_SUFFIX

    ep = "/attribution_precision"
    n_samples = whole_number("examples", n_samples, 1, PRECISION_MAX_SAMPLES, ep)
    methods = id_list("methods", methods, ep) or list(METHODS)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise bad_input(f"unknown method {_clip(repr(bad[0]), 30)}: choose from {', '.join(METHODS)}", ep)
    samples = qa_samples(res)
    if not samples:
        raise bad_input("This corpus has no examples with gold context labels: precision needs them (use the demo "
                        "corpus or MS MARCO).", ep)
    samples = [s for s in samples if len(s.contexts) <= MAX_CONTEXTS][:n_samples]
    if "concat" not in methods:
        methods.insert(1 if "loi" in methods else 0, "concat")  # the reference of the correlations
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
    raise bad_input(f"no labelled example {_clip(repr(sample_id), 40)} in corpus {res.corpus.name}: pick one "
                    "from the list", ENDPOINT)


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _num(x, digits: int = 2):
    return round(x, digits) if x is not None and math.isfinite(x) else None


# ---- layout ---------------------------------------------------------------------------------
def render(res: Resources) -> None:
    """Lay the tab out inside the current gr.Tab and wire its events."""
    choices = example_choices(res)
    ids = [sid for _, sid in choices]
    first = DEFAULT_EXAMPLE if DEFAULT_EXAMPLE in ids else (ids[0] if ids else None)
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
            run = gr.Button("Attribute", variant="primary", elem_id="attribution-run")
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
            n_samples = count_slider(1, min(PRECISION_MAX_SAMPLES, len(qa_samples(res))), 20, label="examples",
                                     info="the measured 200-example table: scripts/measure_attribution.py")
            prec_run = gr.Button("Run precision table", elem_id="attribution-precision-run",
                                 interactive=bool(qa_samples(res)))
        prec_md = gr.Markdown(PAPER_NOTE, label="About the table")
        prec_table = gr.Dataframe(pd.DataFrame(columns=PRECISION_COLUMNS), label="Precision per method",
                                  interactive=False, elem_id="attribution-precision")
        prec_fig = gr.Plot(label="Precision beside the paper")
        with gr.Accordion("Precision as plain data", open=False):
            prec_data = gr.JSON(label="Precision (plain data)")
    py, cl = show_code(*code_snippets(q0, a0, 5, c0, list(METHODS)))

    @gpu(duration=60)
    def attribute_endpoint(query, answer="", k=5, contexts=None, methods=None, example=None,
                           progress=gr.Progress()):
        """Attribute an answer to its contexts with leave-one-in, leave-one-out per method and a surrogate."""
        return attribute(res, query, answer, k, contexts, methods, example, progress)

    @gpu(duration=120)
    def precision_endpoint(n_samples=20, methods=None, progress=gr.Progress()):
        """Precision of each attribution method over the labelled examples (paper table 4)."""
        return run_precision(res, n_samples, methods, progress)

    example.change(lambda sid: pick_example(res, sid), example, [query, answer, picked], api_visibility="private",
                   **LIGHT)
    gr.context.Context.root_block.load(lambda sid: pick_example(res, sid), example, [query, answer, picked],
                                       api_visibility="private", **LIGHT)
    @gpu(duration=20)
    def generate_endpoint(query, k=5, contexts=None):
        """The model's own greedy answer from the PICASO-R composition of the contexts."""
        return generate_answer(res, query, k, contexts)

    # preprocess=False: the handlers check the raw inputs (picaso_core.ui.errors), one short message
    # and one log line per rejected input
    gen.click(generate_endpoint, [query, k, picked], answer, api_name="generate_answer", preprocess=False,
              **MODEL)
    gr.on([run.click, query.submit], attribute_endpoint, [query, answer, k, picked, methods, example],
          [order, summary, bars, heat, tokens, py, cl, data], api_name="attribute", preprocess=False,
          **MODEL)
    prec_run.click(precision_endpoint, [n_samples, methods], [prec_table, prec_fig, prec_md, prec_data],
                   api_name="attribution_precision", preprocess=False, **MODEL)

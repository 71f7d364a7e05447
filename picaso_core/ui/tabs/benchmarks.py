"""Benchmarks: the paper's experiments (PICASO sec. 6, appendix B) on the loaded model and corpus.

The tab opens on the bundled demo run (assets/benchmarks_summary.json, written by
`python -m picaso_core.experiments`; regenerate it with the command in SHIPPED_COMMAND) with all its
figures and the paper-vs-ours table, and a panel runs a small k-sweep live on the app's model,
corpus and state store. API endpoint `/benchmarks`:
    Client(url).predict(samples=5, ks="0,1,2,5", methods=[...], retriever="minilm", api_name="/benchmarks")
"""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pandas as pd

from picaso_core.analysis import summaries as S
from picaso_core.analysis import sweep
from picaso_core.analysis.evaluate import METHOD_NAMES, METHODS
from picaso_core.compose.registry import label
from picaso_core.light.assets import ASSETS
from picaso_core.plots import experiments as P
from picaso_core.retrieval import rankers as R
from picaso_core.session import Resources
from picaso_core.ui import budget
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, choice, id_list, text, whole_number
from picaso_core.ui.limits import corpus_counts, count_slider, note
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import MODEL

TITLE = "Benchmarks"
SHIPPED = ASSETS / "benchmarks_summary.json"
SHIPPED_COMMAND = ("python -m picaso_core.experiments --model demo --corpus demo --samples 200 --ks 0-10 --out runs/demo "
                   "--ship assets/benchmarks_summary.json")
LIVE_RETRIEVERS = ("minilm", "bm25", "random")  # offline; the CLI adds mpnet / GloVe when online
MAX_SAMPLES, MAX_K = 50, 10  # the live panel stays small (the CLI runs the full protocol)
MAX_KS_CHARS = 100  # a k list such as "0,1,2,5" or "0-10"
ENDPOINT = "/benchmarks"
_rankers: dict[tuple[int, str], object] = {}  # (id(res), name) -> ranker, built once per app


# ---- handlers: plain functions ----------------------------------------------------------------
def load_shipped(path: Path = SHIPPED) -> dict | None:
    """The bundled demo run's summary, or None if it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def paper_table(summary: dict | None) -> pd.DataFrame:
    """The paper-vs-ours table as a DataFrame (rows: methods)."""
    cols = ["Method", "Gain, paper (WikiText)", "Gain, ours", "QA loss, paper (MS MARCO)", "QA loss, ours"]
    if not summary:
        return pd.DataFrame(columns=cols)
    gain = (summary.get("main") or {}).get("gains", {}).get("avg", {})
    qa = {m: r["loss"] for m, r in ((summary.get("qa") or {}).get("methods") or {}).items()}
    paper = summary.get("paper") or S.PAPER
    rows = []
    for m in S.TABLE_METHODS:
        pg = paper["wikitext_gain_pct"].get(m)
        rows.append([label(m, "table"),
                     None if pg is None else f"{pg:.1f}%",
                     "0%" if m == "none" else (None if gain.get(m) is None else f"{gain[m]:.1f}%"),
                     paper["msmarco_loss"].get(m), None if qa.get(m) is None else round(qa[m], 3)])
    return pd.DataFrame(rows, columns=cols)


def intro(summary: dict | None) -> str:
    if not summary:
        return ("No bundled run found (`assets/benchmarks_summary.json`): make one with "
                f"`{SHIPPED_COMMAND}`, or run a small sweep below.")
    m, main = summary.get("meta", {}), summary.get("main") or {}
    g = main.get("gains", {}).get("avg", {})
    r = main.get("concat_over_picaso_r", {})
    line = (f"The bundled demo run: model **{m.get('model')}**, corpus **{m.get('corpus')}/{m.get('split')}**, "
            f"{m.get('samples')} samples, k = {m.get('ks')}, {len(m.get('methods', []))} methods, "
            f"{m.get('seconds', 0) / 60:.1f} min on {m.get('threads')} CPU thread(s). ")
    if g.get("picaso_r") is not None and g.get("concat") is not None:
        over = S.ks_text(main.get("gains", {}).get("ks_averaged") or range(1, 11))
        line += (f"**Look at** how close PICASO-R (−{g['picaso_r']:.1f}% loss vs no context, mean over {over}) "
                 f"comes to Concat (−{g['concat']:.1f}%) while composing {r.get('compose') or 0:.0f}× faster, "
                 "and at Concat past the model's training length (up to 50 chunks).")
    return line


def parse_live_ks(value) -> list[int]:
    value = text("k list", value, ENDPOINT, MAX_KS_CHARS)
    try:
        ks = sweep.parse_ks(value)
    except ValueError:
        raise bad_input(f"k list {value[:40]!r} is not valid: write numbers like 0,1,2,5 or a range 0-5", ENDPOINT) from None
    if not ks:
        raise bad_input("give at least one k, e.g. 0,1,2,5", ENDPOINT)
    if max(ks) > MAX_K:
        raise bad_input(f"k up to {MAX_K} here (got {max(ks)}); the CLI runs more: python -m picaso_core.experiments "
                        "--ks 0-50", ENDPOINT)
    return ks


def ranker(res: Resources, name: str):
    if name not in LIVE_RETRIEVERS:
        raise bad_input(f"unknown retriever {str(name)[:30]!r}: choose one of {', '.join(LIVE_RETRIEVERS)}", ENDPOINT)
    key = (id(res), name)
    if key not in _rankers:
        _rankers[key] = (R.EmbeddingRanker(res.retriever, "minilm") if name == "minilm"
                         else R.make_ranker(name, res.database))
    return _rankers[key]


def limits(res: Resources) -> list[str]:
    """What the live sweep cannot show on the loaded corpus, and why."""
    n = corpus_counts(res)
    if not n["samples"]:
        return ["No samples in the corpus: the live sweep scores samples' continuations, so it cannot run "
                "(the bundled run above still shows)."]
    out = []
    if n["contexts"] < 10:
        out.append(f"The database holds {n['contexts']} context{'s' * (n['contexts'] != 1)}: a k above "
                   f"{n['contexts']} retrieves all of them.")
    if n["samples"] < 5:
        out.append(f"{n['samples']} sample{'s' * (n['samples'] != 1)}: the sweep's means rest on "
                   f"{'that one' if n['samples'] == 1 else 'those'} only.")
    return out


def check_inputs(res: Resources, samples, ks, methods, retriever):
    """The raw inputs (the event runs with preprocess=False), checked before any work."""
    if not len(res.corpus):
        raise bad_input(" ".join(limits(res)), ENDPOINT)
    n = whole_number("samples", samples, 1, max(1, min(MAX_SAMPLES, len(res.corpus))), ENDPOINT)
    methods = id_list("methods", methods, ENDPOINT)
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise bad_input(f"pick methods among {', '.join(METHODS)}"
                        + (f" (unknown: {bad[0][:30]!r})" if bad else ""), ENDPOINT)
    if "none" not in methods:
        methods = ["none"] + methods  # the gains are measured against the baseline
    ks = parse_live_ks(ks)
    retriever = choice("retriever", retriever, LIVE_RETRIEVERS, ENDPOINT)
    return n, ks, [m for m in METHODS if m in methods], ranker(res, retriever)


def live_summary(log, sample_ids: list[str], ks: list[int], retriever: str) -> dict:
    curve = S.curves(log.records.values(), sample_ids, retriever, ks)
    return {**curve, "gains": S.gains(curve), "concat_over_picaso_r": S.time_ratio(curve),
            "n_samples": len(sample_ids), "retriever": retriever}


def snippets(samples: int, ks: str, methods: list[str], retriever: str) -> tuple[str, str]:
    py = (
        "# the full protocol (all figures, report.html, paper_vs_ours.md):\n"
        f"#   {SHIPPED_COMMAND.split(' --ship')[0]}\n"
        "# this live sweep:\n"
        "from picaso_core.analysis import summaries as S, sweep\n"
        "from picaso_core.retrieval import rankers as R\n"
        "from picaso_core.session import load_resources\n\n"
        "res = load_resources('demo', 'demo')\n"
        f"ranker = R.EmbeddingRanker(res.retriever) if {retriever!r} == 'minilm' else R.make_ranker({retriever!r}, res.database)\n"
        "log = sweep.MemoryLog()\n"
        f"sweep.run_sweep(res.model, res.corpus.samples[:{samples}], ranker,\n"
        "            sweep.ContextSource(res.states, res.token_ids), sweep.parse_ks(" + repr(ks) + "), log,\n"
        f"            methods={tuple(methods)!r})\n"
        "curve = S.curves(log.records.values(), retriever=ranker.name)\n"
        "print(S.gains(curve)['avg'])\n"
    )
    return py, client_snippet(ENDPOINT, samples=samples, ks=ks, methods=list(methods), retriever=retriever)


def run_live(res: Resources, samples=5, ks="0,1,2,5", methods=None, retriever="minilm", progress=None):
    """The /benchmarks handler, a generator: after each sample, the figures of the sweep so far.

    Yields (loss figure, time figure, status markdown, summary dict, python snippet, client snippet).
    """
    methods = list(METHODS) if methods is None else methods
    n, k_list, meths, rk = check_inputs(res, samples, ks, methods, retriever)
    budget.check(ENDPOINT, budget.benchmarks(n, len(k_list), len(meths)))
    chosen = res.corpus.samples[:n]
    source = sweep.ContextSource(res.states, res.token_ids)
    log = sweep.MemoryLog()
    ids: list[str] = []
    py, cl = snippets(n, str(ks), meths, rk.name)
    for i, s in enumerate(chosen):
        if progress is not None:
            progress((i, n), desc=f"sample {i + 1} of {n}: {len(k_list)} k x {len(meths)} methods")
        sweep.run_sweep(res.model, [s], rk, source, k_list, log, meths, part="live")
        ids.append(s.sample_id)
        summ = live_summary(log, ids, k_list, rk.name)
        g = summ["gains"]["avg"]
        best = ", ".join(f"{METHOD_NAMES[m]} {g[m]:+.1f}%" for m in meths if m != "none" and g.get(m) is not None)
        status = (f"**{i + 1} of {n} samples** done ({R.RETRIEVERS[rk.name][0]}, k = {', '.join(map(str, k_list))}). "
                  f"Loss reduction vs no context, mean over {S.ks_text(summ['gains']['ks_averaged'])}: "
                  f"{best or '– (add a k ≥ 1)'}.")
        yield (P.loss_vs_k(summ, "Live sweep: loss vs k"), P.time_vs_k(summ, include_picconcat=True,
               title="Live sweep: time vs k"), status, summ, py, cl)


# ---- layout -------------------------------------------------------------------------------------
def render(res: Resources) -> None:
    summary = load_shipped()
    gr.Markdown(intro(summary), elem_id="bench-intro")
    over = S.ks_text(((summary or {}).get("main") or {}).get("gains", {}).get("ks_averaged") or range(1, 11))
    gr.Dataframe(paper_table(summary), label=f"Paper vs ours (gain: % lower loss than no context, mean over {over})",
                 interactive=False, wrap=True, elem_id="bench-paper-vs-ours")  # wrap: fits 800 px
    figs = P.all_figures(summary or {})
    for a, b in zip(figs[0::2], figs[1::2] + [None]):
        with gr.Row(equal_height=False):
            for item in (a, b):
                if item is not None:
                    fig_id, title, caption, fig = item
                    with gr.Column(min_width=420):
                        gr.Plot(fig, label=title, elem_id=fig_id)
                        gr.Markdown(caption, elem_classes="px-note")
    gr.Markdown(f"Regenerate the bundled run (and report.html, paper_vs_ours.md): `{SHIPPED_COMMAND}`",
                elem_classes="px-note")

    gr.Markdown("### Run a small sweep live\nOn the loaded model and corpus; the figures update after each sample.")
    note(limits(res), "bench-limits")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            samples = count_slider(1, min(MAX_SAMPLES, len(res.corpus)), 5, label="Samples", elem_id="bench-samples")
            ks = gr.Textbox("0,1,2,5", label="k values", info=f"e.g. 0,1,2,5 or 0-5 (at most {MAX_K})",
                            elem_id="bench-ks")
            methods = gr.CheckboxGroup([(METHOD_NAMES[m], m) for m in METHODS], value=list(METHODS),
                                       label="Methods", elem_id="bench-methods")
            retriever = gr.Dropdown([(R.RETRIEVERS[r][0], r) for r in LIVE_RETRIEVERS], value="minilm",
                                    label="Retriever", elem_id="bench-retriever")
            run = gr.Button("Run sweep", variant="primary", elem_id="bench-run", interactive=bool(len(res.corpus)))
        with gr.Column(scale=2, min_width=420):
            status = gr.Markdown("Press **Run sweep**: a few samples take seconds on the demo model.",
                                 label="Live sweep status", elem_id="bench-status")
            live_loss = gr.Plot(label="Live sweep: loss vs k", elem_id="bench-live-loss")
            live_time = gr.Plot(label="Live sweep: time vs k", elem_id="bench-live-time")
    data = gr.JSON(label="Live sweep summary (per method and k)", elem_id="bench-json")
    py0, cl0 = snippets(5, "0,1,2,5", list(METHODS), "minilm")
    py, cl = show_code(py0, cl0)

    @gpu(duration=120)
    def benchmarks(samples, ks, methods, retriever, progress=gr.Progress()):
        """Run a small k-sweep (the paper's protocol) and return its figures and summary."""
        yield from run_live(res, samples, ks, methods, retriever, progress)

    run.click(benchmarks, [samples, ks, methods, retriever], [live_loss, live_time, status, data, py, cl],
              api_name="benchmarks", preprocess=False, show_progress="minimal", **MODEL)  # figures stay visible as they update

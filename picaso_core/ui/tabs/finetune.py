"""Fine-tuning: BPTC / BP2C (PICASO sec. 5, fig. 4, table 1), before and after.

The tab opens on the shipped fine-tune of the demo model (assets/demo_model_bptc: its evaluation
report and training log, written by scripts/finetune_demo.py) and runs a short live fine-tune on
a COPY of the app's model: progress and the loss curve update as it trains, one run at a time for
the whole app, cancellable; at the end the copy and the original are compared on held-out samples.
API endpoints:
    Client(url).predict(objective="bptc", steps=40, k_max=5, lr=3e-4, api_name="/finetune")
    Client(url).predict(api_name="/finetune_cancel")
Live training data: a corpus split disjoint from the app's (the demo: its train split; any other
corpus: the first half of its samples, the second half for the comparison), each sample with its
own candidate contexts (no retriever pass, so the run starts in seconds).
"""

from __future__ import annotations

import copy
import json
import queue
import threading
from pathlib import Path

import gradio as gr
import pandas as pd

from picaso_core.analysis import summaries as S
from picaso_core.analysis import sweep
from picaso_core.compose.registry import labels
from picaso_core.data import load_corpus
from picaso_core.light.deadline import JobTimeout, check
from picaso_core.finetune import train as FT
from picaso_core.finetune.card import (PAPER_ROW, PAPER_TABLE1, PAPER_TABLE2, ROW_NAMES, SKILL_KS, TABLE1_METHODS,
                                       skill_cell)
from picaso_core.finetune.evaluate import model_source
from picaso_core.plots import finetune as PF
from picaso_core.retrieval import rankers as R
from picaso_core.session import TUNED_COMMAND, TUNED_DIR, Resources
from picaso_core.ui import budget
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, whole_number
from picaso_core.ui.limits import corpus_counts, note
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import LIGHT, MODEL

TITLE = "Fine-tuning"
ENDPOINT, CANCEL_ENDPOINT = "/finetune", "/finetune_cancel"
MAX_STEPS, MAX_K = 300, 10
COMPARE_SAMPLES, COMPARE_K = 10, 5
COMPARE_METHODS = ("none", "concat", "picaso_r")
MIN_LIVE_SAMPLES = 2  # one to train on, one held out to compare
_RUN_LOCK = threading.Lock()  # one live fine-tune at a time, app-wide (CPU and memory)
_CANCEL = threading.Event()


# ---- the shipped fine-tune --------------------------------------------------------------------
def load_shipped(folder: Path = TUNED_DIR) -> tuple[dict | None, list[dict]]:
    """(evaluation report, training history) of the shipped fine-tuned model; (None, []) if absent."""
    try:
        report = json.loads((folder / "finetune_eval.json").read_text())
    except (OSError, ValueError):
        report = None
    try:
        history = json.loads((folder / "train_log.json").read_text()).get("history", [])
    except (OSError, ValueError):
        history = []
    return report, history


def intro(report: dict | None) -> str:
    head = ("**BPTC** fine-tunes the model on the loss of each continuation given the PICASO-R composition of its "
            "retrieved contexts, back-propagating through the composition and the encoding of every context; "
            "**BP2C** detaches the composed state (cheaper: no gradient through the contexts). ")
    if not report:
        return head + f"No shipped fine-tune found in `{TUNED_DIR.name}`: make it with `{TUNED_COMMAND}`."
    ms = report["models"]
    g = {n: (r.get("gap_own") or r.get("gap") or {}).get("gap_pct") for n, r in ms.items()}
    parts = [f"{PF.MODEL_NAMES.get(n, n)} {v:+.1f}%" for n, v in g.items() if v is not None and "qa" not in n]
    return head + ("**Look at** how far PICASO-R's loss sits above Concat's on held-out retrieval samples (their own "
                   f"3-5 contexts) before and after: {', '.join(parts)} (the paper: BPTC brings PICASO to Concat, fig. 4).")


def table1_frame(report: dict | None) -> pd.DataFrame:
    cols = ["Model", *labels(TABLE1_METHODS, style="paper"), "Paper row (Mamba2-2.7B, MS MARCO; Naive ... PICASO-S)"]
    if not report:
        return pd.DataFrame(columns=cols)
    rows = []
    for name, r in report["models"].items():
        paper = PAPER_TABLE1.get(PAPER_ROW.get(name, ""))  # a control run has no paper row
        rows.append([ROW_NAMES.get(name, name), *[None if r["table1"].get(m) is None else round(r["table1"][m], 3)
                                                  for m in TABLE1_METHODS],
                     f"{PAPER_ROW[name]}: " + ", ".join(f"{paper[m]:.2f}" for m in TABLE1_METHODS) if paper else "–"])
    return pd.DataFrame(rows, columns=cols)


def paper_table2_frame() -> pd.DataFrame:
    """The paper's table 2 (general LLM benchmarks before / after fine-tuning), beside our analog."""
    tasks = list(next(iter(PAPER_TABLE2.values())))
    return pd.DataFrame([[f"Mamba2-2.7B {row}", *[f"{v[t][0]:.1f} ± {v[t][1]:.1f}" for t in tasks]]
                         for row, v in PAPER_TABLE2.items()], columns=["Paper model", *tasks])


def table2_frame(report: dict | None) -> pd.DataFrame:
    cols = ["Model", "LM loss (held-out passages)", *[f"Skills, k={k}" for k in SKILL_KS]]
    if not report:
        return pd.DataFrame(columns=cols)
    rows = []
    for name, r in report["models"].items():
        rows.append([ROW_NAMES.get(name, name), None if r.get("lm_loss") is None else round(r["lm_loss"], 3),
                     *[skill_cell(r.get("skills") or {}, k, with_p=False) for k in SKILL_KS]])
    return pd.DataFrame(rows, columns=cols)


# ---- the live fine-tune -----------------------------------------------------------------------
def limits(res: Resources) -> list[str]:
    """What this tab cannot show on the loaded corpus, and why (shown above the live fine-tune; Start is
    disabled when a line is here). The demo trains on its own train split, so it has no limit."""
    if res.corpus.name == "demo":
        return []
    n = corpus_counts(res)["with_contexts"]
    if n >= MIN_LIVE_SAMPLES:
        return []
    return [f"The live fine-tune needs at least {MIN_LIVE_SAMPLES} samples with their own contexts (one half to "
            f"train on, the other to compare before / after); this corpus has {n}, so Start is disabled. Samples "
            "get contexts from a `contexts` field in the corpus file (a database file alone gives none). The "
            "shipped fine-tune of the demo model above does not depend on the corpus."]


def live_data(res: Resources):
    """(training samples, their database, held-out comparison samples) for a live run."""
    if res.corpus.name == "demo":
        train = load_corpus("demo", "train")
        return train.samples, train.database, res.corpus.samples[:COMPARE_SAMPLES]
    samples = [s for s in res.corpus.samples if s.contexts]
    if len(samples) < MIN_LIVE_SAMPLES:
        raise bad_input(f"this corpus has fewer than {MIN_LIVE_SAMPLES} samples with contexts: nothing to fine-tune "
                        "on and compare with")
    half = len(samples) // 2
    return samples[:half], res.database, samples[half:][:COMPARE_SAMPLES]


def live_examples(tok, samples) -> list[FT.Example]:
    """Each sample with its own candidate contexts (in the corpus's order), tokenised as the store does."""
    return [FT.Example(tok.encode(s.query), tok.encode(s.continuation),
                       [tok.encode(t + FT.CONTEXT_SUFFIX) for t in s.context_texts]) for s in samples]


def compare(res: Resources, tuned_model, samples) -> dict:
    """Held-out losses of the original and the fine-tuned copy at k = COMPARE_K, experiments protocol."""
    ranker = R.EmbeddingRanker(res.retriever, "minilm")
    out = {}
    for name, model, source in (("base", res.model, sweep.ContextSource(res.states, res.token_ids)),
                                ("tuned", tuned_model, model_source(tuned_model, res.database))):
        log = sweep.MemoryLog()
        sweep.run_sweep(model, samples, ranker, source, [COMPARE_K], log, COMPARE_METHODS, "live")
        curve = S.curves(log.records.values(), ks=None)
        out[name] = {m: curve["loss"][m][-1] for m in curve["methods"]}
    return out


def check_inputs(objective, steps, k_max, lr) -> tuple[str, int, int, float]:
    if objective not in FT.OBJECTIVES:
        raise bad_input(f"objective must be 'bptc' or 'bp2c', got {str(objective)[:30]!r}", ENDPOINT)
    steps = whole_number("steps", steps, 1, MAX_STEPS, ENDPOINT)
    k_max = whole_number("k_max", k_max, 0, MAX_K, ENDPOINT)
    try:
        lr = float(lr)
    except (TypeError, ValueError):
        lr = -1.0
    if not 1e-6 <= lr <= 1e-1:
        raise bad_input("learning rate must be a number from 1e-6 to 0.1", ENDPOINT)
    return objective, steps, k_max, lr


def snippets(objective: str, steps: int, k_max: int, lr: float) -> tuple[str, str]:
    py = ("# the shipped fine-tune (4 runs, evaluation, model card): " + TUNED_COMMAND + "\n"
          "import copy\nfrom picaso_core import load_model\nfrom picaso_core.finetune import train as FT\nfrom picaso_core.data import load_corpus\n"
          "from picaso_core.ui.tabs.finetune import live_examples\n\n"
          "model = copy.deepcopy(load_model('demo'))\n"
          "examples = live_examples(model.tokenizer, load_corpus('demo', 'train').samples)\n"
          f"cfg = FT.FinetuneConfig(objective={objective!r}, k_max={k_max}, max_steps={steps}, lr={lr}, warmup=5)\n"
          "result = FT.train(model, examples, cfg)\nprint(result.history[-1])\n")
    return py, client_snippet(ENDPOINT, objective=objective, steps=steps, k_max=k_max, lr=lr)


def run_live(res: Resources, objective="bptc", steps=40, k_max=5, lr=3e-4, progress=None, poll_s: float = 1.0):
    """The /finetune handler, a generator. Yields (status, loss curve, comparison figure, result dict,
    python snippet, client snippet) about once a second while training, then once after comparing."""
    objective, steps, k_max, lr = check_inputs(objective, steps, k_max, lr)
    budget.check(ENDPOINT, budget.finetune(steps, k_max))
    if not _RUN_LOCK.acquire(blocking=False):
        raise bad_input("a live fine-tune is already running (one at a time for the whole app): wait for it, "
                        "or press Cancel", ENDPOINT)
    try:
        _CANCEL.clear()
        py, cl = snippets(objective, steps, k_max, lr)
        train_samples, _, held_out = live_data(res)
        model = copy.deepcopy(res.model)  # the app's model stays untouched
        examples = live_examples(model.tokenizer, train_samples)
        cfg = FT.FinetuneConfig(objective=objective, k_max=k_max, max_steps=steps, lr=lr, warmup=min(5, steps),
                                batch_size=4, lm_share=0.25 if getattr(model.tokenizer, "eos_id", None) is not None
                                and res.corpus.name == "demo" else 0.0)
        records: queue.Queue = queue.Queue()
        box: dict = {}

        def work():
            try:
                box["result"] = FT.train(model, examples, cfg, progress=False, callback=lambda r, n: records.put(r),
                                         should_stop=_CANCEL.is_set)
            except Exception as e:  # reported to the user below
                box["error"] = e

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        history: list[dict] = []
        title = f"Live {objective.upper()}: training loss"
        while thread.is_alive() or not records.empty():
            thread.join(timeout=poll_s)
            try:
                check()  # past this job's time limit (picaso_core.light.deadline): the training stops after its step
            except JobTimeout:
                _CANCEL.set()
                thread.join()
                raise
            while not records.empty():
                history.append(records.get())
            if history:
                h = history[-1]
                if progress is not None:
                    progress((h["step"], steps), desc=f"step {h['step']} of {steps}")
                yield (f"**step {h['step']} of {steps}** · loss {h['loss']:.3f} · k = {h['k'][0]} · "
                       f"{h['seconds']:.2f} s / step", PF.training_curve(history, steps, title), gr.skip(),
                       {"history": history}, py, cl)
        if "error" in box:
            raise bad_input(f"fine-tuning failed: {box['error']}", ENDPOINT)
        result = box["result"]
        if progress is not None:
            progress(0.99, desc="comparing on held-out samples")
        losses = compare(res, model, held_out)
        names = {"base": "before", "tuned": f"after {result.steps} {objective.upper()} steps"}
        fig = PF.before_after_bars({names[k]: v for k, v in losses.items()}, COMPARE_METHODS,
                                   f"Held-out loss at k = {COMPARE_K} ({len(held_out)} samples)")
        gap = {k: 100 * (v["picaso_r"] - v["concat"]) / v["concat"] for k, v in losses.items()}
        status = (("**Cancelled** after" if result.cancelled else "**Done**:") + f" {result.steps} steps in "
                  f"{result.seconds:.0f} s. PICASO-R above Concat on held-out samples: before {gap['base']:+.1f}%, "
                  f"after {gap['tuned']:+.1f}%.")
        yield (status, PF.training_curve(history, steps, title), fig,
               {"history": history, "compare": losses, "gap_pct": gap, "cancelled": result.cancelled,
                "steps": result.steps}, py, cl)
    finally:
        _RUN_LOCK.release()


def cancel() -> str:
    """Ask the running live fine-tune to stop after its current step."""
    if not _RUN_LOCK.locked():
        return "No live fine-tune is running."
    _CANCEL.set()
    return "Cancelling: the run stops after its current step, then compares what it has."


# ---- layout -------------------------------------------------------------------------------------
def render(res: Resources) -> None:
    report, history = load_shipped()
    gr.Markdown(intro(report), elem_id="ft-intro")
    with gr.Row(equal_height=False):
        with gr.Column(min_width=420):
            gr.Plot(PF.loss_vs_k_before_after({n: r for n, r in (report or {}).get("models", {}).items()
                                               if "qa" not in n}), label="Loss vs k, before and after (fig. 4)",
                    elem_id="ft-fig4")
        with gr.Column(min_width=420):
            gr.Plot(PF.training_curve(history, title="Training loss of the shipped BPTC fine-tune"),
                    label="Training loss of the shipped model", elem_id="ft-shipped-curve")
    gr.Dataframe(table1_frame(report), label="Table 1 layout: held-out QA, all passages (loss, nats / token)",
                 interactive=False, elem_id="ft-table1")
    gr.Dataframe(table2_frame(report), label="Table 2 analog: general ability (skills on every held-out item; a "
                 "run's: accuracy (vs base, points ± paired standard error); ⚠: worse than the base by more than "
                 "3% of its accuracy)", interactive=False, elem_id="ft-table2")
    gr.Dataframe(paper_table2_frame(), label="Paper, table 2: general LLM benchmarks, length-normalized accuracy % "
                 "(Mamba2-2.7B fine-tuned on WikiText)", interactive=False, elem_id="ft-paper-table2")
    gr.Markdown(f"Regenerate the shipped fine-tune, its evaluation and model card: `{TUNED_COMMAND}`",
                elem_classes="px-note")

    gr.Markdown("### Fine-tune live\nTrains a copy of the loaded model (the app's model is not changed), then "
                "compares the two on held-out samples. One run at a time for the whole app.")
    cannot = limits(res)
    note(cannot, "ft-limits")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            objective = gr.Radio([("BPTC (through composition)", "bptc"), ("BP2C (state detached)", "bp2c")],
                                 value="bptc", label="Objective", elem_id="ft-objective")
            steps = gr.Slider(1, MAX_STEPS, value=40, step=1, label="Steps", elem_id="ft-steps",
                              info="4 examples each (3 composed + 1 plain LM document on the demo)")
            k_max = gr.Slider(0, MAX_K, value=5, step=1, label="k_max (k ~ U{0..k_max} per batch)", elem_id="ft-kmax")
            lr = gr.Number(3e-4, label="Learning rate", elem_id="ft-lr",
                   info="3e-4: PICASO-R gains, Concat barely moves; 1e-3 closes the gap faster but hurts Concat")
            with gr.Row():
                start = gr.Button("Start", variant="primary", elem_id="ft-start", interactive=not cannot)
                stop = gr.Button("Cancel", variant="stop", elem_id="ft-cancel")
        with gr.Column(scale=2, min_width=420):
            status = gr.Markdown("Start is disabled on this corpus (see above)." if cannot else
                                 "Press **Start**: 40 steps take about a minute on the demo model.",
                                 label="Live fine-tune status", elem_id="ft-status")
            curve = gr.Plot(label="Live training loss", elem_id="ft-live-curve")
            bars = gr.Plot(label="Before / after on held-out samples", elem_id="ft-compare")
    data = gr.JSON(label="Live run (history, comparison)", elem_id="ft-json")
    py, cl = show_code(*snippets("bptc", 40, 5, 3e-4))

    @gpu(duration=180)
    def finetune(objective, steps, k_max, lr, progress=gr.Progress()):
        """Fine-tune a copy of the model with BPTC or BP2C for a few steps, then compare it with the original."""
        yield from run_live(res, objective, steps, k_max, lr, progress)

    # preprocess=False: run_live checks the raw inputs (errors.py), so a bad one gets a message naming the fix;
    # concurrency 2: a second caller gets the 'already running' message instead of waiting in the queue
    start.click(finetune, [objective, steps, k_max, lr], [status, curve, bars, data, py, cl], api_name="finetune",
                preprocess=False, show_progress="minimal", **MODEL)
    stop.click(cancel, None, status, api_name="finetune_cancel", **LIGHT)

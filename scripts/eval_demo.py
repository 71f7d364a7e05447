"""Evaluate the demo model on the held-out demo world and write its model card.

    python scripts/eval_demo.py                 # assets/demo_model -> eval.json + README.md (card)
    python scripts/eval_demo.py --model DIR --samples 50 --no-card

1. Retrieval (paper sec. 6.1 protocol on the demo world's held-out split): each sample's 3-5
   candidate contexts, ordered by all-MiniLM-L6-v2 similarity to the query with the most relevant
   LAST (the paper's best-case Concat order); every method's mean continuation loss.
2. QA in the MS MARCO shape: the same on answers given their candidate passages.
3. In-context skills (picaso_core/analysis/skill_eval.py): greedy exact match on EVERY test item of each
   task after k = 0, 1, 4, 16 demonstrations drawn from its train items; the label-shuffled
   variants at k = 16 (a model that follows the relation scores low there).
4. `--curve DIR`: the skill accuracy of each checkpoint in DIR (train_demo.py --keep-checkpoints),
   for the accuracy-over-training curve in the card.
Sections written by the analysis scripts (assets/demo_model/card_*.md: state soup, landscapes,
attribution) are appended to the card.
The evaluation is fixed before looking at results; numbers are reported as they come.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picaso_core.light.assets import ASSETS  # noqa: E402
from picaso_core.data import load_corpus  # noqa: E402
from picaso_core.data.demo_world import CONTEXT_SEP  # noqa: E402
from picaso_core.data.demo_world import MIXES  # noqa: E402
from picaso_core.analysis.evaluate import METHOD_NAMES, METHODS, evaluate_samples  # noqa: E402
from picaso_core.data.skills import load_skill_tasks  # noqa: E402
from picaso_core.light.defaults import count  # noqa: E402

# The model, the skill evaluation and the retriever import torch: the functions below import them
# when they run, after the arguments are read (--help and a bad value answer at once, issue 48).
if TYPE_CHECKING:
    from picaso_core.retrieval.retriever import Retriever

SKILL_KS = (0, 1, 4, 16)
SHUFFLED_K = 16


def order_by_retriever(corpus, retriever: Retriever):
    """Each sample's candidates sorted by cosine similarity to the query, most relevant last."""
    out = []
    for s in corpus.samples:
        sims = retriever.similarity(s.query, [cid for cid, _ in s.contexts])
        ranked = [c for _, c in sorted(zip(sims, s.contexts), key=lambda p: p[0])]
        out.append(dataclasses.replace(s, contexts=ranked))
    return out


def gold_last_rate(samples) -> float:
    """How often the retriever put a gold context in the last (most relevant) slot."""
    hits = [s.contexts[-1][0] in set(s.gold_ids) for s in samples if s.gold_ids]
    return sum(hits) / max(1, len(hits))


def summarise(summary) -> dict:
    return {
        "n_samples": summary.n_samples,
        "mean_loss": summary.mean_loss,
        "gain_vs_none": summary.gain_vs_none,
        "concat_gain_recovered": summary.concat_gain_recovered,
        "relative_gain_vs_none": {m: summary.gain_vs_none[m] / summary.mean_loss["none"] for m in summary.methods},
        "compose_ms": {m: 1e3 * v for m, v in summary.compose_s.items()},
        "process_ms": {m: 1e3 * v for m, v in summary.process_s.items()},
        "table": summary.table(),
    }


def skill_table(acc: dict[str, dict[int, float]], shuffled: dict[str, dict[int, float]] | None = None,
                n_items: dict[str, int] | None = None) -> str:
    from picaso_core.analysis.skill_eval import mean_accuracy

    ks = sorted({k for by_k in acc.values() for k in by_k})
    sh = f" | shuffled labels, k={SHUFFLED_K}" if shuffled else ""
    items = " items |" if n_items else ""
    rows = [f"| task |{items} " + " | ".join(f"k={k}" for k in ks) + sh + " |",
            "|---" * (len(ks) + 1 + bool(n_items) + bool(shuffled)) + "|"]
    for task, by_k in acc.items():
        s = f" | {100 * shuffled[task + '_shuffled'][SHUFFLED_K]:.0f}%" if shuffled else ""
        n = f" {n_items[task]} |" if n_items else ""
        rows.append(f"| {task} |{n} " + " | ".join(f"{100 * by_k[k]:.0f}%" for k in ks) + s + " |")
    mean = mean_accuracy(acc)
    s = f" | **{100 * mean_accuracy(shuffled)[SHUFFLED_K]:.0f}%**" if shuffled else ""
    rows.append("| **mean** |" + (" |" if n_items else "") + " " + " | ".join(f"**{100 * mean[k]:.0f}%**" for k in ks) + s + " |")
    return "\n".join(rows)


def skill_eval(model, seed: int, max_items: int | None = None) -> dict:
    from picaso_core.analysis.skill_eval import mean_accuracy, skill_accuracy

    base = skill_accuracy(model, ks=SKILL_KS, seed=seed, max_items=max_items)
    shuffled = skill_accuracy(model, tasks=[t + "_shuffled" for t in base], ks=(SHUFFLED_K,), seed=seed,
                              max_items=max_items)
    test = load_skill_tasks("test", include_shuffled=False)
    return {"base": base, "shuffled": shuffled, "n_items": {t: len(test[t][:max_items]) for t in base},
            "mean": mean_accuracy(base), "mean_shuffled": mean_accuracy(shuffled)[SHUFFLED_K]}


SKILLS_HEAD = """### In-context skills (greedy exact match on every held-out item; `picaso_core/analysis/skill_eval.py`)
Demonstrations from each task's train items, the query from its test items (known to the model as
facts from the knowledge passages, never demonstrated); k = 0 is the bare `question →` line; the
shuffled column asks the same questions after 16 demonstrations with permuted labels and expects the
permuted label."""


def accuracy_curve(folder: Path, seed: int, max_items: int | None) -> list[dict]:
    """Mean skill accuracy (k = 1, 4, 16) of every checkpoint saved during training."""
    from picaso_core import load_model
    from picaso_core.analysis.skill_eval import mean_accuracy, skill_accuracy

    out = []
    for ck in sorted(p for p in folder.iterdir() if (p / "model.safetensors").exists()):
        model = load_model(ck)
        acc = skill_accuracy(model, ks=(1, 4, 16), seed=seed, max_items=max_items)
        row = {"checkpoint": ck.name, **{f"k{k}": v for k, v in mean_accuracy(acc).items()}}
        print(row, flush=True)
        out.append(row)
    return out


def curve_table(curve: list[dict]) -> str:
    rows = ["| checkpoint | k=1 | k=4 | k=16 |", "|---|---|---|---|"]
    rows += [f"| {c['checkpoint']} | {100 * c['k1']:.0f}% | {100 * c['k4']:.0f}% | {100 * c['k16']:.0f}% |" for c in curve]
    return "\n".join(rows)


def extra_sections(folder: Path) -> str:
    """The analysis scripts' card sections (card_*.md beside the model), in a fixed order."""
    order = ["soup", "landscape", "attribution"]
    files = sorted(folder.glob("card_*.md"), key=lambda p: (order.index(p.stem[5:]) if p.stem[5:] in order else 99, p.name))
    return "".join("\n" + f.read_text().strip() + "\n" for f in files)


def _phase_line(p: dict) -> str:
    a = p.get("args", {})
    src = "continued from the previous phase" if a.get("init") else "from random weights"
    drills = f", copy drills {a['copy_drills']:.0%}" if a.get("copy_drills") else ""
    defaults = {"lr": 3e-3, "minutes": 55.0, "warmup": 100, "seed": 0, "copy_drills": 0.15, "mix": "v1"}
    defaults.update(arch="mamba2", save_dtype="float32", threads=0, save_every=250)
    flags = "".join(f" --{k.replace('_', '-')} {a[k]}" for k in ("arch", "save_dtype", "init", "mix", "minutes", "lr",
                                                               "warmup", "seed", "threads", "save_every")
                    if a.get(k) is not None and a.get(k) != defaults.get(k))
    return (f"  - `python scripts/train_demo.py{flags}` ({src}): {p.get('minutes', '?')} min on 2 CPU cores, {p.get('steps', '?')} steps of "
            f"{a.get('batch', '?')} x {a.get('seq_len', '?')} tokens = {p.get('tokens', 0) / 1e6:.1f}M tokens, "
            f"lr {a.get('lr', '?')}{drills}, final loss {p.get('final_loss', '?')}")


def _init_line(a: dict) -> str:
    if a.get("init"):
        return f"continued from {a['init']}"
    if a.get("init_scheme", "default") == "mimetic":
        return (f"mimetic (`picaso_core/engine/init.py`, Trockman et al. 2024; key length {a.get('key_len', 1)}): every layer "
                "starts as linear attention with a previous-token key, so copying from context is learnt in "
                "minutes instead of having to emerge")
    return "mamba_ssm's default"


def hybrid_about(folder: Path, cfg: dict, log: dict) -> tuple[str, str]:
    """demo-hybrid's title, introduction and Model section (train_demo.py --arch hybrid): its blocks, and its
    training loss beside the pure demo model's at the same step (same recipe, so the steps are comparable)."""
    kinds = {"M": "Mamba-2", "*": "attention", "-": "MLP"}
    pattern = cfg["hybrid_override_pattern"]
    counts = ", ".join(f"{pattern.count(c)} {name}" for c, name in kinds.items())
    pure = folder.parent / "demo_model" / "train_log.json"
    same_step = ""
    if pure.exists() and log.get("log"):
        ours, base = log["log"][-1], json.loads(pure.read_text())
        theirs = {e["step"]: e["loss"] for e in base.get("log", [])}
        near = min(theirs, key=lambda s: abs(s - ours["step"]))
        same_step = (f"\n- Training loss vs the pure `demo` model (same recipe, same data stream): {ours['loss']} at step "
                     f"{ours['step']} (the last logged step here); `demo` logged {theirs[near]} at step {near} and "
                     f"{base['final_loss']} at the end of its {base['steps']} steps.")
    intro = """# PICASO Explorer demo model, hybrid (`demo-hybrid`)

A **small Nemotron-H-layout hybrid** (Mamba-2 layers with one position-free attention layer and MLPs)
trained on the same generated demo world, with the same tokenizer, data stream, optimiser and schedule as
the bundled Mamba-2 `demo` model (`scripts/train_demo.py --arch hybrid`), so that PICASO can be compared on
a pure SSM and on a hybrid (docs/hybrid.md). It is not a general language model. Load it with
`picaso_core.load_model("demo-hybrid")`, `python app.py --model demo-hybrid`, or transformers'
`NemotronHForCausalLM.from_pretrained("assets/demo_hybrid_model")` (same logits, tests/scripts/test_demo_hybrid.py).
"""
    model_md = f"""- Architecture: Nemotron-H (transformers `model_type` "nemotron_h"), {log.get('params', 0) / 1e6:.2f}M parameters:
  `hybrid_override_pattern` "{pattern}" ({counts}: 1 attention layer in {pattern.count('M') + pattern.count('*')}
  mixing layers, placed as Nemotron-H's "M*-"), d_model {cfg['hidden_size']}. Mamba-2 layers as `demo`'s:
  {cfg['mamba_num_heads']} heads x {cfg['mamba_head_dim']}, d_state {cfg['ssm_state_size']}, {cfg['n_groups']} group, chunk {cfg['chunk_size']}.
  Attention: {cfg['num_attention_heads']} query / {cfg['num_key_value_heads']} key-value heads of {cfg['head_dim']}, no position encoding.
  MLP: {cfg['mlp_hidden_act']}, width {cfg['intermediate_size']}. Untied head (transformers' Nemotron-H never ties it);
  vocabulary {cfg['vocab_size']} (the demo tokenizer). Mimetic init on the Mamba-2 layers only; attention and MLPs
  at their default init; every residual branch's output projection / sqrt(layers).
- Files: `config.json` (transformers' NemotronHConfig), `model.safetensors` (bfloat16, transformers' names;
  read in float32), `tokenizer.json`, `train_log.json`, `eval.json`.{same_step}
"""
    return intro, model_md


def model_card(folder: Path, ev: dict, note: str = "") -> str:
    log = json.loads((folder / "train_log.json").read_text()) if (folder / "train_log.json").exists() else {}
    phases = "\n".join(_phase_line(p) for p in log.get("phases", [log])) if log else "  - (no train_log.json)"
    note = f"\n- {note}" if note else ""
    rel = ev["retrieval"]["relative_gain_vs_none"]["concat"]
    weak = (f"\n**This model barely uses its contexts**: Concat lowers the held-out continuation loss by only "
            f"{100 * rel:.1f}% vs no context, so the methods cannot be told apart on it (their shares of "
            f"Concat's gain below are ratios of tiny numbers). It did not learn to copy from context in its "
            f"training budget.\n" if rel < 0.1 else "")
    cfg = json.loads((folder / "config.json").read_text())
    r, q = ev["retrieval"], ev["qa"]
    order = sorted(METHODS, key=lambda m: -r["gain_vs_none"][m])
    losses = [(e["step"], e["loss"]) for e in log.get("log", [])]
    args = log.get("args", {})
    mix = ", ".join(f"{k} {v:.0%}" for k, v in MIXES[args.get("mix", "v1")].items())
    acc_curve = (f"\n- Skill accuracy over the last phase (mean over the base tasks, greedy exact match on the first "
                 f"{ev.get('curve_items', '?')} test items of each task, "
                 f"`python scripts/eval_demo.py --curve <out>/checkpoints`):\n\n{curve_table(ev['curve'])}\n"
                 if ev.get("curve") else "")
    knowledge = ("" if "knowledge" not in MIXES[args.get("mix", "v1")] else
                 ", knowledge passages that state every skill pair in prose or glossary lists, train and test items "
                 "alike, never in the arrow format (knowledge, `picaso_core/data/knowledge.py`: the skill facts are "
                 "meant to be memorised, as a pre-trained model knows capitals, so a held-out skill query asks a fact "
                 "the model has read but never seen demonstrated)")
    sk = ev["skills"]
    if "base" in sk:
        skills_md = skill_table({t: {int(k): v for k, v in a.items()} for t, a in sk["base"].items()},
                                {t: {int(k): v for k, v in a.items()} for t, a in sk["shuffled"].items()}, sk["n_items"])
        mean = {int(k): v for k, v in sk["mean"].items()}
        skills_head = SKILLS_HEAD
        skills_tail = (f"Mean over the base tasks: {100 * mean[0]:.0f}% with no demonstration, {100 * mean[1]:.0f}% / "
                       f"{100 * mean[4]:.0f}% / {100 * mean[16]:.0f}% at k = 1 / 4 / 16; {100 * sk['mean_shuffled']:.0f}% "
                       f"on the shuffled variants at k = 16.")
    else:  # an eval.json without skill_eval.py's fields: random draws of test items, no k = 0 or shuffled probe
        skills_md = skill_table({t: {int(k): v for k, v in a.items()} for t, a in sk.items()})
        skills_head = (f"### In-context skills (greedy exact match, {ev.get('skill_queries', '?')} random held-out "
                       "queries per task and k; evaluated before `picaso_core/analysis/skill_eval.py` existed)")
        skills_tail = ("The knowledge tasks cannot be answered: their held-out items occur nowhere in this model's "
                       "training data (README: the v2 attempt).")
    curve = ", ".join(f"{s}: {l:.2f}" for s, l in losses[:: max(1, len(losses) // 8)] + losses[-1:]) if losses else "-"
    if cfg.get("model_type") == "nemotron_h":
        intro, model_md = hybrid_about(folder, cfg, log)
    else:
        intro = """# PICASO Explorer demo model

A **small Mamba-2 language model trained on generated data** (the project's own seeded demo
world), bundled so that the app and every phenomenon of the PICASO paper can be shown offline on
a CPU. It is not a general language model: it knows the demo world's templates and little else.
For real results switch to a released checkpoint, e.g. `python app.py --model state-spaces/mamba2-370m`.
"""
        model_md = f"""- Architecture: Mamba-2 (this project's engine, mamba_ssm weight layout), {log.get('params', 0) / 1e6:.2f}M parameters:
  d_model {cfg['d_model']}, {cfg['n_layer']} layers, d_state {cfg['ssm_cfg']['d_state']}, headdim {cfg['ssm_cfg']['headdim']},
  expand {cfg['ssm_cfg']['expand']}, vocabulary {cfg['vocab_size']} (byte-level BPE trained on the demo world, skill
  facts of train and test items alike, `tokenizer.json`; `scripts/build_demo_data.py` TOKENIZER_MIX).
- Files: `config.json` (mamba_ssm schema), `model.safetensors`, `tokenizer.json`, `train_log.json`, `eval.json`.
"""
    return f"""{intro}{weak}
## Model
{model_md}
## Training
- Command: see the phases below (`python scripts/build_demo_data.py` first; seeded; CPU; `torch.compile`).
- Data: an endless stream of freshly generated examples (`picaso_core/data/demo_world.py`), mixed by document
  share as {mix}: retrieved chunks in random order followed by a passage's first half and its
  continuation (retrieval), question answering with passages (qa), in-context skill demonstrations `question → answer`
  from each task's TRAIN items (skill){knowledge}, and plain passages. Every retrieval/QA example invents new
  entities, so facts cannot be memorised: the continuation can only be predicted by copying from the contexts.
  Copy drills (contexts, then one of them again) make up {100 * args.get('copy_drills', 0):.0f}% of documents.
  Whole examples are packed into rows of {args.get('seq_len', '?')} tokens (never cut across rows; padding carries no loss).
- Initialisation: {_init_line(log.get('args', {}))}
- Phases (each `python scripts/train_demo.py ...`, AdamW, cosine to 10%, weight decay 0.1, grad clip 1):
{phases}
- Training loss by step (last phase): {curve}.{note}{acc_curve}

## Evaluation (held-out entities; `python scripts/eval_demo.py`)
### Retrieval continuation ({r['n_samples']} samples, 3-5 candidate contexts each, most relevant last by all-MiniLM-L6-v2)
{r['table']}

Gain order (largest first): {' > '.join(METHOD_NAMES[m] for m in order)}.
The paper's order is Soup < CASO < PICASO-R ≈ PICASO-S < Concat < PICConcat-R (in gain).
Concat lowers the loss by {100 * r['relative_gain_vs_none']['concat']:.0f}% vs no context; PICASO-R recovers
{100 * r['concat_gain_recovered']['picaso_r']:.0f}% of Concat's gain (the paper: 91% on Mamba-2 2.7B, zero-shot).
Retriever put a gold context last in {100 * ev['gold_last_rate']:.0f}% of samples.

### Question answering in the MS MARCO shape ({q['n_samples']} samples, answer loss)
{q['table']}

{skills_head}

{skills_md}

{skills_tail}

Evaluated in {ev['seconds']:.0f} s on CPU.
{extra_sections(folder)}"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ASSETS / "demo_model"))  # loading.DEMO_MODEL_DIR
    ap.add_argument("--samples", type=count(1), default=200, help="retrieval and QA samples (max 200 each)")
    ap.add_argument("--skill-items", type=count(1), default=None, help="ask at most this many test items per task "
                    "(default: all of them)")
    ap.add_argument("--curve", default=None, help="a folder of checkpoints: add their skill accuracy curve to eval.json")
    ap.add_argument("--curve-items", type=count(1), default=8,
                    help="test items per task for each checkpoint of the curve")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-card", action="store_true", help="print results only; write nothing")
    ap.add_argument("--note", default="", help="a sentence added to the card's training section")
    ap.add_argument("--card-only", action="store_true", help="rewrite README.md from the model's eval.json")
    args = ap.parse_args(argv)

    if args.card_only:
        folder = Path(args.model)
        (folder / "README.md").write_text(model_card(folder, json.loads((folder / "eval.json").read_text()), args.note))
        return
    from picaso_core import load_model
    from picaso_core.retrieval.retriever import Retriever

    t0 = time.time()
    model = load_model(args.model)
    ret = load_corpus("demo", "test", kind="retrieval")
    qa = load_corpus("demo", "test", kind="qa")
    retriever = Retriever.from_texts(list(ret.database.items()))
    samples = order_by_retriever(ret, retriever)[: args.samples]
    qa_retriever = Retriever.from_texts(list(qa.database.items()))
    qa_samples = order_by_retriever(qa, qa_retriever)[: args.samples]

    def progress(name):
        return lambda i, n: print(f"\r{name} {i}/{n}", end="" if i < n else "\n", flush=True)

    r = evaluate_samples(model, samples, context_suffix=CONTEXT_SEP, progress=progress("retrieval"))
    q = evaluate_samples(model, qa_samples, context_suffix=CONTEXT_SEP, progress=progress("qa"))
    skills = skill_eval(model, args.seed, args.skill_items)
    curve = accuracy_curve(Path(args.curve), args.seed, args.curve_items) if args.curve else []
    ev = {"retrieval": summarise(r), "qa": summarise(q), "skills": skills, "curve": curve, "curve_items": args.curve_items,
          "gold_last_rate": gold_last_rate(samples), "seconds": time.time() - t0}
    print(r.table(), "\n\n", q.table(), "\n\n", skill_table(skills["base"], skills["shuffled"], skills["n_items"]), sep="")
    rr = ev["retrieval"]
    print(f"\nConcat vs none: {100 * rr['relative_gain_vs_none']['concat']:.1f}% lower loss; "
          f"PICASO-R recovers {100 * rr['concat_gain_recovered']['picaso_r']:.1f}% of Concat's gain")
    if not args.no_card:
        folder = Path(args.model)
        (folder / "eval.json").write_text(json.dumps(ev, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x))
        (folder / "README.md").write_text(model_card(folder, ev, args.note))
        print(f"wrote {folder / 'eval.json'} and {folder / 'README.md'}")


if __name__ == "__main__":
    main()

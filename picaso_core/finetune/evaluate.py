"""Base vs BP2C vs BPTC with the experiments' protocol (PICASO table 1 rows 2-5, fig. 4, table 2).

    report = evaluate_runs("demo", {"bptc-retrieval": folder, ...}, out_dir, samples=40)

Per model (all on the demo's TEST split; fine-tuning used the train split only):
    fig4     loss vs k (retrieval split, MiniLM top-k of the test database, most relevant last;
             `sweep.run_sweep` + `summaries.curves`), before and after fine-tuning
    table1   QA split with all of each question's passages (`run_sweep(ks=[None])` +
             `summaries.method_table`): Naive, Concat, Soup, CASO, PICASO-R, PICASO-S
    table2   general ability: plain LM loss on held-out passages, skill accuracy (skill_eval)
    gap      PICASO-R vs Concat at k = GAP_K on the retrieval split: (L_R - L_C) / L_C, the
             figure the 2% goal (card.GAP_GOAL_PCT) is stated in (base: +14.6% on 40 samples)
Records go to <out_dir>/<model>/records.jsonl (resumable, one line per sample x k x method).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Sequence

import torch

from picaso_core.analysis import sweep
from picaso_core.retrieval import rankers as R
from picaso_core.analysis import summaries as S
from picaso_core.analysis.evaluate import evaluate_samples
from picaso_core.analysis.skill_eval import mean_accuracy, skill_outcomes
from picaso_core.data import DEMO_DATA_DIR, load_corpus
from picaso_core.engine.loading import load_model
from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder
from picaso_core.store.format import tqdm_progress
from picaso_core.finetune.card import GAP_K, SKILL_KS, TABLE1_METHODS, model_card, report_markdown

FIG4_KS = tuple(range(11))  # every k the paper's fig. 4 draws (sec. 6.1: k in 0..10), the 2% goal's 3..10 among them
FIG4_METHODS = ("none", "concat", "picaso_r", "picaso_s")
LOWER_P = 0.05  # "skill accuracy lower": a paired sign test over the items the models disagree on


def model_source(model, database: dict[str, str], suffix: str = sweep.CONTEXT_SUFFIX) -> sweep.ContextSource:
    """A ContextSource that encodes contexts with `model` itself (no state store): each context once."""
    states: dict[str, object] = {}
    tok = model.tokenizer

    def token_ids(cid: str) -> list[int]:
        return tok.encode(database[cid] + suffix)

    def prepare(ids: list[str]) -> None:
        new = [c for c in dict.fromkeys(ids) if c not in states]
        states.update(zip(new, model.encode_contexts([token_ids(c) for c in new])))

    def get(ids: list[str]) -> list:
        prepare(ids)
        return [states[c] for c in ids]

    return sweep.ContextSource(get, token_ids, prepare)


@torch.no_grad()
def passage_lm_loss(model, texts: Sequence[str]) -> float:
    """Plain LM loss: NLL per token over `texts` (each read from the empty state), token-weighted."""
    total, n = 0.0, 0
    for t in texts:
        ids = model.tokenizer.encode(t)
        if len(ids) < 2:
            continue
        logits, _ = model(torch.tensor([ids]))
        total += float(torch.nn.functional.cross_entropy(logits[0, :-1], torch.tensor(ids[1:], device=logits.device),
                                                         reduction="sum"))
        n += len(ids) - 1
    return total / max(1, n)


def skill_paired(base_hits: dict, tuned_hits: dict) -> dict[str, dict]:
    """k -> the paired comparison of two models' skill outcomes (`skill_eval.skill_outcomes`, both on
    the same prompts): accuracies as the mean over tasks (as `mean_accuracy`) with their binomial
    standard errors, the difference with the standard error of the paired per-item differences, the
    items only one model answers (`lost`: base right, tuned wrong; `won`: the reverse) and the exact
    two-sided sign test over them. `lower` = the tuned model is lower beyond noise (p < LOWER_P)."""
    tasks = sorted(base_hits)
    out = {}
    for k in sorted(base_hits[tasks[0]], key=int):
        acc_b, acc_t, var_b, var_t, var_d, lost, won, n = 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0
        for t in tasks:
            b, u = [int(x) for x in base_hits[t][k]], [int(x) for x in tuned_hits[t][k]]
            m = len(b)
            pb, pt = sum(b) / m, sum(u) / m
            d = [y - x for x, y in zip(b, u)]
            md = sum(d) / m
            acc_b, acc_t, n = acc_b + pb, acc_t + pt, n + m
            var_b, var_t = var_b + pb * (1 - pb) / m, var_t + pt * (1 - pt) / m
            var_d += sum((x - md) ** 2 for x in d) / max(1, m - 1) / m
            lost, won = lost + d.count(-1), won + d.count(1)
        T = len(tasks)
        p = min(1.0, 2 * sum(math.comb(lost + won, i) for i in range(min(lost, won) + 1)) / 2 ** (lost + won))
        out[str(k)] = {"n_items": n, "base": acc_b / T, "tuned": acc_t / T, "base_se": math.sqrt(var_b) / T,
                       "tuned_se": math.sqrt(var_t) / T, "diff": (acc_t - acc_b) / T, "diff_se": math.sqrt(var_d) / T,
                       "lost": lost, "won": won, "p_sign": p, "lower": acc_t < acc_b and p < LOWER_P}
    return out


def skill_row(model, max_items: int | None = None) -> dict:
    """Skill accuracy (skill_eval, k = SKILL_KS) with each item's outcome kept for paired comparisons
    (`hits`: task -> k -> one character per test item, "1" = answered right)."""
    hits = skill_outcomes(model, ks=SKILL_KS, max_items=max_items)
    acc = {t: {k: sum(h) / len(h) for k, h in by_k.items()} for t, by_k in hits.items()}
    return {"per_task": acc, "mean": mean_accuracy(acc), "max_items": max_items,
            "n_items": sum(len(by_k[SKILL_KS[0]]) for by_k in hits.values()),
            "hits": {t: {str(k): "".join("01"[x] for x in h) for k, h in by_k.items()} for t, by_k in hits.items()}}


def own_candidates_gap(model, samples) -> dict:
    """PICASO-R vs Concat with each sample's own candidate contexts (3-5: gold + distractors, in the
    corpus's order; `evaluate.evaluate_samples`), the setting of the 2% goal's baseline figure."""
    ml = evaluate_samples(model, samples, None, ("none", "concat", "picaso_r"), context_suffix=sweep.CONTEXT_SUFFIX).mean_loss
    return {"none": round(ml["none"], 5), "concat": round(ml["concat"], 5), "picaso_r": round(ml["picaso_r"], 5),
            "gap_pct": round(100 * (ml["picaso_r"] - ml["concat"]) / ml["concat"], 2)}


def paired_gaps(records, sample_ids: Sequence[str], ks: Sequence[int], retriever: str = "minilm") -> dict:
    """PICASO-R above Concat per k on the fig. 4 sweep, % of Concat's mean loss (as `card.fig4_gaps`), with
    the standard error of the per-sample differences (the same samples read both ways, so the noise of
    the 2% goal is that of L_R - L_C, not of either loss)."""
    want = set(sample_ids)
    loss: dict[tuple[str, int, str], float] = {}
    for r in records:
        if r["retriever"] == retriever and r["sample_id"] in want and r["method"] in ("concat", "picaso_r"):
            loss[r["sample_id"], r["k"], r["method"]] = r["loss"]
    out = {"ks": [], "gap_pct": [], "gap_se_pct": [], "n": []}
    for k in ks:
        ids = [i for i in sample_ids if (i, k, "concat") in loss and (i, k, "picaso_r") in loss]
        if not ids:
            continue
        d = [loss[i, k, "picaso_r"] - loss[i, k, "concat"] for i in ids]
        mc, md = sum(loss[i, k, "concat"] for i in ids) / len(ids), sum(d) / len(d)
        se = math.sqrt(sum((x - md) ** 2 for x in d) / max(1, len(d) - 1) / len(d))
        out["ks"].append(k)
        out["gap_pct"].append(round(100 * md / mc, 3))
        out["gap_se_pct"].append(round(100 * se / mc, 3))
        out["n"].append(len(ids))
    return out


def evaluate_model(model, out_dir: Path, samples: int = 40, skills: bool = True, skill_items: int | None = None,
                   ks: Sequence[int] = FIG4_KS, progress: bool = True, first: int = 0) -> dict:
    """fig. 4 curves, table 1 row, table 2 row and the PICASO-R vs Concat gap of one model, on held-out
    samples first .. first + samples of the test split. The report uses the first 40; a later slice
    (e.g. first=40, samples=80) is a validation set for choosing among runs without looking at them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    retrieval, qa = load_corpus("demo", "test"), load_corpus("demo", "test", kind="qa")
    if not 0 <= first < min(len(retrieval.samples), len(qa.samples)):
        raise ValueError(f"first = {first}: the test split has {len(retrieval.samples)} retrieval and "
                         f"{len(qa.samples)} QA samples")
    held, held_qa = retrieval.samples[first:first + samples], qa.samples[first:first + samples]
    database = {**retrieval.database, **qa.database}
    retriever = Retriever.cached(database, SentenceEmbedder(), None,
                                 seeds=[DEMO_DATA_DIR / "test_database.all-MiniLM-L6-v2.safetensors"])
    ranker = R.EmbeddingRanker(retriever, "minilm")
    log = sweep.RecordLog(out_dir / "records.jsonl")
    source = model_source(model, database)
    main_ids = [s.sample_id for s in held]
    bar = tqdm_progress("fig. 4 sweep", "step") if progress else None
    sweep.run_sweep(model, held, ranker, source, list(ks), log, FIG4_METHODS, "fig4", bar)
    bar = tqdm_progress("table 1 (QA, all passages)", "step") if progress else None
    sweep.run_sweep(model, held_qa, ranker, source, [None], log, TABLE1_METHODS, "qa", bar)
    records = list(log.records.values())
    curve = S.curves(records, main_ids, "minilm", ks)
    qa_keys = {(s.sample_id, len(s.contexts)) for s in held_qa}
    table1 = {m: row["loss"] for m, row in S.method_table(records, qa_keys).items()}
    i = curve["ks"].index(GAP_K) if GAP_K in curve["ks"] else None
    gap = None
    if i is not None:
        lr_, lc = curve["loss"]["picaso_r"][i], curve["loss"]["concat"][i]
        gap = {"k": GAP_K, "picaso_r": lr_, "concat": lc, "none": curve["loss"]["none"][i],
               "gap_pct": round(100 * (lr_ - lc) / lc, 2)}
    row = {"fig4": curve, "fig4_gap": paired_gaps(records, main_ids, ks), "table1": table1, "gap": gap,
           "n_samples": samples, "first": first,
           "gap_own": own_candidates_gap(model, held),
           "lm_loss": round(passage_lm_loss(model, list(retrieval.database.values())[:200]), 5)}
    if skills:
        row["skills"] = skill_row(model, skill_items)  # all 158 held-out items x 4 k: ~10 s on a CPU
    row["eval_seconds"] = round(time.perf_counter() - t0, 1)
    (out_dir / "result.json").write_text(json.dumps(row, indent=1))
    return row


def evaluate_runs(base: str, runs: dict[str, Path], out_dir: Path, samples: int = 40,
                  skill_items: int | None = None, carry: dict | None = None) -> dict:
    """Evaluate the base model and every finished run folder; write <out_dir>/report.json. Skill
    accuracies of the runs come with a paired comparison against the base (`skills["vs_base"]`).
    carry: an earlier report (same base, same samples) whose rows stand in for runs without a folder
    here (marked `carried`: their training config is in report["train"]); the evaluation is
    deterministic, so a run trained with the same config evaluates to the same row."""
    models = {"base": base, **{n: str(p) for n, p in runs.items() if (Path(p) / "model.safetensors").is_file()}}
    if carry is not None and carry.get("samples") != samples:
        raise ValueError(f"the carried report was evaluated on {carry.get('samples')} samples, not {samples}: "
                         "evaluate with the same --eval-samples")
    carried = {n: r for n, r in ((carry or {}).get("models") or {}).items() if n in runs and n not in models}
    report = {"models": {}, "train": {}, "samples": samples, "date": time.strftime("%Y-%m-%d %H:%M"),
              "threads": torch.get_num_threads(), "skill_items": skill_items}
    for name, where in models.items():
        cached = Path(out_dir) / name / "result.json"
        print(f"evaluating {name} ({where})", flush=True)
        if cached.is_file():
            row = json.loads(cached.read_text())
            if "gap_own" not in row:  # a cached result without this figure: computed here
                row["gap_own"] = own_candidates_gap(load_model(where), load_corpus("demo", "test").samples[:samples])
            sk = row.get("skills") or {}
            if "hits" not in sk or sk.get("max_items") != skill_items:  # written with another item budget
                row["skills"] = skill_row(load_model(where), skill_items)
            cached.write_text(json.dumps(row, indent=1))
        else:
            row = evaluate_model(load_model(where), Path(out_dir) / name, samples, skill_items=skill_items)
        if name != "base" and "base" in report["models"]:
            row["skills"]["vs_base"] = skill_paired(report["models"]["base"]["skills"]["hits"], row["skills"]["hits"])
        report["models"][name] = row
        log = Path(where) / "train_log.json"
        if name != "base" and log.is_file():
            report["train"][name] = train_record(json.loads(log.read_text()))
    for name, row in carried.items():
        row = {**row, "carried": True}
        if (row.get("skills") or {}).get("hits") and report["models"]["base"].get("skills"):
            row["skills"] = {**row["skills"], "vs_base": skill_paired(report["models"]["base"]["skills"]["hits"],
                                                                     row["skills"]["hits"])}
        report["models"][name] = row
        if name in (carry.get("train") or {}):
            report["train"][name] = {**carry["train"][name], "carried": True}
    report["models"] = {n: report["models"][n] for n in ["base", *runs] if n in report["models"]}
    report["train"] = {n: report["train"][n] for n in runs if n in report["train"]}
    report["markdown"] = report_markdown(report)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "report.json").write_text(json.dumps(report, indent=1))
    print(report["markdown"])
    return report


def train_record(t: dict) -> dict:
    """A run's training summary from its train_log.json, with the composition loss per k over the first
    and the last third of the steps (`composition_by_k`: k -> [first, last]; k varies per step, so the
    loss is only comparable within one k)."""
    hist = t.get("history", [])
    third = max(1, len(hist) // 3)
    by_k: dict[str, list] = {}
    for part, hs in enumerate((hist[:third], hist[-third:])):
        for k in sorted({h["k"][0] for h in hs if h.get("k") and "composition_loss" in h}):
            v = [h["composition_loss"] for h in hs if h.get("k") and h["k"][0] == k and "composition_loss" in h]
            by_k.setdefault(str(k), [None, None])[part] = round(sum(v) / len(v), 4)
    return {"steps": t.get("step"), "seconds_per_step": t.get("seconds_per_step"), "n_examples": t.get("n_examples"),
            "config": t.get("config"), "loss_first10": _mean_loss(hist[:10]), "loss_last10": _mean_loss(hist[-10:]),
            "composition_by_k": by_k}


def _mean_loss(hist: list[dict]) -> float | None:
    """Mean training loss over some steps (k varies per step: single steps are not comparable)."""
    return sum(h["loss"] for h in hist) / len(hist) if hist else None


def ship(run_dir: Path, dest: Path, report: dict, command: str) -> None:
    """Copy the fine-tuned model (bundled layout) and its evaluation to `dest`, with a model card."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "train_log.json"):
        shutil.copy2(Path(run_dir) / f, dest / f)
    slim = {**{k: v for k, v in report.items() if k != "markdown"}, "command": command}
    (dest / "finetune_eval.json").write_text(json.dumps(slim, indent=1))
    write_card(dest, slim, command)


def write_card(dest: Path, report: dict, command: str) -> None:
    """(Re)write <dest>/README.md from `report` and, where bench/finetune_speed.py left one, <dest>/speed.json."""
    speed = json.loads((dest / "speed.json").read_text()) if (dest / "speed.json").is_file() else None
    (dest / "README.md").write_text(model_card(report, command, speed))

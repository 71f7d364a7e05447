"""The model card (README.md) of the BPTC-fine-tuned demo model, written from the evaluation report
(`picaso_core.finetune_eval.evaluate_runs`) by scripts/finetune_demo.py."""

from __future__ import annotations


def _epochs(t: dict, cfg: dict) -> str:
    seen = (t.get("steps") or 0) * ((cfg.get("batch_size") or 0) - round((cfg.get("lm_share") or 0) * (cfg.get("batch_size") or 0))) \
        * (cfg.get("grad_accum") or 1)
    n = t.get("n_examples") or 0
    return (f"{seen} composition examples seen of the {n} prepared: {seen / n:.2f} epoch" if n else "") + \
        (" (the paper trains one; cut to fit the CPU budget of the run)" if n and seen < n else "")


def shortfalls(report: dict) -> list[str]:
    """The issue's targets against the report, each a markdown bullet; where a target is missed, says so
    (fig. 4 gap beyond the 2% goal, skill accuracy lower in point estimate, figures beyond the 3% limit,
    QA rows against the paper's rows 4-5)."""
    from picaso_core.finetune_eval import (DEGRADE_LIMIT_PCT, GAP_GOAL_PCT, PAPER_TABLE1, ROW_NAMES, degradation_text,
                                           degradations, fig4_gaps)

    ms = report["models"]
    base, tuned = ms.get("base", {}), ms.get("bptc-retrieval", {})
    out = []
    if base.get("lm_loss") and tuned.get("lm_loss"):
        lm = 100 * (tuned["lm_loss"] - base["lm_loss"]) / base["lm_loss"]
        out.append(f"- Plain LM loss on held-out passages {lm:+.1f}% vs the base ({'within' if lm <= DEGRADE_LIMIT_PCT else 'beyond'} "
                   f"the issue's {DEGRADE_LIMIT_PCT:g}%).")
    if tuned.get("fig4") and base.get("fig4"):
        g, gb = fig4_gaps(tuned), fig4_gaps(base)
        g2 = fig4_gaps(ms["bp2c-retrieval"]) if "bp2c-retrieval" in ms else {}
        over = [k for k, v in g.items() if v > GAP_GOAL_PCT]
        out.append(f"- Fig. 4 (MiniLM top-k): after BPTC the gap is within {GAP_GOAL_PCT:g}% at k = "
                   + ", ".join(str(k) for k in g if k not in over)
                   + (("; **still open at k = " + ", ".join(
                       f"{k}: {g[k]:+.1f}%" + (f" (BP2C {g2[k]:+.1f}%" if k in g2 else " (") + f", base {gb[k]:+.1f}%)"
                       for k in over) + "**: BPTC narrows it at every k but does not close it where k is larger")
                      if over else f" and at every k shown") + ".")
    paired = (tuned.get("skills") or {}).get("vs_base") or {}
    if paired:
        lower = {k: v for k, v in paired.items() if v["diff"] < 0}
        beyond = [k for k, v in paired.items() if v["lower"]]
        n = next(iter(paired.values()))["n_items"]
        out.append(f"- Skill accuracy vs the base, paired on the same {n} held-out items per k (points ± standard error of "
                   "the paired differences; exact sign test): "
                   + ("not lower at any k" if not lower else "**lower in point estimate at k = " + ", ".join(
                       f"{k} ({100 * v['diff']:+.1f} ± {100 * v['diff_se']:.1f}, p = {v['p_sign']:.2f})" for k, v in lower.items())
                      + "**, so the issue's \"not lower\" is not met as written; "
                      + ("within noise (p >= 0.05 at every k)" if not beyond else f"beyond noise at k = {', '.join(beyond)} (p < 0.05)"))
                   + ".")
    over = degradations(report)
    out.append(f"- Beyond the issue's {DEGRADE_LIMIT_PCT:g}% limit (any run, relative to the base; ⚠ in table 2 below): "
               + ("; ".join(degradation_text(d) for d in over) if over else "none") + ".")
    q_b, q_t = base.get("table1") or {}, tuned.get("table1") or {}
    if q_b and q_t:
        out.append(f"- Held-out QA after retrieval fine-tuning (rows 2-3): Concat {q_b['concat']:.3f} -> {q_t['concat']:.3f}, "
                   f"PICASO-R {q_b['picaso_r']:.3f} -> {q_t['picaso_r']:.3f} (the paper's rows 2-3: about unchanged).")
    qa = [n for n in ("bptc-qa", "bp2c-qa") if n in ms]
    if q_b and qa:
        t_qa = report.get("train", {}).get(qa[0]) or {}
        pb, pq = PAPER_TABLE1["Base"], PAPER_TABLE1["BPTC-MSMARCO"]
        moved = lambda m: " / ".join(f"{ms[n]['table1'][m]:.3f}" for n in qa)  # noqa: E731
        up = all(ms[n]["table1"]["concat"] > q_b["concat"] for n in qa)
        out.append(f"- QA fine-tuning (rows 4-5) ran only {t_qa.get('steps', '?')} steps (one epoch of the "
                   f"{t_qa.get('n_examples', '?')} train questions); it "
                   + ("**raised** Concat's QA loss" if up else "changed Concat's QA loss")
                   + f" ({q_b['concat']:.3f} -> {moved('concat')}, {' / '.join(ROW_NAMES[n] for n in qa)}) and moved "
                   f"PICASO-R {q_b['picaso_r']:.3f} -> {moved('picaso_r')}: unlike the paper's rows 4-5, where both fall "
                   f"(Concat {pb['concat']:.2f} -> {pq['concat']:.2f}, PICASO-R {pb['picaso_r']:.2f} -> {pq['picaso_r']:.2f} "
                   "with BPTC).")
    return out


def speed_markdown(speed: dict | None) -> str:
    """BPTC vs BP2C cost from bench/finetune_speed.py's JSON (time, saved tensors, peak RSS of a fresh process)."""
    if not speed:
        return "Not measured: run `python bench/finetune_speed.py --json assets/demo_model_bptc/speed.json`."
    lines = [f"`{speed['command']}` ({speed['device']}, {speed['threads']} thread(s), {speed['batch']} composition examples "
             f"per step, median of {speed['repeats']} steps; load average {speed['load_avg']} on {speed['cpus']} cores; "
             f"{speed['date']}). Peak RSS: `getrusage(RUSAGE_SELF).ru_maxrss` of a fresh process that loads the model "
             "and runs one optimizer step of one objective; 'step' is that peak minus the process's peak before the step.",
             "", "| k | context tokens / step | BPTC s / step | BP2C s / step | time ratio | BPTC saved MiB | BP2C saved MiB "
             "| ratio | BPTC peak RSS MiB (step) | BP2C peak RSS MiB (step) | ratio, peak | ratio, step |", "|---" * 12 + "|"]
    for r in speed["rows"]:
        t, m, p, d = r["s_per_step"], r["saved_mib"], r["peak_rss_mib"], r["step_rss_mib"]
        lines.append(f"| {r['k']} | {r['tokens']} | {t['bptc']:.2f} | {t['bp2c']:.2f} | {t['bptc'] / t['bp2c']:.1f}x | "
                     f"{m['bptc']:.0f} | {m['bp2c']:.0f} | {m['bptc'] / m['bp2c']:.1f}x | {p['bptc']:.0f} ({d['bptc']:.0f}) | "
                     f"{p['bp2c']:.0f} ({d['bp2c']:.0f}) | {p['bptc'] / p['bp2c']:.1f}x | {d['bptc'] / max(d['bp2c'], 1e-9):.1f}x |")
    return "\n".join(lines)


def model_card(report: dict, command: str, speed: dict | None = None) -> str:
    """The card, from the evaluation report (tables via `report_markdown`, so the slim finetune_eval.json that
    is shipped regenerates it) and bench/finetune_speed.py's JSON (`speed`, optional)."""
    from picaso_core.finetune_eval import GAP_GOAL_PCT, fig4_gaps, report_markdown

    ms, train = report["models"], report.get("train", {})
    t = train.get("bptc-retrieval", {})
    cfg = t.get("config") or {}
    own = {n: (r.get("gap_own") or {}).get("gap_pct") for n, r in ms.items()}  # the issue's setting
    top5 = {n: (r.get("gap") or {}).get("gap_pct") for n, r in ms.items()}
    base_gap, goal = own.get("base"), own.get("bptc-retrieval")
    verdict = ("meets" if goal is not None and goal <= GAP_GOAL_PCT else "does not meet")
    short_md = "\n".join(shortfalls(report))
    over = [k for k, v in fig4_gaps(ms["bptc-retrieval"]).items() if v > GAP_GOAL_PCT] if "bptc-retrieval" in ms else []
    far = (f"3-5 contexts; at k = {', '.join(map(str, over))} of fig. 4 below it does not" if over else
           "and at every k of fig. 4 below")
    return f"""# PICASO Explorer demo model, fine-tuned with BPTC

The bundled demo model (`assets/demo_model`, a 2.8M-parameter Mamba-2 trained on the generated demo
world) fine-tuned with **Backpropagation Through Composition** (PICASO sec. 5): the cross-entropy of
each continuation given its query, starting from the PICASO-R composition of the retrieved
contexts' states, with gradients through the composition and through the encoding of every context.
Load it with `picaso_core.load_model("demo-bptc")`; the app offers it in Compose & compare.
It is a small model on synthetic data, like its base.

## Training
- Command: `{command}` (regenerates it from the bundled base; seeded; CPU).
- Objective {cfg.get('objective', '?').upper()}, composition {cfg.get('method', '?')}, data: retrieval samples of a fresh
  train-split demo world ({t.get('n_examples', '?')} samples, one each per entity; database = that world's chunks,
  top-{cfg.get('k_max', '?')} by all-MiniLM-L6-v2, k drawn uniformly from 0..{cfg.get('k_max', '?')} per micro-batch, sec. 6.1).
  Train and evaluation splits share no entity, chunk or sample (checked by `finetune.check_disjoint`).
- {t.get('steps', '?')} steps of {cfg.get('batch_size', '?')} documents ({round((cfg.get('lm_share') or 0) * (cfg.get('batch_size') or 0))} of them plain
  language-model documents of the base model's mix `{cfg.get('lm_mix', '?')}`, so general ability holds), AdamW lr
  {cfg.get('lr', '?')}, warmup {cfg.get('warmup', '?')}, cosine to 10%, grad clip {cfg.get('clip', '?')}; accelerate, full precision on CPU.
- {_epochs(t, cfg)}
- Wall time: {t.get('seconds_per_step') or 0:.1f} s / step on 2 CPU cores shared with other jobs (timings are inflated by the
  contention; bench/finetune_speed.py measures BPTC against BP2C side by side).

## Evaluation (held-out test split; `python scripts/finetune_demo.py --only eval`)
Goal of issue #22: after BPTC, PICASO-R's held-out loss within 2% of Concat's (40 held-out retrieval samples,
each with its own 3-5 candidate contexts; base: {base_gap if base_gap is not None else '?'}% above). This model {verdict} it there
({far}):
PICASO-R minus Concat is {goal if goal is not None else '?'}% of Concat's loss there (BP2C, same steps:
{own.get('bp2c-retrieval', '?')}%); with the MiniLM top-5 of the test database (the experiments protocol): base
{top5.get('base', '?')}%, BPTC {top5.get('bptc-retrieval', '?')}%, BP2C {top5.get('bp2c-retrieval', '?')}%.

Against the issue's targets, including where it falls short:
{short_md}

{report_markdown(report)}

### Cost: BPTC vs BP2C per training step

{speed_markdown(speed)}

Paper (PICASO table 1, Mamba2-2.7B on MS MARCO): fine-tuning on the matching training set (rows 4-5) brings PICASO-R to
Concat (BPTC 0.65 vs 0.65); fine-tuning on WikiText (rows 2-3) leaves MS MARCO about unchanged; table 2: general
benchmarks do not degrade.
"""

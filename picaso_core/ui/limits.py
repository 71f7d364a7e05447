"""What a tab can show on the loaded corpus, and sliders that survive small corpora.

A user's corpus may hold one sample, one labelled sample, no labels, no QA samples, samples without
candidate contexts (the database file alone), or a database of one or two chunks. Every tab starts
on any of them and says, in the tab, what it cannot show and why (`note`); the limits themselves
come from the corpus (`corpus_counts`).
"""

from __future__ import annotations

import gradio as gr


def corpus_counts(res) -> dict[str, int]:
    """Counts the tabs' limits depend on: samples, labelled samples (gold ids), QA samples, samples
    with their own candidate contexts, and database chunks."""
    samples = res.corpus.samples
    return {
        "samples": len(samples),
        "labelled": sum(1 for s in samples if s.gold_ids and s.contexts),
        "qa": sum(1 for s in samples if s.kind == "qa"),
        "with_contexts": sum(1 for s in samples if s.contexts),
        "contexts": len(res.database),
    }


def count_slider(lo: int, hi: int, value: int, **kwargs) -> gr.Slider:
    """A whole-number slider over [lo, hi], clamping `value`. Gradio refuses a slider whose minimum
    equals its maximum (one sample, one context): that case is a fixed slider at `lo`, not a crash."""
    if hi > lo:
        return gr.Slider(lo, hi, value=min(max(value, lo), hi), step=1, **kwargs)
    return gr.Slider(lo, lo + 1, value=lo, step=1, interactive=False, **kwargs)


def note(lines: list[str], elem_id: str) -> gr.Markdown:
    """The tab's box of what it cannot show on this corpus (hidden when there is nothing to say)."""
    text = "\n".join(f"- {line}" for line in lines)
    return gr.Markdown("**On this corpus:**\n" + text if lines else "", visible=bool(lines), elem_id=elem_id,
                       elem_classes="px-note")

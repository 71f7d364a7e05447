"""The guided tour's steps, as data: the PICASO story on the bundled demo in eleven views.

Each step names the tab it opens, the inputs it sets there (by the names the tab's links use,
picaso_core.ui.tour.links) and the runner (picaso_core.ui.tour.runs) that computes what the step
shows: figures, tables, and a sentence or two read off the numbers. Data only: this module
imports nothing of the UI (the static site reads it without Gradio). The tour's cache
(picaso_core.ui.tour) stores each runner's result, so a step opens at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from picaso_core.data import DEMO_ATTRIBUTION_EXAMPLE, DEMO_COMPOSE_EXAMPLE


@dataclass(frozen=True)
class Step:
    title: str  # a few words, shown as "Step n of N · title"
    tab: str  # the tab it opens: a key of tour.links.TABS
    run: str  # the runner that computes the view: a key of tour.runs.RUNNERS
    inputs: dict = field(default_factory=dict)  # set on the tab, and passed to the runner


# the Compose steps' inputs; what a step leaves out is the tab's default (tour.runs.resolve)
_COMPOSE = dict(example=DEMO_COMPOSE_EXAMPLE, k=5, most_relevant_last=True)

STEPS: tuple[Step, ...] = (
    Step("A question, without and with context", "compose", "compose_none_vs_concat", _COMPOSE),
    Step("Every composition method side by side", "compose", "compose_methods", _COMPOSE),
    Step("Shuffle the order", "compose", "compose_order", {**_COMPOSE, "most_relevant_last": False}),
    Step("Composing states vs reading tokens: the time", "compose", "compose_time", {**_COMPOSE, "k": 10}),
    Step("The skill map", "soup", "soup_map", dict(layer=3, part="ssm", method="tsne", dim=2)),
    Step("Mixing two skills", "soup", "soup_two_task", dict(w=0.5)),
    Step("A loss-landscape plane", "landscape", "landscape",
         dict(sample="demo-test-r0000", steps=15, pair="u2-u3", view="contour")),
    Step("Which context the answer rests on", "attribution", "attribution", dict(example=DEMO_ATTRIBUTION_EXAMPLE, k=5)),
    Step("Fine-tuned vs base", "compose", "compose_finetuned", {**_COMPOSE, "model": "bptc"}),
    Step("The primer: memory and selectivity", "primer", "primer", dict(magnitude=0.9, phase=20, selectivity=1.0)),
    Step("COFFEE vs S6", "coffee", "coffee", dict(task="ih", steps=600, seconds=12)),
)

"""The guided tour's steps, as data: the PICASO story on the bundled demo in thirteen views.

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


# Every step is budgeted in steps and samples, never in seconds, so that its cached result is the same
# on every machine (tests/ui/tour/test_tour_determinism.py builds it twice and compares).

# the Compose steps' inputs; what a step leaves out is the tab's default (tour.runs.resolve)
_COMPOSE = dict(example=DEMO_COMPOSE_EXAMPLE, k=5, most_relevant_last=True)
# the State soup tab's defaults (its layer: the middle one, filled in by tour.runs.resolve); the
# demonstrations are the tab's own example, placed on the map
SOUP_MAP = dict(part="ssm", method="tsne", dim=2, demos="tree → arbre\nbook → livre\nmoon → lune\n", top=5)
# Step 8's example: one whose answer rests on its gold context for every method on the demo model (8 of 8
# put it first; the loss drops from 1.43 with no context to 0.22 with PICASO-R). The tab's own default,
# DEMO_ATTRIBUTION_EXAMPLE at sentences, is what the tab opens on (OPENINGS); its summary counts the methods.
ATTRIBUTION_STEP_EXAMPLE = "demo-test-q0002"
# The COFFEE run: table 1's induction head, 2,000 steps per model. Seeded, this run passes 0.9
# validation accuracy at ~1,800 steps (0.93 at 2,000) while S6 stays below 0.45 through 3,000
# (docs/tour.md); the tour's text says what the numbers show either way (tour.runs.coffee_text).
COFFEE_STEPS = 2000
# Step 11, the Primer's block walk (its first section's defaults): the Compose example's query (filled in by
# tour.runs.resolve) read by layer 1, head 0, from zeros; the walk is computed in one forward
BLOCK_WALK = dict(walk_layer=1, walk_head=0, walk_start="zeros")

STEPS: tuple[Step, ...] = (
    Step("A question, without and with context", "compose", "compose_none_vs_concat", _COMPOSE),
    Step("Every composition method side by side", "compose", "compose_methods", _COMPOSE),
    Step("Shuffle the order", "compose", "compose_order", {**_COMPOSE, "most_relevant_last": False}),
    Step("Composing states vs reading tokens: the time", "compose", "compose_time", {**_COMPOSE, "k": 10}),
    Step("The skill map", "soup", "soup_map", SOUP_MAP),
    Step("Mixing two skills", "soup", "soup_two_task", dict(w=0.5)),
    # one sample, where PICASO-R's loss is clearly below Soup's (on the average of 10, the tab's own
    # default, the two are level: 0.770 vs 0.767)
    Step("A loss-landscape plane", "landscape", "landscape",
         dict(sample="demo-test-r0000", steps=15, pair="u2-u3", view="contour")),
    Step("Which context the answer rests on", "attribution", "attribution",
         dict(example=ATTRIBUTION_STEP_EXAMPLE, k=5)),
    Step("Fine-tuned vs base", "compose", "compose_finetuned", {**_COMPOSE, "model": "bptc"}),
    Step("The primer: memory and selectivity", "primer", "primer", dict(magnitude=0.9, phase=20, selectivity=1.0)),
    # inserted before the last step, not appended: step numbers 1-10 and the Primer's place second to last hold
    Step("What is a state?", "primer", "block_walk", BLOCK_WALK),
    Step("COFFEE vs S6", "coffee", "coffee", dict(task="ih", steps=COFFEE_STEPS)),
    # appended: steps 1-12 keep their numbers. The Compose question of steps 1-2 on the bundled hybrid (issue 49),
    # beside the app's model; the bar shows the table, the tab keeps the app's own results
    Step("The same question on a hybrid model", "compose", "compose_hybrid", _COMPOSE),
)

# What each tab opens on before anything is pressed: the result of its default inputs, from the same
# cache as the steps (a step itself where its inputs are the tab's defaults). The landscape tab opens
# on its own shipped default view (tabs.landscape), the primer (but for its block walk), benchmarks and
# fine-tuning tabs on figures they build or ship.
OPENINGS: dict[str, tuple[Step, ...]] = {
    "compose": (STEPS[0],),
    "soup": (STEPS[4], STEPS[5]),
    "attribution": (Step("Attribution opens on", "attribution", "attribution",
                         dict(example=DEMO_ATTRIBUTION_EXAMPLE, k=5, grain="sentence")),),
    "primer": (STEPS[10],),  # the block walk, the Primer's first section
    "coffee": (STEPS[11],),
}

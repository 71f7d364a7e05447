"""Links to any view: which inputs of each tab a link carries, and how a link's text becomes values.

A link is the page's address plus query parameters: `?tab=compose&example=...&k=5` restores a tab and
its inputs (and presses its run button, where the tab has a quick one); `?step=N` opens the tour at
step N. The tabs are not edited for this: each input is found in its tab by elem_id, else by label
(`find`), so a tab's layout stays its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlencode

import gradio as gr

from picaso_core.ui.errors import normalise


@dataclass(frozen=True)
class TabLinks:
    title: str  # the tab's TITLE
    inputs: dict  # link parameter -> the input's elem_id, else its label
    run: str | None = None  # elem_id of the button a restored link presses (None: too slow to press unasked)
    figure: str | None = None  # elem_id of the plot that run draws: the link's figure, drawn before the page's rest
    derived: dict = field(default_factory=dict)  # parameter -> its example-derived twins (query, continuation)


TABS: dict[str, TabLinks] = {
    "compose": TabLinks("Compose & compare", {
        "example": "compose-example", "query": "compose-query", "continuation": "compose-continuation",
        "k": "Contexts to retrieve (k)", "most_relevant_last": "Most relevant last",
        "max_new_tokens": "Tokens to generate per method", "model": "compose-model"}, "compose-run", "compose-plot"),
    "soup": TabLinks("State soup", {
        "layer": "soup-layer", "part": "State part", "method": "Projection", "dim": "Dimensions",
        "demos": "soup-demos", "w": "soup-w"}, "soup-run", "soup-map"),
    "landscape": TabLinks("Loss landscape", {
        "sample": "landscape-sample", "steps": "Grid steps per axis", "pair": "landscape-pair", "view": "View"},
        "landscape-run", "landscape-soup"),
    "attribution": TabLinks("Attribution", {
        "example": "attribution-example", "query": "attribution-query", "answer": "attribution-answer",
        "k": "k: contexts to retrieve when none are picked"}, "attribution-run", "attribution-bars"),
    "benchmarks": TabLinks("Benchmarks", {
        "samples": "bench-samples", "ks": "bench-ks", "retriever": "bench-retriever"}),
    "finetune": TabLinks("Fine-tuning", {
        "objective": "ft-objective", "steps": "ft-steps", "k_max": "ft-kmax", "lr": "ft-lr"}),
    "primer": TabLinks("Primer", {
        "magnitude": "primer-magnitude", "phase": "primer-phase", "selectivity": "primer-selectivity",
        "text": "primer-text", "walk_text": "walk-text", "walk_layer": "walk-layer", "walk_head": "walk-head",
        "walk_start": "walk-start", "walk_token": "walk-token", "walk_stage": "walk-stage"},
        "walk-run", "primer-walk"),  # a link walks its block (one forward), then shows its token and stage
    "coffee": TabLinks("COFFEE lab", {"task": "coffee-task", "steps": "coffee-steps", "seconds": "coffee-seconds"}),
}
# Inputs an example fills in: a link names the example alone when they are still the example's own.
FROM_EXAMPLE = {"compose": ("query", "continuation"), "attribution": ("query", "answer")}


# query parameters of the page itself, not of a tab: the theme (Gradio's) and talk mode (layout.JS)
PAGE_PARAMS = ("__theme", "talk")
# Inputs whose current value lives in the page, not in their (hidden) component: where a view's
# script keeps it (element id, data attribute, number or text). Copy link reads them there; a restored
# link's value reaches the view's script through the address (primer_block_js reads walk_token and
# walk_stage once, for the first walk the link draws). The block walk's token and stage: the walk is
# stepped in the page with no server event, so only the page knows where it is.
PAGE_HELD = {"walk_token": ("bw-plot", "token", "number"), "walk_stage": ("bw-plot", "stageName", "text")}


def copy_inputs_js(names: list[str]) -> str:
    """The Copy link event's js: the page's values of `names` (the event's inputs after the tab key),
    with each PAGE_HELD input replaced by what its view shows now (left as is where the view is not drawn)."""
    held = [[i + 1, *PAGE_HELD[n]] for i, n in enumerate(names) if n in PAGE_HELD]
    return ("(...v) => { for (const [i, id, key, kind] of " + json.dumps(held) + ") {"
            " const el = document.getElementById(id), x = el && el.dataset[key];"
            " if (x !== undefined && x !== '') v[i] = kind === 'number' ? Number(x) : x; } return v; }")


def press_target(key: str) -> str:
    """What a restored link of tab `key` presses and then waits for: "run-button-id figure-id" (the
    page's script splits it), "" for a tab whose run is too slow to press unasked."""
    t = TABS[key]
    return f"{t.run} {t.figure or ''}".strip() if t.run else ""


def tab_key(title: str) -> str | None:
    return next((k for k, t in TABS.items() if t.title == title), None)


def descendants(block):
    for child in getattr(block, "children", []) or []:
        yield child
        yield from descendants(child)


def find(tab_block, key: str) -> dict[str, gr.components.Component]:
    """The link's inputs of one rendered tab, by parameter name (an input it cannot find is left out)."""
    comps = [c for c in descendants(tab_block) if isinstance(c, gr.components.Component)]
    out = {}
    for name, ref in TABS[key].inputs.items():
        hit = next((c for c in comps if c.elem_id == ref), None) or next(
            (c for c in comps if getattr(c, "label", None) == ref), None)
        if hit is not None:
            out[name] = hit
    return out


def coerce(comp, raw: str):
    """A query parameter's text as the value its component takes; ValueError when it cannot be."""
    if isinstance(comp, (gr.Slider, gr.Number)):
        x = float(raw)
        lo, hi = getattr(comp, "minimum", None), getattr(comp, "maximum", None)
        if (lo is not None and x < lo) or (hi is not None and x > hi):
            raise ValueError(f"{raw} is outside {lo}..{hi}")
        return int(x) if x == int(x) else x
    if isinstance(comp, gr.Checkbox):
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{raw!r} is not true or false")
        return raw.lower() in ("true", "1")
    if isinstance(comp, (gr.Radio, gr.Dropdown)) and not getattr(comp, "multiselect", False):
        values = [c[1] if isinstance(c, (tuple, list)) else c for c in (comp.choices or [])]
        for v in values:
            if str(v) == raw:
                return v
        if isinstance(comp, gr.Dropdown) and comp.allow_custom_value:
            return raw
        raise ValueError(f"{raw!r} is not one of its choices")
    return raw


def raw_value(comp, value, max_chars: int = 4000):
    """A value the page sent for one of a link's inputs (the Copy link event runs with
    preprocess=False: Gradio's own checks answer a bad value with a traceback and every choice
    listed), checked against its component: the value, or ValueError saying what it takes."""
    if value is None:
        return None
    if isinstance(comp, (gr.Slider, gr.Number)):
        lo, hi = getattr(comp, "minimum", None), getattr(comp, "maximum", None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or (
                lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError(f"a number{f' from {lo:g} to {hi:g}' if lo is not None and hi is not None else ''}")
        return value
    if isinstance(comp, gr.Checkbox):
        if not isinstance(value, bool):
            raise ValueError("true or false")
        return value
    if isinstance(comp, (gr.Radio, gr.Dropdown)):
        values = {str(c[1] if isinstance(c, (tuple, list)) else c) for c in (comp.choices or [])}
        many = value if getattr(comp, "multiselect", False) and isinstance(value, list) else [value]
        custom = isinstance(comp, gr.Dropdown) and comp.allow_custom_value
        if not all(isinstance(v, (str, int, float)) and (custom or str(v) in values) and len(str(v)) <= max_chars
                   for v in many):
            raise ValueError(f"one of its {len(values)} choices")
        return value
    if not isinstance(value, str) or len(value) > max_chars:
        raise ValueError(f"text of at most {max_chars:,} characters")
    return value


def link_query(key: str, values: dict, example_fill=None) -> str:
    """`?tab=key&name=value...` for a tab's current values. `example_fill(example) -> dict` gives the
    inputs an example fills in: while they are unchanged the link names the example alone, once edited
    it carries them and not the example."""
    values = {k: v for k, v in values.items() if v is not None}
    twins = FROM_EXAMPLE.get(key, ())
    if twins and values.get("example") and example_fill is not None:
        own = example_fill(values["example"])
        if all(str(values.get(t, "")) == str(own.get(t, "")) for t in twins):
            values = {k: v for k, v in values.items() if k not in twins}
        else:
            values.pop("example")
    return "?" + urlencode({"tab": key, **{k: _text(v) for k, v in values.items()}})


def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v == int(v):
        return str(int(v))
    return normalise(str(v))  # a lone surrogate cannot be URL-encoded (UTF-8): it made a traceback

"""Loss landscape: the loss over the plane through three states (PICASO fig. 2), the Soup plane of
the independent states beside the CASO plane of the cyclic orders, a 1-D interpolation and the
prop. 4 distances per layer.

Handlers are plain functions at the top (tested without a server); `render` lays the tab out. The
API endpoint `/landscape` returns the grids as plain data beside the figures:
    Client(url).predict(sample="average", steps=21, api_name="/landscape")

The default view (the average of the first AVERAGE_N corpus samples at 21 x 21, the paper's
setting) is shown at once: it ships for the demo model (assets/demo_data/landscape_default.json,
written by scripts/measure_landscape.py and used only when its key, which carries the model's
fingerprint, matches), else it is computed once at the first page open and kept in the app's cache
folder next to the state store.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import gradio as gr
import pandas as pd

from picaso_core.analysis.landscape_fig2 import fig2
from picaso_core.light.assets import ASSETS
from picaso_core.plots.landscape import colour_scale, line_figure, plane_figure, plane_title, zrange
from picaso_core.session import Resources, derived_folder
from picaso_core.ui import budget
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, choice, clip, text, whole_number
from picaso_core.ui.limits import corpus_counts, note
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import LIGHT, MODEL

TITLE = "Loss landscape"
ENDPOINT = "/landscape"
AVERAGE = "average"
AVERAGE_N = 10  # fig. 2 averages 10 samples
K = 3  # contexts per sample: fig. 2's planes go through three states
STEPS, STEPS_MIN, STEPS_MAX = 21, 5, 41
MARGIN = 0.25
PAIRS = {"u2-u3": (1, 2), "u1-u2": (0, 1), "u1-u3": (0, 2)}  # 0-based; u3 is the most relevant (last)
EXAMPLES_SHOWN = 40  # a page must not grow with the corpus (docs/serving.md)
SHIPPED = ASSETS / "demo_data" / "landscape_default.json"
CACHE_VERSION = "landscape/1"
EXPLAIN = (  # "first / second", not "left / right": below ~1000 px the planes stack
    "**Soup plane** (first): the loss over the plane through the three retrieved contexts' own states "
    "x(u₁), x(u₂), x(u₃); their mean (★) is **Soup**. **CASO plane** (second): the plane through the three "
    "CASO states of the cyclic orders; their mean (★) is **PICASO-R**. Both share one colour scale, spaced by "
    "quantile so that each plane's structure shows (the colour bar reads loss); the axes are distances in "
    "state space. Look at the size of the dashed triangles and the colour under each ★: PICASO's claim "
    "(sec. 4, prop. 4) is that CASO states sit closer together, where the loss is nearly linear, so their "
    "mean loses little; the finding below gives this model's numbers. ◆ is Concat's state projected onto "
    "each plane."
)

_lock = threading.Lock()
_memo: dict[str, dict] = {}


# ---- handlers: plain functions --------------------------------------------------------------
def limits(res: Resources) -> list[str]:
    """What this tab cannot show on the loaded corpus, and why: a plane needs a sample to score and
    three retrieved states."""
    n = corpus_counts(res)
    out = []
    if not n["samples"]:
        out.append("No samples in the corpus: a landscape scores a sample's continuation, so there is nothing "
                   "to draw. Give samples (query + continuation) in a .jsonl corpus (--corpus FILE).")
    if n["contexts"] < K:
        out.append(f"The database holds {n['contexts']} context{'s' * (n['contexts'] != 1)}: a plane goes through "
                   f"{K} states, so there is nothing to draw. Give at least {K} contexts (--database FILE).")
    elif 0 < n["samples"] < AVERAGE_N:
        out.append(f"{n['samples']} sample{'s' * (n['samples'] != 1)}: the default view averages "
                   f"{n['samples']}, not the paper's {AVERAGE_N}.")
    return out


def blocked(res: Resources) -> bool:
    n = corpus_counts(res)
    return not n["samples"] or n["contexts"] < K or not res.layout.pure_ssm


# a hybrid: fig2's planes mix the SSM tensors of states (analysis.landscape), which hold no keys and values
HYBRID_WHAT = "The loss landscape (planes through the SSM states alone)"


def sample_choices(res: Resources) -> list[tuple[str, str]]:
    if not res.corpus.samples:
        return [("No samples in this corpus", AVERAGE)]
    n = min(AVERAGE_N, len(res.corpus.samples))
    first = [(f"Average of the first {n} sample{'s' * (n != 1)} (paper fig. 2)", AVERAGE)]
    return first + [(f"{s.sample_id} · {clip(s.query, 70)}", s.sample_id)
                    for s in res.corpus.samples[:EXAMPLES_SHOWN]]


def load_samples(res: Resources, sample_ids: list[str]) -> list[tuple]:
    """(query_ids, continuation_ids, context_ids, context_states) per sample: its top-K retrieved
    contexts, most relevant last (as Compose & compare retrieves them), states from the store."""
    by_id = {s.sample_id: s for s in res.corpus.samples}
    tok = res.model.tokenizer
    out = []
    for sid in sample_ids:
        if sid not in by_id:
            raise bad_input(f"no sample {clip(repr(sid), 40)} in corpus {res.corpus.name}: pick one from the list",
                            ENDPOINT)
        s = by_id[sid]
        if not s.continuation:
            raise bad_input(f"sample {sid!r} has no continuation to score: pick another", ENDPOINT)
        hits = res.retriever.retrieve(s.query, K, exclude=s.exclude_ids, best_last=True)
        if len(hits) < K:
            raise bad_input(f"the corpus has fewer than {K} contexts to retrieve: a plane needs three states", ENDPOINT)
        ids = [cid for cid, _ in hits]
        out.append((tok.encode(s.query), tok.encode(s.continuation), [res.token_ids(c) for c in ids], res.states(ids)))
    return out


def average_ids(res: Resources) -> list[str]:
    return [s.sample_id for s in res.corpus.samples[:AVERAGE_N]]


def compute(res: Resources, sample: str = AVERAGE, steps: int = STEPS, pair: str = "u2-u3",
            progress=lambda *a, **kw: None) -> dict:
    """Fig. 2 for one sample or the average: Fig2.to_dict() plus the sample ids and context ids."""
    steps = _check(res, sample, steps, pair)
    if blocked(res):
        raise bad_input(res.pure_ssm_only(HYBRID_WHAT) or " ".join(limits(res)), ENDPOINT)
    ids = average_ids(res) if sample == AVERAGE else [sample]
    progress(0.0, desc=f"retrieving and loading the states of {len(ids)} sample(s)")
    samples = load_samples(res, ids)
    report = lambda d, t: progress(d / t, desc=f"scoring states {d}/{t}")  # noqa: E731
    try:
        out = fig2(res.model, samples, steps=steps, margin=MARGIN, pair=PAIRS[pair], progress=report).to_dict()
    except ValueError as e:  # degenerate anchors (e.g. the same context retrieved twice): say so
        raise bad_input(f"{e}", ENDPOINT) from None
    out.update(sample=sample, sample_ids=ids, steps=steps, pair=pair, model=res.model_name,
               key=cache_key(res, steps, pair) if sample == AVERAGE else None)
    return out


def cache_key(res: Resources, steps: int = STEPS, pair: str = "u2-u3") -> str:
    c = res.corpus
    return f"{CACHE_VERSION}|{c.name}/{c.split}|{res.model.fingerprint()}|n{len(average_ids(res))}|s{steps}|m{MARGIN}|{pair}"


def _cache_file(res: Resources) -> Path:
    return Path(res.cache_dir) / "landscape" / (derived_folder(res.cache_dir, res.store).name + ".json")


def default_result(res: Resources, progress=lambda *a, **kw: None) -> dict:
    """The default view: shipped (demo model), else cached, else computed once and cached."""
    key = cache_key(res)
    if key in _memo:
        return _memo[key]
    with _lock:  # one computation, whoever opens the page first
        if key in _memo:
            return _memo[key]
        for path in (SHIPPED, _cache_file(res)):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if data.get("key") == key:
                _memo[key] = data
                return data
        data = compute(res, AVERAGE, STEPS, "u2-u3", progress)
        path = _cache_file(res)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
        _memo[key] = data
        return data


def _check(res: Resources, sample: str, steps, pair: str) -> int:
    """The raw inputs (the events run with preprocess=False), checked before any work."""
    steps = whole_number("grid steps (21 is the default)", steps, STEPS_MIN, STEPS_MAX, ENDPOINT)
    choice("pair", pair, PAIRS, ENDPOINT)
    sample = text("sample", sample, ENDPOINT, max_chars=200)
    if not sample:
        raise bad_input("pick a sample, or the average", ENDPOINT)
    if sample != AVERAGE and sample not in {s.sample_id for s in res.corpus.samples}:
        raise bad_input(f"no sample {clip(repr(sample), 40)} in corpus {res.corpus.name}: pick one from the list",
                        ENDPOINT)
    return steps


# ---- formatting -----------------------------------------------------------------------------
def _pair(a: float, b: float, digits: int = 3) -> tuple[str, str, float]:
    """a and b as printed, with as many digits (3 to 6) as it takes for their printed difference to
    be non-zero, and that difference b - a computed from the printed numbers, so the sentence's
    arithmetic checks out."""
    for d in range(digits, 7):
        ra, rb = round(a, d), round(b, d)
        if ra != rb or d == 6:
            return f"{ra:.{d}f}", f"{rb:.{d}f}", round(rb - ra, d)


def summary_md(d: dict) -> str:
    s = d["summary"]
    smaller = s["soup_mean_side"] / s["caso_mean_side"] if s["caso_mean_side"] else float("inf")
    caso, soup, gain = _pair(s["caso_loss_at_mean"], s["soup_loss_at_mean"])
    digits = len(caso.split(".")[1])
    what = f"the average of {d['n_samples']} samples" if d["n_samples"] > 1 else f"sample {d['sample_ids'][0]}"
    lines = [
        f"On {what}: the **CASO triangle is {smaller:.2f}× {'smaller' if smaller >= 1 else 'larger'}** than Soup's "
        f"(mean side {s['caso_mean_side']:.3g} vs {s['soup_mean_side']:.3g} in state space), and the loss at "
        f"its mean, **PICASO-R, is {caso}** vs **{soup} at Soup** "
        + (f"({'lower' if gain > 0 else 'higher'} by {abs(gain):.{digits}f} nats/token)." if gain else "(equal)."),
        f"Mean loss at the anchors: {s['soup_anchor_loss']:.3f} (independent states) and "
        f"{s['caso_anchor_loss']:.3f} (CASO states).",
    ]
    if "concat_loss" in s:
        lines.append(f"Concat's state: loss {s['concat_loss']:.3f}; it lies {s['concat_off_soup_plane']:.3g} "
                     f"off the Soup plane and {s['concat_off_caso_plane']:.3g} off the CASO plane.")
    lines.append(f"<small>{d['steps']}×{d['steps']} grid per plane, computed in {d['seconds']:.1f} s.</small>")
    return "  \n".join(lines)


# short headers: the table fits an 800 px window without scrolling (the bound is written out below it)
PROP4_COLUMNS = ["Layer", "‖x(u) − x(u′)‖", "‖CASO(u,u′) − CASO(u′,u)‖", "CASO / indep.", "bound", "holds"]
PROP4_NOTE = ("**bound** = ‖(I−A(u′))x(u)‖ + ‖(I−A(u))x(u′)‖, prop. 4's bound on the CASO gap. The paper prints "
              "it with every norm squared; that form does not hold in general (tests/test_compose.py), the "
              "unsquared one (the triangle inequality) does. Prop. 4 is exact for one SSM layer; the model stacks "
              "several.")


def prop4_frame(d: dict) -> pd.DataFrame:
    rows = [{
        "Layer": r["layer"],
        "‖x(u) − x(u′)‖": round(r["state_gap"], 4),
        "‖CASO(u,u′) − CASO(u′,u)‖": round(r["caso_gap"], 4),
        "CASO / indep.": round(r["caso_gap"] / r["state_gap"], 3) if r["state_gap"] else None,
        "bound": round(r["bound"], 4),
        "holds": "yes" if r["holds"] else "NO",
    } for r in d["prop4"]]
    return pd.DataFrame(rows, columns=PROP4_COLUMNS)


def figures(d: dict, view: str = "contour"):
    view = (view or "contour").lower()
    scale, z = colour_scale(d["soup"], d["caso"]), zrange(d["soup"], d["caso"])
    # a colour bar on each: below 1000 px the planes stack and each is read on its own
    soup = plane_figure(d["soup"], plane_title(d["soup"], "Soup plane: the independent states"), view, scale, z=z)
    caso = plane_figure(d["caso"], plane_title(d["caso"], "CASO plane: the CASO states"), view, scale, z=z)
    return soup, caso, line_figure(d["soup_line"], d["caso_line"])


def code(d: dict, view: str) -> tuple[str, str]:
    ids = d["sample_ids"]
    py = (
        "from picaso_core.session import load_resources\n"
        "from picaso_core.ui.tabs.landscape import load_samples\n"
        "from picaso_core.analysis.landscape_fig2 import fig2\n"
        "from picaso_core.plots.landscape import plane_figure\n\n"
        f"res = load_resources({d.get('model', 'demo')!r})\n"
        f"samples = load_samples(res, {ids!r})  # top-{K} retrieved contexts each, most relevant last\n"
        f"result = fig2(res.model, samples, steps={d['steps']}, margin={MARGIN}, pair={tuple(d['pair'])})\n"
        "print(result.summary())\n"
        "data = result.to_dict()\n"
        f"plane_figure(data['caso'], 'CASO plane', view={view.lower()!r}).show()\n"
    )
    return py, client_snippet("/landscape", sample=d["sample"], steps=d["steps"], pair=d["pair"], view=view.lower())


def outputs(d: dict, view: str = "contour"):
    soup, caso, ln = figures(d, view)
    py, cl = code(d, view)
    return summary_md(d), soup, caso, ln, prop4_frame(d), d, py, cl


def landscape(res: Resources, sample: str = AVERAGE, steps: int = STEPS, pair: str = "u2-u3",
              view: str = "contour", progress=lambda *a, **kw: None):
    """The /landscape handler: every output of the tab. The default settings come from the cache."""
    if not res.layout.pure_ssm:
        raise bad_input(res.pure_ssm_only(HYBRID_WHAT), ENDPOINT)
    view = choice("view", (view or "contour").lower() if isinstance(view, str) else view, ("contour", "surface"),
                  ENDPOINT)
    steps = _check(res, sample, steps, pair)
    if sample == AVERAGE and steps == STEPS and pair == "u2-u3":
        d = default_result(res, progress)  # shipped or cached: within any cap
    else:
        budget.check(ENDPOINT, budget.landscape(len(average_ids(res)) if sample == AVERAGE else 1, steps))
        d = compute(res, sample, steps, pair, progress)
    return outputs(d, view)



# ---- layout ---------------------------------------------------------------------------------
def render(res: Resources) -> None:
    gr.Markdown(EXPLAIN)
    note(limits(res), "landscape-limits")
    gr.Markdown(res.pure_ssm_only(HYBRID_WHAT), visible=not res.layout.pure_ssm, elem_id="landscape-hybrid", elem_classes="px-note")
    # min widths: below about 1000 px the controls wrap onto two lines and the planes stack, instead
    # of squeezing four controls and two 344 px plots into one row
    with gr.Row(equal_height=False):
        sample = gr.Dropdown(sample_choices(res), value=AVERAGE, label="Sample", scale=3, min_width=320,
                             elem_id="landscape-sample",
                             info=f"the top-{K} retrieved contexts of a corpus sample, or the average (~2 min on 2 CPU cores for the demo model; shown at once when cached)")
        steps = gr.Slider(STEPS_MIN, STEPS_MAX, value=STEPS, step=2, label="Grid steps per axis", scale=1,
                          min_width=260, info="steps² loss evaluations per plane")
        pair = gr.Dropdown([("u₂, u₃ (most relevant)", "u2-u3"), ("u₁, u₂", "u1-u2"), ("u₁, u₃", "u1-u3")],
                           value="u2-u3", label="Pair (1-D plot, prop. 4)", scale=1, min_width=280,
                           elem_id="landscape-pair")
        view = gr.Radio(["contour", "surface"], value="contour", label="View", scale=1, min_width=160)
    run = gr.Button("Compute landscape", variant="primary", elem_id="landscape-run", interactive=not blocked(res))
    summary = gr.Markdown(label="Finding", elem_id="landscape-summary")
    with gr.Row():
        with gr.Column(min_width=500):
            soup_plot = gr.Plot(label="Soup plane", elem_id="landscape-soup")
        with gr.Column(min_width=500):
            caso_plot = gr.Plot(label="CASO plane", elem_id="landscape-caso")
    line_plot = gr.Plot(label="1-D interpolation", elem_id="landscape-line")
    gr.Markdown("#### Prop. 4 per layer: distance between the two CASO orders vs between the independent states")
    table = gr.Dataframe(pd.DataFrame(columns=PROP4_COLUMNS), label="Prop. 4 distances (mean over the sample's 3 "
                         "pairs of contexts)", interactive=False, wrap=True, elem_id="landscape-distances")
    gr.Markdown(PROP4_NOTE, elem_classes="px-note")
    with gr.Accordion("Grid data (JSON)", open=False):
        data = gr.JSON(label="Landscape data")
    py, cl = show_code()
    outs = [summary, soup_plot, caso_plot, line_plot, table, data, py, cl]

    @gpu(duration=120)
    def landscape_endpoint(sample, steps, pair, view, progress=gr.Progress()):
        """Loss over the Soup and CASO planes (PICASO fig. 2) for a sample or the average of 10."""
        return landscape(res, sample, steps, pair, view, progress)

    def show_default(progress=gr.Progress()):
        if blocked(res):  # said in the tab's note; nothing to compute
            return (gr.skip(),) * len(outs)
        return outputs(default_result(res, progress))

    def rerender(view, d):
        if not d:
            return gr.skip(), gr.skip()
        soup, caso, _ = figures(d, view)
        return soup, caso

    gr.on(None, show_default, [], outs, api_visibility="private", **MODEL)
    run.click(landscape_endpoint, [sample, steps, pair, view], outs, api_name="landscape", preprocess=False,
              **MODEL)
    view.change(rerender, [view, data], [soup_plot, caso_plot], api_visibility="private", **LIGHT)

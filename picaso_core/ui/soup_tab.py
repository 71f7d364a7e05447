"""State soup: a library of in-context skills kept as states (Pióro et al. 2024), its map per layer,
task retrieval by state similarity, and mixing of states.

Handlers are plain functions at the top (tested without a server); `render` lays the tab out. API
endpoints (every one returns its plain data as a JSON output beside the display):
    /soup_map        layer, part, method, dim, demos → the map's coordinates and labels
    /soup_retrieve   demos, layer, part, top → the tasks the demonstration's state retrieves
    /soup_retrieval  queries, part → top-1 task retrieval accuracy vs k per layer (sec. 2.1)
    /soup_mixing     queries → soup vs k shots vs all shots, and retrieval + mixing (sec. 2.2)
    /soup_two_task   task_a, task_b, prompt, answers, w → weighted mix of two skills
    /soup_decay      chunk_tokens, documents → A-decay vs concat vs mean vs c2 alone (sec. 2.3)

The library (12 demonstrations of 16 train items per task and shuffled twin, the paper's
clustering set-up) is encoded on first use into a StateStore under the app's cache folder and
reopened at the next start. UMAP compiles numba code on its first call (~40 s on 2 cores, once per
machine: soup keeps it in numba's disk cache, ~3 s to load at later starts): it is warmed in a
background thread after the first map is drawn, never at the app's start, and a first UMAP map asked
for before that is done shows its progress (seconds of about the last measured warm-up).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd

from picaso_core.analysis import soup
from picaso_core.data.skills import ARROW, format_query
from picaso_core.plots import soup as plots
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, choice, text, whole_number
from picaso_core.ui.limits import count_slider, note
from picaso_core.ui.resources import Resources
from picaso_core.ui.soup_text import best_layer_sentence, mixing_summary, two_task_story

TITLE = "State soup"
SHOTS, PER_TASK, SEED = 16, 12, 0  # paper A.1: 12 16-shot demonstrations per task
KS = (1, 2, 4, 8, 16)
METHOD_LABEL = {"pca": "PCA", "tsne": "t-SNE", "umap": "UMAP"}
PART_LABEL = {"ssm": "SSM state", "conv": "conv state"}
DEFAULT_METHOD = "tsne"  # the paper's maps (fig. 1, 4); PCA separates less (fig. 5)
# The two-skill default: English→French and singular→plural on a test word of both. On the demo model
# the mix switches from "doors" (w <= 0.4) to "porte" (w >= 0.5) and never writes the composition
# "portes" (scripts/measure_soup.py; capitalize's soup state wrote "porte" too, so it showed nothing).
TASK_A, TASK_B = "english_french", "singular_plural"
TWO_TASK_WORD = "door"
LOOK_AT = (
    "**What to look at:** each dot is the state of one 16-shot demonstration of a skill; dots of one "
    "task gather in a cluster (the paper's fig. 1), the label-shuffled twins (open circles) too, "
    "although their answers are arbitrary. Move the layer slider to see where tasks separate: the panel "
    "below counts it per layer without any projection, and the summary names the best layer. Type a few "
    "demonstrations to see where their state lands and which skills it retrieves."
)
WARM_UMAP = os.environ.get("PICASO_WARM_UMAP", "1") != "0"  # tests switch the background compile off
# Input caps, checked before any work: 64 demonstration lines (the library's are 16), one query
# line, a few answers (each is scored at 12 weights).
MAX_DEMO_CHARS, MAX_DEMO_LINES = 4000, 64
MAX_PROMPT_CHARS, MAX_ANSWERS_CHARS, MAX_ANSWERS = 200, 1000, 10
# One answer to score is a line of the plot's legend and a column header of the generations table:
# a longer one would push the plot aside (a 1,000-character answer made a legend wider than the page).
MAX_ANSWER_CHARS = 100
# Seconds the first UMAP warm-up of a machine takes (import and numba compile: 26-37 s measured on 2
# shared cores): the estimate shown while a first UMAP map waits, until a warm-up has been measured.
UMAP_WARM_S = 40.0


def _umap_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("umap-learn")
    except PackageNotFoundError:
        return "?"


def _two_task_default() -> tuple[str, str]:
    """A query both default skills answer, and the three answers to score: A's, B's, and both
    composed (the French plural; the paper's "quinze" is counting composed with English-French)."""
    a = dict(soup.skill_tasks("all", False)[TASK_A])[TWO_TASK_WORD]
    b = dict(soup.skill_tasks("all", False)[TASK_B])[TWO_TASK_WORD]
    return format_query(TWO_TASK_WORD), "\n".join([a, b, a + "s"])


DEFAULT_PROMPT, DEFAULT_ANSWERS = _two_task_default()


# ---- the lab: the library and caches, one per Resources ----------------------------------------
class Lab:
    """The skill library of one app (built on first use, thread-safe) and cached projections."""

    def __init__(self, res: Resources):
        self.res = res
        self._lib: soup.SkillLibrary | None = None
        self._lock = threading.Lock()
        self._proj: OrderedDict = OrderedDict()
        self._quality: dict | None = None
        self._warm: threading.Thread | None = None
        self._warm_t0 = 0.0
        self._umap_ready = False

    @property
    def folder(self) -> Path:
        return soup.SkillLibrary.default_folder(Path(self.res.store.folder).parent, self.res.model, None,
                                                SHOTS, PER_TASK, SEED)

    def library(self, progress=None) -> soup.SkillLibrary:
        with self._lock:
            if self._lib is None:
                self._lib = soup.SkillLibrary.build(self.res.model, None, SHOTS, PER_TASK, SEED, store=self.folder,
                                                    progress=progress)
            return self._lib

    def quality(self) -> dict:
        lib = self.library()
        with self._lock:
            if self._quality is None:
                self._quality = soup.cluster_quality(lib)
            return self._quality

    def projection(self, layer: int, part: str, method: str, dim: int, extra: np.ndarray | None = None) -> np.ndarray:
        """The library's unit features (and `extra` rows, a typed demonstration) projected; the
        library-only maps are cached (a typed demonstration changes t-SNE / UMAP maps: not cached)."""
        lib = self.library()
        x = lib.unit_features(layer, part)
        if extra is not None:
            return soup.project(np.concatenate([x, extra]), method, dim, seed=SEED)
        key = (layer, part, method, dim)
        with self._lock:
            if key in self._proj:
                self._proj.move_to_end(key)
                return self._proj[key]
        z = soup.project(x, method, dim, seed=SEED)
        with self._lock:
            self._proj[key] = z
            while len(self._proj) > 48:
                self._proj.popitem(last=False)
        return z

    @property
    def warm_file(self) -> Path:
        """Seconds the last UMAP warm-up took on this machine: the estimate shown while the next waits."""
        return Path(self.res.store.folder).parent / "umap-warm-up.json"

    def umap_estimate(self) -> tuple[float, bool]:
        """(seconds the warm-up should take, measured before?): the last measured warm-up of this
        umap-learn version (numba's disk cache makes later starts ~3 s), else UMAP_WARM_S."""
        try:
            d = json.loads(self.warm_file.read_text())
            if d["umap"] == _umap_version():
                return max(1.0, float(d["seconds"])), True
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return UMAP_WARM_S, False

    def _warm_up(self) -> None:
        t0 = time.monotonic()
        soup.warm_up_umap()
        try:
            self.warm_file.parent.mkdir(parents=True, exist_ok=True)
            self.warm_file.write_text(json.dumps({"seconds": round(time.monotonic() - t0, 1), "umap": _umap_version()}))
        except OSError:  # a read-only cache folder: the estimate stays the default
            pass

    def warm_umap(self) -> None:
        """Compile UMAP in the background once (it holds no lock the handlers need)."""
        if WARM_UMAP and self._warm is None:
            self._warm = threading.Thread(target=self._warm_up, name="umap-warm-up", daemon=True)
            self._warm_t0 = time.monotonic()
            self._warm.start()

    def wait_for_umap(self, progress) -> None:
        """Before the first UMAP map: wait for the compile with honest progress (seconds so far of
        about UMAP_WARM_S); a UMAP call made meanwhile would wait on the same compile, silently."""
        if self._umap_ready:
            return
        est, measured = self.umap_estimate()
        what = ("loading UMAP's compiled numba code from disk (once per server start)" if measured else
                "compiling UMAP's numba code (once per machine: later starts load it from disk)")
        self.warm_umap()
        while self._warm is not None and self._warm.is_alive():
            spent = time.monotonic() - self._warm_t0
            progress(min(0.95, spent / est), desc=f"{what}: {spent:.0f} s of about {est:.0f} s")
            self._warm.join(0.5)
        self._umap_ready = True


_LABS: dict[int, Lab] = {}


def lab_for(res: Resources) -> Lab:
    if id(res) not in _LABS:
        _LABS[id(res)] = Lab(res)
    return _LABS[id(res)]


# ---- input checks -----------------------------------------------------------------------------
def _choice(name: str, value, choices, endpoint: str):
    return choice(name, value, choices, endpoint)


def _layer(res: Resources, value, endpoint: str) -> int:
    n = res.model.config.n_layer
    return whole_number(f"layer (this model has layers 0..{n - 1})", value, 0, n - 1, endpoint)


def _demos_text(value, endpoint: str, required: bool) -> str:
    """Typed demonstrations as the library's texts (`question → answer` lines, one newline each);
    blank lines are dropped, a line without an arrow is refused (it is no demonstration)."""
    demos = text("demonstrations", value, endpoint, MAX_DEMO_CHARS)
    lines = [line.strip() for line in demos.split("\n") if line.strip()]
    if not lines:
        if required:
            raise bad_input("The demonstration box is empty: type lines such as 'cat → cats', one per line.", endpoint)
        return ""
    if len(lines) > MAX_DEMO_LINES:
        raise bad_input(f"{len(lines)} demonstration lines; at most {MAX_DEMO_LINES} here", endpoint)
    for i, line in enumerate(lines, 1):
        q, arrow, a = line.replace("->", ARROW).partition(ARROW)
        if not arrow or not q.strip() or not a.strip():
            raise bad_input(f"line {i} ({_clip(repr(line), 30)}) is not 'question {ARROW} answer': write one "
                            f"demonstration per line, such as 'cat {ARROW} cats'", endpoint)
    return "".join(f"{q.strip()} {ARROW} {a.strip()}\n" for q, _, a in
                   (line.replace("->", ARROW).partition(ARROW) for line in lines))


def _progress(progress, desc: str):
    return lambda done, total: progress(done / max(total, 1), desc=f"{desc} ({done}/{total})")


def _clip(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


# ---- handlers ---------------------------------------------------------------------------------
def retrieve(res: Resources, demos: str, layer: int = None, part: str = "ssm", top: int = 5):
    """/soup_retrieve: the library states nearest to the state of typed demonstrations."""
    ep = "/soup_retrieve"
    demos = _demos_text(demos, ep, required=True)
    layer = _layer(res, res.model.config.n_layer // 2 if layer is None else layer, ep)
    part = _choice("part", part, soup.PARTS, ep)
    top = whole_number("top", top, 1, 50, ep)
    lib = lab_for(res).library()
    state = res.model.encode_context(res.model.tokenizer.encode(demos))
    near = lib.nearest(state, layer, part, top)
    rows = [{"rank": r + 1, "task": lib.tasks[i], "cosine": round(s, 4), "demonstration": _clip(lib.texts[i].strip().replace("\n", " | "), 90)}
            for r, (i, s) in enumerate(near)]
    return state, pd.DataFrame(rows), {"layer": layer, "part": part, "retrieved": rows}


def soup_map(res: Resources, layer=None, part: str = "ssm", method: str = DEFAULT_METHOD, dim: int = 2,
             demos: str = "", top: int = 5, require_demos: bool = False, progress=lambda *a, **k: None):
    """/soup_map: the library projected at one layer; with demonstrations, their state is marked
    and its nearest library states listed. Returns (map, quality, summary, retrieved, data, py, client)."""
    ep = "/soup_map"
    layer = _layer(res, res.model.config.n_layer // 2 if layer is None else layer, ep)
    part = _choice("part", part, soup.PARTS, ep)
    method = _choice("method", method, soup.PROJECTIONS, ep)
    dim = whole_number("dim", dim, 2, 3, ep)
    demos = _demos_text(demos, ep, required=require_demos)
    lab = lab_for(res)
    progress(0.05, desc="opening the skill library (encoded once, then kept in its store)")
    lib = lab.library(_progress(progress, "encoding the skill library"))
    retrieved, query, extra = pd.DataFrame(columns=["rank", "task", "cosine", "demonstration"]), None, None
    if demos:
        state, retrieved, _ = retrieve(res, demos, layer, part, top)
        extra = soup._unit(soup.features([state], layer, part))
    if method == "umap":
        lab.wait_for_umap(progress)
    progress(0.97 if method == "umap" else 0.6, desc=f"{METHOD_LABEL[method]} of {len(lib)} states")
    z = lab.projection(layer, part, method, dim, extra)
    coords = z[: len(lib)]
    if demos:
        query = {"xy": z[-1].tolist(), "text": demos, "label": "your demonstration"}
    title = (f"{len(lib)} skill states ({lib.shots}-shot demonstrations), {PART_LABEL[part]} of layer {layer}, "
             f"{METHOD_LABEL[method]}")
    fig = plots.state_map(coords, lib.tasks, lib.texts, title, axis=METHOD_LABEL[method], query=query)
    q = lab.quality()
    quality = plots.quality_figure(q, layer)
    i = q["layers"].index(layer)
    summary = (f"Layer {layer}, {PART_LABEL[part]}: a state's nearest neighbour (cosine, full state) is of its own task "
               f"**{q[part]['nn_accuracy'][i]:.0%}** of the time (chance {q['chance']:.0%}); silhouette "
               f"**{q[part]['silhouette'][i]:.2f}**. " + best_layer_sentence(q))
    if demos:
        top_task = retrieved.iloc[0]["task"]
        summary += f" Your demonstration's state is nearest to **{top_task}** (cosine {retrieved.iloc[0]['cosine']:.3f})."
    lab.warm_umap()
    data = {"layer": layer, "part": part, "method": method, "dim": dim, "coords": coords.round(4).tolist(),
            "tasks": lib.tasks, "query": query, "retrieved": retrieved.to_dict("records"),
            "quality": q}
    py = (f"from picaso_core import load_model\nfrom picaso_core.analysis.soup import SkillLibrary, project\n\n"
          f"model = load_model({res.model_name!r})\n"
          f"lib = SkillLibrary.build(model, shots={SHOTS}, per_task={PER_TASK}, seed={SEED})\n"
          f"xy = project(lib.unit_features(layer={layer}, part={part!r}), method={method!r}, dim={dim}, seed={SEED})\n")
    if demos:
        py += (f"state = model.encode_context(model.tokenizer.encode({demos!r}))\n"
               f"print(lib.retrieve(state, layer={layer}, part={part!r}, top={top}))\n")
    client = client_snippet("/soup_map", layer=layer, part=part, method=method, dim=dim, demos=demos)
    return fig, quality, summary, retrieved, data, py, client


def retrieval_curve(res: Resources, queries: int = 4, part: str = "ssm", progress=lambda *a, **k: None):
    """/soup_retrieval: top-1 task retrieval accuracy vs k (1..16) per layer."""
    ep = "/soup_retrieval"
    queries = whole_number("queries per task and k", queries, 1, 50, ep)
    part = _choice("part", part, soup.PARTS, ep)
    lib = lab_for(res).library(_progress(progress, "encoding the skill library"))
    r = soup.retrieval_accuracy(res.model, lib, KS, queries, part, seed=SEED,
                                progress=_progress(progress, "encoding k-shot queries"))
    best = int(np.argmax([np.mean(a) for a in r["accuracy"]]))
    summary = (f"Best layer {r['layers'][best]}: top-1 retrieval "
               + ", ".join(f"k={k} **{a:.0%}**" for k, a in zip(r["ks"], r["accuracy"][best]))
               + f" (chance {r['chance']:.0%}). The paper (Mamba 2.8B, layer 32 of 64): reliable from k = 2, some tasks at k = 1.")
    py = (f"from picaso_core.analysis.soup import SkillLibrary, retrieval_accuracy\n"
          f"lib = SkillLibrary.build(model, shots={SHOTS}, per_task={PER_TASK}, seed={SEED})\n"
          f"r = retrieval_accuracy(model, lib, ks={KS}, queries={queries}, part={part!r})\n")
    return plots.retrieval_figure(r), summary, r, py, client_snippet("/soup_retrieval", queries=queries, part=part)


# the mixing table's columns: soup.mixing_table's rows, then soup.retrieval_mixing's (m: soup size; retrieval_hit:
# the nearest library state is of the query's task); shown as the empty table's header before the first run
MIX_COLUMNS = ["k", "m", "method", "accuracy", "loss", "n", "retrieval_hit"]


def two_task_columns(answers: list[str]) -> list[str]:
    """The two-task table's columns: w, the generation at w, and the loss of each answer to score."""
    return ["w", "generation", *(f"loss “{a}”" for a in answers)]


def mixing(res: Resources, queries: int = 3, progress=lambda *a, **k: None):
    """/soup_mixing: fig. 2 left (soup of m k-shot states vs k shots vs all 16) and right
    (a k-shot query state mixed with its nearest library state)."""
    ep = "/soup_mixing"
    queries = whole_number("queries per task", queries, 1, 50, ep)
    lib = lab_for(res).library(_progress(progress, "encoding the skill library"))
    rows = soup.mixing_table(res.model, None, 16, KS, queries, SEED, _progress(progress, "mixing: soup vs shots"))
    rmix = soup.retrieval_mixing(res.model, lib, (1, 2, 4, 8), 1, None, "ssm", queries, SEED,
                                 _progress(progress, "retrieval + mixing"))
    summary = mixing_summary(rows, rmix)
    table = pd.DataFrame([{**r, "accuracy": round(r["accuracy"], 3), "loss": round(r["loss"], 4)} for r in rows + rmix],
                         columns=MIX_COLUMNS)
    py = ("from picaso_core.analysis.soup import mixing_table, retrieval_mixing\n"
          f"rows = mixing_table(model, total=16, ks={KS}, queries={queries})\n"
          f"rmix = retrieval_mixing(model, lib, ks=(1, 2, 4, 8), top=1, queries={queries})\n")
    return (plots.mixing_figure(rows, rmix), summary, table, {"mixing": rows, "retrieval_mixing": rmix}, py,
            client_snippet("/soup_mixing", queries=queries))


def two_task(res: Resources, task_a: str = TASK_A, task_b: str = TASK_B, prompt: str = DEFAULT_PROMPT,
             answers: str = DEFAULT_ANSWERS, w: float = 0.5, progress=lambda *a, **k: None):
    """/soup_two_task: x = w·x_a + (1-w)·x_b (each task's state: the soup of its library states);
    generations and answer losses for w = 0, 0.1, ..., 1 and at the chosen w."""
    ep = "/soup_two_task"
    names = soup.task_names()
    task_a = _choice("task A", task_a, names, ep)
    task_b = _choice("task B", task_b, names, ep)
    prompt = text("prompt", prompt, ep, MAX_PROMPT_CHARS)
    if not prompt.strip():
        raise bad_input("The prompt is empty: type a query line such as 'bat →'.", ep)
    if "\n" in prompt.strip():
        raise bad_input("The prompt is one query line, such as 'bat →'", ep)
    answer_list = [a.strip() for a in text("answers", answers, ep, MAX_ANSWERS_CHARS).split("\n") if a.strip()]
    if not answer_list:
        raise bad_input("'Answers to score' is empty: type one answer per line, such as 'Bats'", ep)
    if len(answer_list) > MAX_ANSWERS:
        raise bad_input(f"{len(answer_list)} answers to score; at most {MAX_ANSWERS} here", ep)
    for i, a in enumerate(answer_list, 1):
        if len(a) > MAX_ANSWER_CHARS:
            raise bad_input(f"answer {i} to score is {len(a):,} characters long; at most {MAX_ANSWER_CHARS} per "
                            "answer here. Shorten it.", ep)
    try:
        w = float(w)
    except (TypeError, ValueError):
        w = float("nan")
    if not 0 <= w <= 1:
        raise bad_input(f"w must be a number from 0 to 1, got {w!r}", ep)
    lib = lab_for(res).library(_progress(progress, "encoding the skill library"))
    xa, xb = soup.task_state(lib, task_a), soup.task_state(lib, task_b)
    ws = sorted(set(np.round(np.linspace(0, 1, 11), 2).tolist()) | {round(w, 3)})
    progress(0.5, desc="mixing and generating")
    rows = soup.two_task_mix(res.model, xa, xb, prompt, answer_list, ws)
    scored = list(dict.fromkeys(answer_list))  # an answer typed twice is scored once
    table = pd.DataFrame([[r["w"], r["generation"], *(round(r["losses"][a], 3) for a in scored)] for r in rows],
                         columns=two_task_columns(scored))
    summary = two_task_story(rows, w, task_a, task_b, prompt)
    py = ("from picaso_core.analysis.soup import task_state, two_task_mix\n"
          f"rows = two_task_mix(model, task_state(lib, {task_a!r}), task_state(lib, {task_b!r}), {prompt!r}, {answer_list!r})\n")
    return (plots.two_task_figure(rows, w, task_a, task_b), summary, table, {"rows": rows}, py,
            client_snippet("/soup_two_task", task_a=task_a, task_b=task_b, prompt=prompt, answers="\n".join(answer_list), w=w))


def decay(res: Resources, chunk_tokens: int = 100, documents: int = 10, progress=lambda *a, **k: None):
    """/soup_decay: loss on a test chunk after c1, c2 from concat / A-decay / mean / c2 alone,
    over windows of the corpus (sec. 2.3, fig. 3)."""
    ep = "/soup_decay"
    chunk_tokens = whole_number("chunk tokens", chunk_tokens, 8, 400, ep)
    documents = whole_number("documents", documents, 1, 200, ep)
    try:
        chunks = soup.document_chunks(list(res.database.values()), res.model.tokenizer, chunk_tokens, documents)
    except ValueError as e:
        raise bad_input(str(e), ep) from None
    t = soup.decay_table(res.model, chunks, _progress(progress, "comparing states"))
    m = t["mean_loss"]
    summary = (f"Over {t['n']} windows of 3 × {chunk_tokens} tokens: concat **{m['concat']:.3f}**, A-decay "
               f"**{m['a_decay']:.3f}**, mean **{m['mean']:.3f}**, c2 alone **{m['c2_only']:.3f}** nats/token; A-decay "
               f"beats the mean on {t['wins']['a_decay<mean']:.0%} of windows. The paper (Mamba 2.8B, news): "
               "concat best, then A-decay, ahead of mean-mixing and c2 alone.")
    table = pd.DataFrame([{"method": plots.DECAY_LABEL[k], "mean loss": round(v, 4)} for k, v in m.items()])
    py = ("from picaso_core.analysis.soup import document_chunks, decay_table\n"
          f"chunks = document_chunks(texts, model.tokenizer, chunk_tokens={chunk_tokens}, documents={documents})\n"
          "print(decay_table(model, chunks))\n")
    return (plots.decay_figure(m, t["n"]), summary, table, t, py,
            client_snippet("/soup_decay", chunk_tokens=chunk_tokens, documents=documents))


def decay_limits(res: Resources, chunk_tokens: int = 100) -> list[str]:
    """What the A-decay section cannot show on the loaded corpus: it needs one window of 3 chunks
    (the skill library above does not use the corpus)."""
    texts, chars = [], 0
    for t in res.database.values():  # a short prefix is enough to know whether one window fits
        texts.append(t)
        chars += len(t)
        if chars > 40 * 3 * chunk_tokens:
            return []
    n = len(res.model.tokenizer.encode("\n\n".join(texts)))
    if n >= 3 * chunk_tokens:
        return []
    fit = n // 3 // 4 * 4
    return [f"The corpus's contexts hold {n} tokens in all: a window of 3 × {chunk_tokens} tokens does not fit, "
            + (f"so A-decay mixing needs 'Tokens per chunk' of at most {fit}." if fit >= 16 else
               "so A-decay mixing cannot run (it needs at least 3 × 16 tokens of text).")]


# ---- layout -----------------------------------------------------------------------------------
def render(res: Resources) -> None:
    n_layer = res.model.config.n_layer
    names = soup.task_names()
    gr.Markdown(
        "A **skill library** of states: the state after reading a 16-shot demonstration (`question → answer` "
        "lines) of each in-context task, 12 per task, and a label-shuffled twin of every task. *(State Soup: "
        "In-Context Skill Learning, Retrieval and Mixing, Pióro et al. 2024.)*  \n" + LOOK_AT)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280):
            layer = count_slider(0, n_layer - 1, n_layer // 2, label="Layer", elem_id="soup-layer")
            part = gr.Radio([("SSM state", "ssm"), ("conv state", "conv")], value="ssm", label="State part")
            method = gr.Radio([("PCA", "pca"), ("t-SNE", "tsne"), ("UMAP", "umap")], value=DEFAULT_METHOD,
                              label="Projection", info="t-SNE and UMAP run on the first 50 principal components")
            dim = gr.Radio([("2-D", 2), ("3-D", 3)], value=2, label="Dimensions")
            run = gr.Button("Draw the skill map", variant="primary", elem_id="soup-run")
            demos = gr.Textbox("tree → arbre\nbook → livre\nmoon → lune\n", lines=5, label="Your demonstrations",
                               info="one `question → answer` per line; their state is marked on the map",
                               elem_id="soup-demos")
            top = gr.Slider(1, 20, value=5, step=1, label="Library states to retrieve")
            place = gr.Button("Place my demonstrations", elem_id="soup-place")
        with gr.Column(scale=3, min_width=480):
            fig = gr.Plot(label="Skill map", elem_id="soup-map")
            summary = gr.Markdown(label="Summary", elem_id="soup-summary")
    quality = gr.Plot(label="Where tasks separate: per layer, SSM vs conv", elem_id="soup-quality")
    retrieved = gr.Dataframe(pd.DataFrame(columns=["rank", "task", "cosine", "demonstration"]),
                             label="Nearest library states to your demonstration", interactive=False,
                             elem_id="soup-retrieved")
    with gr.Accordion("Map as data (what /soup_map returns)", open=False):
        map_data = gr.JSON(label="Map data")

    gr.Markdown("### Task retrieval and mixing (paper sec. 2.1-2.2)\nHow often the nearest library state to a "
                "k-shot query is of the query's task, per layer; and whether a soup of states answers as well "
                "as reading all the demonstrations at once.")
    with gr.Row():
        queries = gr.Slider(1, 20, value=4, step=1, label="Queries per task and k")
        curves_part = gr.Radio([("SSM state", "ssm"), ("conv state", "conv")], value="ssm", label="Retrieve by")
        curves = gr.Button("Run retrieval and mixing", variant="primary", elem_id="soup-curves-run")
    ret_fig = gr.Plot(label="Retrieval accuracy vs k", elem_id="soup-retrieval")
    ret_summary = gr.Markdown(label="Retrieval summary")
    mix_fig = gr.Plot(label="Mixing", elem_id="soup-mixing")
    mix_summary = gr.Markdown(label="Mixing summary")
    with gr.Accordion("Mixing table and data", open=False):
        mix_table = gr.Dataframe(pd.DataFrame(columns=MIX_COLUMNS), label="Mixing rows", interactive=False)
        ret_data = gr.JSON(label="Retrieval data")
        mix_data = gr.JSON(label="Mixing data")

    gr.Markdown("### Mixing two skills (sec. 2.2: counting + English-French gave *quinze*)\n"
                "State = w·x[A] + (1 − w)·x[B], each task's state the soup of its library states. The default "
                f"asks `{DEFAULT_PROMPT}` and scores A's answer, B's answer and both skills at once "
                f"({', '.join(f'*{a}*' for a in DEFAULT_ANSWERS.split(chr(10)))}), as *quinze* is counting and "
                "French at once. The summary reads off which answer wins along w.")
    with gr.Row():
        task_a = gr.Dropdown(names, value=TASK_A, label="Task A")
        task_b = gr.Dropdown(names, value=TASK_B, label="Task B")
        prompt = gr.Textbox(DEFAULT_PROMPT, label="Query line")
        answers = gr.Textbox(DEFAULT_ANSWERS, lines=3, label="Answers to score (one per line)")
    with gr.Row():
        w = gr.Slider(0, 1, value=0.5, step=0.05, label="w (weight of task A)", elem_id="soup-w")
        mix2 = gr.Button("Mix the two skills", variant="primary", elem_id="soup-two-run")
    two_summary = gr.Markdown(label="Two-task summary")
    two_fig = gr.Plot(label="Answer losses vs w", elem_id="soup-two")
    with gr.Accordion("Generations at every w", open=False):
        two_table = gr.Dataframe(pd.DataFrame(columns=two_task_columns(DEFAULT_ANSWERS.split("\n"))),
                                 label="Generations", interactive=False)
        two_data = gr.JSON(label="Two-task data")

    gr.Markdown("### A-decay mixing of sequential chunks (sec. 2.3)\nCut the corpus into windows c1, c2, test; "
                "score the test chunk from the state of c1 then c2 (concat), from x(c2) + A(c2)·x(c1) "
                "(A-decay: exact for one layer), from the mean of the two states, and from c2 alone.")
    note(decay_limits(res), "soup-decay-limits")
    with gr.Row():
        chunk_tokens = gr.Slider(16, 200, value=100, step=4, label="Tokens per chunk")
        documents = gr.Slider(1, 50, value=10, step=1, label="Windows")
        decay_run = gr.Button("Compare", variant="primary", elem_id="soup-decay-run")
    decay_summary = gr.Markdown(label="A-decay summary")
    decay_fig = gr.Plot(label="Loss on the test chunk", elem_id="soup-decay")
    with gr.Accordion("A-decay data", open=False):
        decay_table = gr.Dataframe(pd.DataFrame(columns=["method", "mean loss"]), label="Mean loss per method",
                                   interactive=False)
        decay_data = gr.JSON(label="A-decay data")
    py_code, client_code = show_code()

    def map_endpoint(layer, part, method, dim, demos="", top=5, progress=gr.Progress()):
        """The library's states projected at one layer (with typed demonstrations marked)."""
        return soup_map(res, layer, part, method, dim, demos, top, progress=progress)

    def place_endpoint(layer, part, method, dim, demos, top, progress=gr.Progress()):
        return soup_map(res, layer, part, method, dim, demos, top, require_demos=True, progress=progress)

    def retrieve_endpoint(demos, layer=n_layer // 2, part="ssm", top=5):
        """The tasks of the library states nearest to the state of the demonstrations."""
        _, table, data = retrieve(res, demos, layer, part, top)
        return table, data

    def retrieval_endpoint(queries=4, part="ssm", progress=gr.Progress()):
        """Top-1 task retrieval accuracy vs k per layer."""
        return retrieval_curve(res, queries, part, progress)

    def mixing_endpoint(queries=3, progress=gr.Progress()):
        """Soup of states vs shots, and retrieval + mixing."""
        return mixing(res, queries, progress)

    def two_task_endpoint(task_a=TASK_A, task_b=TASK_B, prompt=DEFAULT_PROMPT, answers=DEFAULT_ANSWERS, w=0.5,
                          progress=gr.Progress()):
        """Weighted mixing of two skills' states."""
        return two_task(res, task_a, task_b, prompt, answers, w, progress)

    def decay_endpoint(chunk_tokens=100, documents=10, progress=gr.Progress()):
        """A-decay vs concat vs mean vs c2 alone on sequential chunks."""
        return decay(res, chunk_tokens, documents, progress)

    map_out = [fig, quality, summary, retrieved, map_data, py_code, client_code]
    map_in = [layer, part, method, dim, demos, top]
    run.click(map_endpoint, map_in, map_out, api_name="soup_map", preprocess=False,
              concurrency_limit=2, concurrency_id="soup-map")
    place.click(place_endpoint, map_in, map_out, api_visibility="private",
                preprocess=False, concurrency_limit=2, concurrency_id="soup-map")
    gr.on([layer.release, part.change, method.change, dim.change], map_endpoint, map_in, map_out,
          api_visibility="private", preprocess=False, concurrency_limit=2, concurrency_id="soup-map",
          trigger_mode="always_last")
    # API only: a hidden button carries the /soup_retrieve endpoint
    hidden = gr.Button(visible=False)
    hidden.click(retrieve_endpoint, [demos, layer, part, top], [retrieved, map_data], api_name="soup_retrieve",
                 preprocess=False, concurrency_limit=2, concurrency_id="soup-map")
    curves.click(retrieval_endpoint, [queries, curves_part], [ret_fig, ret_summary, ret_data, py_code, client_code],
                 api_name="soup_retrieval", preprocess=False, concurrency_limit=1, concurrency_id="soup-heavy").then(
        mixing_endpoint, [queries], [mix_fig, mix_summary, mix_table, mix_data, py_code, client_code],
        api_name="soup_mixing", preprocess=False, concurrency_limit=1, concurrency_id="soup-heavy")
    gr.on([mix2.click, w.release], two_task_endpoint, [task_a, task_b, prompt, answers, w],
          [two_fig, two_summary, two_table, two_data, py_code, client_code], api_name="soup_two_task",
          preprocess=False, concurrency_limit=2, trigger_mode="always_last")
    decay_run.click(decay_endpoint, [chunk_tokens, documents],
                    [decay_fig, decay_summary, decay_table, decay_data, py_code, client_code], api_name="soup_decay",
                    preprocess=False, concurrency_limit=1, concurrency_id="soup-heavy")

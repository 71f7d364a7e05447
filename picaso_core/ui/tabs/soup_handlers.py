"""The State soup tab's handlers: plain functions of the app's Resources (tested without a server),
each returning what the tab shows and its plain data; picaso_core.ui.tabs.soup lays them out and
names their API endpoints.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from picaso_core.analysis import soup, soup_mixing, soup_projection
from picaso_core.data.skills import ARROW, format_query
from picaso_core.plots import soup as plots
from picaso_core.session import Resources
from picaso_core.ui import budget
from picaso_core.ui.code import client_snippet
from picaso_core.ui.errors import bad_input, choice, clip, text, whole_number
from picaso_core.ui.tabs.soup_lab import PER_TASK, SEED, SHOTS, lab_for
from picaso_core.ui.tabs.soup_text import (best_layer_sentence, mixing_summary, shuffled_twin_sentence,
                                           two_task_story)

KS = (1, 2, 4, 8, 16)
METHOD_LABEL = {"pca": "PCA", "tsne": "t-SNE", "umap": "UMAP"}
PART_LABEL = {"ssm": "SSM state", "conv": "conv state"}
DEFAULT_METHOD = "tsne"  # the paper's maps (fig. 1, 4); PCA separates less (fig. 5)
# The two-skill default: English→French and singular→plural on a test word of both. On the demo model
# the mix switches from "doors" (w <= 0.4) to "porte" (w >= 0.5) and never writes the composition
# "portes" (scripts/measure_soup.py; capitalize's soup state writes "porte" too, so it shows nothing).
TASK_A, TASK_B = "english_french", "singular_plural"
TWO_TASK_WORD = "door"
# Input caps, checked before any work: 64 demonstration lines (the library's are 16), one query
# line, a few answers (each is scored at 12 weights).
MAX_DEMO_CHARS, MAX_DEMO_LINES = 4000, 64
MAX_PROMPT_CHARS, MAX_ANSWERS_CHARS, MAX_ANSWERS = 200, 1000, 10
# One answer to score is a line of the plot's legend and a column header of the generations table:
# a longer one would push the plot aside (a 1,000-character answer makes a legend wider than the page).
MAX_ANSWER_CHARS = 100


def _two_task_default() -> tuple[str, str]:
    """A query both default skills answer, and the three answers to score: A's, B's, and both
    composed (the French plural; the paper's "quinze" is counting composed with English-French)."""
    a = dict(soup.skill_tasks("all", False)[TASK_A])[TWO_TASK_WORD]
    b = dict(soup.skill_tasks("all", False)[TASK_B])[TWO_TASK_WORD]
    return format_query(TWO_TASK_WORD), "\n".join([a, b, a + "s"])


DEFAULT_PROMPT, DEFAULT_ANSWERS = _two_task_default()


# ---- input checks -----------------------------------------------------------------------------
def _choice(name: str, value, choices, endpoint: str):
    return choice(name, value, choices, endpoint)


def _layer(res: Resources, value, endpoint: str) -> int:
    n = res.state_layers  # a hybrid's states stack its Mamba layers only
    kind = "Mamba layers" if not res.layout.pure_ssm else "layers"
    return whole_number(f"layer (this model's states have {kind} 0..{n - 1})", value, 0, n - 1, endpoint)


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
            raise bad_input(f"line {i} ({clip(repr(line), 30)}) is not 'question {ARROW} answer': write one "
                            f"demonstration per line, such as 'cat {ARROW} cats'", endpoint)
    return "".join(f"{q.strip()} {ARROW} {a.strip()}\n" for q, _, a in
                   (line.replace("->", ARROW).partition(ARROW) for line in lines))


def _progress(progress, desc: str):
    return lambda done, total: progress(done / max(total, 1), desc=f"{desc} ({done}/{total})")



# ---- handlers ---------------------------------------------------------------------------------
def retrieve(res: Resources, demos: str, layer: int = None, part: str = "ssm", top: int = 5):
    """/soup_retrieve: the library states nearest to the state of typed demonstrations."""
    ep = "/soup_retrieve"
    demos = _demos_text(demos, ep, required=True)
    layer = _layer(res, res.state_layers // 2 if layer is None else layer, ep)
    part = _choice("part", part, soup.PARTS, ep)
    top = whole_number("top", top, 1, 50, ep)
    budget.check(ep, budget.lines(demos.count("\n")))
    lib = lab_for(res).library()
    state = res.model.encode_context(res.model.tokenizer.encode(demos))
    near = lib.nearest(state, layer, part, top)
    rows = [{"rank": r + 1, "task": lib.tasks[i], "cosine": round(s, 4), "demonstration": clip(lib.texts[i].strip().replace("\n", " | "), 90)}
            for r, (i, s) in enumerate(near)]
    return state, pd.DataFrame(rows), {"layer": layer, "part": part, "retrieved": rows}


def soup_map(res: Resources, layer=None, part: str = "ssm", method: str = DEFAULT_METHOD, dim: int = 2,
             demos: str = "", top: int = 5, require_demos: bool = False, progress=lambda *a, **k: None):
    """/soup_map: the library projected at one layer; with demonstrations, their state is marked
    and its nearest library states listed. Returns (map, quality, summary, retrieved, data, py, client)."""
    ep = "/soup_map"
    layer = _layer(res, res.state_layers // 2 if layer is None else layer, ep)
    part = _choice("part", part, soup.PARTS, ep)
    method = _choice("method", method, soup_projection.PROJECTIONS, ep)
    dim = whole_number("dim", dim, 2, 3, ep)
    demos = _demos_text(demos, ep, required=require_demos)
    budget.check(ep, budget.lines(demos.count("\n")))
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
        summary += shuffled_twin_sentence(top_task, list(retrieved["task"]))
    lab.warm_umap()
    data = {"layer": layer, "part": part, "method": method, "dim": dim, "coords": coords.round(4).tolist(),
            "tasks": lib.tasks, "query": query, "retrieved": retrieved.to_dict("records"),
            "quality": q}
    py = (f"from picaso_core import load_model\nfrom picaso_core.analysis.soup import SkillLibrary\n"
          "from picaso_core.analysis.soup_projection import project\n\n"
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
    budget.check(ep, budget.soup_retrieval(queries, len(KS)))
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


# the mixing table's columns: soup_mixing.mixing_table's rows, then soup_mixing.retrieval_mixing's (m: soup
# size; retrieval_hit: the nearest library state is of the query's task); shown as the empty table's header
# before the first run
MIX_COLUMNS = ["k", "m", "method", "accuracy", "loss", "n", "retrieval_hit"]


def two_task_columns(answers: list[str]) -> list[str]:
    """The two-task table's columns: w, the generation at w, and the loss of each answer to score."""
    return ["w", "generation", *(f"loss “{a}”" for a in answers)]


def mixing(res: Resources, queries: int = 3, progress=lambda *a, **k: None):
    """/soup_mixing: fig. 2 left (soup of m k-shot states vs k shots vs all 16) and right
    (a k-shot query state mixed with its nearest library state)."""
    ep = "/soup_mixing"
    queries = whole_number("queries per task", queries, 1, 50, ep)
    budget.within(ep, queries, f"{queries} queries per task")
    lib = lab_for(res).library(_progress(progress, "encoding the skill library"))
    rows = soup_mixing.mixing_table(res.model, None, 16, KS, queries, SEED, _progress(progress, "mixing: soup vs shots"))
    rmix = soup_mixing.retrieval_mixing(res.model, lib, (1, 2, 4, 8), 1, None, "ssm", queries, SEED,
                                        _progress(progress, "retrieval + mixing"))
    summary = mixing_summary(rows, rmix)
    table = pd.DataFrame([{**r, "accuracy": round(r["accuracy"], 3), "loss": round(r["loss"], 4)} for r in rows + rmix],
                         columns=MIX_COLUMNS)
    py = ("from picaso_core.analysis.soup_mixing import mixing_table, retrieval_mixing\n"
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
    budget.check(ep, budget.soup_two_task(len(answer_list), len(res.model.tokenizer.encode(prompt))))
    lib = lab_for(res).library(_progress(progress, "encoding the skill library"))
    xa, xb = soup_mixing.task_state(lib, task_a), soup_mixing.task_state(lib, task_b)
    ws = sorted(set(np.round(np.linspace(0, 1, 11), 2).tolist()) | {round(w, 3)})
    progress(0.5, desc="mixing and generating")
    rows = soup_mixing.two_task_mix(res.model, xa, xb, prompt, answer_list, ws)
    scored = list(dict.fromkeys(answer_list))  # an answer typed twice is scored once
    table = pd.DataFrame([[r["w"], r["generation"], *(round(r["losses"][a], 3) for a in scored)] for r in rows],
                         columns=two_task_columns(scored))
    summary = two_task_story(rows, w, task_a, task_b, prompt)
    py = ("from picaso_core.analysis.soup_mixing import task_state, two_task_mix\n"
          f"rows = two_task_mix(model, task_state(lib, {task_a!r}), task_state(lib, {task_b!r}), {prompt!r}, {answer_list!r})\n")
    return (plots.two_task_figure(rows, w, task_a, task_b), summary, table, {"rows": rows}, py,
            client_snippet("/soup_two_task", task_a=task_a, task_b=task_b, prompt=prompt, answers="\n".join(answer_list), w=w))


DECAY_WHAT = "A-decay mixing (x(c2) + A(c2)·x(c1), a state built from the SSM part alone)"


def decay(res: Resources, chunk_tokens: int = 100, documents: int = 10, progress=lambda *a, **k: None):
    """/soup_decay: loss on a test chunk after c1, c2 from concat / A-decay / mean / c2 alone,
    over windows of the corpus (sec. 2.3, fig. 3)."""
    ep = "/soup_decay"
    if res.pure_ssm_only(DECAY_WHAT):
        raise bad_input(res.pure_ssm_only(DECAY_WHAT), ep)
    chunk_tokens = whole_number("chunk tokens", chunk_tokens, 8, 400, ep)
    documents = whole_number("documents", documents, 1, 200, ep)
    budget.check(ep, budget.soup_decay(chunk_tokens, documents))
    try:
        chunks = soup_mixing.document_chunks(list(res.database.values()), res.model.tokenizer, chunk_tokens, documents)
    except ValueError as e:
        raise bad_input(str(e), ep) from None
    t = soup_mixing.decay_table(res.model, chunks, _progress(progress, "comparing states"))
    m = t["mean_loss"]
    summary = (f"Over {t['n']} windows of 3 × {chunk_tokens} tokens: concat **{m['concat']:.3f}**, A-decay "
               f"**{m['a_decay']:.3f}**, mean **{m['mean']:.3f}**, c2 alone **{m['c2_only']:.3f}** nats/token; A-decay "
               f"beats the mean on {t['wins']['a_decay<mean']:.0%} of windows. The paper (Mamba 2.8B, news): "
               "concat best, then A-decay, ahead of mean-mixing and c2 alone.")
    table = pd.DataFrame([{"method": plots.DECAY_LABEL[k], "mean loss": round(v, 4)} for k, v in m.items()])
    py = ("from picaso_core.analysis.soup_mixing import document_chunks, decay_table\n"
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

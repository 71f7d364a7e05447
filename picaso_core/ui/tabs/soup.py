"""State soup: a library of in-context skills kept as states (Pióro et al. 2024), its map per layer,
task retrieval by state similarity, and mixing of states.

`render` lays the tab out; its handlers are plain functions in soup_handlers (tested without a
server), the skill library and its caches in soup_lab. API endpoints (every one returns its plain
data as a JSON output beside the display):
    /soup_map        layer, part, method, dim, demos → the map's coordinates and labels
    /soup_retrieve   demos, layer, part, top → the tasks the demonstration's state retrieves
    /soup_retrieval  queries, part → top-1 task retrieval accuracy vs k per layer (sec. 2.1)
    /soup_mixing     queries → soup vs k shots vs all shots, and retrieval + mixing (sec. 2.2)
    /soup_two_task   task_a, task_b, prompt, answers, w → weighted mix of two skills
    /soup_decay      chunk_tokens, documents → A-decay vs concat vs mean vs c2 alone (sec. 2.3)
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from picaso_core.analysis import soup
from picaso_core.session import Resources
from picaso_core.ui import budget
from picaso_core.ui.code import show_code
from picaso_core.ui.limits import count_slider, note
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import MODEL
from picaso_core.ui.tabs.soup_handlers import (DECAY_WHAT, DEFAULT_ANSWERS, DEFAULT_METHOD, DEFAULT_PROMPT, MIX_COLUMNS,
                                               TASK_A, TASK_B, decay, decay_limits, mixing, retrieval_curve, retrieve,
                                               soup_map, two_task, two_task_columns)

TITLE = "State soup"
LOOK_AT = (
    "**What to look at:** each dot is the state of one 16-shot demonstration of a skill; dots of one "
    "task gather in a cluster (the paper's fig. 1), the label-shuffled twins (open circles) too, "
    "although their answers are arbitrary. Move the layer slider to see where tasks separate: the panel "
    "below counts it per layer without any projection, and the summary names the best layer. Type a few "
    "demonstrations to see where their state lands and which skills it retrieves."
)


# ---- layout -----------------------------------------------------------------------------------
def render(res: Resources) -> None:
    n_layer = res.state_layers  # a hybrid's states stack its Mamba layers only
    names = soup.task_names()
    gr.Markdown(
        "A **skill library** of states: the state after reading a 16-shot demonstration (`question → answer` "
        "lines) of each in-context task, 12 per task, and a label-shuffled twin of every task. *(State Soup: "
        "In-Context Skill Learning, Retrieval and Mixing, Pióro et al. 2024.)*  \n" + LOOK_AT)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280):
            layer = count_slider(0, n_layer - 1, n_layer // 2, label="Mamba layer" if not res.layout.pure_ssm else "Layer",
                                 elem_id="soup-layer")
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
        queries = gr.Slider(1, budget.CAPS["/soup_mixing"].most, value=4, step=1, label="Queries per task and k")
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
    gr.Markdown(res.pure_ssm_only(DECAY_WHAT), visible=not res.layout.pure_ssm, elem_id="soup-decay-hybrid", elem_classes="px-note")
    with gr.Row():
        chunk_tokens = gr.Slider(16, 200, value=100, step=4, label="Tokens per chunk")
        documents = gr.Slider(1, 50, value=10, step=1, label="Windows")
        decay_run = gr.Button("Compare", variant="primary", elem_id="soup-decay-run", interactive=res.layout.pure_ssm)
    decay_summary = gr.Markdown(label="A-decay summary")
    decay_fig = gr.Plot(label="Loss on the test chunk", elem_id="soup-decay")
    with gr.Accordion("A-decay data", open=False):
        decay_table = gr.Dataframe(pd.DataFrame(columns=["method", "mean loss"]), label="Mean loss per method",
                                   interactive=False)
        decay_data = gr.JSON(label="A-decay data")
    py_code, client_code = show_code()

    @gpu(duration=60)
    def map_endpoint(layer, part, method, dim, demos="", top=5, progress=gr.Progress()):
        """The library's states projected at one layer (with typed demonstrations marked)."""
        return soup_map(res, layer, part, method, dim, demos, top, progress=progress)

    @gpu(duration=60)
    def place_endpoint(layer, part, method, dim, demos, top, progress=gr.Progress()):
        return soup_map(res, layer, part, method, dim, demos, top, require_demos=True, progress=progress)

    @gpu(duration=30)
    def retrieve_endpoint(demos, layer=n_layer // 2, part="ssm", top=5):
        """The tasks of the library states nearest to the state of the demonstrations."""
        _, table, data = retrieve(res, demos, layer, part, top)
        return table, data

    @gpu(duration=120)
    def retrieval_endpoint(queries=4, part="ssm", progress=gr.Progress()):
        """Top-1 task retrieval accuracy vs k per layer."""
        return retrieval_curve(res, queries, part, progress)

    @gpu(duration=120)
    def mixing_endpoint(queries=3, progress=gr.Progress()):
        """Soup of states vs shots, and retrieval + mixing."""
        return mixing(res, queries, progress)

    @gpu(duration=30)
    def two_task_endpoint(task_a=TASK_A, task_b=TASK_B, prompt=DEFAULT_PROMPT, answers=DEFAULT_ANSWERS, w=0.5,
                          progress=gr.Progress()):
        """Weighted mixing of two skills' states."""
        return two_task(res, task_a, task_b, prompt, answers, w, progress)

    @gpu(duration=60)
    def decay_endpoint(chunk_tokens=100, documents=10, progress=gr.Progress()):
        """A-decay vs concat vs mean vs c2 alone on sequential chunks."""
        return decay(res, chunk_tokens, documents, progress)

    map_out = [fig, quality, summary, retrieved, map_data, py_code, client_code]
    map_in = [layer, part, method, dim, demos, top]
    run.click(map_endpoint, map_in, map_out, api_name="soup_map", preprocess=False, **MODEL)
    place.click(place_endpoint, map_in, map_out, api_visibility="private",
                preprocess=False, **MODEL)
    gr.on([layer.release, part.change, method.change, dim.change], map_endpoint, map_in, map_out,
          api_visibility="private", preprocess=False, trigger_mode="always_last", **MODEL)
    # API only: a hidden button carries the /soup_retrieve endpoint
    hidden = gr.Button(visible=False)
    hidden.click(retrieve_endpoint, [demos, layer, part, top], [retrieved, map_data], api_name="soup_retrieve",
                 preprocess=False, **MODEL)
    curves.click(retrieval_endpoint, [queries, curves_part], [ret_fig, ret_summary, ret_data, py_code, client_code],
                 api_name="soup_retrieval", preprocess=False, **MODEL).then(
        mixing_endpoint, [queries], [mix_fig, mix_summary, mix_table, mix_data, py_code, client_code],
        api_name="soup_mixing", preprocess=False, **MODEL)
    gr.on([mix2.click, w.release], two_task_endpoint, [task_a, task_b, prompt, answers, w],
          [two_fig, two_summary, two_table, two_data, py_code, client_code], api_name="soup_two_task",
          preprocess=False, trigger_mode="always_last", **MODEL)
    decay_run.click(decay_endpoint, [chunk_tokens, documents],
                    [decay_fig, decay_summary, decay_table, decay_data, py_code, client_code], api_name="soup_decay",
                    preprocess=False, **MODEL)

"""The Primer's first section: inside a Mamba block, one token at a time (issue 50).

For a text, a layer and a head, every stage of the block for every token, recorded at the engine's own
call sites (picaso_core.lab.block_walk), sent to the page once and walked there (primer_block_js:
Step, Play at a pace, the token slider; no server event per token). The block starts from zeros, from
a context's stored state or from a composed one (PICASO-R of the Compose tab's contexts for its
default example), and the state can be shown as its difference to the walk from zeros.

    Client(url).predict(text="...", token=3, layer=1, head=0, start="zeros", api_name="/block_walk")

returns each stage's tensors for one token and layer as plain data (small ones whole, large ones as
shape and statistics). The walk the section opens on is the tour's step "What is a state?".
"""

from __future__ import annotations

import gradio as gr
import torch

from picaso_core.compose import compose
from picaso_core.data import DEMO_COMPOSE_EXAMPLE
from picaso_core.lab import block_walk as lab
from picaso_core.plots.block_walk import state_snapshots_figure
from picaso_core.session import Resources
from picaso_core.ui import budget
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, choice, text, whole_number
from picaso_core.ui.layout import PageLoad
from picaso_core.ui.limits import count_slider
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import MODEL
from picaso_core.ui.tabs.primer_block_js import CSS, JS, TEMPLATE

K_CONTEXTS = 5  # the composed start: the Compose tab's default k
STARTS = {"zeros": "zeros (an empty state)", "context": "a context's stored state",
          "composed": "a composed state (PICASO-R)"}
ENDPOINT, VIEW = "/block_walk", "/block_walk_view"

SAY = (
    "What happens inside one Mamba block as a token arrives, with the loaded model's own numbers "
    "(recorded where the engine computes them). **Step ▶** walks the eight stages of one token, then the next; "
    "**▶ Play** runs at the pace you set, stage by stage or token by token. The bottom row is the **state** "
    "h of one head, P × N numbers, updated by every token: what PICASO stores for a context and composes. "
    "Start from a context's stored state or a composed one, and tick *difference to zeros* to see how much of it "
    "the query's tokens still read.")


# ---- start states and default text -------------------------------------------------------------------
def _example(res: Resources):
    """The Compose tab's default example (else the corpus's first sample), or None."""
    samples = res.corpus.samples
    return next((s for s in samples if s.sample_id == DEMO_COMPOSE_EXAMPLE), samples[0] if samples else None)


def default_text(res: Resources) -> str:
    """The Compose tab's default query: the text whose reading a composed state is meant to help."""
    s = _example(res)
    return s.query if s is not None and s.query.strip() else "A state space model reads one token at a time."


def start_state(res: Resources, start: str):
    """(the start state or None for zeros, a line saying what it is). Contexts: the Compose tab's
    retrieval for its default example, most relevant last; "context" is that most relevant one."""
    if start == "zeros":
        return None, "from zeros (an empty state)"
    s = _example(res)
    if s is None or not res.database:
        raise bad_input("This corpus has no contexts to start from: start from zeros.", VIEW)

    def made():
        k = min(K_CONTEXTS, len(res.database))
        hits, _ = res.servable(lambda skip: res.retriever.retrieve(s.query, k, exclude=tuple(s.exclude_ids) + skip,
                                                                   best_last=True))
        ids = [cid for cid, _ in hits]
        if not ids:
            raise bad_input("No stored context can be served on this corpus: start from zeros.", VIEW)
        return ids, res.states(ids)

    ids, states = res.derived("block_walk_contexts", made)
    if start == "context":
        return states[-1], f"from the stored state of context `{ids[-1]}` ({int(states[-1].num_tokens)} tokens)"
    named = ", ".join(f"`{c}`" for c in ids)
    return compose("picaso_r", states, config=res.model), f"from PICASO-R of {len(ids)} contexts ({named})"


# ---- input checks and handlers ------------------------------------------------------------------------
def _ids(res: Resources, value, endpoint: str) -> tuple[list[int], list[str]]:
    t = text("text", value, endpoint)
    if not t.strip():
        raise bad_input("Type a text for the block to read.", endpoint)
    tok = res.model.tokenizer
    ids = tok.encode(t)
    budget.within(endpoint, len(ids), f"The text holds {len(ids):,} tokens")
    return ids, [s.replace("\n", "⏎") for s in tok.token_strings(ids)]


WHAT = "The block walk (every layer a Mamba block)"


def _where(res: Resources, layer, head, start, endpoint: str) -> tuple[int, int, str]:
    if not res.layout.pure_ssm:  # lab.block_walk records a pure model's Mamba blocks
        raise bad_input(res.pure_ssm_only(WHAT), endpoint)
    cfg = res.model.config
    layer = whole_number("layer", layer, 0, cfg.n_layer - 1, endpoint)
    head = whole_number("head" if res.layout.ssm_kind == "mamba2" else f"head (a group of {lab.GROUP} channels)", head, 0,
                        lab.n_heads(res.model) - 1, endpoint)
    return layer, head, choice("start", start, list(STARTS), endpoint)


def facts(res: Resources, walk_data: dict, rec: dict) -> dict:
    """The numbers the tour's text is read from: sizes, this head's decays and state norms."""
    cfg, head = res.model.config, walk_data["head"]
    sl, _ = lab.head_slice(res.model, head)
    decay = rec["decay"][:, sl]
    norms = rec["h"][:, sl].flatten(1).norm(dim=-1)
    shapes = cfg.state_shapes()
    return {"layer": walk_data["layer"], "head": head, "tokens": walk_data["T"], "family": cfg.family,
            "P": walk_data["dims"]["P"], "N": walk_data["dims"]["N"],
            "layer_numbers": int(torch.tensor(shapes["ssm"][1:]).prod()), "layers": cfg.n_layer,
            "model_numbers": int(sum(torch.tensor(s).prod() for s in shapes.values())),
            "bytes": int(cfg.state_nbytes()), "decay_min": float(decay.min()), "decay_max": float(decay.max()),
            "norm_first": float(norms[0]), "norm_last": float(norms[-1])}


def walk_view(res: Resources, text_in=None, layer=None, head=0, start="zeros"):
    """The section's event: the walk (for the page), a summary line, and its code snippets; None: the
    section's defaults (the Compose example's query, layer 1 or the only one)."""
    text_in = default_text(res) if text_in is None else text_in
    layer = min(1, res.model.config.n_layer - 1) if layer is None else layer
    ids, tokens = _ids(res, text_in, VIEW)
    layer, head, start = _where(res, layer, head, start, VIEW)
    state, said = start_state(res, start)
    rec = lab.record(res.model, ids, state, [layer])
    data = lab.walk(res.model, ids, layer, head, state, tokens, recorded=rec)
    data["start"], data["start_said"] = start, said
    f = facts(res, data, rec[layer])
    md = (f"{len(ids)} tokens, layer {layer}, {'head' if res.layout.ssm_kind == 'mamba2' else 'channel group'} {head}, "
          f"{said}. This head keeps a share a = exp(Δ·A) of its state per token, here **{f['decay_min']:.3f} to "
          f"{f['decay_max']:.3f}**; its state holds {f['P']} × {f['N']} numbers, the layer's "
          f"{f['layer_numbers']:,}, the model's {f['model_numbers']:,} whatever the text's length.")
    return (data, md, *_code(text_in, layer, head, start)), f, rec[layer]


def block_walk(res: Resources, text_in, token=0, layer=0, head=0, start="zeros") -> dict:
    """/block_walk: every stage of `layer` for token `token` (0-based) of the text, as plain data."""
    ids, tokens = _ids(res, text_in, ENDPOINT)
    layer, head, start = _where(res, layer, head, start, ENDPOINT)
    token = whole_number("token", token, 0, len(ids) - 1, ENDPOINT)
    state, said = start_state(res, start)
    out = lab.token_stages(res.model, ids, token, layer, head, state)
    return {**out, "token_text": tokens[token], "tokens": tokens, "start": start, "start_said": said}


def _code(text_in, layer, head, start) -> tuple[str, str]:
    py = ("from picaso_core.session import load_resources\nfrom picaso_core.lab.block_walk import token_stages\n"
          "res = load_resources('demo')\nids = res.model.tokenizer.encode(" + repr(text_in) + ")\n"
          f"print(token_stages(res.model, ids, token=0, layer={layer}, head={head})['stages']['state'])\n")
    return py, client_snippet(ENDPOINT, text=text_in, token=0, layer=layer, head=head, start=start)


def tour_view(res: Resources, text_in=None, layer=1, head=0, start="zeros"):
    """What the tour's step shows: the section's outputs, its facts and the bar's figure."""
    layer = min(int(layer), res.model.config.n_layer - 1)
    outputs, f, rec = walk_view(res, text_in, layer, head, start)
    sl, _ = lab.head_slice(res.model, outputs[0]["head"])
    h = rec["h"][:, sl]
    m2 = res.layout.ssm_kind == "mamba2"
    h = h[:, 0] if m2 else h[:, :, 0]  # [T, P, N] (Mamba-1: the group's channels x N)
    where = f"head {f['head']}" if m2 else f"channels of group {f['head']}"
    fig = state_snapshots_figure(h, outputs[0]["tokens"], f"The state of layer {f['layer']}, {where}, as the text is read")
    return outputs, f, fig


# ---- layout ------------------------------------------------------------------------------------------
def render(res: Resources) -> list[PageLoad]:
    cfg = res.model.config
    gr.Markdown("### Inside a Mamba block, one token at a time\n" + SAY)
    gr.Markdown(res.pure_ssm_only(WHAT), visible=not res.layout.pure_ssm, elem_id="walk-hybrid", elem_classes="px-note")
    with gr.Row(equal_height=False):
        text_box = gr.Textbox(default_text(res), label="Text the block reads", lines=1, scale=4, elem_id="walk-text",
                              info=f"at most {budget.CAPS[VIEW].most} tokens")
        start = gr.Radio([(v, k) for k, v in STARTS.items()], value="zeros", label="The block starts from",
                         elem_id="walk-start", scale=3)
    with gr.Row(equal_height=False):
        layer = count_slider(0, cfg.n_layer - 1, min(1, cfg.n_layer - 1), label="walk layer", elem_id="walk-layer")
        head = count_slider(0, lab.n_heads(res.model) - 1, 0, elem_id="walk-head",
                            label="walk head" if res.layout.ssm_kind == "mamba2" else f"walk channels (groups of {lab.GROUP})")
        run = gr.Button("Walk", variant="primary", elem_id="walk-run", scale=0, min_width=100,
                        interactive=res.layout.pure_ssm)
    # where the walk is (token, stage) lives in the page; these hidden twins carry it in a link
    # (tour.links.PAGE_HELD: Copy link reads the page's, primer_block_js applies a restored link's)
    gr.Number(0, precision=0, minimum=0, maximum=budget.CAPS[VIEW].most - 1, visible=False, label="walk token",
              elem_id="walk-token")
    gr.Dropdown(list(lab.STAGES), value="state", visible=False, label="walk stage", elem_id="walk-stage")
    md = gr.Markdown(label="Walk summary", elem_id="walk-md")
    walk = gr.HTML(None, label="Block walk", html_template=TEMPLATE, css_template=CSS, js_on_load=JS,
                   elem_id="primer-walk", min_height=480)
    py, cl = show_code()
    outs = [walk, md, py, cl]

    @gpu(duration=15)
    def block_walk_view(text, layer, head, start):
        """Every stage of one layer and head of the block for every token of the text (the page walks it)."""
        return walk_view(res, text, layer, head, start)[0]

    @gpu(duration=15)
    def block_walk_api(text: str, token: int = 0, layer: int = 0, head: int = 0, start: str = "zeros") -> dict:
        """Every stage of one layer of the block for one token (0-based) of the text, as plain data: small
        tensors whole (shape, values), large ones as shape and statistics. start: zeros | context | composed."""
        return block_walk(res, text, token, layer, head, start)

    @gpu(duration=15)
    def opening(shown):
        """The default walk, unless a walk is on screen already (a link's, or a click's before this load ran)."""
        if shown or not res.layout.pure_ssm:  # a hybrid: the section's note says why there is no walk
            return [gr.skip()] * len(outs)
        walk_data, *rest = res.derived("block_walk_default", lambda: walk_view(res)[0])
        return [{**walk_data, "opening": True}, *rest]

    gr.on([run.click, text_box.submit, layer.change, head.change, start.change], block_walk_view,
          [text_box, layer, head, start], outs, api_name="block_walk_view", preprocess=False,
          trigger_mode="always_last", **MODEL)
    gr.api(block_walk_api, api_name="block_walk", **MODEL)
    # the default walk: made once per process (the tour's step keeps the same one in its cache), sent
    # after a link's own figure (layout.defer_loads moves model-pool loads behind it)
    gr.on(None, opening, [walk], outs, api_visibility="private", **MODEL)
    return []

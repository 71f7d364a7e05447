"""Primer: what an SSM is, as in the lecture slides (seed 004), each point something a speaker can
move a slider on and a student can check: recurrence = convolution, eigenvalues and memory, static
vs selective Δ, Mamba-2 as attention with a structured mask, and complexity measured live.

Handlers are plain functions (tested without a server) over picaso_core.lab.primer and
picaso_core.lab.complexity; figures come from picaso_core.plots.primer. API endpoints, one per action:
    Client(url).predict(magnitude=0.9, phase=20, N=4, T=96, api_name="/primer_lti")
    Client(url).predict(selectivity=1.0, api_name="/primer_selective")
    Client(url).predict(text="...", api_name="/primer_model")
    Client(url).predict(text="...", layer=0, head=0, api_name="/primer_attention")
    Client(url).predict(lengths="256, 512, 1024, 2048, 4096", one_thread=True, api_name="/primer_complexity")
and the block walk's (picaso_core.ui.tabs.primer_block):
    Client(url).predict(text="...", token=3, layer=1, head=0, start="zeros", api_name="/block_walk")
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import gradio as gr
import pandas as pd
import torch

from picaso_core.light.assets import ASSETS
from picaso_core.lab import primer as lab
from picaso_core.lab.complexity import SERIES, measure_complexity
from picaso_core.plots import primer as P
from picaso_core.session import Resources
from picaso_core.ui import budget
from picaso_core.ui.code import client_snippet, show_code
from picaso_core.ui.errors import bad_input, flag, text, whole_number
from picaso_core.ui.limits import count_slider
from picaso_core.ui.server.gpu import gpu
from picaso_core.ui.server.serving import LIGHT, MODEL
from picaso_core.ui.tabs import primer_block

TITLE = "Primer"
DEFAULT_TEXT = ("Velmora is a city on the river Quell. It was founded in 1423 by Osric Dallen, "
                "and because of its blue glass, traders came from far away.")
MAX_TEXT_TOKENS = 256  # memory and Δ per token: one forward of the loaded model
MAX_M_TOKENS = 128  # the T x T matrix M: a heatmap past ~128 tokens is unreadable
MAX_LENGTH, MAX_LENGTHS = 16384, 8  # the live measurement (docs/primer.md's table comes from the CLI)
REFERENCE_LAMBDAS = (0.5, 0.9)  # impulse responses drawn beside the slider's eigenvalue
SHIPPED = ASSETS / "primer_complexity.json"  # bench/primer_complexity.py --ship

SLIDES_TABLE = """| Model | Training time | Memory | Autoregressive step |
|---|---|---|---|
| Transformer (self-attention) | O(T²) | O(T²) | O(T) |
| LTI SSM (static) | O(T) or O(T log T) | O(T) | O(1) |
| Mamba (selective) | O(T) | O(T) | O(1) |
| Mamba-2 (SSD) | O(T) (faster constant) | O(T) | O(1) |"""

SAY = {
    "lti": (
        "An SSM keeps a state *h* and updates it with every input: **h<sub>t</sub> = A h<sub>t−1</sub> + B x<sub>t</sub>**, "
        "and reads it out with **y<sub>t</sub> = C h<sub>t</sub>**. Unroll the loop and each output is a weighted sum of all past "
        "inputs, with weight **K<sub>i</sub> = C A<sup>i</sup> B** for the input *i* steps back: the recurrence *is* a "
        "convolution with kernel K. So an SSM can run step by step (cheap per token) or as one convolution over "
        "the whole sequence (parallel; with the FFT, O(T log T)). The right plot computes y all three ways: the "
        "lines lie on each other."),
    "memory": (
        "How long does an input stay in the state? Each eigenvalue λ of A multiplies it by λ every step, so after "
        "t steps |λ|<sup>t</sup> of it is left. |λ| close to 1: a wide pipe, long memory; |λ| ≪ 1: it is gone in a "
        "few steps. A complex λ rotates as it decays: the impulse response oscillates inside its envelope. "
        "**Memory** here is the number of steps until |λ|<sup>t</sup> falls below 1%."),
    "model": (
        "The same reading on the loaded model: a Mamba-2 head decays by **exp(Δ<sub>t</sub> A)** per token, so its "
        "memory in tokens follows from A and the step Δ the model chose on this text. Layers differ: some heads "
        "forget within a few tokens, others carry information across thousands."),
    "selective": (
        "A static (LTI) SSM treats every token alike: the same A, B, C, so the same kernel whatever the input. "
        "**Mamba makes the step Δ depend on the token**: a large Δ lets the token in and lets the past fade, a small "
        "Δ skips the token and keeps the past. Move *selectivity* from 0 (static) up: the selective SSM grabs "
        "the large inputs and holds them through the noise, where the static one blurs everything. Below, the "
        "loaded model's real Δ for your text: the tokens each layer lets in (red) and keeps out (blue)."),
    "attention": (
        "Mamba-2 writes the whole scan as one matrix: **y = M x** with **M<sub>ij</sub> = C<sub>i</sub>·B<sub>j</sub> Δ<sub>j</sub> "
        "exp(A(Δ<sub>j+1</sub> + … + Δ<sub>i</sub>))** below the diagonal, zero above. That is attention: C plays the "
        "query, B the key, x the value, and the softmax is replaced by the decay mask **L** (right). M is "
        "built here from one head of the loaded model, and M x is checked against what the model's own scan "
        "computed."),
    "complexity": (
        "The complexity table, measured rather than drawn. Attention over T tokens compares every pair: time "
        "grows like T² (slope 2 on log-log axes). The SSM scan reads each token once (slope 1). To generate one "
        "more token, attention reads its whole KV cache (slope 1) while the SSM updates a fixed-size state "
        "(slope 0). Press the button to measure it on this machine."),
}


# ---- input checks (raw API payloads: the events run with preprocess=False) -----------------------
def _number(name: str, value, lo: float, hi: float, endpoint: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and lo <= value <= hi
    if not ok:
        raise bad_input(f"{name} must be a number from {lo:g} to {hi:g}, got {str(value)[:40]!r}", endpoint)
    return float(value)


def _ids(res: Resources, value, endpoint: str, limit: int) -> tuple[list[int], list[str]]:
    t = text("text", value, endpoint)
    if not t.strip():
        raise bad_input("Type a text for the model to read.", endpoint)
    tok = res.model.tokenizer
    ids = tok.encode(t)
    if len(ids) > limit:
        raise bad_input(f"The text holds {len(ids)} tokens; this view reads at most {limit}. Shorten it.", endpoint)
    return ids, [s.replace("\n", "⏎") for s in tok.token_strings(ids)]


# ---- handlers: plain functions ------------------------------------------------------------------
def lti(magnitude=0.9, phase=20.0, N=4, T=96):
    """Recurrence, direct and FFT convolution of the demo system; eigenvalues and impulse responses."""
    ep = "/primer_lti"
    magnitude = _number("magnitude |λ|", magnitude, 0, 0.995, ep)
    phase = _number("phase (degrees)", phase, 0, 180, ep)
    N, T = whole_number("N (state size)", N, 1, 64, ep), whole_number("T (steps)", T, 8, 512, ep)
    budget.within(ep, N * T, f"N {N} x T {T} is {N * T:,} state-steps")
    A, B, C = lab.demo_system(magnitude, math.radians(phase), N)
    x = lab.toy_sequence(T, seed=1)
    ys = {"recurrence": lab.lti_recurrence(A, B, C, x), "convolution": lab.lti_convolution(A, B, C, x),
          "FFT convolution": lab.lti_convolution_fft(A, B, C, x)}
    diff = max(float((y - ys["recurrence"]).abs().max()) for y in ys.values())
    lam = complex(magnitude * math.cos(math.radians(phase)), magnitude * math.sin(math.radians(phase)))
    lams = [lam] + [complex(r) for r in REFERENCE_LAMBDAS if abs(r - magnitude) > 0.02]
    imp = lab.impulse_responses(lams, T)
    imp.update(tol=lab.DEFAULT_TOL, memory=[lab.memory_length(z) for z in lams])
    d = {"magnitude": magnitude, "phase": phase, "N": N, "T": T, "x": x.tolist(),
         "kernel": lab.lti_kernel(A, B, C, T).real.tolist(), "y": {k: v.tolist() for k, v in ys.items()},
         "max_diff": diff, "eigenvalues": [[z.real, z.imag] for z in A.tolist()], "impulse": imp}
    md = (f"|λ| = {magnitude:.3f}, phase {phase:.0f}°: an input is remembered for **{imp['memory'][0]} steps** "
          f"(until |λ|<sup>t</sup> < {lab.DEFAULT_TOL:g}). Recurrence, convolution and FFT agree to "
          f"**{diff:.1e}** (float64).")
    return (P.kernel_figure(d), P.eigen_figure(imp, [complex(*e) for e in d["eigenvalues"]]), md, d,
            *_code("lti", magnitude=magnitude, phase=phase, N=N, T=T))


def selective(selectivity=1.0):
    """The toy SSM, static vs selective Δ, on the toy input."""
    s = _number("selectivity", selectivity, 0, 3, "/primer_selective")
    d = lab.toy_selective(lab.toy_sequence(64), s)
    return P.selective_figure(d), d


def hybrid_note(res: Resources) -> str:
    """'' for a pure SSM; for a hybrid, what the model views read: its Mamba layers' scans only (lab.primer
    captures the scans; attention layers run none), numbered among the Mamba layers."""
    if res.layout.pure_ssm:
        return ""
    at = ", ".join(map(str, res.layout.ssm_layers))
    return (f"This model is a {res.layout.line()}: the memory, Δ and attention views below read its "
            f"**{res.state_layers} Mamba layers** only (attention layers run no scan). Layer i there is the i-th "
            f"Mamba layer; in the checkpoint they are layers {at}.")


def model_view(res: Resources, text_in=DEFAULT_TEXT):
    """The loaded model's memory per head and its Δ per token on a text (a hybrid: its Mamba layers)."""
    ids, tokens = _ids(res, text_in, "/primer_model", MAX_TEXT_TOKENS)
    budget.within("/primer_model", len(ids), f"{len(ids)} tokens")
    prof = lab.decay_profile(res.model, ids)
    prof["tokens"] = tokens
    rows = []
    for layer in prof["layers"]:
        fin = torch.tensor([m for m in layer["memory"] if m is not None], dtype=torch.float64)
        rows.append(f"layer {layer['layer']}: median **{fin.median():.0f}**, longest {fin.max():.0f} tokens"
                    if fin.numel() else f"layer {layer['layer']}: no decay")
    md = (f"{len(ids)} tokens read. Memory per head (tokens until the decay < {lab.DEFAULT_TOL:g}), "
          + "; ".join(rows) + "." + (" Layers are numbered among the Mamba layers." if not res.layout.pure_ssm else ""))
    return P.memory_figure(prof), P.delta_tokens_figure(prof, tokens), md, prof, *_code("model", text=text_in)


def attention_view(res: Resources, text_in=DEFAULT_TEXT, layer=0, head=0):
    """M and L for one layer and head, and M x against the engine's scan."""
    ep = "/primer_attention"
    cfg = res.model.config
    layer = whole_number("layer", layer, 0, res.state_layers - 1, ep)  # a hybrid: among its Mamba layers
    heads = cfg.nheads if res.layout.ssm_kind == "mamba2" else cfg.d_inner
    head = whole_number("head", head, 0, heads - 1, ep)
    ids, tokens = _ids(res, text_in, ep, MAX_M_TOKENS)
    budget.check(ep, budget.primer_attention(len(ids)))
    d = lab.semiseparable(res.model, ids, layer, head)
    d["tokens"] = tokens
    ok = d["relative_error"] <= 1e-4
    where = (f"Mamba layer {layer} (checkpoint layer {res.layout.ssm_layers[layer]})" if not res.layout.pure_ssm
             else f"Layer {layer}")
    md = (f"{where}, head {head}, {len(ids)} tokens, A = {d['A']:.3f}: **M x {'equals' if ok else 'differs from'} "
          f"the model's scan** — max |M x − scan| = {d['max_abs_diff']:.2e}, relative {d['relative_error']:.1e} "
          "(M in float64, the scan as the model ran it).")
    return P.attention_view_figure(d, tokens), md, d, *_code("attention", text=text_in, layer=layer, head=head)


def parse_lengths(value) -> list[int]:
    ep = "/primer_complexity"
    s = text("lengths", value, ep)
    try:
        ls = [int(p) for p in s.replace(",", " ").split()]
    except ValueError:
        raise bad_input(f"lengths must be whole numbers separated by commas, e.g. 256, 1024, 4096; got {s[:40]!r}", ep) from None
    if len(set(ls)) < 2 or len(ls) > MAX_LENGTHS or min(ls) < 2 or max(ls) > MAX_LENGTH:
        raise bad_input(f"give 2 to {MAX_LENGTHS} different lengths from 2 to {MAX_LENGTH} (a slope needs two); "
                        f"got {s[:40]!r}", ep)
    return sorted(set(ls))


def complexity_frame(r: dict) -> pd.DataFrame:
    """One row per T: seconds and MiB of the four series; a last row with the log-log slopes."""
    names = {k: P.SERIES_STYLE[k][0].split(" (")[0] for k in SERIES}
    rows = []
    for i, T in enumerate(r["lengths"]):
        row = {"T": str(T)}
        row.update({f"{names[k]} (ms)": round(r["seconds"][k][i] * 1e3, 3) for k in SERIES})
        row.update({f"{names[k]} (MiB)": round(r["peak_bytes"][k][i] / 2**20, 2) for k in SERIES})
        rows.append(row)
    slope = {"T": "log-log slope"}
    slope.update({f"{names[k]} (ms)": round(r["slopes"][k], 2) for k in SERIES})
    slope.update({f"{names[k]} (MiB)": round(r["memory_slopes"][k], 2) for k in SERIES})
    return pd.DataFrame(rows + [slope])


FLAT = 0.3  # |slope| below this reads "≈ 0": a flat series' fitted slope is timing noise around 0


def slope_text(v: float) -> str:
    """A measured slope for the text: "≈ 0" when |v| < FLAT (a constant time's slope scatters
    around 0 under load, e.g. -0.22 or +0.03 for the SSM step), else two decimals."""
    return f"≈ 0 ({v:+.2f})" if abs(v) < FLAT else f"{v:.2f}"


def slopes_md(r: dict) -> str:
    s = {k: slope_text(v) for k, v in r["slopes"].items()}
    return (f"Measured slopes (seconds vs T, log-log): attention prefill **{s['attention_prefill']}**, SSM scan "
            f"**{s['ssm_scan']}**, attention decode step **{s['attention_step']}**, SSM decode step "
            f"**{s['ssm_step']}** (the slides: 2, 1, 1, 0). Small T is dominated by fixed per-call costs, "
            "which pulls every slope down; longer T brings them closer.")


def shipped_complexity(path: Path = SHIPPED):
    """The figure, table and summary of the bundled measurement (None if it is missing)."""
    try:
        r = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    md = (f"Shown until you measure: T = {r['lengths'][0]} to {r['lengths'][-1]} measured on the development "
          f"machine ({r['device']}, {r['threads']} thread(s); `{r.get('command', 'bench/primer_complexity.py')}`). "
          + slopes_md(r))
    return P.complexity_figure(r), complexity_frame(r), md


def complexity(res: Resources, lengths="256, 512, 1024, 2048, 4096", one_thread=True, progress=lambda *a, **kw: None):
    """measure_complexity at the loaded model's width, with a progress bar. one_thread: measure with
    one torch thread on CPU. On cores shared with other work, two threads stall on each other at
    every small op and the slopes come out as noise; one thread measures the algorithm. The setting
    is process-wide for the ~20 s of the measurement (requests served meanwhile run on one thread)."""
    ls = parse_lengths(lengths)
    budget.check("/primer_complexity", budget.primer_complexity(ls))
    one_thread = flag("one_thread", one_thread, "/primer_complexity")
    cfg = res.model.config
    width = (dict(heads=cfg.nheads, headdim=cfg.ssm_cfg.headdim, d_state=cfg.ssm_cfg.d_state,
                  chunk_size=cfg.ssm_cfg.chunk_size) if res.layout.ssm_kind == "mamba2" else {})
    threads = 1 if one_thread and res.model.device.type == "cpu" else None
    r = measure_complexity(ls, device=res.model.device, threads=threads,
                           progress=lambda d, t, desc: progress(d / t, desc=desc), **width)
    md = slopes_md(r)
    return P.complexity_figure(r), complexity_frame(r), md, r, *_code("complexity", lengths=lengths, one_thread=one_thread)


def _code(which: str, **kw) -> tuple[str, str]:
    load = "from picaso_core.session import load_resources\nres = load_resources('demo')\n"
    py = {
        "lti": ("from picaso_core.lab.primer import demo_system, lti_recurrence, lti_convolution_fft, toy_sequence\n"
                "import math\n"
                f"A, B, C = demo_system({kw.get('magnitude')}, math.radians({kw.get('phase')}), {kw.get('N')})\n"
                f"x = toy_sequence({kw.get('T')}, seed=1)\n"
                "print((lti_recurrence(A, B, C, x) - lti_convolution_fft(A, B, C, x)).abs().max())\n"),
        "model": (f"from picaso_core.lab.primer import decay_profile\n{load}"
                  f"prof = decay_profile(res.model, res.model.tokenizer.encode({kw.get('text')!r}))\n"
                  "print([layer['memory'] for layer in prof['layers']])\n"),
        "attention": (f"from picaso_core.lab.primer import semiseparable\n{load}"
                      f"d = semiseparable(res.model, res.model.tokenizer.encode({kw.get('text')!r}), "
                      f"{kw.get('layer')}, {kw.get('head')})\nprint(d['max_abs_diff'], d['relative_error'])\n"),
        "complexity": ("from picaso_core.lab.complexity import measure_complexity\n"
                       f"r = measure_complexity([{', '.join(map(str, parse_lengths(kw.get('lengths', '256, 4096'))))}], "
                       f"threads={1 if kw.get('one_thread') else None})\n"
                       "print(r['slopes'])\n"),
    }[which]
    return py, client_snippet(f"/primer_{which}", **kw)


# ---- layout ---------------------------------------------------------------------------------------
def render(res: Resources) -> None:
    cfg = res.model.config
    n_heads = cfg.nheads if res.layout.ssm_kind == "mamba2" else cfg.d_inner
    live = dict(preprocess=False, trigger_mode="always_last", show_progress="hidden")

    primer_block.render(res)  # first: what one block does with a token, and what its state is (issue 50)
    gr.Markdown("### 1. Recurrence = convolution\n" + SAY["lti"])
    with gr.Row():
        magnitude = gr.Slider(0, 0.995, value=0.9, step=0.005, label="eigenvalue magnitude |λ|", elem_id="primer-magnitude")
        phase = gr.Slider(0, 180, value=20, step=1, label="eigenvalue phase (degrees)", elem_id="primer-phase")
        N = gr.Slider(1, 64, value=4, step=1, label="N (state size)", info="eigenvalues from |λ| down to |λ|⁴")
        T = gr.Slider(8, 512, value=96, step=8, label="T (steps)")
    lti_md = gr.Markdown(label="Recurrence vs convolution", elem_id="primer-lti-md")
    kernel_plot = gr.Plot(label="Kernel and outputs", elem_id="primer-kernel")
    gr.Markdown("### 2. Eigenvalues and memory\n" + SAY["memory"])
    eigen_plot = gr.Plot(label="Eigenvalues and impulse responses", elem_id="primer-eigen")
    lti_data = gr.JSON(visible=False, label="LTI data")
    lti_py, lti_cl = show_code()
    lti_outs = [kernel_plot, eigen_plot, lti_md, lti_data, lti_py, lti_cl]

    gr.Markdown("#### In the loaded model\n" + SAY["model"])
    gr.Markdown(hybrid_note(res), visible=not res.layout.pure_ssm, elem_id="primer-hybrid", elem_classes="px-note")
    with gr.Row(equal_height=False):
        text_box = gr.Textbox(DEFAULT_TEXT, label="Text for the model to read", lines=2, scale=4, elem_id="primer-text",
                              info=f"used by the memory, Δ and attention views (at most {MAX_TEXT_TOKENS} tokens; "
                                   f"{MAX_M_TOKENS} for M)")
        read = gr.Button("Read text", variant="primary", scale=1, elem_id="primer-read")
    model_md = gr.Markdown(label="Memory per layer", elem_id="primer-model-md")
    memory_plot = gr.Plot(label="Memory per head", elem_id="primer-memory")

    gr.Markdown("### 3. Static vs selective\n" + SAY["selective"])
    selectivity = gr.Slider(0, 3, value=1.0, step=0.1, label="selectivity (0 = static Δ)", elem_id="primer-selectivity")
    selective_plot = gr.Plot(label="Static vs selective", elem_id="primer-selective")
    selective_data = gr.JSON(visible=False, label="Selective data")
    delta_plot = gr.Plot(label="Δ per token", elem_id="primer-delta")
    model_data = gr.JSON(visible=False, label="Model data")
    model_py, model_cl = show_code()
    model_outs = [memory_plot, delta_plot, model_md, model_data, model_py, model_cl]

    gr.Markdown("### 4. The Mamba-2 attention view\n" + SAY["attention"])
    with gr.Row():
        # count_slider: a one-layer or one-head model gets a fixed slider at 0 (gradio refuses min == max)
        layer = count_slider(0, res.state_layers - 1, 0, label="Mamba layer" if not res.layout.pure_ssm else "layer",
                             elem_id="primer-layer")
        head = count_slider(0, n_heads - 1, 0, label="head", elem_id="primer-head")
    attention_md = gr.Markdown(label="M x vs the scan", elem_id="primer-attention-md")
    attention_plot = gr.Plot(label="M and L", elem_id="primer-attention")
    attention_data = gr.JSON(visible=False, label="Attention data")
    att_py, att_cl = show_code()
    att_outs = [attention_plot, attention_md, attention_data, att_py, att_cl]

    gr.Markdown("### 5. Complexity, measured\n" + SAY["complexity"])
    with gr.Row(equal_height=False):
        with gr.Column(scale=2):
            gr.Markdown("**The slides' table**\n\n" + SLIDES_TABLE)
        with gr.Column(scale=1):
            lengths = gr.Textbox("256, 512, 1024, 2048, 4096", label="lengths T", elem_id="primer-lengths",
                                 info=f"2 to {MAX_LENGTHS} values up to {MAX_LENGTH}; the default takes < 20 s on 2 CPU cores")
            one_thread = gr.Checkbox(True, label="one CPU thread", elem_id="primer-one-thread",
                                     info="steadier on a busy machine; untick to use all of torch's threads")
            measure = gr.Button("Measure on this machine", variant="primary", elem_id="primer-measure")
    fig0, table0, md0 = shipped_complexity() or (None, None, "")
    complexity_md = gr.Markdown(md0, label="Measured slopes", elem_id="primer-complexity-md")
    complexity_plot = gr.Plot(fig0, label="Measured complexity", elem_id="primer-complexity")
    complexity_table = gr.Dataframe(table0, label="Measured (ms and MiB per call)", interactive=False,
                                    elem_id="primer-complexity-table")
    complexity_data = gr.JSON(visible=False, label="Complexity data")
    cx_py, cx_cl = show_code()
    cx_outs = [complexity_plot, complexity_table, complexity_md, complexity_data, cx_py, cx_cl]

    def primer_lti(magnitude, phase, N, T):
        """Recurrence, direct and FFT convolution of an SSM with eigenvalues |λ|e^{±iθ}; impulse responses."""
        return lti(magnitude, phase, N, T)

    def primer_selective(selectivity):
        """A toy SSM with static vs input-dependent Δ on one input sequence."""
        return selective(selectivity)

    @gpu(duration=15)
    def primer_model(text):
        """The loaded model's per-head memory (tokens) and its Δ per token on a text."""
        return model_view(res, text)

    @gpu(duration=15)
    def primer_attention(text, layer, head):
        """Mamba-2's semiseparable matrix M of one layer and head; M x against the model's scan."""
        return attention_view(res, text, layer, head)

    @gpu(duration=120)
    def primer_complexity(lengths, one_thread, progress=gr.Progress()):
        """Measure attention vs SSM time and memory over T tokens and per decode step."""
        return complexity(res, lengths, one_thread, progress)

    @gpu(duration=15)
    def show_defaults():
        return (*lti(), *selective(), *model_view(res), *attention_view(res))

    gr.on(None, show_defaults, [], lti_outs + [selective_plot, selective_data] + model_outs + att_outs,
          api_visibility="private", **MODEL)
    gr.on([s.change for s in (magnitude, phase, N, T)], primer_lti, [magnitude, phase, N, T], lti_outs,
          api_name="primer_lti", **live, **LIGHT)
    selectivity.change(primer_selective, [selectivity], [selective_plot, selective_data], api_name="primer_selective",
                       **live, **LIGHT)
    # Read text: the model view, then (once it succeeded) the attention view, so that a rejected text
    # shows one toast, not the same message twice
    # (the named event first: a second event of the same function would take its api name)
    gr.on([layer.change, head.change], primer_attention, [text_box, layer, head], att_outs,
          api_name="primer_attention", **live, **MODEL)
    gr.on([read.click, text_box.submit], primer_model, [text_box], model_outs, api_name="primer_model",
          preprocess=False, **MODEL).success(lambda *a: primer_attention(*a), [text_box, layer, head], att_outs,
                                    api_visibility="private", **live, **MODEL)
    measure.click(primer_complexity, [lengths, one_thread], cx_outs, api_name="primer_complexity", preprocess=False,
                  **MODEL)

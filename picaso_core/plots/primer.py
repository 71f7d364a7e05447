"""Figures of the SSM primer (picaso_core.lab.primer, lab.complexity), from its plain data. No model calls, no Gradio."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SERIES_STYLE = {  # measure_complexity series -> (label, colour, dash)
    "attention_prefill": ("attention prefill (T tokens)", "#dc2626", "solid"),
    "ssm_scan": ("SSM scan (T tokens)", "#2563eb", "solid"),
    "attention_step": ("attention decode step (KV cache of T)", "#f97316", "dash"),
    "ssm_step": ("SSM decode step (state after T)", "#0d9488", "dash"),
}
METHOD_STYLE = {"recurrence": ("#2563eb", "solid", 5), "convolution": ("#f97316", "dash", 3),
                "FFT convolution": ("#111827", "dot", 2)}
MARGIN = dict(l=50, r=20, t=60, b=45)


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=15)), height=height, margin=MARGIN,
                      legend=dict(orientation="h", y=-0.18, x=0), template="plotly_white")
    return fig


def kernel_figure(d: dict, height: int = 380) -> go.Figure:
    """Left: the kernel K_i = C A^i B. Right: y from the recurrence, the direct and the FFT
    convolution drawn over each other (they coincide), the input x in grey."""
    fig = make_subplots(1, 2, subplot_titles=("kernel K<sub>i</sub> = C A<sup>i</sup> B",
                                              f"output y: three ways, max difference {d['max_diff']:.1e}"))
    t = list(range(len(d["kernel"])))
    fig.add_trace(go.Scatter(x=t, y=d["kernel"], mode="lines", line=dict(color="#7c3aed"), name="K_i",
                             showlegend=False), 1, 1)
    fig.add_trace(go.Bar(x=t, y=d["x"], marker_color="rgba(148,163,184,0.55)", name="input x"), 1, 2)
    for name, (colour, dash, width) in METHOD_STYLE.items():
        fig.add_trace(go.Scatter(x=t, y=d["y"][name], mode="lines", name=name,
                                 line=dict(color=colour, dash=dash, width=width)), 1, 2)
    fig.update_xaxes(title_text="i (lag)", row=1, col=1)
    fig.update_xaxes(title_text="t", row=1, col=2)
    return _layout(fig, "Recurrence = convolution", height)


def eigen_figure(d: dict, lams: list[complex], height: int = 380) -> go.Figure:
    """Left: A's eigenvalues in the complex plane inside the unit circle. Right: impulse
    responses Re(λ^t) with their envelopes |λ|^t, the tolerance and each memory length."""
    fig = make_subplots(1, 2, column_widths=[0.32, 0.68],
                        subplot_titles=("eigenvalues of A", f"impulse responses; memory = steps until |λ|^t < {d['tol']:g}"))
    th = np.linspace(0, 2 * math.pi, 200)
    fig.add_trace(go.Scatter(x=np.cos(th), y=np.sin(th), mode="lines", line=dict(color="#94a3b8"),
                             hoverinfo="skip", showlegend=False), 1, 1)
    fig.add_trace(go.Scatter(x=[z.real for z in lams], y=[z.imag for z in lams], mode="markers",
                             marker=dict(size=9, color="#7c3aed"), name="λ of A", showlegend=False,
                             hovertemplate="λ = %{x:.3f} %{y:+.3f}i<extra></extra>"), 1, 1)
    colours = ["#2563eb", "#0d9488", "#f97316", "#dc2626", "#7c3aed"]
    for r, mem, c in zip(d["responses"], d["memory"], colours):
        lam = complex(*r["lambda"])
        label = f"|λ| = {abs(lam):.2f}" + (f", ∠ {math.degrees(math.atan2(lam.imag, lam.real)):.0f}°" if lam.imag else "")
        fig.add_trace(go.Scatter(x=d["t"], y=r["real"], mode="lines", line=dict(color=c, width=2),
                                 name=f"{label}: memory {mem} steps", legendgroup=label), 1, 2)
        fig.add_trace(go.Scatter(x=d["t"], y=r["envelope"], mode="lines", line=dict(color=c, dash="dot", width=1),
                                 legendgroup=label, showlegend=False, hoverinfo="skip"), 1, 2)
        if mem < len(d["t"]):
            fig.add_vline(x=mem, line=dict(color=c, dash="dash", width=1), row=1, col=2)
    fig.add_hline(y=d["tol"], line=dict(color="#64748b", dash="dot"), row=1, col=2)
    fig.update_xaxes(range=[-1.1, 1.1], title_text="Re λ", row=1, col=1)
    fig.update_yaxes(range=[-1.1, 1.1], scaleanchor="x", title_text="Im λ", row=1, col=1)
    fig.update_xaxes(title_text="t (steps after the impulse)", row=1, col=2)
    return _layout(fig, "Eigenvalues set how long memory lasts", height)


def memory_figure(profile: dict, height: int = 380) -> go.Figure:
    """Each head's memory in tokens (at the text's mean decay exp(Δ A)), one column per layer."""
    fig = go.Figure()
    for layer in profile["layers"]:
        mem = [m for m in layer["memory"] if m is not None]  # None: a head that does not decay
        fig.add_trace(go.Box(y=mem, name=f"layer {layer['layer']}", boxpoints="all", jitter=0.4, pointpos=0,
                             marker=dict(size=6, color="#2563eb"), line=dict(color="#64748b"), fillcolor="rgba(0,0,0,0)",
                             hovertemplate="%{y:.0f} tokens<extra></extra>", showlegend=False))
    fig.update_yaxes(type="log", title_text=f"memory (tokens until the decay < {profile['tol']:g})")
    return _layout(fig, "The loaded model's memory per head (one dot per head)", height)


def selective_figure(d: dict, height: int = 520) -> go.Figure:
    """Top: the input. Middle: Δ_t, static vs selective. Bottom: the state read out, static vs selective."""
    fig = make_subplots(3, 1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.25, 0.3, 0.45],
                        subplot_titles=("input x_t", "step Δ_t: how much of x_t is let in (and of the past forgotten)",
                                        "output y_t = h_t"))
    t = list(range(len(d["x"])))
    fig.add_trace(go.Bar(x=t, y=d["x"], marker_color="#94a3b8", name="x", showlegend=False), 1, 1)
    for name, colour in (("static", "#64748b"), ("selective", "#dc2626")):
        fig.add_trace(go.Scatter(x=t, y=d[name]["dt"], mode="lines+markers", marker=dict(size=4),
                                 line=dict(color=colour), name=f"{name} SSM", legendgroup=name), 2, 1)
        fig.add_trace(go.Scatter(x=t, y=d[name]["y"], mode="lines", line=dict(color=colour, width=2.5),
                                 name=f"{name} SSM", legendgroup=name, showlegend=False), 3, 1)
    dts = [v for name in ("static", "selective") for v in d[name]["dt"]]
    ticks = [v for v in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10) if min(dts) / 3 <= v <= max(dts) * 3]
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{v:g}" for v in ticks], row=2, col=1)
    fig.update_xaxes(title_text="token t", row=3, col=1)
    fig = _layout(fig, "Static vs selective: the same input, fixed Δ vs input-dependent Δ", height)
    fig.update_layout(legend=dict(y=-0.12))
    return fig


def delta_tokens_figure(profile: dict, tokens: list[str], height: int = 330) -> go.Figure:
    """Per layer and token: log2 of Δ_t over the layer's median Δ, averaged over heads. Red: a large
    step (the token is let in, the past fades); blue: a small step (the token is skipped, the past kept)."""
    z = []
    for layer in profile["layers"]:
        dt = np.asarray(layer["dt"])  # (T, H)
        z.append(np.log2(dt / np.median(dt, axis=0, keepdims=True)).mean(1))
    z = np.asarray(z)
    lim = float(np.abs(z).max()) or 1.0
    labels = [f"{i}:{t}" for i, t in enumerate(tokens)]
    fig = go.Figure(go.Heatmap(
        z=z, x=labels, y=[f"layer {layer['layer']}" for layer in profile["layers"]], colorscale="RdBu", reversescale=True,
        zmin=-lim, zmax=lim, colorbar=dict(title=dict(text="log₂ Δ / median", side="right")),
        hovertemplate="%{y}, token %{x}<br>log₂(Δ / median) = %{z:.2f}<extra></extra>"))
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=10), type="category")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "The loaded model's Δ per token: red = let in, blue = kept out", height)


def attention_view_figure(d: dict, tokens: list[str], height: int = 440) -> go.Figure:
    """M (signed, symmetric colour range) beside the decay mask L (0..1): y = M x is attention with
    the structured mask L instead of a softmax (Mamba-2's SSD)."""
    M, L = np.asarray(d["M"]), np.asarray(d["L"])
    lim = float(np.abs(M).max()) or 1.0
    labels = [f"{i}:{t}" for i, t in enumerate(tokens)]
    fig = make_subplots(1, 2, horizontal_spacing=0.14, subplot_titles=(
        f"M = L ∘ (C Bᵀ) Δ  (layer {d['layer']}, head {d['head']})", "decay mask L<sub>ij</sub> = exp(A (Δ<sub>j+1</sub>+…+Δ<sub>i</sub>))"))
    fig.add_trace(go.Heatmap(z=M, x=labels, y=labels, colorscale="RdBu", reversescale=True, zmin=-lim, zmax=lim,
                             colorbar=dict(x=0.43, len=0.9), hovertemplate="i %{y}<br>j %{x}<br>M %{z:.3g}<extra></extra>"), 1, 1)
    fig.add_trace(go.Heatmap(z=L, x=labels, y=labels, colorscale="Viridis", zmin=0, zmax=1,
                             colorbar=dict(x=1.0, len=0.9), hovertemplate="i %{y}<br>j %{x}<br>L %{z:.3f}<extra></extra>"), 1, 2)
    for col in (1, 2):
        fig.update_yaxes(autorange="reversed", showticklabels=len(labels) <= 40, tickfont=dict(size=9), type="category",
                         row=1, col=col)
        fig.update_xaxes(showticklabels=len(labels) <= 40, tickfont=dict(size=9), tickangle=-60, type="category",
                         row=1, col=col)
    return _layout(fig, "Mamba-2 as attention: y = M x with a lower-triangular semiseparable M", height)


def complexity_figure(r: dict, height: int = 420) -> go.Figure:
    """Log-log seconds (left) and peak bytes (right) against T; each legend entry carries its slope."""
    fig = make_subplots(1, 2, subplot_titles=("time per call", "peak memory<br><sup>inputs, cache or state + allocated</sup>"))
    for name, (label, colour, dash) in SERIES_STYLE.items():
        fig.add_trace(go.Scatter(x=r["lengths"], y=r["seconds"][name], mode="lines+markers", legendgroup=name,
                                 name=f"{label}: slope {r['slopes'][name]:.2f}", line=dict(color=colour, dash=dash),
                                 hovertemplate="T %{x}<br>%{y:.3g} s<extra></extra>"), 1, 1)
        fig.add_trace(go.Scatter(x=r["lengths"], y=r["peak_bytes"][name], mode="lines+markers", legendgroup=name,
                                 showlegend=False, line=dict(color=colour, dash=dash),
                                 hovertemplate="T %{x}<br>%{y:.3s}B<extra></extra>"), 1, 2)
    fig.update_xaxes(type="log", title_text="T (tokens)")
    fig.update_yaxes(type="log", title_text="seconds", row=1, col=1)
    fig.update_yaxes(type="log", title_text="bytes", row=1, col=2)
    where = f"{r.get('device', 'cpu')}, {r.get('threads', '?')} thread(s)"
    return _layout(fig, f"Complexity measured on this machine ({where})", height)

"""The composition methods' registry (picaso_core/compose/registry.py): one record per method, one
label and one colour each, readable and apart; every module that lists or draws a method reads it
(the figures' trace colours are the registry's); `build_state` builds what the old private builder
built; the compose cache's keys follow each method's order rule."""

from __future__ import annotations

import ast
import itertools
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from picaso_core.analysis import evaluate
from picaso_core.analysis.compose_cache import KEYING, canonical
from picaso_core.compose import (ABLATION, BASELINE, REGISTRY, build_state, by_label, colour, compose, compose_tokens,
                                 label, labels, method, methods_for)
from picaso_core.compose.registry import names
from tests.conftest import granite_rope_hybrid, tiny_model

ROOT = Path(__file__).resolve().parent.parent
HEX = re.compile(r"^#[0-9a-f]{6}$")
DARK = "#0b0f19"  # Gradio's dark theme background


# ---- the records ------------------------------------------------------------------------------
def test_every_method_once_with_one_label_and_one_colour():
    names_ = [m.name for m in REGISTRY]
    assert len(names_) == len(set(names_)) == 9
    assert set(names_) == {"none", "concat", "soup", "caso", "picaso_s", "picaso_r", "picconcat_r", "weighted", ABLATION}
    all_labels = [m.label for m in REGISTRY]
    assert len(all_labels) == len(set(all_labels))
    colours = [m.colour for m in REGISTRY]
    assert all(HEX.match(c) for c in colours), colours
    assert len(colours) == len(set(colours)), "two methods share a colour"
    for m in REGISTRY:
        assert method(m.name) is m and by_label(m.label) is m and colour(m.name) == colour(m.label) == m.colour
    assert labels() == tuple(all_labels)
    assert all(by_label(w).name == "none" for w in BASELINE.values())
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        method("nope")


def test_the_records_say_what_each_method_is():
    """kind / order / needs as compose/methods.py and the compose cache treat them."""
    from picaso_core.compose import METHODS as STATE_COMPOSE, TOKEN_METHODS

    assert set(names(REGISTRY, kind="state")) == set(STATE_COMPOSE) | {ABLATION}
    assert names(REGISTRY, kind="tokens") == TOKEN_METHODS
    assert {m.name: m.order for m in REGISTRY if m.cached} == {
        "soup": "set", "picaso_s": "set", "picaso_r": "rotation", "picconcat_r": "rotation",
        "concat": "sequence", "caso": "sequence"}
    assert method("weighted").needs == ("states", "weights") and "attention" in method(ABLATION).needs


def test_methods_for_adds_the_ablation_only_where_the_model_has_attention():
    pure, hybrid = methods_for(has_attention=False), methods_for(has_attention=True)
    assert names(pure) == ("none", "concat", "soup", "caso", "picaso_s", "picaso_r", "picconcat_r")
    assert names(hybrid) == names(pure) + (ABLATION,)
    assert evaluate.METHODS == names(pure) and evaluate.STATE_METHODS == ("soup", "caso", "picaso_s", "picaso_r")
    assert evaluate.METHOD_NAMES == {m: label(m, "short") for m in names(pure)}


# ---- the colours: readable on light and dark, apart under colour-vision deficiencies -------------
def _linear(hex_: str) -> list[float]:
    c = [int(hex_[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in c]


def _contrast(a: str, b: str) -> float:
    la, lb = (0.2126 * r + 0.7152 * g + 0.0722 * bl for r, g, bl in (_linear(a), _linear(b)))
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


# Machado, Oliveira & Fernandes (2009), severity 1, on linear RGB
CVD = {"deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
       "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
       "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]}


def _lab(rgb: list[float]) -> tuple[float, float, float]:
    r, g, b = rgb
    x, y, z = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, \
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = lambda t: t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116  # noqa: E731
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


@pytest.mark.parametrize("m", REGISTRY, ids=lambda m: m.name)
def test_each_colour_reads_on_white_and_on_the_dark_theme(m):
    """WCAG's 3:1 for graphical objects, on both backgrounds."""
    assert _contrast(m.colour, "#ffffff") >= 3 and _contrast(m.colour, DARK) >= 3, m


@pytest.mark.parametrize("vision", [None, *CVD])
def test_the_colours_stay_apart_under_each_colour_vision(vision):
    sim = (lambda rgb: rgb) if vision is None else (
        lambda rgb: [min(1.0, max(0.0, sum(CVD[vision][i][j] * rgb[j] for j in range(3)))) for i in range(3)])
    lab = {m.name: _lab(sim(_linear(m.colour))) for m in REGISTRY}
    worst = min((math.dist(lab[a], lab[b]), a, b) for a, b in itertools.combinations(lab, 2))
    assert worst[0] >= 8, f"{worst[1]} and {worst[2]} look alike ({vision or 'normal vision'}): ΔE {worst[0]:.1f}"


# ---- every figure draws a method in the registry's colour -----------------------------------------
def test_the_compose_figure_and_generations_use_the_registry(monkeypatch):
    from picaso_core.analysis.evaluate import MethodResult
    from picaso_core.ui.tabs import compose_views as V

    rows = methods_for(has_attention=True)
    results = [MethodResult(m.name, 1.0 + i / 10, 2.0, 0.001 * (i + 1), 0.002, [1, 2]) for i, m in enumerate(rows)]
    fig = V.results_plot(results, scored=True)
    bars = fig.data[0]
    assert list(bars.x) == [m.label for m in rows] and list(bars.marker.color) == [m.colour for m in rows]
    tok = SimpleNamespace(display_text=lambda ids: "text")
    html = V.generations_html(results, tok)
    assert all(f"border-top-color:{m.colour}" in html for m in rows)
    assert V.METHODS == tuple((m.name, m.label, m.paper, m.colour) for m in methods_for())


def test_the_experiments_figures_use_the_registry():
    from picaso_core.plots import experiments as P

    ms = names()
    curve = {"ks": [0, 1, 2], "methods": list(ms), "loss": {m: [1.0, 0.9, 0.8] for m in ms},
             "loss_se": {m: [0.0] * 3 for m in ms}, "n": {m: [2] * 3 for m in ms}}
    fig = P.loss_vs_k(curve)
    assert {t.name: t.line.color for t in fig.data} == {label(m, "plot"): colour(m) for m in ms}
    summary = {"main": {"gains": {"avg": {m: 5.0 for m in ms if m != "none"}}, "ks": [1, 2]},
               "paper": {"wikitext_gain_pct": {"soup": 8.5}}}
    ours = P.gains_vs_paper(summary).data[1]
    assert list(ours.marker.color) == [colour(by_label(x).name) for x in ours.x]
    qa = P.qa_losses({"methods": {m: {"loss": 1.0} for m in ("none", "concat", "picaso_r")}, "corpus": "demo"}).data[1]
    assert list(qa.marker.color) == [colour(m) for m in ("none", "concat", "picaso_r")]


def test_the_finetune_landscape_and_soup_figures_use_the_registry():
    from picaso_core.plots import finetune as F, landscape as L, soup as S

    curve = {"ks": [1, 2], "loss": {"concat": [1.0, 0.9], "picaso_r": [1.1, 1.0]}}
    fig = F.loss_vs_k_before_after({"base": {"fig4": curve}, "bptc-retrieval": {"fig4": curve}})
    assert {t.line.color for t in fig.data} == {colour("concat"), colour("picaso_r")}
    assert all(t.line.color == colour(t.name.split(",")[0]) for t in fig.data)
    line = {"distance": 1.0, "names": ["a", "b"], "ts": [0.0, 0.5, 1.0], "loss": [1.0, 0.9, 1.0], "n_samples": 1}
    lines = L.line_figure(line, line).data
    assert (lines[0].line.color, lines[2].line.color) == (colour("soup"), colour("caso"))
    assert {n: c for n, (_, c) in L.MARK_STYLE.items() if n != "mean"} == {n: colour(n) for n in ("Soup", "PICASO-R", "Concat")}
    bars = S.decay_figure({"concat": 1.0, "a_decay": 1.1, "mean": 1.2}, 4).data[0]
    assert list(bars.marker.color) == [colour("concat"), colour("caso"), colour("soup")]  # A-decay mixing is CASO


def _colour_maps_outside_the_registry():
    """(file, line, key) of every dict literal under picaso_core that maps a method's name or label to a
    colour string, outside the registry."""
    words = {m.name for m in REGISTRY} | {m.label for m in REGISTRY} | set(BASELINE.values())
    found = []
    for path in sorted((ROOT / "picaso_core").rglob("*.py")):
        if path.name == "registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value in words:
                        vals = [v] + (list(v.elts) if isinstance(v, ast.Tuple) else [])
                        if any(isinstance(x, ast.Constant) and isinstance(x.value, str) and x.value.startswith("#")
                               for x in vals):
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {k.value!r}")
            if isinstance(node, ast.Tuple) and len(node.elts) >= 2 and isinstance(node.elts[0], ast.Constant) \
                    and node.elts[0].value in words and any(
                        isinstance(x, ast.Constant) and isinstance(x.value, str) and re.match(r"#[0-9a-fA-F]{6}$", x.value)
                        for x in node.elts[1:]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.elts[0].value!r}")
    return found


def test_no_module_gives_a_method_its_own_colour():
    assert _colour_maps_outside_the_registry() == []


# ---- build_state: what the old private builder built --------------------------------------------
def _old_build_state(model, m, context_ids, context_states, threads=1):
    """analysis/evaluate._build_state as it was, with the app's ablation (compose_runs.dropped_attention)."""
    if m == "none" or not context_ids:
        return model.empty_state()
    if m == ABLATION:
        return compose("picaso_r", context_states, attention="drop")
    if m in ("soup", "caso", "picaso_s", "picaso_r"):
        return compose(m, context_states, config=model)
    return compose_tokens(model, context_ids, m, states=context_states, threads=threads)


def _equal(a, b) -> bool:
    parts = ("ssm", "conv", "log_decay", "keys", "values")
    return a.num_tokens == b.num_tokens and all(
        (getattr(a, p, None) is None and getattr(b, p, None) is None) or torch.equal(getattr(a, p), getattr(b, p))
        for p in parts)


@pytest.fixture(scope="module", params=["pure", "hybrid"])
def model_and_contexts(request):
    model = tiny_model() if request.param == "pure" else granite_rope_hybrid()
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, 50, (4 + i,), generator=g).tolist() for i in range(3)]
    return model, ids, model.encode_contexts(ids)


@pytest.mark.parametrize("m", [m.name for m in methods_for(has_attention=True)])
def test_build_state_is_the_old_path(model_and_contexts, m):
    model, ids, states = model_and_contexts
    new = build_state(model, m, ids, states)
    assert _equal(new, _old_build_state(model, m, ids, states))
    assert _equal(build_state(model, m, [], []), model.empty_state())  # no context: the identity
    if m == "picconcat_r":
        assert _equal(build_state(model, m, ids, states, 2), _old_build_state(model, m, ids, states, 2))


def test_build_state_weighted_and_unknown(model_and_contexts):
    model, ids, states = model_and_contexts
    w = [0.2, 0.3, 0.5]
    assert _equal(build_state(model, "weighted", ids, states, weights=w), compose("weighted", states, weights=w, config=model))
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        build_state(model, "nope", ids, states)


# ---- the compose cache's keys follow the registry's order rule ----------------------------------
@pytest.mark.parametrize("m", [m for m in REGISTRY if m.cached], ids=lambda m: m.name)
def test_the_cache_keys_follow_each_methods_order(m):
    assert KEYING[m.name] == m.order
    ids = ("a", "b", "c", "d")
    keys = {p: canonical(m.name, p) for p in itertools.permutations(ids)}
    rotations = {ids[i:] + ids[:i] for i in range(len(ids))}
    for p, key in keys.items():
        same_key = key == keys[ids]
        if m.order == "set":
            assert same_key
        elif m.order == "rotation":
            assert same_key == (p in rotations), p
        else:
            assert same_key == (p == ids), p

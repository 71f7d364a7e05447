"""The Attribution tab below the context: sources (sentences, words, a regex), answer spans, the
ways an ablated context becomes a state, and the contexts' text shaded by each source's score.

Plain functions (no layout): the tab's handler calls `check_source_inputs` before any model work,
`sources_for` for the sources and their states, and `sources_html` for the shaded view.
Source states are derived data: they live in a SourceStore under the app's cache folder
(store.derived_folder), never in or beside a store the operator gave, which may be read-only.
"""

from __future__ import annotations

import html

from picaso_core.analysis.sources import (GRAINS, MAX_PATTERN_CHARS, WAYS, SourceError, SourceStore, make_sources,
                                          source_states)
from picaso_core.session import CONTEXT_SUFFIX, Resources, log
from picaso_core.store.store import StoreError, derived_folder
from picaso_core.ui.errors import bad_input, choice, clip, text, whole_number

GRAIN_NAMES = {"context": "whole contexts", "sentence": "sentences", "word": "words"}
WAY_NAMES = {"states": "composed from the sources' stored states (no re-encoding)",
             "reencode": "kept text re-encoded (ContextCite's way, the exact reference)"}
# A public Space bounds one request's work. Every LOO method builds and scores N + 1 states over N
# sources and the surrogate `ablations` + max(8, ablations / 4) more; Concat re-reads the kept text
# for each. 128 sources is a word-grain split of ~3 demo passages, or 10 passages of ~13 sentences.
MAX_SOURCES = 128
MAX_ABLATIONS = 256
DEFAULT_ABLATIONS = 64
# PICConcat-R-LOO re-reads every rotation of the contexts for each of the N + 1 subsets: skipped
# above this many sources (the context-grain rule, PICCONCAT_MAX_CONTEXTS, still applies).
PICCONCAT_MAX_SOURCES = 30


def check_source_inputs(grain, way, span_start, span_end, pattern, ablations, endpoint: str) -> tuple:
    """The raw grain, way, span, regex and ablation count, checked before any model work."""
    grain = choice("grain", grain if grain is not None else "context", GRAINS, endpoint)
    way = choice("way", way if way is not None else "states", WAYS, endpoint)
    pattern = text("pattern", pattern, endpoint, MAX_PATTERN_CHARS).strip()
    if pattern and grain == "context":
        raise bad_input("a splitting regex cuts contexts into sources: choose grain sentence or word with it", endpoint)
    span = []
    for name, v in (("span_start", span_start), ("span_end", span_end)):
        span.append(None if v is None or v == "" else whole_number(name, v, 0, 100_000, endpoint))
    ablations = whole_number("ablations", DEFAULT_ABLATIONS if ablations is None else ablations, 2, MAX_ABLATIONS,
                             endpoint)
    return grain, way, span[0], span[1], pattern, ablations


def source_store(res: Resources):
    """The app's SourceStore (one per Resources), under its cache folder; None where that folder
    cannot be written (sources are then encoded per request, and the log says so once)."""
    def make():
        try:
            return SourceStore.open_or_build(derived_folder(res.cache_dir, res.store) / "sources", res.model)
        except (StoreError, OSError) as e:
            log.warning("source states are not stored (%s): encoded per request", str(e).replace("\n", " "))
            return None

    return res.derived("source_store", make)


def sources_for(res: Resources, ids: list[str], grain: str, pattern: str, endpoint: str):
    """(sources, states) of the contexts `ids` at `grain`: whole contexts read from the app's store,
    smaller sources from the SourceStore (encoded on first use). Refuses a regex that matches
    nothing and more than MAX_SOURCES sources."""
    tok = res.model.tokenizer
    try:
        sources = make_sources(tok, [(c, res.text(c)) for c in ids], grain, pattern or None, CONTEXT_SUFFIX,
                               res.model.config.ssm_cfg.d_conv - 1)
    except SourceError as e:
        raise bad_input(str(e), endpoint) from None
    if len(sources) > MAX_SOURCES:
        raise bad_input(f"the {len(ids)} contexts split into {len(sources)} {GRAIN_NAMES.get(grain, 'sources')}; this "
                        f"app attributes at most {MAX_SOURCES} sources: pick fewer contexts or a coarser grain", endpoint)
    if grain == "context":
        return sources, res.states(ids)
    store = source_store(res)
    texts = {c: res.text(c) + CONTEXT_SUFFIX for c in ids}
    return sources, source_states(res.model, sources, store, texts)


def source_rows(res: Resources, sources, scores: dict[str, list[float]]) -> list[dict]:
    """The /attribute `sources` entries: context_id, text, start, end (characters in the context's
    text, the stored suffix left out) and scores {method: score}."""
    rows = []
    for i, s in enumerate(sources):
        n = len(res.text(s.context_id))
        end = min(s.end, n)
        rows.append({"context_id": s.context_id, "text": s.text[: end - s.start], "start": s.start, "end": end,
                     "scores": {m: float(v[i]) for m, v in scores.items()}})
    return rows


def shade_method(scores: dict) -> str | None:
    """The method the text is shaded by: the surrogate where it ran, else a state LOO, else any."""
    for m in ("surrogate", "picaso_r", "picaso_s", "caso", "concat", "soup", "picconcat_r", "loi"):
        if m in scores:
            return m
    return next(iter(scores), None)


def _colour(v: float, vmax: float) -> str:
    """Red: the source supports the answer (positive score), blue: it hurts; alpha by |v| / vmax."""
    a = 0.0 if vmax <= 0 else min(1.0, abs(v) / vmax) * 0.55  # text stays readable on the strongest shade
    rgb = "220,38,38" if v > 0 else "37,99,235"
    return f"rgba({rgb},{a:.2f})"


def sources_html(data: dict, names: dict[str, str], top_n: int = 5) -> str:
    """Each context's text with its sources shaded by the score of `shade_method`, a colour legend
    in nats per answer token, and the top sources listed."""
    m = data.get("shaded_by")
    rows = data["sources"]
    if m is None or not rows:
        return '<div class="px-empty">No scores to shade.</div>'
    vals = [r["scores"][m] for r in rows]
    vmax = max((abs(v) for v in vals), default=0.0) or 1e-9
    cards = []
    for j, c in enumerate(data["contexts"], 1):
        gold = '<span class="px-gold" title="labelled as holding the answer">gold</span>' if c["gold"] else ""
        spans = []
        for i, r in enumerate(rows):
            if r["context_id"] != c["id"]:
                continue
            v = r["scores"][m]
            spans.append(f'<span id="px-src-{i}" title="{html.escape(names.get(m, m))}: {v:+.3f} nats/token" '
                         f'style="background:{_colour(v, vmax)};border-radius:3px">{html.escape(r["text"])}</span>')
        cards.append(f'<div class="px-ctx" style="max-width:none;flex:1 1 100%"><div class="px-ctx-head">'
                     f'<span class="px-num">{j}</span><code>{html.escape(c["id"])}</code>{gold}</div>'
                     f'<div style="line-height:1.6">{"".join(spans)}</div></div>')
    legend = (f'<div style="display:flex;align-items:center;gap:8px;margin:4px 0 6px 0;font-size:0.85em">'
              f'<span>shaded by <b>{html.escape(names.get(m, m))}</b>, nats per answer token:</span>'
              f'<span>{-vmax:+.2f}</span><span style="display:inline-block;width:160px;height:12px;border-radius:3px;'
              f'background:linear-gradient(90deg,{_colour(-vmax, vmax)},rgba(255,255,255,0),{_colour(vmax, vmax)})">'
              f'</span><span>{vmax:+.2f}</span><span>(red: supports the answer; blue: works against it)</span></div>')
    order = sorted(range(len(rows)), key=lambda i: -vals[i])[:top_n]
    tops = "".join(f'<li><code>{html.escape(rows[i]["context_id"])}</code> {vals[i]:+.3f}: '
                   f'{html.escape(clip(rows[i]["text"], 110))}</li>' for i in order)
    top = f'<div style="font-size:0.9em"><b>Top {len(order)} sources</b><ol style="margin:2px 0">{tops}</ol></div>'
    return f'<div id="attribution-sources">{legend}<div class="px-order">{"".join(cards)}</div>{top}</div>'


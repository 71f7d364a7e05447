"""report.html: every figure of an experiments run and its paper-vs-ours table in one page that
opens offline (plotly.js inline). Built from a summary (picaso_core.analysis.summaries.summarize)."""

from __future__ import annotations

import html as _html
from pathlib import Path

from plotly.offline import get_plotlyjs

from picaso_core.analysis.summaries import paper_vs_ours
from picaso_core.plots import experiments as P


def write_report(summary: dict, path: str | Path) -> None:
    """report.html: every figure of the run, the paper-vs-ours table, self-contained (plotly.js
    inline: it opens offline)."""
    meta = summary.get("meta", {})
    parts = []
    for fig_id, title, caption, fig in P.all_figures(summary):
        parts.append(f'<section><h2>{_html.escape(title)}</h2><p class="cap">{_html.escape(caption)}</p>'
                     + fig.to_html(full_html=False, include_plotlyjs=False, div_id=fig_id,
                                   config={"displaylogo": False}) + "</section>")
    md = paper_vs_ours(summary)
    head = (f"model <b>{_html.escape(str(meta.get('model')))}</b> · corpus <b>{_html.escape(str(meta.get('corpus')))}"
            f"/{_html.escape(str(meta.get('split')))}</b> · {meta.get('samples')} samples · k = "
            f"{_html.escape(str(meta.get('ks')))} · {meta.get('seconds', 0):.0f} s on {meta.get('threads')} CPU "
            f"thread(s) · {_html.escape(str(meta.get('date', '')))}")
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>PICASO experiments report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1150px;margin:24px auto;padding:0 16px;color:#1f2937}}
h1{{margin-bottom:4px}} .cap{{color:#4b5563}} section{{margin:28px 0}} table{{border-collapse:collapse;font-size:14px}}
td,th{{border:1px solid #d1d5db;padding:4px 8px;text-align:right}} td:first-child,th:first-child{{text-align:left}}
pre{{white-space:pre-wrap}}</style>
<script type="text/javascript">{get_plotlyjs()}</script></head><body>
<h1>PICASO experiments</h1><p>{head}</p>
<p>Reproduces PICASO (Liu et al., ICLR 2025) sec. 6 and appendix B on this model and corpus:
contexts retrieved per query (the sample's own chunks excluded; QA questions use their own passages), most
relevant last; every method at every k; k = 0 is the baseline for all.</p>
<section id="paper-vs-ours"><h2>Paper vs ours</h2>{markdown_table_html(md)}</section>
{''.join(parts)}
</body></html>"""
    Path(path).write_text(doc, encoding="utf-8")


def markdown_table_html(md: str) -> str:
    """The markdown of `paper_vs_ours` as HTML: pipe tables become <table>s, bullets <li>s."""
    out, rows = [], []

    def flush():
        if rows:
            head, *body = [r for r in rows if not set(r.replace("|", "").strip()) <= set("-")]
            cell = lambda tag, r: "".join(f"<{tag}>{_html.escape(c.strip())}</{tag}>" for c in r.strip("|").split("|"))  # noqa: E731
            out.append("<table><tr>" + cell("th", head) + "</tr>" + "".join(f"<tr>{cell('td', r)}</tr>" for r in body) + "</table>")
            rows.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            rows.append(line)
            continue
        flush()
        if line.startswith("# "):
            continue
        if line.startswith("## "):
            out.append(f"<h3>{_html.escape(line[3:])}</h3>")
        elif line.startswith("- "):
            out.append(f"<li>{_html.escape(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_html.escape(line)}</p>")
    flush()
    return "\n".join(out)

"""The tour as a static site: one index.html (every step's text, its figures as plotly JSON drawn by
a local plotly.min.js, its tables as HTML) with Previous / Next and the arrow keys. It opens from a
laptop's disk with no Python and no network, and a static Hugging Face Space serves the folder as
it is. Nothing on the page asks a server for anything; the only address in it is the live app's,
when one is given, as a plain link under each step.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from markdown_it import MarkdownIt
from plotly.offline import get_plotlyjs

from picaso_core.ui.tour.steps import Step

PLOTLY_FILE = "plotly.min.js"

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>PICASO Explorer: the tour</title>
<style>
body {{font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 12px 20px; color: #1e293b}}
header {{display: flex; align-items: center; gap: 12px; flex-wrap: wrap; border-bottom: 1px solid #e2e8f0;
  padding-bottom: 8px; position: sticky; top: 0; background: white; z-index: 5}}
header h1 {{font-size: 1.2em; margin: 0; flex: 1 1 auto}}
button {{font-size: 1em; padding: 6px 14px; border-radius: 8px; border: 1px solid #cbd5e1; background: #fff7ed;
  cursor: pointer}}
button:disabled {{opacity: 0.4; cursor: default}}
.step {{display: none}} .step.on {{display: block}}
.step h2 {{font-size: 1.3em; margin: 14px 0 6px}}
.tab {{color: #64748b; font-size: 0.9em}}
.text {{font-size: 1.05em; line-height: 1.45}}
.figs {{display: flex; flex-wrap: wrap; gap: 8px}} .figs > div {{flex: 1 1 480px; min-width: 320px}}
table {{border-collapse: collapse; font-size: 0.9em; margin: 6px 0 14px}}
th, td {{border: 1px solid #e2e8f0; padding: 3px 8px; text-align: left}} th {{background: #f8fafc}}
.live {{font-size: 0.9em}}
#notice {{background: #fef3c7; border: 1px solid #f59e0b; border-radius: 8px; padding: 6px 12px; margin: 8px 0}}
</style></head>
<body>
<header><h1>PICASO Explorer: the tour</h1>
<span id="where"></span>
<button id="prev" onclick="go(cur - 1)">&larr; Previous</button>
<button id="next" onclick="go(cur + 1)">Next &rarr;</button></header>
<p id="notice" role="alert" hidden></p>
<main>
{steps}
</main>
<script src="{plotly}"></script>
<script>
const FIGS = {figs};
let cur = 0;
const steps = document.querySelectorAll('.step');
const drawn = new Set();
function go(i) {{
  if (i < 0 || i >= steps.length) return;
  steps[cur].classList.remove('on'); cur = i; steps[cur].classList.add('on');
  document.getElementById('where').textContent = 'Step ' + (cur + 1) + ' of ' + steps.length;
  document.getElementById('prev').disabled = cur === 0;
  document.getElementById('next').disabled = cur === steps.length - 1;
  if (location.hash !== '#step-' + (cur + 1)) history.replaceState(null, '', '#step-' + (cur + 1));
  (FIGS[cur] || []).forEach((f, j) => {{
    const id = 'fig-' + (cur + 1) + '-' + j;
    if (drawn.has(id)) {{ Plotly.Plots.resize(id); return; }}
    drawn.add(id);
    Plotly.newPlot(id, f.data, f.layout, {{responsive: true, displaylogo: false}});
  }});
}}
document.addEventListener('keydown', (e) => {{
  if (e.target.closest && e.target.closest('input, textarea, select')) return;
  if (e.key === 'ArrowRight') go(cur + 1);
  if (e.key === 'ArrowLeft') go(cur - 1);
}});
// the step to open: #step-N (what Previous / Next write, so a reload stays), else ?step=N (the app's
// links); one that is not a step says so and opens step 1
const hash = /^#step-(.*)$/.exec(location.hash);
const asked = hash ? hash[1] : new URLSearchParams(location.search).get('step');
let start = 0;
if (asked !== null) {{
  const n = /^\\s*\\d+\\s*$/.test(asked) ? parseInt(asked, 10) : NaN;
  if (n >= 1 && n <= steps.length) start = n - 1;
  else {{
    const note = document.getElementById('notice');
    note.textContent = 'No step ' + JSON.stringify(asked).slice(0, 40) + ' in this tour: a step is a whole number '
      + 'from 1 to ' + steps.length + '. Showing step 1.';
    note.hidden = false;
  }}
}}
go(start);
</script>
</body></html>
"""


def _markdown(text: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).render(text)


def step_html(n: int, total: int, step: Step, entry: dict, app_url: str | None) -> str:
    figs = "".join(f'<div id="fig-{n}-{j}"></div>' for j in range(len(entry["figures"])))
    tables = "".join(
        f"<h3>{html.escape(t['title'])}</h3>"
        + _table(t["columns"], t["data"]) for t in entry["tables"])
    live = ""
    if app_url:
        url = f"{app_url.rstrip('/')}/?step={n}"
        live = f'<p class="live"><a href="{html.escape(url)}">Open this step in the live app</a></p>'
    return (f'<section class="step" id="step-{n}"><h2>{n}. {html.escape(step.title)}</h2>'
            f'<div class="tab">{html.escape(step.tab)} tab · step {n} of {total}</div>'
            f'<div class="text">{_markdown(entry["text"])}</div><div class="figs">{figs}</div>{tables}{live}</section>')


def _table(columns: list, rows: list) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_site(out_dir: str | Path, steps: list[tuple[Step, dict]], app_url: str | None = None) -> Path:
    """Write index.html and plotly.min.js into `out_dir`; `steps` pairs each step with its cached view
    (picaso_core.ui.tour's entries). Returns the index.html path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total = len(steps)
    sections = "\n".join(step_html(n, total, s, e, app_url) for n, (s, e) in enumerate(steps, 1))
    # "</" inside the JSON would end the <script> early
    figs = json.dumps([e["figures"] for _, e in steps]).replace("</", "<\\/")
    (out / PLOTLY_FILE).write_text(get_plotlyjs(), encoding="utf-8")
    index = out / "index.html"
    index.write_text(PAGE.format(steps=sections, figs=figs, plotly=PLOTLY_FILE), encoding="utf-8")
    return index

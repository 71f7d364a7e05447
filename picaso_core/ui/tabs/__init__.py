"""The app's tabs, one module each, named by the tab (compose, soup, landscape, attribution,
benchmarks, finetune, primer, coffee); a tab's helpers sit beside it under its name as prefix
(compose_runs, soup_handlers, soup_lab, soup_text, attribution_panel, attribution_views).

Each tab module has a `TITLE` and a `render(res)` that lays the tab out inside the current
`gr.Tab`; app.py renders them in the order a talk walks through. A tab imports what every tab
shares (picaso_core.ui's top modules) and the server wing, never another tab.
"""

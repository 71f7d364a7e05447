"""The Gradio app's pieces. Each tab is its own module with a `TITLE` and a `render(res)` that lays
the tab out inside the current `gr.Tab`; app.py renders them in the order a talk walks through.

    resources.py     what loads once and is shared read-only (model, corpus, store, retriever)
    layout.py        the page header, theme and CSS shared by every tab
    errors.py        bad input as one line that names the fix (no traceback)
    limits.py        what a tab cannot show on the loaded corpus, and why
    code.py          the "Show code" snippets (picaso_core and gradio_client)
    *_tab.py         one tab each: Compose & compare, State soup, Loss landscape, Attribution,
                     Benchmarks, Fine-tuning, Primer, COFFEE lab

Nothing else in picaso_core imports this package, and only this package imports gradio.
"""

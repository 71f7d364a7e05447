"""The Gradio app's pieces. Each tab is its own module with a `TITLE` and a `render(res)` that lays
the tab out inside the current `gr.Tab`; app.py renders them in the order a talk walks through.

    resources.py     what loads once and is shared read-only (model, corpus, store, retriever)
    layout.py        the page header, theme and CSS shared by every tab
    compose_tab.py   Compose & compare (tab 1)

The core (picaso_core.*) never imports this package.
"""

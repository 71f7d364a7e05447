"""The Gradio app, in three wings around what every tab shares.

    tabs/        one module per tab, named by the tab (compose, soup, landscape, attribution,
                 benchmarks, finetune, primer, coffee); a tab's helpers beside it under its name
    tour/        talk mode: the tour's steps (data), runs, cache and CLI, controls, links, the
                 static site, exports
    server/      serving plumbing only: the model pool, bounded queue and sessions, threads,
                 allocator, background work, the slimmed page config, the ZeroGPU decorator

What every tab shares stays here:

    layout.py    the page header, theme and CSS; PageLoad (a tab's opening values)
    errors.py    bad input as one line that names the fix (no traceback)
    limits.py    what a tab cannot show on the loaded corpus, and why
    code.py      the "Show code" snippets (picaso_core and gradio_client)
    pickers.py   context pickers by search

The rules (tests/test_architecture.py): no tab imports another tab; the tour's steps import
nothing of the UI; the server wing imports no tab and nothing of the tour; the shared modules
import no wing but the server. What loads once and is shared (model, corpus, store, retriever) is
below the UI, in picaso_core.session. Nothing else in picaso_core imports this package (the Space
folders excepted), and only this package imports gradio.
"""

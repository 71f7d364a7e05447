"""Talk mode: the guided tour and what a speaker takes away from the app.

    steps.py      the tour's steps as data (imports nothing of the UI)
    runs.py       what each step computes, over the tabs' own handlers
    cache.py      the steps' results kept per model and corpus, /tour_step, and the CLI:
                  python -m picaso_core.ui.tour build | export
    controls.py   the tour bar, Copy link, Large text, the tabs' Export menus, wired to the page
    links.py      a tab's inputs by name: ?tab=...&k=... links
    static.py     the tour as a static site
    exports.py    CSV / HTML / Projector TSV files of what a tab shows
    downloads.py  the tabs' Export menus: files under <cache>/exports, a download route, a TTL sweep

Importing this package imports none of its modules (the static export and steps stay light).
"""

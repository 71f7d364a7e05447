"""The analyses: pure functions of (model, token ids, states) that return plain data.

    evaluate.py      every composition method on one sample: loss, generation, timings
    experiments.py   the paper's protocol over a corpus: `python -m picaso_core.analysis.experiments`
    summaries.py     tables and the HTML report from experiment records
    attribution.py   leave-one-in / leave-one-out / surrogate attribution, precision (table 4)
    landscape.py     loss over the plane through three states and the line between two (fig. 2)
    soup.py          the skill library: state features, t-SNE / UMAP / PCA, retrieval, mixing
    skill_eval.py    in-context skill accuracy from composed states

They import the engine, compose, the store, retrieval and data; figures are built from their
results in picaso_core.plots, never here.
"""

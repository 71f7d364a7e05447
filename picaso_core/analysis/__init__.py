"""The analyses: pure functions of (model, token ids, states) that return plain data.

    evaluate.py         every composition method on one sample: loss, generation, timings
    sweep.py            the protocol's k-sweep: k lists, the record log, run_sweep
    measurements.py     process vs generate (fig. 7) and chunk lengths (fig. 9)
    summaries.py        tables and the HTML report from experiment records
    attribution.py      leave-one-in / leave-one-out / surrogate attribution, precision (table 4)
    landscape.py        loss over the plane through three states and the line between two (fig. 2)
    landscape_fig2.py   fig. 2: the Soup and CASO planes and lines of samples, prop. 4 distances
    soup.py             the skill library: state features per layer, task retrieval
    soup_projection.py  the library's maps: PCA / t-SNE / UMAP
    soup_mixing.py      mixing states: soup vs shots, retrieval + mixing, two skills, A-decay
    skill_eval.py       in-context skill accuracy from composed states

They import the engine, compose, the store, retrieval and data; figures are built from their
results in picaso_core.plots, never here. The paper's protocol over a corpus, which writes the report
through picaso_core.plots, is the command above both: `python -m picaso_core.experiments`.
"""

"""Plotly figure builders, one module per analysis (soup, landscape, attribution, experiments).

They take the plain data the analysis modules return (lists, numpy arrays, small dataclasses) and
return `plotly.graph_objects.Figure`s, so the same figure serves a tab, a script and the HTML
report. No Gradio here, and no model calls: a figure is a pure function of its data.
"""

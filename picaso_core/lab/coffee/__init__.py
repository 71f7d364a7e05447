"""COFFEE (COntext From FEEdback, Zattra et al.) beside the S6 layer it is compared with.

    model.py     the SISO layers (eq. 2-7) and the induction-head and digits architectures
    cli.py       `python -m picaso_core.lab.coffee`: one training run, one JSON line
Training itself (shared with the app's COFFEE lab tab) is picaso_core/lab/training.py.
"""

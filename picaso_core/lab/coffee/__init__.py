"""COFFEE (COntext From FEEdback, Zattra et al.) beside the S6 layer it is compared with.

    model.py     the SISO layers (eq. 2-7) and the induction-head and digits architectures
    cli.py       `python -m picaso_core.lab.coffee`: one training run, one JSON line
Training itself (shared with the app's COFFEE lab tab) is picaso_core/lab/training.py.

The face (docs/api.md lists every name) is eager: it holds model.py's layers and models, which the
CLI and lab/training.py import anyway; it leaves out cli.py, which imports lab/training.py
(that would make a circle: training -> lab.coffee -> cli -> training).
"""

from picaso_core.lab.coffee.model import (S6, Coffee, DigitsModel, IHModel, coffee_scan, coffee_step, linear_scan,
                                          n_params)

__all__ = ["Coffee", "S6", "IHModel", "DigitsModel", "coffee_step", "coffee_scan", "linear_scan", "n_params"]

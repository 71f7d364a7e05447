"""COFFEE (COntext From FEEdback, Zattra et al.) beside the S6 layer it is compared with.

    model.py     the SISO layers (eq. 2-7) and the induction-head and digits architectures
    cli.py       `python -m picaso_core.lab.coffee`: one training run, one JSON line
Training itself (shared with the app's COFFEE lab tab) is picaso_core/lab/training.py.

The face (docs/api.md lists every name) is lazy (PEP 562 `__getattr__`): model.py imports torch, and
`python -m picaso_core.lab.coffee` runs this file first; lazy, its `--help` and a bad value answer
without torch. It leaves out cli.py, which imports lab/training.py (that would make a circle:
training -> lab.coffee -> cli -> training).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.lab.coffee.model import S6, Coffee, DigitsModel, IHModel, coffee_scan, coffee_step  # noqa: F401
    from picaso_core.lab.coffee.model import linear_scan, n_params  # noqa: F401

_FACE = {"model": ("Coffee", "S6", "IHModel", "DigitsModel", "coffee_step", "coffee_scan", "linear_scan", "n_params")}
__getattr__, __dir__, __all__ = lazy_face(__name__, _FACE)

"""Where the bundled assets are: the demo model, the demo data and the shipped analyses.

A checkout (and `pip install -e .`) reads them from the repository's assets/ folder; `pip install .`
copies that folder into the package as picaso_core/assets (pyproject.toml maps it there), so the
demo model and data are found from any working directory either way. PICASO_ASSETS overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ASSETS", "assets_dir"]

_PKG = Path(__file__).resolve().parent.parent  # picaso_core/


def assets_dir() -> Path:
    """The assets folder: $PICASO_ASSETS, else the installed package's copy, else the checkout's."""
    if os.environ.get("PICASO_ASSETS"):
        return Path(os.environ["PICASO_ASSETS"])
    for folder in (_PKG / "assets", _PKG.parent / "assets"):
        if (folder / "demo_model").is_dir():
            return folder
    return _PKG.parent / "assets"  # missing: load_model("demo") and load_demo name the fix


ASSETS = assets_dir()

"""A Hugging Face Space's folder for each way of hosting the app (docs/space.md).

    python -m picaso_core.space prepare --kind zerogpu|docker|static OUT

    cards.py     each kind's Space card (the README's YAML front matter), requirements and cost
    prepare.py   writes OUT: the app and package, assets, requirements, the card; the CLI

The top of the layers (tests/test_architecture.py): it may import ui, nothing imports it.

The face (docs/api.md lists every name) is eager: both modules are standard library only, and the
CLI imports both. The function that writes a folder is `picaso_core.space.prepare.prepare`:
`picaso_core.space.prepare` is its module, so the face does not shadow it.
"""

from picaso_core.space.cards import COST, KINDS, card, check_kind, readme, requirements
from picaso_core.space.prepare import PrepareError, main

__all__ = ["KINDS", "COST", "card", "readme", "requirements", "check_kind", "PrepareError", "main"]

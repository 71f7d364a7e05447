"""A Hugging Face Space's folder for each way of hosting the app (docs/space.md).

    python -m picaso_core.space prepare --kind zerogpu|docker|static OUT

    cards.py     each kind's Space card (the README's YAML front matter), requirements and cost
    prepare.py   writes OUT: the app and package, assets, requirements, the card; the CLI

The top of the layers (tests/test_architecture.py): it may import ui, nothing imports it.
"""

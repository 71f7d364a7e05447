"""`python -m picaso_core.store build | check | repair ...`: see picaso_core/store/cli.py."""

from picaso_core.store.cli import main

main()

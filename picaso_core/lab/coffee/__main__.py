"""`python -m picaso_core.lab.coffee ...`: see cli.py."""

from picaso_core.lab.coffee.cli import main

main()

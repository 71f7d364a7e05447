"""`python -m picaso_core.store build ...`: see picaso_core/store/build.py."""

from picaso_core.store.build import main

main()

"""python -m picaso_core.ui.tour build | export (picaso_core.ui.tour.cache)."""

from picaso_core.ui.tour.cache import main

main()

"""python -m picaso_core.ui.tour build | export (picaso_core.ui.tour.cache)."""

from picaso_core.ui.tour.cli import parse_args

parse_args()  # first, light: --help and a bad value answer before the tour's imports (gradio, torch)

from picaso_core.ui.tour.cache import main  # noqa: E402  (the command's work, after its arguments)

main()

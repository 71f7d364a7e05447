"""`python -m picaso_core.space prepare --kind zerogpu|docker|static OUT`: see picaso_core/space/prepare.py."""

from picaso_core.space.prepare import main

main()

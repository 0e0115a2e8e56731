"""``python -m geosteer.cli`` == ``geosteer``."""

from geosteer.cli import main

main()

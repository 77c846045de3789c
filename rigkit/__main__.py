"""``python -m rigkit`` runs the command line."""

from rigkit.cli import main

main()

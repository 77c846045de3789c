"""``python -m rigkit`` runs the command line."""

from rigkit.cli.main import main

main()

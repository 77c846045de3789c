"""rigkit's llama-swap stand-in: the part of llama-swap v250 the rig relies on.

See tests/standins/README.md. Stdlib plus PyYAML (bundled into the zipapp by
tests/standins/build_llama_swap.py). Entry point: ``llama_swap.cli.main``.
"""

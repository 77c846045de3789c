"""pyinfra facts rigkit reads on the host, a module per tool as pyinfra's own (``pyinfra/facts/*.py``),
each fact shaped like pyinfra's (``command()`` + ``process()``), its docstring naming the command and
the output it parses. Import a fact from its module; this package re-exports nothing.

- :mod:`~rigkit.operations.facts.nvidia`: ``nvidia-smi``
- :mod:`~rigkit.operations.facts.pacman`: ``pacman -Q``, ``pacman-conf IgnorePkg``, the sync databases
- :mod:`~rigkit.operations.facts.mkinitcpio`: mkinitcpio's effective HOOKS
- :mod:`~rigkit.operations.facts.dkms`: ``dkms status``
- :mod:`~rigkit.operations.facts.server`: the kernel, the boot id, the loaded module, the host's Python
- :mod:`~rigkit.operations.facts.files`: JSON files, files' and folders' states
- :mod:`~rigkit.operations.facts.rig`: the holds file, the host lock, whether the rig is busy
- :mod:`~rigkit.operations.facts.agent`: what the host agent answers (models, generations)
- :mod:`~rigkit.operations.facts.util`: the exit-code mark the commands print

The sandbox host answers the same commands through its stand-ins; nothing here knows about it.
"""

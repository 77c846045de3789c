"""pyinfra operations pyinfra does not have, written like pyinfra's own: read facts, compare with
the wanted state, yield only the commands that close the difference (no command = no change,
which is what makes a converged run report 0 changes). One module per concern; the roles
(``roles/``) only orchestrate them:

- :mod:`rigkit.operations.pacman`: pinned packages from the archive, ``IgnorePkg``
- :mod:`rigkit.operations.config`: JSON keys merged into a config file, rendered config files
- :mod:`rigkit.operations.secrets`: secret env files (uploaded or generated on the host)
- :mod:`rigkit.operations.gpu`: the GPU power limit
- :mod:`rigkit.operations.boot`: the ``kms`` hook (rigkit's mkinitcpio drop-in), reboots and the reboot gate
- :mod:`rigkit.operations.release`: an executable from a pinned release tarball
- :mod:`rigkit.operations.llama_swap`: activating llama-swap's live config on the host
- :mod:`rigkit.operations.models`: model weights fetched and HyperQwen's prepare step
- :mod:`rigkit.operations.generations`: the generation a deploy leaves, recorded on the host
- :mod:`rigkit.operations.facts`: the facts they (and the preflight and drift) read, a module per
  tool, shaped like pyinfra's own (``pyinfra/facts/*.py``)

The pure helpers (:func:`~rigkit.operations.pacman.archive_url`,
:func:`~rigkit.operations.pacman.include_argv`, :func:`~rigkit.operations.config.merge_json`) are
unit tested alone; the operator's pacman.conf and mkinitcpio files are read through their owners
(``pacman-conf``, mkinitcpio v41's loading: :mod:`rigkit.host.pacman`, :mod:`rigkit.common.mkinitcpio`);
the operations are proven against the sandbox host. Nothing here touches pyinfra state at import time.
"""

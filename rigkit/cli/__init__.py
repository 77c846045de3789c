"""The ``rigkit`` commands (click): :mod:`rigkit.cli.main` is the group and ``rigkit deploy``/``check``/
``render``; one module per command group beside it (``drift``, ``generations`` and ``rollback``,
``models``, ``report``, ``window``, ``wire-in``, ``bench``), :mod:`rigkit.cli.common` what they share
(the console, ``-i``/``--host``, loading the inventory), :mod:`rigkit.cli.deployout` the deploy's
output. Commands parse arguments and print; the deploy's run and transaction are
:mod:`rigkit.deploy`. Commands read the inventory through :mod:`rigkit.spec`, render through
:mod:`rigkit.render`, deploy through pyinfra and ``deploy.py``; nothing below imports them back."""

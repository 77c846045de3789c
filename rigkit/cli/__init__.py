"""The ``rigkit`` commands (click): :mod:`rigkit.cli.main` is the group and ``rigkit deploy``/``check``/
``render``; one module per command group beside it (``drift``, ``generations`` and ``rollback``,
``models``, ``report``, ``window``, ``wire-in``, ``bench``), :mod:`rigkit.cli.common` what they share
(the console, ``-i``/``--host``, loading the inventory), :mod:`rigkit.cli.deployrun` running pyinfra's
deploy and its smoke. Commands read the inventory through :mod:`rigkit.spec`, render through
:mod:`rigkit.render`, deploy through pyinfra and ``deploy.py``; nothing below imports them back."""

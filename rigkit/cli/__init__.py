"""The ``rigkit`` commands (click): :mod:`rigkit.cli.main` is the group and ``rigkit deploy``/``check``/
``render``; one module per command group beside it (``drift``, ``generations`` and ``rollback``,
``models``, ``report``, ``window``, ``wire-in``, ``bench``), :mod:`rigkit.cli.common` what they share
(the console, ``-i``/``--host``, loading the inventory), :mod:`rigkit.cli.deployout` the deploy's
output. Commands parse arguments, call one function and print; every change to the rig (deploy,
rollback, the wire-in's activation) is :mod:`rigkit.deploy`'s. Commands read the inventory through
:mod:`rigkit.spec`, render through :mod:`rigkit.render`, deploy through pyinfra and ``deploy.py``;
nothing below imports them back.

Imports are at module level, except (inside the command that needs it) what ``rigkit --help`` must not
pay for and what must not load before pyinfra's CLI package gevent-patches the process
(:func:`rigkit.cli.main.main`; nothing may import urllib3 first): the spec, the lock and rendering
(pydantic; the validators fetch with requests), drift (pyinfra's API), the deploy (its changes and the
transaction start threads; its path choice, source and wire-in import the above), the report's page,
sweep and charts (drift, pydantic, matplotlib), the bench's client, runner, session, context and results
(requests), requests itself and ``pyinfra_cli`` (importing it patches). tests/unit/test_import_graph.py
holds the first part: importing the CLI loads none of pydantic, requests, urllib3, matplotlib, pyinfra
or gevent (benchmarks/cli_help_time.py measures ``rigkit --help``)."""

"""What the sandbox tests declare as group data (pyinfra's ``group_data/all.py`` of the project the
sandbox tests run in: ``tests/harness/sandbox_project.py`` copies this folder there).

The checkout's own ``group_data/all.py`` is the operator's rig data: an operator may edit it (flip a
member's ``staged`` to wire HyperQwen in) while the tests run, so the tests never read it. The rest of
the sandbox's data is ``inventory/sandbox.py``'s (connection, pins, images, hub repos) and the spec's
defaults; a test that needs a variant passes ``--data`` or ``RIGKIT_SANDBOX_DATA``.
"""

# HyperQwen is staged (not in the live config): the wire-in tests wire it in with
# --data 'llama_swap={"members": {"hyperqwen": {"staged": false}}}' and expect the deploy to take it out again.
llama_swap = {"members": {"hyperqwen": {"staged": True}}}

# The HyperQwen knobs the tests' renders and windows expect (the spec's defaults, said here so a
# change of default is a visible change of the tests' data).
hyperqwen = {"spec": "dflash2", "prefix_cache": True, "dflash_tokens": 7}

"""Every change to the rig, the control side: ``rigkit deploy``, ``rigkit rollback`` and the wire-in's
activation, each a function from parsed arguments to an exit code that says what it does through an
:class:`rigkit.deploy.run.Output` (the CLI's prints it) — :mod:`rigkit.deploy.changes` (deploy, its
dry plan, rollback) and :mod:`rigkit.deploy.wirein` (activate, roll back, release the live config) —
under one change context (:func:`rigkit.deploy.transaction.held`: the lease, every host's lock
taken, released on the way out whatever raises). Beside them: which host takes the full run and the
restamp (:mod:`rigkit.deploy.converged`, from drift's probe: the folders import ``cli`` → ``deploy``
→ ``drift``), what a deploy applies (:mod:`rigkit.deploy.source`: the inventory's spec rendered, or
a recorded generation), the preflight's decisions (:mod:`rigkit.deploy.preflight`), running pyinfra
(:mod:`rigkit.deploy.run`) and the change confirmed or put back under the host lock
(:mod:`rigkit.deploy.transaction`). What drift reads of a generation is below both, in
:mod:`rigkit.render` (:mod:`rigkit.render.generations`, :mod:`rigkit.render.wheelhouse`); the
operations and the facts they read are in :mod:`rigkit.operations`, the roles in ``roles/``."""

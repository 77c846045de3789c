"""Inventory to spec: pyinfra's inventory and ``group_data`` layers (:mod:`rigkit.spec.inventory`) become
one validated :class:`rigkit.spec.model.RigSpec` (the models, :mod:`rigkit.spec.model`; the cross-field
checks, :mod:`rigkit.spec.validate`), with what the spec derives beside it: the llama-swap members
(:mod:`rigkit.spec.members`), llama-swap's strict config model (:mod:`rigkit.spec.llama_swap_schema`) and
where secrets come from (:mod:`rigkit.spec.secrets`). Nothing here touches a host, reads the lock file or
asks the network: the lock file, and the spec as it resolves it, are :mod:`rigkit.lockfile`'s
(``tests/unit/test_lockfile_home.py``)."""

"""Inventory to spec: pyinfra's inventory and ``group_data`` layers (:mod:`rigkit.spec.inventory`) become
one validated :class:`rigkit.spec.model.RigSpec` (the models, :mod:`rigkit.spec.model`; the cross-field
checks, :mod:`rigkit.spec.validate`), with what the spec derives or pins beside it: the llama-swap
members (:mod:`rigkit.spec.members`), llama-swap's strict config model
(:mod:`rigkit.spec.llama_swap_schema`), the model lock (:mod:`rigkit.spec.modellock`) and where secrets
come from (:mod:`rigkit.spec.secrets`). Nothing here touches a host."""

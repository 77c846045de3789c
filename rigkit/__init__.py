"""rigkit: rebuild, check and smoke-bench a single-GPU LLM inference rig with pyinfra.

The importable library. Nothing here touches pyinfra state at import time; data flows one
way: inventory + group_data (pyinfra's loader) -> ``host.data`` -> :class:`rigkit.spec.model.RigSpec`
-> roles -> operations. Rendering has one path, :func:`rigkit.render.files.render`.
"""

__version__ = "0.1.0"

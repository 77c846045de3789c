"""Spec to files: the one rendering path (:mod:`rigkit.render.files`), the real validators the rendered
files go through (:mod:`rigkit.render.checks`), the declared host state the deploy enforces and
drift compares (:mod:`rigkit.render.declared_state`), and what a deploy records and ships, read by
the deploy and drift alike (below both): a generation's manifest and its reading back
(:mod:`rigkit.render.generations`), the agent's wheelhouse (:mod:`rigkit.render.wheelhouse`).
Nothing here touches a host."""

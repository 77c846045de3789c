"""Spec to files: the one rendering path (:mod:`rigkit.render.files`), the real validators the rendered
files go through (:mod:`rigkit.render.checks`) and the declared host state the deploy enforces and
drift compares (:mod:`rigkit.render.declared_state`). Nothing here touches a host."""

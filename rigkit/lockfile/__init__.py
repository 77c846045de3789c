"""The lock file: what ``rigkit lock`` resolves the spec's intent into (``<inventory>.lock.json``, or the
spec's ``lockfile``) and the deploy, drift and ``rigkit check`` read. "lock" in rigkit's control-side names
means this file; the flock that serialises changes to the rig is the *host lock* (:mod:`rigkit.host.lock`).

- :mod:`.document`: the format (pydantic models), read, written, compared — no network;
- :mod:`.path`: :func:`~rigkit.lockfile.path.lock_file_path`, the one answer to where a spec's lock file is;
- :mod:`.view`: the spec as its lock resolves it and what the lock lacks for it — reads the file, asks nothing;
- :mod:`.resolve`: the resolvers of the pins, images and llama-swap release, through :mod:`.archive` (the
  Arch Linux Archive), :mod:`.registry` (OCI registries) and :mod:`.release` (the release's checksums);
- :mod:`.hub`: the models' resolver (the Hugging Face hub, a url model's HEAD);
- :mod:`.errors`: what goes wrong, with its exit code.

It stands above :mod:`rigkit.spec` (it reads the spec; the spec never imports it, so nothing under
``rigkit/spec/`` asks the network: ``tests/unit/test_lockfile_home.py``) and below ``cli``, ``deploy`` and
``drift``."""

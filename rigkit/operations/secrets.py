"""Secret files whose values never reach any output, diff or op name: an env file uploaded from the
control machine (:func:`secret_env_file`), one generated once on the host (:func:`generated_secret`)."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import operation


@operation()
def secret_env_file(path: str, key: str, value: str, user: str = "root", group: str = "root", mode: str = "600"):
    """Write ``KEY=value`` to a secret env file without the value reaching any output.

    + path: e.g. ``/etc/rigkit/secrets/hf.env``
    + key: the variable name (shown); ``value`` never is
    + user/group/mode: ownership (``root``/``root``/``600`` by default)

    Compares the file's sha256 with the wanted content's; uploads with a plain file upload (no
    ``--diff`` output, no content in commands or op names), then fixes owner and mode.
    """
    import hashlib

    from pyinfra.api import FileUploadCommand
    from pyinfra.facts.files import File, Sha256File

    content = f"{key}={value}\n"
    wanted = hashlib.sha256(content.encode()).hexdigest()
    info = host.get_fact(File, path=path)
    current = host.get_fact(Sha256File, path=path) if info else None
    if current != wanted:
        directory = path.rsplit("/", 1)[0]
        yield f"install -d -m 0750 -o root -g {group} {directory}"
        yield f"install -m 0600 /dev/null {path}"
        yield FileUploadCommand(StringIO(content), path, remote_temp_filename=host.get_temp_filename(path))
        info = None
    yield from _owner_and_mode(path, info, user, group, mode)


def _owner_and_mode(path: str, info: dict | None, user: str, group: str, mode: str):
    """``chown``/``chmod`` commands for what differs (``info``: pyinfra's ``File`` fact, or None
    for a file just written)."""
    if not info or info.get("user") != user or info.get("group") != group:
        yield f"chown {user}:{group} {path}"
    if not info or f"{info.get('mode')}" != mode.lstrip("0"):
        yield f"chmod {mode} {path}"


@operation()
def generated_secret(path: str, key: str, user: str = "root", group: str = "root", mode: str = "640", nbytes: int = 32):
    """Generate ``KEY=<random hex>`` once, on the host, into ``path``; never regenerated.

    + path: e.g. ``/etc/rigkit/secrets/hyperqwen.env``
    + key: the variable (``VLLM_API_KEY``)
    + nbytes: random bytes from ``/dev/urandom`` (hex-encoded: 2 x nbytes characters)

    The value is made by the host's shell and written with a restrictive umask; it never
    crosses the connection, so no output, log or op name can hold it.
    """
    from pyinfra.facts.files import File

    info = host.get_fact(File, path=path)
    if not info or not info.get("size"):
        directory = path.rsplit("/", 1)[0]
        yield f"install -d -m 0750 -o root -g {group} {directory}"
        yield (f"( umask 077; printf '{key}=%s\\n' \"$(od -An -N{nbytes} -tx1 /dev/urandom | tr -d ' \\n')\" > {path} )")
        info = None
    yield from _owner_and_mode(path, info, user, group, mode)

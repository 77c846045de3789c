"""Secret files whose values never reach any output, diff or op name — nor any file another user of
the host could read, even for a moment: an env file uploaded from the control machine
(:func:`secret_env_file`), one generated once on the host (:func:`generated_secret`). Their folder
(``/etc/rigkit/secrets/``) is declared once, by the secrets role, not here."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import operation

from rigkit import paths
from rigkit.operations.shell import argv, script

#: Where a secret upload waits for sudo's copy: a folder owned by the SSH user, mode 0700.
UPLOAD_DIR = f"{paths.STATE_DIR}/upload"


@operation()
def secret_env_file(path: str, key: str, value: str, user: str = "root", group: str = "root", mode: str = "600"):
    """Write ``KEY=value`` to a secret env file without the value reaching any output.

    + path: e.g. ``/etc/rigkit/secrets/hf.env``
    + key: the variable name (shown); ``value`` never is
    + user/group/mode: ownership (``root``/``root``/``600`` by default)

    Compares the file's sha256 with the wanted content's; creates the file empty with its final
    owner and mode, then uploads (no ``--diff`` output, no content in commands or op names) — under
    sudo through a 0700 folder of the SSH user's (:data:`UPLOAD_DIR`), never a default-mode file in
    ``/tmp``; the folder holding ``path`` must exist (the secrets role declares it).

    **Example:**

    .. code:: python

        from rigkit.operations.secrets import secret_env_file
        secret_env_file(
            name="Install the HF token from the control machine",
            path="/etc/rigkit/secrets/hf.env",
            key="HF_TOKEN",
            value="<the Hugging Face token, from HF_TOKEN or hf's token file>",
            user="root",
            group="root",
            mode="600",
        )
    """
    import hashlib

    from pyinfra.api import FileUploadCommand
    from pyinfra.facts.files import File, Sha256File

    content = f"{key}={value}\n"
    wanted = hashlib.sha256(content.encode()).hexdigest()
    info = host.get_fact(File, path=path)
    current = host.get_fact(Sha256File, path=path) if info else None
    if current != wanted:
        # the destination exists first with its final mode, so neither an SFTP write nor sudo's
        # `cp` onto it ever leaves the content in a readable file
        yield argv("install", "-m", mode, "-o", user, "-g", group, "/dev/null", path)
        # under sudo, pyinfra uploads as the SSH user to a temporary file, then copies it into place:
        # that file lives in a folder only the SSH user (and root) can enter, and is removed after
        yield argv("mkdir", "-p", paths.STATE_DIR)
        yield script('install -d -m 0700 -o "${{SUDO_USER:-$(id -un)}}" -g "$(id -gn "${{SUDO_USER:-$(id -un)}}")" {folder}',
                     folder=UPLOAD_DIR)
        temp = f"{UPLOAD_DIR}/{hashlib.sha1(path.encode()).hexdigest()}"
        yield FileUploadCommand(StringIO(content), path, remote_temp_filename=temp)
        yield argv("rm", "-f", temp)
        info = None
    yield from _owner_and_mode(path, info, user, group, mode)


def _owner_and_mode(path: str, info: dict | None, user: str, group: str, mode: str):
    """``chown``/``chmod`` commands for what differs (``info``: pyinfra's ``File`` fact, or None
    for a file just written)."""
    if not info or info.get("user") != user or info.get("group") != group:
        yield argv("chown", f"{user}:{group}", path)
    if not info or f"{info.get('mode')}" != mode.lstrip("0"):
        yield argv("chmod", mode, path)


@operation()
def generated_secret(path: str, key: str, user: str = "root", group: str = "root", mode: str = "640", nbytes: int = 32):
    """Generate ``KEY=<random hex>`` once, on the host, into ``path``; never regenerated.

    + path: e.g. ``/etc/rigkit/secrets/hyperqwen.env``
    + key: the variable (``VLLM_API_KEY``)
    + nbytes: random bytes from ``/dev/urandom`` (hex-encoded: 2 x nbytes characters)

    The value is made by the host's shell and written with a restrictive umask; it never
    crosses the connection, so no output, log or op name can hold it.

    **Example:**

    .. code:: python

        from rigkit.operations.secrets import generated_secret
        generated_secret(
            name="Generate HyperQwen's VLLM_API_KEY once on the host",
            path="/etc/rigkit/secrets/hyperqwen.env",
            key="VLLM_API_KEY",
            user="root",
            group="llama-swap",
            mode="640",
            nbytes=32,
        )
    """
    from pyinfra.facts.files import File

    info = host.get_fact(File, path=path)
    if not info or not info.get("size"):
        yield script("( umask 077; printf {line} \"$(od -An -N{nbytes} -tx1 /dev/urandom | tr -d ' \\n')\" > {path} )",
                     line=f"{key}=%s\\n", nbytes=int(nbytes), path=path)
        info = None
    yield from _owner_and_mode(path, info, user, group, mode)

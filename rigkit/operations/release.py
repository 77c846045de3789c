"""An executable installed from a pinned release tarball (URL + sha256)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.files import FileContents
from pyinfra.operations import files
from rigkit.operations.shell import argv, script


@operation()
def release_binary(url: str, sha256: str, dest: str, member: str, marker: str):
    """Install one executable from a pinned release tarball (URL + sha256).

    + url/sha256: the tarball and its pinned hash (checked by ``files.download``)
    + dest: where the executable goes (``/usr/local/bin/llama-swap``)
    + member: the file's name inside the tarball
    + marker: a file recording the sha256 of the tarball the installed executable came from

    No change when the marker names ``sha256`` and ``dest`` exists.

    **Example:**

    .. code:: python

        from rigkit.operations.release import release_binary
        release_binary(
            name="Install llama-swap v250 from its pinned release tarball",
            url="https://github.com/mostlygeek/llama-swap/releases/download/v250/llama-swap_250_linux_amd64.tar.gz",
            sha256="<64 hex digits: the tarball's sha256 (llama_swap.release_sha256)>",
            dest="/usr/local/bin/llama-swap",
            member="llama-swap",
            marker="/usr/local/lib/rigkit/llama-swap.sha256",
        )
    """
    from pyinfra.facts.files import File

    recorded = host.get_fact(FileContents, path=marker)
    if recorded and recorded[0].strip() == sha256 and host.get_fact(File, path=dest):
        host.noop(f"{dest} is from the pinned tarball {sha256[:12]}")
        return
    tarball = f"/var/cache/rigkit/{url.rsplit('/', 1)[-1]}"
    yield argv("install", "-d", "-m", "0755", "/var/cache/rigkit", marker.rsplit("/", 1)[0])
    yield from files.download._inner(src=url, dest=tarball, sha256sum=sha256)
    yield script('tmp=$(mktemp -d) && tar -xzf {tarball} -C "$tmp" {member} && '
                 'install -m 0755 "$tmp"/{member} {dest} && rm -rf "$tmp" && echo {sha256} > {marker}',
                 tarball=tarball, member=member, dest=dest, sha256=sha256, marker=marker)

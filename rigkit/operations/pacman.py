"""pyinfra operations pyinfra does not have, written like pyinfra's own: read facts, compare with
the wanted state, yield only the commands that close the difference (no command = no change,
which is what makes a converged run report 0 changes).

The pure helpers (:func:`archive_url`, :func:`ensure_ignorepkg`, :func:`merge_json`) are unit
tested alone; the operations are proven against the sandbox host.
"""

from __future__ import annotations

import json
import time
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand, OperationError, StringCommand, operation
from pyinfra.facts.files import FileContents
from pyinfra.operations import files

from rigkit.facts import JsonFile, KernelState, NvidiaSmi, PacmanSyncDbs, PacmanVersions


def archive_url(base: str, package: str, version: str, arch: str = "x86_64") -> str:
    """The Arch Linux Archive URL of one package file:
    ``<base>/<first letter>/<name>/<name>-<[epoch:]pkgver-pkgrel>-<arch>.pkg.tar.zst``
    (wiki "Arch Linux Archive"; epochs stay in the file name)."""
    return f"{base.rstrip('/')}/{package[0]}/{package}/{package}-{version}-{arch}.pkg.tar.zst"


@operation()
def pacman_pins(pins: dict[str, str], archive: str):
    """Install pinned package versions together from the archive with ``pacman -U``.

    + pins: ``{package: "[epoch:]pkgver-pkgrel"}``
    + archive: base URL laid out like the Arch Linux Archive (``.../packages``)

    Compares ``pacman -Q`` with the pins; when any differs, installs every pin in one
    transaction (coupled packages such as ``nvidia-utils``/``opencl-nvidia``/``cuda`` must move
    together) with ``--needed``. Never ``pacman -S`` a pinned name: with ``IgnorePkg`` it prompts
    and ``--noconfirm`` answers yes. A missing archive file fails with pacman's error naming its URL.

    **Example:** ``pacman_pins(name="Pin the driver", pins={"nvidia-utils": "610.57-1"}, archive=url)``
    """
    installed = host.get_fact(PacmanVersions, packages=sorted(pins))
    differ = {p: (installed.get(p), v) for p, v in sorted(pins.items()) if installed.get(p) != v}
    if not differ:
        host.noop("pinned packages installed: " + ", ".join(f"{p} {v}" for p, v in sorted(pins.items())))
        return
    if not host.get_fact(PacmanSyncDbs):
        # a host that never synced cannot resolve the pins' dependencies (dkms, libglvnd...)
        yield "pacman -Sy --noconfirm"
    urls = " ".join(archive_url(archive, p, v) for p, v in sorted(pins.items()))
    yield f"pacman -U --noconfirm --needed {urls}"


def ensure_ignorepkg(lines: list[str], packages: list[str]) -> list[str]:
    """pacman.conf lines with ``packages`` held by ``IgnorePkg`` inside ``[options]``.

    The first ``IgnorePkg`` line of ``[options]`` (commented ``#IgnorePkg   =`` included) becomes
    ``IgnorePkg = <packages already held + ours>``; without one, the line is added at the end of
    ``[options]``. Packages the operator already holds are kept; other sections untouched.
    Raises ValueError when the file has no ``[options]`` section.
    """
    out = list(lines)
    start = next((i for i, ln in enumerate(out) if ln.strip() == "[options]"), None)
    if start is None:
        raise ValueError("pacman.conf has no [options] section")
    end = next((i for i in range(start + 1, len(out)) if out[i].strip().startswith("[")), len(out))
    held: list[str] = []
    first = None
    for i in range(start + 1, end):
        stripped = out[i].strip()
        body = stripped.lstrip("#").strip()
        if body.startswith("IgnorePkg") and "=" in body:
            if not stripped.startswith("#"):
                held += body.split("=", 1)[1].split("#", 1)[0].split()
                if first is None or out[first].strip().startswith("#"):
                    first = i
            elif first is None:
                first = i
    wanted = list(dict.fromkeys(held + list(packages)))
    line = "IgnorePkg = " + " ".join(wanted)
    if first is None:
        insert_at = end
        while insert_at > start + 1 and not out[insert_at - 1].strip():
            insert_at -= 1
        out.insert(insert_at, line)
    else:
        out[first] = line
        # later uncommented IgnorePkg lines in [options] are folded into the first
        out = [ln for i, ln in enumerate(out)
               if not (start < i < end and i != first and ln.strip().startswith("IgnorePkg") and "=" in ln)]
    return out


@operation()
def pacman_ignorepkg(packages: list[str], path: str = "/etc/pacman.conf"):
    """Hold ``packages`` with ``IgnorePkg`` inside ``[options]`` of pacman.conf.

    + packages: package names, kept alongside any the operator already holds
    + path: pacman.conf

    pyinfra's ``files.line`` would append a missing line after the last repo section, where
    pacman ignores it (``notes/pyinfra.md``); this edits ``[options]`` itself.
    """
    lines = host.get_fact(FileContents, path=path)
    if lines is None:
        raise OperationError(f"{path} does not exist; is this an Arch host?")
    try:
        wanted = ensure_ignorepkg(lines, packages)
    except ValueError as exc:
        raise OperationError(f"{path}: {exc}") from None
    if wanted == lines:
        host.noop(f"IgnorePkg holds {' '.join(packages)}")
        return
    yield from files.put._inner(src=StringIO("\n".join(wanted) + "\n"), dest=path, user="root", group="root", mode="644")


def merge_json(current: Any, wanted: Any) -> Any:
    """``wanted`` merged into ``current``: objects key by key (recursively), lists as a union
    keeping ``current``'s order, anything else replaced. Keys rigkit does not own are kept."""
    if isinstance(current, dict) and isinstance(wanted, dict):
        out = dict(current)
        for key, value in wanted.items():
            out[key] = merge_json(current[key], value) if key in current else value
        return out
    if isinstance(current, list) and isinstance(wanted, list):
        return current + [item for item in wanted if item not in current]
    return wanted


@operation()
def json_keys(path: str, keys: dict[str, Any], backup_suffix: str | None = None):
    """Own some keys of a JSON config file, keeping the rest (e.g. ``/etc/docker/daemon.json``).

    + path: the JSON file (created when missing)
    + keys: the keys rigkit owns, merged with :func:`merge_json`
    + backup_suffix: when set, an existing file is copied to ``path + suffix`` before it is replaced

    Compared as JSON, never as text; written with 4-space indentation like ``nvidia-ctk``. A
    file that is not a JSON object is refused, never overwritten.
    """
    current = host.get_fact(JsonFile, path=path)
    if current["error"]:
        raise OperationError(f"{path}: {current['error']}; fix or move it away, rigkit does not overwrite a file it cannot read")
    merged = merge_json(current["data"] or {}, keys)
    if current["exists"] and merged == current["data"]:
        host.noop(f"{path} holds {', '.join(sorted(keys))}")
        return
    if current["exists"] and backup_suffix:
        yield f"cp -a {path} {path}{backup_suffix}"
    yield from files.put._inner(src=StringIO(json.dumps(merged, indent=4) + "\n"), dest=path,
                                user="root", group="root", mode="644")


@operation()
def gpu_power_limit(watts: int, index: int = 0):
    """Set GPU ``index``'s power limit to ``watts`` W now and read it back.

    + watts: the limit in W; must lie within the card's ``power.min_limit``..``power.max_limit``
    + index: the GPU index

    No change when ``power.limit`` and ``enforced.power.limit`` already equal ``watts``. After
    ``nvidia-smi --power-limit`` the enforced limit is read back: open modules on some GPUs
    report success and change nothing (open-gpu-kernel-modules#483). The unit
    ``gpu-power-limit.service`` re-applies it at boot.
    """
    smi = host.get_fact(NvidiaSmi)
    if smi["state"] != "ok":
        raise OperationError(f"nvidia-smi: {smi['state']}: {smi['message']}")
    gpu = next((g for g in smi["gpus"] if g["index"] == index), None)
    if gpu is None:
        raise OperationError(f"nvidia-smi lists no GPU {index}")
    lo, hi = gpu["power_min_w"], gpu["power_max_w"]
    if lo is not None and hi is not None and not lo <= watts <= hi:
        raise OperationError(f"gpu_power_limit_w {watts} W is outside the card's limits {lo:g}–{hi:g} W")
    if gpu["power_limit_w"] == watts and gpu["power_enforced_w"] == watts:
        host.noop(f"GPU {index} power limit is {watts} W")
        return
    yield StringCommand(f"nvidia-smi --id={index} --power-limit={watts}")

    def read_back(state, host):  # noqa: F811
        after = host.get_fact(NvidiaSmi)
        g = next((g for g in after["gpus"] if g["index"] == index), None)
        if g is None or g["power_enforced_w"] != watts:
            enforced = g["power_enforced_w"] if g else "unknown"
            raise OperationError(f"GPU {index}: power limit set to {watts} W but enforced.power.limit reads {enforced}")

    yield FunctionCommand(read_back, (), {})


@operation(is_idempotent=False)
def reboot(reboot_timeout: int = 300, interval: float = 1.0):
    """Reboot and wait until the host answers with a **new boot id**.

    + reboot_timeout: seconds to wait for the host
    + interval: seconds between reconnect attempts

    pyinfra's ``server.reboot`` confirms by uptime, which a container shares with its host;
    ``/proc/sys/kernel/random/boot_id`` changes on every boot, real or container. Gate it with
    ``_if`` on the change that needs it: it always reboots.
    """
    before: list[str] = []

    def capture(state, host):  # noqa: F811 - pyinfra passes (state, host) by name
        before.append(host.get_fact(KernelState)["boot_id"])

    yield FunctionCommand(capture, (), {})
    yield StringCommand("( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &")

    def wait(state, host):  # noqa: F811 - proven on the sandbox host
        time.sleep(3)
        host.disconnect()
        deadline = time.monotonic() + reboot_timeout
        while time.monotonic() < deadline:
            host.connect(show_errors=False)
            if host.connected:
                if host.get_fact(KernelState)["boot_id"] not in ("", before[0]):
                    return
                host.disconnect()
            time.sleep(interval)
        raise OperationError(f"host did not come back with a new boot id within {reboot_timeout} s")

    yield FunctionCommand(wait, (), {})


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


@operation()
def config_file(path: str, text: str, user: str = "root", group: str = "root", mode: str = "644",
                backup: bool = True):
    """Install a rendered config file, keeping a copy of the one it replaces.

    + path: the remote file
    + text: its wanted content (from :func:`rigkit.render.render`)
    + backup: copy an existing, different file to ``<path>.bak-<UTC timestamp>`` first

    Nothing already on a host is lost: the backup is taken before the upload, only when the
    content differs.
    """
    from pyinfra.facts.files import Sha1File

    import hashlib

    current = host.get_fact(Sha1File, path=path)
    wanted = hashlib.sha1(text.encode()).hexdigest()
    if backup and current and current != wanted:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        yield f"cp -a {path} {path}.bak-{stamp}"
    yield from files.put._inner(src=StringIO(text), dest=path, user=user, group=group, mode=mode)


@operation()
def release_binary(url: str, sha256: str, dest: str, member: str, marker: str):
    """Install one executable from a pinned release tarball (URL + sha256).

    + url/sha256: the tarball and its pinned hash (checked by ``files.download``)
    + dest: where the executable goes (``/usr/local/bin/llama-swap``)
    + member: the file's name inside the tarball
    + marker: a file recording the sha256 of the tarball the installed executable came from

    No change when the marker names ``sha256`` and ``dest`` exists.
    """
    from pyinfra.facts.files import File

    recorded = host.get_fact(FileContents, path=marker)
    if recorded and recorded[0].strip() == sha256 and host.get_fact(File, path=dest):
        host.noop(f"{dest} is from the pinned tarball {sha256[:12]}")
        return
    tarball = f"/var/cache/rigkit/{url.rsplit('/', 1)[-1]}"
    yield "install -d -m 0755 /var/cache/rigkit " + marker.rsplit("/", 1)[0]
    yield from files.download._inner(src=url, dest=tarball, sha256sum=sha256)
    yield (f"tmp=$(mktemp -d) && tar -xzf {tarball} -C \"$tmp\" {member} && "
           f"install -m 0755 \"$tmp/{member}\" {dest} && rm -rf \"$tmp\" && echo {sha256} > {marker}")


@operation()
def http_ready(url: str, timeout_s: int = 60):
    """Wait until ``url`` answers HTTP 2xx on the host (``curl``), failing after ``timeout_s`` s.
    Always yields a command: gate it with ``_if`` on the change that restarted the service."""
    yield (f"for i in $(seq 1 {timeout_s}); do curl -fsS -o /dev/null --max-time 5 {url} && exit 0; sleep 1; done; "
           f"echo '{url} did not answer within {timeout_s} s' >&2; exit 1")

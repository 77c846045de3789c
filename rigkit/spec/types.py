"""One type per kind of value in the spec (issue #45): every string and number field of
:mod:`rigkit.spec.model` is one of these ``Annotated`` types, so a rule about a kind of value (a port,
a folder, a hub repo id …) is written once and holds for every field of that kind.
``tests/unit/test_spec_types.py`` walks the schema and fails on a string or number field that is not.

Each type carries a :class:`Kind` marker (its name and what it allows) and the validators of the rule
that needs nothing but the value. Rules that need the rest of the spec (a plain-http URL to a host the
operator marks trusted; a bind beyond loopback when ``allow_non_loopback``) are functions here
(:func:`secret_url_problem`, :func:`loopback_host`), called by :mod:`rigkit.spec.validate`.

Free kinds — values no rule can constrain, each exempt with its reason (``notes/spec-types.md``):
:data:`Text` (prose an operator reads: a description, a display name) and :data:`Command` (a member's
``cmd``/``cmd_stop``: llama-swap splits it into words; :mod:`rigkit.spec.cmdline` and the validation
check those words, since no grammar of one string can).

Integer bounds are the consumers' (each constant cites its source): llama-swap turns its seconds into a
Go ``time.Duration`` (:data:`GO_DURATION_S_MAX`), systemd holds a time span in a ``usec_t``
(:data:`SYSTEMD_S_MAX`), llama.cpp a context in an ``int32_t`` (:data:`INT32_MAX`), NVML a power limit
in ``unsigned int`` milliwatts (:data:`NVML_W_MAX`).
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

from rigkit.common import versions
from rigkit.spec.llama_swap_schema import GO_INT_MAX


@dataclass(frozen=True)
class Kind:
    """The marker of a kind of value: ``name`` (``"port"``) and ``allowed`` (what the kind accepts, in
    words). ``free``: a kind no rule constrains (:data:`Text`, :data:`Command`), listed with its reason.
    ``most``: the consumer's upper bound of a number kind (a message over it gives ``allowed`` as the reason)."""

    name: str
    allowed: str
    free: bool = False
    most: int | None = None


def kind_of(metadata: list[Any] | tuple[Any, ...]) -> Kind | None:
    """The :class:`Kind` among pydantic ``metadata`` (a field's, or an ``Annotated``'s), or None."""
    return next((m for m in metadata if isinstance(m, Kind)), None)


#: Why an empty string is refused where the field is not optional.
EMPTY_REFUSED = "empty: give a value, or leave the key out for its default (only an optional value may be left empty: unset)"


def _rule(check: Any, *, empty_ok: bool = False) -> AfterValidator:
    """An after-validator from ``check(value) -> str | None`` (why the value is refused); an empty
    string is refused with :data:`EMPTY_REFUSED` (an optional field's ``""`` became None before)
    unless ``empty_ok`` (a kind whose consumer gives ``""`` a meaning of its own, such as an
    environment value: ``NAME=`` sets NAME to the empty string)."""

    def validate(value: Any) -> Any:
        why = EMPTY_REFUSED if value == "" and not empty_ok else check(value)
        if why:
            raise ValueError(why)
        return value

    return AfterValidator(validate)


# --------------------------------------------------------------------------------------------
# Bounds, from the consumers

#: Go's ``time.Duration`` is int64 nanoseconds: llama-swap multiplies its integer seconds (ttl,
#: unloadTimeout, healthCheckTimeout, timeouts.*) by ``time.Second``
#: (llama-swap v250 internal/process/process_command.go:307, internal/router/base.go:333); above this
#: the product wraps negative (a ttl that unloads at once). So do docker's and compose's stop timeouts.
GO_DURATION_S_MAX = GO_INT_MAX // 10**9
#: systemd holds a time span (``TimeoutStopSec=``) as ``usec_t``, uint64 microseconds, with
#: ``USEC_INFINITY`` = UINT64_MAX reserved for "infinity" (systemd src/basic/time-util.h; systemd.time(7)).
SYSTEMD_S_MAX = (2**64 - 2) // 10**6
#: llama.cpp's ``n_ctx``, ``n_predict`` and friends are ``int32_t`` (common/common.h ``common_params``).
INT32_MAX = 2**31 - 1
#: NVML takes a power limit as ``unsigned int`` milliwatts (nvmlDeviceSetPowerManagementLimit, NVML API
#: reference); ``nvidia-smi -pl`` passes W × 1000 to it.
NVML_W_MAX = (2**32 - 1) // 1000
#: Headroom rigkit adds to a stop timeout before it reaches systemd or llama-swap (+10 unloadTimeout,
#: +15 TimeoutStopSec, +30 a window's budget): the bound of :data:`StopSeconds` leaves it.
_STOP_MARGIN_S = 60


# --------------------------------------------------------------------------------------------
# Numbers

#: A port: 1–65535 (a TCP port number is 16 bits; 0 asks the kernel for any).
Port = Annotated[int, Field(ge=1, le=65535), Kind("port", "a TCP port")]
#: A float that is a number: not infinity or NaN (``gpu_vram_gib: .inf`` switched the VRAM check off).
FiniteFloat = Annotated[float, Field(allow_inf_nan=False), Kind("finite float", "a finite number")]
#: GiB of VRAM: finite, above 0 (nvidia-smi MiB / 1024).
GiB = Annotated[float, Field(gt=0, allow_inf_nan=False), Kind("GiB", "GiB, a finite number above 0")]
#: GiB held back from the card: finite, 0 or more.
ReserveGiB = Annotated[float, Field(ge=0, allow_inf_nan=False), Kind("GiB", "GiB, a finite number, 0 or more")]
#: Seconds as a float rigkit itself waits (finite, above 0, at most a Go duration's range).
Seconds = Annotated[float, Field(gt=0, le=GO_DURATION_S_MAX, allow_inf_nan=False),
                    Kind("seconds", f"seconds, a finite number above 0 and at most {GO_DURATION_S_MAX}")]
#: A fraction of the card: (0, 1].
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False), Kind("fraction", "a fraction, above 0 and at most 1")]
#: A sampling temperature: finite, 0 or more.
Temperature = Annotated[float, Field(ge=0, allow_inf_nan=False), Kind("temperature", "a finite number, 0 or more")]
#: llama-swap's integer seconds (ttl, unloadTimeout, healthCheckTimeout): 0 … :data:`GO_DURATION_S_MAX`.
LlamaSwapSeconds = Annotated[int, Field(ge=0, le=GO_DURATION_S_MAX),
                             Kind("llama-swap seconds", f"whole seconds; llama-swap makes a Go time.Duration (int64 ns) of them, "
                                                        f"so at most {GO_DURATION_S_MAX}", most=GO_DURATION_S_MAX)]
#: A stop timeout in whole seconds: docker stop/compose (Go durations) and systemd's TimeoutStopSec.
StopSeconds = Annotated[int, Field(ge=1, le=min(GO_DURATION_S_MAX, SYSTEMD_S_MAX) - _STOP_MARGIN_S),
                        Kind("stop seconds", "whole seconds for docker stop (a Go time.Duration) and systemd's TimeoutStopSec "
                                            "(a usec_t), with rigkit's margins",
                             most=min(GO_DURATION_S_MAX, SYSTEMD_S_MAX) - _STOP_MARGIN_S)]
#: Tokens (context, budgets): at most llama.cpp's int32.
Tokens = Annotated[int, Field(ge=1, le=INT32_MAX), Kind("tokens", "tokens; llama.cpp holds them in an int32_t", most=INT32_MAX)]
#: A count (sequences, generations, speculative tokens): 1 … int32.
Count = Annotated[int, Field(ge=1, le=INT32_MAX), Kind("count", "a whole number, at most an int32", most=INT32_MAX)]
#: Watts as nvidia-smi/NVML take them.
Watts = Annotated[int, Field(gt=0, le=NVML_W_MAX), Kind("watts", "W; NVML takes the limit as an unsigned int of mW", most=NVML_W_MAX)]
#: MiB of GPU memory as nvidia-smi reads it.
MiB = Annotated[int, Field(gt=0, le=INT32_MAX), Kind("MiB", "MiB of GPU memory, at most an int32", most=INT32_MAX)]


# --------------------------------------------------------------------------------------------
# Addresses and URLs

#: Host names that resolve to loopback by definition (RFC 6761 §6.3).
_LOOPBACK_NAMES = {"localhost"}


def loopback_host(host: str | None) -> bool:
    """Whether ``host`` (an address or name, IPv6 with or without brackets) is loopback: all of
    127.0.0.0/8, ::1 and ``localhost`` — one rule for HyperQwen's bind and a member's proxy."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ip_problem(value: str) -> str | None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return "not an IP address (compose publishes the port on BIND:PORT:PORT), e.g. 127.0.0.1"
    return None


#: An IP address to listen on (its loopback rule: :func:`loopback_host`, with ``allow_non_loopback``).
BindAddress = Annotated[str, _rule(_ip_problem), Kind("bind address", "an IP address, loopback unless allow_non_loopback")]

_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _host_problem(value: str) -> str | None:
    if _ip_problem(value.strip("[]")) is None:
        return None
    if len(value) > 253 or not all(_HOST_LABEL.match(label) for label in value.rstrip(".").split(".")):
        return "not a host name (RFC 1123: dot-separated labels of letters, digits and -) or an IP address"
    return None


def host_key(host: str) -> str:
    """A host as URLs compare it: lower-case, no brackets, no trailing dot (RFC 3986 §6.2.2.1)."""
    return host.strip("[]").rstrip(".").lower()


def _listen_problem(value: str) -> str | None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return "not an IP address, e.g. 127.0.0.1 (loopback) or the rig's LAN address"
    return None


#: An IP address a service of the rig listens on beyond rigkit's own loopback rule (node_exporter: the
#: operator's Prometheus scrapes it; ``node_exporter.listen_address``).
ListenAddress = Annotated[str, _rule(_listen_problem), Kind("listen address", "an IP address")]

#: A host name or address (``trusted_http_hosts``), compared by :func:`host_key`.
HostName = Annotated[str, _rule(_host_problem), Kind("host", "a host name or IP address")]


def _url_problem(value: str, schemes: tuple[str, ...]) -> str | None:
    try:
        parts = urlsplit(value)
        _ = parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in schemes:
        return f"a URL with scheme {' or '.join(s + '://' for s in schemes)}"
    if parts.scheme != "file" and not parts.hostname:
        return "a URL with a host"
    if parts.username or parts.password:
        return "a URL without user:password@ (credentials never go in the spec)"
    if any(ch.isspace() for ch in value):
        return "a URL without spaces"
    return None


#: A URL rigkit downloads from (the archive, a release, a schema): https, http or file.
URL = Annotated[str, _rule(lambda v: _url_problem(v, ("https", "http", "file"))),
                Kind("url", "an https://, http:// or file:// URL")]
#: A URL that carries a secret (the HF token): https, or plain http only to a loopback address or a
#: host in ``trusted_http_hosts`` (:func:`secret_url_problem`, which needs the spec).
SecretURL = Annotated[str, _rule(lambda v: _url_problem(v, ("https", "http"))),
                      Kind("secret-carrying url", "an https:// URL (http:// only to loopback or a trusted_http_hosts host)")]


def secret_url_problem(url: str, trusted: list[str]) -> str | None:
    """Why ``url`` may not carry a secret, or None: https always may; plain http only to a loopback
    host (:func:`loopback_host`) or one of ``trusted`` (compared by :func:`host_key`)."""
    parts = urlsplit(url)
    if parts.scheme == "https" or loopback_host(parts.hostname):
        return None
    if parts.hostname and host_key(parts.hostname) in {host_key(h) for h in trusted}:
        return None
    return ("carries the HF token, so it is https://; plain http:// only to a loopback address or a host listed in "
            "trusted_http_hosts (the token would cross the network in clear)")


def _member_url_problem(value: str) -> str | None:
    if _url_problem(value.replace("${PORT}", "1"), ("http", "https")):
        return ("not a URL: llama-swap proxies to http(s)://host[:port][/path], e.g. http://127.0.0.1:18050 or "
                "http://127.0.0.1:${PORT}")
    return None


#: A member's proxy: ``http(s)://host[:port][/path]``, ``${PORT}`` may stand for the port.
MemberURL = Annotated[str, _rule(_member_url_problem),
                      Kind("member url", "http(s)://host[:port][/path], ${PORT} may stand for the port")]


def _endpoint_problem(value: str) -> str | None:
    if value == "none" or (value.startswith("/") and not any(ch.isspace() for ch in value)):
        return None
    return "an HTTP path starting with / (e.g. /health), or none"


#: An HTTP path on a member (``checkEndpoint``), or ``none``.
HttpPath = Annotated[str, _rule(_endpoint_problem), Kind("http path", "an HTTP path starting with /, or none")]


# --------------------------------------------------------------------------------------------
# Folders and files

#: System folders: a folder the spec names may be none of these nor an ancestor of one (a bind mount
#: of ``/`` or ``/var`` into a container would hand it the host), and none inside the pseudo
#: file systems and /boot.
SYSTEM_FOLDERS = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/mnt", "/media", "/opt", "/proc", "/root",
    "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local", "/usr/local/bin",
    "/usr/share", "/var", "/var/cache", "/var/lib", "/var/lib/docker", "/var/log", "/var/tmp",
})
_NEVER_INSIDE = ("/proc", "/sys", "/dev", "/boot", "/run")
_PATH_CHARS = re.compile(r"^[A-Za-z0-9._/@+-]*$")
GLOB_CHARS = frozenset("*?[]")


def folder_key(path: str) -> str:
    """A path as the kernel compares it: normalised (no ``//``, ``.``, trailing ``/``)."""
    return posixpath.normpath(path) if path else path


def _path_problem(value: str, absolute: bool, compose: bool = True) -> str | None:
    """Why ``value`` is not a path of its kind, or None. ``compose``: the path reaches a compose file or
    a command line (a volume, a served file), so only the characters that survive it are allowed; a
    lock file is only tested by the preflight (quoted), so any character (control characters are
    refused for every value, by the raw scan: :mod:`rigkit.spec.secrets`)."""
    if absolute != value.startswith("/"):
        return "an absolute path (starting with /)" if absolute else "a relative path (no leading /)"
    if ".." in value.split("/"):
        return "a path without .."
    if GLOB_CHARS & set(value):
        return "a path without glob characters (* ? [ ]): the preflight tests the path itself, a glob never matches"
    if compose and not _PATH_CHARS.match(value):
        return ("letters, digits and . _ - + @ / only (compose interpolates the path into a volume, which ':' or "
                "a space would split)")
    if "//" in value or (value != "/" and folder_key(value) != value):
        return f"normalised: {folder_key(value)!r}"
    return None


def _folder_problem(value: str) -> str | None:
    if why := _path_problem(value, absolute=True):
        return why
    if value == "/" or any(s == value or s.startswith(value + "/") for s in SYSTEM_FOLDERS):
        return ("not a system folder nor one of its ancestors (/, /etc, /usr, /var, /srv, /boot … are refused; "
                "/var/lib/models or /srv/models are fine)")
    if any(value.startswith(p + "/") for p in _NEVER_INSIDE):
        return f"not inside {', '.join(_NEVER_INSIDE)}"
    return None


#: A folder on the host: absolute, normalised, neither a system folder nor an ancestor of one.
Folder = Annotated[str, _rule(_folder_problem), Kind("folder", "an absolute, normalised folder that is not a system folder")]
#: A file on the host (a lock file): absolute, normalised, no glob (the preflight tests the path itself,
#: quoted: spaces and shell characters are carried literally — tests/harness/test_safety.py).
HostFile = Annotated[str, _rule(lambda v: _path_problem(v, absolute=True, compose=False)),
                     Kind("host file", "an absolute, normalised path without .. or glob characters")]


def _relative_problem(value: str) -> str | None:
    if not value.strip("/"):
        return "a relative path with at least one name"
    return _path_problem(value, absolute=False)


#: A path inside a folder rigkit owns (a model's folder under /srv/models, a file in it).
RelativePath = Annotated[str, _rule(_relative_problem),
                         Kind("relative path", "a relative, normalised path without .. (inside the folder)")]
#: A file on the control machine, relative to the project or absolute (read there, never on the host).
LocalFile = Annotated[str, Field(min_length=1, max_length=4096), Kind("local file", "a file on the control machine")]
#: A glob of file names in a hub repo (``include``/``exclude``, fnmatch as huggingface_hub's filter).
Glob = Annotated[str, Field(min_length=1, max_length=1024), Kind("glob", "an fnmatch pattern of repo file names")]


# --------------------------------------------------------------------------------------------
# Names

def _pattern(regex: str, allowed: str, most: int | None = None) -> AfterValidator:
    compiled = re.compile(regex)
    return _rule(lambda v: None if compiled.match(v) and (most is None or len(v.encode()) <= most) else allowed)


_UNIT_ALLOWED = ("a systemd unit name: letters, digits and : _ . \\ @ -, ending in .service, .timer, .socket, .path, "
                 ".target or .mount, at most 255 bytes (systemd.unit(5), UNIT_NAME_MAX)")
#: systemd's limit on a unit name (``UNIT_NAME_MAX``, systemd.unit(5)): 255 bytes with the suffix.
UNIT_NAME_MAX = 255
UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|timer|socket|path|target|mount)$")
#: A systemd unit name.
UnitName = Annotated[str, _pattern(UNIT_NAME_RE.pattern, _UNIT_ALLOWED, UNIT_NAME_MAX), Kind("unit", _UNIT_ALLOWED)]
#: A systemd timer unit name.
TimerName = Annotated[str, _pattern(r"^[A-Za-z0-9:_.\\@-]+\.timer$", "a systemd timer unit name ending in .timer",
                                    UNIT_NAME_MAX), Kind("unit", "a systemd timer unit name ending in .timer")]
MEMBER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: A llama-swap member id or group name (it becomes a model name in URLs and a container name).
MemberId = Annotated[str, _pattern(MEMBER_ID_RE.pattern, "letters, digits, '.', '_' and '-', starting with a letter or digit", 128),
                     Kind("member", "letters, digits, '.', '_' and '-'")]
#: A name a client asks llama-swap for (an alias, ``useModelName``, vLLM's served model name).
ModelName = Annotated[str, _rule(lambda v: None if v.strip() and len(v) <= 256 else "a model name clients ask for: not blank, 256 characters at most"),
                      Kind("model name", "a model name, not blank")]
#: A docker container name (moby's ``RestrictedNamePattern``).
ContainerName = Annotated[str, _pattern(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$", "a docker container name: letters, digits and _ . -, "
                                        "two characters at least"), Kind("container", "a docker container name")]
#: A Linux user name (useradd(8)'s default NAME_REGEX).
UserName = Annotated[str, _pattern(r"^[a-z_][a-z0-9_-]{0,31}$", "a Linux user name: lower-case letters, digits, _ and -, 32 at most"),
                     Kind("user", "a Linux user name")]
#: An Arch package name (PKGBUILD(5) ``pkgname``).
PackageName = Annotated[str, _pattern(r"^[a-z0-9@_+][a-z0-9@._+-]*$", "an Arch package name: lower-case letters, digits and "
                                      "@ . _ + -, not starting with - or . (PKGBUILD(5))"), Kind("package", "an Arch package name")]
# pacman version: [epoch:]pkgver-pkgrel; pkgver has no '-' or ':' (PKGBUILD(5)).
PACMAN_VERSION_RE = re.compile(r"^(?:(?P<epoch>\d+):)?(?P<pkgver>[A-Za-z0-9._+~]+)-(?P<pkgrel>\d+(?:\.\d+)?)$")
#: A full pacman version.
PacmanVersion = Annotated[str, _pattern(PACMAN_VERSION_RE.pattern, "a full pacman version [epoch:]pkgver-pkgrel, e.g. "
                                        "'610.57.04-1' (pkgrel cannot be guessed)"), Kind("pacman version", "[epoch:]pkgver-pkgrel")]
#: An environment variable name (POSIX: upper case here, as compose and llama-swap's schema want).
EnvName = Annotated[str, _pattern(r"^[A-Z_][A-Z0-9_]*$", "environment names are UPPER_CASE letters, digits and _"),
                    Kind("env name", "UPPER_CASE letters, digits and _")]


def _env_value_problem(value: str) -> str | None:
    from rigkit.common.envfile import dotenv_value

    try:
        dotenv_value(value)
    except ValueError as exc:
        return str(exc)
    return None


#: A value written into a ``.env`` file (compose-go's dotenv must read it back).
EnvValue = Annotated[str, _rule(_env_value_problem, empty_ok=True),
                     Kind("env value", "a value a .env file can hold (empty included: NAME= is set and empty)")]
#: A member's ``env`` item, ``NAME=value`` (llama-swap's schema pattern).
EnvItem = Annotated[str, _pattern(r"^[A-Z_][A-Z0-9_]*=", "NAME=value with NAME upper-case letters, digits and _ (llama-swap's schema)"),
                    Kind("env item", "NAME=value")]
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
#: A sha256, 64 lower-case hex digits.
Sha256 = Annotated[str, _pattern(SHA256_RE.pattern, "64 lower-case hex digits"), Kind("sha256", "64 lower-case hex digits")]
#: A GPU's UUID as nvidia-smi prints it.
GpuUuid = Annotated[str, _pattern(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                                  "GPU-<8>-<4>-<4>-<4>-<12 hex> (nvidia-smi --query-gpu=uuid)"), Kind("gpu uuid", "GPU-<uuid>")]
#: A release tag (llama-swap's ``v250``).
ReleaseTag = Annotated[str, _pattern(r"^v?[0-9]+(?:\.[0-9]+)*$", "a release tag, e.g. v250"), Kind("release tag", "e.g. v250")]
#: An OpenAI-style reasoning effort word (passed through to the server).
Word = Annotated[str, _pattern(r"^[a-z][a-z0-9_-]{0,31}$", "one lower-case word, e.g. medium"), Kind("word", "one lower-case word")]

#: An image repository by the OCI distribution spec's name grammar (``[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*``
#: per path component), after an optional registry host (``docker/distribution`` reference grammar: a
#: first component with a '.' or ':' or ``localhost``), 255 characters at most.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
REGISTRY_RE = re.compile(rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?$")
IMAGE_PATH_RE = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
IMAGE_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


def _repository_problem(repository: str) -> str | None:
    last = repository.rsplit("/", 1)[-1]
    if "@" in repository or ":" in last:
        return "holds a tag or digest (':tag', '@sha256:…'); the repository is the name alone, the pin goes in ref"
    first, _, rest = repository.partition("/")
    path = rest if rest and ("." in first or ":" in first or first == "localhost") else repository
    if (rest and path is rest and not REGISTRY_RE.match(first)) or not IMAGE_PATH_RE.match(path) or len(repository) > 255:
        return ("not an image repository by the OCI distribution reference grammar: [registry[:port]/]path, each "
                "path component lower-case letters and digits joined by '.', '_', '__' or '-', 255 characters at most")
    return None


def _image_ref_problem(ref: str) -> str | None:
    if ref.startswith("sha256:"):
        return None if DIGEST_RE.match(ref) else "a digest is sha256: followed by 64 lower-case hex digits"
    if not IMAGE_TAG_RE.match(ref):
        return ("a bare tag ([A-Za-z0-9_][A-Za-z0-9._-]{0,127}, the OCI distribution spec) or sha256:<digest> "
                "(the repository is image.repository)")
    return None


#: An image repository, without tag or digest.
ImageRepository = Annotated[str, _rule(_repository_problem), Kind("image repository", "[registry[:port]/]path")]
#: An image's ref: a tag (``rigkit lock`` resolves it to the digest the deploy pulls, so a moving tag
#: such as ``latest`` is a declared intent, not a pin) or a digest ``sha256:<64 hex>``.
ImageRef = Annotated[str, _rule(_image_ref_problem), Kind("image ref", "a tag (rigkit lock resolves it) or sha256:<64 hex>")]


def _registry_problem(value: str) -> str | None:
    if not re.match(r"^https?://[^/\s]+$", value):
        return "the registry's base URL, https://HOST[:PORT] (its v2 API is under /v2/)"
    return _url_problem(value, ("https", "http"))


#: A registry's base URL for its v2 API (``https://HOST[:PORT]``; no path). Anonymous pulls carry no
#: secret, so plain http is allowed (a local mirror).
RegistryURL = Annotated[str, _rule(_registry_problem), Kind("registry URL", "https://HOST[:PORT]")]


def _hub_repo_problem(value: str) -> str | None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError as exc:
        return f"a hub repo id, owner/name (huggingface_hub.utils.validate_repo_id: {exc})"
    return None


#: A Hugging Face hub repo id, by the hub client's own grammar (``validate_repo_id``: no ``..``/``--``,
#: one optional namespace, 96 characters at most).
HubRepoId = Annotated[str, _rule(_hub_repo_problem), Kind("hub repo id", "owner/name by huggingface_hub's validate_repo_id")]


def _git_ref_problem(value: str) -> str | None:
    """git-check-ref-format(1)'s rules, as the hub (a git server) applies them to a branch or tag; a
    40-hex commit passes too."""
    bad = (not value or len(value) > 255 or value == "@" or ".." in value or "@{" in value or "//" in value
           or value.startswith("/") or value.endswith(("/", ".", ".lock"))
           or any(c in value for c in " ~^:?*[\\") or any(ord(c) < 0x20 or ord(c) == 0x7f for c in value)
           or any(part.startswith(".") or part.endswith(".lock") for part in value.split("/")))
    return ("a branch, tag or commit by git-check-ref-format(1): no '..', '@{', '//', control characters, space or "
            "~ ^ : ? * [ \\, no component starting with '.' or ending in '.lock'") if bad else None


#: A hub revision: a branch, a tag or a commit (git-check-ref-format(1)).
HubRevision = Annotated[str, _rule(_git_ref_problem), Kind("hub revision", "a branch, tag or commit")]


def _version_problem(most: int) -> Any:
    def check(value: str) -> str | None:
        try:
            versions.declared(value, most)
        except versions.VersionError as exc:
            return str(exc)
        return None
    return check


#: The driver as the operator declares it: series or full version (:func:`rigkit.common.versions.declared`).
DriverVersion = Annotated[str, _rule(_version_problem(3)), Kind("driver version", "the series (610.57) or the full version (610.57.04)")]
#: The CUDA toolkit series (:func:`rigkit.common.versions.declared`).
CudaVersion = Annotated[str, _rule(_version_problem(2)), Kind("cuda version", "the series, e.g. 13.3")]
#: A package's series as ``rigkit lock`` resolves it (the newest of it in the archive): ``1.10`` → ``1.10.2-1``.
PackageSeries = Annotated[str, _rule(_version_problem(2)), Kind("package series", "the series, e.g. 1.10")]


# --------------------------------------------------------------------------------------------
# Free kinds (exempt; notes/spec-types.md gives the reasons)

#: Prose an operator reads (a description, a display name): any text the raw scan lets through.
Text = Annotated[str, Kind("text", "free text", free=True)]
#: A member's command line: its words are checked by :mod:`rigkit.spec.cmdline` and the validation.
Command = Annotated[str, Field(min_length=1), Kind("command", "a command line, split into words as llama-swap does", free=True)]

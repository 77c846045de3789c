"""Host paths, unit names and owners of the rig (DESIGN.md "Host paths and units").

One place for every path rigkit writes on the host, so the renderer, the roles, drift and the
validators agree. Nothing here touches the host.
"""

from __future__ import annotations

from rigkit.common.holds import FILE_NAME as _HOLDS_NAME

AGENT_DIR = "/opt/rigkit"
AGENT_VENV = f"{AGENT_DIR}/venv"
AGENT_BIN = f"{AGENT_VENV}/bin/rigkit-agent"
HYPERQWEN_DIR = f"{AGENT_DIR}/hyperqwen"
HYPERQWEN_COMPOSE = f"{HYPERQWEN_DIR}/compose.yaml"
HYPERQWEN_ENV = f"{HYPERQWEN_DIR}/.env"
HYPERQWEN_COMPOSE_PROJECT = "hyperqwen"
HYPERQWEN_MODELS_DIR = "/srv/models/hyperqwen"

SECRETS_DIR = "/etc/rigkit/secrets"
HF_TOKEN_FILE = f"{SECRETS_DIR}/hf.env"  # root 0600, read by the model fetch only
HYPERQWEN_SECRET_FILE = f"{SECRETS_DIR}/hyperqwen.env"  # root:llama-swap 0640, VLLM_API_KEY

LLAMA_SWAP_BIN = "/usr/local/bin/llama-swap"
LLAMA_SWAP_DIR = "/etc/llama-swap"
LLAMA_SWAP_CONFIG = f"{LLAMA_SWAP_DIR}/config.yaml"
LLAMA_SWAP_STAGED = f"{LLAMA_SWAP_DIR}/config.staged.yaml"
LLAMA_SWAP_MARKER = "/usr/local/lib/rigkit/llama-swap.sha256"  # sha256 of the tarball the binary came from

MODELS_ROOT = "/srv/models"
STATE_DIR = "/var/lib/rigkit"
WINDOW_JOURNAL = f"{STATE_DIR}/window.json"
WINDOWS_DIR = f"{STATE_DIR}/windows"
HOLDS_FILE = f"{STATE_DIR}/{_HOLDS_NAME}"  # rigkit.common.holds: its one reader and writer
GENERATIONS_DIR = f"{STATE_DIR}/generations"  # root 0700: rigkit.host.generations
BISECT_JOURNAL = f"{GENERATIONS_DIR}/bisect.json"  # an unfinished rigkit bisect: rigkit.host.generations.BISECT_JOURNAL
MODELS_LOCK = f"{STATE_DIR}/models.lock.json"  # the model lock the deploy installed
RIG_LOCK = f"{STATE_DIR}/rig.lock"  # the one host lock (flock + holder record), rigkit.host.lock
ACTIVATE_LOG = f"{STATE_DIR}/activate.log"
LLAMA_SWAP_NEXT = f"{STATE_DIR}/llama-swap/config.next.yaml"  # root 0600: what an activation installs
WATCHDOG_STATE = f"{STATE_DIR}/watchdog.json"
POWER_STATE = f"{STATE_DIR}/power.json"  # the power-limit healer's record, rigkit.host.power
HOST_CONFIG = "/etc/rigkit/host.json"  # the host side's one config (rigkit.host.config)

UNIT_DIR = "/etc/systemd/system"
NOUVEAU_BLACKLIST = "/etc/modprobe.d/rigkit-nouveau.conf"
# the operator's mkinitcpio.conf (read through mkinitcpio's loading, never edited) and rigkit's drop-in
# taking kms out of whatever HOOKS is in effect
from rigkit.common.mkinitcpio import CONF as MKINITCPIO_CONF, DROPIN as MKINITCPIO_DROPIN  # noqa: E402
PACMAN_CONF = "/etc/pacman.conf"  # the operator's: rigkit adds one Include line to [options], nothing else
# rigkit's: IgnorePkg = the pins (Include'd from [options]). Outside /etc/pacman.d: install scripts, ansible
# roles and mkosi append `Include = /etc/pacman.d/*.conf` to pacman.conf, inside its last repository
# section, and pacman then read the pins there too, warning "directive 'IgnorePkg' in section 'multilib'
# not recognized" on every run (issue 57). LEGACY_PINS_CONF: where rigkit kept it before; the deploy
# turns its Include line into PINS_CONF's and removes that file.
PINS_CONF = "/etc/rigkit/pacman-pins.conf"
LEGACY_PINS_CONF = "/etc/pacman.d/rigkit-pins.conf"
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
DOCKER_BIN = "/usr/bin/docker"
SH_BIN = "/bin/sh"
# The docker label on every container rigkit starts for a member (value: the member's id): llama-swap's
# unit removes every container carrying it before it starts (an orphan of a killed proxy would hold
# the member's port and VRAM), whichever members exist, so the unit never names a member.
MEMBER_LABEL = "rigkit.member"
NVIDIA_SMI_BIN = "/usr/bin/nvidia-smi"
# node_exporter, when metrics_textfile_dir is set (issue 66): Arch's package, its unit, and the file its unit
# reads NODE_EXPORTER_ARGS from (EnvironmentFile=-/etc/conf.d/prometheus-node-exporter; the package lists it
# in backup=, so pacman keeps rigkit's copy on an upgrade and writes its own as .pacnew)
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"
NODE_EXPORTER_CONF = "/etc/conf.d/prometheus-node-exporter"

# Executables that the deploy itself installs (packages, the llama-swap tarball, the host
# agent). `systemd-analyze verify` on the control machine reports them "not executable";
# those lines, and only those, are reported as skipped, never as passed. With the sandbox
# root as --root they exist and pass for real.
DEPLOY_INSTALLED_EXECUTABLES = (
    LLAMA_SWAP_BIN,
    AGENT_BIN,
    DOCKER_BIN,
    NVIDIA_SMI_BIN,
)

PLACEHOLDER_PREFIX = "RIGKIT-UNSET"


def placeholder(what: str) -> str:
    """A visible, validator-safe placeholder for an unset operator value, e.g.
    ``RIGKIT-UNSET-image-ref``. ``rigkit deploy`` never renders one (it refuses first)."""
    slug = "".join(c if c.isalnum() else "-" for c in what).strip("-")
    return f"{PLACEHOLDER_PREFIX}-{slug}"

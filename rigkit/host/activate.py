"""The one activation path for llama-swap's live config (DESIGN.md "Staged vs live"), run ON THE HOST
by the host agent (``rigkit-agent activate``), so a lost SSH session cannot leave it half done.

Activation (:func:`activate`): keep a backup of the live config (``<live>.bak-<UTC stamp>``), install
the new one atomically, restart ``llama-swap.service`` (stopped, the GPU's memory back near idle,
started: :meth:`Host.restart`), wait for ``/health``, send one real chat
completion (``max_tokens`` 1) through llama-swap to every member whose definition changed, then to the
resident (the first ``hooks.on_startup.preload`` member, Strata) so it is what stays loaded. On any
failure the backup is restored, llama-swap restarted and the resident asked again; on a first
activation (no live config, so no backup) the failed config is moved aside to
``<live>.failed-<UTC stamp>``, llama-swap is left stopped and the run fails loudly.

After every activation, rollback or refusal, the staging copy the deploy and ``rigkit wire-in``
upload (host config ``llama_swap.staging``, ``/var/lib/rigkit/llama-swap/config.next.yaml``) is set to
the config now live (:func:`sync_staging`): it is what the next deploy compares its upload with, so a
rolled-back or refused config left there would read as a change the deploy would make.

Rollback (:func:`rollback`): the newest backup that differs from the live config goes back in through
the same path, and a *hold* is recorded in ``/var/lib/rigkit/holds.json``; the deploy reports a hold
and does not re-activate; drift reports it (:mod:`rigkit.common.holds`) until :func:`release`.

Runs in the agent's venv: the standard library, ``requests`` and ``yaml`` only. The config's pure
reading (the resident, the member diff, the probe order, backups) is :mod:`rigkit.common.swapconfig`,
which the control side imports too; the command the control side runs this by is
:func:`rigkit.agentcmd.activation_command`. Paths, the port and the unit come from the host config
(:mod:`rigkit.host.config`). An activation, a rollback and a release hold the host lock
(:mod:`rigkit.host.lock`) for their whole duration and are refused while a window is open; the
keeper and the watchdog stand down meanwhile. The API key (``VLLM_API_KEY`` from the host config's
``api_key_file``) is sent as a bearer token and never printed.

Exit codes (DESIGN.md): 0 activated, rolled back, released or nothing to do; 1 failed (the previous
config restored, or llama-swap left stopped on a first activation), refused by a hold, or another
activation running; 2 invalid input (an unreadable new config, no backup to roll back to).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from rigkit.common import atomic, envfile
from rigkit.host import standdown
from rigkit.common.holds import LLAMA_SWAP as HOLD_KEY
from rigkit.common.holds import read_holds, write_holds
from rigkit.common.jsonfile import iso_utc
from rigkit.host.lock import LockHeld
from rigkit.common.swapconfig import backups, member_diff, parse_config, probe_order, resident, sha256_text, utc_stamp

DEFAULT_OWNER = "root:llama-swap"
DEFAULT_MODE = 0o640


class ActivationError(RuntimeError):
    """One step of an activation failed; the message names the step and what answered."""


def _install(text: str, live: Path, owner: str, mode: int) -> None:
    """Write ``text`` to ``live`` atomically with ``owner`` (``user:group``) and ``mode``."""
    atomic.write_text(live, text, mode, owner)


def _copy(src: Path, dest: Path) -> None:
    """``cp -a``: content, mode and owner."""
    st = src.stat()
    atomic.write_bytes(dest, src.read_bytes(), st.st_mode & 0o7777, (st.st_uid, st.st_gid))


def _unique(path: Path) -> Path:
    n = 0
    out = path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}-{n}")
    return out


class Host:
    """What an activation does to the host, as methods (tests replace them).

    ``base`` llama-swap's URL; ``service`` its unit; ``health_timeout_s`` s to wait for ``/health``
    after a (re)start; ``completion_timeout_s`` s for each completion (a cold member boots within
    llama-swap's ``healthCheckTimeout``, so the default comes from the config plus 30 s).
    """

    def __init__(self, base: str, service: str, key_file: Path, health_timeout_s: float = 60.0, completion_timeout_s: float | None = None,
                 log: Callable[[str], None] = print, vram: tuple[float, float, int] | None = None) -> None:
        self.base, self.service, self.key_file = base.rstrip("/"), service, key_file
        self.health_timeout_s, self.completion_timeout_s, self.log = health_timeout_s, completion_timeout_s, log
        self.vram = vram

    def restart(self) -> None:
        """Restart llama-swap with the GPU's memory back near idle in between: ``systemctl stop``
        (its ``ExecStopPost`` stops the members' containers), :func:`rigkit.host.gpu.wait_idle` with
        ``vram`` = ``(timeout_s, idle_mib, index)`` (the host config's ``vram``), ``systemctl start``,
        so the next member never starts beside the last one's memory. Without ``vram`` a plain
        ``systemctl restart``. Raises ActivationError (the memory still held names who holds it)."""
        if self.vram is None:
            self.systemctl("restart")
            return
        from rigkit.host import gpu

        self.systemctl("stop")
        timeout_s, idle_mib, index = self.vram
        try:
            gpu.wait_idle(timeout_s, idle_mib, self.log, index=index)
        except gpu.VramBusy as exc:
            raise ActivationError(f"{exc}; llama-swap is stopped") from None
        self.systemctl("start")

    def systemctl(self, verb: str) -> None:
        """``systemctl VERB SERVICE``; raises ActivationError with systemctl's message. Before a
        (re)start the unit's start rate limit is reset (``reset-failed``): the unit allows 3 starts in
        30 s, and an activation plus its restore plus the next activation would otherwise be refused."""
        if verb in ("restart", "start"):
            subprocess.run(["systemctl", "reset-failed", self.service], capture_output=True)
        p = subprocess.run(["systemctl", verb, self.service], capture_output=True, text=True)
        if p.returncode != 0:
            raise ActivationError(f"systemctl {verb} {self.service} failed (exit {p.returncode}): "
                                  f"{(p.stderr or p.stdout).strip()[:300]}")

    def wait_health(self) -> None:
        """Wait until ``GET /health`` answers 200; raises ActivationError after the timeout."""
        import requests

        deadline = time.monotonic() + self.health_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                r = requests.get(f"{self.base}/health", timeout=5)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except requests.RequestException as exc:
                last = type(exc).__name__
            time.sleep(0.5)
        raise ActivationError(f"llama-swap did not answer {self.base}/health within {self.health_timeout_s:g} s "
                              f"({last}); see `journalctl -u {self.service}`")

    def complete(self, member: str, timeout_s: float) -> str:
        """One real chat completion to ``member`` through llama-swap, the confirmation's own
        (:func:`rigkit.host.confirm.completion`: HTTP 200 with ``usage.completion_tokens`` > 0); returns
        what answered; raises ActivationError with the confirmation's message."""
        from rigkit.host.confirm import ConfirmError, completion

        try:
            return completion(self.base, member, envfile.read_value(self.key_file, "VLLM_API_KEY"), timeout_s)
        except ConfirmError as exc:
            raise ActivationError(str(exc)) from None


def _bring_up(host: Host, config: dict[str, Any], old: dict[str, Any] | None, timeout_s: float) -> None:
    host.restart()
    host.wait_health()
    host.log(f"llama-swap answers {host.base}/health")
    res = resident(config)
    for member in probe_order(old, config):
        what = "the resident, so it stays loaded" if member == res else "its definition changed"
        host.log(f"completion to {member} ({what}) ...")
        host.log(f"  {member}: {host.complete(member, timeout_s)}")


def activate(new_text: str, live: Path, host: Host, holds_path: Path,
             owner: str | None = None, mode: int | None = None, respect_hold: bool = True,
             force_restart: bool = False, now: Callable[[], float] = time.time, revert: bool = True) -> int:
    """Make ``new_text`` the live llama-swap config through the activation path; returns an exit code.

    + new_text: the whole new config (YAML text, as rendered by :func:`rigkit.render.files.render_llama_swap`)
    + live: the live config path; its backup is ``<live>.bak-<UTC stamp>``
    + owner/mode: of the installed file (default: the replaced file's, else ``root:llama-swap`` 0640)
    + respect_hold: refuse (exit 1) while a ``llama-swap`` hold is recorded
    + force_restart: restart and probe the resident even when ``new_text`` equals the live config
      (the deploy does this when llama-swap's unit or binary changed)
    + revert: False (``--no-revert``) leaves a config that failed live, its backup named, instead of
      restoring the previous one

    Returns 0 when activated (or nothing to do), 1 when it failed (restored, or stopped on a first
    activation) or was refused, 2 when ``new_text`` is not a llama-swap config. Never raises for a
    failed step: each is logged with what answered.
    """
    log = host.log
    try:
        new = parse_config(new_text, "the new config", yaml)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    old_text = live.read_text() if live.exists() else None
    if respect_hold and old_text != new_text:
        hold = read_holds(holds_path).get(HOLD_KEY)
        if hold:
            log(f"held: {live} was rolled back by `{hold.get('by')}` at {hold.get('since')}; not activating "
                f"(`rigkit wire-in --release` releases the hold)")
            return 1
    if old_text == new_text and not force_restart:
        log(f"{live} already holds this config ({sha256_text(new_text)[:12]}); nothing to do")
        return 0
    old = None
    if old_text is not None:
        try:
            old = parse_config(old_text, str(live), yaml)
        except ValueError as exc:
            log(f"warning: {exc}; every member counts as changed")
    timeout_s = host.completion_timeout_s or float(new.get("healthCheckTimeout") or 120) + 30
    backup = None
    if old_text is not None and old_text != new_text:
        backup = _unique(live.with_name(f"{live.name}.bak-{utc_stamp(now())}"))
        _copy(live, backup)
        log(f"backed up {live} to {backup}")
    if old_text is None:
        log(f"first activation: {live} does not exist yet (no backup to restore on failure)")
    st = live.stat() if live.exists() else None
    inst_owner = owner or (_owner_of(st) if st else DEFAULT_OWNER)
    inst_mode = mode if mode is not None else (st.st_mode & 0o7777 if st else DEFAULT_MODE)
    diff = member_diff(old, new)
    log("members: " + ", ".join(f"{k} {', '.join(v)}" for k, v in diff.items() if v) if any(diff.values())
        else "members: no definition changed")
    try:
        live.parent.mkdir(parents=True, exist_ok=True)
        if old_text != new_text:
            _install(new_text, live, inst_owner, inst_mode)
            log(f"installed the new config as {live} ({sha256_text(new_text)[:12]})")
        _bring_up(host, new, old if old_text != new_text else new, timeout_s)
    except (ActivationError, OSError, KeyError) as exc:
        log(f"FAILED: {exc}")
        if not revert:
            log(f"--no-revert: the failed config stays live as {live}" + (f"; the previous one is {backup}" if backup
                                                                            else "") + "; the activation FAILED")
            return 1
        return _recover(host, live, backup, old_text, new_text, now)
    log(f"activated: {live} is live and {resident(new) or 'no resident'} is loaded")
    return 0


def _owner_of(st: os.stat_result) -> str:
    import grp
    import pwd

    try:
        return f"{pwd.getpwuid(st.st_uid).pw_name}:{grp.getgrgid(st.st_gid).gr_name}"
    except KeyError:
        return DEFAULT_OWNER


def _recover(host: Host, live: Path, backup: Path | None, old_text: str | None, new_text: str,
             now: Callable[[], float]) -> int:
    """Put the previous config back after a failed activation (always returns 1)."""
    log = host.log
    if old_text is None:
        aside = _unique(live.with_name(f"{live.name}.failed-{utc_stamp(now())}"))
        try:
            if live.exists():
                atomic.move(live, aside)
            host.systemctl("stop")
        except (ActivationError, OSError) as exc:
            log(f"FAILED to stop llama-swap too: {exc}")
        log(f"FIRST ACTIVATION FAILED: there is no previous config to restore; llama-swap is left STOPPED "
            f"and the failed config moved to {aside}. Fix the member named above and run the deploy "
            f"(or `rigkit wire-in --activate`) again.")
        return 1
    source = backup
    try:
        if source is not None:
            _copy(source, live)
        elif live.read_text() != old_text:  # same text re-probed (force_restart): nothing to restore
            raise ActivationError("no backup was taken")
        log(f"restored the previous config from {source or live}")
        old = parse_config(old_text, "the previous config", yaml)
        host.restart()
        host.wait_health()
        res = resident(old)
        if res:
            log(f"  {res}: {host.complete(res, float(old.get('healthCheckTimeout') or 120) + 30)}")
        log(f"rolled back: the previous config is live again and {res or 'no resident'} answers; "
            "the activation FAILED")
    except (ActivationError, OSError, ValueError) as exc:
        log(f"FAILED to restore the previous config too: {exc}; llama-swap needs a human "
            f"(`journalctl -u {host.service}`, backups {live}.bak-*)")
    return 1


def rollback(live: Path, host: Host, holds_path: Path, by: str = "rigkit wire-in --rollback",
             now: Callable[[], float] = time.time) -> int:
    """Activate the newest backup whose content differs from the live config, then record a hold.

    Returns 0 when rolled back and held; 1 when the activation failed (the config that was live stays
    live, no hold) or a hold is already recorded; 2 when there is no live config or no backup differing
    from it.
    """
    log = host.log
    holds = read_holds(holds_path)
    if HOLD_KEY in holds:
        log(f"a hold is already recorded ({holds_path}: since {holds[HOLD_KEY].get('since')}); release it first "
            "(`rigkit wire-in --release`) or restore a backup by hand")
        return 1
    if not live.exists():
        log(f"error: {live} does not exist; nothing to roll back")
        return 2
    current = live.read_text()
    candidates = [b for b in reversed(backups(live)) if b.read_text() != current]
    if not candidates:
        log(f"error: no backup {live}.bak-* differs from the live config; nothing to roll back to")
        return 2
    source = candidates[0]
    log(f"rolling back to {source}")
    before = set(backups(live))
    rc = activate(source.read_text(), live, host, holds_path, respect_hold=False, now=now)
    if rc != 0:
        return rc
    held_copy = next(iter(sorted(set(backups(live)) - before)), None)
    try:
        cur = parse_config(source.read_text(), str(source), yaml)
        back = parse_config(current, "the replaced config", yaml)
    except ValueError:
        cur = back = None
    holds[HOLD_KEY] = {
        "path": str(live), "since": iso_utc(now()), "by": by,
        "restored_from": str(source), "live_sha256": sha256_text(source.read_text()),
        "held_back_sha256": sha256_text(current), "held_back_copy": str(held_copy) if held_copy else None,
        "held_back_members": member_diff(cur, back),
    }
    write_holds(holds_path, holds)
    log(f"hold recorded in {holds_path}: the deploy will not re-activate until `rigkit wire-in --release`")
    return 0


def sync_staging(live: Path, staging: Path | None) -> bool:
    """Make ``staging`` (root 0600) hold ``live``'s text when they differ; returns True when it wrote.
    Nothing when there is no staging path, no live config, or they already agree. Raises OSError."""
    if staging is None or not live.exists():
        return False
    text = live.read_text()
    if staging.exists() and staging.read_text() == text:
        return False
    staging.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _install(text, staging, "root:root", 0o600)
    return True


def release(holds_path: Path, log: Callable[[str], None] = print) -> int:
    """Remove the ``llama-swap`` hold; returns 0 (also when there was none)."""
    holds = read_holds(holds_path)
    if HOLD_KEY not in holds:
        log(f"no hold recorded in {holds_path}")
        return 0
    hold = holds.pop(HOLD_KEY)
    write_holds(holds_path, holds)
    log(f"released the hold of {hold.get('since')} ({hold.get('by')}); the next deploy or "
        "`rigkit wire-in --activate` activates the declared config")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``rigkit-agent activate [--config NEW] [--live PATH] [--restart | --rollback | --release] [--by WHO]``.

    Defaults from the host config (live config, holds, llama-swap's URL and unit, the API key file,
    the staging copy set to the live config at the end: :func:`sync_staging`).
    Takes the host lock for the whole run and refuses (exit 1, naming the holder) when it is held or
    a window is open. Logs each step on stdout (the remote wrapper :func:`remote_command` prints it
    back). Exit codes as the module docstring says.
    """
    from rigkit.host.config import ConfigError
    from rigkit.host.config import load as load_config

    try:
        cfg = load_config()
    except ConfigError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    live_default = Path(cfg.get("llama_swap", "config"))
    ap = argparse.ArgumentParser(prog="rigkit-agent activate", description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, help="the new live config to activate (e.g. the uploaded staging copy)")
    ap.add_argument("--live", type=Path, default=live_default, help=f"the live config [default: {live_default}]")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--restart", action="store_true", help="restart and probe even when --config equals the live one")
    mode.add_argument("--rollback", action="store_true", help="activate the newest differing backup and record a hold")
    mode.add_argument("--release", action="store_true", help="remove the hold")
    ap.add_argument("--by", default=None, help="who asked, for the lock record and a hold (e.g. 'rigkit deploy')")
    ap.add_argument("--no-revert", action="store_true", help="leave a config that failed live (its backup named)")
    ap.add_argument("--owner", help=f"owner of the installed config [default: the replaced file's, or {DEFAULT_OWNER}]")
    ap.add_argument("--mode", type=lambda s: int(s, 8), help="mode of the installed config (octal)")
    ap.add_argument("--health-timeout", type=float, default=float(cfg.get("llama_swap", "health_timeout_s")),
                    help="s to wait for /health after a restart")
    ap.add_argument("--completion-timeout", type=float, help="s per completion [default: healthCheckTimeout + 30]")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    holds = cfg.path("holds")
    what = "rollback" if args.rollback else "release" if args.release else "activation"
    try:
        lock = standdown.lock_for_change(cfg, f"{what} of llama-swap's config" + (f" ({args.by})" if args.by else ""),
                                         log)
    except LockHeld as exc:
        log(f"error: {exc}")
        return 1
    except standdown.WindowOpen as exc:
        log(f"error: {what}: {exc}")
        return 1
    try:
        if args.release:
            return release(holds, log)
        return _activation(args, ap, cfg, holds, log)
    except ActivationError as exc:
        log(f"error: {exc}")
        return 1
    except ValueError as exc:  # an unreadable holds file
        log(f"error: {exc}")
        return 2
    finally:
        if not args.release:
            try:
                staging = Path(cfg.get("llama_swap", "staging"))
                if sync_staging(args.live, staging):
                    log(f"staging copy {staging} now holds the live config")
            except (ConfigError, OSError) as exc:
                log(f"warning: could not set the staging copy to the live config: {exc}")
            _record_writes(cfg, args.live, log)
        lock.release()


def _record_writes(cfg: Any, live: Path, log: Callable[[str], None]) -> None:
    """Record what this run left in ``live`` and the staging copy (still under the lock) as rigkit's
    writes (:mod:`rigkit.common.written`), so a later deploy never takes them for a hand's edit. A
    failure to record is a warning (the write itself stands)."""
    from rigkit.common import written
    from rigkit.host.config import ConfigError

    try:
        state_dir = cfg.path("state_dir")
        for f in (live, Path(cfg.get("llama_swap", "staging"))):
            written.record(f, state_dir)
    except (ConfigError, OSError) as exc:
        log(f"warning: could not record the llama-swap configs as rigkit's writes: {exc}")


def _activation(args: argparse.Namespace, ap: argparse.ArgumentParser, cfg: Any, holds: Path,
                log: Callable[[str], None]) -> int:
    """The activation or rollback :func:`main` asked for, under the lock; returns its exit code."""
    from rigkit.host.config import ConfigError

    try:
        vram = cfg.vram_idle
    except ConfigError as exc:  # a host config from before the deploy that renders `vram`
        log(f"warning: {exc}; llama-swap restarts without waiting for the GPU's memory")
        vram = None
    host = Host(cfg.proxy_url, cfg.get("llama_swap", "unit"), cfg.path("api_key_file"), args.health_timeout,
                args.completion_timeout, log, vram)
    if args.rollback:
        return rollback(args.live, host, holds, by=args.by or "rigkit wire-in --rollback")
    if args.config is None:
        ap.error("--config is required (unless --rollback or --release)")
    try:
        text = args.config.read_text()
    except OSError as exc:
        log(f"error: --config {args.config}: {exc.strerror}")
        return 2
    return activate(text, args.live, host, holds, args.owner, args.mode, force_restart=args.restart,
                    revert=not args.no_revert)


if __name__ == "__main__":
    sys.exit(main())

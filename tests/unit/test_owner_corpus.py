"""The operator's pacman.conf and mkinitcpio files read by their owners (issue 42): rigkit's change over a
corpus of real files (``data/owner_corpus.json``, each with its source) and every shape the issue names,
checked with the owner's own loading — ``pacman-conf`` (Debian's pacman 6, the same program as Arch's)
and mkinitcpio v41's configuration loading, its lines cut from the vendored tarball
(``tests/harness/mkinitcpio_v41.py``) and run by bash. After rigkit's change: the pins held, every
package and hook the operator had still there, kms gone, the operator's files as they were (pacman.conf
but for rigkit's one ``Include`` line), and a second run changes nothing. Hypothesis generates HOOKS
configurations and IgnorePkg globs and asserts rigkit's readers agree with the owners' on all of them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.common import mkinitcpio, pacman
from rigkit import paths
from rigkit.operations.pacman import include_argv, replace_include_argv

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import mkinitcpio_v41  # noqa: E402

CORPUS = json.loads((Path(__file__).parent / "data" / "owner_corpus.json").read_text())
PINS = ["cuda", "nvidia-open-dkms", "nvidia-utils", "opencl-nvidia"]
OURS = Path(mkinitcpio.DROPIN).name
needs_pacman_conf = pytest.mark.skipif(shutil.which("pacman-conf") is None, reason="pacman-conf (Debian's pacman 6) not installed")


def git_blob(data: bytes) -> str:
    """The git object id of a file holding ``data`` (``git hash-object``): what GitHub's tree lists."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_corpus_holds_real_files_byte_for_byte_with_their_sources():
    files = CORPUS["mkinitcpio"] + CORPUS["pacman"]
    assert len(files) == 11
    assert all(f["source"].startswith("https://github.com/") and "/blob/" in f["source"] for f in files)
    assert all(git_blob(f["text"].encode()) == f["git_blob"] for f in files)  # the file itself, not an excerpt
    assert all(f["final_newline"] == f["text"].endswith("\n") for f in files)
    # real files end without a newline (ctlos's archiso.conf drop-in, Crandel's pacman.conf): issue 57
    assert [f["source"].split("/")[3] for f in files if not f["final_newline"]] == ["ctlos", "Crandel"]


# ------------------------------------------------------------------------------------------- mkinitcpio

def owner_load(conf: Path, confd: bool = True) -> list[str] | None:
    """HOOKS as mkinitcpio v41 loads them: its own lines (mkinitcpio l.1119-1139, functions l.521-529),
    with the drop-ins of ``<conf>.d`` (``confd``) or as ``-c conf`` loads it (``_optconfd=0``,
    l.878-880). None when mkinitcpio dies ("Failed to read configuration")."""
    script = (f"shopt -s extglob\n_f_config=\"$1\"\n_d_config=\"${{_f_config}}.d\"\n_optconfd={int(confd)}\n_tmpfiles=()\n"
              "msg() { :; }\ndie() { echo DIE; exit 1; }\n" + mkinitcpio_v41.arrayize_config()
              + mkinitcpio_v41.load_config_lines()
              + "for h in \"${HOOKS[@]}\"; do printf 'hook %s\\n' \"$h\"; done\nrm -f -- \"${_tmpfiles[@]}\"\n")
    out = subprocess.run(["bash", "-c", script, "mkinitcpio", str(conf)], capture_output=True, text=True).stdout
    if "DIE" in out:
        return None
    return [ln[5:] for ln in out.splitlines() if ln.startswith("hook ")]


def owner_hooks(conf: Path) -> list[str]:
    """:func:`owner_load` with the drop-ins, which must load."""
    hooks = owner_load(conf)
    assert hooks is not None, f"mkinitcpio v41 fails to read the configuration at {conf}"
    return hooks


def rigkit_reads(etc: Path) -> dict:
    script = mkinitcpio.load_script(conf=str(etc / "mkinitcpio.conf"), dropin=str(etc / "mkinitcpio.conf.d" / OURS),
                                    presets=str(etc / "mkinitcpio.d"))
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    return mkinitcpio.parse_load(out.splitlines())


def digests(etc: Path) -> dict[str, str]:
    return {str(p.relative_to(etc)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(etc.rglob("*")) if p.is_file() and p.name != OURS}


def make_etc(tmp: Path, main: str, dropins: dict[str, str] | None = None, preset: str | None = None) -> Path:
    etc = tmp / "etc"
    shutil.rmtree(etc, ignore_errors=True)
    (etc / "mkinitcpio.conf.d").mkdir(parents=True)
    (etc / "mkinitcpio.d").mkdir()
    (etc / "mkinitcpio.conf").write_bytes(main.encode())
    for name, text in (dropins or {}).items():
        (etc / "mkinitcpio.conf.d" / name).write_bytes(text.encode())
    (etc / "mkinitcpio.d" / "linux.preset").write_text(preset or mkinitcpio_v41.preset("linux"))
    return etc


def apply_rigkit(etc: Path) -> bool:
    """What ``mkinitcpio_without_kms`` does to these files: rigkit's drop-in in place; returns whether
    it would rebuild (the effective HOOKS change). Raises AssertionError on a refusal."""
    loaded = rigkit_reads(etc)
    assert mkinitcpio.refusal(loaded) is None, mkinitcpio.refusal(loaded)
    (etc / "mkinitcpio.conf.d" / OURS).write_text(mkinitcpio.DROPIN_TEXT)
    return loaded["hooks"] != loaded["with_rigkit"]


def assert_kms_out_and_the_rest_kept(etc: Path) -> None:
    conf = etc / "mkinitcpio.conf"
    before_files = digests(etc)
    before = owner_hooks(conf)
    assert rigkit_reads(etc)["hooks"] == before  # rigkit reads what mkinitcpio loads
    rebuild = apply_rigkit(etc)
    after = owner_hooks(conf)
    assert after == [h for h in before if h != "kms"]  # kms gone, every other hook kept, in order
    assert rebuild == ("kms" in before)  # the initramfs rebuilt only when the effective HOOKS changed
    assert digests(etc) == before_files  # the operator's files as they were
    again = rigkit_reads(etc)  # the second run: nothing to change, nothing to rebuild
    assert again["hooks"] == again["with_rigkit"] == after
    assert mkinitcpio.refusal(again) is None


SHAPES = {
    "string HOOKS": 'HOOKS="base udev autodetect kms block filesystems fsck"\n',
    "string HOOKS over several lines (mkinitcpio keeps the first line)": 'HOOKS="base udev kms\n  block filesystems"\n',
    "array HOOKS over several lines": "HOOKS=(\n  base\n  udev   # devices\n  kms\n  block filesystems\n)\n",
    "indented, with a trailing comment": "   HOOKS=(base udev kms block filesystems)   # kms for early KMS\n",
    "two live HOOKS lines, the second wins": ("HOOKS=(base udev autodetect microcode modconf kms keyboard keymap consolefont block filesystems fsck)\n"
                                               "HOOKS=(base systemd autodetect kms keyboard sd-vconsole block sd-encrypt lvm2 filesystems fsck)\n"),
    "kms only in a comment": "# HOOKS=(base udev kms block)\nHOOKS=(base udev block filesystems)\n",
    "HOOKS added to": "HOOKS=(base udev block)\nHOOKS+=(kms filesystems)\n",
    # issue 57: mkinitcpio joins the files with cat, so each of these runs into the next file's first line
    "no final newline after HOOKS": "HOOKS=(base udev autodetect kms block filesystems fsck)",
    "no final newline after another setting": 'HOOKS=(base udev kms block filesystems)\nCOMPRESSION="xz"',
    "no final newline after a comment": "HOOKS=(base udev kms block filesystems)\n# the end",
}


@pytest.mark.parametrize("entry", CORPUS["mkinitcpio"], ids=lambda e: e["source"].split("/")[3] + ":" + e["role"])
def test_real_mkinitcpio_files_lose_kms_and_keep_every_other_hook(tmp_path, entry):
    if entry["role"] == "main":
        etc = make_etc(tmp_path, entry["text"])
    else:  # a distribution's drop-in over Arch's stock main file
        etc = make_etc(tmp_path, mkinitcpio_v41.stock_conf(), {entry["name"]: entry["text"]})
    assert_kms_out_and_the_rest_kept(etc)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_of_the_issue_in_the_main_file(tmp_path, shape):
    assert_kms_out_and_the_rest_kept(make_etc(tmp_path, SHAPES[shape]))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_in_an_operator_drop_in_over_the_stock_main_file(tmp_path, shape):
    assert_kms_out_and_the_rest_kept(make_etc(tmp_path, mkinitcpio_v41.stock_conf(), {"50-operator.conf": SHAPES[shape]}))


def test_drop_ins_load_in_version_order_and_only_conf_files(tmp_path):
    etc = make_etc(tmp_path, mkinitcpio_v41.stock_conf(), {
        "10-a.conf": "HOOKS=(base udev kms block filesystems)\n",
        "9-b.conf": "HOOKS=(base kms)\n",  # sort -V: 9 before 10
        "20-c.conf.disabled": "HOOKS=(base kms broken)\n"})
    assert rigkit_reads(etc)["dropins"] == ["9-b.conf", "10-a.conf", OURS]
    assert owner_hooks(etc / "mkinitcpio.conf") == ["base", "udev", "kms", "block", "filesystems"]
    assert_kms_out_and_the_rest_kept(etc)


def test_a_drop_in_sorting_after_rigkits_that_brings_kms_back_is_named(tmp_path):
    etc = make_etc(tmp_path, mkinitcpio_v41.stock_conf(), {"zz_late.conf": "HOOKS+=(kms)\n"})
    loaded = rigkit_reads(etc)
    assert loaded["dropins"] == [OURS, "zz_late.conf"]
    assert mkinitcpio.refusal(loaded) == (
        f"the kms hook stays in effect even with rigkit's drop-in (HOOKS: {' '.join(loaded['with_rigkit'])}; "
        f"drop-ins in loading order: {OURS} zz_late.conf); rename zz_late.conf to sort before {OURS}")


def naming_preset(etc_config: str, var: str = "ALL") -> str:
    """Upstream's preset with both images (``PRESETS=('default' 'fallback')``, its commented line) and
    ``<var>_config`` set to ``etc_config`` (each ``*_config`` is commented in it)."""
    line = f'#{var}_config="/etc/mkinitcpio.conf"'
    both = "PRESETS=('default')\n#PRESETS=('default' 'fallback')\n"
    assert line in mkinitcpio_v41.preset("linux") and both in mkinitcpio_v41.preset("linux")
    return (mkinitcpio_v41.preset("linux").replace(line, f'{var}_config="{etc_config}"')
            .replace(both, "PRESETS=('default' 'fallback')\n"))


def test_a_preset_naming_its_own_config_holding_kms_is_refused_naming_it(tmp_path):
    etc = make_etc(tmp_path / "a", "")
    etc = make_etc(tmp_path / "a", mkinitcpio_v41.stock_conf(), preset=naming_preset(f"{etc}/mkinitcpio.conf"))
    assert "kms" in owner_load(etc / "mkinitcpio.conf", confd=False)  # what `mkinitcpio -c` builds with
    problem = mkinitcpio.refusal(rigkit_reads(etc))
    assert problem == (f"a mkinitcpio preset names its own config holding kms ({etc}/mkinitcpio.d/linux.preset: "
                       f"ALL_config={etc}/mkinitcpio.conf (HOOKS: {mkinitcpio_v41.default_hooks()})), so mkinitcpio "
                       "reads no drop-in from /etc/mkinitcpio.conf.d for it and rigkit cannot take the kms hook out "
                       "without editing your file; remove kms from that config yourself or comment that line out "
                       "(Arch's stock preset leaves ALL_config commented), then deploy again")
    etc = make_etc(tmp_path / "b", mkinitcpio_v41.stock_conf(), preset=naming_preset("/nonexistent/mk.conf", "default"))
    assert mkinitcpio.refusal(rigkit_reads(etc)) == (
        f"a config a mkinitcpio preset names does not load ({etc}/mkinitcpio.d/linux.preset: "
        "default_config=/nonexistent/mk.conf)")


@pytest.mark.parametrize("var", ["ALL", "default", "fallback"])
def test_a_preset_naming_its_own_config_without_kms_needs_nothing(tmp_path, var):
    """Issue 57: ``ALL_config="/etc/mkinitcpio.conf"`` (install scripts, UKI guides) over a config without
    kms: no image has kms as mkinitcpio loads it (``-c``: that file alone), so no refusal, and the drop-in
    goes in as everywhere else (a second run changes nothing)."""
    etc = make_etc(tmp_path, "")
    main = "HOOKS=(base systemd autodetect microcode modconf keyboard sd-vconsole block filesystems fsck)"
    etc = make_etc(tmp_path, main, preset=naming_preset(f"{etc}/mkinitcpio.conf", var))
    assert "kms" not in owner_load(etc / "mkinitcpio.conf", confd=False)
    loaded = rigkit_reads(etc)
    assert loaded["presets"] == [[f"{etc}/mkinitcpio.d/linux.preset", f"{var}_config={etc}/mkinitcpio.conf",
                                  owner_load(etc / "mkinitcpio.conf", confd=False)]]
    assert mkinitcpio.preset_problem(loaded) is None
    assert_kms_out_and_the_rest_kept(etc)


def test_only_the_images_a_config_is_named_for_count(tmp_path):
    """``default_config`` set, ``ALL_config`` set: the default image reads its own file, the fallback
    image ``ALL_config`` (v41 l.680-681: ``${!preset_config:-$ALL_config}``)."""
    (tmp_path / "kms.conf").write_text("HOOKS=(base kms)\n")
    (tmp_path / "plain.conf").write_text("HOOKS=(base udev)\n")
    preset = naming_preset(str(tmp_path / "plain.conf")).replace(
        '#default_config="/etc/mkinitcpio.conf"', f'default_config="{tmp_path}/kms.conf"')
    etc = make_etc(tmp_path, mkinitcpio_v41.stock_conf(), preset=preset)
    file = f"{etc}/mkinitcpio.d/linux.preset"
    assert rigkit_reads(etc)["presets"] == [[file, f"default_config={tmp_path}/kms.conf", ["base", "kms"]],
                                            [file, f"ALL_config={tmp_path}/plain.conf", ["base", "udev"]]]
    assert "default_config" in mkinitcpio.refusal(rigkit_reads(etc))


def test_the_regression_rigkits_old_drop_in_after_a_file_without_a_final_newline(tmp_path):
    """Before issue 57 rigkit's drop-in began with its comment: after a real drop-in ending without a
    newline, mkinitcpio itself fails to read the joined files; with the empty first line it loads."""
    ctlos = next(e for e in CORPUS["mkinitcpio"] if not e["final_newline"])
    etc = make_etc(tmp_path, mkinitcpio_v41.stock_conf(), {ctlos["name"]: ctlos["text"],
                                                           OURS: mkinitcpio.DROPIN_TEXT.lstrip("\n")})
    assert owner_load(etc / "mkinitcpio.conf") is None
    (etc / "mkinitcpio.conf.d" / OURS).write_text(mkinitcpio.DROPIN_TEXT)
    assert owner_load(etc / "mkinitcpio.conf") == [h for h in ctlos["text"].split("(")[1].split(")")[0].split() if h != "kms"]


def test_kms_alone_is_refused_mkinitcpio_would_build_nothing(tmp_path):
    assert mkinitcpio.refusal(rigkit_reads(make_etc(tmp_path, "HOOKS=(kms)\n"))) == (
        "with kms taken out no hook is left (HOOKS: kms): mkinitcpio would refuse to build "
        "(\"Invalid config: No hooks found\"); set HOOKS in your mkinitcpio.conf")


def test_no_main_file_nothing_to_do(tmp_path):
    etc = make_etc(tmp_path, "")
    (etc / "mkinitcpio.conf").unlink()
    loaded = rigkit_reads(etc)
    assert loaded["present"] is False and mkinitcpio.refusal(loaded) is None


HOOK = st.sampled_from(["base", "udev", "systemd", "autodetect", "microcode", "modconf", "kms", "keyboard", "block",
                        "sd-encrypt", "lvm2", "filesystems", "fsck"])


@st.composite
def config_file(draw, assignments):
    """A file of HOOKS assignments ending as real files end: with a newline, without one after the
    last assignment, or without one after a trailing comment."""
    text = "".join(assignments)
    ending = draw(st.sampled_from(["newline", "none", "comment"]))
    if ending == "none":
        return text.rstrip("\n")
    if ending == "comment":
        return text + "# " + draw(HOOK)
    return text


@st.composite
def hooks_assignment(draw):
    hooks = draw(st.lists(HOOK, min_size=1, max_size=8))
    form = draw(st.sampled_from(["array", "string", "append", "indented-comment"]))
    if form == "array":
        return "HOOKS=(" + " ".join(hooks) + ")\n"
    if form == "string":
        return 'HOOKS="' + " ".join(hooks) + '"\n'
    if form == "append":
        return "HOOKS+=(" + " ".join(hooks) + ")\n"
    return "  HOOKS=(" + "  ".join(hooks) + ")  # " + draw(HOOK) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), main=st.lists(hooks_assignment(), min_size=1, max_size=3),
       dropins=st.dictionaries(st.sampled_from(["10-a.conf", "9-b.conf", "50-op.conf", "archiso.conf", "zz-late.conf"]),
                               st.lists(hooks_assignment(), min_size=1, max_size=2), max_size=3))
def test_generated_configurations_read_as_mkinitcpio_loads_them(tmp_path_factory, data, main, dropins):
    """For every generated main file and set of drop-ins, each ending with or without a final newline:
    rigkit's reading is mkinitcpio's; where mkinitcpio itself cannot read the operator's files, rigkit
    refuses saying so (not blaming its drop-in); otherwise with rigkit's drop-in the loading mkinitcpio
    does has no kms and every other hook in order (drop-ins sorted before rigkit's, as these names are)."""
    etc = make_etc(tmp_path_factory.mktemp("gen"), data.draw(config_file(main)),
                   {n: data.draw(config_file(t)) for n, t in dropins.items()})
    if owner_load(etc / "mkinitcpio.conf") is None:  # e.g. `HOOKS=(a)` run into the next file's `HOOKS=(b)`
        assert mkinitcpio.refusal(rigkit_reads(etc)).startswith("mkinitcpio's configuration does not load: ")
        return
    if not [h for h in owner_hooks(etc / "mkinitcpio.conf") if h != "kms"]:  # kms alone: nothing would be left
        assert mkinitcpio.refusal(rigkit_reads(etc)).startswith("with kms taken out no hook is left")
        return
    assert_kms_out_and_the_rest_kept(etc)


# ----------------------------------------------------------------------------------------------- pacman

def pacman_conf_ignorepkg(conf: Path) -> dict:
    """pacman-conf's reading of ``conf`` (:data:`rigkit.common.pacman.IGNOREPKG_COMMAND`, pointed at it):
    entries, exit status, its stderr lines (``messages``: warnings too) and error."""
    cmd = pacman.IGNOREPKG_COMMAND.replace("pacman-conf IgnorePkg", f"pacman-conf -c {conf} IgnorePkg")
    return pacman.parse_ignorepkg(subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout.splitlines())


def moved(tmp: Path, path: str) -> str:
    """``path`` (under ``/etc/``) moved under ``tmp``."""
    return str(tmp / path.removeprefix("/etc/"))


def supply_includes(tmp: Path, text: str, extra: dict[str, str] | None = None) -> Path:
    """``text`` as ``tmp/pacman.conf`` with ``/etc/pacman.d/`` moved under ``tmp`` and every Include
    target supplied (a mirrorlist; ``extra``: {file name: content})."""
    d = tmp / "pacman.d"
    d.mkdir(exist_ok=True)
    (d / "mirrorlist").write_text("Server = http://mirror.invalid/$repo/os/x86_64\n")
    for name, content in (extra or {}).items():
        (d / name).write_text(content.replace("/etc/pacman.d/", f"{d}/"))
    conf = tmp / "pacman.conf"
    conf.write_bytes(text.replace("/etc/pacman.d/", f"{d}/").encode())
    return conf


def apply_pins(conf: Path) -> bool:
    """What roles/pins.py does: rigkit's pins file (:data:`rigkit.paths.PINS_CONF`, moved under the test's
    folder), then its Include line when missing (the operation's own sed), or rigkit's earlier line turned
    into it and the earlier file removed. Returns whether pacman.conf changed."""
    include, legacy = Path(moved(conf.parent, paths.PINS_CONF)), moved(conf.parent, paths.LEGACY_PINS_CONF)
    include.parent.mkdir(exist_ok=True)
    include.write_text(pacman.pins_conf(PINS))
    lines = conf.read_text().splitlines()
    start, present = pacman.options_include(lines, str(include))
    assert start is not None
    if present:
        return False
    if pacman.options_include(lines, legacy)[1]:
        subprocess.run(replace_include_argv(legacy, str(include), str(conf)), check=True)
        Path(legacy).unlink(missing_ok=True)
        return True
    subprocess.run(include_argv(str(include), str(conf)), check=True)
    return True


def assert_pins_held_and_the_rest_kept(conf: Path) -> None:
    before_text = conf.read_text()
    before = pacman_conf_ignorepkg(conf)
    assert before["error"] is None, before
    assert apply_pins(conf) is True
    after = pacman_conf_ignorepkg(conf)
    assert after["error"] is None, after
    assert all(pacman.ignored_by(p, after["entries"]) for p in PINS)
    assert after["entries"] == PINS + before["entries"]  # every operator entry still read, in order
    added = [ln for ln in conf.read_text().splitlines(keepends=True) if ln not in before_text.splitlines(keepends=True)]
    assert added == [f"Include = {moved(conf.parent, paths.PINS_CONF)}\n"]
    # pacman warns of nothing rigkit brought (issue 57); the operator's warnings stay (one line further down)
    assert [re.sub(r", line \d+:", ",", m) for m in after["messages"]] == [re.sub(r", line \d+:", ",", m) for m in before["messages"]]
    assert conf.read_text().replace(added[0], "", 1) == before_text  # the operator's lines byte for byte
    assert apply_pins(conf) is False  # the second run changes nothing
    assert pacman_conf_ignorepkg(conf)["entries"] == after["entries"]


@needs_pacman_conf
@pytest.mark.parametrize("entry", CORPUS["pacman"], ids=lambda e: e["source"].split("/")[3])
def test_real_pacman_confs_hold_the_pins_and_keep_every_entry(tmp_path, entry):
    assert_pins_held_and_the_rest_kept(supply_includes(tmp_path, entry["text"]))


PACMAN_SHAPES = {
    "IgnorePkg in an Include'd file, with a glob": (
        "[options]\nArchitecture = auto\nInclude = /etc/pacman.d/holds.conf\n[core]\nInclude = /etc/pacman.d/mirrorlist\n",
        {"holds.conf": "IgnorePkg = nvidia* linux\n"}),
    "an Include glob in [options]": (
        "[options]\nInclude = /etc/pacman.d/holds-*.conf\n[core]\nInclude = /etc/pacman.d/mirrorlist\n",
        {"holds-a.conf": "IgnorePkg = cuda\n", "holds-b.conf": "IgnorePkg = linux-lts\n"}),
    "words after a # on an IgnorePkg line": (
        "[options]\nIgnorePkg = linux # kept by hand\n[core]\nInclude = /etc/pacman.d/mirrorlist\n", {}),
    "several IgnorePkg lines, indented": (
        "[options]\n  IgnorePkg = linux\nIgnorePkg=docker\n#IgnorePkg = cuda\n[core]\nInclude = /etc/pacman.d/mirrorlist\n", {}),
    "[options] last, no final newline": ("[core]\nInclude = /etc/pacman.d/mirrorlist\n[options]\nIgnorePkg = linux", {}),
    "a newer pacman's directives (a warning, not an error)": (
        "[options]\nDownloadUser = alpm\nDisableSandbox\nIgnorePkg = htop\n[core]\nInclude = /etc/pacman.d/mirrorlist\n", {}),
    # issue 57: install scripts and ansible roles append this (`echo 'Include = /etc/pacman.d/*.conf' >>
    # /etc/pacman.conf`): it lands inside the last repository section and reads every *.conf there
    "an Include glob of /etc/pacman.d/*.conf inside a repository section": (
        "[options]\nArchitecture = auto\n[core]\nInclude = /etc/pacman.d/mirrorlist\n[multilib]\n"
        "Include = /etc/pacman.d/mirrorlist\n\n# Custom Repos\nInclude = /etc/pacman.d/*.conf\n",
        {"chaotic.conf": "[chaotic-aur]\nInclude = /etc/pacman.d/mirrorlist\n"}),
}


@needs_pacman_conf
@pytest.mark.parametrize("shape", sorted(PACMAN_SHAPES))
def test_each_pacman_shape_of_the_issue(tmp_path, shape):
    text, extra = PACMAN_SHAPES[shape]
    assert_pins_held_and_the_rest_kept(supply_includes(tmp_path, text, extra))


@needs_pacman_conf
def test_rigkits_earlier_pins_file_read_by_a_glob_in_a_repository_section_and_moved_out(tmp_path):
    """Before issue 57 the pins file was ``/etc/pacman.d/rigkit-pins.conf``: the glob read it a second
    time inside ``[chaotic-aur]`` and pacman-conf warned on every run. The deploy turns rigkit's earlier
    line into the new one (in place) and removes the earlier file: the warning gone, the pins held, every
    other byte of pacman.conf as it was."""
    text, extra = PACMAN_SHAPES["an Include glob of /etc/pacman.d/*.conf inside a repository section"]
    legacy = moved(tmp_path, paths.LEGACY_PINS_CONF)
    text = text.replace("Architecture = auto\n", f"Include = {paths.LEGACY_PINS_CONF}\nArchitecture = auto\n")
    conf = supply_includes(tmp_path, text, {**extra, Path(legacy).name: pacman.pins_conf(PINS)})
    before = pacman_conf_ignorepkg(conf)
    assert before["messages"] == [f"warning: config file {legacy}, line 3: directive 'IgnorePkg' in section "
                                  "'chaotic-aur' not recognized."]
    before_text = conf.read_text()
    assert apply_pins(conf) is True
    after = pacman_conf_ignorepkg(conf)
    assert (after["messages"], after["error"], after["entries"]) == ([], None, PINS)
    assert not Path(legacy).exists()
    assert conf.read_text() == before_text.replace(legacy, moved(tmp_path, paths.PINS_CONF))
    assert apply_pins(conf) is False


@needs_pacman_conf
def test_the_operators_glob_holds_as_pacman_reads_it(tmp_path):
    conf = supply_includes(tmp_path, *PACMAN_SHAPES["IgnorePkg in an Include'd file, with a glob"])
    entries = pacman_conf_ignorepkg(conf)["entries"]
    assert entries == ["nvidia*", "linux"]
    assert [p for p in PINS if pacman.ignored_by(p, entries)] == ["nvidia-open-dkms", "nvidia-utils"]


@needs_pacman_conf
def test_a_missing_include_target_is_a_finding_not_a_crash(tmp_path):
    conf = supply_includes(tmp_path, "[options]\nInclude = /etc/pacman.d/gone.conf\n")
    got = pacman_conf_ignorepkg(conf)
    assert got["rc"] == 1 and got["entries"] == []
    assert got["error"].startswith(f"error: config file {tmp_path}/pacman.d/gone.conf could not be read")


def test_no_options_section_is_refused():
    assert pacman.options_include(["[core]", "Include = /etc/pacman.d/mirrorlist"], "/x") == (None, False)
    assert pacman.options_include(["#[options]", "[options]", "Include = /x"], "/x") == (1, True)
    assert pacman.options_include(["[options]", "#Include = /x", "[core]", "Include = /x"], "/x") == (0, False)


@settings(max_examples=300, deadline=None)
@given(pattern=st.text(alphabet="abn-*?[]!", min_size=1, max_size=6), name=st.text(alphabet="abn-[]!", min_size=1, max_size=6))
def test_ignored_by_is_fnmatch_as_alpm_calls_it(pattern, name):
    """``ignored_by`` calls libc's ``fnmatch(pattern, name, 0)``, as alpm does. It agrees with Python's
    ``fnmatchcase`` on every pattern without a ``[`` (and without a backslash: C escapes with it); on a
    malformed bracket the two differ and libc's answer is alpm's. A name without wildcards holds itself."""
    got = bool(pacman.ignored_by(name, [pattern]))
    if "[" not in pattern:
        assert got == fnmatch.fnmatchcase(name, pattern)
    if not any(c in name for c in "*?["):
        assert pacman.ignored_by(name, [name]) == [name]


def test_a_malformed_bracket_is_read_as_libc_reads_it_not_as_python_does():
    assert fnmatch.fnmatchcase("[[-", "[?-") and not pacman.ignored_by("[[-", ["[?-"])
    assert pacman.ignored_by("nvidia-utils", ["nvidia-[tu]tils", "cud?"]) == ["nvidia-[tu]tils"]


def test_rigkits_earlier_drop_in_is_known_as_its_own():
    """The text rigkit wrote before issue 57 (from git: the commit before) is replaced by the deploy as
    rigkit's own, not backed up as a hand edit."""
    old = subprocess.run(["git", "-C", str(ROOT), "show", "4f241d1:rigkit/common/mkinitcpio.py"], capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip(f"git history not at hand: {old.stderr.strip()}")
    scope: dict = {}
    exec(compile(old.stdout, "mkinitcpio.py@4f241d1", "exec"), scope)
    assert hashlib.sha256(scope["DROPIN_TEXT"].encode()).hexdigest() in mkinitcpio.EARLIER_DROPIN_SHA256
    assert hashlib.sha256(mkinitcpio.DROPIN_TEXT.encode()).hexdigest() not in mkinitcpio.EARLIER_DROPIN_SHA256


def test_the_lived_in_hosts_files_are_real_files_byte_for_byte_with_their_sources():
    """Issue 63: the operator's files of tests/harness/test_lived_in.py, each cited at a commit; the
    one adapted file (the crontab) carries what was added apart from the real bytes."""
    files = CORPUS["lived_in"]
    assert {f["role"] for f in files} == {"pacman.conf", "pacman include", "mkinitcpio preset", "mkinitcpio drop-in",
                                         "daemon.json", "unit", "timer", "crontab"}
    assert all(f["source"].startswith("https://github.com/") and "/blob/" in f["source"] for f in files)
    assert all(git_blob(f["text"].encode()) == f["git_blob"] for f in files)
    assert all(f["final_newline"] == f["text"].endswith("\n") for f in files)
    assert [f["host_path"] for f in files if "from_document" in f] == ["/etc/pacman.d/tuxlava.conf"]
    # alainpham's daemon.json and dborseth's MODULES+= drop-in end without a newline
    assert [f["role"] for f in files if not f["final_newline"]] == ["daemon.json", "mkinitcpio drop-in"]
    assert [f["role"] for f in files if "adapted_append" in f] == ["pacman.conf", "crontab"]

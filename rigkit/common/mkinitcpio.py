"""mkinitcpio's configuration as mkinitcpio v41 loads it (the one reader of HOOKS), and rigkit's drop-in
that takes the ``kms`` hook out of it.

rigkit never parses ``/etc/mkinitcpio.conf`` in Python and never edits it: :data:`LOAD_SCRIPT` is run
by bash on the host and loads the configuration with the lines of upstream's script (tag ``v41``,
commit ``fc8137c5``; ``../shared/vendor/mkinitcpio/``):

- ``mkinitcpio`` l.15-16: the main file ``/etc/mkinitcpio.conf``, drop-ins in ``/etc/mkinitcpio.conf.d``;
- l.680-683 (``process_preset``): for each image ``p`` of a preset's ``PRESETS``, ``${p}_config``, else
  ``ALL_config``, becomes ``-c FILE``, and l.878-880 (``-c``) sets ``_optconfd=0``: **then no drop-in is
  read** and that file alone is sourced (l.1137). Such an image is loaded the same way here: when its
  file holds no kms nothing needs doing for it; when it holds kms the deploy refuses (rigkit's drop-in
  would not be read, and rigkit never edits the operator's file);
- l.1119-1137: the drop-ins found with ``find -maxdepth 1 -xtype f -name '*.conf'``, sorted with
  ``LC_ALL=C.UTF-8 sort -zVu``, appended to a copy of the main file with ``cat`` (nothing between two
  files: a file without a final newline runs into the next one's first line, which is why rigkit's
  drop-in begins with an empty line), which bash sources once;
- ``functions`` l.521-529 (``arrayize_config``): a string ``HOOKS="a b"`` becomes an array with
  ``IFS=' ' read -r -a`` (spaces only; a string over several lines keeps its first line).

``tests/unit/test_owner_corpus.py`` runs this loader and the real script's own lines (cut from the
vendored tarball) over real files kept byte for byte and generated configurations, and asserts they agree.
"""

from __future__ import annotations

import shlex

#: The operator's main file (read through the loading below, never edited) and rigkit's drop-in; named
#: here, where the host side reads them (``rigkit.paths`` re-exports both).
CONF = "/etc/mkinitcpio.conf"
DROPIN = "/etc/mkinitcpio.conf.d/zz-rigkit-no-kms.conf"

#: rigkit's drop-in (:data:`DROPIN`, sorted after the operator's ``*.conf``):
#: kms out of whatever HOOKS the files loaded before it set, in either form, every other hook kept in
#: order. It reads a string HOOKS as ``arrayize_config`` does. It begins with a newline: mkinitcpio
#: joins the files with ``cat`` (l.1125-1128), and real files end without one (``COMPRESSION="xz"``
#: then ran into ``# Written by rigkit (…`` and bash refused the joined text).
DROPIN_TEXT = """
# Written by rigkit (roles/boot.py): the kms hook stays out of the initramfs (it embeds nouveau even
# when nouveau is blacklisted). mkinitcpio appends the drop-ins of /etc/mkinitcpio.conf.d in
# `sort -V` order to /etc/mkinitcpio.conf with cat and sources them once: this file, named to sort
# last, takes kms out of whatever HOOKS the files before it set (an array, or a string as mkinitcpio
# reads one). Its first line is empty so that a file before it without a final newline still ends
# its last line. Change HOOKS in your own files; this one is rigkit's and is put back by every deploy.
if [[ -v HOOKS ]]; then
    if [[ ${HOOKS@a} == *a* ]]; then
        _rigkit_hooks=("${HOOKS[@]}")
    else
        IFS=' ' read -r -a _rigkit_hooks <<<"$HOOKS"
    fi
    HOOKS=()
    for _rigkit_hook in "${_rigkit_hooks[@]}"; do
        [[ $_rigkit_hook == kms ]] || HOOKS+=("$_rigkit_hook")
    done
    unset _rigkit_hooks _rigkit_hook
fi
"""

#: sha256 of the drop-in texts earlier rigkit builds wrote (before issue 57 gave it its empty first
#: line): the deploy replaces them as its own, without calling them hand edits.
EARLIER_DROPIN_SHA256 = frozenset({"8362166789f4a3887aa0d5471701021ecd4a2158a8ffa7ff6f31451ec357a0c4"})

#: The hook rigkit keeps out.
KMS = "kms"

_LOADER = r"""
shopt -s extglob
_f_config=%(conf)s
_d_config=%(confd)s
_d_presets=%(presets)s
ours=%(ours)s
wanted=%(wanted)s
if [[ ! -f $_f_config ]]; then echo 'main absent'; exit 0; fi
echo 'main present'
named=()
for p in "$_d_presets"/*.preset; do
    [[ -e $p ]] || continue
    mapfile -t -O "${#named[@]}" named < <( . "$p" >/dev/null 2>&1 </dev/null
      for i in "${PRESETS[@]}"; do
          v=${i}_config
          if [[ -n ${!v:-} ]]; then printf '%%s\t%%s=%%s\n' "$p" "$v" "${!v}"
          elif [[ -n ${ALL_config:-} ]]; then printf '%%s\tALL_config=%%s\n' "$p" "$ALL_config"; fi
      done | awk '!seen[$0]++' ) 2>/dev/null
done
for n in "${named[@]}"; do
    cfg=${n#*$'\t'}; cfg=${cfg#*=}
    ( . "$cfg" >/dev/null 2>&1 </dev/null || { printf 'preset %%s\terror\n' "$n"; exit 0; }
      set -f
      [[ ${HOOKS@a} != *a* ]] && IFS=' ' read -r -a HOOKS <<<"$HOOKS"
      set +f
      printf 'preset %%s\thooks' "$n"; (( ${#HOOKS[@]} )) && printf ' %%s' "${HOOKS[@]}"; printf '\n' )
done
load() {  # $1: the prefix of the lines printed; $2: 1 = with rigkit's drop-in as declared
    local conf_files=() conf tmpfile
    if [[ -d $_d_config ]]; then
        mapfile -d '' conf_files < <(LC_ALL=C.UTF-8 find "$_d_config" -maxdepth 1 -xtype f -name '*.conf' -print0 | sed -z 's/.*\///' | LC_ALL=C.UTF-8 sort -zVu)
    fi
    if (( $2 )); then
        mapfile -d '' conf_files < <({ (( ${#conf_files[@]} )) && printf '%%s\0' "${conf_files[@]}"; printf '%%s\0' "$ours"; } | LC_ALL=C.UTF-8 sort -zVu)
    fi
    (( $2 )) && for conf in "${conf_files[@]}"; do printf 'dropin %%s\n' "$conf"; done
    tmpfile=$(mktemp -t rigkit-mkinitcpio.XXXXXX)
    cat -- "$_f_config" > "$tmpfile"
    for conf in "${conf_files[@]}"; do
        if (( $2 )) && [[ $conf == "$ours" ]]; then
            printf '%%s' "$wanted" >> "$tmpfile"
        elif [[ -r "$_d_config/$conf" ]]; then
            cat -- "$_d_config/$conf" >> "$tmpfile"
        fi
    done
    ( . "$tmpfile" >/dev/null 2>&1 </dev/null || { echo "error $1 failed to read configuration"; exit 0; }
      set -f
      [[ ${HOOKS@a} != *a* ]] && IFS=' ' read -r -a HOOKS <<<"$HOOKS"
      set +f
      for h in "${HOOKS[@]}"; do printf "$1 %%s\n" "$h"; done )
    rm -f -- "$tmpfile"
}
load hook 0
load rigkit-hook 1
"""


def load_script(conf: str = CONF, dropin: str = DROPIN,
                presets: str = "/etc/mkinitcpio.d", wanted: str = DROPIN_TEXT) -> str:
    """The bash script (run as ``bash -c SCRIPT``) that loads mkinitcpio's configuration twice as v41
    does (module docstring): as it is, and with rigkit's drop-in ``dropin`` holding ``wanted``. Output,
    one item a line: ``main present|absent``; ``preset <file>\\t<VAR>=<value>\\thooks <name> …`` (or
    ``…\\terror`` when that file does not load) for each config a preset's image names, loaded alone as
    ``-c`` loads it; ``dropin <name>`` in loading order once rigkit's is in place (its own included);
    ``hook <name>`` (effective HOOKS now) and ``rigkit-hook <name>`` (with rigkit's drop-in as
    declared), in order; ``error <prefix> failed to read configuration`` when sourcing fails."""
    confd = dropin.rsplit("/", 1)[0]
    return _LOADER % {"conf": shlex.quote(conf), "confd": shlex.quote(confd), "presets": shlex.quote(presets),
                      "ours": shlex.quote(dropin.rsplit("/", 1)[1]),
                      "wanted": shlex.quote(wanted)}


def parse_load(lines: list[str]) -> dict:
    """The output of :func:`load_script` as ``{"present": bool, "presets": [[file, "VAR=value", hooks]],
    "dropins": [name], "hooks": [name], "with_rigkit": [name], "error": str | None}`` (``hooks`` of a
    preset's config: a list of names, or None when that config does not load; ``present`` False: no
    ``/etc/mkinitcpio.conf``, nothing else read)."""
    out: dict = {"present": False, "presets": [], "dropins": [], "hooks": [], "with_rigkit": [], "error": None}
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "main":
            out["present"] = rest.strip() == "present"
        elif kind == "preset":
            file, _, rest = rest.partition("\t")
            setting, _, hooks = rest.rpartition("\t")
            out["presets"].append([file, setting, hooks.split()[1:] if hooks.startswith("hooks") else None])
        elif kind == "dropin":
            out["dropins"].append(rest)
        elif kind == "hook":
            out["hooks"].append(rest)
        elif kind == "rigkit-hook":
            out["with_rigkit"].append(rest)
        elif kind == "error":
            out["error"] = (out["error"] + "; " if out["error"] else "") + rest
    return out


def preset_problem(loaded: dict) -> str | None:
    """Why a config a preset names (``-c``: mkinitcpio reads no drop-in then, v41 l.680-683, l.878-880)
    stops rigkit, or None: it holds kms (rigkit's drop-in is not read for that image and rigkit never
    edits the operator's file), or it does not load. A named config without kms needs nothing."""
    bad = [(file, setting, hooks) for file, setting, hooks in loaded.get("presets", [])
           if hooks is None or KMS in hooks]
    if not bad:
        return None
    broken = [f"{file}: {setting}" for file, setting, hooks in bad if hooks is None]
    if broken:
        return f"a config a mkinitcpio preset names does not load ({'; '.join(broken)})"
    named = "; ".join(f"{file}: {setting} (HOOKS: {' '.join(hooks)})" for file, setting, hooks in bad)
    return (f"a mkinitcpio preset names its own config holding kms ({named}), so mkinitcpio reads no drop-in "
            "from /etc/mkinitcpio.conf.d for it and rigkit cannot take the kms hook out without editing your "
            "file; remove kms from that config yourself or comment that line out (Arch's stock preset leaves "
            "ALL_config commented), then deploy again")


def refusal(loaded: dict) -> str | None:
    """Why rigkit cannot take kms out through its drop-in, or None: :func:`preset_problem`; the
    configuration does not load (as it is, or only once rigkit's drop-in is appended: said apart); no
    hook left without kms; or kms still in effect with rigkit's drop-in in place (a file sorting after
    it, named)."""
    if not loaded["present"]:
        return None
    problem = preset_problem(loaded)
    if problem:
        return problem
    if loaded["error"]:
        if all(e.startswith("rigkit-hook ") for e in loaded["error"].split("; ")):
            return ("mkinitcpio's configuration loads, but not with rigkit's drop-in appended: "
                    f"{loaded['error']} (a defect of rigkit's drop-in; please report it)")
        return f"mkinitcpio's configuration does not load: {loaded['error']}"
    if not loaded["with_rigkit"]:
        return (f"with kms taken out no hook is left (HOOKS: {' '.join(loaded['hooks'])}): mkinitcpio would refuse "
                "to build (\"Invalid config: No hooks found\"); set HOOKS in your mkinitcpio.conf")
    if KMS in loaded["with_rigkit"]:
        ours = DROPIN.rsplit("/", 1)[1]
        dropins = loaded["dropins"]
        after = dropins[dropins.index(ours) + 1:] if ours in dropins else []
        return ("the kms hook stays in effect even with rigkit's drop-in "
                f"(HOOKS: {' '.join(loaded['with_rigkit'])}; drop-ins in loading order: {' '.join(loaded['dropins'])})"
                + (f"; rename {' '.join(after)} to sort before {ours}" if after else ""))
    return None

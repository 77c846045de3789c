#!/usr/bin/env bash
# GPU facts, read-only (issue 31 part 4): run every nvidia-smi query rigkit parses, save the raw
# output, and print what each of rigkit's parsers read from it — to check the parsers against a
# real card before trusting them (numbers, units, [N/A], [Not Supported], the energy counter).
#
#   bash benchmarks/gpu_facts.sh [OUT_DIR]      (default gpu-facts-<host>-<UTC time>/)
#
# It NEVER sets anything: no -pl/--power-limit, no -pm/--persistence-mode, no clocks (-lgc, -ac,
# -rgc, ...), no -r. The commands come from rigkit itself (python -m rigkit.host.gpu --commands:
# rigkit.host.gpu.PARSED and RAW), and any argument that would change the card is refused here.
# Python: $RIGKIT_PYTHON, else the host agent's /opt/rigkit/venv/bin/python (a deployed rig or
# sandbox host), else python3 with this checkout on PYTHONPATH.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-gpu-facts-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}
py=${RIGKIT_PYTHON:-}
if [ -z "$py" ]; then
  if /opt/rigkit/venv/bin/python -c 'import rigkit.host.gpu' 2>/dev/null; then py=/opt/rigkit/venv/bin/python
  else py=python3; export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"; fi
fi
mkdir -p "$out"
cmds=$("$py" -m rigkit.host.gpu --commands) || { echo "gpu_facts: $py cannot import rigkit.host.gpu" >&2; exit 1; }
while IFS=$'\t' read -r name cmd kind; do
  for arg in $cmd; do
    case "$arg" in
      -pl|--power-limit*|-pm|--persistence-mode*|-lgc|--lock-gpu-clocks*|-rgc|--reset-gpu-clocks|-lmc|\
      --lock-memory-clocks*|-rmc|-ac|--applications-clocks*|-rac|-r|--gpu-reset|-e|--ecc-config*|-c|\
      --compute-mode*|-am|-caa|-mig|--multi-instance-gpu*)
        echo "gpu_facts: refusing '$cmd': $arg would change the card" >&2; exit 1;;
    esac
  done
  echo "\$ $cmd" >"$out/$name.cmd"
  # shellcheck disable=SC2086 # the command is rigkit's own, split on spaces as written
  $cmd >"$out/$name.out" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
  echo "saved $out/$name.out ($kind, exit $(cat "$out/$name.rc"), $(wc -c <"$out/$name.out") bytes)"
done <<<"$cmds"
echo "--- what rigkit's parsers read ($py) ---"
"$py" -m rigkit.host.gpu --parse "$out"

#!/bin/bash
# Sandbox hosts for `make demo` and by hand (root):
#   tests/harness/host.sh up NAME [--lane nspawn|chroot]   prints the host's inventory data as JSON
#   tests/harness/host.sh down NAME | status [NAME] | clean [--prefix P]
# A host stays up until `down` (make demo-clean). Builds the mirror and root tarball if needed.
exec python3 "$(cd "$(dirname "$0")" && pwd)/hostctl.py" "$@"

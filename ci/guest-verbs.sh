#!/bin/bash
# Runs inside the SoftRoCE guest (ci/softroce-vm.sh): the given command with the verbs
# transport's tests enabled (RSMPI_VERBS_TEST=1) and every rank on verbs over rxe0.
# Usage: ci/guest-verbs.sh <program> [args...]
set -eu
hostname rsmpi-guest
export RSMPI_VERBS_TEST=1 RSMPI_TRANSPORT=verbs CONFORMANCE_TRANSPORT=verbs
# the guest is emulated (TCG): several times slower than the host
export CONFORMANCE_TIMEOUT=${CONFORMANCE_TIMEOUT:-600}
ibv_devinfo -d rxe0 | grep -E "hca_id|state|active_mtu|link_layer" || true
echo "== uptime at start: $(cut -d' ' -f1 /proc/uptime)"
rc=0
"$@" || rc=$?
echo "== uptime at end: $(cut -d' ' -f1 /proc/uptime)"
exit $rc

#!/bin/bash
# Runs inside the SoftRoCE guest (ci/softroce-vm.sh): the conformance suite's job
# cases with every rank on libfabric's verbs;ofi_rxm over rxe0.
# Arguments: the conformance binary (built on the host with --features ofi), then an
# optional case filter.
set -eu
hostname rsmpi-guest
# libfabric 1.17's verbs provider cannot create its completion queue on rxe with the
# default universe size (shared/README.md); 16 works
export FI_UNIVERSE_SIZE=16
export FI_PROVIDER="verbs;ofi_rxm" RSMPI_OFI_PROVIDER="verbs;ofi_rxm"
export CONFORMANCE_TRANSPORT=ofi
# the job cases, then (without a filter) the short soak; the host cases inspect this
# node's shared memory, and rsmpi's own verbs transport runs the fault cases
# (ci/guest-verbs.sh). The soak crashed inside libfabric now and then (1 job in ~80:
# rxm handled a verbs flow-control credit against a connection it had just closed,
# at fi_close); rsmpi now runs rxm with a shared receive context, which has no such
# credits (docs/transports.md, "A shared receive context for rxm"), and a crash
# fails CI
export CONFORMANCE_JOBS_ONLY=1
# the job cases in the `both` matching mode alone (the one that also writes receives'
# advertisements with fi_write); `receiver` runs them over libfabric on the host
# (tcp;ofi_rxm) and over RDMA on rsmpi's verbs transport (ci/guest-verbs.sh). Both
# modes took 650 s here in the machine's fast state and 1 370 s in its slow one, the
# largest step of .ci/run. The soak below runs in both.
export CONFORMANCE_MATCHING=${CONFORMANCE_MATCHING:-both}
# the guest is emulated (TCG): several times slower than the host
export CONFORMANCE_TIMEOUT=${CONFORMANCE_TIMEOUT:-600}
fi_info -p "verbs;ofi_rxm" -t FI_EP_RDM | head -4
exe=$1; shift
echo "== uptime at start: $(cut -d' ' -f1 /proc/uptime)"
"$exe" "$@"
rc=$?
if [ $# -eq 0 ]; then
    env -u CONFORMANCE_JOBS_ONLY -u CONFORMANCE_MATCHING "$exe" soak_short || rc=1
    # the libfabric transport's own close test (transport-ofi/tests/close.rs) over
    # verbs;ofi_rxm, when .ci/run passes it
    if [ -n "${OFI_CLOSE_TEST:-}" ]; then
        RSMPI_VERBS_TEST=1 "$OFI_CLOSE_TEST" --exact close_waits_for_every_peer_verbs || rc=1
    fi
fi
echo "== uptime at end: $(cut -d' ' -f1 /proc/uptime)"
exit $rc

#!/bin/bash
# Runs inside the SoftRoCE guest (ci/softroce-vm.sh): the conformance suite's job
# cases, both matching modes, with every rank on libfabric's verbs;ofi_rxm over rxe0.
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
# (ci/guest-verbs.sh). The soak was left out here after it crashed inside libfabric
# (a segfault in the provider, receiver matching, 3 ranks; where in the job was not
# recorded); since MPI_Finalize closes the transport with a goodbye and a fence
# (docs/transports.md, "How it grew for teardown") it has passed every run (5 of 5)
export CONFORMANCE_JOBS_ONLY=1
# the guest is emulated (TCG): several times slower than the host
export CONFORMANCE_TIMEOUT=${CONFORMANCE_TIMEOUT:-600}
fi_info -p "verbs;ofi_rxm" -t FI_EP_RDM | head -4
exe=$1; shift
echo "== uptime at start: $(cut -d' ' -f1 /proc/uptime)"
"$exe" "$@"
rc=$?
if [ $# -eq 0 ]; then
    # libfabric 1.17's verbs provider still crashes now and then inside the provider
    # (SIGSEGV in libfabric.so, receiver matching, 4 ranks; seen once in a fresh-clone
    # run on 2026-11-27, after 5 clean runs): one more run then, announced, and its
    # result counts. A second failure fails CI.
    if ! env -u CONFORMANCE_JOBS_ONLY "$exe" soak_short; then
        echo "== soak_short over verbs;ofi_rxm failed; running it once more (known provider crash)"
        env -u CONFORMANCE_JOBS_ONLY "$exe" soak_short
    fi
fi
echo "== uptime at end: $(cut -d' ' -f1 /proc/uptime)"
exit $rc

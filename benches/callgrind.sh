#!/bin/sh
# Instructions per message on the software path, side by side: a loop of "post a
# receive from self, send to self, wait" (8 bytes) in rsmpi (examples/selfloop.rs) and
# in C on MPICH and Open MPI (reference/selfloop.c), each run as a singleton under
# valgrind's callgrind with N1 and N2 rounds; instructions per round =
# (I(N2) - I(N1)) / (N2 - N1), so start-up and shut-down cancel out. Instruction
# counts do not depend on the machine's noise. Needs valgrind; the C references need
# `sh benches/reference/install.sh` and are skipped when their compiler is missing.
#
#   sh benches/callgrind.sh [N1 N2]      (default 1000 11000)
set -eu
cd "$(dirname "$0")/.."
N1=${1:-1000}
N2=${2:-11000}
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

count() { # prints the instructions valgrind collected for "$@"
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$@" 2>&1 >/dev/null |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
per_round() { # name, command...
    name=$1; shift
    a=$(count "$@" "$N1"); b=$(count "$@" "$N2")
    echo "$name $(( (b - a) / (N2 - N1) ))"
}

cargo build --release --quiet -p rsmpi --example selfloop
printf '%-12s %s\n' implementation "instructions per receive+send+wait (8 B, self)"
per_round rsmpi target/release/examples/selfloop | awk '{printf "%-12s %s\n", $1, $2}'
if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -o "$out/selfloop-mpich" benches/reference/selfloop.c
    per_round mpich "$out/selfloop-mpich" | awk '{printf "%-12s %s\n", $1, $2}'
fi
if command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -O2 -o "$out/selfloop-ompi" benches/reference/selfloop.c
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
        per_round openmpi "$out/selfloop-ompi" | awk '{printf "%-12s %s\n", $1, $2}'
fi

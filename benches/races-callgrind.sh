#!/bin/sh
# What the message-race check costs per message, counted by valgrind's callgrind (so
# the figures do not depend on the machine's noise): the paper's Table 2 workload
# (conformance/src/bin/races.rs, `table2-N`: every rank but 0 sends rank 0 N 8-byte
# messages, which rank 0 receives with ANY_SOURCE), on three ranks over shared
# memory, unchecked and with RSMPI_CHECK=races, side by side.
#
# One rank of each job runs under callgrind, collecting inside the workload's function
# (`table2`) only: rank 0 (the receiver) or rank 1 (a sender). Per message =
# (I(N2) - I(N1)) / ((N2 - N1) * senders) for the receiver and (I(N2) - I(N1)) /
# (N2 - N1) for a sender, so start-up, the barrier and shut-down cancel out. The rank
# under valgrind runs ~50x slower than the others: the receiver takes most messages
# from the unexpected queue (its senders are ahead), as in the real workload, and a
# sender seldom waits for credits; when it does, its waiting polls only add, so each
# count is the lowest of REPEAT jobs.
#
#   sh benches/races-callgrind.sh [N1 N2]     (messages per sender, default 20000 120000)
#   REPEAT=2                                  (each count is the lowest of this many jobs)
#
# The race check's wall-time figures (`docs/tools.md`, race checker, "Cost") come
# from the same program without valgrind.
set -eu
cd "$(dirname "$0")/.."
N1=${1:-20000}
N2=${2:-120000}
REPEAT=${REPEAT:-2}
command -v valgrind >/dev/null || { echo "races-callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p conformance --bin races -p rsmpirun --bin rsmpirun
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# the ranks, one of them under callgrind (benches/callgrind-rank.sh)
rank="$PWD/benches/callgrind-rank.sh"
export CGDIR="$out" CGFN='*races*table2*'

collected() { # the instructions valgrind reports in its stderr, $1
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$1"
}
once() { # rank, messages per sender, check (off or races): instructions collected
    rm -f "$out/err$1"
    chk=
    [ "$3" = off ] || chk="RSMPI_CHECK=$3"
    # shellcheck disable=SC2086 # $chk: one assignment or none
    env -u RSMPI_CHECK $chk CGRANK="$1" target/release/rsmpirun -n 3 "$rank" \
        target/release/races "table2-$2" >/dev/null 2>&1 || true
    collected "$out/err$1"
}
run() { # as once, the lowest of REPEAT runs (a rank that waits spins, and only adds)
    low=""
    i=0
    while [ "$i" -lt "$REPEAT" ]; do
        c=$(once "$@")
        if [ -n "$c" ] && { [ -z "$low" ] || [ "$c" -lt "$low" ]; }; then low=$c; fi
        i=$((i + 1))
    done
    echo "$low"
}
per_msg() { # rank, check, senders per message: instructions per message ("-": none
            # collected)
    a=$(run "$1" "$N1" "$2"); b=$(run "$1" "$N2" "$2")
    if [ -n "$a" ] && [ -n "$b" ]; then
        echo $(( (b - a) / ((N2 - N1) * $3) ))
    else
        echo -
    fi
}

echo "Table 2 on 3 ranks (2 senders), $N1 and $N2 messages per sender:"
printf '%-10s %12s %12s\n' check "receiver" "sender"
printf '%-10s %12s %12s\n' "" "instr/msg" "instr/msg"
for c in off races; do
    printf '%-10s %12s %12s\n' "$c" "$(per_msg 0 "$c" 2)" "$(per_msg 1 "$c" 1)"
done

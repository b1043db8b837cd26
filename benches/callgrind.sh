#!/bin/sh
# Instructions per message on the software path, counted by valgrind's callgrind (so
# the figures do not depend on the machine's noise), for rsmpi and for the same loops
# in C on MPICH and Open MPI, side by side:
#
# * self: a loop of "post a receive from self, send 8 bytes to self, wait", run as a
#   singleton (examples/selfloop.rs, reference/selfloop.c). Instructions per round =
#   (I(N2) - I(N1)) / (N2 - N1), so start-up and shut-down cancel out. Both C MPIs
#   have a dedicated path for messages to self (MPICH ch4's self path, Open MPI's
#   `self` BTL), and so does rsmpi (protocol rule 17: a send to itself goes straight
#   into a posted receive that takes it).
# * pair: two ranks on shared memory. Rank 0 posts a receive, sends 8 bytes to rank 1,
#   sleeps 5 ms so that the reply is there, and waits (examples/pairloop.rs,
#   reference/pairloop.c); only rank 0 runs under callgrind, collecting inside the
#   loop's function only. Waiting never spins when the reply is already there, so a
#   round is one pre-posted receive, one send and one completion; the cost of the
#   sleep (measured alone) is subtracted. A C MPI still spins now and then when its
#   peer is late (valgrind slows rank 0 down ~50x), so each figure is the lowest of
#   REPEAT runs.
# * answer: two ranks on shared memory. Rank 1 naps 2 ms so that rank 0's 8-byte
#   message is there, then receives it and sends 8 bytes back with the blocking calls
#   (examples/answerloop.rs, reference/answerloop.c): what each rank of a ping-pong
#   (`rsmpi-bench latency`) runs between a message's arrival and its answer, plus the
#   posting of the receive. Only rank 1 runs under callgrind, collecting in the
#   function `answer`; per round = (I(AN2) - I(AN1)) / (AN2 - AN1). The receive finds
#   its message, so nothing spins.
# * window send / window recv: the message-rate loop (`rsmpi-bench bw`) cut into its
#   two sides, per message of 1 byte (examples/bwloop.rs, reference/bwloop.c): rank 0
#   sends windows of 64 immediate sends and waits on them (one wait_all / MPI_Waitall
#   per window, as OSU's loop); rank 1 posts 64 receives, tells rank 0, sleeps 5 ms so
#   that all 64 messages arrive, and waits on them (one wait_all / MPI_Waitall). Both
#   ranks run under callgrind, each collecting in its own side's function; per message
#   = (I(WN2) - I(WN1)) / ((WN2 - WN1) * 64). The message rate is the slower side's.
# * idle test: two ranks on shared memory. Rank 0 tests a pending receive from rank 1
#   while rank 1 sleeps (examples/idlepoll.rs, reference/idlepoll.c): one visit of the
#   progress engine that finds nothing, which a waiting rank repeats until its message
#   comes. Only rank 0 runs under callgrind, collecting in the function `tests`; per
#   test = (I(IN2) - I(IN1)) / (IN2 - IN1).
#
# * barrier / allreduce: two ranks on shared memory run barriers, or all-reduces of one
#   double (sum), in a loop (examples/collloop.rs, reference/collloop.c); only rank 0
#   runs under callgrind, collecting in the loop's function `rounds`; per call =
#   (I(CN2) - I(CN1)) / (CN2 - CN1), each count the lowest of AREPEAT jobs. Rank 1,
#   not slowed down, is always ahead, so rank 0 mostly finds its peer's message there.
#
# Needs valgrind; the C references need `sh benches/reference/install.sh` and are
# skipped when their compiler is missing.
#
#   sh benches/callgrind.sh [N1 N2]      (self rounds, default 1000 11000)
#   PAIR_ROUNDS=300 REPEAT=5             (the pair loop's rounds and runs)
#   AN1=200 AN2=1200 AREPEAT=3           (the answer loop's rounds, and the runs
#                                         each count is the lowest of)
#   WN1=20 WN2=120                       (the window loop's windows)
#   IN1=1000 IN2=11000                   (the idle loop's tests)
#   CN1=500 CN2=3000                     (the collective loops' calls)
#   TOOLS_OUT=0                          (skip the row "tools out": rsmpi built with
#                                         RUSTFLAGS="--cfg rsmpi_tools_out", the
#                                         built-in tools compiled out, in
#                                         target/tools-out; the difference from the
#                                         row "rsmpi" is what the tools cost when off)
set -eu
cd "$(dirname "$0")/.."
N1=${1:-1000}
N2=${2:-11000}
PR=${PAIR_ROUNDS:-300}
REPEAT=${REPEAT:-5}
AN1=${AN1:-200}
AN2=${AN2:-1200}
AREPEAT=${AREPEAT:-3}
WN1=${WN1:-20}
WN2=${WN2:-120}
IN1=${IN1:-1000}
IN2=${IN2:-11000}
CN1=${CN1:-500}
CN2=${CN2:-3000}
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

collected() { # the instructions valgrind reports in $1 (its stderr)
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$1"
}
count() { # prints the instructions valgrind collected for "$@"
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$@" 2>"$out/err" >/dev/null
    collected "$out/err"
}
per_round() { # name, command...: the self loop
    name=$1; shift
    a=$(count "$@" "$N1"); b=$(count "$@" "$N2")
    echo "$(( (b - a) / (N2 - N1) ))"
}

# Rank $CGRANK (0 unless set) of a job under callgrind, collecting inside function
# $CGFN only; the other ranks natively (benches/callgrind-rank.sh).
rank="$PWD/benches/callgrind-rank.sh"
export CGDIR="$out"

# Both ranks of a job under callgrind: rank 0 collecting in send_window, rank 1 in
# recv_window (both names are in rsmpi's example and in the C loop).
cat >"$out/sides.sh" <<'EOF2'
#!/bin/sh
r=${RSMPI_RANK:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}}
if [ "$r" = 0 ]; then fn='*send_window*'; else fn='*recv_window*'; fi
exec valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$fn" \
    --callgrind-out-file="$CGDIR/cgw$r" "$@" 2>"$CGDIR/errw$r"
EOF2
chmod +x "$out/sides.sh"
sides() { # program, launcher...: "send recv" instructions per message of the window loop
    prog=$1; shift
    for w in "$WN1" "$WN2"; do
        rm -f "$out/errw0" "$out/errw1"
        "$@" "$out/sides.sh" "$prog" "$w" 1 >/dev/null 2>&1 || true
        eval "s$w=\$(collected \"\$out/errw0\" 2>/dev/null || true)"
        eval "r$w=\$(collected \"\$out/errw1\" 2>/dev/null || true)"
    done
    eval "a=\$s$WN1 b=\$s$WN2 c=\$r$WN1 d=\$r$WN2"
    if [ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] && [ -n "$d" ]; then
        m=$(( (WN2 - WN1) * 64 ))
        echo "$(( (b - a) / m )) $(( (d - c) / m ))"
    else
        echo "- -"
    fi
}

lowest() { # runs, rank, launcher... (ending in the rank script, program, args): the
           # lowest count collected by rank's callgrind over that many jobs (a C
           # MPI's wait still spins now and then under valgrind, which only adds
           # instructions), empty if none
    runs=$1; r=$2; shift 2
    low=""
    i=0
    while [ "$i" -lt "$runs" ]; do
        rm -f "$out/err$r"
        "$@" >/dev/null 2>&1 || true
        c=$(collected "$out/err$r" 2>/dev/null || true)
        if [ -n "$c" ] && { [ -z "$low" ] || [ "$c" -lt "$low" ]; }; then low=$c; fi
        i=$((i + 1))
    done
    echo "$low"
}

between() { # fn, rank, runs, n1, n2, program, launcher...: instructions per unit of
            # rank's function between n1 and n2 units, each count the lowest of runs
            # jobs; "-" if a job collected nothing
    bfn=$1; brank=$2; bruns=$3; bn1=$4; bn2=$5; bprog=$6; shift 6
    export CGFN="$bfn" CGRANK="$brank"
    # shellcheck disable=SC2086
    ba=$(lowest "$bruns" "$brank" "$@" "$rank" "$bprog" "$bn1" ${BTAIL:-})
    # shellcheck disable=SC2086
    bb=$(lowest "$bruns" "$brank" "$@" "$rank" "$bprog" "$bn2" ${BTAIL:-})
    if [ -n "$ba" ] && [ -n "$bb" ]; then
        echo "$(( (bb - ba) / (bn2 - bn1) ))"
    else
        echo "-"
    fi
}

answer() { # fn, program, launcher...: instructions per round of the answer loop
           # (rank 1), each count the lowest of AREPEAT jobs
    fn=$1; prog=$2; shift 2
    between "$fn" 1 "$AREPEAT" "$AN1" "$AN2" "$prog" "$@"
}

idle() { # fn, program, launcher...: instructions per idle test (rank 0)
    fn=$1; prog=$2; shift 2
    between "$fn" 0 1 "$IN1" "$IN2" "$prog" "$@"
}

colls() { # fn, program, launcher...: "barrier allreduce" instructions per call (rank 0)
    fn=$1; prog=$2; shift 2
    BTAIL=barrier
    cb=$(between "$fn" 0 "$AREPEAT" "$CN1" "$CN2" "$prog" "$@")
    BTAIL=
    ca=$(between "$fn" 0 "$AREPEAT" "$CN1" "$CN2" "$prog" "$@")
    echo "$cb $ca"
}

naps() { # fn, program: instructions of PR sleeps alone
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$1" \
        --callgrind-out-file="$out/cgn" "$2" "$PR" sleep 2>"$out/errn" >/dev/null
    collected "$out/errn"
}
pair() { # loop fn, sleep fn, program, launcher...: lowest instructions per round over
         # REPEAT jobs, the sleeps' cost subtracted
    fn=$1; napfn=$2; prog=$3; shift 3
    export CGFN="$fn" CGRANK=0
    best=$(lowest "$REPEAT" 0 "$@" "$rank" "$prog" "$PR")
    [ -n "$best" ] || { echo "-"; return; }
    echo "$(( (best - $(naps "$napfn" "$prog")) / PR ))"
}

cargo build --release --quiet -p rsmpi --example selfloop --example pairloop --example bwloop \
    --example answerloop --example idlepoll --example collloop -p rsmpirun --bin rsmpirun
row() { printf '%-12s %12s %12s %12s %12s %12s %12s %12s %12s\n' "$@"; }
row implementation "self (8 B)" "pair (8 B)" "answer (8 B)" "window send" "window recv" "idle test" "barrier" "allreduce"
row "" "instr/round" "instr/round" "instr/round" "instr/msg" "instr/msg" "instr/test" "instr/call" "instr/call"
rs_self=$(per_round rsmpi target/release/examples/selfloop)
rs_pair=$(pair '*pairloop*rounds*' '*pairloop*naps*' target/release/examples/pairloop target/release/rsmpirun -n 2 --timeout 300)
rs_ans=$(answer answerloop::answer target/release/examples/answerloop target/release/rsmpirun -n 2 --timeout 300)
rs_win=$(sides target/release/examples/bwloop target/release/rsmpirun -n 2 --timeout 300)
rs_idle=$(idle '*idlepoll*tests*' target/release/examples/idlepoll target/release/rsmpirun -n 2 --timeout 300)
rs_coll=$(colls '*collloop*rounds*' target/release/examples/collloop target/release/rsmpirun -n 2 --timeout 300)
# shellcheck disable=SC2086
row rsmpi "$rs_self" "$rs_pair" "$rs_ans" $rs_win "$rs_idle" $rs_coll
if [ "${TOOLS_OUT:-1}" = 1 ]; then
    # the same loops with the built-in tools compiled out: the difference from the row
    # above is what the tools cost when they are off (issue 14's target: nothing)
    t=target/tools-out
    CARGO_TARGET_DIR=$t RUSTFLAGS="--cfg rsmpi_tools_out" cargo build --release --quiet \
        -p rsmpi --example selfloop --example pairloop --example bwloop --example answerloop \
        --example idlepoll --example collloop
    o_self=$(per_round rsmpi-out $t/release/examples/selfloop)
    o_pair=$(pair '*pairloop*rounds*' '*pairloop*naps*' $t/release/examples/pairloop target/release/rsmpirun -n 2 --timeout 300)
    o_ans=$(answer answerloop::answer $t/release/examples/answerloop target/release/rsmpirun -n 2 --timeout 300)
    o_win=$(sides $t/release/examples/bwloop target/release/rsmpirun -n 2 --timeout 300)
    o_idle=$(idle '*idlepoll*tests*' $t/release/examples/idlepoll target/release/rsmpirun -n 2 --timeout 300)
    o_coll=$(colls '*collloop*rounds*' $t/release/examples/collloop target/release/rsmpirun -n 2 --timeout 300)
    # shellcheck disable=SC2086
    row "tools out" "$o_self" "$o_pair" "$o_ans" $o_win "$o_idle" $o_coll
fi
if command -v mpicc.mpich >/dev/null; then
    for l in selfloop pairloop bwloop answerloop idlepoll collloop; do
        mpicc.mpich -O2 -o "$out/$l-mpich" "benches/reference/$l.c"
    done
    s=$(per_round mpich "$out/selfloop-mpich")
    p=$(pair rounds naps "$out/pairloop-mpich" timeout 300 mpirun.mpich -n 2)
    a=$(answer answer "$out/answerloop-mpich" timeout 300 mpirun.mpich -n 2)
    w=$(sides "$out/bwloop-mpich" timeout 300 mpirun.mpich -n 2)
    i=$(idle tests "$out/idlepoll-mpich" timeout 300 mpirun.mpich -n 2)
    c=$(colls rounds "$out/collloop-mpich" timeout 300 mpirun.mpich -n 2)
    # shellcheck disable=SC2086
    row mpich "$s" "$p" "$a" $w "$i" $c
fi
if command -v mpicc.openmpi >/dev/null; then
    for l in selfloop pairloop bwloop answerloop idlepoll collloop; do
        mpicc.openmpi -O2 -o "$out/$l-ompi" "benches/reference/$l.c"
    done
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
    s=$(per_round openmpi "$out/selfloop-ompi")
    p=$(pair rounds naps "$out/pairloop-ompi" timeout 300 mpirun.openmpi -n 2 -x CGFN -x CGRANK -x CGDIR)
    a=$(answer answer "$out/answerloop-ompi" timeout 300 mpirun.openmpi -n 2 -x CGFN -x CGRANK -x CGDIR)
    w=$(sides "$out/bwloop-ompi" timeout 300 mpirun.openmpi -n 2 -x CGDIR)
    i=$(idle tests "$out/idlepoll-ompi" timeout 300 mpirun.openmpi -n 2 -x CGFN -x CGRANK -x CGDIR)
    c=$(colls rounds "$out/collloop-ompi" timeout 300 mpirun.openmpi -n 2 -x CGFN -x CGRANK -x CGDIR)
    # shellcheck disable=SC2086
    row openmpi "$s" "$p" "$a" $w "$i" $c
fi

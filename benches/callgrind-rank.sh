#!/bin/sh
# One rank of a job under valgrind's callgrind, the others natively: used by
# benches/callgrind.sh and benches/races-callgrind.sh as the program that a launcher
# starts, followed by the real program and its arguments. Rank $CGRANK (0 unless set)
# runs under callgrind, collecting inside the functions matching $CGFN only, and
# writes $CGDIR/cg<rank> and its valgrind output (with the "Collected" count) to
# $CGDIR/err<rank>. The rank comes from whichever launcher started us.
r=${RSMPI_RANK:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}}
if [ "$r" = "${CGRANK:-0}" ]; then
    exec valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$CGFN" \
        --callgrind-out-file="$CGDIR/cg$r" "$@" 2>"$CGDIR/err$r"
fi
exec "$@"

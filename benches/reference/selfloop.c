/* The per-message software path of a C MPI, for instruction counts: one rank posts a
 * receive from itself, sends to itself and waits, N times (argv[1], default 1000) --
 * the same loop as rsmpi's examples/selfloop.rs. Run as a singleton under callgrind by
 * benches/callgrind.sh. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    char sbuf[8], rbuf[8];
    MPI_Request r;
    MPI_Init(&argc, &argv);
    memset(sbuf, 7, sizeof sbuf);
    for (int i = 0; i < n; i++) {
        MPI_Irecv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &r);
        MPI_Send(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return memcmp(sbuf, rbuf, sizeof sbuf) != 0;
}

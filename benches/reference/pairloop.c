/* The per-message software path of a C MPI between two ranks, for instruction counts:
 * the same loop as rsmpi's examples/pairloop.rs. Rank 0 posts a receive, sends 8
 * bytes, sleeps 5 ms so that the reply is there, then waits; rank 1 answers. argv[1]
 * = rounds (default 1000); argv[2] = "sleep": the sleeps only, without MPI. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void nap(void) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
}

/* The sleeps alone (callgrind --toggle-collect=naps). */
__attribute__((noinline)) void naps(int n) {
    for (int i = 0; i < n; i++)
        nap();
}

/* The measured loop (callgrind --toggle-collect=rounds). */
__attribute__((noinline)) void rounds(int rank, int n, char *sbuf, char *rbuf) {
    MPI_Request r;
    for (int i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Irecv(rbuf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &r);
            MPI_Send(sbuf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            nap();
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    if (argc > 2 && strcmp(argv[2], "sleep") == 0) {
        naps(n);
        return 0;
    }
    char sbuf[8], rbuf[8];
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    memset(sbuf, 7, sizeof sbuf);
    rounds(rank, n, sbuf, rbuf);
    MPI_Finalize();
    return memcmp(sbuf, rbuf, sizeof sbuf) != 0;
}

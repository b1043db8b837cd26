/* `rsmpi-bench bw`'s loop (OSU's) timed in its three phases on each rank, in C for
 * Open MPI and MPICH: the same loop and output as rsmpi's examples/bwphases.rs.
 * argv[1] = windows (default 3000), argv[2] = message size in bytes (default 8). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 64

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3000;
    int size = argc > 2 ? atoi(argv[2]) : 8;
    int me;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    char *sbuf = malloc(size + 1), *rbufs = calloc(WINDOW, size + 1);
    memset(sbuf, 7, size);
    char ack[4] = {0};
    MPI_Request r[WINDOW];
    MPI_Status st[WINDOW];
    double start = 0, wait = 0, acked = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        double t = now_ns();
        for (int j = 0; j < WINDOW; j++) {
            if (me == 1)
                MPI_Irecv(rbufs + (size_t)j * size, size, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &r[j]);
            else
                MPI_Isend(sbuf, size, MPI_BYTE, 1, 100, MPI_COMM_WORLD, &r[j]);
        }
        double posted = now_ns();
        MPI_Waitall(WINDOW, r, st);
        double waited = now_ns();
        if (me == 1)
            MPI_Send(ack, 4, MPI_BYTE, 0, 101, MPI_COMM_WORLD);
        else
            MPI_Recv(ack, 4, MPI_BYTE, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        start += posted - t;
        wait += waited - posted;
        acked += now_ns() - waited;
    }
    double m = (double)n * WINDOW, total = now_ns() - t0;
    int bad = 0;
    if (me == 1)
        for (int i = 0; i < WINDOW * size; i++)
            bad |= rbufs[i] != 7;
    printf("rank %d (%s): start %.1f wait %.1f ack %.1f total %.1f ns per message\n", me,
           me == 1 ? "receiver" : "sender", start / m, wait / m, acked / m, total / m);
    MPI_Finalize();
    return bad;
}

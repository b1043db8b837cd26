/* What one idle poll costs in a C MPI, for instruction counts: the same loop as
 * rsmpi's examples/idlepoll.rs. Rank 0 posts a receive from rank 1 and tests it
 * argv[1] times (default 100000) while rank 1 sleeps, then prints the time per test;
 * rank 1 sleeps without calling MPI, then sends. Each MPI_Test is one visit of the
 * progress engine that finds nothing (callgrind --toggle-collect=tests). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* The measured loop: n tests of a receive that does not complete. Returns 1 if it
 * completed. */
__attribute__((noinline)) int tests(MPI_Request *r, long n) {
    int flag = 0;
    for (long i = 0; i < n; i++) {
        MPI_Test(r, &flag, MPI_STATUS_IGNORE);
        if (flag)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int rank;
    char buf[8] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        MPI_Request r;
        /* both ranks set up; rank 1 sleeps until rank 0's second message */
        MPI_Send(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Irecv(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &r);
        double t = now_ns();
        if (tests(&r, n)) {
            fprintf(stderr, "the message came while testing: raise the sleep\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        double dt = now_ns() - t;
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        printf("%.1f ns per idle test (%ld tests)\n", dt / n, n);
    } else {
        MPI_Recv(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        /* long enough for rank 0's tests under valgrind */
        long us = n * 200 + 2000000;
        struct timespec nap = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&nap, NULL);
        MPI_Send(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}

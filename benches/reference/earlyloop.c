/* Messages that arrive before their receives, in a C MPI: the same program as rsmpi's
 * examples/earlyloop.rs. In each round rank 0 starts 16 immediate sends of SIZE bytes
 * and enters a barrier; rank 1 enters it, sleeps 200 us so that the messages are
 * there (or, above the C MPI's eager limit, their rendezvous requests), and then times
 * taking them: a probe that finds nothing, and 16 blocking receives. Rank 0 then waits
 * on its sends. Prints the mean and median time per message over the rounds after the
 * first 10. argv[1] = SIZE (default 8192), argv[2] = rounds (default 200).
 *
 *   mpicc.mpich -O2 -o /tmp/earlyloop benches/reference/earlyloop.c
 *   mpirun.mpich -n 2 /tmp/earlyloop 16384 400 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define W 16
#define SKIP 10

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (me == 0) fprintf(stderr, "earlyloop runs on 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long size = argc > 1 ? atol(argv[1]) : 8192;
    int rounds = argc > 2 ? atoi(argv[2]) : 200;
    if (rounds < SKIP + 1) rounds = SKIP + 1;
    char *sbuf = malloc(size + 1), *rbuf = malloc(size + 1);
    double *per_msg = malloc(sizeof(double) * rounds);
    int kept = 0;
    memset(sbuf, 7, size);
    for (int r = 0; r < rounds; r++) {
        if (me == 0) {
            MPI_Request q[W];
            MPI_Status st[W];
            for (int i = 0; i < W; i++)
                MPI_Isend(sbuf, (int)size, MPI_CHAR, 1, 5, MPI_COMM_WORLD, &q[i]);
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Waitall(W, q, st);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
            usleep(200);
            int flag;
            double t0 = now_us();
            MPI_Iprobe(0, 99, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            for (int i = 0; i < W; i++)
                MPI_Recv(rbuf, (int)size, MPI_CHAR, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double dt = (now_us() - t0) / W;
            for (long i = 0; i < size; i++)
                if (rbuf[i] != 7) {
                    fprintf(stderr, "earlyloop: payload corrupted\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            if (r >= SKIP) per_msg[kept++] = dt;
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (me == 1) {
        double sum = 0;
        for (int i = 0; i < kept; i++) sum += per_msg[i];
        qsort(per_msg, kept, sizeof(double), cmp);
        printf("%ld B: %.3f us/msg mean, %.3f median\n", size, sum / kept, per_msg[kept / 2]);
    }
    free(sbuf);
    free(rbuf);
    free(per_msg);
    MPI_Finalize();
    return 0;
}

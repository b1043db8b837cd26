/* The path from a message's arrival to the answer in a C MPI, for instruction counts:
 * the same loop as rsmpi's examples/answerloop.rs. Rank 1 naps 2 ms so that rank 0's
 * 8-byte message is there, then receives it and sends 8 bytes back (answer); rank 0
 * sends and waits for each answer. argv[1] = rounds (default 1000). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The measured call pair (callgrind --toggle-collect=answer). */
__attribute__((noinline)) void answer(char *rbuf, char *sbuf) {
    MPI_Recv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    char sbuf[8], rbuf[8];
    int rank;
    struct timespec nap = {0, 2000000};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    memset(sbuf, 7, sizeof sbuf);
    for (int i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Send(sbuf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            nanosleep(&nap, NULL);
            answer(rbuf, sbuf);
        }
    }
    MPI_Finalize();
    return memcmp(sbuf, rbuf, sizeof sbuf) != 0;
}

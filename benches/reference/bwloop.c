/* The message-rate loop of a C MPI cut into its two sides, for instruction counts: the
 * same loop as rsmpi's examples/bwloop.rs. Rank 1 posts a window of 64 receives, tells
 * rank 0, sleeps 5 ms so that all 64 messages are there, and waits on them; rank 0
 * waits for the word, then sends the window (64 immediate sends, then a wait on all).
 * argv[1] = windows (default 100), argv[2] = message size in bytes (default 1),
 * argv[3] = "timed": no nap (rank 1 waits while rank 0 sends), and each rank prints
 * the time per message of its side (rank 0: its sends; rank 1: its waits), as rsmpi's
 * `bwloop N SIZE timed` does. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int timed;
static double spent;

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

#define WINDOW 64

/* Rank 0's side (callgrind --toggle-collect=send_window). */
__attribute__((noinline)) void send_window(char *sbuf, int size) {
    MPI_Request r[WINDOW];
    MPI_Status st[WINDOW];
    for (int i = 0; i < WINDOW; i++)
        MPI_Isend(sbuf, size, MPI_BYTE, 1, 100, MPI_COMM_WORLD, &r[i]);
    MPI_Waitall(WINDOW, r, st);
}

/* Rank 1's side (callgrind --toggle-collect=recv_window). */
__attribute__((noinline)) void recv_window(char *rbufs, int size) {
    MPI_Request r[WINDOW];
    MPI_Status st[WINDOW];
    char word[4] = {0};
    for (int i = 0; i < WINDOW; i++)
        MPI_Irecv(rbufs + (size_t)i * size, size, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &r[i]);
    MPI_Send(word, 4, MPI_BYTE, 0, 101, MPI_COMM_WORLD);
    if (!timed) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    /* the clock only when timed: the callgrind runs count this function */
    double t = timed ? now_ns() : 0;
    MPI_Waitall(WINDOW, r, st);
    if (timed)
        spent += now_ns() - t;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int size = argc > 2 ? atoi(argv[2]) : 1;
    timed = argc > 3 && !strcmp(argv[3], "timed");
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *sbuf = malloc(size + 1), *rbufs = calloc(WINDOW, size + 1);
    memset(sbuf, 7, size);
    char word[4];
    for (int i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Recv(word, 4, MPI_BYTE, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double t = now_ns();
            send_window(sbuf, size);
            spent += now_ns() - t;
        } else {
            recv_window(rbufs, size);
        }
    }
    if (timed)
        printf("rank %d: %s %.1f ns per message\n", rank, rank == 0 ? "sends" : "waits",
               spent / ((double)n * WINDOW));
    int bad = 0;
    if (rank == 1)
        for (int i = 0; i < WINDOW * size; i++)
            bad |= rbufs[i] != 7;
    MPI_Finalize();
    return bad;
}

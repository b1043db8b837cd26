/* The C twin of rsmpi-core/examples/collloop.rs for benches/callgrind.sh: `collloop N
 * [barrier]` runs N all-reduces of one double (sum), or N barriers, on MPI_COMM_WORLD
 * in the function `rounds`. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static double rounds(int n, int barrier)
{
    double x = 0.0;
    for (int i = 0; i < n; i++) {
        if (barrier) {
            MPI_Barrier(MPI_COMM_WORLD);
        } else {
            double v = i;
            MPI_Allreduce(&v, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    return x;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    int barrier = argc > 2 && strcmp(argv[2], "barrier") == 0;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double x = rounds(n, barrier);
    if (!barrier && x != (double)(n - 1) * size) {
        fprintf(stderr, "collloop: sum %f, expected %f\n", x, (double)(n - 1) * size);
        return 1;
    }
    MPI_Finalize();
    return 0;
}

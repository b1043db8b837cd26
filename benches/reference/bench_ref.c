/* The C reference of rsmpi-bench: the same methodology as benches/src/rank.rs
 * (OSU micro-benchmarks' warm-up and iteration counts, window of 64, sizes 0 B to
 * --max-size in powers of two), written against MPI so that Open MPI and MPICH can
 * be measured in the same run. Each rank pins itself to one CPU, as rsmpi-bench's
 * ranks do; receive windows use one buffer per outstanding receive, as the Rust side
 * must.
 *
 *   bench_ref latency|bw|bibw|pingpong-preposted [--quick] [--min-size B] [--max-size B]
 *   bench_ref mbw_mr [--quick] [--min-size B] [--max-size B]      (2P ranks: P pairs)
 *   bench_ref queue-depth [--quick]
 *   bench_ref allreduce|bcast|reduce|allgather|alltoall|barrier [--quick] [--min-size B] [--max-size B]
 *
 * Output (rank 0, stdout): one line per size, "size value..." where value is one-way
 * latency in us (latency), MB/s (bw, bibw), or "plain preposted post" in us
 * (pingpong-preposted), "latency post first" in us with N receives posted
 * (queue-depth, N in the size column: as queue_depth in benches/src/rank.rs),
 * "MB/s msg/s" summed over the pairs (mbw_mr: rank i < P
 * sends windows to rank i + P, as mbw_mr in benches/src/rank.rs), or "avg min max"
 * over the ranks of each rank's mean time per call in us (the collectives, as OSU's
 * osu_allreduce etc.: see coll() and `collective` in benches/src/rank.rs). Lines
 * starting with '#' are comments. The other point-to-point benchmarks need exactly 2
 * ranks, the collectives at least 2.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message buffer on a page boundary, as the OSU micro-benchmarks allocate theirs
 * (posix_memalign to the page size), so that two buffers' relative page offset is 0 in
 * every process and every MPI, not what the allocator made of it: on AMD Zen 3 a
 * destination 1-31 bytes past the source modulo 4 KiB makes every single-copy
 * transfer several times slower (docs/performance.md, "4 KiB aliasing"); as
 * benches/src/rank.rs's PageBuf. */
static void *msg_alloc(long n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n > 0 ? (size_t)n : 1) != 0) {
        perror("posix_memalign");
        exit(1);
    }
    return p;
}

#define WINDOW 64
#define LARGE 8192
#define PREPOST_BYTES (64L << 20)
#define BATCH_BYTES (8L << 20)

static int quick = 0;

static void lat_iters(long size, int *iters, int *skip) {
    if (size > LARGE) { *iters = quick ? 100 : 1000; *skip = quick ? 2 : 10; }
    else { *iters = quick ? 1000 : 10000; *skip = quick ? 10 : 100; }
}

static void bw_iters(long size, int *iters, int *skip) {
    if (size > LARGE) { *iters = quick ? 5 : 20; *skip = quick ? 1 : 2; }
    else { *iters = quick ? 20 : 100; *skip = quick ? 2 : 10; }
}

/* OSU's COLL_LOOP_SMALL/COLL_SKIP_SMALL up to 8 KiB, _LARGE above; quick: a tenth */
static void coll_iters(long size, int *iters, int *skip) {
    if (size > LARGE) { *iters = quick ? 10 : 100; *skip = quick ? 1 : 10; }
    else { *iters = quick ? 100 : 1000; *skip = quick ? 10 : 100; }
}

static int is_coll(const char *b) {
    return !strcmp(b, "allreduce") || !strcmp(b, "bcast") || !strcmp(b, "reduce") ||
           !strcmp(b, "allgather") || !strcmp(b, "alltoall") || !strcmp(b, "barrier");
}

/* One OSU collective benchmark: for each size (powers of two from 4 B; barrier: 0),
 * skip warm-up calls and iters timed ones, each preceded by an untimed barrier and
 * timed on its own; each rank's latency is its mean time per call; rank 0 prints the
 * average, minimum and maximum over the ranks. Float sums for the reductions, root 0,
 * size = each rank's block for allgather and alltoall. */
static int coll(const char *bench, int me, int n, long min, long max) {
    if (min < 4) min = 4;
    for (long size = 4; size <= max; size *= 2) {
        if (!strcmp(bench, "barrier")) size = 0;
        else if (size < min) continue;
        int iters, skip;
        coll_iters(size, &iters, &skip);
        int floats = (int)(size / 4);
        float *fsend = malloc(sizeof(float) * (floats ? floats : 1));
        float *frecv = malloc(sizeof(float) * (floats ? floats : 1));
        for (int i = 0; i < floats; i++) { fsend[i] = 1.0f; frecv[i] = 0.0f; }
        long bytes = !strcmp(bench, "alltoall") ? size * n : size;
        char *bsend = msg_alloc(bytes ? bytes : 1);
        char *brecv = msg_alloc(size > 0 ? size * n : 1);
        memset(bsend, 'c', bytes);
        memset(brecv, !strcmp(bench, "bcast") && me == 0 ? 'c' : 0, size * n);
        double timer = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters + skip; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (!strcmp(bench, "allreduce"))
                MPI_Allreduce(fsend, frecv, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else if (!strcmp(bench, "reduce"))
                MPI_Reduce(fsend, frecv, floats, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
            else if (!strcmp(bench, "bcast"))
                MPI_Bcast(brecv, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
            else if (!strcmp(bench, "allgather"))
                MPI_Allgather(bsend, (int)size, MPI_CHAR, brecv, (int)size, MPI_CHAR, MPI_COMM_WORLD);
            else if (!strcmp(bench, "alltoall"))
                MPI_Alltoall(bsend, (int)size, MPI_CHAR, brecv, (int)size, MPI_CHAR, MPI_COMM_WORLD);
            else
                MPI_Barrier(MPI_COMM_WORLD);
            double t1 = MPI_Wtime();
            if (i >= skip) timer += t1 - t0;
        }
        int bad = 0;
        if (!strcmp(bench, "allreduce") || (!strcmp(bench, "reduce") && me == 0))
            for (int i = 0; i < floats; i++) bad |= frecv[i] != (float)n;
        if (!strcmp(bench, "bcast"))
            for (long i = 0; i < size; i++) bad |= brecv[i] != 'c';
        if (!strcmp(bench, "allgather") || !strcmp(bench, "alltoall"))
            for (long i = 0; i < size * n; i++) bad |= brecv[i] != 'c';
        if (bad) {
            fprintf(stderr, "bench_ref: %s: wrong result on rank %d\n", bench, me);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        double lat = timer * 1e6 / iters, lmin, lmax, lsum;
        MPI_Reduce(&lat, &lmin, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&lat, &lmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&lat, &lsum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (me == 0) printf("%ld %.4f %.4f %.4f\n", size, lsum / n, lmin, lmax);
        fflush(stdout);
        free(fsend); free(frecv); free(bsend); free(brecv);
        MPI_Barrier(MPI_COMM_WORLD);
        if (size == 0) break;
    }
    return 0;
}

static long prepost_count(long size) {
    int iters, skip;
    lat_iters(size, &iters, &skip);
    long cap = size == 0 ? iters : PREPOST_BYTES / size;
    long n = iters;
    long lim = quick ? 500 : 2000;
    if (n > lim) n = lim;
    if (n > cap) n = cap;
    if (n < 8) n = 8;
    return n;
}

static void pin(int rank, int nranks) {
    cpu_set_t set, one;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    if (n == 0 || nranks > n) return;
    CPU_ZERO(&one);
    CPU_SET(cpus[rank % n], &one);
    sched_setaffinity(0, sizeof one, &one);
}

static double pingpong(int me, char *sbuf, char *rbuf, long size, int iters, int skip, int tag) {
    int peer = 1 - me;
    double t0 = 0;
    for (int i = 0; i < iters + skip; i++) {
        if (i == skip) t0 = MPI_Wtime();
        if (me == 0) {
            MPI_Send(sbuf, (int)size, MPI_CHAR, peer, tag, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int)size, MPI_CHAR, peer, tag, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
}

/* Pre-posted ping-pong of n round trips, receives posted in batches whose buffers
 * take at most BATCH_BYTES (all n at once for small messages), a barrier after each
 * posting, outside the timing: as preposted_loop in benches/src/rank.rs. */
static void preposted_loop(int me, long size, long n, double *lat, double *post) {
    int peer = 1 - me;
    long k = size > 0 ? BATCH_BYTES / size : n;
    if (k > n) k = n;
    if (k < 2) k = 2;
    char *sbuf = msg_alloc(size ? size : 1);
    char *bufs = msg_alloc(size > 0 ? size * k : 1);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * k);
    memset(sbuf, 'p', size);
    double t_loop = 0, t_post = 0;
    for (long done = 0; done < n;) {
        long m = n - done < k ? n - done : k;
        memset(bufs, 0xff, size * k); /* every page mapped before the timing */
        double t0 = MPI_Wtime();
        for (long i = 0; i < m; i++)
            MPI_Irecv(bufs + i * size, (int)size, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &reqs[i]);
        t_post += MPI_Wtime() - t0;
        MPI_Barrier(MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        for (long i = 0; i < m; i++) {
            if (me == 0) {
                MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
                MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
            } else {
                MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
            }
        }
        t_loop += MPI_Wtime() - t1;
        done += m;
    }
    *lat = t_loop * 1e6 / (2.0 * n);
    *post = t_post * 1e6 / n;
    free(sbuf);
    free(bufs);
    free(reqs);
}

/* Posts n receives from peer into the 4-byte buffers of idle, on tags 10000 + i that
 * never match, into reqs (allocated and written before the clock): the posting time
 * in us. */
static double post_each(int peer, char *idle, long n, MPI_Request *reqs) {
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++)
        MPI_Irecv(idle + 4 * i, 4, MPI_CHAR, peer, 10000 + (int)i, MPI_COMM_WORLD, &reqs[i]);
    return (MPI_Wtime() - t0) * 1e6;
}

static void cancel_all(long n, MPI_Request *reqs) {
    for (long i = 0; i < n; i++) MPI_Cancel(&reqs[i]);
    for (long i = 0; i < n; i++) {
        MPI_Status st;
        int cancelled = 0;
        MPI_Wait(&reqs[i], &st);
        MPI_Test_cancelled(&st, &cancelled);
        if (!cancelled) {
            fprintf(stderr, "bench_ref queue-depth: a non-matching receive matched\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

/* Queue depth: a 4-byte ping-pong with N receives posted that never match, N = 0, 16,
 * 256, 4096; the first burst of each N (posted and cancelled: in a process's first
 * one, the library's tables grow) timed apart from the second, which stays posted
 * through the ping-pong. As queue_depth in benches/src/rank.rs. */
static void queue_depth(int me) {
    static const long depths[] = {0, 16, 256, 4096};
    int peer = 1 - me;
    char sbuf[4] = {'q', 'q', 'q', 'q'}, rbuf[4];
    for (int d = 0; d < 4; d++) {
        long n = depths[d];
        char *idle = msg_alloc(4 * n + 4);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * (n + 1));
        memset(idle, 0, 4 * n + 4);
        memset(reqs, 0, sizeof(MPI_Request) * (n + 1));
        int iters, skip;
        lat_iters(4, &iters, &skip);
        MPI_Barrier(MPI_COMM_WORLD);
        double first = post_each(peer, idle, n, reqs);
        cancel_all(n, reqs);
        memset(reqs, 0, sizeof(MPI_Request) * (n + 1));
        double post = post_each(peer, idle, n, reqs);
        MPI_Barrier(MPI_COMM_WORLD);
        double lat = pingpong(me, sbuf, rbuf, 4, iters, skip, 1);
        cancel_all(n, reqs);
        if (me == 0) printf("%ld %.4f %.4f %.4f\n", n, lat, post, first);
        fflush(stdout);
        free(idle);
        free(reqs);
    }
}

/* osu_mbw_mr without the barrier between warm-up and timing: P pairs, rank i < P
 * sending windows to rank i + P, each window acknowledged; rank 0 prints the total
 * MB/s and messages/s of all pairs. As mbw_mr in benches/src/rank.rs. */
static void mbw_mr(int me, int n, long min, long max) {
    int p = n / 2;
    int sender = me < p, peer = sender ? me + p : me - p;
    for (long size = 0; size <= max; size = size ? size * 2 : 1) {
        if (size < min) continue;
        char *sbuf = msg_alloc(size ? size : 1);
        char *rbuf = msg_alloc(size > 0 ? size * WINDOW : 1);
        memset(sbuf, 'm', size);
        MPI_Request reqs[WINDOW];
        char ack[4] = {0};
        int iters, skip;
        bw_iters(size, &iters, &skip);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) t0 = MPI_Wtime();
            for (int w = 0; w < WINDOW; w++) {
                if (sender)
                    MPI_Isend(sbuf, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[w]);
                else
                    MPI_Irecv(rbuf + (long)w * size, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[w]);
            }
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            if (sender) MPI_Recv(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else MPI_Send(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        double msgs = (double)p * iters * WINDOW;
        if (me == 0) printf("%ld %.2f %.1f\n", size, msgs * size / t / 1e6, msgs / t);
        fflush(stdout);
        free(sbuf);
        free(rbuf);
    }
}

int main(int argc, char **argv) {
    const char *bench = argc > 1 ? argv[1] : "latency";
    long min = 0, max = 4L << 20;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max = atol(argv[++i]);
        else if (!strcmp(argv[i], "--min-size") && i + 1 < argc) min = atol(argv[++i]);
    }
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (is_coll(bench)) {
        if (n < 2) {
            if (me == 0) fprintf(stderr, "bench_ref %s needs at least 2 ranks\n", bench);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        pin(me, n);
        if (me == 0) printf("# bench_ref %s on %d ranks\n", bench, n);
        coll(bench, me, n, min, max);
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(bench, "mbw_mr")) {
        if (n < 2 || n % 2) {
            if (me == 0) fprintf(stderr, "bench_ref mbw_mr needs an even number of ranks\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        pin(me, n);
        if (me == 0) printf("# bench_ref mbw_mr, %d pair(s)\n", n / 2);
        mbw_mr(me, n, min, max);
        MPI_Finalize();
        return 0;
    }
    if (n != 2) {
        if (me == 0) fprintf(stderr, "bench_ref needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    pin(me, n);
    if (!strcmp(bench, "queue-depth")) {
        if (me == 0) printf("# bench_ref queue-depth\n");
        queue_depth(me);
        MPI_Finalize();
        return 0;
    }
    int peer = 1 - me;
    if (me == 0) printf("# bench_ref %s\n", bench);
    for (long size = 0; size <= max; size = size ? size * 2 : 1) {
        if (size < min) continue;
        char *sbuf = msg_alloc(size ? size : 1);
        char *rbuf = msg_alloc(size > 0 ? size * WINDOW : 1);
        memset(sbuf, 'a', size);
        int iters, skip;
        MPI_Barrier(MPI_COMM_WORLD);
        if (!strcmp(bench, "latency")) {
            lat_iters(size, &iters, &skip);
            double lat = pingpong(me, sbuf, rbuf, size, iters, skip, 1);
            if (me == 0) printf("%ld %.4f\n", size, lat);
        } else if (!strcmp(bench, "bw") || !strcmp(bench, "bibw")) {
            int bidir = !strcmp(bench, "bibw");
            MPI_Request reqs[2 * WINDOW];
            char ack[4] = {0};
            bw_iters(size, &iters, &skip);
            double t0 = 0;
            for (int i = 0; i < iters + skip; i++) {
                if (i == skip) t0 = MPI_Wtime();
                int k = 0;
                if (bidir || me == 1)
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Irecv(rbuf + (long)w * size, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k++]);
                if (bidir || me == 0)
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Isend(sbuf, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k++]);
                MPI_Waitall(k, reqs, MPI_STATUSES_IGNORE);
                if (!bidir) {
                    if (me == 0) MPI_Recv(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    else MPI_Send(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD);
                }
            }
            double t = MPI_Wtime() - t0;
            double bytes = (double)size * WINDOW * iters * (bidir ? 2 : 1);
            if (me == 0) printf("%ld %.2f\n", size, bytes / t / 1e6);
        } else if (!strcmp(bench, "pingpong-preposted")) {
            lat_iters(size, &iters, &skip);
            double plain = pingpong(me, sbuf, rbuf, size, iters, skip, 1);
            long np = prepost_count(size);
            double lat, post;
            preposted_loop(me, size, np, &lat, &post); /* warm-up: as many as timed */
            preposted_loop(me, size, np, &lat, &post);
            if (me == 0) printf("%ld %.4f %.4f %.4f\n", size, plain, lat, post);
        } else {
            if (me == 0) fprintf(stderr, "bench_ref: unknown benchmark %s\n", bench);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        fflush(stdout);
        free(sbuf);
        free(rbuf);
    }
    MPI_Finalize();
    return 0;
}

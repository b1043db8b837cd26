//! The collectives: each chooses an algorithm of [`algo`](crate::algo) by message and
//! communicator size, with the thresholds of [`tuning`](crate::tuning).

use crate::algo;
use crate::tuning::*;
use crate::Schedule;

/// `MPI_Barrier`: dissemination ([`algo::barrier_dissemination`]), 0-byte messages.
/// `bufs[0]` is empty; no result.
pub fn barrier(rank: u32, size: u32) -> Schedule {
    algo::barrier_dissemination(rank, size)
}

/// `MPI_Bcast` of `len` bytes (elements of `elem` bytes) from `root`. A binomial tree
/// ([`algo::bcast_binomial`]) when `len <` [`BCAST_SHORT_MSG`] or `size <`
/// [`BCAST_MIN_PROCS`]; otherwise scatter + ring allgather
/// ([`algo::bcast_scatter_ring`]). `bufs[0]`: `len` bytes, the data at the root
/// (ignored elsewhere, and written on every rank); result: `bufs[0]`, the data.
pub fn bcast(rank: u32, size: u32, root: u32, len: usize, elem: usize) -> Schedule {
    if len < BCAST_SHORT_MSG || (size as usize) < BCAST_MIN_PROCS {
        algo::bcast_binomial(rank, size, root, len)
    } else {
        algo::bcast_scatter_ring(rank, size, root, len, elem)
    }
}

/// `count >= pof2` and more than `short` bytes: the Rabenseifner condition.
fn rabenseifner_fits(size: u32, len: usize, elem: usize, short: usize) -> bool {
    assert!(elem > 0, "element size must be positive");
    len > short && len / elem >= pof2_floor(size.max(1) as usize)
}

/// `MPI_Reduce` of `len` bytes (elements of `elem` bytes) to `root`. Commutative
/// operations of more than [`REDUCE_SHORT_MSG`] bytes ([`REDUCE_SHORT_MSG_TWO_RANKS`]
/// on two ranks: never) with at least as many elements as the largest power of two ≤
/// `size`: Rabenseifner ([`algo::reduce_rabenseifner`]); otherwise a binomial tree
/// ([`algo::reduce_binomial`]; in rank order to rank 0 and then to the root for
/// non-commutative operations). `bufs[0]`: this rank's contribution; result: the
/// reduction at the root, nothing elsewhere.
pub fn reduce(
    rank: u32,
    size: u32,
    root: u32,
    len: usize,
    elem: usize,
    commutative: bool,
) -> Schedule {
    let short = if size == 2 {
        REDUCE_SHORT_MSG_TWO_RANKS
    } else {
        REDUCE_SHORT_MSG
    };
    if commutative && rabenseifner_fits(size, len, elem, short) {
        algo::reduce_rabenseifner(rank, size, root, len, elem)
    } else {
        algo::reduce_binomial(rank, size, root, len, elem, commutative)
    }
}

/// `MPI_Allreduce` of `len` bytes (elements of `elem` bytes). Commutative operations of
/// more than [`ALLREDUCE_SHORT_MSG`] bytes ([`ALLREDUCE_SHORT_MSG_TWO_RANKS`] on two
/// ranks) with at least as many elements as the largest power of two ≤ `size`:
/// Rabenseifner ([`algo::allreduce_rabenseifner`]); otherwise recursive doubling in
/// rank order ([`algo::allreduce_recursive_doubling`]). `bufs[0]`: this rank's
/// contribution; result: the reduction, on every rank.
pub fn allreduce(rank: u32, size: u32, len: usize, elem: usize, commutative: bool) -> Schedule {
    let short = if size == 2 {
        ALLREDUCE_SHORT_MSG_TWO_RANKS
    } else {
        ALLREDUCE_SHORT_MSG
    };
    if commutative && rabenseifner_fits(size, len, elem, short) {
        algo::allreduce_rabenseifner(rank, size, len, elem)
    } else {
        algo::allreduce_recursive_doubling(rank, size, len, elem, commutative)
    }
}

/// `MPI_Gather` of `len` bytes per rank: binomial tree ([`algo::gather_binomial`]).
/// `bufs[0]`: this rank's block; result at the root: `size * len` bytes, the blocks in
/// rank order; nothing elsewhere.
pub fn gather(rank: u32, size: u32, root: u32, len: usize) -> Schedule {
    algo::gather_binomial(rank, size, root, len)
}

/// `MPI_Gatherv` with `counts[i]` bytes from rank i: linear ([`algo::gatherv_linear`]).
/// `bufs[0]`: this rank's `counts[rank]` bytes; result at the root: the blocks
/// concatenated in rank order (the caller places them at its displacements); nothing
/// elsewhere.
pub fn gatherv(rank: u32, size: u32, root: u32, counts: &[usize]) -> Schedule {
    algo::gatherv_linear(rank, size, root, counts)
}

/// `MPI_Scatter` of `len` bytes per rank: binomial tree ([`algo::scatter_binomial`]).
/// `bufs[0]`: at the root `size * len` bytes, block i for rank i; empty elsewhere;
/// result: this rank's block.
pub fn scatter(rank: u32, size: u32, root: u32, len: usize) -> Schedule {
    algo::scatter_binomial(rank, size, root, len)
}

/// `MPI_Scatterv` with `counts[i]` bytes for rank i: linear ([`algo::scatterv_linear`]).
/// `bufs[0]`: at the root the blocks concatenated in rank order (the caller gathers them
/// from its displacements); empty elsewhere; result: this rank's block.
pub fn scatterv(rank: u32, size: u32, root: u32, counts: &[usize]) -> Schedule {
    algo::scatterv_linear(rank, size, root, counts)
}

/// `MPI_Allgather` of `len` bytes per rank. With `total = size * len`: recursive
/// doubling ([`algo::allgather_recursive_doubling`]) for power-of-two sizes when `total
/// <` [`ALLGATHER_LONG_MSG`]; Bruck ([`algo::allgather_bruck`]) for other sizes when
/// `total <` [`ALLGATHER_SHORT_MSG`]; a ring ([`algo::allgather_ring`]) otherwise.
/// `bufs[0]`: this rank's block; result: all blocks in rank order, on every rank.
pub fn allgather(rank: u32, size: u32, len: usize) -> Schedule {
    let n = size as usize;
    let total = n.saturating_mul(len);
    if n.is_power_of_two() && total < ALLGATHER_LONG_MSG {
        algo::allgather_recursive_doubling(rank, size, len)
    } else if !n.is_power_of_two() && total < ALLGATHER_SHORT_MSG {
        algo::allgather_bruck(rank, size, len)
    } else {
        algo::allgather_ring(rank, size, len)
    }
}

/// `MPI_Allgatherv` with `counts[i]` bytes from rank i: ring ([`algo::allgatherv_ring`]).
/// `bufs[0]`: this rank's block; result: all blocks concatenated in rank order.
pub fn allgatherv(rank: u32, size: u32, counts: &[usize]) -> Schedule {
    algo::allgatherv_ring(rank, size, counts)
}

/// `MPI_Alltoall` of `len` bytes per pair: Bruck ([`algo::alltoall_bruck`]) when `len
/// <=` [`ALLTOALL_SHORT_MSG`] and `size >=` [`ALLTOALL_MIN_PROCS`]; pairwise exchange
/// ([`algo::alltoall_pairwise`]) otherwise. `bufs[0]`: `size` blocks, block j for rank
/// j; result: `size` blocks, block i from rank i.
pub fn alltoall(rank: u32, size: u32, len: usize) -> Schedule {
    if len <= ALLTOALL_SHORT_MSG && size as usize >= ALLTOALL_MIN_PROCS {
        algo::alltoall_bruck(rank, size, len)
    } else {
        algo::alltoall_pairwise(rank, size, len)
    }
}

/// `MPI_Alltoallv`: pairwise exchange ([`algo::alltoallv_pairwise`]). `send_counts[j]`:
/// bytes for rank j; `recv_counts[i]`: bytes from rank i. `bufs[0]`: the send blocks
/// concatenated in destination order; result: the received blocks concatenated in
/// source order (displacements are the caller's).
pub fn alltoallv(rank: u32, size: u32, send_counts: &[usize], recv_counts: &[usize]) -> Schedule {
    algo::alltoallv_pairwise(rank, size, send_counts, recv_counts)
}

/// `MPI_Reduce_scatter` with `counts[i]` bytes (multiples of `elem`) for rank i.
/// Commutative operations on a power-of-two size: recursive halving
/// ([`algo::reduce_scatter_halving`]); otherwise a reduction to rank 0 in rank order and
/// a linear scatterv ([`algo::reduce_scatter_reduce_scatterv`]). `bufs[0]`: this rank's
/// contribution, `sum(counts)` bytes; result: this rank's reduced block.
pub fn reduce_scatter(
    rank: u32,
    size: u32,
    counts: &[usize],
    elem: usize,
    commutative: bool,
) -> Schedule {
    if commutative && (size as usize).is_power_of_two() {
        algo::reduce_scatter_halving(rank, size, counts, elem)
    } else {
        algo::reduce_scatter_reduce_scatterv(rank, size, counts, elem)
    }
}

/// `MPI_Reduce_scatter_block` with `len` bytes per rank: [`reduce_scatter`] with equal
/// counts. `bufs[0]`: `size * len` bytes; result: this rank's reduced block.
pub fn reduce_scatter_block(
    rank: u32,
    size: u32,
    len: usize,
    elem: usize,
    commutative: bool,
) -> Schedule {
    reduce_scatter(rank, size, &vec![len; size as usize], elem, commutative)
}

/// `MPI_Scan` (inclusive) of `len` bytes: recursive doubling in rank order
/// ([`algo::scan_recursive_doubling`]). `bufs[0]`: this rank's contribution; result:
/// `x_0 op ... op x_rank`.
pub fn scan(rank: u32, size: u32, len: usize) -> Schedule {
    algo::scan_recursive_doubling(rank, size, len)
}

/// `MPI_Exscan` of `len` bytes: recursive doubling in rank order
/// ([`algo::exscan_recursive_doubling`]). `bufs[0]`: this rank's contribution; result:
/// `x_0 op ... op x_{rank-1}`; none (length 0) on rank 0, where MPI leaves it undefined.
pub fn exscan(rank: u32, size: u32, len: usize) -> Schedule {
    algo::exscan_recursive_doubling(rank, size, len)
}

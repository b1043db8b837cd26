//! The thresholds that choose between algorithms, in one place. The values are MPICH's
//! defaults (its `MPIR_CVAR_*` control variables of the same meaning) unless stated.
//! "Bytes" is always the size of the whole message of one rank as named per constant.

/// [`bcast`](crate::bcast): below this many bytes, a binomial tree. MPICH
/// `BCAST_SHORT_MSG_SIZE`.
pub const BCAST_SHORT_MSG: usize = 12288;

/// [`bcast`](crate::bcast): with fewer ranks than this, always a binomial tree. MPICH
/// `BCAST_MIN_PROCS`.
pub const BCAST_MIN_PROCS: usize = 8;

/// [`reduce`](crate::reduce): commutative reductions of more than this many bytes (with
/// at least as many elements as the largest power of two ≤ size) use Rabenseifner's
/// reduce-scatter + gather. MPICH `REDUCE_SHORT_MSG_SIZE`.
pub const REDUCE_SHORT_MSG: usize = 2048;

/// [`allreduce`](crate::allreduce): commutative reductions of more than this many bytes
/// (with at least as many elements as the largest power of two ≤ size) use
/// Rabenseifner's algorithm; others recursive doubling. MPICH `ALLREDUCE_SHORT_MSG_SIZE`.
pub const ALLREDUCE_SHORT_MSG: usize = 2048;

/// [`allgather`](crate::allgather): below this many bytes in total (size × block),
/// Bruck's algorithm when the size is not a power of two. MPICH `ALLGATHER_SHORT_MSG_SIZE`.
pub const ALLGATHER_SHORT_MSG: usize = 81920;

/// [`allgather`](crate::allgather): below this many bytes in total (size × block),
/// recursive doubling when the size is a power of two; at or above it, and for
/// non-powers of two at or above [`ALLGATHER_SHORT_MSG`], a ring. MPICH
/// `ALLGATHER_LONG_MSG_SIZE`.
pub const ALLGATHER_LONG_MSG: usize = 524288;

/// [`alltoall`](crate::alltoall): blocks of at most this many bytes per pair, on at least
/// [`ALLTOALL_MIN_PROCS`] ranks, use Bruck's algorithm; others pairwise exchange. MPICH
/// `ALLTOALL_SHORT_MSG_SIZE`.
pub const ALLTOALL_SHORT_MSG: usize = 256;

/// [`alltoall`](crate::alltoall): Bruck's algorithm needs at least this many ranks.
/// MPICH `ALLTOALL_MIN_PROCS`.
pub const ALLTOALL_MIN_PROCS: usize = 8;

/// The largest power of two ≤ `n` (`n` ≥ 1).
pub(crate) fn pof2_floor(n: usize) -> usize {
    debug_assert!(n >= 1);
    1 << (usize::BITS - 1 - n.leading_zeros())
}

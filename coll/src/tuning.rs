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

/// [`reduce`](crate::reduce) on two ranks: Rabenseifner from more than this many bytes
/// (so never: no message is this large). On two ranks its reduce-scatter is an
/// exchange of halves, and the root waits for a second message, the peer's reduced
/// half, where the binomial tree sends one message of the whole; the half of the
/// reduction it saves the root never paid for the extra step at any size measured,
/// 4 KiB to 8 MiB over shared memory (the binomial tree in 0.16–0.75x the time;
/// measured, not MPICH's: `docs/performance.md`, "Collectives of 4 KiB–1 MiB on two
/// ranks").
pub const REDUCE_SHORT_MSG_TWO_RANKS: usize = usize::MAX;

/// [`allreduce`](crate::allreduce): commutative reductions of more than this many bytes
/// (with at least as many elements as the largest power of two ≤ size) use
/// Rabenseifner's algorithm; others recursive doubling. MPICH `ALLREDUCE_SHORT_MSG_SIZE`.
pub const ALLREDUCE_SHORT_MSG: usize = 2048;

/// [`allreduce`](crate::allreduce) on two ranks: Rabenseifner from more than this many
/// bytes. On two ranks it is two exchanges of halves against recursive doubling's one
/// exchange of the whole; over shared memory recursive doubling took 0.41–0.94x the
/// time from 4 KiB to 512 KiB, Rabenseifner was ahead at 1 MiB (0.9x), and the two
/// are level from 2 to 8 MiB (measured, not MPICH's: `docs/performance.md`,
/// "Collectives of 4 KiB–1 MiB on two ranks").
pub const ALLREDUCE_SHORT_MSG_TWO_RANKS: usize = 512 << 10;

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

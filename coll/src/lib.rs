//! The collective algorithms of rsmpi as **schedules**: pure functions of (rank, size,
//! root, sizes) that return the list of steps one rank executes. No I/O, threads, clock,
//! dependencies or `unsafe`; an executor in `rsmpi-core` runs a [`Schedule`] over real
//! point-to-point messages, and [`sim`] runs one schedule per rank in memory to prove
//! the algorithms (`tests/`).
//!
//! # The schedule model
//!
//! A [`Schedule`] owns a list of byte buffers, given by their sizes in
//! [`Schedule::bufs`]. The executor allocates them zero-initialised, except `bufs[0]`,
//! which it fills with this rank's input (what that is, and its size, is stated by each
//! function; it may be 0 bytes). The steps run in order:
//!
//! - [`Step::Send`] posts a nonblocking send of `bufs[buf][off..off+len]` to a
//!   communicator rank. The bytes are taken when the step is reached.
//! - [`Step::Recv`] posts a nonblocking receive of exactly `len` bytes from a rank into
//!   `bufs[buf][off..off+len]`; the data is in place at the next [`Step::Fence`].
//! - [`Step::Fence`] waits until every send and receive posted so far has completed.
//! - [`Step::Copy`] and [`Step::Reduce`] act on the buffers when reached. `Reduce`
//!   computes `dst = src (op) dst` in MPI's operand order: for a user function
//!   `f(invec, inoutvec)`, `invec` is the `src` range and `inoutvec` the `dst` range.
//!
//! At the end, this rank's output is `bufs[result.0][result.1..result.1 + result.2]`
//! ([`Schedule::result`]; length 0 when the rank has none).
//!
//! **Matching.** Every collective call uses one tag. Messages between an ordered pair of
//! ranks are FIFO, and a `Recv` from `p` takes the next message from `p`: the k-th `Send`
//! from `p` to `q` is received by `q`'s k-th `Recv` from `p`, and the lengths are equal.
//!
//! **Guarantees of every schedule built here** (checked by [`sim`] on every test):
//!
//! - it ends with everything complete (a final `Fence` after the last post);
//! - no rank sends to itself, and zero-length messages appear only in [`barrier`]
//!   (other algorithms skip empty pieces on both sides);
//! - it is deadlock-free even when a send completes only once the receiver has posted
//!   the matching receive (rendezvous), so buffered or not, eager or not, is all the same;
//! - no step reads or writes a range while a receive into it is pending, and no step
//!   writes a range while a send from it is pending (until the next `Fence`): an
//!   executor may let the received bytes land at any time before the `Fence` and may
//!   send straight from the buffer without copying;
//! - `bufs[0]` is never written except by [`bcast`] (where it is the user's buffer,
//!   input at the root and output everywhere), so the executor can lend the user's
//!   send buffer as `bufs[0]` without copying it.
//!
//! Reductions work on `elem`-byte elements: every `Reduce` length is a multiple of
//! `elem`, and splits of a vector stay on element boundaries. For non-commutative
//! operations (`commutative == false`) every result equals `x_0 op x_1 op ... op
//! x_{n-1}` combined in rank order, with lower ranks always as the `src` operand.
//!
//! # Algorithms
//!
//! The public functions at the crate root choose an algorithm by message and
//! communicator size, as MPICH does (with thresholds of their own for two ranks,
//! measured here); the thresholds are in [`tuning`]. Each algorithm is also public in
//! [`algo`]. See each function for its choice.
//!
//! # Example
//!
//! An allreduce (sum of `u64`s) on 5 ranks, run by the simulator:
//!
//! ```
//! use rsmpi_coll::{allreduce, sim};
//!
//! let n = 5;
//! let scheds: Vec<_> = (0..n).map(|r| allreduce(r, n, 16, 8, true)).collect();
//! let inputs: Vec<Vec<u8>> = (0..n as u64)
//!     .map(|r| [r, 10 * r].iter().flat_map(|x| x.to_le_bytes()).collect())
//!     .collect();
//! let add = |inv: &[u8], inout: &mut [u8]| {
//!     for (i, o) in inv.chunks(8).zip(inout.chunks_mut(8)) {
//!         let s = u64::from_le_bytes(i.try_into().unwrap()) + u64::from_le_bytes(o.try_into().unwrap());
//!         o.copy_from_slice(&s.to_le_bytes());
//!     }
//! };
//! let out = sim::run(&scheds, &inputs, &add, sim::Options::seed(42)).unwrap();
//! let want: Vec<u8> = [10u64, 100].iter().flat_map(|x| x.to_le_bytes()).collect();
//! assert!(out.iter().all(|o| *o == want));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod algo;
pub mod sim;
pub mod tuning;

/// Index of a buffer in [`Schedule::bufs`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u16);

/// One step of a [`Schedule`]; see the [crate documentation](crate) for the semantics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Post a nonblocking send of `bufs[buf][off..off+len]` to communicator rank `to`.
    /// The bytes are taken when the step is reached.
    Send {
        /// Destination rank in the communicator.
        to: u32,
        /// Source buffer.
        buf: BufId,
        /// Offset in the buffer.
        off: usize,
        /// Length in bytes.
        len: usize,
    },
    /// Post a nonblocking receive from communicator rank `from` of exactly `len` bytes
    /// into `bufs[buf][off..off+len]`; the bytes are in place at the next `Fence`.
    Recv {
        /// Source rank in the communicator.
        from: u32,
        /// Destination buffer.
        buf: BufId,
        /// Offset in the buffer.
        off: usize,
        /// Length in bytes.
        len: usize,
    },
    /// Wait until every send and receive posted so far has completed.
    Fence,
    /// `bufs[dst][dst_off..+len] = bufs[src][src_off..+len]`.
    Copy {
        /// Source buffer.
        src: BufId,
        /// Offset in the source buffer.
        src_off: usize,
        /// Destination buffer.
        dst: BufId,
        /// Offset in the destination buffer.
        dst_off: usize,
        /// Length in bytes.
        len: usize,
    },
    /// `dst = src (op) dst` element-wise: `src` is MPI's `invec`, `dst` its `inoutvec`.
    /// `len` is a multiple of the element size; for a non-commutative operation `src`
    /// holds the contribution of lower ranks than `dst`.
    Reduce {
        /// Buffer of the left operand (`invec`).
        src: BufId,
        /// Offset in `src`.
        src_off: usize,
        /// Buffer of the right operand and of the result (`inoutvec`).
        dst: BufId,
        /// Offset in `dst`.
        dst_off: usize,
        /// Length in bytes.
        len: usize,
    },
}

/// The steps one rank executes for one collective call.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Schedule {
    /// Sizes in bytes of the buffers. All start zeroed except `bufs[0]`, which holds this
    /// rank's input as documented by the function that built the schedule.
    pub bufs: Vec<usize>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Where this rank's output is at the end: (buffer, offset, length); length 0 if
    /// the rank has no output.
    pub result: (BufId, usize, usize),
}

impl Schedule {
    /// Whether any step writes bytes of `bufs[0]` (only [`bcast`] schedules do).
    pub fn writes_input(&self) -> bool {
        self.steps.iter().any(|s| match *s {
            Step::Recv { buf, len, .. } => buf == BufId(0) && len > 0,
            Step::Copy { dst, len, .. } | Step::Reduce { dst, len, .. } => {
                dst == BufId(0) && len > 0
            }
            _ => false,
        })
    }

    /// Number of `Send` steps (messages this rank sends).
    pub fn sends(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Send { .. }))
            .count()
    }
}

/// Builds a schedule; skips empty pieces and redundant fences.
#[derive(Debug)]
pub(crate) struct Builder {
    bufs: Vec<usize>,
    steps: Vec<Step>,
    /// Something was posted since the last fence.
    posted: bool,
}

impl Builder {
    /// A builder whose `bufs[0]` (the input) has `input` bytes.
    pub(crate) fn new(input: usize) -> Self {
        Builder {
            bufs: vec![input],
            steps: Vec::new(),
            posted: false,
        }
    }

    /// A new zeroed scratch buffer of `len` bytes.
    pub(crate) fn alloc(&mut self, len: usize) -> BufId {
        let id = u16::try_from(self.bufs.len()).expect("too many buffers");
        self.bufs.push(len);
        BufId(id)
    }

    pub(crate) fn send(&mut self, to: usize, buf: BufId, off: usize, len: usize) {
        if len > 0 {
            self.send0(to, buf, off, len);
        }
    }

    pub(crate) fn recv(&mut self, from: usize, buf: BufId, off: usize, len: usize) {
        if len > 0 {
            self.recv0(from, buf, off, len);
        }
    }

    /// A send even of zero bytes (barrier).
    pub(crate) fn send0(&mut self, to: usize, buf: BufId, off: usize, len: usize) {
        self.posted = true;
        self.steps.push(Step::Send {
            to: rank32(to),
            buf,
            off,
            len,
        });
    }

    /// A receive even of zero bytes (barrier).
    pub(crate) fn recv0(&mut self, from: usize, buf: BufId, off: usize, len: usize) {
        self.posted = true;
        self.steps.push(Step::Recv {
            from: rank32(from),
            buf,
            off,
            len,
        });
    }

    pub(crate) fn fence(&mut self) {
        if self.posted {
            self.posted = false;
            self.steps.push(Step::Fence);
        }
    }

    pub(crate) fn copy(
        &mut self,
        src: BufId,
        src_off: usize,
        dst: BufId,
        dst_off: usize,
        len: usize,
    ) {
        if len > 0 && (src, src_off) != (dst, dst_off) {
            self.steps.push(Step::Copy {
                src,
                src_off,
                dst,
                dst_off,
                len,
            });
        }
    }

    pub(crate) fn reduce(
        &mut self,
        src: BufId,
        src_off: usize,
        dst: BufId,
        dst_off: usize,
        len: usize,
    ) {
        if len > 0 {
            debug_assert!((src, src_off) != (dst, dst_off));
            self.steps.push(Step::Reduce {
                src,
                src_off,
                dst,
                dst_off,
                len,
            });
        }
    }

    pub(crate) fn finish(mut self, result: (BufId, usize, usize)) -> Schedule {
        self.fence();
        let result = if result.2 == 0 {
            (BufId(0), 0, 0)
        } else {
            result
        };
        Schedule {
            bufs: self.bufs,
            steps: self.steps,
            result,
        }
    }
}

fn rank32(r: usize) -> u32 {
    u32::try_from(r).expect("rank fits in u32")
}

mod select;
pub use select::{
    allgather, allgatherv, allreduce, alltoall, alltoallv, barrier, bcast, exscan, gather, gatherv,
    reduce, reduce_scatter, reduce_scatter_block, scan, scatter, scatterv,
};

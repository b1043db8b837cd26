//! Collective operations (`mpi::collective`): [`CommunicatorCollectives`] on every
//! communicator, [`Root`] on the process that roots a rooted collective, and the
//! reduction operations.
//!
//! ```no_run
//! use rsmpi::traits::*;
//! use rsmpi::collective::SystemOperation;
//!
//! let universe = rsmpi::initialize().unwrap();
//! let world = universe.world();
//! let mut sum = 0u64;
//! world.all_reduce_into(&(world.rank() as u64), &mut sum, SystemOperation::sum());
//! let mut all = vec![0i32; world.size() as usize];
//! world.all_gather_into(&world.rank(), &mut all[..]);
//! let root = world.process_at_rank(0);
//! let mut x = [0.0f64; 3];
//! if world.rank() == 0 { x = [1.0, 2.0, 3.0]; }
//! root.broadcast_into(&mut x[..]);
//! ```
//!
//! The algorithms are the schedules of the `rsmpi-coll` crate (binomial trees,
//! recursive doubling, Bruck, rings, Rabenseifner, chosen by size as MPICH does), run
//! over the point-to-point layer on the communicator's own internal context: no
//! collective message can match a user receive. Blocking collectives are immediate
//! ones waited on. Non-commutative operations are applied in rank order.
//!
//! Besides the `mpi` crate's methods, rsmpi has in-place forms (`MPI_IN_PLACE`):
//! [`CommunicatorCollectives::all_reduce_in_place`], `scan_in_place`,
//! `all_gather_in_place`, [`Root::reduce_into_root_in_place`], and
//! `reduce_scatter_into` for `MPI_Reduce_scatter` with per-rank counts.

pub(crate) mod exec;
pub(crate) mod ops;
mod sched;

pub use ops::{
    reduce_local_into, try_reduce_local_into, Operation, SystemOperation, UserOperation,
};

use crate::check::coll::{Block, Coll, Side};
use crate::datatype::{
    Buffer, BufferMut, Count, PartitionedBuffer, PartitionedBufferMut, UserDatatype,
};
use crate::error::{Error, Result};
use crate::progress::{self, Key};
use crate::request::{Data, Pending, Request, Scope, StaticScope};
use crate::topology::{fail, AsCommunicator, Communicator, Process, Rank, SimpleCommunicator};
use crate::trace::format::Op as MpiOp;
use exec::ExecOp;
use ops::Reducer;
use std::borrow::Cow;
use std::rc::Rc;

/// A schedule, shared between the cache and its executions.
type Schedule = Rc<rsmpi_coll::Schedule>;

/// `use rsmpi::collective::traits::*`.
pub mod traits {
    pub use super::{CommunicatorCollectives, Operation, Root};
}

type Prepared<'a> = (ExecOp, Option<Box<Reducer<'a>>>);

fn no_op<'a>() -> Prepared<'a> {
    (ExecOp::None, None)
}

/// Starts `sched` with `input` in the library state; the key of its completion.
fn start(comm: &SimpleCommunicator, sched: Schedule, input: Vec<u8>, op: ExecOp) -> Result<Key> {
    comm.check_live()?;
    Ok(progress::with(|s| exec::start(s, comm, sched, input, op)))
}

/// Runs a collective to completion in this frame; its result bytes (give them back
/// with [`recycle`]).
fn run(
    comm: &SimpleCommunicator,
    sched: Schedule,
    input: Cow<'_, [u8]>,
    op: Prepared<'_>,
) -> Result<Vec<u8>> {
    lend_input(comm, sched, input, op, None)
}

/// Runs a collective whose result lands straight in `out` (exactly the result's
/// size; for a broadcast also the root's input, with `input` empty).
fn run_into(
    comm: &SimpleCommunicator,
    sched: Schedule,
    input: Cow<'_, [u8]>,
    op: Prepared<'_>,
    out: &mut [u8],
) -> Result<()> {
    transport::mem::lend_mut(&progress::HOST, out, |region| {
        lend_input(comm, sched, input, op, Some(region)).map(recycle)
    })
}

/// Lends the caller's contribution to the schedule as its first buffer where it can
/// (its own bytes, of the buffer's size, in a schedule that never writes that
/// buffer), else hands over a copy.
fn lend_input(
    comm: &SimpleCommunicator,
    sched: Schedule,
    input: Cow<'_, [u8]>,
    op: Prepared<'_>,
    out: Option<transport::mem::RegionId>,
) -> Result<Vec<u8>> {
    match input {
        Cow::Borrowed(b)
            if sched.bufs.first() == Some(&b.len()) && !b.is_empty() && !sched.writes_input() =>
        {
            transport::mem::lend(&progress::HOST, b, |region| {
                drive(comm, sched, exec::Input::Lent(region), op, out, true)
            })
        }
        other => drive(comm, sched, exec::Input::Owned(owned(other)), op, out, true),
    }
}

/// Bytes of a rank's slot in the collectives' check's exchange: most calls fit (a
/// few dozen bytes, the file's name, a partition's blocks).
fn slot_len(size: u32) -> usize {
    256 + 40 * size as usize
}

/// A rank's slot: the length of `mine`, and `mine` where it fits.
fn slot(mine: &[u8], size: u32) -> Vec<u8> {
    let n = slot_len(size);
    let mut slot = vec![0u8; n];
    slot[..8].copy_from_slice(&(mine.len() as u64).to_le_bytes());
    if mine.len() <= n - 8 {
        slot[8..8 + mine.len()].copy_from_slice(mine);
    }
    slot
}

/// The lengths in the gathered `slots` of `size` ranks.
fn slot_lens(slots: &[u8], size: u32) -> Vec<usize> {
    slots
        .chunks_exact(slot_len(size))
        .map(|s| u64::from_le_bytes(s[..8].try_into().expect("8 bytes")) as usize)
        .collect()
}

/// Where each rank's bytes are in the gathered slots of `size` ranks; an empty range
/// past the end for a rank whose bytes did not fit its slot.
pub(crate) fn slots(all: &[u8], size: usize) -> Vec<std::ops::Range<usize>> {
    let n = slot_len(size as u32);
    slot_lens(all, size as u32)
        .into_iter()
        .enumerate()
        .map(|(i, len)| {
            if len <= n - 8 {
                i * n + 8..i * n + 8 + len
            } else {
                all.len() + 1..all.len() + 1
            }
        })
        .collect()
}

/// Every rank's `mine`, for the collectives' check (`check/coll.rs`): the bytes, and
/// where each rank's are in them, in rank order. An all-gather on the communicator's
/// internal context of a slot per rank (the length, and the bytes where they fit),
/// then, only if some rank's bytes did not fit, an all-gather of everyone's bytes.
/// Neither is a flush point of the tracer.
pub(crate) fn exchange(
    c: &SimpleCommunicator,
    mine: Vec<u8>,
) -> Result<(Vec<u8>, Vec<std::ops::Range<usize>>)> {
    let (rank, size) = me(c);
    let quiet = |sched, input| drive(c, sched, exec::Input::Owned(input), no_op(), None, false);
    let slots = quiet(
        sched::allgather(rank, size, slot_len(size)),
        slot(&mine, size),
    )?;
    let lens = slot_lens(&slots, size);
    if lens.iter().all(|&n| n <= slot_len(size) - 8) {
        let at = self::slots(&slots, size as usize);
        return Ok((slots, at));
    }
    let all = quiet(sched::allgatherv(rank, size, &lens), mine)?;
    let mut from = 0;
    let at = lens
        .iter()
        .map(|&n| {
            from += n;
            from - n..from
        })
        .collect();
    Ok((all, at))
}

/// Starts the exchange of the collectives' check for an immediate collective: the
/// all-gather of one slot per rank, as a nonblocking collective (read its result
/// with [`slots`]).
pub(crate) fn exchange_start(c: &SimpleCommunicator, mine: &[u8]) -> Result<Key> {
    let (rank, size) = me(c);
    let sched = sched::allgather(rank, size, slot_len(size));
    start(c, sched, slot(mine, size), ExecOp::None)
}

/// Runs a schedule to completion (`flush`: the end is a flush point of the tracer).
fn drive(
    comm: &SimpleCommunicator,
    sched: Schedule,
    input: exec::Input,
    op: Prepared<'_>,
    out: Option<transport::mem::RegionId>,
    flush: bool,
) -> Result<Vec<u8>> {
    comm.check_live()?;
    let (kind, user) = op;
    let user = user.as_deref();
    let mut e = progress::with(|s| exec::Exec::new(s, comm, sched, input, out, kind));
    let mut backoff = progress::Backoff::new();
    loop {
        let out = progress::with(|s| -> Result<Option<Vec<u8>>> {
            if let Some(out) = e.step(s, user)? {
                return Ok(Some(out));
            }
            s.progress();
            e.step(s, user)
        })?;
        match out {
            Some(out) => {
                // the user's call (marked by its public method) is still in progress:
                // a flush pause falls inside its slice of the trace
                if flush {
                    crate::trace::after_collective(comm);
                }
                return Ok(out);
            }
            None => {
                backoff.idle();
                if crate::tools::checking() {
                    // the deadlock detector follows the rank the schedule waits for
                    if let Some(k) = progress::with(|s| e.pending(s)) {
                        crate::check::deadlock::waiting(k);
                    }
                }
            }
        }
    }
}

/// Bytes the collective may keep: a buffer of the pool holding a borrowed buffer's
/// data (no fresh memory to fault in for every call of a loop).
fn owned(b: Cow<'_, [u8]>) -> Vec<u8> {
    match b {
        Cow::Owned(v) => v,
        Cow::Borrowed(b) => progress::with(|s| {
            let mut v = s.colls.pool.take(b.len());
            v.copy_from_slice(b);
            v
        }),
    }
}

/// Returns a result buffer to the library's pool.
fn recycle(v: Vec<u8>) {
    if v.capacity() > 0 {
        // (a result that landed in the caller's buffer is an empty vector)
        progress::with(|s| s.colls.pool.give(v));
    }
}

/// An immediate collective's request: `data` gets the result when it completes.
fn request<'a, D: ?Sized, Sc>(
    comm: &SimpleCommunicator,
    p: Plan<'a>,
    post: Option<Box<PostFn<'a>>>,
    data: Data<'a, D>,
) -> Result<Request<'a, D, Sc>> {
    // user operations of immediate collectives run in `post` (see `defer_user`)
    debug_assert!(p.op.1.is_none(), "an immediate collective lends no reducer");
    let key = start(comm, p.sched, owned(p.input), p.op.0)?;
    if crate::check::types::wanted() {
        crate::check::coll::started(key);
    }
    let data = match (data, post) {
        (Data::Unpack(r, unpack), Some(post)) => Data::UnpackAfter(r, unpack, Box::new(post)),
        (data, None) => data,
        (_, Some(_)) => unreachable!("a last step goes with a result to unpack"),
    };
    Ok(Request::new(Pending::new(key, 0, 0, comm.ctx), data))
}

fn me(c: &SimpleCommunicator) -> (u32, u32) {
    (c.rank as u32, c.size as u32)
}

fn elem(dt: &UserDatatype) -> usize {
    (dt.size() as usize).max(1)
}

fn check_root(c: &SimpleCommunicator, root: Rank) -> Result<u32> {
    if (0..c.size).contains(&root) {
        Ok(root as u32)
    } else {
        Err(Error::InvalidRank {
            rank: root,
            size: c.size,
        })
    }
}

/// Fails unless `cap` bytes hold `need`.
fn fits(need: usize, cap: usize) -> Result<()> {
    if need > cap {
        Err(Error::Truncated {
            len: need as u64,
            capacity: cap as u64,
        })
    } else {
        Ok(())
    }
}

fn unpack<R: BufferMut + ?Sized>(r: &mut R, b: &[u8]) -> Result<()> {
    r.rsmpi_unpack(b)
}

/// Byte counts of a partitioned buffer's blocks.
fn byte_counts(counts: &[Count], dt: &UserDatatype) -> Vec<usize> {
    counts
        .iter()
        .map(|&c| c.max(0) as usize * dt.size() as usize)
        .collect()
}

fn unpack_blocks<R: PartitionedBufferMut + ?Sized>(r: &mut R, b: &[u8]) -> Result<()> {
    let counts = byte_counts(r.counts(), &r.rsmpi_datatype());
    let mut at = 0;
    for (i, n) in counts.into_iter().enumerate() {
        r.rsmpi_unpack_block(i, &b[at..at + n])?;
        at += n;
    }
    Ok(())
}

fn pack_blocks<S: PartitionedBuffer + ?Sized>(s: &S, n: usize) -> Result<Vec<u8>> {
    if s.counts().len() != n {
        return Err(Error::Request(format!(
            "a partition of {} blocks for {n} ranks",
            s.counts().len()
        )));
    }
    let mut v = Vec::new();
    for i in 0..n {
        v.extend_from_slice(&s.rsmpi_block(i)?);
    }
    Ok(v)
}

fn check_blocks(counts: &[Count], n: usize) -> Result<()> {
    if counts.len() != n {
        Err(Error::Request(format!(
            "a partition of {} blocks for {n} ranks",
            counts.len()
        )))
    } else {
        Ok(())
    }
}

// ---- the collectives' check (`RSMPI_CHECK=errors`, `check/coll.rs`) ----------------

/// Checks this rank's blocking collective against the other ranks' before it runs,
/// when the error checks are on; `coll` says what the call sends and receives.
#[inline(always)]
fn checked(c: &SimpleCommunicator, coll: impl FnOnce() -> Coll) {
    if crate::check::types::wanted() {
        crate::check::coll::check(c, coll);
    }
}

/// [`checked`] for an immediate collective: the check starts with it and reads the
/// other ranks' calls when its request completes.
#[inline(always)]
fn later(c: &SimpleCommunicator, coll: impl FnOnce() -> Coll) {
    if crate::check::types::wanted() {
        crate::check::coll::start(c, coll);
    }
}

/// What a send buffer holds, as the check compares it.
fn sent<S: Buffer + ?Sized>(s: &S) -> Block {
    Block::of(&s.rsmpi_datatype(), s.rsmpi_count())
}

/// What a receive buffer holds.
fn held<R: BufferMut + ?Sized>(r: &R) -> Block {
    Block::of(&r.rsmpi_datatype(), r.rsmpi_count())
}

/// The calls as the check describes them, one per shape, for the blocking and the
/// immediate form alike (`op` says which).
mod call {
    use super::{held, sent, Block, Buffer, BufferMut, Coll, Count, MpiOp, Rank, Side};
    use crate::datatype::{PartitionedBuffer, PartitionedBufferMut, UserDatatype};

    /// A receive buffer where rank i's block lands at i times this rank's own block,
    /// with room to spare allowed (gathers, all-to-all).
    fn room(buf: Block) -> Side {
        Side::Room { buf, by_rank: true }
    }

    /// A scatter root's receive buffer: its block from itself, with room to spare
    /// allowed (the other ranks receive exactly their buffer).
    fn at_start(buf: Block) -> Side {
        Side::Room {
            buf,
            by_rank: false,
        }
    }

    /// A partition's blocks, rank by rank.
    fn blocks(dt: &UserDatatype, counts: &[Count]) -> Side {
        Side::Each(
            counts
                .iter()
                .map(|&n| Block::of(dt, n.max(0) as usize))
                .collect(),
        )
    }

    fn rooted(op: MpiOp, root: Rank, send: Side, recv: Side) -> Coll {
        Coll::moving(op, Some(root as u32), send, recv)
    }

    pub fn barrier(op: MpiOp) -> Coll {
        Coll::moving(op, None, Side::Nothing, Side::Nothing)
    }

    pub fn all_gather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(op: MpiOp, s: &S, r: &R) -> Coll {
        Coll::moving(op, None, Side::Same(sent(s)), room(held(r)))
    }

    pub fn all_gather_in_place<R: BufferMut + ?Sized>(op: MpiOp, buf: &R) -> Coll {
        let b = held(buf);
        Coll::moving(op, None, Side::Split(b.clone()), Side::Split(b))
    }

    pub fn all_gather_varcount<S: Buffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
        op: MpiOp,
        s: &S,
        r: &R,
    ) -> Coll {
        let r = blocks(&r.rsmpi_datatype(), r.counts());
        Coll::moving(op, None, Side::Same(sent(s)), r)
    }

    pub fn all_to_all<S: Buffer + ?Sized, R: BufferMut + ?Sized>(op: MpiOp, s: &S, r: &R) -> Coll {
        Coll::moving(op, None, Side::Split(sent(s)), room(held(r)))
    }

    pub fn all_to_all_varcount<S: PartitionedBuffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
        op: MpiOp,
        s: &S,
        r: &R,
    ) -> Coll {
        let s = blocks(&s.rsmpi_datatype(), s.counts());
        let r = blocks(&r.rsmpi_datatype(), r.counts());
        Coll::moving(op, None, s, r)
    }

    pub fn broadcast<B: BufferMut + ?Sized>(op: MpiOp, root: Rank, buf: &B) -> Coll {
        let b = held(buf);
        rooted(op, root, Side::Same(b.clone()), Side::Same(b))
    }

    /// A gather's rank that is not the root.
    pub fn to_root<S: Buffer + ?Sized>(op: MpiOp, root: Rank, s: &S) -> Coll {
        rooted(op, root, Side::Same(sent(s)), Side::Nothing)
    }

    pub fn gather_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        op: MpiOp,
        root: Rank,
        s: &S,
        r: &R,
    ) -> Coll {
        rooted(op, root, Side::Same(sent(s)), room(held(r)))
    }

    pub fn gather_varcount_root<S: Buffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
        op: MpiOp,
        root: Rank,
        s: &S,
        r: &R,
    ) -> Coll {
        let r = blocks(&r.rsmpi_datatype(), r.counts());
        rooted(op, root, Side::Same(sent(s)), r)
    }

    /// A scatter's rank that is not the root.
    pub fn from_root<R: BufferMut + ?Sized>(op: MpiOp, root: Rank, r: &R) -> Coll {
        rooted(op, root, Side::Nothing, Side::Same(held(r)))
    }

    pub fn scatter_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        op: MpiOp,
        root: Rank,
        s: &S,
        r: &R,
    ) -> Coll {
        rooted(op, root, Side::Split(sent(s)), at_start(held(r)))
    }

    pub fn scatter_varcount_root<S: PartitionedBuffer + ?Sized, R: BufferMut + ?Sized>(
        op: MpiOp,
        root: Rank,
        s: &S,
        r: &R,
    ) -> Coll {
        let s = blocks(&s.rsmpi_datatype(), s.counts());
        rooted(op, root, s, at_start(held(r)))
    }
}

/// A reduction with `op` of this rank's `contribution`.
fn reduction<O: Operation>(kind: MpiOp, root: Option<Rank>, op: &O, contribution: Block) -> Coll {
    let code = match op.rsmpi_op() {
        ops::OpRef::System(s) => s as u8,
        ops::OpRef::User(_) => crate::check::coll::USER_OP,
    };
    Coll::reduction(kind, root.map(|r| r as u32), code, contribution)
}

// ---- the schedules with their inputs, shared by blocking and immediate forms -------

struct Plan<'a> {
    sched: Schedule,
    /// The contribution (`bufs[0]`): the caller's own bytes where they are plain
    /// contiguous data (a blocking collective lends them to the schedule), else a copy.
    input: Cow<'a, [u8]>,
    op: Prepared<'a>,
}

fn plan_all_gather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    c: &SimpleCommunicator,
    s: &'a S,
    r: &R,
) -> Result<Plan<'a>> {
    let (rank, size) = me(c);
    let input = s.rsmpi_send()?;
    fits(input.len() * size as usize, r.rsmpi_capacity())?;
    Ok(Plan {
        sched: sched::allgather(rank, size, input.len()),
        input,
        op: no_op(),
    })
}

fn plan_all_gather_varcount<'a, S: Buffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
    c: &SimpleCommunicator,
    s: &'a S,
    r: &R,
) -> Result<Plan<'a>> {
    let (rank, size) = me(c);
    check_blocks(r.counts(), size as usize)?;
    let input = s.rsmpi_send()?;
    let counts = byte_counts(r.counts(), &r.rsmpi_datatype());
    if counts[rank as usize] != input.len() {
        return Err(Error::Request(format!(
            "this rank sends {} bytes where its partition count says {}",
            input.len(),
            counts[rank as usize]
        )));
    }
    Ok(Plan {
        sched: sched::allgatherv(rank, size, &counts),
        input,
        op: no_op(),
    })
}

fn plan_all_to_all<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    c: &SimpleCommunicator,
    s: &'a S,
    r: &R,
) -> Result<Plan<'a>> {
    let (rank, size) = me(c);
    let input = s.rsmpi_send()?;
    if input.len() % size as usize != 0 {
        return Err(Error::Request(format!(
            "all_to_all: {} bytes do not split into {size} equal blocks",
            input.len()
        )));
    }
    fits(input.len(), r.rsmpi_capacity())?;
    let block = input.len() / size as usize;
    Ok(Plan {
        sched: sched::alltoall(rank, size, block),
        input,
        op: no_op(),
    })
}

fn plan_all_to_all_varcount<S: PartitionedBuffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
    c: &SimpleCommunicator,
    s: &S,
    r: &R,
) -> Result<Plan<'static>> {
    let (rank, size) = me(c);
    check_blocks(r.counts(), size as usize)?;
    let input = Cow::Owned(pack_blocks(s, size as usize)?);
    let sc = byte_counts(s.counts(), &s.rsmpi_datatype());
    let rc = byte_counts(r.counts(), &r.rsmpi_datatype());
    Ok(Plan {
        sched: sched::alltoallv(rank, size, &sc, &rc),
        input,
        op: no_op(),
    })
}

fn plan_reduction<'a, S: Buffer + ?Sized, O: Operation + 'a>(
    s: &'a S,
    op: O,
    build: impl FnOnce(usize, usize, bool) -> Schedule,
) -> Result<Plan<'a>> {
    let input = s.rsmpi_send()?;
    plan_reduction_of(input, s.rsmpi_datatype().into_owned(), op, build)
}

/// A reduction of `input` (packed elements of `dt`).
fn plan_reduction_of<'a, O: Operation + 'a>(
    input: Cow<'a, [u8]>,
    dt: UserDatatype,
    op: O,
    build: impl FnOnce(usize, usize, bool) -> Schedule,
) -> Result<Plan<'a>> {
    let e = elem(&dt);
    let commutative = op.is_commutative();
    let op = ops::prepare(op, dt)?;
    Ok(Plan {
        sched: build(input.len(), e, commutative),
        input,
        op,
    })
}

/// The in-place forms: `buf` is this rank's contribution.
fn plan_in_place<'a, R: BufferMut + ?Sized, O: Operation + 'a>(
    buf: &mut R,
    op: O,
    build: impl FnOnce(usize, usize, bool) -> Schedule,
) -> Result<Plan<'a>> {
    let input = Cow::Owned(buf.rsmpi_read()?);
    plan_reduction_of(input, buf.rsmpi_datatype().into_owned(), op, build)
}

/// Which reduction an immediate collective with a user operation is.
#[derive(Clone, Copy)]
enum Deferred {
    AllReduce,
    Reduce(u32),
    Scan,
    Exscan,
    ReduceScatterBlock,
}

/// An immediate reduction with a user operation gathers the contributions and reduces
/// them in rank order when its request completes: the user's closure is borrowed by
/// the request, and a schedule that needed it halfway could not move on while its
/// caller waits for another request (ranks may complete immediate collectives in
/// different orders, MPI-3.1 §5.12). Predefined operations keep the tree schedules.
fn defer_user<'a>(
    c: &SimpleCommunicator,
    p: Plan<'a>,
    kind: Deferred,
) -> (Plan<'a>, Option<Box<PostFn<'a>>>) {
    let Plan {
        sched,
        input,
        op: (kind_op, reducer),
    } = p;
    let (ExecOp::User, Some(reduce)) = (&kind_op, reducer) else {
        return (
            Plan {
                sched,
                input,
                op: (kind_op, None),
            },
            None,
        );
    };
    let p = Plan {
        sched,
        input,
        op: no_op(),
    };
    let (rank, size) = me(c);
    let (n, len) = (size as usize, p.input.len());
    let sched = match kind {
        Deferred::AllReduce | Deferred::Scan | Deferred::Exscan => {
            sched::allgather(rank, size, len)
        }
        Deferred::Reduce(root) => sched::gather(rank, size, root, len),
        Deferred::ReduceScatterBlock => sched::alltoall(rank, size, len / n),
    };
    // the blocks to fold, in rank order
    let (block, upto) = match kind {
        Deferred::AllReduce | Deferred::Reduce(_) => (len, n),
        Deferred::Scan => (len, rank as usize + 1),
        Deferred::Exscan => (len, rank as usize),
        Deferred::ReduceScatterBlock => (len / n, n),
    };
    let post = move |g: &mut Vec<u8>| -> Result<()> {
        if g.is_empty() || upto == 0 {
            g.clear();
            return Ok(());
        }
        // x_0 op (x_1 op (… op x_{upto-1})): `reduce` computes inout = in op inout
        let mut acc = g[(upto - 1) * block..upto * block].to_vec();
        for i in (0..upto - 1).rev() {
            reduce(&g[i * block..(i + 1) * block], &mut acc)?;
        }
        *g = acc;
        Ok(())
    };
    let plan = Plan {
        sched,
        input: p.input,
        op: no_op(),
    };
    (plan, Some(Box::new(post)))
}

/// Turns the gathered bytes of a deferred reduction into its result.
pub(crate) type PostFn<'a> = dyn Fn(&mut Vec<u8>) -> Result<()> + 'a;

fn plan_bcast<B: BufferMut + ?Sized>(
    c: &SimpleCommunicator,
    root: Rank,
    b: &mut B,
) -> Result<Plan<'static>> {
    let (rank, size) = me(c);
    let root = check_root(c, root)?;
    let len = b.rsmpi_capacity();
    let input = Cow::Owned(if rank == root {
        b.rsmpi_read()?
    } else {
        Vec::new()
    });
    let e = elem(&b.rsmpi_datatype());
    Ok(Plan {
        sched: sched::bcast(rank, size, root, len, e),
        input,
        op: no_op(),
    })
}

fn plan_gather<'a, S: Buffer + ?Sized>(
    c: &SimpleCommunicator,
    root: Rank,
    s: &'a S,
    cap: Option<usize>,
) -> Result<Plan<'a>> {
    let (rank, size) = me(c);
    let root = check_root(c, root)?;
    let input = s.rsmpi_send()?;
    if let Some(cap) = cap {
        fits(input.len() * size as usize, cap)?;
    }
    Ok(Plan {
        sched: sched::gather(rank, size, root, input.len()),
        input,
        op: no_op(),
    })
}

fn plan_gatherv<'a, S: Buffer + ?Sized>(
    c: &SimpleCommunicator,
    root: Rank,
    s: &'a S,
    counts: Option<Vec<usize>>,
) -> Result<Plan<'a>> {
    let (rank, size) = me(c);
    let root = check_root(c, root)?;
    let input = s.rsmpi_send()?;
    let counts = match counts {
        Some(c) => {
            check_blocks_len(&c, size as usize)?;
            if c[rank as usize] != input.len() {
                return Err(Error::Request(
                    "the root's own count differs from its send buffer".into(),
                ));
            }
            c
        }
        None => {
            let mut c = vec![0; size as usize];
            c[rank as usize] = input.len();
            c
        }
    };
    Ok(Plan {
        sched: sched::gatherv(rank, size, root, &counts),
        input,
        op: no_op(),
    })
}

fn check_blocks_len(c: &[usize], n: usize) -> Result<()> {
    if c.len() != n {
        Err(Error::Request(format!(
            "a partition of {} blocks for {n} ranks",
            c.len()
        )))
    } else {
        Ok(())
    }
}

fn plan_scatter(
    c: &SimpleCommunicator,
    root: Rank,
    input: Option<Vec<u8>>,
    cap: usize,
) -> Result<Plan<'static>> {
    let (rank, size) = me(c);
    let root = check_root(c, root)?;
    let (input, block) = match input {
        Some(v) => {
            if v.len() % size as usize != 0 {
                return Err(Error::Request(format!(
                    "scatter: {} bytes do not split into {size} equal blocks",
                    v.len()
                )));
            }
            let b = v.len() / size as usize;
            fits(b, cap)?;
            (v, b)
        }
        None => (Vec::new(), cap),
    };
    Ok(Plan {
        sched: sched::scatter(rank, size, root, block),
        input: Cow::Owned(input),
        op: no_op(),
    })
}

fn plan_scatterv(
    c: &SimpleCommunicator,
    root: Rank,
    input: Option<(Vec<u8>, Vec<usize>)>,
    cap: usize,
) -> Result<Plan<'static>> {
    let (rank, size) = me(c);
    let root = check_root(c, root)?;
    let (input, counts) = match input {
        Some((v, counts)) => {
            fits(counts[rank as usize], cap)?;
            (v, counts)
        }
        None => {
            let mut counts = vec![0; size as usize];
            counts[rank as usize] = cap;
            (Vec::new(), counts)
        }
    };
    Ok(Plan {
        sched: sched::scatterv(rank, size, root, &counts),
        input: Cow::Owned(input),
        op: no_op(),
    })
}

/// Blocking form of a plan whose result goes into `r` (`None` result: nothing).
fn finish_into<R: BufferMut + ?Sized>(
    c: &SimpleCommunicator,
    p: Plan<'_>,
    r: &mut R,
) -> Result<()> {
    let (rb, off, len) = p.sched.result;
    if off == 0 && len > 0 && p.sched.bufs[rb.0 as usize] == len {
        if let Some(bytes) = r.rsmpi_direct().filter(|b| b.len() == len) {
            // plain contiguous data of exactly the result's size: the result lands there
            return run_into(c, p.sched, p.input, p.op, bytes);
        }
    }
    let out = run(c, p.sched, p.input, p.op)?;
    let res = if out.is_empty() {
        Ok(())
    } else {
        r.rsmpi_unpack(&out)
    };
    recycle(out);
    res
}

fn finish_blocks<R: PartitionedBufferMut + ?Sized>(
    c: &SimpleCommunicator,
    p: Plan<'_>,
    r: &mut R,
) -> Result<()> {
    let out = run(c, p.sched, p.input, p.op)?;
    let res = unpack_blocks(r, &out);
    recycle(out);
    res
}

fn into_request<'a, R: BufferMut + ?Sized + 'a, Sc>(
    c: &SimpleCommunicator,
    p: Plan<'a>,
    r: &'a mut R,
) -> Result<Request<'a, R, Sc>> {
    request(c, p, None, Data::Unpack(r, unpack_nonempty))
}

fn unpack_nonempty<R: BufferMut + ?Sized>(r: &mut R, b: &[u8]) -> Result<()> {
    if b.is_empty() {
        Ok(())
    } else {
        unpack(r, b)
    }
}

/// The request of an immediate reduction into `r`.
fn reduction_request<'a, R: BufferMut + ?Sized + 'a, Sc>(
    c: &SimpleCommunicator,
    p: Plan<'a>,
    kind: Deferred,
    r: &'a mut R,
) -> Result<Request<'a, R, Sc>> {
    let (p, post) = defer_user(c, p, kind);
    request(c, p, post, Data::Unpack(r, unpack_nonempty))
}

fn into_request_blocks<'a, R: PartitionedBufferMut + ?Sized + 'a, Sc>(
    c: &SimpleCommunicator,
    p: Plan<'a>,
    r: &'a mut R,
) -> Result<Request<'a, R, Sc>> {
    request(c, p, None, Data::Unpack(r, |r, b| unpack_blocks(r, b)))
}

fn send_only_request<'a, S: ?Sized + 'a, Sc>(
    c: &SimpleCommunicator,
    p: Plan<'a>,
    s: &'a S,
) -> Result<Request<'a, S, Sc>> {
    request(c, p, None, Data::Shared(s))
}

/// Collectives every rank of a communicator calls
/// (`mpi::collective::CommunicatorCollectives`).
pub trait CommunicatorCollectives: Communicator {
    /// Blocks until every rank has called it (`MPI_Barrier`).
    #[track_caller]
    fn barrier(&self) {
        let _t = crate::tools::call(crate::trace::format::Op::Barrier);
        let c = self.rsmpi_comm();
        checked(&c, || call::barrier(MpiOp::Barrier));
        let (rank, size) = me(&c);
        run(
            &c,
            sched::barrier(rank, size),
            Cow::Owned(Vec::new()),
            no_op(),
        )
        .unwrap_or_else(|e| fail("barrier", e));
    }

    /// Every rank's `sendbuf`, concatenated in rank order into `recvbuf` on every rank
    /// (`MPI_Allgather`).
    #[track_caller]
    fn all_gather_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Allgather);
        let c = self.rsmpi_comm();
        checked(&c, || call::all_gather(MpiOp::Allgather, sendbuf, recvbuf));
        plan_all_gather(&c, sendbuf, recvbuf)
            .and_then(|p| finish_into(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("all_gather", e))
    }

    /// `MPI_Allgather` in place: this rank's block is already at its place in `buf`.
    #[track_caller]
    fn all_gather_in_place<R: BufferMut + ?Sized>(&self, buf: &mut R) {
        let _t = crate::tools::call(crate::trace::format::Op::Allgather);
        let c = self.rsmpi_comm();
        checked(&c, || call::all_gather_in_place(MpiOp::Allgather, buf));
        let mut f = || -> Result<()> {
            let all = buf.rsmpi_read()?;
            let size = c.size as usize;
            if all.len() % size != 0 {
                return Err(Error::Request(format!(
                    "{} bytes do not split into {size} blocks",
                    all.len()
                )));
            }
            let b = all.len() / size;
            let mine = all[c.rank as usize * b..(c.rank as usize + 1) * b].to_vec();
            let out = run(
                &c,
                sched::allgather(c.rank as u32, size as u32, b),
                Cow::Owned(mine),
                no_op(),
            )?;
            buf.rsmpi_unpack(&out)
        };
        f().unwrap_or_else(|e| fail("all_gather", e))
    }

    /// `MPI_Allgatherv`: blocks of per-rank sizes, placed by the partition.
    #[track_caller]
    fn all_gather_varcount_into<S: Buffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Allgatherv);
        let c = self.rsmpi_comm();
        checked(&c, || {
            call::all_gather_varcount(MpiOp::Allgatherv, sendbuf, recvbuf)
        });
        plan_all_gather_varcount(&c, sendbuf, recvbuf)
            .and_then(|p| finish_blocks(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("all_gather_varcount", e))
    }

    /// Block j of `sendbuf` goes to rank j, block i of `recvbuf` comes from rank i
    /// (`MPI_Alltoall`).
    #[track_caller]
    fn all_to_all_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Alltoall);
        let c = self.rsmpi_comm();
        checked(&c, || call::all_to_all(MpiOp::Alltoall, sendbuf, recvbuf));
        plan_all_to_all(&c, sendbuf, recvbuf)
            .and_then(|p| finish_into(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("all_to_all", e))
    }

    /// `MPI_Alltoallv`.
    #[track_caller]
    fn all_to_all_varcount_into<S: PartitionedBuffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Alltoallv);
        let c = self.rsmpi_comm();
        checked(&c, || {
            call::all_to_all_varcount(MpiOp::Alltoallv, sendbuf, recvbuf)
        });
        plan_all_to_all_varcount(&c, sendbuf, recvbuf)
            .and_then(|p| finish_blocks(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("all_to_all_varcount", e))
    }

    /// The reduction of every rank's `sendbuf`, on every rank (`MPI_Allreduce`).
    #[track_caller]
    fn all_reduce_into<S: Buffer + ?Sized, R: BufferMut + ?Sized, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Allreduce);
        let c = self.rsmpi_comm();
        checked(&c, || reduction(MpiOp::Allreduce, None, &op, sent(sendbuf)));
        let (rank, size) = me(&c);
        plan_reduction(sendbuf, op, |len, e, com| {
            sched::allreduce(rank, size, len, e, com)
        })
        .and_then(|p| {
            fits(p.input.len(), recvbuf.rsmpi_capacity())?;
            finish_into(&c, p, recvbuf)
        })
        .unwrap_or_else(|e| fail("all_reduce", e))
    }

    /// `MPI_Allreduce` with `MPI_IN_PLACE`: `buf` is this rank's contribution and
    /// receives the result.
    #[track_caller]
    fn all_reduce_in_place<R: BufferMut + ?Sized, O: Operation>(&self, buf: &mut R, op: O) {
        let _t = crate::tools::call(crate::trace::format::Op::Allreduce);
        let c = self.rsmpi_comm();
        checked(&c, || reduction(MpiOp::Allreduce, None, &op, held(buf)));
        let (rank, size) = me(&c);
        let f = || -> Result<()> {
            let p = plan_in_place(buf, op, |len, e, com| {
                sched::allreduce(rank, size, len, e, com)
            })?;
            finish_into(&c, p, buf)
        };
        f().unwrap_or_else(|e| fail("all_reduce", e))
    }

    /// Reduces `sendbuf` (size × n elements) and scatters block i of the result to
    /// rank i (`MPI_Reduce_scatter_block`).
    #[track_caller]
    fn reduce_scatter_block_into<S: Buffer + ?Sized, R: BufferMut + ?Sized, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::ReduceScatterBlock);
        let c = self.rsmpi_comm();
        checked(&c, || {
            reduction(MpiOp::ReduceScatterBlock, None, &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        let f = || -> Result<()> {
            let p = plan_reduction(sendbuf, op, |len, e, com| {
                sched::reduce_scatter_block(rank, size, len / size as usize, e, com)
            })?;
            check_split(p.input.len(), size)?;
            fits(p.input.len() / size as usize, recvbuf.rsmpi_capacity())?;
            finish_into(&c, p, recvbuf)
        };
        f().unwrap_or_else(|e| fail("reduce_scatter_block", e))
    }

    /// `MPI_Reduce_scatter`: block i (of `counts[i]` elements) of the reduction goes
    /// to rank i.
    #[track_caller]
    fn reduce_scatter_into<S: Buffer + ?Sized, R: BufferMut + ?Sized, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        counts: &[Count],
        op: O,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::ReduceScatter);
        let c = self.rsmpi_comm();
        checked(&c, || {
            reduction(MpiOp::ReduceScatter, None, &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        let f = || -> Result<()> {
            check_blocks(counts, size as usize)?;
            let dt = sendbuf.rsmpi_datatype().into_owned();
            let bc = byte_counts(counts, &dt);
            let p = plan_reduction(sendbuf, op, |_, e, com| {
                sched::reduce_scatter(rank, size, &bc, e, com)
            })?;
            if p.input.len() != bc.iter().sum::<usize>() {
                return Err(Error::Request(
                    "the counts do not add up to the send buffer".into(),
                ));
            }
            fits(bc[rank as usize], recvbuf.rsmpi_capacity())?;
            finish_into(&c, p, recvbuf)
        };
        f().unwrap_or_else(|e| fail("reduce_scatter", e))
    }

    /// Inclusive prefix reduction: rank i gets x_0 op … op x_i (`MPI_Scan`).
    #[track_caller]
    fn scan_into<S: Buffer + ?Sized, R: BufferMut + ?Sized, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Scan);
        let c = self.rsmpi_comm();
        checked(&c, || reduction(MpiOp::Scan, None, &op, sent(sendbuf)));
        let (rank, size) = me(&c);
        plan_reduction(sendbuf, op, |len, _, _| sched::scan(rank, size, len))
            .and_then(|p| {
                fits(p.input.len(), recvbuf.rsmpi_capacity())?;
                finish_into(&c, p, recvbuf)
            })
            .unwrap_or_else(|e| fail("scan", e))
    }

    /// `MPI_Scan` in place.
    #[track_caller]
    fn scan_in_place<R: BufferMut + ?Sized, O: Operation>(&self, buf: &mut R, op: O) {
        let _t = crate::tools::call(crate::trace::format::Op::Scan);
        let c = self.rsmpi_comm();
        checked(&c, || reduction(MpiOp::Scan, None, &op, held(buf)));
        let (rank, size) = me(&c);
        let f = || -> Result<()> {
            let p = plan_in_place(buf, op, |len, _, _| sched::scan(rank, size, len))?;
            finish_into(&c, p, buf)
        };
        f().unwrap_or_else(|e| fail("scan", e))
    }

    /// Exclusive prefix reduction: rank i > 0 gets x_0 op … op x_{i-1}; rank 0's
    /// buffer is left as it was (`MPI_Exscan`).
    #[track_caller]
    fn exclusive_scan_into<S: Buffer + ?Sized, R: BufferMut + ?Sized, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Exscan);
        let c = self.rsmpi_comm();
        checked(&c, || reduction(MpiOp::Exscan, None, &op, sent(sendbuf)));
        let (rank, size) = me(&c);
        plan_reduction(sendbuf, op, |len, _, _| sched::exscan(rank, size, len))
            .and_then(|p| {
                fits(p.input.len(), recvbuf.rsmpi_capacity())?;
                finish_into(&c, p, recvbuf)
            })
            .unwrap_or_else(|e| fail("exclusive_scan", e))
    }

    /// Starts a barrier (`MPI_Ibarrier`).
    #[track_caller]
    fn immediate_barrier(&self) -> Request<'static, (), StaticScope> {
        let _t = crate::tools::call(crate::trace::format::Op::Ibarrier);
        let c = self.rsmpi_comm();
        later(&c, || call::barrier(MpiOp::Ibarrier));
        let (rank, size) = me(&c);
        let p = Plan {
            sched: sched::barrier(rank, size),
            input: Cow::Owned(Vec::new()),
            op: no_op(),
        };
        request(&c, p, None, Data::Shared(&())).unwrap_or_else(|e| fail("ibarrier", e))
    }

    /// `MPI_Iallgather`.
    #[track_caller]
    fn immediate_all_gather_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iallgather);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || call::all_gather(MpiOp::Iallgather, sendbuf, recvbuf));
        plan_all_gather(&c, sendbuf, recvbuf)
            .and_then(|p| into_request(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("iallgather", e))
    }

    /// `MPI_Iallgatherv`.
    #[track_caller]
    fn immediate_all_gather_varcount_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + PartitionedBufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iallgatherv);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || {
            call::all_gather_varcount(MpiOp::Iallgatherv, sendbuf, recvbuf)
        });
        plan_all_gather_varcount(&c, sendbuf, recvbuf)
            .and_then(|p| into_request_blocks(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("iallgatherv", e))
    }

    /// `MPI_Ialltoall`.
    #[track_caller]
    fn immediate_all_to_all_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Ialltoall);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || call::all_to_all(MpiOp::Ialltoall, sendbuf, recvbuf));
        plan_all_to_all(&c, sendbuf, recvbuf)
            .and_then(|p| into_request(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("ialltoall", e))
    }

    /// `MPI_Ialltoallv`.
    #[track_caller]
    fn immediate_all_to_all_varcount_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + PartitionedBuffer + ?Sized,
        R: 'a + PartitionedBufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Ialltoallv);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || {
            call::all_to_all_varcount(MpiOp::Ialltoallv, sendbuf, recvbuf)
        });
        plan_all_to_all_varcount(&c, sendbuf, recvbuf)
            .and_then(|p| into_request_blocks(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("ialltoallv", e))
    }

    /// `MPI_Iallreduce`.
    #[track_caller]
    fn immediate_all_reduce_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iallreduce);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || {
            reduction(MpiOp::Iallreduce, None, &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        plan_reduction(sendbuf, op, |len, e, com| {
            sched::allreduce(rank, size, len, e, com)
        })
        .and_then(|p| {
            fits(p.input.len(), recvbuf.rsmpi_capacity())?;
            reduction_request(&c, p, Deferred::AllReduce, recvbuf)
        })
        .unwrap_or_else(|e| fail("iallreduce", e))
    }

    /// `MPI_Ireduce_scatter_block`.
    #[track_caller]
    fn immediate_reduce_scatter_block_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::IreduceScatterBlock);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || {
            reduction(MpiOp::IreduceScatterBlock, None, &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        let f = move || -> Result<Request<'a, R, Sc>> {
            let p = plan_reduction(sendbuf, op, |len, e, com| {
                sched::reduce_scatter_block(rank, size, len / size as usize, e, com)
            })?;
            check_split(p.input.len(), size)?;
            fits(p.input.len() / size as usize, recvbuf.rsmpi_capacity())?;
            reduction_request(&c, p, Deferred::ReduceScatterBlock, recvbuf)
        };
        f().unwrap_or_else(|e| fail("ireduce_scatter_block", e))
    }

    /// `MPI_Iscan`.
    #[track_caller]
    fn immediate_scan_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iscan);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || reduction(MpiOp::Iscan, None, &op, sent(sendbuf)));
        let (rank, size) = me(&c);
        plan_reduction(sendbuf, op, |len, _, _| sched::scan(rank, size, len))
            .and_then(|p| {
                fits(p.input.len(), recvbuf.rsmpi_capacity())?;
                reduction_request(&c, p, Deferred::Scan, recvbuf)
            })
            .unwrap_or_else(|e| fail("iscan", e))
    }

    /// `MPI_Iexscan`.
    #[track_caller]
    fn immediate_exclusive_scan_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iexscan);
        let _ = scope;
        let c = self.rsmpi_comm();
        later(&c, || reduction(MpiOp::Iexscan, None, &op, sent(sendbuf)));
        let (rank, size) = me(&c);
        plan_reduction(sendbuf, op, |len, _, _| sched::exscan(rank, size, len))
            .and_then(|p| {
                fits(p.input.len(), recvbuf.rsmpi_capacity())?;
                reduction_request(&c, p, Deferred::Exscan, recvbuf)
            })
            .unwrap_or_else(|e| fail("iexscan", e))
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

fn check_split(len: usize, size: u32) -> Result<()> {
    if !len.is_multiple_of(size as usize) {
        Err(Error::Request(format!(
            "{len} bytes do not split into {size} equal blocks"
        )))
    } else {
        Ok(())
    }
}

/// The root of a rooted collective (`mpi::collective::Root`): called on
/// `comm.process_at_rank(root)` by every rank; the `_root` forms are the root's.
pub trait Root: AsCommunicator {
    /// The root's rank.
    fn root_rank(&self) -> Rank;

    /// The communicator and root.
    #[doc(hidden)]
    fn rsmpi_root(&self) -> (SimpleCommunicator, Rank);

    /// The root's `buffer` on every rank (`MPI_Bcast`).
    #[track_caller]
    fn broadcast_into<Buf: BufferMut + ?Sized>(&self, buffer: &mut Buf) {
        let _t = crate::tools::call(crate::trace::format::Op::Bcast);
        let (c, root) = self.rsmpi_root();
        checked(&c, || call::broadcast(MpiOp::Bcast, root, buffer));
        let e = elem(&buffer.rsmpi_datatype());
        if let Some(bytes) = buffer.rsmpi_direct() {
            // the buffer itself is the schedule's: the root's data leaves from it and
            // everyone else's lands in it
            let (rank, size) = me(&c);
            check_root(&c, root)
                .and_then(|root| {
                    let s = sched::bcast(rank, size, root, bytes.len(), e);
                    run_into(&c, s, Cow::Owned(Vec::new()), no_op(), bytes)
                })
                .unwrap_or_else(|e| fail("broadcast", e));
            return;
        }
        plan_bcast(&c, root, buffer)
            .and_then(|p| finish_into(&c, p, buffer))
            .unwrap_or_else(|e| fail("broadcast", e))
    }

    /// `MPI_Gather` on a rank that is not the root.
    #[track_caller]
    fn gather_into<S: Buffer + ?Sized>(&self, sendbuf: &S) {
        let _t = crate::tools::call(crate::trace::format::Op::Gather);
        let (c, root) = self.rsmpi_root();
        checked(&c, || call::to_root(MpiOp::Gather, root, sendbuf));
        plan_gather(&c, root, sendbuf, None)
            .and_then(|p| run(&c, p.sched, p.input, p.op).map(recycle))
            .unwrap_or_else(|e| fail("gather", e))
    }

    /// `MPI_Gather` at the root: every rank's block in rank order in `recvbuf`.
    #[track_caller]
    fn gather_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Gather);
        let (c, root) = self.rsmpi_root();
        checked(&c, || {
            call::gather_root(MpiOp::Gather, root, sendbuf, recvbuf)
        });
        plan_gather(&c, root, sendbuf, Some(recvbuf.rsmpi_capacity()))
            .and_then(|p| finish_into(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("gather", e))
    }

    /// `MPI_Gatherv` on a rank that is not the root.
    #[track_caller]
    fn gather_varcount_into<S: Buffer + ?Sized>(&self, sendbuf: &S) {
        let _t = crate::tools::call(crate::trace::format::Op::Gatherv);
        let (c, root) = self.rsmpi_root();
        checked(&c, || call::to_root(MpiOp::Gatherv, root, sendbuf));
        plan_gatherv(&c, root, sendbuf, None)
            .and_then(|p| run(&c, p.sched, p.input, p.op).map(recycle))
            .unwrap_or_else(|e| fail("gather_varcount", e))
    }

    /// `MPI_Gatherv` at the root: blocks placed by the partition.
    #[track_caller]
    fn gather_varcount_into_root<S: Buffer + ?Sized, R: PartitionedBufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Gatherv);
        let (c, root) = self.rsmpi_root();
        checked(&c, || {
            call::gather_varcount_root(MpiOp::Gatherv, root, sendbuf, recvbuf)
        });
        let counts = byte_counts(recvbuf.counts(), &recvbuf.rsmpi_datatype());
        plan_gatherv(&c, root, sendbuf, Some(counts))
            .and_then(|p| finish_blocks(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("gather_varcount", e))
    }

    /// `MPI_Scatter` on a rank that is not the root: this rank's block into `recvbuf`.
    #[track_caller]
    fn scatter_into<R: BufferMut + ?Sized>(&self, recvbuf: &mut R) {
        let _t = crate::tools::call(crate::trace::format::Op::Scatter);
        let (c, root) = self.rsmpi_root();
        checked(&c, || call::from_root(MpiOp::Scatter, root, recvbuf));
        plan_scatter(&c, root, None, recvbuf.rsmpi_capacity())
            .and_then(|p| finish_into(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("scatter", e))
    }

    /// `MPI_Scatter` at the root: block i of `sendbuf` to rank i.
    #[track_caller]
    fn scatter_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Scatter);
        let (c, root) = self.rsmpi_root();
        checked(&c, || {
            call::scatter_root(MpiOp::Scatter, root, sendbuf, recvbuf)
        });
        sendbuf
            .rsmpi_send()
            .and_then(|s| plan_scatter(&c, root, Some(owned(s)), recvbuf.rsmpi_capacity()))
            .and_then(|p| finish_into(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("scatter", e))
    }

    /// `MPI_Scatterv` on a rank that is not the root.
    #[track_caller]
    fn scatter_varcount_into<R: BufferMut + ?Sized>(&self, recvbuf: &mut R) {
        let _t = crate::tools::call(crate::trace::format::Op::Scatterv);
        let (c, root) = self.rsmpi_root();
        checked(&c, || call::from_root(MpiOp::Scatterv, root, recvbuf));
        plan_scatterv(&c, root, None, recvbuf.rsmpi_capacity())
            .and_then(|p| finish_into(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("scatter_varcount", e))
    }

    /// `MPI_Scatterv` at the root: the partition's block i to rank i.
    #[track_caller]
    fn scatter_varcount_into_root<S: PartitionedBuffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Scatterv);
        let (c, root) = self.rsmpi_root();
        checked(&c, || {
            call::scatter_varcount_root(MpiOp::Scatterv, root, sendbuf, recvbuf)
        });
        let mut f = || -> Result<()> {
            let v = pack_blocks(sendbuf, c.size as usize)?;
            let counts = byte_counts(sendbuf.counts(), &sendbuf.rsmpi_datatype());
            let p = plan_scatterv(&c, root, Some((v, counts)), recvbuf.rsmpi_capacity())?;
            finish_into(&c, p, recvbuf)
        };
        f().unwrap_or_else(|e| fail("scatter_varcount", e))
    }

    /// `MPI_Reduce` on a rank that is not the root.
    #[track_caller]
    fn reduce_into<S: Buffer + ?Sized, O: Operation>(&self, sendbuf: &S, op: O) {
        let _t = crate::tools::call(crate::trace::format::Op::Reduce);
        let (c, root) = self.rsmpi_root();
        checked(&c, || {
            reduction(MpiOp::Reduce, Some(root), &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        check_root(&c, root)
            .and_then(|root| {
                plan_reduction(sendbuf, op, |len, e, com| {
                    sched::reduce(rank, size, root, len, e, com)
                })
            })
            .and_then(|p| run(&c, p.sched, p.input, p.op).map(recycle))
            .unwrap_or_else(|e| fail("reduce", e))
    }

    /// `MPI_Reduce` at the root: the reduction of every rank's `sendbuf`.
    #[track_caller]
    fn reduce_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) {
        let _t = crate::tools::call(crate::trace::format::Op::Reduce);
        let (c, root) = self.rsmpi_root();
        checked(&c, || {
            reduction(MpiOp::Reduce, Some(root), &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        check_root(&c, root)
            .and_then(|root| {
                plan_reduction(sendbuf, op, |len, e, com| {
                    sched::reduce(rank, size, root, len, e, com)
                })
            })
            .and_then(|p| {
                fits(p.input.len(), recvbuf.rsmpi_capacity())?;
                finish_into(&c, p, recvbuf)
            })
            .unwrap_or_else(|e| fail("reduce", e))
    }

    /// `MPI_Reduce` with `MPI_IN_PLACE` at the root: `buf` is the root's contribution
    /// and receives the result.
    #[track_caller]
    fn reduce_into_root_in_place<R: BufferMut + ?Sized, O: Operation>(&self, buf: &mut R, op: O) {
        let _t = crate::tools::call(crate::trace::format::Op::Reduce);
        let (c, root) = self.rsmpi_root();
        checked(&c, || reduction(MpiOp::Reduce, Some(root), &op, held(buf)));
        let (rank, size) = me(&c);
        let f = || -> Result<()> {
            let root = check_root(&c, root)?;
            let p = plan_in_place(buf, op, |len, e, com| {
                sched::reduce(rank, size, root, len, e, com)
            })?;
            finish_into(&c, p, buf)
        };
        f().unwrap_or_else(|e| fail("reduce", e))
    }

    /// `MPI_Ibcast`.
    #[track_caller]
    fn immediate_broadcast_into<'a, Buf, Sc>(
        &self,
        scope: Sc,
        buf: &'a mut Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Ibcast);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || call::broadcast(MpiOp::Ibcast, root, buf));
        plan_bcast(&c, root, buf)
            .and_then(|p| into_request(&c, p, buf))
            .unwrap_or_else(|e| fail("ibcast", e))
    }

    /// `MPI_Igather` on a rank that is not the root.
    #[track_caller]
    fn immediate_gather_into<'a, S, Sc>(&self, scope: Sc, sendbuf: &'a S) -> Request<'a, S, Sc>
    where
        S: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Igather);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || call::to_root(MpiOp::Igather, root, sendbuf));
        plan_gather(&c, root, sendbuf, None)
            .and_then(|p| send_only_request(&c, p, sendbuf))
            .unwrap_or_else(|e| fail("igather", e))
    }

    /// `MPI_Igather` at the root.
    #[track_caller]
    fn immediate_gather_into_root<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Igather);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || {
            call::gather_root(MpiOp::Igather, root, sendbuf, recvbuf)
        });
        plan_gather(&c, root, sendbuf, Some(recvbuf.rsmpi_capacity()))
            .and_then(|p| into_request(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("igather", e))
    }

    /// `MPI_Igatherv` on a rank that is not the root.
    #[track_caller]
    fn immediate_gather_varcount_into<'a, Sc, S>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
    ) -> Request<'a, S, Sc>
    where
        S: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Igatherv);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || call::to_root(MpiOp::Igatherv, root, sendbuf));
        plan_gatherv(&c, root, sendbuf, None)
            .and_then(|p| send_only_request(&c, p, sendbuf))
            .unwrap_or_else(|e| fail("igatherv", e))
    }

    /// `MPI_Igatherv` at the root.
    #[track_caller]
    fn immediate_gather_varcount_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + PartitionedBufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Igatherv);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || {
            call::gather_varcount_root(MpiOp::Igatherv, root, sendbuf, recvbuf)
        });
        let counts = byte_counts(recvbuf.counts(), &recvbuf.rsmpi_datatype());
        plan_gatherv(&c, root, sendbuf, Some(counts))
            .and_then(|p| into_request_blocks(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("igatherv", e))
    }

    /// `MPI_Iscatter` on a rank that is not the root.
    #[track_caller]
    fn immediate_scatter_into<'a, Sc, R>(&self, scope: Sc, recvbuf: &'a mut R) -> Request<'a, R, Sc>
    where
        R: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iscatter);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || call::from_root(MpiOp::Iscatter, root, recvbuf));
        plan_scatter(&c, root, None, recvbuf.rsmpi_capacity())
            .and_then(|p| into_request(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("iscatter", e))
    }

    /// `MPI_Iscatter` at the root.
    #[track_caller]
    fn immediate_scatter_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iscatter);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || {
            call::scatter_root(MpiOp::Iscatter, root, sendbuf, recvbuf)
        });
        sendbuf
            .rsmpi_send()
            .and_then(|s| plan_scatter(&c, root, Some(owned(s)), recvbuf.rsmpi_capacity()))
            .and_then(|p| into_request(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("iscatter", e))
    }

    /// `MPI_Iscatterv` on a rank that is not the root.
    #[track_caller]
    fn immediate_scatter_varcount_into<'a, Sc, R>(
        &self,
        scope: Sc,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        R: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iscatterv);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || call::from_root(MpiOp::Iscatterv, root, recvbuf));
        plan_scatterv(&c, root, None, recvbuf.rsmpi_capacity())
            .and_then(|p| into_request(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("iscatterv", e))
    }

    /// `MPI_Iscatterv` at the root.
    #[track_caller]
    fn immediate_scatter_varcount_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + PartitionedBuffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Iscatterv);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || {
            call::scatter_varcount_root(MpiOp::Iscatterv, root, sendbuf, recvbuf)
        });
        let p = pack_blocks(sendbuf, c.size as usize).and_then(|v| {
            let counts = byte_counts(sendbuf.counts(), &sendbuf.rsmpi_datatype());
            plan_scatterv(&c, root, Some((v, counts)), recvbuf.rsmpi_capacity())
        });
        p.and_then(|p| into_request(&c, p, recvbuf))
            .unwrap_or_else(|e| fail("iscatterv", e))
    }

    /// `MPI_Ireduce` on a rank that is not the root.
    #[track_caller]
    fn immediate_reduce_into<'a, Sc, S, O>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        op: O,
    ) -> Request<'a, S, Sc>
    where
        S: 'a + Buffer + ?Sized,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Ireduce);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || {
            reduction(MpiOp::Ireduce, Some(root), &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        check_root(&c, root)
            .and_then(|root| {
                let p = plan_reduction(sendbuf, op, |len, e, com| {
                    sched::reduce(rank, size, root, len, e, com)
                })?;
                // the root reduces a deferred user operation; here nothing is left
                let (p, _) = defer_user(&c, p, Deferred::Reduce(root));
                send_only_request(&c, p, sendbuf)
            })
            .unwrap_or_else(|e| fail("ireduce", e))
    }

    /// `MPI_Ireduce` at the root.
    #[track_caller]
    fn immediate_reduce_into_root<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer + ?Sized,
        R: 'a + BufferMut + ?Sized,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let _t = crate::tools::call(crate::trace::format::Op::Ireduce);
        let _ = scope;
        let (c, root) = self.rsmpi_root();
        later(&c, || {
            reduction(MpiOp::Ireduce, Some(root), &op, sent(sendbuf))
        });
        let (rank, size) = me(&c);
        check_root(&c, root)
            .and_then(|root| {
                let p = plan_reduction(sendbuf, op, |len, e, com| {
                    sched::reduce(rank, size, root, len, e, com)
                })?;
                fits(p.input.len(), recvbuf.rsmpi_capacity())?;
                reduction_request(&c, p, Deferred::Reduce(root), recvbuf)
            })
            .unwrap_or_else(|e| fail("ireduce", e))
    }
}

impl Root for Process<'_> {
    fn root_rank(&self) -> Rank {
        self.rank
    }
    fn rsmpi_root(&self) -> (SimpleCommunicator, Rank) {
        (self.comm, self.rank)
    }
}

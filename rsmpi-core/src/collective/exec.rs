//! Runs the schedules of `rsmpi-coll` over point-to-point messages on a
//! communicator's internal context.
//!
//! Every collective call takes the next sequence number of its communicator (all ranks
//! call collectives in the same order, so they agree) and uses it as its tag, so
//! collectives in flight at once never match each other's messages, and none matches
//! user traffic (another context). Immediate collectives live in the library state and
//! move forward inside every progress call (so one progresses while its caller blocks
//! elsewhere); a blocking collective runs in its caller's frame, which also drives the
//! progress of everything else. A user operation is a closure the caller only lends
//! for the length of a blocking collective; immediate collectives with a user operation
//! therefore gather and reduce when their request completes
//! (`collective::defer_user`), so no schedule ever waits for a closure.
//!
//! Buffers (the schedule's, receive landing buffers, the copies of sends that cannot
//! leave at once) come from a pool, so that a collective repeated in a loop allocates,
//! zeroes and faults in no new memory.

use super::ops::{apply_system, Reducer, SysOp};
use crate::datatype::Prim;
use crate::error::{Error, Result};
use crate::point_to_point::{start_recv, start_send, SendArg};
use crate::progress::{Done, Key, RecvDst, State};
use crate::topology::SimpleCommunicator;
use matching::{RecvOutcome, SendMode, Source, TagSel};
use rsmpi_coll::{Schedule, Step};
use std::rc::Rc;
use transport::mem::RegionId;

/// The reduction of an execution.
pub(crate) enum ExecOp {
    /// The schedule has no reduction.
    None,
    /// A predefined operation on basic values.
    System(SysOp, Prim),
    /// A user operation, lent by a blocking collective's caller.
    User,
}

/// Reusable byte buffers.
#[derive(Default)]
pub(crate) struct Pool(Vec<Vec<u8>>);

/// Buffers kept at most; larger ones than this are not kept.
const POOL_BUFFERS: usize = 32;
const POOL_MAX_BYTES: usize = 64 << 20;

impl Pool {
    /// A buffer of `n` bytes (its contents are whatever it held: callers overwrite or
    /// receive into all of it).
    pub fn take(&mut self, n: usize) -> Vec<u8> {
        let best = (0..self.0.len())
            .filter(|&i| self.0[i].capacity() >= n)
            .min_by_key(|&i| self.0[i].capacity());
        let mut v = match best {
            Some(i) => self.0.swap_remove(i),
            None => Vec::with_capacity(n),
        };
        v.resize(n, 0);
        v.truncate(n);
        v
    }

    /// Returns a buffer for reuse.
    pub fn give(&mut self, v: Vec<u8>) {
        if v.capacity() > 0 && v.capacity() <= POOL_MAX_BYTES {
            if self.0.len() >= POOL_BUFFERS {
                // keep the larger ones
                if let Some((i, _)) = self.0.iter().enumerate().min_by_key(|(_, b)| b.capacity()) {
                    if self.0[i].capacity() < v.capacity() {
                        self.0[i] = v;
                    }
                }
            } else {
                self.0.push(v);
            }
        }
    }
}

/// A schedule's first buffer: the library's copy of the contribution, or the caller's
/// own bytes lent for a blocking collective (never written: `Schedule::writes_input`).
pub(crate) enum Input {
    Owned(Vec<u8>),
    Lent(RegionId),
}

/// A receive's buffer index and length, checked at the fence.
type Landing = (usize, usize);

/// One collective in progress. Its buffers live in the region table, so that sends
/// leave from them and receives land in them with no copy (`SendSrc::Slice`,
/// `RecvDst::Slice`); the result buffer may be the caller's own (lent) buffer.
pub(crate) struct Exec {
    comm: SimpleCommunicator,
    tag: i32,
    sched: Rc<Schedule>,
    pc: usize,
    bufs: Vec<RegionId>,
    /// The buffer lent by the caller (the result lands there), not the library's.
    lent: Option<usize>,
    /// Whether `bufs[0]` is the caller's lent contribution.
    lent_input: bool,
    /// Posted operations since the last fence: key, and where a receive lands.
    posted: Vec<(Key, Option<Landing>)>,
    op: ExecOp,
    /// Small sends are copied here to try the send fast path.
    scratch: Vec<u8>,
}

/// An execution's vectors, kept from one that finished for the next one, so that a
/// collective called in a loop allocates none.
#[derive(Default)]
pub(crate) struct Parts {
    bufs: Vec<RegionId>,
    posted: Vec<(Key, Option<Landing>)>,
    scratch: Vec<u8>,
}

/// Sets of [`Parts`] kept at most (one per execution in progress at once).
const PARTS_KEPT: usize = 8;

/// The immediate collectives in progress, the sequence numbers of each communicator,
/// and the buffer pool.
#[derive(Default)]
pub(crate) struct Colls {
    next: u64,
    active: Vec<(u64, Exec)>,
    seq: rustc_hash::FxHashMap<u32, u32>,
    pub pool: Pool,
    /// Vectors of finished executions.
    parts: Vec<Parts>,
    /// Schedules by the shape of the call (`collective::sched`).
    pub cache: rustc_hash::FxHashMap<super::sched::Key, Rc<Schedule>>,
    /// The shape last looked up, and its schedule (also in `cache`).
    pub last: Option<(super::sched::Key, Rc<Schedule>)>,
}

/// Sends up to this size try the fast path (a copy into `Exec::scratch`); larger
/// ones leave from the schedule's buffer.
const FAST_SEND: usize = 4096;

impl Exec {
    /// An execution of `sched` on `comm` with `input` as `bufs[0]`. With `out`, the
    /// caller's region of exactly the result's size is the result buffer (when the
    /// result is `bufs[0]`, a broadcast, the region also holds the root's input and
    /// `input` is ignored).
    pub(crate) fn new(
        s: &mut State,
        comm: &SimpleCommunicator,
        sched: Rc<Schedule>,
        input: Input,
        out: Option<RegionId>,
        op: ExecOp,
    ) -> Exec {
        let seq = s.colls.seq.entry(comm.ctx).or_insert(0);
        let tag = (*seq & 0xf_ffff) as i32;
        *seq = seq.wrapping_add(1);
        let lent = out.map(|_| sched.result.0 .0 as usize);
        let (mut owned_in, mut lent_in) = match input {
            Input::Owned(v) => (Some(v), None),
            Input::Lent(r) => (None, Some(r)),
        };
        if lent == Some(0) {
            // the result is the first buffer (a broadcast, or a reduction of one rank):
            // the caller's result buffer is it, holding the contribution if there is one
            let out = out.expect("lent");
            if let Some(r) = lent_in.take() {
                if let Some((a, b)) = s.regions.pair(r, out) {
                    let k = a.len().min(b.len());
                    b[..k].copy_from_slice(&a[..k]);
                }
            } else if let Some(v) = owned_in.take().filter(|v| !v.is_empty()) {
                let b = s.regions.slice_mut(out).expect("lent");
                let k = v.len().min(b.len());
                b[..k].copy_from_slice(&v[..k]);
            }
        }
        let lent_input = lent_in.is_some();
        let Parts {
            mut bufs,
            posted,
            scratch,
        } = s.colls.parts.pop().unwrap_or_default();
        bufs.extend(sched.bufs.iter().enumerate().map(|(i, &n)| {
            if lent == Some(i) {
                return out.expect("lent");
            }
            if i == 0 {
                if let Some(r) = lent_in.take() {
                    return r;
                }
            }
            let b = match owned_in.take_if(|v| i == 0 && v.len() == n) {
                Some(v) => v,
                None => {
                    let mut b = s.colls.pool.take(n);
                    let v = if i == 0 {
                        owned_in.take().unwrap_or_default()
                    } else {
                        Vec::new()
                    };
                    let k = v.len().min(n);
                    b[..k].copy_from_slice(&v[..k]);
                    b[k..].fill(0);
                    b
                }
            };
            s.regions.insert_owned(b)
        }));
        Exec {
            comm: comm.internal(),
            tag,
            sched,
            pc: 0,
            bufs,
            lent,
            lent_input,
            posted,
            op,
            scratch,
        }
    }

    /// Runs the steps as far as they go: `Some(result)` once finished (empty when the
    /// result is in the caller's lent buffer).
    pub(crate) fn step(
        &mut self,
        s: &mut State,
        user: Option<&Reducer<'_>>,
    ) -> Result<Option<Vec<u8>>> {
        match self.run(s, user) {
            Ok(false) => Ok(None),
            Ok(true) => Ok(Some(self.finish(s))),
            Err(err) => {
                // the operations already posted may still land in the buffers: the
                // library's stay in the table, the caller's are waited for on drop
                for (k, _) in &self.posted {
                    s.cancel(*k);
                }
                if self.lent.is_none() && !self.lent_input {
                    self.posted.clear();
                }
                Err(err)
            }
        }
    }

    /// The result, and the buffers back to the pool.
    fn finish(&mut self, s: &mut State) -> Vec<u8> {
        let (b, off, len) = self.sched.result;
        let b = b.0 as usize;
        let mine = |i: usize| self.lent == Some(i) || (i == 0 && self.lent_input);
        let mut out = None;
        if self.lent == Some(b) {
            out = Some(Vec::new()); // already in the caller's buffer
        } else if mine(b) {
            // the result is the caller's lent contribution, unchanged (one rank)
            let mut v = s.colls.pool.take(len);
            v.copy_from_slice(&s.regions.slice(self.bufs[b]).expect("lent")[off..off + len]);
            out = Some(v);
        }
        let mut bufs = std::mem::take(&mut self.bufs);
        for (i, id) in bufs.drain(..).enumerate() {
            if mine(i) {
                continue; // the caller's
            }
            let v = s.regions.take_owned(id).expect("an owned buffer");
            if i == b && out.is_none() {
                if off == 0 && len == v.len() {
                    out = Some(v);
                    continue;
                }
                let mut r = s.colls.pool.take(len);
                r.copy_from_slice(&v[off..off + len]);
                out = Some(r);
            }
            s.colls.pool.give(v);
        }
        if s.colls.parts.len() < PARTS_KEPT {
            s.colls.parts.push(Parts {
                bufs,
                posted: std::mem::take(&mut self.posted),
                scratch: std::mem::take(&mut self.scratch),
            });
        }
        out.unwrap_or_default()
    }

    fn run(&mut self, s: &mut State, user: Option<&Reducer<'_>>) -> Result<bool> {
        let ctx = self.comm.ctx;
        loop {
            let Some(step) = self.sched.steps.get(self.pc) else {
                return Ok(self.posted.is_empty() || self.fence(s)?);
            };
            match *step {
                Step::Send { to, buf, off, len } => {
                    let dest = s.world_rank(ctx, to as i32);
                    let id = self.bufs[buf.0 as usize];
                    let mut sent = false;
                    if len <= FAST_SEND {
                        let bytes = &s.regions.slice(id).expect("buffer")[off..off + len];
                        self.scratch.clear();
                        self.scratch.extend_from_slice(bytes);
                        sent =
                            s.send_now::<crate::tools::On>(ctx, dest, self.tag, &self.scratch)?;
                    }
                    if !sent {
                        let arg = SendArg::Slice(id, off, len);
                        let k = start_send::<crate::tools::On>(
                            s,
                            ctx,
                            dest,
                            self.tag,
                            arg,
                            SendMode::Standard,
                        )?;
                        self.posted.push((k, None));
                    }
                }
                Step::Recv {
                    from,
                    buf,
                    off,
                    len,
                } => {
                    let src = s.world_rank(ctx, from as i32);
                    let dst = RecvDst::Slice(self.bufs[buf.0 as usize], off, len);
                    let k = start_recv::<crate::tools::On>(
                        s,
                        ctx,
                        Source::Rank(src),
                        TagSel::Tag(self.tag),
                        dst,
                    )?;
                    self.posted.push((k, Some((buf.0 as usize, len))));
                }
                Step::Fence => {
                    if !self.fence(s)? {
                        return Ok(false);
                    }
                }
                Step::Copy {
                    src,
                    src_off,
                    dst,
                    dst_off,
                    len,
                } => {
                    let (a, b) = self.ranges(s, src.0, src_off, dst.0, dst_off, len);
                    b.copy_from_slice(a);
                }
                Step::Reduce {
                    src,
                    src_off,
                    dst,
                    dst_off,
                    len,
                } => {
                    if let (ExecOp::User, None) = (&self.op, user) {
                        return Ok(false); // lent by the blocking caller only
                    }
                    let (a, b) = self.ranges(s, src.0, src_off, dst.0, dst_off, len);
                    match self.op {
                        ExecOp::System(op, p) => apply_system(op, p, a, b),
                        ExecOp::User => user.expect("lent")(a, b)?,
                        ExecOp::None => {
                            return Err(Error::Request(
                                "a reduction step without an operation".into(),
                            ))
                        }
                    }
                }
            }
            self.pc += 1;
        }
    }

    /// `bufs[a][a_off..+len]` to read and `bufs[b][b_off..+len]` to write (schedules
    /// never let the two overlap).
    fn ranges<'s>(
        &self,
        s: &'s mut State,
        a: u16,
        a_off: usize,
        b: u16,
        b_off: usize,
        len: usize,
    ) -> (&'s [u8], &'s mut [u8]) {
        let (ra, rb) = (self.bufs[a as usize], self.bufs[b as usize]);
        if a == b {
            let v = s.regions.slice_mut(ra).expect("buffer");
            if a_off < b_off {
                let (x, y) = v.split_at_mut(b_off);
                (&x[a_off..a_off + len], &mut y[..len])
            } else {
                let (x, y) = v.split_at_mut(a_off);
                (&y[..len], &mut x[b_off..b_off + len])
            }
        } else {
            let (x, y) = s.regions.pair(ra, rb).expect("two distinct buffers");
            (&x[a_off..a_off + len], &mut y[b_off..b_off + len])
        }
    }

    /// The operation this execution waits for (the first posted one not done yet),
    /// for the deadlock detector.
    pub(crate) fn pending(&self, s: &State) -> Option<Key> {
        self.posted.iter().map(|(k, _)| *k).find(|k| !s.is_done(k))
    }

    /// Completes the posted operations if all are done; false while some are pending.
    fn fence(&mut self, s: &mut State) -> Result<bool> {
        if let [(k, dst)] = self.posted[..] {
            // one operation (a small collective's receive): taken in one look
            let Some(done) = s.take_done(&k) else {
                return Ok(false);
            };
            self.posted.clear();
            return landed(done, dst).map(|()| true);
        }
        if !self.posted.iter().all(|(k, _)| s.is_done(k)) {
            return Ok(false);
        }
        for (k, dst) in self.posted.drain(..) {
            landed(s.take_done(&k).expect("done"), dst)?;
        }
        Ok(true)
    }
}

/// Checks a completed operation of a fence: a receive (`dst`: where it landed) must have
/// brought exactly the bytes the schedule expects.
fn landed(done: Done, dst: Option<Landing>) -> Result<()> {
    let Some((_, len)) = dst else {
        return Ok(());
    };
    match done {
        Done::Recv(RecvOutcome::Received {
            len: got,
            truncated_from,
            ..
        }) => {
            if truncated_from.is_some() || got as usize != len {
                return Err(Error::Request(format!(
                    "collective: a rank contributed {} bytes where {len} were expected (counts or datatypes differ between ranks)",
                    truncated_from.unwrap_or(got)
                )));
            }
            Ok(())
        }
        _ => Err(Error::Request("collective: a receive was cancelled".into())),
    }
}

/// A blocking collective left early (an error, or a panic in a user operation) may
/// still have operations in flight on the caller's lent buffers: they are cancelled
/// and waited for before the buffers go back to the caller. (Executions in the
/// library state never hold lent buffers, so this never runs inside the state.)
impl Drop for Exec {
    fn drop(&mut self) {
        if (self.lent.is_none() && !self.lent_input) || self.posted.is_empty() {
            return;
        }
        let keys: Vec<Key> = self.posted.drain(..).map(|(k, _)| k).collect();
        let live = crate::progress::try_with(|s| {
            keys.iter().for_each(|&k| s.cancel(k));
            s.run_outputs();
        });
        if live.is_ok() {
            keys.into_iter().for_each(|k| {
                crate::progress::wait(k);
            });
        }
    }
}

/// Starts an immediate collective in the library state; returns its key. Its result
/// goes to `owned_done` under that key when it completes.
pub(crate) fn start(
    s: &mut State,
    comm: &SimpleCommunicator,
    sched: Rc<Schedule>,
    input: Vec<u8>,
    op: ExecOp,
) -> Key {
    let e = Exec::new(s, comm, sched, Input::Owned(input), None, op);
    s.colls.next += 1;
    let id = s.colls.next;
    s.colls.active.push((id, e));
    // a first step at once: what can be sent leaves now
    let i = s.colls.active.len() - 1;
    advance_at(s, i);
    Key::Coll(id)
}

/// The point-to-point request the immediate collective `id` waits for next (for the
/// deadlock detector, as a blocking collective's [`Exec::pending`]); `None` once it
/// has finished, or while it waits for nothing.
pub(crate) fn pending_of(s: &State, id: u64) -> Option<Key> {
    let (_, e) = s.colls.active.iter().find(|(i, _)| *i == id)?;
    e.pending(s)
}

/// Moves every immediate collective forward (inside `State::progress`). Inlined:
/// with none active, a progress pays one comparison, not a call.
#[inline(always)]
pub(crate) fn advance_all(s: &mut State) {
    let mut i = 0;
    while i < s.colls.active.len() {
        if !advance_at(s, i) {
            i += 1;
        }
    }
}

/// Advances the execution at index `i`; true if it finished (and was removed).
fn advance_at(s: &mut State, i: usize) -> bool {
    let (id, mut e) = s.colls.active.swap_remove(i);
    let done = match e.step(s, None) {
        Ok(None) => None,
        Ok(Some(out)) => Some(Ok(out)),
        Err(err) => Some(Err(err)),
    };
    match done {
        None => {
            // back in its place (swap_remove moved the last one here)
            s.colls.active.push((id, e));
            let last = s.colls.active.len() - 1;
            s.colls.active.swap(i, last);
            false
        }
        Some(r) => {
            let key = Key::Coll(id);
            match r {
                Ok(out) => {
                    s.owned_done.insert(key, out);
                    s.done.insert(key, Done::Coll(Ok(())));
                }
                Err(err) => {
                    s.done.insert(key, Done::Coll(Err(err)));
                }
            }
            true
        }
    }
}

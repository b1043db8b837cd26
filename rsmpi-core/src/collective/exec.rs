//! Runs the schedules of `rsmpi-coll` over point-to-point messages on a
//! communicator's internal context.
//!
//! Every collective call takes the next sequence number of its communicator (all ranks
//! call collectives in the same order, so they agree) and uses it as its tag, so
//! collectives in flight at once never match each other's messages, and none matches
//! user traffic (another context). Executions live in the library state and move
//! forward inside every progress call (so an immediate collective progresses while its
//! caller blocks elsewhere). A user operation is a closure the caller only lends for
//! the length of a blocking collective (`advance_with`); immediate collectives with a
//! user operation therefore gather and reduce when their request completes
//! (`collective::defer_user`), so no schedule ever waits for a closure.

use super::ops::{apply_system, Reducer, SysOp};
use crate::datatype::Prim;
use crate::error::{Error, Result};
use crate::point_to_point::{start_recv, start_send, SendArg};
use crate::progress::{Done, Key, RecvDst, State};
use crate::topology::SimpleCommunicator;
use matching::{RecvOutcome, SendMode, Source, TagSel};
use rsmpi_coll::{Schedule, Step};

/// The reduction of an execution.
pub(crate) enum ExecOp {
    /// The schedule has no reduction.
    None,
    /// A predefined operation on basic values.
    System(SysOp, Prim),
    /// A user operation, lent at each wait or test.
    User,
}

/// One collective in progress.
pub(crate) struct Exec {
    id: u64,
    comm: SimpleCommunicator,
    tag: i32,
    sched: Schedule,
    pc: usize,
    bufs: Vec<Vec<u8>>,
    /// Posted operations since the last fence: key, and where a receive lands.
    posted: Vec<(Key, Option<(usize, usize, usize)>)>,
    op: ExecOp,
}

/// The collectives in progress and the sequence numbers of each communicator.
#[derive(Default)]
pub(crate) struct Colls {
    next: u64,
    active: Vec<Exec>,
    seq: rustc_hash::FxHashMap<u32, u32>,
}

/// Starts `sched` on `comm` with `input` as `bufs[0]`; returns its key. The result
/// goes to `owned_done` under that key when it completes.
pub(crate) fn start(
    s: &mut State,
    comm: &SimpleCommunicator,
    sched: Schedule,
    input: Vec<u8>,
    op: ExecOp,
) -> Key {
    let seq = s.colls.seq.entry(comm.ctx).or_insert(0);
    let tag = (*seq & 0xf_ffff) as i32;
    *seq = seq.wrapping_add(1);
    s.colls.next += 1;
    let id = s.colls.next;
    let mut bufs: Vec<Vec<u8>> = sched.bufs.iter().map(|&n| vec![0u8; n]).collect();
    let n = input.len().min(bufs[0].len());
    bufs[0][..n].copy_from_slice(&input[..n]);
    let mut e = Exec {
        id,
        comm: comm.internal(),
        tag,
        sched,
        pc: 0,
        bufs,
        posted: Vec::new(),
        op,
    };
    if !advance(s, &mut e, None) {
        s.colls.active.push(e);
    }
    Key::Coll(id)
}

/// Moves every collective in progress forward (inside `State::progress`).
pub(crate) fn advance_all(s: &mut State) {
    if s.colls.active.is_empty() {
        return;
    }
    let mut active = std::mem::take(&mut s.colls.active);
    active.retain_mut(|e| !advance(s, e, None));
    active.append(&mut s.colls.active);
    s.colls.active = active;
}

/// Moves the collective of `key` forward with its user operation lent.
pub(crate) fn advance_with(s: &mut State, key: Key, user: &Reducer<'_>) {
    let Key::Coll(id) = key else { return };
    if let Some(i) = s.colls.active.iter().position(|e| e.id == id) {
        let mut e = s.colls.active.swap_remove(i);
        if !advance(s, &mut e, Some(user)) {
            s.colls.active.push(e);
        }
    }
}

/// Runs the steps of `e` as far as they go; returns true once it has finished (its
/// result and completion are then in the state).
fn advance(s: &mut State, e: &mut Exec, user: Option<&Reducer<'_>>) -> bool {
    match run(s, e, user) {
        Ok(false) => false,
        Ok(true) => {
            let (b, off, len) = e.sched.result;
            let out = e.bufs[b.0 as usize][off..off + len].to_vec();
            s.owned_done.insert(Key::Coll(e.id), out);
            s.done.insert(Key::Coll(e.id), Done::Coll(Ok(())));
            true
        }
        Err(err) => {
            // the operations already posted finish on their own; their results are
            // dropped with the execution
            for (k, _) in e.posted.drain(..) {
                s.cancel(k);
            }
            s.done.insert(Key::Coll(e.id), Done::Coll(Err(err)));
            true
        }
    }
}

fn run(s: &mut State, e: &mut Exec, user: Option<&Reducer<'_>>) -> Result<bool> {
    loop {
        let Some(step) = e.sched.steps.get(e.pc) else {
            return Ok(e.posted.is_empty() || fence(s, e)?);
        };
        match *step {
            Step::Send { to, buf, off, len } => {
                let dest = s.world_rank(e.comm.ctx, to as i32);
                let bytes = &e.bufs[buf.0 as usize][off..off + len];
                if !s.send_now(e.comm.ctx, dest, e.tag, bytes)? {
                    let v = bytes.to_vec();
                    let k = start_send(
                        s,
                        e.comm.ctx,
                        dest,
                        e.tag,
                        SendArg::Packed(v),
                        SendMode::Standard,
                    )?;
                    e.posted.push((k, None));
                }
            }
            Step::Recv {
                from,
                buf,
                off,
                len,
            } => {
                let src = s.world_rank(e.comm.ctx, from as i32);
                let k = start_recv(
                    s,
                    e.comm.ctx,
                    Source::Rank(src),
                    TagSel::Tag(e.tag),
                    RecvDst::Owned(vec![0; len]),
                )?;
                e.posted.push((k, Some((buf.0 as usize, off, len))));
            }
            Step::Fence => {
                if !fence(s, e)? {
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
                let v = e.bufs[src.0 as usize][src_off..src_off + len].to_vec();
                e.bufs[dst.0 as usize][dst_off..dst_off + len].copy_from_slice(&v);
            }
            Step::Reduce {
                src,
                src_off,
                dst,
                dst_off,
                len,
            } => {
                let a = e.bufs[src.0 as usize][src_off..src_off + len].to_vec();
                let b = &mut e.bufs[dst.0 as usize][dst_off..dst_off + len];
                match e.op {
                    ExecOp::System(op, p) => apply_system(op, p, &a, b),
                    ExecOp::User => match user {
                        Some(f) => f(&a, b)?,
                        None => return Ok(false), // wait for the caller to lend it
                    },
                    ExecOp::None => {
                        return Err(Error::Request(
                            "a reduction step without an operation".into(),
                        ))
                    }
                }
            }
        }
        e.pc += 1;
    }
}

/// Completes the posted operations if all are done; false while some are pending.
fn fence(s: &mut State, e: &mut Exec) -> Result<bool> {
    if !e.posted.iter().all(|(k, _)| s.done.contains_key(k)) {
        return Ok(false);
    }
    for (k, dst) in e.posted.drain(..) {
        let done = s.done.remove(&k).expect("done");
        let Some((b, off, len)) = dst else {
            continue;
        };
        let data = s.owned_done.remove(&k).unwrap_or_default();
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
                e.bufs[b][off..off + len].copy_from_slice(&data[..len]);
            }
            _ => return Err(Error::Request("collective: a receive was cancelled".into())),
        }
    }
    Ok(true)
}

//! Point-to-point messaging (`mpi::point_to_point`): [`Destination`] (sends) and
//! [`Source`] (receives, probes) on the processes of a communicator, [`Status`],
//! [`Message`] and the `send_receive` family.
//!
//! ```no_run
//! use rsmpi::traits::*;
//!
//! let universe = rsmpi::initialize().unwrap();
//! let world = universe.world();
//! if world.rank() == 0 {
//!     world.process_at_rank(1).send_with_tag(&[1.0f64; 4][..], 7);
//! } else if world.rank() == 1 {
//!     let (v, status) = world.process_at_rank(0).receive_vec_with_tag::<f64>(7);
//!     assert_eq!((v, status.tag()), (vec![1.0; 4], 7));
//! }
//! ```

use crate::check::types::TypeSig;
use crate::datatype::{Buffer, BufferMut, Count, Datatype, Equivalence, UserDatatype};
use crate::error::{Error, Result};
use crate::progress::{self, Key, RecvDst, SendSrc};
use crate::request::{Data, Loan, Pending, Request, Scope};
use crate::tools;
use crate::topology::{
    fail, AnyProcess, AsCommunicator, Communicator, CommunicatorRelation, Process, Rank,
    SimpleCommunicator, PROC_NULL,
};
use crate::trace::format::Op;
use matching::{RecvId, RecvOutcome, RecvSpec, SendMode, SendSpec, Source as Src, TagSel};
use std::borrow::Cow;
use std::panic::Location;
use transport::mem::RegionId;

/// A message tag.
pub type Tag = i32;

/// `use rsmpi::point_to_point::traits::*`.
pub mod traits {
    pub use super::{Destination, MatchedReceiveVec, Source};
}

/// What a receive or probe reports (`MPI_Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub(crate) source: Rank,
    pub(crate) tag: Tag,
    pub(crate) len: u64,
    pub(crate) cancelled: bool,
}

impl Status {
    /// The status of a request that carried no message to this rank (a send, a
    /// collective, a cancelled request): no source, no tag, no bytes.
    pub(crate) const fn empty(cancelled: bool) -> Status {
        Status {
            source: -1,
            tag: -1,
            len: 0,
            cancelled,
        }
    }

    /// The rank that sent the message.
    pub fn source_rank(&self) -> Rank {
        self.source
    }
    /// The message's tag.
    pub fn tag(&self) -> Tag {
        self.tag
    }
    /// The number of elements of datatype `d` received (`MPI_Get_count`).
    pub fn count<D: Datatype>(&self, d: D) -> Count {
        let size = d.type_map().size();
        self.len.checked_div(size).unwrap_or(0) as Count
    }
    /// The message length in bytes.
    pub fn count_bytes(&self) -> u64 {
        self.len
    }
    /// Whether a cancel won (`MPI_Test_cancelled`).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
    pub(crate) fn proc_null() -> Status {
        Status {
            source: PROC_NULL,
            tag: -1,
            len: 0,
            cancelled: false,
        }
    }
}

fn check_tag(t: Tag) -> Result<()> {
    if t < 0 {
        Err(Error::InvalidTag(t))
    } else {
        Ok(())
    }
}

fn tagsel(tag: Option<Tag>) -> Result<TagSel> {
    match tag {
        None => Ok(TagSel::Any),
        Some(t) => check_tag(t).map(|_| TagSel::Tag(t)),
    }
}

/// The data of a send: a lent buffer, or packed elements the library keeps.
pub(crate) enum SendArg {
    Region(RegionId),
    Packed(Vec<u8>),
    /// A range of a region (a collective's buffer).
    Slice(RegionId, usize, usize),
}

/// Starts a send of `arg` to world rank `dest` (a request kept in the library).
/// `W`: whether the tools' hooks are compiled into this copy ([`tools::Mode`]; the
/// callers that do not split on the tools' switch pass [`tools::On`], whose hooks
/// look for the tools).
#[inline(never)]
pub(crate) fn start_send<W: tools::Mode>(
    s: &mut progress::State,
    ctx: u32,
    dest: u32,
    tag: Tag,
    arg: SendArg,
    mode: SendMode,
) -> Result<Key> {
    let src = match (arg, mode) {
        (SendArg::Region(r), SendMode::Buffered) => {
            SendSrc::Owned(s.regions.slice(r).expect("lent").to_vec())
        }
        (SendArg::Packed(v), SendMode::Buffered) => SendSrc::Owned(v),
        (SendArg::Slice(r, off, len), SendMode::Buffered) => {
            SendSrc::Owned(s.regions.slice(r).expect("lent")[off..off + len].to_vec())
        }
        (SendArg::Region(r), _) => SendSrc::Region(r),
        (SendArg::Slice(r, off, len), _) => SendSrc::Slice(r, off, len),
        (SendArg::Packed(v), _) => SendSrc::Packed(v),
    };
    let (addr, len) = match &src {
        SendSrc::Region(r) => (
            s.regions.addr(*r).expect("lent"),
            s.regions.len(*r).expect("lent"),
        ),
        SendSrc::Slice(r, off, len) => (s.regions.addr(*r).expect("lent") + off, *len),
        SendSrc::Owned(v) | SendSrc::Packed(v) => (v.as_ptr() as usize, v.len()),
    };
    let (buf, registered) = s.expose_if(|s| s.send_is_read(len), addr, len)?;
    let spec = SendSpec {
        dest,
        tag,
        ctx,
        len: len as u64,
        mode,
        read_advised: s.read_advised(dest, len, mode),
        buf: progress::to_matching(buf),
    };
    let id = s.engine.start_send(spec)?;
    if let (true, Some(t)) = (W::ON, s.tools_mut()) {
        t.sent(dest, ctx, tag, len as u64, Some(id));
    }
    if registered {
        s.exposed(Key::Send(id), buf);
    }
    if let SendSrc::Region(r) = &src {
        s.by_region.insert(*r, Key::Send(id));
    }
    s.send_src.insert(id, src);
    s.run_outputs();
    Ok(Key::Send(id))
}

/// Posts a receive into `dst` (a request kept in the library); `W` as for
/// [`start_send`].
#[inline(never)]
pub(crate) fn start_recv<W: tools::Mode>(
    s: &mut progress::State,
    ctx: u32,
    source: Src,
    tag: TagSel,
    dst: RecvDst,
) -> Result<Key> {
    // a message that came before its receive: taken out of line (the common case, a
    // receive posted in time, as it was)
    if s.engine.has_unexpected() {
        return start_recv_early::<W>(s, ctx, source, tag, dst);
    }
    let mut dst = dst;
    let (spec, buf, registered) = recv_spec(s, ctx, source, tag, &mut dst)?;
    let id = s.engine.post_recv_in_time(spec)?;
    Ok(recv_posted::<W>(
        s,
        id,
        (ctx, source, tag),
        dst,
        registered.then_some(buf),
    ))
}

/// [`start_recv`] while messages wait for their receives: one that takes a message
/// already here completes at once, with no queue between
/// ([`matching::Posting::Early`], [`progress::State::early_done`]).
#[inline(never)]
fn start_recv_early<W: tools::Mode>(
    s: &mut progress::State,
    ctx: u32,
    source: Src,
    tag: TagSel,
    dst: RecvDst,
) -> Result<Key> {
    let mut dst = dst;
    let (spec, buf, registered) = recv_spec(s, ctx, source, tag, &mut dst)?;
    let exposed = registered.then_some(buf);
    match s.engine.post_recv_early(spec)? {
        matching::Posting::Queued(id) => {
            Ok(recv_posted::<W>(s, id, (ctx, source, tag), dst, exposed))
        }
        matching::Posting::Early(e) => {
            let (id, outcome) = (e.recv, e.outcome);
            s.early_done(e, dst, exposed);
            // (the tools see it after: the early message's fields are then let go)
            if let (true, Some(t)) = (W::ON, s.tools_mut()) {
                t.posted_done(ctx, source, tag, &outcome);
            }
            s.run_outputs();
            Ok(Key::Recv(id))
        }
    }
}

/// The engine's description of a receive into `dst` (on `ctx`, from `source` with
/// `tag`), and its buffer as the transport sees it, registered (`true`) if the
/// receive may be advertised.
#[inline(always)]
fn recv_spec(
    s: &mut progress::State,
    ctx: u32,
    source: Src,
    tag: TagSel,
    dst: &mut RecvDst,
) -> Result<(RecvSpec, transport::RemoteBuf, bool)> {
    let bytes = dst.bytes(&mut s.regions).expect("lent mutably");
    let (addr, len) = (bytes.as_mut_ptr() as usize, bytes.len());
    let (buf, registered) = s.expose_if(|s| s.recv_is_advertised(source, len), addr, len)?;
    let spec = RecvSpec {
        source,
        tag,
        ctx,
        capacity: len as u64,
        buf: Some(progress::to_matching(buf)),
    };
    Ok((spec, buf, registered))
}

/// Receive `id` (on `ctx`, from `source` with `tag`) is posted into `dst`
/// (`exposed`: its buffer, registered): the tools see it, and the library keeps it.
#[inline(always)]
fn recv_posted<W: tools::Mode>(
    s: &mut progress::State,
    id: RecvId,
    (ctx, source, tag): (u32, Src, TagSel),
    dst: RecvDst,
    exposed: Option<transport::RemoteBuf>,
) -> Key {
    if let (true, Some(t)) = (W::ON, s.tools_mut()) {
        t.posted(id, ctx, source, tag);
    }
    if let Some(buf) = exposed {
        s.exposed(Key::Recv(id), buf);
    }
    if let Some(r) = dst.region() {
        s.by_region.insert(r, Key::Recv(id));
    }
    s.recvs.insert(id, dst);
    s.run_outputs();
    Key::Recv(id)
}

/// Bytes of one element for the receive's "whole number of elements" check (0: none).
fn elem_of<B: BufferMut + ?Sized>(buf: &B) -> usize {
    buf.rsmpi_elem_check()
}

/// The MPI call a send of `mode` is (`immediate` or blocking).
#[inline(always)]
fn send_op(mode: SendMode, immediate: bool) -> Op {
    match (mode, immediate) {
        (SendMode::Standard, false) => Op::Send,
        (SendMode::Buffered, false) => Op::Bsend,
        (SendMode::Synchronous, false) => Op::Ssend,
        (SendMode::Ready, false) => Op::Rsend,
        (SendMode::Standard, true) => Op::Isend,
        (SendMode::Buffered, true) => Op::Ibsend,
        (SendMode::Synchronous, true) => Op::Issend,
        (SendMode::Ready, true) => Op::Irsend,
    }
}

/// What the note of a send of `buf` to `rank` of `comm` is made of, for
/// [`tools::watched_send`]: with a check on, the note (race and type checks) goes
/// ahead of the send (none for a send that will fail).
#[inline(always)]
fn send_note<'b, B: Buffer + ?Sized>(
    comm: &'b SimpleCommunicator,
    rank: Rank,
    tag: Tag,
    buf: &'b B,
) -> crate::check::SendNote<
    impl FnOnce(&progress::State) -> Option<u32> + 'b,
    impl FnOnce() -> Option<TypeSig> + 'b,
> {
    crate::check::SendNote {
        ctx: comm.ctx,
        tag,
        dest: move |s: &progress::State| {
            let dest = comm.check_rank_in(s, rank).ok().flatten()?;
            check_tag(tag).is_ok().then_some(dest)
        },
        ty: move || type_of(|| (buf.rsmpi_datatype(), buf.rsmpi_count())),
    }
}

/// A receive into `buf` is about to be posted in a call a tool watches: with a
/// check on, the type check expects its type signature.
#[inline(always)]
fn expect_type_of<B: BufferMut + ?Sized>(buf: &B) {
    if tools::checking() && crate::check::types::wanted() {
        crate::check::expect_type(type_of(|| (buf.rsmpi_datatype(), buf.rsmpi_count())));
    }
}

/// The type signature of `count` elements of a buffer's datatype, when the type
/// check is on (`of` gives both).
#[inline(always)]
fn type_of<'b>(of: impl FnOnce() -> (Cow<'b, UserDatatype>, usize)) -> Option<TypeSig> {
    if crate::check::types::wanted() {
        type_of_now(of)
    } else {
        None
    }
}

/// [`type_of`] with the type check on.
#[cold]
#[inline(never)]
fn type_of_now<'b>(of: impl FnOnce() -> (Cow<'b, UserDatatype>, usize)) -> Option<TypeSig> {
    let (dt, count) = of();
    TypeSig::of(&dt, count)
}

/// A blocking send of `buf` to `rank` of `comm`.
#[track_caller]
pub(crate) fn blocking_send<U: tools::Caller, B: Buffer + ?Sized>(
    comm: &SimpleCommunicator,
    rank: Rank,
    buf: &B,
    tag: Tag,
    mode: SendMode,
) -> Result<()> {
    if tools::is_on() {
        return blocking_send_tooled(*comm, rank, buf, tag, mode);
    }
    send_now_or_wait::<U::Off, _>(comm, rank, buf, tag, mode)
}

/// [`blocking_send`] with a tool on. The communicator comes by value: passed by
/// reference, the user's function kept the copy that `Destination::send_with_tag`
/// makes of it (`rsmpi_destination`) in memory for this call alone, which cost the
/// unwatched copy 5–6 instructions a send (`docs/tools.md`, "Cost").
///
/// It only chooses: each of its two ways is a function of its own, each called
/// last, so that this one needs no frame (with the traced way in its frame, a
/// checked send paid ~20 instructions for it).
#[track_caller]
#[cold]
#[inline(never)]
fn blocking_send_tooled<B: Buffer + ?Sized>(
    comm: SimpleCommunicator,
    rank: Rank,
    buf: &B,
    tag: Tag,
    mode: SendMode,
) -> Result<()> {
    if tools::races_alone() {
        return blocking_send_checked::<tools::Noted, _>(comm, rank, buf, tag, mode);
    }
    if tools::checking() {
        return blocking_send_checked::<tools::On, _>(comm, rank, buf, tag, mode);
    }
    blocking_send_traced(comm, rank, buf, tag, mode)
}

/// [`blocking_send`] with the tracer alone on: [`send_now_or_wait`] between the
/// call's enter and its one record, all in one frame. The library state's visit is
/// a closure of its own, so that its thread-local access has this one caller and is
/// inlined (through [`blocking_send_watched`]'s closures, shared with the checks'
/// sends, a traced send took ~100 instructions more).
#[track_caller]
#[cold]
#[inline(never)]
fn blocking_send_traced<B: Buffer + ?Sized>(
    comm: SimpleCommunicator,
    rank: Rank,
    buf: &B,
    tag: Tag,
    mode: SendMode,
) -> Result<()> {
    let op = send_op(mode, false);
    let t0 = crate::trace::enter(op);
    let bytes = buf.rsmpi_send();
    let sent = progress::try_with(|s| begin_send::<tools::On>(s, &comm, rank, tag, mode, &bytes));
    let r = match sent {
        Ok(Ok(None)) => Ok(()), // sent and complete, or PROC_NULL
        Ok(Ok(Some(dest))) => send_waited::<tools::On>(&comm, dest, tag, mode, bytes),
        Ok(Err(e)) | Err(e) => Err(e),
    };
    crate::trace::leave(op, t0);
    r
}

/// [`blocking_send`] with standard sends made synchronous for the deadlock check
/// ([`blocking_send_checked`]).
#[track_caller]
#[cold]
#[inline(never)]
fn blocking_send_watched<B: Buffer + ?Sized>(
    comm: &SimpleCommunicator,
    rank: Rank,
    buf: &B,
    tag: Tag,
    mode: SendMode,
) -> Result<()> {
    let note = send_note(comm, rank, tag, buf);
    tools::watched_send(send_op(mode, false), Location::caller(), note, move || {
        let mode = tools::send_mode(mode);
        send_now_or_wait::<tools::On, _>(comm, rank, buf, tag, mode)
    })
}

/// [`blocking_send`] with a check on. Unless standard sends are made synchronous,
/// the call's enter, the send's note, the send tried on the fast path and, if it
/// left, the call's leave take one visit to the library state (they took three). A
/// note that leads to more (the receives waiting for their checks first, a full
/// batch of notes to send) has that done outside the state, and the send then
/// starts as [`send_now_or_wait`] starts it.
///
/// `W::NOTED` ([`tools::Noted`]): the race check is the only tool on. Then no
/// standard send runs as synchronous, no send has a type signature, no hook runs
/// when the message leaves (the race check's note went ahead of it), and the call's
/// end leaves at most the check of the receives completed meanwhile: the tests for
/// those cost a checked send of the paper's Table 2 ~20 instructions (`docs/tools.md`,
/// race checker "Cost", thirty-fourth round). A send to this rank itself still takes
/// the watched way ([`tools::On`]): straight into a posted receive, that receive
/// would complete with no hook to record it.
#[track_caller]
#[cold]
#[inline(never)]
fn blocking_send_checked<W: tools::Mode, B: Buffer + ?Sized>(
    comm: SimpleCommunicator,
    rank: Rank,
    buf: &B,
    tag: Tag,
    mode: SendMode,
) -> Result<()> {
    let comm = &comm;
    if !W::NOTED && tools::sync_sends_possible() {
        return blocking_send_watched(comm, rank, buf, tag, mode);
    }
    let (op, site) = (send_op(mode, false), Location::caller());
    let ty = if W::NOTED {
        None
    } else {
        type_of(|| (buf.rsmpi_datatype(), buf.rsmpi_count()))
    };
    let bytes = buf.rsmpi_send();
    let mut left = tools::Left::default();
    // what is rare (a note that leaves more to do, an error) is put aside here, so
    // that the visit returns a word (its result moved out of the closure whole was
    // ~20 instructions a send)
    let mut aside = None;
    let first = progress::try_with(|s| {
        // the rank and tag checked once, for the note and the send (`begin_send`'s
        // checks, in its order)
        let checked = comm
            .check_rank_in(s, rank)
            .and_then(|d| check_tag(tag).map(|_| d));
        let dest = checked.as_ref().ok().copied().flatten();
        let (noted, entered) =
            crate::check::note_send_in::<W>(s, op, site, comm.ctx, tag, dest, ty.as_ref());
        if let Some(n) = noted.filter(|n| n.unfinished()) {
            aside = Some(Aside::Noted(n));
            return Began::Aside;
        }
        let sent = match checked {
            Ok(Some(dest)) if W::NOTED && dest != s.engine.rank() => {
                send_at_once::<tools::Noted>(s, comm, dest, tag, mode, &bytes)
            }
            Ok(Some(dest)) => send_at_once::<tools::On>(s, comm, dest, tag, mode, &bytes),
            other => other, // PROC_NULL, or the check's error
        };
        if let Some(t) = s.tools_mut() {
            match (matches!(sent, Ok(Some(_))), entered) {
                // still to be waited for, and left after the wait: entered now
                (true, false) => t.enter(op, site),
                (true, true) => {}
                (false, true) => left = t.leave(op),
                (false, false) if W::NOTED => left = t.left_noted(op),
                (false, false) => left = t.ended_unentered(op),
            }
        }
        match sent {
            Ok(None) => Began::Done,
            Ok(Some(dest)) => Began::Wait(dest),
            Err(e) => {
                aside = Some(Aside::Failed(e));
                Began::Aside
            }
        }
    })?;
    left.run();
    let r = match first {
        Began::Done => return Ok(()), // sent and complete, or PROC_NULL
        Began::Wait(dest) => send_waited::<tools::On>(comm, dest, tag, mode, bytes),
        Began::Aside => match aside.expect("put aside") {
            Aside::Failed(e) => return Err(e),
            Aside::Noted(noted) => {
                noted.finish(ty.as_ref());
                let r = send_now_or_wait::<tools::On, _>(comm, rank, buf, tag, mode);
                tools::leave(op);
                return r;
            }
        },
    };
    tools::leave(op);
    r
}

/// How [`blocking_send_checked`]'s visit to the library state ended.
enum Began {
    /// The message left, and the call ended (or it was to `PROC_NULL`).
    Done,
    /// The send to this world rank is still to be waited for.
    Wait(u32),
    /// What is rare, put aside.
    Aside,
}

/// What [`Began::Aside`] put aside.
enum Aside {
    /// A note that leaves more to do before the send starts.
    Noted(crate::check::Noted),
    Failed(crate::Error),
}

/// A send's first visit to the library state, `s`, one for all of this: the rank and
/// the tag checked (in that order, before an error of `bytes`, the buffer's), and a
/// standard send of `bytes` tried on the fast path. The destination's world rank if
/// the send is still to be started; `None` if nothing is left to do (sent and
/// complete, or to `PROC_NULL`). Each caller makes its own closure around it, so that
/// each closure's thread-local access keeps a single caller and LLVM inlines it
/// (shared, it was left out of line: +47 instructions a message in a window of
/// sends).
#[inline(always)]
fn begin_send<W: tools::Mode>(
    s: &mut progress::State,
    comm: &SimpleCommunicator,
    rank: Rank,
    tag: Tag,
    mode: SendMode,
    bytes: &Result<Cow<'_, [u8]>>,
) -> Result<Option<u32>> {
    let Some(dest) = comm.check_rank_in(s, rank)? else {
        return Ok(None); // PROC_NULL
    };
    check_tag(tag)?;
    send_at_once::<W>(s, comm, dest, tag, mode, bytes)
}

/// [`begin_send`] past its checks, to world rank `dest`.
#[inline(always)]
fn send_at_once<W: tools::Mode>(
    s: &mut progress::State,
    comm: &SimpleCommunicator,
    dest: u32,
    tag: Tag,
    mode: SendMode,
    bytes: &Result<Cow<'_, [u8]>>,
) -> Result<Option<u32>> {
    if let (SendMode::Standard, Ok(b)) = (mode, bytes) {
        if s.send_now::<W>(comm.ctx, dest, tag, b)? {
            return Ok(None); // sent and complete
        }
    }
    Ok(Some(dest))
}

/// The body of [`blocking_send`]: the rank and tag checked, the eager fast path, or
/// a send waited for.
#[inline(always)]
fn send_now_or_wait<W: tools::Mode, B: Buffer + ?Sized>(
    comm: &SimpleCommunicator,
    rank: Rank,
    buf: &B,
    tag: Tag,
    mode: SendMode,
) -> Result<()> {
    let bytes = buf.rsmpi_send();
    let sent = progress::try_with(|s| begin_send::<W>(s, comm, rank, tag, mode, &bytes))??;
    let Some(dest) = sent else {
        return Ok(()); // sent and complete, or PROC_NULL
    };
    send_waited::<W>(comm, dest, tag, mode, bytes)
}

/// The rest of a blocking send of `bytes` to world rank `dest` that did not leave at
/// once: started and waited for.
#[inline(always)]
fn send_waited<W: tools::Mode>(
    comm: &SimpleCommunicator,
    dest: u32,
    tag: Tag,
    mode: SendMode,
    bytes: Result<Cow<'_, [u8]>>,
) -> Result<()> {
    let bytes = bytes?;
    transport::mem::lend(&progress::HOST, &bytes, |region| {
        let key = progress::with(|s| {
            start_send::<W>(s, comm.ctx, dest, tag, SendArg::Region(region), mode)
        })?;
        crate::request::finish(progress::wait(key), 0, 0, 0).map(|_| ())
    })
}

/// A blocking receive into `buf` from `src` (`None`: any source) of `comm`.
///
/// Inlined into the caller, so that the call with a tool on does not pass through
/// the body without one (its frame cost ~25 instructions a receive).
#[track_caller]
#[inline(always)]
pub(crate) fn blocking_recv<U: tools::Caller, B: BufferMut + ?Sized>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
    buf: &mut B,
) -> Result<Status> {
    if tools::is_on() {
        return blocking_recv_watched(comm, src, tag, buf);
    }
    blocking_recv_off::<U, B>(comm, src, tag, buf)
}

/// [`blocking_recv`] with no tool on.
#[track_caller]
#[inline(never)]
fn blocking_recv_off<U: tools::Caller, B: BufferMut + ?Sized>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
    buf: &mut B,
) -> Result<Status> {
    recv_and_wait::<U::Off, _>(comm, src, tag, buf, Location::caller())
}

/// [`blocking_recv`] with a tool on.
#[track_caller]
#[cold]
#[inline(never)]
fn blocking_recv_watched<B: BufferMut + ?Sized>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
    buf: &mut B,
) -> Result<Status> {
    if tools::checking() {
        return blocking_recv_checked(comm, src, tag, buf);
    }
    // the tracer alone: the body between the call's enter and its one record, in
    // this frame (as `blocking_send_traced`)
    let t0 = crate::trace::enter(Op::Recv);
    let r = recv_and_wait::<tools::Traced, _>(comm, src, tag, buf, Location::caller());
    crate::trace::leave(Op::Recv, t0);
    r
}

/// [`blocking_recv`] with a check on: a receive into the user's own bytes marks the
/// call's enter and leave in the visit that posts it ([`tools::Called`]); otherwise
/// they go around the call.
#[track_caller]
#[inline(always)]
fn blocking_recv_checked<B: BufferMut + ?Sized>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
    buf: &mut B,
) -> Result<Status> {
    let site = Location::caller();
    expect_type_of(buf);
    // (a bad tag fails before that visit, so it goes the other way: the call marked)
    if tagsel(tag).is_ok() && buf.rsmpi_direct().is_some() {
        if tools::races_alone() {
            return recv_and_wait::<tools::Noted, _>(comm, src, tag, buf, site);
        }
        return recv_and_wait::<tools::Called, _>(comm, src, tag, buf, site);
    }
    tools::watched(Op::Recv, site, move || {
        recv_and_wait::<tools::On, _>(comm, src, tag, buf, site)
    })
}

/// The body of [`blocking_recv`].
///
/// `W::CALL` (a receive into the user's own bytes, with a valid tag) marks the
/// call's enter, made at `site`, in the visit that posts the receive, and its leave
/// there too if the receive completed in it (after the wait otherwise).
#[inline(always)]
fn recv_and_wait<W: tools::Mode, B: BufferMut + ?Sized>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
    buf: &mut B,
    site: &'static Location<'static>,
) -> Result<Status> {
    // the tag checked before the source, as in `irecv`
    let tag = tagsel(tag)?;
    let elem = elem_of(buf);
    let ctx = comm.ctx;
    if let Some(bytes) = buf.rsmpi_direct() {
        let cap = bytes.len() as u64;
        // lending the buffer needs the library state: a call after finalize (or on a
        // thread without it) returns `NotInitialized` here instead of panicking there
        progress::try_with(|_| ())?;
        // one visit to the library state checks the source and posts the receive.
        // The same closure as `irecv`'s, written out again: a function shared by the
        // two left its thread-local access out of line (window receive 1 129 -> 1 256
        // instructions a message, pair loop +119), as `begin_send` says
        //
        // The same visit also takes the wait's first turn (`progress::wait_recv`'s):
        // the message already there (an answer's, a reply's), read by one progress
        // and taken, without a second visit
        return transport::mem::lend_mut(&progress::HOST, bytes, |region| {
            let mut left = tools::Left::default();
            let first = progress::try_with(|s| -> Result<Option<Result<RecvOutcome, RecvId>>> {
                if let (true, Some(t)) = (W::CALL, s.tools_mut()) {
                    t.enter(Op::Recv, site);
                }
                // (`W::NOTED`: the source matched, and whether the call was entered)
                let (mut source, mut entered) = (Src::Any, false);
                #[allow(clippy::redundant_closure_call)]
                let first = (|| {
                    let src = if W::NOTED {
                        source_in_always(s, comm, src)
                    } else {
                        source_in(s, comm, src)
                    };
                    let Some(src) = src? else {
                        return Ok(None);
                    };
                    let key = start_recv::<W>(s, ctx, src, tag, RecvDst::Region(region))?;
                    let Key::Recv(id) = key else {
                        unreachable!("a receive is posted as a receive")
                    };
                    if !s.recvs.is_done(id) {
                        if let (true, Some(t)) = (W::NOTED, s.tools_mut()) {
                            // to wait: the tools see it before any progress, as the
                            // watched copy's hook would have shown it
                            t.enter(Op::Recv, site);
                            t.posted(id, ctx, src, tag);
                            entered = true;
                        }
                        s.progress_inline();
                    }
                    if W::NOTED {
                        source = src;
                    }
                    Ok(Some(s.recvs.take_done(id).ok_or(id)))
                })();
                if let (true, false, Some(t)) =
                    (W::CALL, matches!(first, Ok(Some(Err(_)))), s.tools_mut())
                {
                    left = t.leave(Op::Recv);
                }
                if let (true, Some(t)) = (W::NOTED, s.tools_mut()) {
                    left = match &first {
                        Ok(Some(Err(_))) => left, // waits: left after the wait
                        _ if entered => t.leave(Op::Recv),
                        Ok(Some(Ok(o))) => {
                            t.received_in_call((Op::Recv, site), ctx, source, tag, o)
                        }
                        _ => t.ended_unentered(Op::Recv), // PROC_NULL, or an error
                    };
                }
                if let (true, Ok(Some(Ok(o)))) = (W::TRACED, &first) {
                    traced_in_call(s, ctx, o);
                }
                first
            });
            // (nothing to run unless the call ended in that visit)
            left.run();
            let outcome = match first?? {
                None => return Ok(Status::proc_null()),
                Some(Ok(o)) => o,
                Some(Err(id)) => {
                    let o = progress::wait_recv(id);
                    if W::CALL || W::NOTED {
                        tools::leave(Op::Recv);
                    }
                    if W::TRACED {
                        progress::with(|s| traced_in_call(s, ctx, &o));
                    }
                    o
                }
            };
            crate::request::finish_recv(outcome, cap, elem, ctx)
        });
    }
    debug_assert!(
        !W::CALL && !W::NOTED,
        "only a receive into the user's own bytes marks its call"
    );
    let Some(src) = source(comm, src)? else {
        return Ok(Status::proc_null());
    };
    let cap = buf.rsmpi_capacity();
    let key = progress::with(|s| start_recv::<W>(s, ctx, src, tag, RecvDst::Owned(vec![0; cap])))?;
    let outcome = wait_posted(key);
    if W::TRACED {
        progress::with(|s| traced_in_call(s, ctx, &outcome));
    }
    let st = crate::request::finish_recv(outcome, cap as u64, elem, ctx)?;
    let data = progress::with(|s| s.owned_done.remove(&key)).unwrap_or_default();
    buf.rsmpi_unpack(&data)?;
    Ok(st)
}

/// A blocking receive on context `ctx` completed with `outcome`, in a call the tracer
/// alone watches ([`tools::Traced`]): its `Recv` record.
#[inline(always)]
fn traced_in_call(s: &mut progress::State, ctx: u32, outcome: &RecvOutcome) {
    if let Some(t) = s.tools_mut().and_then(|t| t.trace.as_mut()) {
        t.received_in_call(ctx, outcome);
    }
}

/// Waits for the receive [`start_recv`] posted as `key`: its outcome, by the wait
/// for a receive (its first turn in one access to the library state).
#[inline(always)]
fn wait_posted(key: Key) -> matching::RecvOutcome {
    let Key::Recv(id) = key else {
        unreachable!("a receive is posted as a receive")
    };
    progress::wait_recv(id)
}

/// The matching source of `src` in `comm` (`None` inside: `PROC_NULL`).
fn source(comm: &SimpleCommunicator, src: Option<Rank>) -> Result<Option<Src>> {
    progress::try_with(|s| source_in(s, comm, src))?
}

/// `source` on the library state the caller already holds.
#[inline]
fn source_in(
    s: &progress::State,
    comm: &SimpleCommunicator,
    src: Option<Rank>,
) -> Result<Option<Src>> {
    source_in_always(s, comm, src)
}

/// [`source_in`] always inlined, for the checked blocking receive's visit
/// ([`recv_and_wait`] with [`tools::Noted`]), where it was left out of line (~10
/// instructions a receive). Always inlined everywhere, the unchecked wildcard
/// receive took 3 more.
#[inline(always)]
fn source_in_always(
    s: &progress::State,
    comm: &SimpleCommunicator,
    src: Option<Rank>,
) -> Result<Option<Src>> {
    match src {
        None => {
            comm.check_live_in(s)?;
            Ok(Some(Src::Any))
        }
        Some(r) => Ok(comm.check_rank_in(s, r)?.map(Src::Rank)),
    }
}

/// A request complete from the start: a `PROC_NULL` operation (`done` = `None`).
/// Each has its own key, so that several can be pending.
pub(crate) fn done_pending(done: Option<progress::Done>) -> Pending {
    let done = done.unwrap_or(progress::Done::Recv(matching::RecvOutcome::Received {
        source: PROC_NULL as u32,
        tag: -1,
        len: 0,
        truncated_from: None,
    }));
    complete_pending(Key::Null, done)
}

/// A request complete from the start, under a new key of kind `key`, with its
/// result `done` in the `done` table.
fn complete_pending(key: fn(u64) -> Key, done: progress::Done) -> Pending {
    let key = progress::with(|s| {
        s.next_null += 1;
        let key = key(s.next_null);
        s.done.insert(key, done);
        key
    });
    Pending::new(key, 0, 0, 0)
}

/// The request of a send that left at once: complete, with nothing kept for it in
/// the library ([`Key::Sent`]) unless a check that tracks requests is on.
#[inline(always)]
fn sent_pending<W: tools::Mode>() -> Pending {
    if W::ON && tools::checking() {
        return sent_pending_tracked();
    }
    Pending::new(Key::Sent(0), 0, 0, 0)
}

/// [`sent_pending`] with the checks on: a unique key, in the `done` table until the
/// request is waited for or tested.
#[cold]
#[inline(never)]
fn sent_pending_tracked() -> Pending {
    complete_pending(Key::Sent, progress::Done::Send(matching::SendOutcome::Sent))
}

/// A watched immediate call's request, told to the error checker (which tracks every
/// request) when it is on.
fn started<'a, B: ?Sized, Sc>(r: Result<Request<'a, B, Sc>>) -> Result<Request<'a, B, Sc>> {
    if let (Ok(r), true) = (&r, tools::checking()) {
        crate::check::request_started(r.pending.key);
    }
    r
}

/// Starts a send of `buf` to `rank` of `comm`; its result goes to `done`, on each
/// path (see [`immediate_recv`]).
#[track_caller]
pub(crate) fn immediate_send<'a, U, Sc, B, R>(
    comm: &SimpleCommunicator,
    rank: Rank,
    scope: Sc,
    buf: &'a B,
    tag: Tag,
    mode: SendMode,
    done: impl FnOnce(Result<Request<'a, B, Sc>>) -> R,
) -> R
where
    U: tools::Caller,
    Sc: Scope<'a>,
    B: Buffer + ?Sized + 'a,
{
    if tools::is_on() {
        // the call's two halves out of line, the lending (when the send goes on)
        // and the request here, built as the unwatched copy builds it: joined as a
        // whole request built out of line, the two paths cost the window send 5
        // instructions a message more with the tools off (`docs/performance.md`,
        // "Tools off, ninth round")
        let note = send_note(comm, rank, tag, buf);
        let op = send_op(mode, true);
        let (w, mode, bytes, sent) =
            isend_watched_begin(op, Location::caller(), note, comm, rank, buf, tag, mode);
        let p = match sent {
            Ok(Some(dest)) => {
                let arg = bytes.map(|b| match b {
                    Cow::Borrowed(b) => SendArg::Region(scope.rsmpi_lend(b)),
                    Cow::Owned(v) => SendArg::Packed(v),
                });
                isend_watched_start(w, comm.ctx, dest, tag, arg, mode)
            }
            sent => isend_watched_ended(w, rank, sent),
        };
        return done(p.map(|p| Request::new(p, Data::Shared(buf))));
    }
    done(isend::<U::Off, _, _>(comm, rank, scope, buf, tag, mode))
}

/// The watched immediate send of `buf` begins: the tools see the call (with the
/// send's note), `buf`'s bytes are taken (packed if need be), and the send's checks
/// and eager path run ([`begin_send`]). Also the mode the send starts with
/// ([`tools::send_mode`]).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[cold]
#[inline(never)]
fn isend_watched_begin<'a, B: Buffer + ?Sized>(
    op: Op,
    site: &'static Location<'static>,
    note: crate::check::SendNote<
        impl FnOnce(&progress::State) -> Option<u32>,
        impl FnOnce() -> Option<TypeSig>,
    >,
    comm: &SimpleCommunicator,
    rank: Rank,
    buf: &'a B,
    tag: Tag,
    mode: SendMode,
) -> (
    tools::Watch,
    SendMode,
    Result<Cow<'a, [u8]>>,
    Result<Option<u32>>,
) {
    let (w, mode) = tools::begin_send(op, site, note, mode);
    let bytes = buf.rsmpi_send();
    let sent = progress::try_with(|s| begin_send::<tools::On>(s, comm, rank, tag, mode, &bytes));
    (w, mode, bytes, sent.and_then(|r| r))
}

/// The watched immediate send to world rank `dest`, its buffer lent as `arg`, is
/// started, and the call (`w`) ends: the request's [`Pending`], told to the error
/// checker.
#[cold]
#[inline(never)]
fn isend_watched_start(
    w: tools::Watch,
    ctx: u32,
    dest: u32,
    tag: Tag,
    arg: Result<SendArg>,
    mode: SendMode,
) -> Result<Pending> {
    let p = arg.and_then(|arg| {
        let key = progress::with(|s| start_send::<tools::On>(s, ctx, dest, tag, arg, mode))?;
        Ok(Pending::new(key, 0, 0, ctx))
    });
    if let (Ok(p), true) = (&p, tools::checking()) {
        crate::check::request_started(p.key);
    }
    tools::end(w);
    p
}

/// The watched immediate send to `rank` ends with its first step (`sent`): refused,
/// sent at once, or to `PROC_NULL`.
#[cold]
#[inline(never)]
fn isend_watched_ended(w: tools::Watch, rank: Rank, sent: Result<Option<u32>>) -> Result<Pending> {
    let p = sent.map(|_| match rank {
        PROC_NULL => done_pending(None),
        _ => sent_pending::<tools::On>(),
    });
    if let (Ok(p), true) = (&p, tools::checking()) {
        crate::check::request_started(p.key);
    }
    tools::end(w);
    p
}

/// The body of [`immediate_send`].
#[inline(always)]
fn isend<'a, W: tools::Mode, Sc: Scope<'a>, B: Buffer + ?Sized + 'a>(
    comm: &SimpleCommunicator,
    rank: Rank,
    scope: Sc,
    buf: &'a B,
    tag: Tag,
    mode: SendMode,
) -> Result<Request<'a, B, Sc>> {
    let bytes = buf.rsmpi_send();
    let sent = progress::try_with(|s| begin_send::<W>(s, comm, rank, tag, mode, &bytes))??;
    let Some(dest) = sent else {
        if rank == PROC_NULL {
            return Ok(Request::new(done_pending(None), Data::Shared(buf)));
        }
        return Ok(Request::new(sent_pending::<W>(), Data::Shared(buf)));
    };
    let bytes = bytes?;
    let arg = match bytes {
        Cow::Borrowed(b) => SendArg::Region(scope.rsmpi_lend(b)),
        Cow::Owned(v) => SendArg::Packed(v),
    };
    let key = progress::with(|s| start_send::<W>(s, comm.ctx, dest, tag, arg, mode))?;
    Ok(Request::new(
        Pending::new(key, 0, 0, comm.ctx),
        Data::Shared(buf),
    ))
}

/// Starts a receive into `buf` from `src` (`None`: any source) of `comm`; its result
/// goes to `done` (the caller's handling of errors). `done` runs on each path, the
/// watched and the unwatched, so that what the two paths join on is the caller's
/// result: joined as a `Result<Request>`, the unwatched request was built in memory
/// and copied out (80 bytes) where, with the tools compiled out, it is built in place.
#[track_caller]
pub(crate) fn immediate_recv<'a, U, Sc, B, R>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    scope: Sc,
    buf: &'a mut B,
    tag: Option<Tag>,
    done: impl FnOnce(Result<Request<'a, B, Sc>>) -> R,
) -> R
where
    U: tools::Caller,
    Sc: Scope<'a>,
    B: BufferMut + ?Sized + 'a,
{
    if tools::is_on() {
        // the watched copy's two halves out of line, the lending between them here:
        // the scope is never handed to a function out of line, so LLVM still sees
        // the scope's own list of regions as the unwatched copy's alone (handed
        // over, it reloaded the list's length and flag after each write into the
        // library's tables: +26 instructions a round of the self loop)
        let w = irecv_enter(Location::caller(), buf);
        let r = match Posting::lend(scope, buf, tag) {
            // a lent buffer's request built here from its `Pending`, as the
            // unwatched copy builds it, and the call ended in the one call out of
            // line: joined as a whole request built out of line, the two paths cost
            // the self loop 14 instructions a round more with the tools off, and
            // the pair loop 18 (`docs/performance.md`, "Tools off, ninth round")
            Ok(Posting {
                tag,
                elem,
                buf: RecvBuf::Lent(loan, cap),
            }) => {
                let p = irecv_watched_lent(w, comm, src, tag, loan.id(), cap, elem);
                p.map(|p| Request::new(p, Data::Loan(loan)))
            }
            other => {
                let r = started(other.and_then(|p| irecv_watched(comm, src, p)));
                tools::end(w);
                r
            }
        };
        return done(r);
    }
    done(irecv::<U::Off, _, _>(comm, src, scope, buf, tag))
}

/// The watched immediate receive begins: the tools see the call, and the error
/// checker the buffer's type.
#[track_caller]
#[cold]
#[inline(never)]
fn irecv_enter<B: BufferMut + ?Sized>(site: &'static Location<'static>, buf: &B) -> tools::Watch {
    let w = tools::begin(Op::Irecv, site);
    expect_type_of(buf);
    w
}

/// The watched immediate receive's posting into a buffer lent as region `region`
/// (`cap` bytes of elements of `elem` bytes), and the end of the call (`w`): the
/// request's [`Pending`], told to the error checker.
#[cold]
#[inline(never)]
fn irecv_watched_lent(
    w: tools::Watch,
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: TagSel,
    region: RegionId,
    cap: u64,
    elem: usize,
) -> Result<Pending> {
    let p = post_lent::<tools::On>(comm, src, tag, region).map(|posted| match posted {
        Some(key) => Pending::new(key, cap, elem, comm.ctx),
        None => done_pending(None), // PROC_NULL
    });
    if let (Ok(p), true) = (&p, tools::checking()) {
        crate::check::request_started(p.key);
    }
    tools::end(w);
    p
}

/// The watched immediate receive's posting of a buffer the message is unpacked into
/// (a lent buffer's goes through [`irecv_watched_lent`]).
#[cold]
#[inline(never)]
fn irecv_watched<'a, Sc: Scope<'a>, B: BufferMut + ?Sized + 'a>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    p: Posting<'a, B>,
) -> Result<Request<'a, B, Sc>> {
    post_recv::<tools::On, _, _>(comm, src, p)
}

/// An immediate receive ready to be posted: its tag, the size of the elements its
/// message must be a whole number of, and its buffer.
struct Posting<'a, B: ?Sized> {
    tag: TagSel,
    elem: usize,
    buf: RecvBuf<'a, B>,
}

/// A receive's buffer as posted: lent to the scope as it is (with its capacity in
/// bytes, the lent region's length), or a buffer the message is unpacked into.
enum RecvBuf<'a, B: ?Sized> {
    Lent(Loan<'a, B>, u64),
    Unpack(&'a mut B),
}

impl<'a, B: BufferMut + ?Sized + 'a> Posting<'a, B> {
    /// The tag checked, and `buf` lent to `scope` if it is received into as it is.
    #[inline(always)]
    fn lend<Sc: Scope<'a>>(scope: Sc, buf: &'a mut B, tag: Option<Tag>) -> Result<Self> {
        let tag = tagsel(tag)?;
        let elem = elem_of(buf);
        let buf = match buf.rsmpi_direct().map(|b| b.len() as u64) {
            Some(cap) => RecvBuf::Lent(
                scope.rsmpi_lend_mut(buf, |b| b.rsmpi_direct().expect("direct")),
                cap,
            ),
            None => RecvBuf::Unpack(buf),
        };
        Ok(Posting { tag, elem, buf })
    }
}

/// The body of [`immediate_recv`].
#[inline(always)]
fn irecv<'a, W: tools::Mode, Sc: Scope<'a>, B: BufferMut + ?Sized + 'a>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    scope: Sc,
    buf: &'a mut B,
    tag: Option<Tag>,
) -> Result<Request<'a, B, Sc>> {
    post_recv::<W, _, _>(comm, src, Posting::lend(scope, buf, tag)?)
}

/// An immediate receive posted.
#[inline(always)]
fn post_recv<'a, W: tools::Mode, Sc: Scope<'a>, B: BufferMut + ?Sized + 'a>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    p: Posting<'a, B>,
) -> Result<Request<'a, B, Sc>> {
    let Posting { tag, elem, buf } = p;
    let ctx = comm.ctx;
    match buf {
        RecvBuf::Lent(loan, cap) => {
            let Some(key) = post_lent::<W>(comm, src, tag, loan.id())? else {
                return Ok(Request::new(done_pending(None), Data::Loan(loan)));
            };
            Ok(Request::new(
                Pending::new(key, cap, elem, ctx),
                Data::Loan(loan),
            ))
        }
        RecvBuf::Unpack(buf) => {
            let Some(src) = source(comm, src)? else {
                return Ok(Request::new(done_pending(None), Data::Shared(buf)));
            };
            let cap = buf.rsmpi_capacity();
            let key = progress::with(|s| {
                start_recv::<W>(s, ctx, src, tag, RecvDst::Owned(vec![0; cap]))
            })?;
            Ok(Request::new(
                Pending::new(key, cap as u64, elem, ctx),
                Data::Unpack(buf, |b, d| b.rsmpi_unpack(d)),
            ))
        }
    }
}

/// Posts a receive into the buffer lent as `region`, in one visit to the library
/// state: the source checked, the receive posted (a refused source leaves the region
/// lent, unused, until the scope ends). `None` for a receive from `PROC_NULL`.
#[inline(always)]
fn post_lent<W: tools::Mode>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: TagSel,
    region: RegionId,
) -> Result<Option<Key>> {
    let ctx = comm.ctx;
    progress::try_with(|s| -> Result<Option<Key>> {
        let Some(src) = source_in(s, comm, src)? else {
            return Ok(None);
        };
        start_recv::<W>(s, ctx, src, tag, RecvDst::Region(region)).map(Some)
    })?
}

#[track_caller]
fn iprobe(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
) -> Result<Option<Status>> {
    let _t = tools::call(Op::Iprobe);
    iprobe_once(comm, src, tag)
}

fn iprobe_once(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
) -> Result<Option<Status>> {
    let (src, tag) = (source(comm, src)?, tagsel(tag)?);
    let Some(src) = src else {
        return Ok(Some(Status::proc_null()));
    };
    let ctx = comm.ctx;
    let found = progress::with(|s| {
        s.progress();
        let env = s.engine.probe(src, tag, ctx)?;
        let st = Status {
            source: s.comm_rank(ctx, env.source),
            tag: env.tag,
            len: env.len,
            cancelled: false,
        };
        Some((st, env.source))
    });
    if let (Some((st, world)), true) = (&found, tools::checking()) {
        crate::check::probed(ctx, src, tag, *world, st.tag);
    }
    Ok(found.map(|(st, _)| st))
}

#[track_caller]
fn probe(comm: &SimpleCommunicator, src: Option<Rank>, tag: Option<Tag>) -> Result<Status> {
    let _t = tools::call(Op::Probe);
    let mut backoff = progress::Backoff::new();
    loop {
        if let Some(s) = iprobe_once(comm, src, tag)? {
            return Ok(s);
        }
        backoff.idle();
        if tools::checking() {
            // the deadlock detector follows a blocking probe like a receive
            if let Some(source) = source(comm, src)? {
                crate::check::deadlock::probing(comm.ctx, source);
            }
        }
    }
}

#[track_caller]
fn improbe(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
) -> Result<Option<(Message, Status)>> {
    let _t = tools::call(Op::Improbe);
    improbe_once(comm, src, tag)
}

fn improbe_once(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
) -> Result<Option<(Message, Status)>> {
    let (src, tag) = (source(comm, src)?, tagsel(tag)?);
    let ctx = comm.ctx;
    let Some(src) = src else {
        return Ok(Some((Message { id: None, ctx }, Status::proc_null())));
    };
    let found = progress::with(|s| {
        s.progress();
        take_arrived(s, ctx, src, tag, None)
    });
    if let (Some((_, st, world)), true) = (&found, tools::checking()) {
        crate::check::probed(ctx, src, tag, *world, st.tag);
    }
    Ok(found.map(|(m, st, _)| (m, st)))
}

/// Receives a message from `src` (`None`: any source) with `tag` on `comm` into `buf`
/// if one has already arrived, without polling for more: the race checker's batches
/// of notes, which the user's calls' progress delivers into the unexpected queue, are
/// fetched this way so that looking for them never moves a user message. `buf`'s
/// bytes are replaced and its room reused; with them comes the sender's rank in
/// `comm`. With `wait`, the message is waited for (a blocking probe) if it has not
/// arrived. `Err` gives `buf` back when no message is taken.
///
/// With `from` (and not `wait`), only a message that arrived since that arrival
/// number is taken, and `from` moves past what was looked at
/// ([`matching::Engine::mprobe_from`]).
pub(crate) fn arrived_into(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Tag,
    mut buf: Vec<u8>,
    wait: bool,
    from: Option<&mut u64>,
) -> std::result::Result<(Vec<u8>, Rank), Vec<u8>> {
    let taken = if wait {
        let _t = tools::call(Op::Recv);
        Some(mprobe(comm, src, Some(tag)).unwrap_or_else(|e| fail("receive_vec", e)))
    } else {
        let ctx = comm.ctx;
        match (source(comm, src), tagsel(Some(tag))) {
            (Ok(Some(src)), Ok(tag)) => {
                progress::with(|s| take_arrived(s, ctx, src, tag, from)).map(|(m, st, _)| (m, st))
            }
            _ => None,
        }
    };
    let Some((msg, st)) = taken else {
        return Err(buf);
    };
    buf.clear();
    buf.resize(st.len as usize, 0);
    match msg.try_receive_into(&mut buf[..]) {
        Ok(_) => Ok((buf, st.source)),
        Err(e) if wait => fail("receive_vec", e),
        Err(_) => Err(buf),
    }
}

/// Takes a message matching (`src`, `tag`) on context `ctx` that has already arrived
/// (with `from`, since that arrival number, [`matching::Engine::mprobe_from`]), so
/// that only the returned [`Message`] can receive it: its status, and its source as
/// a world rank.
fn take_arrived(
    s: &mut progress::State,
    ctx: u32,
    src: matching::Source,
    tag: TagSel,
    from: Option<&mut u64>,
) -> Option<(Message, Status, u32)> {
    let (id, env) = match from {
        None => s.engine.mprobe(src, tag, ctx)?,
        Some(from) => s.engine.mprobe_from(src, tag, ctx, from)?,
    };
    if let Some(t) = s.tools_mut() {
        // the probe is the message's match: numbered on its channel now
        t.probe_matched(id, env.source, ctx, env.tag);
    }
    let st = Status {
        source: s.comm_rank(ctx, env.source),
        tag: env.tag,
        len: env.len,
        cancelled: false,
    };
    Some((Message { id: Some(id), ctx }, st, env.source))
}

#[track_caller]
fn mprobe(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
) -> Result<(Message, Status)> {
    let _t = tools::call(Op::Mprobe);
    let mut backoff = progress::Backoff::new();
    loop {
        if let Some(m) = improbe_once(comm, src, tag)? {
            return Ok(m);
        }
        backoff.idle();
        if tools::checking() {
            // the deadlock detector follows a blocking probe like a receive
            if let Some(source) = source(comm, src)? {
                crate::check::deadlock::probing(comm.ctx, source);
            }
        }
    }
}

#[track_caller]
fn receive_vec<T: Equivalence>(
    comm: &SimpleCommunicator,
    src: Option<Rank>,
    tag: Option<Tag>,
) -> Result<(Vec<T>, Status)> {
    let _t = tools::call(Op::Recv);
    let (msg, st) = mprobe(comm, src, tag)?;
    msg.receive_vec(st)
}

/// Something to receive from (`mpi::point_to_point::Source`): a [`Process`], or
/// [`AnyProcess`] for `MPI_ANY_SOURCE`. Methods without `_with_tag` take any tag.
pub trait Source: AsCommunicator {
    /// The rank received from (`MPI_ANY_SOURCE` is -1).
    fn source_rank(&self) -> Rank;

    /// The communicator and source of the receive.
    #[doc(hidden)]
    fn rsmpi_source(&self) -> (SimpleCommunicator, Option<Rank>);

    /// Waits for a message with `tag` without receiving it (`MPI_Probe`).
    #[track_caller]
    fn probe_with_tag(&self, tag: Tag) -> Status {
        let (c, s) = self.rsmpi_source();
        probe(&c, s, Some(tag)).unwrap_or_else(|e| fail("probe", e))
    }
    /// Waits for a message without receiving it (`MPI_Probe`).
    #[track_caller]
    fn probe(&self) -> Status {
        let (c, s) = self.rsmpi_source();
        probe(&c, s, None).unwrap_or_else(|e| fail("probe", e))
    }
    /// Waits for a message with `tag` and takes it, so that only the returned
    /// [`Message`] can receive it (`MPI_Mprobe`).
    #[track_caller]
    fn matched_probe_with_tag(&self, tag: Tag) -> (Message, Status) {
        let (c, s) = self.rsmpi_source();
        mprobe(&c, s, Some(tag)).unwrap_or_else(|e| fail("mprobe", e))
    }
    /// `MPI_Mprobe` with any tag.
    #[track_caller]
    fn matched_probe(&self) -> (Message, Status) {
        let (c, s) = self.rsmpi_source();
        mprobe(&c, s, None).unwrap_or_else(|e| fail("mprobe", e))
    }
    /// Receives one value with `tag`.
    #[track_caller]
    fn receive_with_tag<Msg: Equivalence>(&self, tag: Tag) -> (Msg, Status) {
        let mut v = Msg::rsmpi_zero();
        let st = self.receive_into_with_tag(&mut v, tag);
        (v, st)
    }
    /// Receives one value.
    #[track_caller]
    fn receive<Msg: Equivalence>(&self) -> (Msg, Status) {
        let mut v = Msg::rsmpi_zero();
        let st = self.receive_into(&mut v);
        (v, st)
    }
    /// Receives into `buf` a message with `tag` (`MPI_Recv`).
    #[track_caller]
    fn receive_into_with_tag<Buf: BufferMut + ?Sized>(&self, buf: &mut Buf, tag: Tag) -> Status {
        let (c, s) = self.rsmpi_source();
        blocking_recv::<tools::User, _>(&c, s, Some(tag), buf)
            .unwrap_or_else(|e| fail("receive", e))
    }
    /// Receives into `buf` (`MPI_Recv`).
    #[track_caller]
    fn receive_into<Buf: BufferMut + ?Sized>(&self, buf: &mut Buf) -> Status {
        let (c, s) = self.rsmpi_source();
        blocking_recv::<tools::User, _>(&c, s, None, buf).unwrap_or_else(|e| fail("receive", e))
    }
    /// Receives a message with `tag` of any length into a new vector.
    #[track_caller]
    fn receive_vec_with_tag<Msg: Equivalence>(&self, tag: Tag) -> (Vec<Msg>, Status) {
        let (c, s) = self.rsmpi_source();
        receive_vec(&c, s, Some(tag)).unwrap_or_else(|e| fail("receive_vec", e))
    }
    /// Receives a message of any length into a new vector.
    #[track_caller]
    fn receive_vec<Msg: Equivalence>(&self) -> (Vec<Msg>, Status) {
        let (c, s) = self.rsmpi_source();
        receive_vec(&c, s, None).unwrap_or_else(|e| fail("receive_vec", e))
    }
    /// Starts a receive into `buf` of a message with `tag` (`MPI_Irecv`).
    #[track_caller]
    fn immediate_receive_into_with_tag<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a mut Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let (c, s) = self.rsmpi_source();
        immediate_recv::<tools::User, _, _, _>(&c, s, scope, buf, Some(tag), |r| {
            r.unwrap_or_else(|e| fail("irecv", e))
        })
    }
    /// Starts a receive into `buf` (`MPI_Irecv`).
    #[track_caller]
    fn immediate_receive_into<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a mut Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + BufferMut + ?Sized,
        Sc: Scope<'a>,
    {
        let (c, s) = self.rsmpi_source();
        immediate_recv::<tools::User, _, _, _>(&c, s, scope, buf, None, |r| {
            r.unwrap_or_else(|e| fail("irecv", e))
        })
    }
    /// Starts a receive of one value with `tag`, into the library's own buffer.
    #[track_caller]
    fn immediate_receive_with_tag<Msg: Equivalence>(&self, tag: Tag) -> ReceiveFuture<Msg> {
        let (c, s) = self.rsmpi_source();
        ReceiveFuture::start(&c, s, Some(tag)).unwrap_or_else(|e| fail("irecv", e))
    }
    /// Starts a receive of one value.
    #[track_caller]
    fn immediate_receive<Msg: Equivalence>(&self) -> ReceiveFuture<Msg> {
        let (c, s) = self.rsmpi_source();
        ReceiveFuture::start(&c, s, None).unwrap_or_else(|e| fail("irecv", e))
    }
    /// `MPI_Iprobe` with a tag.
    #[track_caller]
    fn immediate_probe_with_tag(&self, tag: Tag) -> Option<Status> {
        let (c, s) = self.rsmpi_source();
        iprobe(&c, s, Some(tag)).unwrap_or_else(|e| fail("iprobe", e))
    }
    /// `MPI_Iprobe`.
    #[track_caller]
    fn immediate_probe(&self) -> Option<Status> {
        let (c, s) = self.rsmpi_source();
        iprobe(&c, s, None).unwrap_or_else(|e| fail("iprobe", e))
    }
    /// `MPI_Improbe` with a tag: takes a matching message if one is there.
    #[track_caller]
    fn immediate_matched_probe_with_tag(&self, tag: Tag) -> Option<(Message, Status)> {
        let (c, s) = self.rsmpi_source();
        improbe(&c, s, Some(tag)).unwrap_or_else(|e| fail("improbe", e))
    }
    /// `MPI_Improbe`.
    #[track_caller]
    fn immediate_matched_probe(&self) -> Option<(Message, Status)> {
        let (c, s) = self.rsmpi_source();
        improbe(&c, s, None).unwrap_or_else(|e| fail("improbe", e))
    }
}

impl Source for Process<'_> {
    fn source_rank(&self) -> Rank {
        self.rank
    }
    fn rsmpi_source(&self) -> (SimpleCommunicator, Option<Rank>) {
        (self.comm, Some(self.rank))
    }
}

impl Source for AnyProcess<'_> {
    fn source_rank(&self) -> Rank {
        -1
    }
    fn rsmpi_source(&self) -> (SimpleCommunicator, Option<Rank>) {
        (self.comm, None)
    }
}

/// The library's own point-to-point traffic (the tools' exchanges, a new
/// communicator's agreement): the user's calls of the same names, made as
/// [`tools::Lib`], so that the copies of their bodies without hooks are left to the
/// user's calls ([`tools::Caller`]).
pub(crate) trait LibTraffic {
    /// [`Destination::send_with_tag`].
    fn lib_send<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag);
    /// [`Source::receive_into_with_tag`].
    fn lib_receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B, tag: Tag) -> Status;
    /// [`Source::receive_with_tag`], without the status.
    fn lib_receive<M: Equivalence>(&self, tag: Tag) -> M {
        let mut v = M::rsmpi_zero();
        self.lib_receive_into(&mut v, tag);
        v
    }
    /// [`Destination::immediate_send_with_tag`].
    fn lib_immediate_send<'a, Sc: Scope<'a>, B: Buffer + ?Sized + 'a>(
        &self,
        scope: Sc,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, Sc>;
}

impl LibTraffic for Process<'_> {
    #[track_caller]
    fn lib_send<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        blocking_send::<tools::Lib, _>(&self.comm, self.rank, buf, tag, SendMode::Standard)
            .unwrap_or_else(|e| fail("send", e))
    }
    #[track_caller]
    fn lib_receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B, tag: Tag) -> Status {
        blocking_recv::<tools::Lib, _>(&self.comm, Some(self.rank), Some(tag), buf)
            .unwrap_or_else(|e| fail("receive", e))
    }
    #[track_caller]
    fn lib_immediate_send<'a, Sc: Scope<'a>, B: Buffer + ?Sized + 'a>(
        &self,
        scope: Sc,
        buf: &'a B,
        tag: Tag,
    ) -> Request<'a, B, Sc> {
        let mode = SendMode::Standard;
        immediate_send::<tools::Lib, _, _, _>(&self.comm, self.rank, scope, buf, tag, mode, |r| {
            r.unwrap_or_else(|e| fail("isend", e))
        })
    }
}

/// Something to send to (`mpi::point_to_point::Destination`): a [`Process`]. Methods
/// without `_with_tag` use tag 0.
pub trait Destination: AsCommunicator {
    /// The rank sent to.
    fn destination_rank(&self) -> Rank;

    /// The communicator and destination of the send.
    #[doc(hidden)]
    fn rsmpi_destination(&self) -> (SimpleCommunicator, Rank);

    /// Standard-mode send (`MPI_Send`).
    #[track_caller]
    fn send_with_tag<Buf: Buffer + ?Sized>(&self, buf: &Buf, tag: Tag) {
        let (c, r) = self.rsmpi_destination();
        blocking_send::<tools::User, _>(&c, r, buf, tag, SendMode::Standard)
            .unwrap_or_else(|e| fail("send", e))
    }
    /// Standard-mode send with tag 0.
    #[track_caller]
    fn send<Buf: Buffer + ?Sized>(&self, buf: &Buf) {
        self.send_with_tag(buf, 0)
    }
    /// Buffered send (`MPI_Bsend`) through the attached buffer.
    #[track_caller]
    fn buffered_send_with_tag<Buf: Buffer + ?Sized>(&self, buf: &Buf, tag: Tag) {
        let (c, r) = self.rsmpi_destination();
        blocking_send::<tools::User, _>(&c, r, buf, tag, SendMode::Buffered)
            .unwrap_or_else(|e| fail("bsend", e))
    }
    /// Buffered send with tag 0.
    #[track_caller]
    fn buffered_send<Buf: Buffer + ?Sized>(&self, buf: &Buf) {
        self.buffered_send_with_tag(buf, 0)
    }
    /// Synchronous send: returns once a receive matched (`MPI_Ssend`).
    #[track_caller]
    fn synchronous_send_with_tag<Buf: Buffer + ?Sized>(&self, buf: &Buf, tag: Tag) {
        let (c, r) = self.rsmpi_destination();
        blocking_send::<tools::User, _>(&c, r, buf, tag, SendMode::Synchronous)
            .unwrap_or_else(|e| fail("ssend", e))
    }
    /// Synchronous send with tag 0.
    #[track_caller]
    fn synchronous_send<Buf: Buffer + ?Sized>(&self, buf: &Buf) {
        self.synchronous_send_with_tag(buf, 0)
    }
    /// Ready send (`MPI_Rsend`): the receive must be posted already.
    ///
    /// # Safety
    /// None in rsmpi: a ready send that finds no receive posted is reported as an error
    /// (`MPI_ERR_OTHER`), never delivered wrongly. `unsafe` only as in the `mpi` crate,
    /// so that code written for it compiles unchanged; `Process::try_ready_send_with_tag`
    /// is the safe form.
    #[allow(unsafe_code)]
    #[track_caller]
    unsafe fn ready_send_with_tag<Buf: Buffer + ?Sized>(&self, buf: &Buf, tag: Tag) {
        let (c, r) = self.rsmpi_destination();
        blocking_send::<tools::User, _>(&c, r, buf, tag, SendMode::Ready)
            .unwrap_or_else(|e| fail("rsend", e))
    }
    /// Ready send with tag 0.
    ///
    /// # Safety
    /// None in rsmpi; see [`Destination::ready_send_with_tag`].
    #[allow(unsafe_code)]
    #[track_caller]
    unsafe fn ready_send<Buf: Buffer + ?Sized>(&self, buf: &Buf) {
        let (c, r) = self.rsmpi_destination();
        blocking_send::<tools::User, _>(&c, r, buf, 0, SendMode::Ready)
            .unwrap_or_else(|e| fail("rsend", e))
    }
    /// Starts a standard-mode send (`MPI_Isend`).
    #[track_caller]
    fn immediate_send_with_tag<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        let (c, r) = self.rsmpi_destination();
        immediate_send::<tools::User, _, _, _>(&c, r, scope, buf, tag, SendMode::Standard, |r| {
            r.unwrap_or_else(|e| fail("isend", e))
        })
    }
    /// `MPI_Isend` with tag 0.
    #[track_caller]
    fn immediate_send<'a, Sc, Buf>(&self, scope: Sc, buf: &'a Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        self.immediate_send_with_tag(scope, buf, 0)
    }
    /// `MPI_Ibsend`.
    #[track_caller]
    fn immediate_buffered_send_with_tag<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        let (c, r) = self.rsmpi_destination();
        immediate_send::<tools::User, _, _, _>(&c, r, scope, buf, tag, SendMode::Buffered, |r| {
            r.unwrap_or_else(|e| fail("ibsend", e))
        })
    }
    /// `MPI_Ibsend` with tag 0.
    #[track_caller]
    fn immediate_buffered_send<'a, Sc, Buf>(&self, scope: Sc, buf: &'a Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        self.immediate_buffered_send_with_tag(scope, buf, 0)
    }
    /// `MPI_Issend`.
    #[track_caller]
    fn immediate_synchronous_send_with_tag<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        let (c, r) = self.rsmpi_destination();
        immediate_send::<tools::User, _, _, _>(&c, r, scope, buf, tag, SendMode::Synchronous, |r| {
            r.unwrap_or_else(|e| fail("issend", e))
        })
    }
    /// `MPI_Issend` with tag 0.
    #[track_caller]
    fn immediate_synchronous_send<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        self.immediate_synchronous_send_with_tag(scope, buf, 0)
    }
    /// `MPI_Irsend`.
    ///
    /// # Safety
    /// None in rsmpi; see [`Destination::ready_send_with_tag`].
    #[allow(unsafe_code)]
    #[track_caller]
    unsafe fn immediate_ready_send_with_tag<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        let (c, r) = self.rsmpi_destination();
        immediate_send::<tools::User, _, _, _>(&c, r, scope, buf, tag, SendMode::Ready, |r| {
            r.unwrap_or_else(|e| fail("irsend", e))
        })
    }
    /// `MPI_Irsend` with tag 0.
    ///
    /// # Safety
    /// None in rsmpi; see [`Destination::ready_send_with_tag`].
    #[allow(unsafe_code)]
    #[track_caller]
    unsafe fn immediate_ready_send<'a, Sc, Buf>(
        &self,
        scope: Sc,
        buf: &'a Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer + ?Sized,
        Sc: Scope<'a>,
    {
        let (c, r) = self.rsmpi_destination();
        immediate_send::<tools::User, _, _, _>(&c, r, scope, buf, 0, SendMode::Ready, |r| {
            r.unwrap_or_else(|e| fail("irsend", e))
        })
    }
}

impl Destination for Process<'_> {
    fn destination_rank(&self) -> Rank {
        self.rank
    }
    fn rsmpi_destination(&self) -> (SimpleCommunicator, Rank) {
        (self.comm, self.rank)
    }
}

/// rsmpi's additions on a process: `try_` forms that return errors instead of
/// aborting, and persistent requests.
impl<'p> Process<'p> {
    /// [`Destination::send_with_tag`] returning errors.
    pub fn try_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        blocking_send::<tools::User, _>(&self.comm, self.rank, buf, tag, SendMode::Standard)
    }
    /// [`Destination::ready_send_with_tag`] returning errors ([`Error::NoReceivePosted`]).
    pub fn try_ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        blocking_send::<tools::User, _>(&self.comm, self.rank, buf, tag, SendMode::Ready)
    }
    /// [`Destination::buffered_send_with_tag`] returning errors.
    pub fn try_buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        blocking_send::<tools::User, _>(&self.comm, self.rank, buf, tag, SendMode::Buffered)
    }
    /// [`Destination::synchronous_send_with_tag`] returning errors.
    pub fn try_synchronous_send_with_tag<B: Buffer + ?Sized>(
        &self,
        buf: &B,
        tag: Tag,
    ) -> Result<()> {
        blocking_send::<tools::User, _>(&self.comm, self.rank, buf, tag, SendMode::Synchronous)
    }
    /// Starts a send in any mode, returning errors instead of aborting.
    pub fn try_immediate_send_with_tag<'a, Sc: Scope<'a>, B: Buffer + ?Sized + 'a>(
        &self,
        scope: Sc,
        buf: &'a B,
        tag: Tag,
        mode: SendMode,
    ) -> Result<Request<'a, B, Sc>> {
        immediate_send::<tools::User, _, _, _>(&self.comm, self.rank, scope, buf, tag, mode, |r| r)
    }
    /// A persistent standard-mode send of `buf` (`MPI_Send_init`); start it with
    /// [`Persistent::start`](crate::request::Persistent::start); update the data between
    /// starts with [`Persistent::with_buffer`](crate::request::Persistent::with_buffer).
    pub fn send_init<'s, B: BufferMut + ?Sized>(
        &self,
        scope: &'s crate::request::LocalScope<'s, '_>,
        buf: &'s mut B,
        tag: Tag,
    ) -> crate::request::Persistent<'s> {
        let dest = self
            .comm
            .check_rank(self.rank)
            .and_then(|d| check_tag(tag).map(|_| d));
        let dest = dest.unwrap_or_else(|e| fail("send_init", e));
        // its type signature, for the type check's note at each start
        let ty = if tools::checking() {
            type_of(|| (buf.rsmpi_datatype(), buf.rsmpi_count()))
        } else {
            None
        };
        let bytes = buf.rsmpi_direct().unwrap_or_else(|| {
            fail(
                "send_init",
                Error::Type("a persistent send needs a buffer of plain values".into()),
            )
        });
        let region = scope.lend_mut(bytes);
        let ctx = self.comm.ctx;
        let start = move || -> Result<Pending> {
            let Some(dest) = dest else {
                return Ok(done_pending(None));
            };
            let mut mode = SendMode::Standard;
            if tools::checking() {
                crate::check::before_send(ctx, dest, tag, ty.clone());
                mode = tools::send_mode(mode);
            }
            let key = progress::with(|s| {
                start_send::<tools::On>(s, ctx, dest, tag, SendArg::Region(region), mode)
            })?;
            Ok(Pending::new(key, 0, 0, 0))
        };
        crate::request::Persistent {
            start: Box::new(start),
            active: None,
            region,
        }
    }
}

/// rsmpi's additions on a source: `try_` forms and persistent receives.
macro_rules! try_receives {
    ($t:ident) => {
        impl<'p> $t<'p> {
            /// [`Source::receive_into`] returning errors (truncation, bad rank or tag).
            pub fn try_receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<Status> {
                let (c, s) = self.rsmpi_source();
                blocking_recv::<tools::User, _>(&c, s, None, buf)
            }
            /// [`Source::receive_into_with_tag`] returning errors.
            pub fn try_receive_into_with_tag<B: BufferMut + ?Sized>(
                &self,
                buf: &mut B,
                tag: Tag,
            ) -> Result<Status> {
                let (c, s) = self.rsmpi_source();
                blocking_recv::<tools::User, _>(&c, s, Some(tag), buf)
            }
            /// [`Source::receive_vec`] returning errors.
            pub fn try_receive_vec<T: Equivalence>(&self) -> Result<(Vec<T>, Status)> {
                let (c, s) = self.rsmpi_source();
                receive_vec(&c, s, None)
            }
            /// [`Source::probe_with_tag`] returning errors (`tag` `None` = any tag).
            pub fn try_probe(&self, tag: Option<Tag>) -> Result<Status> {
                let (c, s) = self.rsmpi_source();
                probe(&c, s, tag)
            }
            /// [`Source::immediate_receive_into_with_tag`] returning errors (`tag` `None`
            /// = any tag).
            pub fn try_immediate_receive_into<'a, Sc: Scope<'a>, B: BufferMut + ?Sized + 'a>(
                &self,
                scope: Sc,
                buf: &'a mut B,
                tag: Option<Tag>,
            ) -> Result<Request<'a, B, Sc>> {
                let (c, s) = self.rsmpi_source();
                immediate_recv::<tools::User, _, _, _>(&c, s, scope, buf, tag, |r| r)
            }
            /// A persistent receive into `buf` (`MPI_Recv_init`; `tag` `None` = any
            /// tag); start it with [`Persistent::start`](crate::request::Persistent::start).
            pub fn receive_init<'s, B: BufferMut + ?Sized>(
                &self,
                scope: &'s crate::request::LocalScope<'s, '_>,
                buf: &'s mut B,
                tag: Option<Tag>,
            ) -> crate::request::Persistent<'s> {
                let (c, s) = self.rsmpi_source();
                let (src, tg) = match (source(&c, s), tagsel(tag)) {
                    (Ok(s), Ok(t)) => (s, t),
                    (Err(e), _) | (_, Err(e)) => fail("recv_init", e),
                };
                let elem = elem_of(buf);
                let bytes = buf.rsmpi_direct().unwrap_or_else(|| {
                    fail(
                        "recv_init",
                        Error::Type("a persistent receive needs a buffer of plain values".into()),
                    )
                });
                let cap = bytes.len() as u64;
                let region = scope.lend_mut(bytes);
                let ctx = c.ctx;
                let start = move || -> Result<Pending> {
                    let Some(src) = src else {
                        return Ok(done_pending(None));
                    };
                    let key = progress::with(|s| {
                        start_recv::<tools::On>(s, ctx, src, tg, RecvDst::Region(region))
                    })?;
                    Ok(Pending::new(key, cap, elem, ctx))
                };
                crate::request::Persistent {
                    start: Box::new(start),
                    active: None,
                    region,
                }
            }
        }
    };
}
try_receives!(Process);
try_receives!(AnyProcess);

/// A message taken by a matched probe; only this value can receive it
/// (`mpi::point_to_point::Message`).
#[derive(Debug)]
#[must_use = "a matched message must be received"]
pub struct Message {
    id: Option<matching::MsgId>,
    ctx: u32,
}

impl Message {
    /// Whether the message came from `PROC_NULL` (`MPI_MESSAGE_NO_PROC`).
    pub fn is_no_proc(&self) -> bool {
        self.id.is_none()
    }

    /// Receives the message as one value (`MPI_Mrecv`).
    #[track_caller]
    pub fn matched_receive<Msg: Equivalence>(self) -> (Msg, Status) {
        let mut v = Msg::rsmpi_zero();
        let st = self.matched_receive_into(&mut v);
        (v, st)
    }

    /// Receives the message into `buf` (`MPI_Mrecv`).
    #[track_caller]
    pub fn matched_receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Status {
        self.try_receive_into(buf)
            .unwrap_or_else(|e| fail("mrecv", e))
    }

    /// Same as [`Self::matched_receive_into`].
    #[track_caller]
    pub fn receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Status {
        self.matched_receive_into(buf)
    }

    /// Starts receiving the message into `buf` (`MPI_Imrecv`).
    #[track_caller]
    pub fn immediate_matched_receive_into<'a, Sc: Scope<'a>, B: BufferMut + ?Sized + 'a>(
        self,
        scope: Sc,
        buf: &'a mut B,
    ) -> Request<'a, B, Sc> {
        let _t = tools::call(Op::Mrecv);
        expect_type_of(buf);
        let Some(id) = self.id else {
            return Request::new(done_pending(None), Data::Shared(buf));
        };
        let (ctx, elem) = (self.ctx, elem_of(buf));
        let start = |dst: RecvDst| {
            progress::with(|s| -> Result<Key> {
                let cap = dst.capacity(&s.regions) as u64;
                let r = s.engine.mrecv(id, cap)?;
                if let Some(t) = s.tools_mut() {
                    // the receive of a message already matched (by a probe, which is
                    // where any wildcard was): not a wildcard receive
                    t.posted(r, ctx, Src::Rank(u32::MAX), TagSel::Any);
                    t.probe_received(id, r);
                }
                if let Some(region) = dst.region() {
                    s.by_region.insert(region, Key::Recv(r));
                }
                s.recvs.insert(r, dst);
                s.run_outputs();
                Ok(Key::Recv(r))
            })
            .unwrap_or_else(|e| fail("imrecv", e))
        };
        if buf.rsmpi_direct().is_some() {
            let loan = scope.rsmpi_lend_mut(buf, |b| b.rsmpi_direct().expect("direct"));
            let cap = progress::with(|s| s.regions.len(loan.id()).unwrap_or(0)) as u64;
            let key = start(RecvDst::Region(loan.id()));
            return Request::new(Pending::new(key, cap, elem, ctx), Data::Loan(loan));
        }
        let cap = buf.rsmpi_capacity();
        let key = start(RecvDst::Owned(vec![0; cap]));
        Request::new(
            Pending::new(key, cap as u64, elem, ctx),
            Data::Unpack(buf, |b, d| b.rsmpi_unpack(d)),
        )
    }

    /// [`Self::matched_receive_into`] returning errors.
    #[track_caller]
    pub fn try_receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Result<Status> {
        let _t = tools::call(Op::Mrecv);
        expect_type_of(buf);
        let Some(id) = self.id else {
            return Ok(Status::proc_null());
        };
        let (ctx, elem) = (self.ctx, elem_of(buf));
        let recv = |dst: RecvDst| {
            progress::with(|s| -> Result<(Key, u64)> {
                let cap = dst.capacity(&s.regions) as u64;
                let r = s.engine.mrecv(id, cap)?;
                if let Some(t) = s.tools_mut() {
                    // the receive of a message already matched (by a probe, which is
                    // where any wildcard was): not a wildcard receive
                    t.posted(r, ctx, Src::Rank(u32::MAX), TagSel::Any);
                    t.probe_received(id, r);
                }
                if let Some(region) = dst.region() {
                    s.by_region.insert(region, Key::Recv(r));
                }
                s.recvs.insert(r, dst);
                s.run_outputs();
                Ok((Key::Recv(r), cap))
            })
        };
        if let Some(bytes) = buf.rsmpi_direct() {
            return transport::mem::lend_mut(&progress::HOST, bytes, |region| {
                let (key, cap) = recv(RecvDst::Region(region))?;
                crate::request::finish(progress::wait(key), cap, elem, ctx)
            });
        }
        let (key, cap) = recv(RecvDst::Owned(vec![0; buf.rsmpi_capacity()]))?;
        let st = crate::request::finish(progress::wait(key), cap, elem, ctx)?;
        let data = progress::with(|s| s.owned_done.remove(&key)).unwrap_or_default();
        buf.rsmpi_unpack(&data)?;
        Ok(st)
    }

    #[track_caller]
    fn receive_vec<T: Equivalence>(self, st: Status) -> Result<(Vec<T>, Status)> {
        let size = T::rsmpi_sig_size();
        if size > 0 && !st.len.is_multiple_of(size as u64) {
            return Err(Error::Count { len: st.len, size });
        }
        let n = (st.len as usize).checked_div(size).unwrap_or(0);
        let mut v: Vec<T> = (0..n).map(|_| T::rsmpi_zero()).collect();
        let st = self.try_receive_into(&mut v[..])?;
        Ok((v, st))
    }
}

/// `(Message, Status).matched_receive_vec()` (`mpi::point_to_point::MatchedReceiveVec`).
pub trait MatchedReceiveVec {
    /// Receives the matched message into a vector of the right length.
    #[track_caller]
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status);
}

impl MatchedReceiveVec for (Message, Status) {
    #[track_caller]
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status) {
        let (m, st) = self;
        m.receive_vec(st).unwrap_or_else(|e| fail("mrecv", e))
    }
}

/// A receive of one value into the library's own buffer
/// (`mpi::point_to_point::ReceiveFuture`).
#[must_use = "a receive future must be completed with get"]
pub struct ReceiveFuture<T> {
    pending: Pending,
    _t: std::marker::PhantomData<T>,
}

impl<T: Equivalence> ReceiveFuture<T> {
    fn start(comm: &SimpleCommunicator, src: Option<Rank>, tag: Option<Tag>) -> Result<Self> {
        let (src, tag) = (source(comm, src)?, tagsel(tag)?);
        let size = T::rsmpi_sig_size();
        let pending = match src {
            None => done_pending(None),
            Some(src) => {
                let ctx = comm.ctx;
                let key = progress::with(|s| {
                    start_recv::<tools::On>(s, ctx, src, tag, RecvDst::Owned(vec![0; size]))
                })?;
                Pending::new(key, size as u64, size, ctx)
            }
        };
        Ok(ReceiveFuture {
            pending,
            _t: std::marker::PhantomData,
        })
    }

    fn complete(self, d: progress::Done) -> (T, Status) {
        let p = self.pending;
        let st = crate::request::finish(d, p.capacity, p.elem, p.ctx)
            .unwrap_or_else(|e| fail("wait", e));
        let mut v = T::rsmpi_zero();
        if let Some(b) = progress::with(|s| s.owned_done.remove(&p.key)) {
            T::rsmpi_unpack(std::slice::from_mut(&mut v), &b);
        }
        (v, st)
    }

    /// Waits for the value.
    pub fn get(self) -> (T, Status) {
        let d = progress::wait(self.pending.key);
        self.complete(d)
    }

    /// The value if it arrived, else the future.
    pub fn r#try(self) -> std::result::Result<(T, Status), Self> {
        match progress::test(self.pending.key) {
            Some(d) => Ok(self.complete(d)),
            None => Err(self),
        }
    }
}

fn same_comm<D: Destination + ?Sized, S: Source + ?Sized>(d: &D, s: &S) -> SimpleCommunicator {
    let (dc, sc) = (d.rsmpi_destination().0, s.rsmpi_source().0);
    assert_eq!(
        dc.relation_to(&sc),
        CommunicatorRelation::Identical,
        "rsmpi: send_receive: source and destination must be of one communicator"
    );
    dc
}

/// `MPI_Sendrecv` of one value each way, with tags.
#[track_caller]
pub fn send_receive_with_tags<M, D, R, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> (R, Status)
where
    M: Equivalence,
    D: Destination,
    R: Equivalence,
    S: Source,
{
    let mut r = R::rsmpi_zero();
    let st = send_receive_into_with_tags(msg, destination, sendtag, &mut r, source, receivetag);
    (r, st)
}

/// `MPI_Sendrecv` of one value each way (send tag 0, any receive tag).
#[track_caller]
pub fn send_receive<R, M, D, S>(msg: &M, destination: &D, source: &S) -> (R, Status)
where
    M: Equivalence,
    D: Destination,
    R: Equivalence,
    S: Source,
{
    let mut r = R::rsmpi_zero();
    let st = send_receive_into(msg, destination, &mut r, source);
    (r, st)
}

#[track_caller]
fn sendrecv<M, B, D, S>(
    op: Op,
    msg: &M,
    destination: &D,
    sendtag: Tag,
    buf: &mut B,
    source: &S,
    tag: Option<Tag>,
) -> Status
where
    M: Buffer + ?Sized,
    B: BufferMut + ?Sized,
    D: Destination + ?Sized,
    S: Source + ?Sized,
{
    let _t = tools::call(op);
    let comm = same_comm(destination, source);
    let (_, src) = source.rsmpi_source();
    let dest = destination.rsmpi_destination().1;
    crate::request::scope(|sc| {
        let r = immediate_recv::<tools::User, _, _, _>(&comm, src, sc, buf, tag, |r| {
            r.unwrap_or_else(|e| fail("sendrecv", e))
        });
        blocking_send::<tools::User, _>(&comm, dest, msg, sendtag, SendMode::Standard)
            .unwrap_or_else(|e| fail("sendrecv", e));
        r.wait()
    })
}

/// `MPI_Sendrecv` into a buffer, with tags.
#[track_caller]
pub fn send_receive_into_with_tags<M, D, B, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    buf: &mut B,
    source: &S,
    receivetag: Tag,
) -> Status
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    sendrecv(
        Op::Sendrecv,
        msg,
        destination,
        sendtag,
        buf,
        source,
        Some(receivetag),
    )
}

/// `MPI_Sendrecv` into a buffer (send tag 0, any receive tag).
#[track_caller]
pub fn send_receive_into<M, D, B, S>(msg: &M, destination: &D, buf: &mut B, source: &S) -> Status
where
    M: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    S: Source,
{
    sendrecv(Op::Sendrecv, msg, destination, 0, buf, source, None)
}

/// `MPI_Sendrecv_replace`, with tags.
#[track_caller]
pub fn send_receive_replace_into_with_tags<B, D, S>(
    buf: &mut B,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> Status
where
    B: Buffer + BufferMut + ?Sized,
    D: Destination,
    S: Source,
{
    let out = Buffer::rsmpi_send(buf)
        .unwrap_or_else(|e| fail("sendrecv", e))
        .into_owned();
    sendrecv(
        Op::SendrecvReplace,
        &out[..],
        destination,
        sendtag,
        buf,
        source,
        Some(receivetag),
    )
}

/// `MPI_Sendrecv_replace` (send tag 0, any receive tag).
#[track_caller]
pub fn send_receive_replace_into<B, D, S>(buf: &mut B, destination: &D, source: &S) -> Status
where
    B: Buffer + BufferMut + ?Sized,
    D: Destination,
    S: Source,
{
    let out = Buffer::rsmpi_send(buf)
        .unwrap_or_else(|e| fail("sendrecv", e))
        .into_owned();
    sendrecv(
        Op::SendrecvReplace,
        &out[..],
        destination,
        0,
        buf,
        source,
        None,
    )
}

impl SimpleCommunicator {
    pub(crate) fn relation_to(&self, other: &SimpleCommunicator) -> CommunicatorRelation {
        Communicator::compare(self, other)
    }
}

//! The progress engine: the process's one protocol engine, its transport, the lent
//! buffers, and the loop that moves everything forward. Every call into the library
//! runs it; nothing runs behind the caller's back.

use crate::error::{Error, Result};
use launcher::Boot;
use matching::{Engine, GetInto, Output, RecvId, RecvOutcome, SendId, SendOutcome, XferId};
use rustc_hash::FxHashMap as HashMap;
use std::cell::RefCell;
use transport::mem::{RegionHost, RegionId, Regions};
use transport::{Arriving, Incoming, Posted, Rank, Transport, TransportError};

pub(crate) fn to_matching(b: transport::RemoteBuf) -> matching::RemoteBuf {
    matching::RemoteBuf {
        addr: b.addr,
        len: b.len,
        key: b.key,
    }
}

fn to_transport(b: matching::RemoteBuf) -> transport::RemoteBuf {
    transport::RemoteBuf {
        addr: b.addr,
        len: b.len,
        key: b.key,
    }
}

/// Where a send's bytes are.
pub(crate) enum SendSrc {
    Region(RegionId),
    /// A range of a region (a collective's buffer in the table).
    Slice(RegionId, usize, usize),
    /// A buffered send's copy (kept until the send has left, after the user's
    /// request completed).
    Owned(Vec<u8>),
    /// The packed elements of a non-contiguous send (kept until it completes).
    Packed(Vec<u8>),
}

/// Where a receive's bytes go.
pub(crate) enum RecvDst {
    /// A buffer lent by the caller.
    Region(RegionId),
    /// A range of a region (a collective's buffer): the message lands in place.
    Slice(RegionId, usize, usize),
    /// The library's own buffer: kept in `State::owned_done` when the receive
    /// completes, for the request to unpack (padding, datatypes with gaps,
    /// collectives).
    Owned(Vec<u8>),
}

impl RecvDst {
    pub fn region(&self) -> Option<RegionId> {
        match self {
            RecvDst::Region(r) => Some(*r),
            RecvDst::Owned(_) | RecvDst::Slice(..) => None,
        }
    }

    /// The contiguous bytes the message is written to.
    pub fn bytes<'a>(&'a mut self, regions: &'a mut Regions) -> Option<&'a mut [u8]> {
        match self {
            RecvDst::Region(r) => regions.slice_mut(*r),
            RecvDst::Slice(r, off, len) => regions.slice_mut(*r)?.get_mut(*off..*off + *len),
            RecvDst::Owned(v) => Some(v),
        }
    }

    /// Their number.
    pub fn capacity(&self, regions: &Regions) -> usize {
        match self {
            RecvDst::Region(r) => regions.len(*r).unwrap_or(0),
            RecvDst::Slice(_, _, len) => *len,
            RecvDst::Owned(v) => v.len(),
        }
    }
}

/// A completed request's result.
#[derive(Clone, Debug)]
pub(crate) enum Done {
    Recv(RecvOutcome),
    Send(SendOutcome),
    /// A collective schedule finished (its result is in `owned_done`).
    Coll(Result<()>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Recv(RecvId),
    Send(SendId),
    /// A `PROC_NULL` operation: complete from the start.
    Null(u64),
    /// A send that left at once: complete from the start, with nothing in the
    /// library to look up (in the `done` table only while the error checker, which
    /// tracks every request, is on; then the number is unique, otherwise 0).
    Sent(u64),
    /// A collective schedule.
    Coll(u64),
}

/// The request using each lent region, indexed by the region's dense index.
#[derive(Default)]
pub(crate) struct ByRegion(Vec<Option<Key>>);

impl ByRegion {
    pub fn insert(&mut self, r: RegionId, k: Key) {
        let i = r.index();
        if i >= self.0.len() {
            self.0.resize(i + 1, None);
        }
        self.0[i] = Some(k);
    }
    pub fn remove(&mut self, r: &RegionId) {
        if let Some(k) = self.0.get_mut(r.index()) {
            *k = None;
        }
    }
    pub fn get(&self, r: &RegionId) -> Option<&Key> {
        self.0.get(r.index()).and_then(|k| k.as_ref())
    }
}

/// The ranks of a communicator other than the world: comm rank -> world rank and back.
pub(crate) struct Group {
    pub world: Vec<u32>,
    pub local: HashMap<u32, i32>,
}

impl Group {
    pub fn new(world: Vec<u32>) -> Group {
        let local = world
            .iter()
            .enumerate()
            .map(|(i, w)| (*w, i as i32))
            .collect();
        Group { world, local }
    }
}

/// Requests by id: one entry beside a window of slots indexed by id
/// ([`matching::OneMap`]), so that the single request of a blocking call costs
/// comparisons and a window of them indexing, not hashing.
pub(crate) type Requests<K, V> = matching::OneMap<K, V>;

/// A receive in [`RecvTable`].
pub(crate) enum RecvSlot {
    /// Posted: where its message goes.
    Pending(RecvDst),
    /// Complete: its result, until a wait or test takes it.
    Done(RecvOutcome),
}

impl RecvSlot {
    /// Holds `outcome` from now on; where the message went, if it was pending.
    #[inline(always)]
    fn finish(&mut self, outcome: RecvOutcome) -> Option<RecvDst> {
        match std::mem::replace(self, RecvSlot::Done(outcome)) {
            RecvSlot::Pending(d) => Some(d),
            RecvSlot::Done(_) => None,
        }
    }
}

/// The receives of this rank by id, each in one slot from posting until its result
/// is taken: completing one replaces where its message goes by its result in place,
/// instead of moving it from one table to another.
#[derive(Default)]
pub(crate) struct RecvTable(Requests<RecvId, RecvSlot>);

impl RecvTable {
    /// A receive posted, its message going to `dst`.
    #[inline]
    pub fn insert(&mut self, id: RecvId, dst: RecvDst) {
        self.0.insert(id, RecvSlot::Pending(dst));
    }

    /// Where pending receive `id`'s message goes.
    #[inline]
    pub fn dst_mut(&mut self, id: RecvId) -> Option<&mut RecvDst> {
        match self.0.get_mut(&id) {
            Some(RecvSlot::Pending(d)) => Some(d),
            _ => None,
        }
    }

    #[inline]
    pub fn is_pending(&self, id: RecvId) -> bool {
        matches!(self.0.get(&id), Some(RecvSlot::Pending(_)))
    }

    #[inline]
    pub fn is_done(&self, id: RecvId) -> bool {
        matches!(self.0.get(&id), Some(RecvSlot::Done(_)))
    }

    /// Receive `id` completed with `outcome`; where its message went, if it was
    /// pending here.
    #[inline]
    pub fn complete(&mut self, id: RecvId, outcome: RecvOutcome) -> Option<RecvDst> {
        match self.0.get_mut(&id) {
            Some(slot) => slot.finish(outcome),
            None => {
                self.0.insert(id, RecvSlot::Done(outcome));
                None
            }
        }
    }

    /// Receive `id`, not in the table, completed with `outcome` as it was posted.
    #[inline(always)]
    pub fn insert_done(&mut self, id: RecvId, outcome: RecvOutcome) {
        debug_assert!(self.0.get(&id).is_none(), "receive {id:?} is in the table");
        self.0.insert(id, RecvSlot::Done(outcome));
    }

    /// Copies `data` into pending receive `id`'s buffer and, given its completion
    /// (`done`), completes it in the same slot: one lookup for both. Where its message
    /// went when it completed (as [`RecvTable::complete`]); `Err` if the receive has
    /// no buffer here.
    #[inline(always)]
    pub fn deliver(
        &mut self,
        id: RecvId,
        regions: &mut Regions,
        data: &[u8],
        done: Option<RecvOutcome>,
    ) -> std::result::Result<Option<RecvDst>, ()> {
        let Some(slot) = self.0.get_mut(&id) else {
            return Err(());
        };
        let RecvSlot::Pending(dst) = slot else {
            return Err(());
        };
        let into = dst.bytes(regions).ok_or(())?;
        transport::copy::copy(&mut into[..data.len()], data);
        Ok(done.and_then(|o| slot.finish(o)))
    }

    /// The result of receive `id`, if it is complete (left in place).
    pub fn outcome(&self, id: RecvId) -> Option<RecvOutcome> {
        match self.0.get(&id) {
            Some(RecvSlot::Done(o)) => Some(*o),
            _ => None,
        }
    }

    /// The result of receive `id`, taken out, if it is complete.
    #[inline(always)]
    pub fn take_done(&mut self, id: RecvId) -> Option<RecvOutcome> {
        match self.0.remove_if(&id, |s| matches!(s, RecvSlot::Done(_))) {
            Some(RecvSlot::Done(o)) => Some(o),
            _ => None,
        }
    }
}

/// Completed requests other than receives ([`RecvTable`]) whose results wait to be
/// taken: sends by id, the others, numbered apart, hashed.
#[derive(Default)]
pub(crate) struct DoneTable {
    sends: Requests<SendId, Done>,
    other: HashMap<Key, Done>,
}

impl DoneTable {
    #[inline]
    pub fn insert(&mut self, k: Key, d: Done) {
        match k {
            Key::Send(x) => self.sends.insert(x, d),
            _ => self.other.insert(k, d),
        };
    }

    #[inline]
    pub fn remove(&mut self, k: &Key) -> Option<Done> {
        match k {
            Key::Send(x) => self.sends.remove(x),
            _ if self.other.is_empty() => None,
            _ => self.other.remove(k),
        }
    }

    #[inline]
    pub fn contains_key(&self, k: &Key) -> bool {
        match k {
            Key::Send(x) => self.sends.contains_key(x),
            _ => self.other.contains_key(k),
        }
    }
}

pub(crate) struct State {
    pub engine: Engine,
    pub transport: crate::link::Link,
    /// Short name of the transports in use (`Universe::transport`).
    pub transport_kind: String,
    pub regions: Regions,
    /// Receives by id: pending (with where the message goes) or complete (with
    /// their result, until a wait or test takes it).
    pub recvs: RecvTable,
    pub send_src: Requests<SendId, SendSrc>,
    /// The request using each lent region, so that a scope's end finds its requests
    /// without scanning all of them.
    pub by_region: ByRegion,
    pub done: DoneTable,
    pub boot: Boot,
    pub next_ctx: u32,
    /// Keys of `PROC_NULL` requests.
    pub next_null: u64,
    /// Groups of communicators whose ranks are not the world's (by context id).
    pub groups: HashMap<u32, Group>,
    /// Contexts of freed communicators.
    pub freed: rustc_hash::FxHashSet<u32>,
    /// Communicator names (`MPI_Comm_set_name`) by context.
    pub names: HashMap<u32, String>,
    /// The data of completed receives into the library's own buffers, until their
    /// request collects it.
    pub owned_done: HashMap<Key, Vec<u8>>,
    /// Collective schedules in progress.
    pub colls: crate::collective::exec::Colls,
    pub start: std::time::Instant,
    /// The transport registers exposed memory ([`transport::Caps::registers`]): each
    /// request's exposure is kept in `exposures` and undone when the request ends.
    pub registers: bool,
    pub exposures: HashMap<Key, transport::RemoteBuf>,
    /// Reads the transport reported [`transport::Posted::Pending`], by token, with the
    /// staging buffer they fill (kept here, unmoved, until the read completes).
    pub pending_gets: HashMap<u64, (XferId, Option<Vec<u8>>)>,
    /// Direct writes the transport reported [`transport::Posted::Pending`] and has
    /// not reported done (on shared memory, offers the receiver may read:
    /// transport-shm's `push` module).
    pub pending_puts: usize,
    /// The transport registers memory, or a read or direct write is pending: a poll
    /// asks the transport for completions (one test on the path of every poll).
    pub want_done: bool,
    /// The built-in tools, while any is on (`crate::tools`).
    pub tools: Option<Box<crate::tools::Tools>>,
    /// A completed receive has more to it than its buffer: the tools are on (their
    /// hook sees it), or the transport registers memory (its exposure is undone).
    /// One test on each completion for both (`Finish::finished`); set where either
    /// is.
    pub finish_hooks: bool,
    /// Receives completed inside a poll whose exposure is undone after it (only
    /// where the transport registers memory).
    pub unexpose_later: Vec<Key>,
}

/// What completing a receive touches, borrowed apart from the engine and the
/// transport, which a poll holds: a receive whose completion the engine hands back
/// with its payload ([`matching::Deliver::done`]) completes inside the poll, with no
/// trip through the engine's output queue.
pub(crate) struct Finish<'a> {
    recvs: &'a mut RecvTable,
    regions: &'a mut Regions,
    by_region: &'a mut ByRegion,
    owned_done: &'a mut HashMap<Key, Vec<u8>>,
    tools: &'a mut Option<Box<crate::tools::Tools>>,
    registers: bool,
    /// [`State::finish_hooks`].
    hooks: bool,
    unexpose_later: &'a mut Vec<Key>,
}

impl Finish<'_> {
    /// Copies a delivery's payload (`data`, its range of the message) into its
    /// receive's buffer; completes the receive if the delivery carries its completion.
    /// `W`: whether the tools' hook is compiled into this copy ([`crate::tools::Mode`]).
    #[inline(always)]
    fn deliver<W: crate::tools::Mode>(
        &mut self,
        d: matching::Deliver,
        data: &[u8],
    ) -> std::result::Result<(), String> {
        let dst = self
            .recvs
            .deliver(d.recv, self.regions, data, d.done)
            .map_err(|()| format!("no buffer for receive {:?}", d.recv))?;
        if let Some(outcome) = d.done {
            self.finished::<W>(d.recv, outcome, dst);
        }
        Ok(())
    }

    /// Receive `recv` completed with `outcome` (its slot already holds it); `dst` is
    /// where its message went.
    #[inline(always)]
    fn finished<W: crate::tools::Mode>(
        &mut self,
        recv: RecvId,
        outcome: RecvOutcome,
        dst: Option<RecvDst>,
    ) {
        match dst {
            Some(RecvDst::Region(r)) => self.by_region.remove(&r),
            Some(RecvDst::Slice(..)) | None => {}
            Some(RecvDst::Owned(v)) => self.owned(recv, outcome, v),
        }
        // the tools' hook and the exposure behind one test: with neither, a
        // completion tests one flag, as it tests `registers` with the tools compiled
        // out (issue 14: the tools cost nothing when off)
        if self.hooks {
            self.finished_hooks::<W>(recv);
        }
    }

    /// [`Self::finished`]'s part for the tools and for a registering transport. The
    /// tools' hook runs after the buffer's bookkeeping, which it does not read: it
    /// reads the receive's outcome from its slot.
    #[inline(never)]
    fn finished_hooks<W: crate::tools::Mode>(&mut self, recv: RecvId) {
        if W::ON && !cfg!(rsmpi_tools_out) && self.tools.is_some() {
            self.received(recv);
        }
        if self.registers {
            self.unexpose_later.push(Key::Recv(recv));
        }
    }

    /// The tools' hook for receive `recv`, complete: its outcome is read from its slot,
    /// which holds it by now, so that the path without tools keeps nothing for the
    /// hook but the id.
    #[cold]
    #[inline(never)]
    fn received(&mut self, recv: RecvId) {
        // with the tracer alone, most receives are its blocking ones, which it
        // records in their calls: nothing to look up, and no frame for the lookup
        if crate::tools::of(self.tools).is_some_and(|t| t.wants_received()) {
            self.received_now(recv);
        }
    }

    /// [`Self::received`] for a receive some tool may keep.
    #[inline(never)]
    fn received_now(&mut self, recv: RecvId) {
        if let (Some(t), Some(o)) = (crate::tools::of(self.tools), self.recvs.outcome(recv)) {
            t.received(recv, &o);
        }
    }

    /// A receive into the library's own buffer completed: its data is kept until its
    /// request collects it (collectives; off the user's message path).
    #[inline(never)]
    fn owned(&mut self, recv: RecvId, outcome: RecvOutcome, mut v: Vec<u8>) {
        let len = match outcome {
            RecvOutcome::Received { len, .. } => len as usize,
            RecvOutcome::Cancelled => 0,
        };
        v.truncate(len);
        self.owned_done.insert(Key::Recv(recv), v);
    }
}

/// The token of a one-sided operation: a send's put or a transfer's read.
fn put_token(s: SendId) -> u64 {
    s.0 << 1
}
fn get_token(x: XferId) -> u64 {
    x.0 << 1 | 1
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Runs `f` on the library state. Panics with a clear message when MPI is not
/// initialized on this thread; see `try_with`. Always inlined, like `try_with`: a
/// body on the per-message path exists twice (`tools::Mode`), and LLVM would keep
/// these thread-local accesses out of line for a second caller.
#[inline(always)]
pub(crate) fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    try_with(f).unwrap_or_else(|e| panic!("rsmpi: {e}"))
}

#[inline(always)]
pub(crate) fn try_with<R>(f: impl FnOnce(&mut State) -> R) -> Result<R> {
    STATE.with(|s| {
        let mut s = s.try_borrow_mut().expect("rsmpi is not reentrant");
        s.as_mut().map(f).ok_or(Error::NotInitialized)
    })
}

pub(crate) fn install(st: State) -> Result<()> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.is_some() {
            return Err(Error::AlreadyInitialized);
        }
        *s = Some(st);
        Ok(())
    })
}

pub(crate) fn uninstall() -> Option<State> {
    STATE.with(|s| s.borrow_mut().take())
}

impl State {
    /// The tools, while any is on; never in a build with the tools compiled out
    /// (`--cfg rsmpi_tools_out`, the build `benches/callgrind.sh` compares with).
    #[inline(always)]
    pub(crate) fn tools_mut(&mut self) -> Option<&mut crate::tools::Tools> {
        crate::tools::of(&mut self.tools)
    }

    pub fn rank(&self) -> Rank {
        self.engine.rank()
    }

    /// World rank of rank `r` of the communicator with context `ctx`. The world's
    /// own ranks inline (every send checks its rank with this); another
    /// communicator's looked up out of line. Left whole to LLVM, it stayed out of
    /// line with the tools compiled in, and the send paid a call for the world's
    /// identity (`docs/performance.md`, thirtieth round).
    #[inline(always)]
    pub fn world_rank(&self, ctx: u32, r: i32) -> u32 {
        if ctx & !crate::topology::INTERNAL == 0 {
            return r as u32;
        }
        self.group_world_rank(ctx, r)
    }

    /// [`State::world_rank`] in a communicator other than the world.
    #[inline(never)]
    fn group_world_rank(&self, ctx: u32, r: i32) -> u32 {
        match self.groups.get(&(ctx & !crate::topology::INTERNAL)) {
            Some(g) => g.world[r as usize],
            None => r as u32,
        }
    }

    /// Rank in the communicator with context `ctx` of world rank `w`.
    pub fn comm_rank(&self, ctx: u32, w: u32) -> i32 {
        if ctx & !crate::topology::INTERNAL == 0 {
            return w as i32;
        }
        match self.groups.get(&(ctx & !crate::topology::INTERNAL)) {
            Some(g) => g.local.get(&w).copied().unwrap_or(-1),
            None => w as i32,
        }
    }

    /// Ends the job: prints what went wrong on this rank and exits through the
    /// launcher, which tears down the other ranks.
    pub fn fatal(&mut self, call: &str, what: &dyn std::fmt::Display) -> ! {
        let msg = format!("rsmpi: rank {}: {call}: {what}", self.rank());
        self.abort(1, &msg)
    }

    /// Ends the whole job with `code` (`MPI_Abort`, a fatal error, a panic), after
    /// writing the events the tracer holds (`RSMPI_TRACE`), so that a job that dies
    /// leaves this rank's last events in its trace.
    pub fn abort(&mut self, code: i32, msg: &str) -> ! {
        if let Some(t) = self.tools.as_deref_mut().and_then(|t| t.trace.as_mut()) {
            t.write_at_abort();
            // written: the launcher's signal may end this rank at once again
            crate::trace::signal::release();
        }
        self.boot.abort(code, msg)
    }

    /// Polls the transport once and carries out everything the engine asks for.
    /// Returns whether anything arrived.
    pub fn progress(&mut self) -> bool {
        self.progress_inline()
    }

    /// [`State::progress`], always inlined: for the blocking receive's one visit
    /// (`point_to_point::recv_and_wait`), where LLVM left `progress` out of line
    /// with the tools compiled in (a call and 17 instructions in the answer loop)
    /// and inlined it with them compiled out.
    #[inline(always)]
    pub fn progress_inline(&mut self) -> bool {
        self.progress_up_to(32)
    }

    /// [`State::progress`] taking at most `max` incoming messages.
    #[inline(always)]
    fn progress_up_to(&mut self, max: usize) -> bool {
        let mut n = self.poll_incoming(max);
        // one-sided operations that finish later: the network transports' (they
        // register memory), and shared memory's large reads, which the peer copies
        // through the ring (transport-shm's pulls)
        if self.want_done {
            n += self.poll_done();
        }
        self.run_outputs();
        crate::collective::exec::advance_all(self);
        n > 0
    }

    /// Whether send `id`, still in flight, carries at most the eager limit (so that it
    /// waits for an answer only as a lone read or a synchronous send: [`wait`]).
    fn small_send(&self, id: matching::SendId) -> bool {
        let len = match self.send_src.get(&id) {
            Some(SendSrc::Region(r)) => self.regions.len(*r).unwrap_or(usize::MAX),
            Some(SendSrc::Slice(_, _, len)) => *len,
            Some(SendSrc::Owned(v) | SendSrc::Packed(v)) => v.len(),
            None => return false,
        };
        len as u64 <= self.engine.config().eager_limit
    }

    /// The engine, the transport, and the rest that completing a receive touches,
    /// borrowed apart.
    #[inline(always)]
    fn parts(&mut self) -> (&mut Engine, &mut dyn Transport, Finish<'_>) {
        let State {
            engine,
            transport,
            regions,
            recvs,
            by_region,
            owned_done,
            tools,
            registers,
            finish_hooks,
            unexpose_later,
            ..
        } = self;
        let fin = Finish {
            recvs,
            regions,
            by_region,
            owned_done,
            tools,
            registers: *registers,
            hooks: *finish_hooks,
            unexpose_later,
        };
        (engine, &mut **transport, fin)
    }

    /// Receive `e.recv`, into `dst`, took a message that was here before it
    /// ([`matching::Posting::Early`]): copies the payload in and completes the
    /// receive, as the outputs `CopyIn` and `RecvDone` would, without the queue.
    /// `exposed`: the receive's buffer was registered for it (undone now). The
    /// tools saw it posted and done already ([`crate::tools::Tools::posted_done`]).
    #[inline(always)]
    pub(crate) fn early_done(
        &mut self,
        e: matching::Early,
        mut dst: RecvDst,
        exposed: Option<transport::RemoteBuf>,
    ) {
        let matching::Early {
            recv,
            data,
            outcome,
        } = e;
        match dst.bytes(&mut self.regions) {
            Some(b) => transport::copy::copy(&mut b[..data.len()], &data),
            None => self.fatal("copy", &"receive without buffer"),
        }
        self.engine.recycle(data);
        self.recvs.insert_done(recv, outcome);
        let (_, transport, mut fin) = self.parts();
        if let RecvDst::Owned(v) = dst {
            fin.owned(recv, outcome, v);
        }
        if let Some(b) = exposed {
            transport.unexpose(b);
        }
    }

    /// Undoes the exposures of receives that completed inside a poll.
    #[inline]
    fn unexpose_finished(&mut self) {
        if self.unexpose_later.is_empty() {
            return;
        }
        if self.exposures.is_empty() {
            // receives that were not exposed (every eager one): no lookups
            self.unexpose_later.clear();
            return;
        }
        // the list is given back with its capacity: taking it for good cost a
        // receive an allocation on a network transport (`docs/performance.md`,
        // "An idle poll on verbs")
        let mut keys = std::mem::take(&mut self.unexpose_later);
        for &k in &keys {
            self.unexpose(k);
        }
        keys.clear();
        self.unexpose_later = keys;
    }

    fn poll_incoming(&mut self, max: usize) -> usize {
        let (engine, transport, mut fin) = self.parts();
        let mut err = None;
        let res = transport.poll_incoming(max, &mut |from, msg| {
            let bytes = match msg {
                Incoming::Whole(bytes) => bytes,
                Incoming::Arriving(a) => match Self::arriving(engine, &mut fin, from, a) {
                    Ok(Some(bytes)) => bytes,
                    Ok(None) => return,
                    Err(e) => return err = Some(e),
                },
            };
            // the common case handled here, the others out of line, so that their
            // results do not meet (`Engine::handle_common`)
            let Some(r) = engine.handle_common(from, bytes) else {
                return Self::handle_other(engine, &mut fin, from, bytes, &mut err);
            };
            Self::delivered(r, &mut fin, bytes, &mut err);
        });
        self.unexpose_finished();
        if let Some(e) = err {
            self.fatal("progress", &e);
        }
        match res {
            Ok(n) => n,
            Err(e) => self.fatal("poll", &e),
        }
    }

    /// Copies the payload of a handled message into its receive's buffer, if it has
    /// one for a posted receive (and completes the receive if the delivery says so);
    /// an error goes to `err`.
    #[inline(always)]
    fn delivered(
        r: std::result::Result<Option<matching::Deliver>, matching::ProtocolError>,
        fin: &mut Finish<'_>,
        bytes: &[u8],
        err: &mut Option<String>,
    ) {
        match r {
            Ok(Some(d)) => {
                let data = &bytes[d.range.clone()];
                if let Err(e) = fin.deliver::<crate::tools::On>(d, data) {
                    *err = Some(e);
                }
            }
            Ok(None) => {}
            Err(e) => *err = Some(e.to_string()),
        }
    }

    /// A message other than the common case (`Engine::handle_other`), handled and
    /// delivered.
    #[inline(never)]
    fn handle_other(
        engine: &mut Engine,
        fin: &mut Finish<'_>,
        from: Rank,
        bytes: &[u8],
        err: &mut Option<String>,
    ) {
        let r = engine.handle_other(from, bytes);
        Self::delivered(r, fin, bytes, err);
    }

    /// A large message still being copied in: if a posted receive takes it, copies it
    /// into that receive's buffer as it arrives and returns `None`; otherwise waits for
    /// all of it and returns it, to be handled as a whole message.
    #[inline(never)]
    fn arriving<'a>(
        engine: &mut Engine,
        fin: &mut Finish<'_>,
        from: Rank,
        a: &'a mut dyn Arriving,
    ) -> std::result::Result<Option<&'a [u8]>, String> {
        let early = engine
            .handle_head(from, a.head(), a.len())
            .map_err(|e| e.to_string())?;
        let Some(d) = early else {
            return a.whole().map(Some).map_err(|e| e.to_string());
        };
        let Some(dst) = fin.recvs.dst_mut(d.recv).and_then(|r| r.bytes(fin.regions)) else {
            return Err(format!("no buffer for receive {:?}", d.recv));
        };
        a.copy_out(d.range.start, &mut dst[..d.range.len()])
            .map_err(|e| e.to_string())?;
        // all of it is in the buffer: a completion handed back with it applies now
        if let Some(outcome) = d.done {
            let dst = fin.recvs.complete(d.recv, outcome);
            fin.finished::<crate::tools::On>(d.recv, outcome, dst);
        }
        Ok(None)
    }

    /// Collects one-sided operations that finished after they were posted.
    fn poll_done(&mut self) -> usize {
        let mut done = Vec::new();
        let res = self.transport.poll_done(&mut |t, r| done.push((t, r)));
        if let Err(e) = res {
            self.fatal("completion", &e);
        }
        let n = done.len();
        if n == 0 {
            // each idle poll on a network transport: nothing to drop either (a
            // buffer kept in the state for this, taken and put back, cost more)
            return 0;
        }
        for (token, r) in done {
            if let Err(e) = r {
                self.fatal(
                    if token & 1 == 0 {
                        "direct write"
                    } else {
                        "read"
                    },
                    &e,
                );
            }
            let res = if token & 1 == 0 {
                self.pending_puts = self.pending_puts.saturating_sub(1);
                self.engine.put_done(SendId(token >> 1))
            } else {
                match self.pending_gets.remove(&token) {
                    Some((xfer, staged)) => self.engine.get_done(xfer, staged),
                    None => self.fatal("read", &"completion of an unknown read"),
                }
            };
            if let Err(e) = res {
                self.fatal("completion", &e);
            }
        }
        self.want_done = self.registers || self.pending_puts != 0 || !self.pending_gets.is_empty();
        n
    }

    fn send_bytes<'a>(
        regions: &'a Regions,
        src: &'a Requests<SendId, SendSrc>,
        s: SendId,
        len: u64,
    ) -> &'a [u8] {
        let b = match src.get(&s).expect("send buffer") {
            SendSrc::Region(r) => regions.slice(*r).expect("lent send buffer"),
            SendSrc::Slice(r, off, len) => {
                &regions.slice(*r).expect("collective buffer")[*off..*off + *len]
            }
            SendSrc::Owned(v) | SendSrc::Packed(v) => v,
        };
        &b[..len as usize]
    }

    /// The result of the request `key` if it is complete, taken out of the library
    /// (a send that left at once has nothing to take: [`Key::Sent`]).
    #[inline(always)]
    pub fn take_done(&mut self, key: &Key) -> Option<Done> {
        match key {
            Key::Sent(0) => Some(Done::Send(matching::SendOutcome::Sent)),
            Key::Recv(r) => self.recvs.take_done(*r).map(Done::Recv),
            _ => self.done.remove(key),
        }
    }

    /// Whether the request `key` is complete (its result not yet taken).
    #[inline(always)]
    pub fn is_done(&self, key: &Key) -> bool {
        match key {
            Key::Sent(0) => true,
            Key::Recv(r) => self.recvs.is_done(*r),
            _ => self.done.contains_key(key),
        }
    }

    /// The fast path of a standard send (see [`Engine::send_now`]): if the message can
    /// leave at once with its payload, transmits it from `bytes` and returns true (the
    /// send is complete); otherwise changes nothing and returns false.
    ///
    /// `W`: whether the tools' hooks are compiled into this copy ([`tools::Mode`]):
    /// the unwatched copy of a call passes [`tools::Off`], and has none.
    ///
    /// [`tools::Mode`]: crate::tools::Mode
    /// [`tools::Off`]: crate::tools::Off
    #[inline(never)]
    pub fn send_now<W: crate::tools::Mode>(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        bytes: &[u8],
    ) -> Result<bool> {
        let spec = matching::SendSpec {
            dest,
            tag,
            ctx,
            len: bytes.len() as u64,
            mode: matching::SendMode::Standard,
            read_advised: false,
            // only read by rendezvous, which the fast path never takes
            buf: matching::RemoteBuf::default(),
        };
        if dest == self.engine.rank() && !(W::ON && self.tools_mut().is_some()) {
            // straight into a posted receive that takes it, if one does (not with a
            // tool on: the tools follow messages through the transport)
            if let Some(d) = self.engine.send_to_self(&spec)? {
                self.deliver_to_self::<W>(d, bytes);
                return Ok(true);
            }
        }
        // written in place by the engine, and read from here by the transport
        let mut header = matching::wire::Header::EMPTY;
        let Some(len) = self.engine.send_now(&spec, &mut header)? else {
            return Ok(false);
        };
        let mut spins = 0u32;
        loop {
            match self
                .transport
                .try_send(dest, header.as_bytes(), &bytes[..len as usize])
            {
                Ok(()) => {
                    if let (true, Some(t)) = (W::ON, self.tools_mut()) {
                        t.sent(dest, ctx, tag, bytes.len() as u64, None);
                    }
                    return Ok(true);
                }
                Err(TransportError::Full(_)) => self.full(&mut spins),
                Err(e) => self.fatal("send", &e),
            }
        }
    }

    /// Copies a send to this rank into the receive that took it
    /// ([`Engine::send_to_self`]) and completes that receive.
    #[inline(always)]
    fn deliver_to_self<W: crate::tools::Mode>(&mut self, d: matching::Deliver, bytes: &[u8]) {
        let (_, _, mut fin) = self.parts();
        let data = &bytes[d.range.clone()];
        if let Err(e) = fin.deliver::<W>(d, data) {
            self.fatal("send to self", &e);
        }
        self.unexpose_finished();
        self.run_outputs();
    }

    /// The peer's ring is full: drain ours so that it can drain its own.
    fn full(&mut self, spins: &mut u32) {
        self.poll_incoming(32);
        *spins += 1;
        if *spins > 64 {
            std::thread::yield_now();
        }
    }

    fn transmit(&mut self, to: Rank, header: &[u8], payload: Option<(SendId, u64)>) {
        let mut spins = 0u32;
        loop {
            let State {
                transport,
                regions,
                send_src,
                ..
            } = self;
            let bytes = payload.map_or(&[][..], |(s, len)| {
                Self::send_bytes(regions, send_src, s, len)
            });
            match transport.try_send(to, header, bytes) {
                Ok(()) => return,
                Err(TransportError::Full(_)) => self.full(&mut spins),
                Err(e) => self.fatal("send", &e),
            }
        }
    }

    /// Asks the engine to cancel the operation of `key` (`MPI_Cancel`).
    pub fn cancel(&mut self, key: Key) {
        let _ = match key {
            Key::Recv(r) => self.engine.cancel_recv(r),
            Key::Send(x) => self.engine.cancel_send(x),
            Key::Null(_) | Key::Sent(_) | Key::Coll(_) => Ok(()),
        };
    }

    /// Exposes a request's buffer to peers. Where exposing registers nothing (shared
    /// memory) the descriptor is the address itself, built here without a call.
    #[inline]
    pub fn expose(&mut self, addr: usize, len: usize) -> Result<transport::RemoteBuf> {
        if !self.registers {
            return Ok(transport::RemoteBuf {
                addr: addr as u64,
                len: len as u64,
                key: 0,
            });
        }
        self.transport
            .expose(addr, len)
            .map_err(|e| crate::Error::Transport(format!("exposing {len} bytes: {e}")))
    }

    /// [`State::expose`] where the engine may access the buffer one-sidedly, and the
    /// plain descriptor (no registration) where it never will; says which it was.
    #[inline]
    pub fn expose_if(
        &mut self,
        needed: impl FnOnce(&Self) -> bool,
        addr: usize,
        len: usize,
    ) -> Result<(transport::RemoteBuf, bool)> {
        if self.registers && needed(self) {
            return Ok((self.expose(addr, len)?, true));
        }
        let plain = transport::RemoteBuf {
            addr: addr as u64,
            len: len as u64,
            key: 0,
        };
        Ok((plain, false))
    }

    /// Whether a send of `len` bytes to `dest` in `mode` is better read by its
    /// receiver: it would be lone (above the transport's size for it, within the
    /// eager limit, nothing else of this rank's in flight to `dest`;
    /// [`matching::Engine::lone_now`]) or a stream's
    /// ([`matching::Engine::stream_now`]), and the transport, asked only then and
    /// told which, advises it ([`matching::Config::lone_read_above`],
    /// [`matching::Config::stream_read_above`], `Transport::prefers_read`).
    #[inline]
    pub fn read_advised(&mut self, dest: u32, len: usize, mode: matching::SendMode) -> bool {
        let l = len as u64;
        if self.engine.lone_now(dest, l, mode) {
            self.transport.prefers_read(dest, len, false)
        } else {
            self.engine.stream_now(dest, l, mode) && self.transport.prefers_read(dest, len, true)
        }
    }

    /// Whether a send of `len` bytes may be read one-sidedly by its receiver (it goes
    /// by rendezvous), so that a registering transport must expose it.
    pub fn send_is_read(&self, len: usize) -> bool {
        let c = self.engine.config();
        // (a lone, crossing or stream's one may be: `Config::lone_read_above`,
        // `Config::cross_read_above`, `Config::stream_read_above`)
        let floor = c
            .lone_read_above
            .min(c.cross_read_above)
            .min(c.stream_read_above);
        len as u64 > floor
            || !(c.protocol == matching::RecvProtocol::Eager && len as u64 <= c.eager_limit)
    }

    /// Whether a receive may be advertised to its sender (and written one-sidedly).
    pub fn recv_is_advertised(&self, source: matching::Source, capacity: usize) -> bool {
        let c = self.engine.config();
        c.matching == matching::MatchingMode::Both
            && capacity as u64 > c.advertise_above
            && source != matching::Source::Any
    }

    /// Remembers the exposure of request `key` until it ends (registering transports).
    pub fn exposed(&mut self, key: Key, buf: transport::RemoteBuf) {
        if self.registers {
            self.exposures.insert(key, buf);
        }
    }

    /// Undoes the exposure of request `key`, which has ended.
    fn unexpose(&mut self, key: Key) {
        if self.registers {
            if let Some(b) = self.exposures.remove(&key) {
                self.transport.unexpose(b);
            }
        }
    }

    /// Acts on the engine's outputs (most calls leave none).
    #[inline]
    pub fn run_outputs(&mut self) {
        if self.engine.has_output() {
            self.run_queued();
        }
    }

    #[inline(never)]
    fn run_queued(&mut self) {
        while let Some(o) = self.engine.poll_output() {
            match o {
                Output::Transmit {
                    to,
                    header,
                    payload,
                } => self.transmit(to, header.as_bytes(), payload),
                Output::Put { to, send, dst, len } => {
                    let State {
                        transport,
                        regions,
                        send_src,
                        ..
                    } = self;
                    let bytes = Self::send_bytes(regions, send_src, send, len);
                    match transport.put(to, bytes, to_transport(dst), 0, put_token(send)) {
                        Ok(Posted::Done) => {
                            if let Err(e) = self.engine.put_done(send) {
                                self.fatal("direct write", &e);
                            }
                        }
                        Ok(Posted::Pending) => {
                            self.pending_puts += 1;
                            self.want_done = true;
                        }
                        Err(e) => self.fatal("direct write", &e),
                    }
                }
                Output::Get {
                    xfer,
                    from,
                    src,
                    len,
                    into,
                } => {
                    let token = get_token(xfer);
                    let (posted, staged) = match into {
                        GetInto::Recv(r) => {
                            let State {
                                transport,
                                regions,
                                recvs,
                                ..
                            } = self;
                            let dst = recvs.dst_mut(r).and_then(|d| d.bytes(regions));
                            let Some(dst) = dst else {
                                self.fatal("read", &"receive without buffer")
                            };
                            let dst = &mut dst[..len as usize];
                            (transport.get(from, dst, to_transport(src), 0, token), None)
                        }
                        GetInto::Staging => {
                            let mut v = vec![0; len as usize];
                            let r = self
                                .transport
                                .get(from, &mut v, to_transport(src), 0, token);
                            (r, Some(v))
                        }
                    };
                    match posted {
                        Ok(Posted::Done) => {
                            if let Err(e) = self.engine.get_done(xfer, staged) {
                                self.fatal("read", &e);
                            }
                        }
                        // the staging buffer's heap block stays where the read goes
                        Ok(Posted::Pending) => {
                            self.pending_gets.insert(token, (xfer, staged));
                            self.want_done = true;
                        }
                        Err(e) => self.fatal("read", &e),
                    }
                }
                Output::CopyIn { recv, data } => {
                    let dst = self
                        .recvs
                        .dst_mut(recv)
                        .and_then(|d| d.bytes(&mut self.regions));
                    match dst {
                        Some(dst) => transport::copy::copy(&mut dst[..data.len()], &data),
                        None => self.fatal("copy", &"receive without buffer"),
                    }
                    self.engine.recycle(data);
                }
                Output::RecvDone { recv, outcome } => {
                    let (_, _, mut fin) = self.parts();
                    let dst = fin.recvs.complete(recv, outcome);
                    fin.finished::<crate::tools::On>(recv, outcome, dst);
                    self.unexpose_finished();
                }
                Output::SendDone { send, outcome } => {
                    if let Some(t) = self.tools_mut() {
                        t.send_done(send);
                    }
                    match self.send_src.get(&send) {
                        Some(SendSrc::Region(r)) => {
                            self.by_region.remove(r);
                            self.send_src.remove(&send);
                        }
                        Some(SendSrc::Packed(_)) => {
                            if let Some(SendSrc::Packed(v)) = self.send_src.remove(&send) {
                                self.colls.pool.give(v);
                            }
                        }
                        Some(SendSrc::Slice(..)) => {
                            self.send_src.remove(&send);
                        }
                        _ => {}
                    }
                    // a buffered send's copy stays exposed until the copy is freed
                    if self.registers && !self.send_src.contains_key(&send) {
                        self.unexpose(Key::Send(send));
                    }
                    self.done.insert(Key::Send(send), Done::Send(outcome));
                }
                Output::Matched { recv, source, tag } => {
                    if let Some(t) = self.tools_mut() {
                        t.matched(recv, source, tag);
                    }
                }
                Output::Withdrawn {
                    source,
                    ctx,
                    tag,
                    ahead,
                } => {
                    if let Some(t) = self.tools_mut() {
                        t.withdrawn(source, ctx, tag, ahead);
                    }
                }
                Output::BufferFree { send } => {
                    self.send_src.remove(&send);
                    self.unexpose(Key::Send(send));
                }
            }
        }
    }
}

/// How a blocked call waits between polls: spin while a reply can come any moment, and
/// give the CPU away only when waiting longer (or at once when the job has more ranks
/// than the node has CPUs, so that a peer sharing this CPU can run).
pub(crate) struct Backoff {
    polls: u32,
    since: Option<std::time::Instant>,
}

/// Idle polls a waiting call makes back to back before each further one gives the
/// CPU a spin-loop hint (`pause` on x86). On this machine's processor a hint after
/// every idle poll made a small message's one-way time ~5 ns longer (`latency` 0 B,
/// 0.159 against 0.153 µs, medians of alternating runs in the machine's near state),
/// and eight hints a poll ~80 ns longer: the reply is seen later. Past these polls
/// (a few microseconds) the hint comes back, so that a long wait leaves the core to
/// a sibling thread and spends less power (`docs/performance.md`, "Waiting").
const FREE_POLLS: u32 = 64;

/// Spin this long before yielding when every rank has a CPU of its own.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

fn oversubscribed() -> bool {
    static OVER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OVER.get_or_init(|| {
        // CPUs of the node, not of this process's affinity mask (ranks may be pinned
        // one per CPU, which is exactly when spinning is right)
        let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .map(|s| online_cpus(s.trim()))
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let ranks = try_with(|s| s.engine.size() as usize).unwrap_or(1);
        ranks > cpus
    })
}

/// Counts the CPUs of a kernel CPU list such as `0-3,8,10-11`.
fn online_cpus(list: &str) -> usize {
    list.split(',')
        .filter_map(|r| match r.split_once('-') {
            Some((a, b)) => Some(b.parse::<usize>().ok()? + 1 - a.parse::<usize>().ok()?),
            None => r.parse::<usize>().ok().map(|_| 1),
        })
        .sum()
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff {
            polls: 0,
            since: None,
        }
    }

    /// Called after a poll that found nothing to do.
    pub fn idle(&mut self) {
        if !cfg!(rsmpi_tools_out) && crate::trace::signal::came() {
            // a traced rank asked to stop writes its events first (`trace/signal.rs`)
            crate::trace::signal::stop();
        }
        if crate::tools::checking() {
            // a peer may be waiting for the notes this rank holds back
            crate::check::idle();
        }
        self.polls += 1;
        if oversubscribed() {
            // the rank we wait for may be waiting for this CPU: give it away soon (after
            // 100 polls instead, a 4-rank barrier on 2 CPUs took twice as long)
            if self.polls > 8 {
                std::thread::yield_now();
            }
            return;
        }
        if self.polls.is_multiple_of(64) {
            let since = *self.since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() > SPIN {
                std::thread::yield_now();
            }
        }
        // the hint only after FREE_POLLS idle polls: a reply that comes within a few
        // microseconds is seen sooner without it
        if self.polls > FREE_POLLS {
            std::hint::spin_loop();
        }
    }

    /// Called after a poll that moved something.
    pub fn busy(&mut self) {
        self.polls = 0;
        self.since = None;
    }
}

/// Progresses until `key` completes; returns its result.
pub(crate) fn wait(key: Key) -> Done {
    let mut b = Backoff::new();
    loop {
        let (got, moved) = with(|s| {
            if let Some(d) = s.take_done(&key) {
                return (Some(d), true);
            }
            // a send the eager limit would carry waits for its answer (a lone read's
            // `Fin`, a synchronous send's match): one message at a time, so that what
            // comes after the answer (a ping-pong's next message) waits in the
            // channel for the receive that the caller posts next, instead of arriving
            // before it (a lone message would then be read into a staging buffer and
            // copied again). Larger sends (a stream of rendezvous, whose sender also
            // serves the receiver's pulls) poll as every wait does.
            let moved = match key {
                Key::Send(id) if s.small_send(id) => s.progress_up_to(1),
                _ => s.progress(),
            };
            (s.take_done(&key), moved)
        });
        if let Some(d) = got {
            return d;
        }
        if moved {
            b.busy();
        } else {
            b.idle();
            if crate::tools::checking() {
                if let (Key::Coll(_), true) = (key, crate::check::types::wanted()) {
                    // an immediate collective's check reports before its wait hangs
                    crate::check::coll::settle(key);
                }
                crate::check::deadlock::waiting(key);
            }
        }
    }
}

/// [`wait`] for a receive: its outcome. The common cases, a receive already complete
/// (a window of receives) or completed by the first progress (the reply of a
/// ping-pong, there but not yet read), take it in one access to the library state,
/// with none of the other kinds of result to sort out. The first turn is written out
/// here rather than sharing [`wait`]'s loop through a generic one: inlined into
/// every wait, that loop cost the self and pair loops ~60–70 instructions a round,
/// and out of line ~80–90 (`docs/performance.md`, fifteenth round).
#[inline(always)]
pub(crate) fn wait_recv(id: RecvId) -> RecvOutcome {
    let first = with(|s| {
        if let Some(o) = s.recvs.take_done(id) {
            return Some(o);
        }
        s.progress();
        s.recvs.take_done(id)
    });
    if let Some(o) = first {
        return o;
    }
    match wait(Key::Recv(id)) {
        Done::Recv(o) => o,
        _ => unreachable!("a receive completes as a receive"),
    }
}

/// Progresses once; returns the result of `key` if it completed.
pub(crate) fn test(key: Key) -> Option<Done> {
    test_in::<crate::tools::On>(key)
}

/// [`test`] in its caller's function, one copy per [`tools::Mode`]: the unwatched
/// copy's thread-local access then has one caller, which LLVM inlines it into.
#[inline(always)]
pub(crate) fn test_in<W: crate::tools::Mode>(key: Key) -> Option<Done> {
    with(|s| {
        s.progress();
        s.take_done(&key)
    })
}

/// The host of lent buffers: the thread's library state.
pub struct Host;

/// The one host value (scopes borrow it for `'static`).
pub static HOST: Host = Host;

impl RegionHost for Host {
    // always inlined: see `with`
    #[inline(always)]
    fn with_regions<R>(&self, f: impl FnOnce(&mut Regions) -> R) -> R {
        with(|s| f(&mut s.regions))
    }

    /// Cancels every unfinished request that uses the scope's buffers and progresses
    /// until each has completed or been cancelled, so no write can land after the
    /// buffers are returned.
    fn quiesce(&self, ids: &[RegionId]) {
        if ids.is_empty() {
            return;
        }
        self.quiesce_busy(ids);
    }

    /// The common case in one access to the library state: no request uses the
    /// scope's buffers any more (they were all waited for), and they are released
    /// at once.
    #[inline(always)]
    fn quiesce_then(&self, ids: &[RegionId], release: impl FnOnce(&mut Regions)) {
        let release = with(|s| {
            if ids.iter().all(|id| s.by_region.get(id).is_none()) {
                release(&mut s.regions);
                None
            } else {
                Some(release)
            }
        });
        if let Some(release) = release {
            self.quiesce_busy(ids);
            self.with_regions(release);
        }
    }
}

impl Host {
    /// [`RegionHost::quiesce`] of non-empty `ids`.
    #[inline(never)]
    fn quiesce_busy(&self, ids: &[RegionId]) {
        let (pending, leaked) = with(|s| {
            if ids.iter().all(|id| s.by_region.get(id).is_none()) {
                // the common case (a blocking call's buffer): nothing left to cancel
                return (Vec::new(), Vec::new());
            }
            let keys: Vec<Key> = ids
                .iter()
                .filter_map(|id| s.by_region.get(id).copied())
                .filter(|k| match k {
                    Key::Recv(r) => s.recvs.is_pending(*r),
                    Key::Send(x) => s.send_src.contains_key(x),
                    Key::Null(_) | Key::Sent(_) | Key::Coll(_) => false,
                })
                .collect();
            let leaked = match s.tools.is_some() && !keys.is_empty() {
                true => crate::check::errors::scope_cancels(s, &keys),
                false => Vec::new(),
            };
            for k in &keys {
                s.cancel(*k);
            }
            s.run_outputs();
            (keys, leaked)
        });
        if !leaked.is_empty() {
            crate::check::errors::report_scope_leaks(leaked);
        }
        for k in pending {
            wait(k);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists() {
        assert_eq!(super::online_cpus("0-1"), 2);
        assert_eq!(super::online_cpus("0-3,8,10-11"), 7);
        assert_eq!(super::online_cpus("0"), 1);
        assert_eq!(super::online_cpus("junk"), 0);
    }
}

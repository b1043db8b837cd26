//! The hooks the built-in tools hang on: one switch for all of them, the marks of an
//! MPI call's enter and leave, and the library state's record of messages and
//! receives. With no tool on, a call on the per-message path tests the switch (a
//! relaxed atomic flag) once and runs the copy of its body without hooks ([`Mode`]),
//! and a message tests whether the state holds any tool.
//!
//! The tools: the tracer (`RSMPI_TRACE`, [`crate::trace`]), the message-race checker
//! (`RSMPI_CHECK=races`, [`crate::check`]) and the deadlock detector
//! (`RSMPI_CHECK=deadlock`, `check/deadlock.rs`) and the error checks
//! (`RSMPI_CHECK=errors`, `check/errors.rs`); `docs/tools.md`.

use std::sync::atomic::{AtomicBool, Ordering};

use rustc_hash::FxHashMap as HashMap;

use matching::{MsgId, RecvId, RecvOutcome, SendId, Source, TagSel};

use crate::check::deadlock::Deadlock;
use crate::check::errors::Errors;
use crate::check::Notes;
use crate::progress;
use crate::topology::SimpleCommunicator;
use crate::trace::format::{Kind, Op};
use crate::trace::Tracer;

static ON: AtomicBool = AtomicBool::new(false);
static CHECKING: AtomicBool = AtomicBool::new(false);
/// Whether standard sends may run as synchronous ones (`RSMPI_CHECK_SYNC=1`), so
/// that a send asks the tools only then ([`send_mode`]).
static SYNC_SENDS: AtomicBool = AtomicBool::new(false);
/// Whether the race check is the only tool on (`RSMPI_CHECK=races`, no tracer):
/// a blocking receive then runs the copy without hooks and records itself
/// ([`Noted`]).
static RACES_ALONE: AtomicBool = AtomicBool::new(false);

/// Standard sends run as synchronous ones from now on (the deadlock check's
/// `RSMPI_CHECK_SYNC=1`, at initialisation).
pub(crate) fn set_sync_sends() {
    SYNC_SENDS.store(true, Ordering::Relaxed);
}

/// Whether any tool is on in this process.
#[inline(always)]
pub(crate) fn is_on() -> bool {
    !cfg!(rsmpi_tools_out) && ON.load(Ordering::Relaxed)
}

/// Whether any check (`RSMPI_CHECK`) is on: the checks' hooks (the notes, the
/// type signatures, the requests' records) are skipped when only the tracer is.
#[inline(always)]
pub(crate) fn checking() -> bool {
    !cfg!(rsmpi_tools_out) && CHECKING.load(Ordering::Relaxed)
}

/// The tools in `t` (the library state's), while any is on; never in a build with
/// the tools compiled out (`RUSTFLAGS="--cfg rsmpi_tools_out"`), which
/// `benches/callgrind.sh` counts next to the normal build: the hooks are gone from
/// it, so the difference is what the tools cost when off.
#[inline(always)]
pub(crate) fn of(t: &mut Option<Box<Tools>>) -> Option<&mut Tools> {
    if cfg!(rsmpi_tools_out) {
        return None;
    }
    t.as_deref_mut()
}

/// The tools of this rank, in the library state while any is on.
#[derive(Default)]
pub(crate) struct Tools {
    pub trace: Option<Tracer>,
    pub notes: Option<Notes>,
    pub deadlock: Option<Deadlock>,
    pub errors: Option<Errors>,
    /// A tool's own traffic is running: no tool records or checks it.
    pub busy: bool,
    /// The user's MPI call in progress (the outermost one) and how deep inside it
    /// the library is.
    pub call: crate::check::Call,
    pub depth: u32,
}

impl Tools {
    /// The user's MPI call `op`, made at `site`, begins ([`enter`], in a visit to the
    /// library state of the caller's).
    #[inline(always)]
    pub fn enter(&mut self, op: Op, site: &'static std::panic::Location<'static>) {
        if self.busy {
            return;
        }
        if self.depth == 0 {
            self.call = crate::check::Call {
                op: Some(op),
                site: Some(site),
            };
        }
        self.depth += 1;
        if let Some(t) = &mut self.trace {
            t.push(Kind::Enter, op as u8, 0, 0, 0, 0, 0);
        }
    }

    /// Whether the notes (the race and type checks) are the only tool on, outside
    /// any other call and any tool's own traffic: a call is then recorded by what
    /// the notes keep of it alone ([`crate::check::note_send_in`]).
    #[inline(always)]
    pub fn notes_alone(&self) -> bool {
        self.trace.is_none()
            && self.deadlock.is_none()
            && self.errors.is_none()
            && !self.busy
            && self.depth == 0
    }

    /// Whether no call is being made and no tool's own traffic runs: with the race
    /// check alone on ([`Noted`]), what [`Tools::notes_alone`] tests.
    #[inline(always)]
    pub fn outside_calls(&self) -> bool {
        !self.busy && self.depth == 0
    }

    /// [`Tools::left`] with the race check alone on ([`Noted`]): the type check is
    /// off, so a call has no type signature to end and the receives' check is due by
    /// their number alone.
    #[inline(always)]
    pub(crate) fn left_noted(&self, op: Op) -> Left {
        match &self.notes {
            Some(n) => Left {
                flush: !op.is_send() && n.holds_notes(),
                settle: self.depth == 0 && n.settle_due_untyped(),
            },
            None => Left::default(),
        }
    }

    /// The MPI call `op`, never entered ([`crate::check::note_send_in`]), ends:
    /// what [`Tools::leave`] would leave to do.
    #[inline(always)]
    pub(crate) fn ended_unentered(&mut self, op: Op) -> Left {
        if let Some(n) = &mut self.notes {
            n.call_ended();
        }
        self.left(op)
    }

    /// The MPI call `op` ends ([`leave`], in a visit to the library state of the
    /// caller's): what it leaves to do once out of the state.
    #[inline(always)]
    pub(crate) fn leave(&mut self, op: Op) -> Left {
        if let Some(n) = &mut self.notes {
            n.call_ended();
        }
        if self.busy {
            return Left::default();
        }
        self.depth = self.depth.saturating_sub(1);
        if let Some(t) = &mut self.trace {
            t.push(Kind::Leave, op as u8, 0, 0, 0, 0, 0);
        }
        self.left(op)
    }

    /// What the end of the MPI call `op` leaves to do once out of the library state.
    /// Notes are held back only across consecutive sends: a call that may wait for a
    /// peer (a receive, a wait, a test, a probe, a collective) lets them go first;
    /// the receives completed so far are checked for races, in the order they
    /// matched, once enough are waiting and the outermost call ends.
    #[inline(always)]
    fn left(&self, op: Op) -> Left {
        match &self.notes {
            Some(n) => Left {
                flush: !op.is_send() && n.holds_notes(),
                settle: self.depth == 0 && n.settle_due(),
            },
            None => Left::default(),
        }
    }

    /// A message of `bytes` bytes left for world rank `dest`: for the tracer, the
    /// deadlock detector and the error checks (the race checker's note went ahead of
    /// the send), so with none of them on, a test here and no call.
    #[inline(always)]
    pub fn sent(&mut self, dest: u32, ctx: u32, tag: i32, bytes: u64, id: Option<SendId>) {
        if self.trace.is_some() || self.deadlock.is_some() || self.errors.is_some() {
            self.sent_to_tools(dest, ctx, tag, bytes, id);
        }
    }

    #[cold]
    #[inline(never)]
    fn sent_to_tools(&mut self, dest: u32, ctx: u32, tag: i32, bytes: u64, id: Option<SendId>) {
        if self.busy {
            return;
        }
        if let Some(t) = &mut self.trace {
            t.send(dest, ctx, tag, bytes);
        }
        if self.deadlock.is_some() || self.errors.is_some() {
            self.sent_to_checks(dest, ctx, tag, id);
        }
    }

    /// [`Self::sent_to_tools`] for the deadlock detector and the error checks: out of
    /// line, so that the tracer's record is made in a small frame.
    #[inline(never)]
    fn sent_to_checks(&mut self, dest: u32, ctx: u32, tag: i32, id: Option<SendId>) {
        if let (Some(d), Some(id)) = (&mut self.deadlock, id) {
            d.send_started(id, dest, self.call);
        }
        if let Some(e) = &mut self.errors {
            e.sent(dest, ctx, tag, self.call);
        }
    }

    /// Whether standard sends run as synchronous ones (`RSMPI_CHECK_SYNC=1` with
    /// `RSMPI_CHECK=deadlock`; never the tools' own sends).
    #[cold]
    #[inline(never)]
    pub fn sync_sends(&self) -> bool {
        !self.busy && self.deadlock.as_ref().is_some_and(|d| d.sync_sends)
    }

    /// A send completed.
    #[cold]
    #[inline(never)]
    pub fn send_done(&mut self, id: SendId) {
        if let Some(d) = &mut self.deadlock {
            d.send_done(id);
        }
    }

    /// A receive was posted (or a matched message's receive started: `source` and
    /// `tag` are then the message's own). Inlined into its callers, each out of
    /// line: the watched copies of [`crate::point_to_point::start_recv`] and the
    /// receives of messages a matched probe took.
    #[inline(always)]
    pub fn posted(&mut self, id: RecvId, ctx: u32, source: Source, tag: TagSel) {
        if self.busy {
            return;
        }
        if let Some(t) = &mut self.trace {
            t.posted(id, ctx);
        }
        if let Some(r) = &mut self.notes {
            r.posted(id, ctx, source, tag, self.call);
        }
        if let Some(d) = &mut self.deadlock {
            d.posted(id, ctx, source, self.call);
        }
    }

    /// A blocking receive of the user's on `ctx` from `source` with `tag`, the MPI
    /// call `op` made at `site` and never entered, took a message already here and
    /// completed with `outcome` in its call's first visit ([`Noted`]): what
    /// [`Tools::posted_done`] would have recorded (under the call it is part of, if
    /// nested), and the call's end (the type check off: no type signature to end
    /// with it).
    #[inline(always)]
    pub(crate) fn received_in_call(
        &mut self,
        (op, site): (Op, &'static std::panic::Location<'static>),
        ctx: u32,
        source: Source,
        tag: TagSel,
        outcome: &RecvOutcome,
    ) -> Left {
        if self.busy {
            if let Some(n) = &mut self.notes {
                n.call_ended();
            }
            return Left::default();
        }
        let call = if self.depth == 0 {
            crate::check::Call {
                op: Some(op),
                site: Some(site),
            }
        } else {
            self.call
        };
        if let Some(n) = &mut self.notes {
            n.posted_done(ctx, source, tag, call, outcome);
        }
        self.left_noted(op)
    }

    /// A receive was posted (as [`Tools::posted`]) and completed with `outcome` at
    /// once, taking a message that was here before it: what `posted` and
    /// [`Tools::received`] would record, without keeping the receive in between (the
    /// deadlock checker keeps only receives that wait, and this one never did).
    #[inline(always)]
    pub fn posted_done(&mut self, ctx: u32, source: Source, tag: TagSel, outcome: &RecvOutcome) {
        if self.busy {
            return;
        }
        if let Some(t) = &mut self.trace {
            t.posted_done(ctx, outcome);
        }
        if let Some(r) = &mut self.notes {
            r.posted_done(ctx, source, tag, self.call, outcome);
        }
    }

    /// Receive `id` matched the message `source` sent with `tag`, and completes later
    /// (the engine's `Output::Matched`: its data is read after the match): the tracer
    /// and the checkers number it on its channel now, in the order MPI matched it, not
    /// after a later message of its channel that completes first.
    #[cold]
    #[inline(never)]
    pub fn matched(&mut self, id: RecvId, source: u32, tag: i32) {
        if let Some(t) = &mut self.trace {
            t.matched(id, source, tag);
        }
        if let Some(r) = &mut self.notes {
            r.matched(id, source, tag);
        }
    }

    /// The message `source` sent on (`ctx`, `tag`) was withdrawn by its sender's
    /// successful cancel, behind `ahead` earlier messages of its channel not yet
    /// matched (the engine's `Output::Withdrawn`): its number on the channel, which
    /// the sender counted, is passed over.
    #[cold]
    #[inline(never)]
    pub fn withdrawn(&mut self, source: u32, ctx: u32, tag: i32, ahead: u64) {
        if let Some(t) = &mut self.trace {
            t.withdrawn(source, ctx, tag, ahead);
        }
        if let Some(r) = &mut self.notes {
            r.withdrawn(source, ctx, tag, ahead);
        }
    }

    /// A matched probe (`MPI_Mprobe`) took message `msg`, which `source` sent on
    /// (`ctx`, `tag`): that is its match, so it is numbered on its channel now; its
    /// receive takes the number ([`Tools::probe_received`]).
    #[cold]
    #[inline(never)]
    pub fn probe_matched(&mut self, msg: MsgId, source: u32, ctx: u32, tag: i32) {
        if self.busy {
            return;
        }
        if let Some(t) = &mut self.trace {
            t.probe_matched(msg, source, ctx, tag);
        }
        if let Some(r) = &mut self.notes {
            r.probe_matched(msg, source, ctx, tag);
        }
    }

    /// Receive `r` of the message `msg` a matched probe took was posted (after
    /// [`Tools::posted`]).
    #[cold]
    #[inline(never)]
    pub fn probe_received(&mut self, msg: MsgId, r: RecvId) {
        if let Some(t) = &mut self.trace {
            t.early.rekey(msg.0, r.0);
        }
        if let Some(n) = &mut self.notes {
            n.early.rekey(msg.0, r.0);
        }
    }

    /// Whether any tool keeps receives for [`Tools::received`]: the checks, or the
    /// tracer with receives posted and not complete.
    #[inline(always)]
    pub fn wants_received(&self) -> bool {
        self.notes.is_some()
            || self.deadlock.is_some()
            || self.trace.as_ref().is_some_and(Tracer::tracks_receives)
    }

    /// A receive completed (inlined into its one caller, the library state's hook,
    /// itself out of line).
    #[inline(always)]
    pub fn received(&mut self, id: RecvId, outcome: &RecvOutcome) {
        if let Some(t) = &mut self.trace {
            t.received(id, outcome);
        }
        if let Some(r) = &mut self.notes {
            r.received(id, outcome);
        }
        if let Some(d) = &mut self.deadlock {
            d.received(id);
        }
    }
}

/// The number of messages so far on each channel (peer, context, tag), for the
/// tracer's per-pair sequence numbers and the race checker's notes. Each peer's last
/// channel is kept in a slot of its own (by the peer's rank) beside the table: a
/// program's next message with a peer is most often on the channel of its last one
/// (a ping-pong, a loop of sends, a wildcard receive fed by many ranks). There is a
/// slot for each rank of the job, up to [`MAX_SLOTS`]: with 8 slots for 16 senders,
/// two peers took turns in each and every message of the paper's Table 2 went
/// through the table (~170 instructions).
#[derive(Clone)]
pub(crate) struct Channels {
    /// The slots (a power of two of them), peer `p`'s at `p % len` ([`Channels::slot`]).
    slots: Box<[Option<(Channel, u64)>]>,
    rest: HashMap<Channel, u64>,
    /// On a receiver, the numbers of messages withdrawn by their senders' cancels
    /// that the count has not reached yet ([`Channels::withdraw`]): passed over.
    skips: Vec<(Channel, u64)>,
}

/// A logical channel: (peer's world rank, context, tag).
type Channel = (u32, u32, i32);

/// The most slots of [`Channels`] (24 bytes each).
const MAX_SLOTS: usize = 1 << 10;

impl Default for Channels {
    /// Channels with 8 slots.
    fn default() -> Channels {
        Channels::new(8)
    }
}

impl Channels {
    /// Channels with a slot for each of `ranks` peers (rounded up to a power of two,
    /// at most [`MAX_SLOTS`]).
    pub(crate) fn new(ranks: usize) -> Channels {
        let n = ranks.clamp(1, MAX_SLOTS).next_power_of_two();
        Channels {
            slots: vec![None; n].into_boxed_slice(),
            rest: HashMap::default(),
            skips: Vec::new(),
        }
    }

    /// Where channel `c`'s peer's slot is.
    #[inline(always)]
    fn slot(&self, c: Channel) -> usize {
        c.0 as usize & (self.slots.len() - 1)
    }

    /// The number of the next message *received* (matched) on channel `c`, counting
    /// it: [`Channels::next`], passing over the numbers of withdrawn messages.
    #[inline(always)]
    pub(crate) fn next_received(&mut self, c: Channel) -> u64 {
        let n = self.next(c);
        if self.skips.is_empty() {
            n
        } else {
            self.past_skips(c, n)
        }
    }

    #[cold]
    #[inline(never)]
    fn past_skips(&mut self, c: Channel, mut n: u64) -> u64 {
        while let Some(i) = self.skips.iter().position(|&x| x == (c, n)) {
            self.skips.swap_remove(i);
            n = self.next(c);
        }
        n
    }

    /// A message of channel `c` was withdrawn by its sender's cancel, behind `ahead`
    /// earlier messages of the channel not yet matched: its number (the `ahead`-th
    /// after those counted, not counting numbers already withdrawn) is never received.
    pub(crate) fn withdraw(&mut self, c: Channel, ahead: u64) {
        let (mut n, mut left) = (self.count(c), ahead);
        loop {
            if self.skips.contains(&(c, n)) {
                n += 1;
            } else if left > 0 {
                left -= 1;
                n += 1;
            } else {
                break;
            }
        }
        self.skips.push((c, n));
    }

    /// The messages of channel `c` received or withdrawn so far.
    pub(crate) fn taken(&self, c: Channel) -> u64 {
        self.count(c) + self.skips.iter().filter(|x| x.0 == c).count() as u64
    }

    /// The number of messages counted so far on channel `c`.
    pub(crate) fn count(&self, c: Channel) -> u64 {
        match self.slots[self.slot(c)] {
            Some((k, n)) if k == c => n,
            _ => self.rest.get(&c).copied().unwrap_or(0),
        }
    }

    /// The number of the next message on channel `c` (counting it). The common
    /// case, the peer's last channel, is inlined into the hook; out of line, its
    /// prologue and epilogue (for the table's path) were most of its ~70
    /// instructions.
    #[inline(always)]
    pub(crate) fn next(&mut self, c: Channel) -> u64 {
        match &mut self.slots[self.slot(c)] {
            Some((k, n)) if *k == c => {
                *n += 1;
                *n - 1
            }
            _ => self.next_in_table(c),
        }
    }

    /// Counts `k` more messages on channel `c` at once (as `k` calls of
    /// [`Self::next`]).
    pub(crate) fn advance(&mut self, c: Channel, k: u64) {
        if k == 0 {
            return;
        }
        self.next(c);
        // (`next` leaves the channel in its peer's slot)
        let i = self.slot(c);
        if let Some((_, n)) = &mut self.slots[i] {
            *n += k - 1;
        }
    }

    /// [`Self::next`] for a channel that is not its peer's last one.
    #[cold]
    #[inline(never)]
    fn next_in_table(&mut self, c: Channel) -> u64 {
        let i = self.slot(c);
        let slot = &mut self.slots[i];
        if let Some((k, n)) = slot.take() {
            self.rest.insert(k, n);
        }
        let n = self.rest.remove(&c).unwrap_or(0);
        *slot = Some((c, n + 1));
        n
    }
}

/// The numbers on their channels of the messages matched ahead of their completion
/// ([`Tools::matched`], [`Tools::probe_matched`]), by the engine's id of the receive
/// (or of the probed message, until its receive is posted). MPI's non-overtaking rule
/// makes the k-th message *matched* on a channel the k-th sent on it; a rendezvous
/// message matched before a later eager one completes after it, so numbering at
/// completion alone would swap the two. Empty in a run without rendezvous messages,
/// where a completion's look here is one comparison.
#[derive(Default)]
pub(crate) struct Early(HashMap<u64, u64>);

impl Early {
    /// Message number `n` for the receive (or probed message) with engine id `id`.
    pub(crate) fn insert(&mut self, id: u64, n: u64) {
        self.0.insert(id, n);
    }

    /// Whether `id` has its number already.
    pub(crate) fn has(&self, id: u64) -> bool {
        !self.0.is_empty() && self.0.contains_key(&id)
    }

    /// The number given to `id` at its match, if it was numbered then.
    #[inline(always)]
    pub(crate) fn take(&mut self, id: u64) -> Option<u64> {
        if self.0.is_empty() {
            None
        } else {
            self.0.remove(&id)
        }
    }

    /// The number of probed message `msg` passes to its receive `r`.
    pub(crate) fn rekey(&mut self, msg: u64, r: u64) {
        if let Some(n) = self.take(msg) {
            self.0.insert(r, n);
        }
    }
}

/// Starts the tools the environment asks for; called by every rank at initialisation
/// (the tools' set-up is collective: every rank must have the same settings).
pub(crate) fn init(world: &SimpleCommunicator) -> crate::Result<()> {
    let trace = crate::trace::settings()?;
    let checks = crate::check::settings()?;
    if trace.is_none() && !checks.any() {
        return Ok(());
    }
    if cfg!(rsmpi_tools_out) {
        return Err(crate::Error::Setting(
            "RSMPI_TRACE / RSMPI_CHECK: this build has the tools compiled out \
             (--cfg rsmpi_tools_out, a build for measuring what the tools cost when off)"
                .into(),
        ));
    }
    progress::with(|s| {
        s.tools = Some(Box::default());
        // a completed receive goes to the tools' hook from now on
        s.finish_hooks = true;
        // the tools number each channel's messages in the order MPI matches them
        s.engine.report_matches();
    });
    ON.store(true, Ordering::Relaxed);
    if checks.any() {
        CHECKING.store(true, Ordering::Relaxed);
        crate::check::init(world, checks)?;
    }
    if trace.is_none() && checks.races_alone() {
        RACES_ALONE.store(true, Ordering::Relaxed);
    }
    if let Some(t) = trace {
        crate::trace::init(world, t)?;
    }
    Ok(())
}

/// Ends the tools at finalize (before the final barrier).
pub(crate) fn finish() {
    if is_on() {
        crate::check::finish();
        crate::trace::finish();
        with(|t| t.deadlock = None);
        ON.store(false, Ordering::Relaxed);
        RACES_ALONE.store(false, Ordering::Relaxed);
    }
}

/// Runs a tool's own traffic (`f`), which no tool records or checks.
pub(crate) fn own_traffic<R>(f: impl FnOnce() -> R) -> R {
    // nested (a flush of the notes from a tool's own wait) keeps the outer one busy
    let was = with(|t| std::mem::replace(&mut t.busy, true)).unwrap_or(false);
    let r = f();
    with(|t| t.busy = was);
    r
}

/// Runs `f` on this rank's tools, if any is on and MPI is initialised.
pub(crate) fn with<R>(f: impl FnOnce(&mut Tools) -> R) -> Option<R> {
    progress::try_with(|s| s.tools.as_deref_mut().map(f))
        .ok()
        .flatten()
}

/// The body of an MPI call off the per-message path, as the tools see it:
/// `mpi_call!(op, { body })` marks the call's enter and leave around `body` (by the
/// out-of-line [`enter`] and [`leave`]) when a tool is on, reading the switch before
/// and after. `body` runs as a closure, so a `return` or `?` in it gives the call's
/// result; use it as the whole body of a `#[track_caller]` function, so that the
/// source line is the user's.
///
/// The calls on the per-message path (sends, receives, `wait`, `test`) use a
/// different shape, for the reasons in [`Mode`]. Nothing runs on unwinding either
/// way: a guard value dropped at the end of the call cost the small-message rate far
/// more than its instructions (`docs/performance.md`, "Tools off").
macro_rules! mpi_call {
    ($op:expr, $body:block) => {{
        if $crate::tools::is_on() {
            $crate::tools::enter($op, ::std::panic::Location::caller());
        }
        #[allow(clippy::redundant_closure_call)]
        let r = (|| $body)();
        // the switch read again, not kept in a flag: a flag live across the body
        // changes how LLVM inlines it
        if $crate::tools::is_on() {
            $crate::tools::leave($op);
        }
        r
    }};
}
pub(crate) use mpi_call;

/// Which copy of a call's body runs: the one the tools watch ([`On`]) or the one
/// they do not ([`Off`]). A call on the per-message path tests the switch once and
/// runs one of the two copies of its body, an `#[inline(always)]` function generic
/// over its mode:
///
/// ```text
/// if tools::is_on() {
///     return tools::watched(op, Location::caller(), || body::<tools::On>(args));
/// }
/// body::<U::Off>(args) // `tools::Off` for the user's calls (`U`: [`Caller`])
/// ```
///
/// The mode parameter makes the two copies, and every closure inside them, distinct
/// functions. So each helper the body calls through a closure keeps a single caller
/// in the unwatched copy, and LLVM inlines the unwatched copy exactly as it would
/// without the tools. A flag kept across one shared body, a closure around it, or two
/// copies of an ungeneric body each cost 27–277 instructions per round
/// (`docs/performance.md`, "Tools off"). For the same reason the library's own calls
/// never run the unwatched copy ([`Caller`]).
pub(crate) trait Mode {
    /// Whether this is the watched copy.
    const ON: bool;
    /// Whether the watched copy also marks the call's enter and leave itself, in its
    /// own visit to the library state ([`Called`]).
    const CALL: bool = false;
    /// Whether the receive's `Recv` record is made by the call itself ([`Traced`]).
    const TRACED: bool = false;
    /// Whether the receive is recorded for the race check by the call itself
    /// ([`Noted`]).
    const NOTED: bool = false;
}

/// The body's copy for a call the tools watch.
pub(crate) struct On;
/// The body's copy for a call with no tool on.
pub(crate) struct Off;

impl Mode for On {
    const ON: bool = true;
}
impl Mode for Off {
    const ON: bool = false;
}

/// The watched copy that marks the call's enter and leave in the visit that does its
/// work, for a call that usually completes in that visit (a blocking receive of a
/// message already there), with a check on: one visit to the library state instead
/// of three (`docs/tools.md`, "Cost").
pub(crate) struct Called;

impl Mode for Called {
    const ON: bool = true;
    const CALL: bool = true;
}

/// The copy of a blocking receive with the tracer alone on: no hook runs while the
/// receive is posted, and none finds it when it completes; the call makes its `Recv`
/// record itself, from the outcome it returns to the user
/// ([`crate::trace::Tracer::received_in_call`]). A blocking receive is numbered on
/// its channel correctly there: every receive that can match an earlier message of
/// its channel was posted before it and has matched, and been numbered, by then, and
/// no later one can be posted before the call returns. The hooks, their lookups
/// and the record's generic push cost a traced receive ~200 instructions
/// (`docs/performance.md`, "The traced blocking calls' path").
pub(crate) struct Traced;

impl Mode for Traced {
    const ON: bool = false;
    const TRACED: bool = true;
}

/// The copy of a blocking receive into the user's bytes with the race check alone
/// on (`RSMPI_CHECK=races`): as [`Traced`] for the tracer, no hook runs while the
/// receive is posted, and the call records the receive itself from its outcome
/// ([`Tools::received_in_call`]), numbered on its channel then (the same argument
/// holds). It is recorded in the order the receives matched: a receive that takes
/// a message already here matched in its post, before the call's visit runs any
/// progress. A receive that has to wait is entered and handed to the tools before
/// the visit's progress, as [`Called`] would have it, and recorded by their hooks
/// when it completes. (`docs/tools.md`, race checker "Cost", thirty-third round.)
///
/// A blocking send with the race check alone on runs the checks' copy
/// (`blocking_send_checked`) with this mode: none of the other checks' tests, and
/// the send itself through the copy without hooks, unless it goes to this rank
/// (thirty-fourth round).
pub(crate) struct Noted;

impl Mode for Noted {
    const ON: bool = false;
    const NOTED: bool = true;
}

/// Who makes a call on the per-message path: the user ([`User`]) or the library
/// itself ([`Lib`]: the tools' own traffic, a new communicator's agreement). With no
/// tool on, the user's calls run the copy without hooks ([`Off`]) and the library's
/// the copy whose hooks look for the tools ([`On`]), which find none. So the copy
/// without hooks has the user's calls as its only callers, as in a build with the
/// tools compiled out, and LLVM compiles it the same way: a second caller from the
/// tools' code cost the self loop 34 instructions a round (`docs/performance.md`,
/// "Tools off, fifth round").
pub(crate) trait Caller {
    /// The copy of the body that runs with no tool on.
    type Off: Mode;
}

/// A call from the user's program.
pub(crate) struct User;
/// A call from the library's own code ([`crate::point_to_point::LibTraffic`]).
pub(crate) struct Lib;

impl Caller for User {
    type Off = Off;
}
impl Caller for Lib {
    type Off = On;
}

/// Whether standard sends may run as synchronous ones (then a watched send asks
/// the tools, [`send_mode`]).
#[inline(always)]
pub(crate) fn sync_sends_possible() -> bool {
    SYNC_SENDS.load(Ordering::Relaxed)
}

/// Whether the race check is the only tool on ([`Noted`]).
#[inline(always)]
pub(crate) fn races_alone() -> bool {
    RACES_ALONE.load(Ordering::Relaxed)
}

/// Whether standard sends run as synchronous ones now (`RSMPI_CHECK_SYNC=1` with
/// `RSMPI_CHECK=deadlock`): the mode a watched send starts with.
pub(crate) fn send_mode(mode: matching::SendMode) -> matching::SendMode {
    use matching::SendMode::{Standard, Synchronous};
    if mode != Standard || !sync_sends_possible() {
        return mode;
    }
    match with(|t| t.sync_sends()) {
        Some(true) => Synchronous,
        _ => mode,
    }
}

/// Runs `f`, the watched copy of the body of the MPI call `op` made at `site`,
/// between the call's enter and leave: with the tracer alone on, between its two
/// records and nothing else (`docs/performance.md`, "Tools on, sixth round").
#[cold]
#[inline(never)]
pub(crate) fn watched<R>(
    op: Op,
    site: &'static std::panic::Location<'static>,
    f: impl FnOnce() -> R,
) -> R {
    let w = begin(op, site);
    let r = f();
    end(w);
    r
}

/// A watched MPI call in progress, from [`begin`] to [`end`] ([`watched`] in two
/// halves, for a call whose body runs partly in its caller's function).
pub(crate) struct Watch {
    op: Op,
    /// With the tracer alone on, the call's start time; `None` with a check on.
    t0: Option<u64>,
}

/// The watched MPI call `op`, made at `site`, begins.
#[inline(always)]
pub(crate) fn begin(op: Op, site: &'static std::panic::Location<'static>) -> Watch {
    if !checking() {
        return Watch {
            op,
            t0: Some(crate::trace::enter(op)),
        };
    }
    enter(op, site);
    Watch { op, t0: None }
}

/// The watched MPI call `w` ends: with the tracer alone on, its one record.
#[inline(always)]
pub(crate) fn end(w: Watch) {
    match w.t0 {
        Some(t0) => crate::trace::leave(w.op, t0),
        None => leave(w.op),
    }
}

/// [`watched`] for a send (`op`, made at `site`) to world rank `dest` (found by
/// `dest` in the library state: `None` for a send that will fail or goes nowhere) on
/// context `ctx` with `tag` and type signature `ty`: with a check on, the call's
/// enter, the rank's and tag's checks and the send's note (`check::enter_send`) take
/// one visit to the library state, not three.
#[cold]
#[inline(never)]
pub(crate) fn watched_send<R>(
    op: Op,
    site: &'static std::panic::Location<'static>,
    note: crate::check::SendNote<
        impl FnOnce(&progress::State) -> Option<u32>,
        impl FnOnce() -> Option<crate::check::types::TypeSig>,
    >,
    f: impl FnOnce() -> R,
) -> R {
    if !checking() {
        let t0 = crate::trace::enter(op);
        let r = f();
        crate::trace::leave(op, t0);
        return r;
    }
    crate::check::enter_send(op, site, note);
    let r = f();
    leave(op);
    r
}

/// [`watched_send`]'s first half, for a send whose body runs in its caller's function
/// (the immediate send, whose request is built there): the call begins, with its note
/// (`op`, `site`, `note` as for [`watched_send`]); [`end`] is its second half. Also
/// the mode the send starts with ([`send_mode`]).
#[inline(always)]
pub(crate) fn begin_send(
    op: Op,
    site: &'static std::panic::Location<'static>,
    note: crate::check::SendNote<
        impl FnOnce(&progress::State) -> Option<u32>,
        impl FnOnce() -> Option<crate::check::types::TypeSig>,
    >,
    mode: matching::SendMode,
) -> (Watch, matching::SendMode) {
    if !checking() {
        let w = Watch {
            op,
            t0: Some(crate::trace::enter(op)),
        };
        return (w, mode);
    }
    crate::check::enter_send(op, site, note);
    (Watch { op, t0: None }, send_mode(mode))
}

/// An MPI call in progress, for the calls off the per-message path (collectives,
/// probes, sync points): the tools see it begin when it is made and end when this
/// is dropped.
pub(crate) struct Call(Option<Op>);

/// Marks the start of the MPI call `op` (a no-op unless a tool is on). The functions
/// between the user's call and this one are `#[track_caller]`, so that the tools see
/// the user's source line.
#[inline(always)]
#[track_caller]
pub(crate) fn call(op: Op) -> Call {
    if is_on() {
        enter(op, std::panic::Location::caller());
        Call(Some(op))
    } else {
        Call(None)
    }
}

impl Drop for Call {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(op) = self.0 {
            leave(op);
        }
    }
}

/// The user's MPI call `op`, made at `site`, begins.
#[cold]
#[inline(never)]
pub(crate) fn enter(op: Op, site: &'static std::panic::Location<'static>) {
    with(|t| t.enter(op, site));
}

/// The MPI call `op` ends.
#[cold]
#[inline(never)]
pub(crate) fn leave(op: Op) {
    with(|t| t.leave(op)).unwrap_or_default().run();
}

/// What the end of a call leaves to do outside the library state ([`Tools::leave`]).
#[derive(Default, Clone, Copy)]
#[must_use]
pub(crate) struct Left {
    /// The notes held back go first.
    flush: bool,
    /// The completed receives are due for their checks.
    settle: bool,
}

impl Left {
    /// Does it.
    #[inline(always)]
    pub(crate) fn run(self) {
        if self.flush {
            crate::check::idle();
        }
        if self.settle {
            crate::check::settle();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Channels, MAX_SLOTS};

    /// Each channel is counted on its own, whichever one sits in its peer's slot.
    #[test]
    fn channels_count_each_channel_apart() {
        let mut c = Channels::default();
        // 9 shares peer 1's slot
        let (a, b, d) = ((1, 0, 5), (9, 0, 5), (1, 0, 6));
        let got = [
            c.next(a),
            c.next(a),
            c.next(b),
            c.next(a),
            c.next(b),
            c.next(d),
            c.next(b),
            c.next(a),
        ];
        assert_eq!(got, [0, 1, 0, 2, 1, 0, 2, 3]);
        // counted so far, beside the table or in it
        assert_eq!(
            (c.count(a), c.count(b), c.count(d), c.count((9, 9, 9))),
            (4, 3, 1, 0)
        );
    }

    /// Channels for a job of N ranks keep each peer's last channel in a slot of its
    /// own: 17 peers taking turns (the senders of Table 2 at 18 ranks) never reach the
    /// table, and the count of each is right. Past the most slots, peers share them.
    #[test]
    fn channels_have_a_slot_for_each_rank() {
        let mut c = Channels::new(18);
        assert_eq!(c.slots.len(), 32);
        for round in 0..5 {
            for p in 1..18 {
                assert_eq!(c.next((p, 0, 1)), round);
            }
        }
        assert!(c.rest.is_empty(), "a peer went through the table");
        let big = Channels::new(1 << 20);
        assert_eq!(big.slots.len(), MAX_SLOTS);
        assert_eq!(Channels::new(0).slots.len(), 1);
    }

    /// Withdrawn messages' numbers are passed over, wherever they stood among the
    /// messages not yet received, and count as taken.
    #[test]
    fn withdrawn_numbers_are_passed_over() {
        let mut c = Channels::default();
        let (a, b) = ((1, 0, 5), (2, 0, 5));
        assert_eq!(c.next_received(a), 0);
        // messages 1, 2, 3 unreceived; 2 withdrawn (one ahead), then 3 (one ahead:
        // message 1, since 2 is gone)
        c.withdraw(a, 1);
        c.withdraw(a, 1);
        assert_eq!(c.taken(a), 3);
        // another channel is not touched
        c.withdraw(b, 0);
        assert_eq!(c.next_received(a), 1);
        assert_eq!(c.next_received(a), 4);
        assert_eq!(c.next_received(b), 1);
        assert_eq!((c.count(a), c.taken(a), c.taken(b)), (5, 5, 2));
    }
}

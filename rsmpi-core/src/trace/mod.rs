//! The built-in tracer: `RSMPI_TRACE=DIR` records every MPI call and message of every
//! rank into bounded per-rank buffers, flushed to `DIR` at collectives with an
//! equalised pause, so that the run's timing can be reconstructed by taking the pauses
//! out again (after Okita, Ino and Hagihara, "large-scale trace generation";
//! `docs/tools.md`).
//!
//! ```sh
//! RSMPI_TRACE=/tmp/tr rsmpirun -n 4 ./app        # writes /tmp/tr/rank-<r>.rsmpitrace
//! rsmpi-trace /tmp/tr                             # writes /tmp/tr/trace.json
//! ```
//!
//! `trace.json` opens in <https://ui.perfetto.dev> (or `chrome://tracing`): one track
//! per rank, a slice per MPI call, an arrow per message, the flush pauses removed.
//!
//! * **What is recorded** ([`format`](mod@format)): enter and leave of each MPI call; each message
//!   sent (peer, tag, communicator, bytes and its number on its channel) and each
//!   receive completed, so that the two ends pair one to one; flush epochs and
//!   clock samples.
//! * **Bounded memory.** Events go into 64 KiB chunks. At the end of every blocking
//!   collective over all ranks (and at [`sync_point`], for programs without
//!   collectives), the ranks agree (an OR over a private communicator) whether any
//!   holds more than the soft threshold `RSMPI_TRACE_SOFT` (default 64 MiB); if one
//!   does, every rank writes its buffer, the clock offsets to rank 0 are measured
//!   again, and every rank pauses for the same computed time `Z` (the slowest
//!   writer's time plus the broadcast's), so that the ranks leave the flush as they
//!   entered it. A rank that reaches the hard cap `RSMPI_TRACE_HARD` (default 4x the
//!   soft threshold) between collectives writes alone and marks the epoch
//!   unsynchronised.
//! * **Off costs nothing measurable**: without `RSMPI_TRACE` a call tests one
//!   relaxed atomic flag.
//!
//! Tool traffic (the flush's reductions, the clock ping-pongs) runs on a private
//! duplicate of the world communicator and is never recorded, and can never match a
//! user receive.

pub mod chrome;
pub mod format;
pub(crate) mod signal;

use std::cell::Cell;
use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use format::{Kind, Op, Record, RECORD};
use matching::{RecvId, RecvOutcome};

use crate::point_to_point::LibTraffic;
use crate::tools::{self, Channels};
use crate::topology::SimpleCommunicator;
use crate::traits::*;

/// Bytes of one buffer chunk: a whole number of records, about 64 KiB.
pub const CHUNK: usize = RECORD * PER_CHUNK;

/// Records in one buffer chunk.
const PER_CHUNK: usize = 1638;

/// The smallest soft threshold and hard cap, in bytes.
const MIN_BUFFER: usize = 4096;

/// Records in the stage, the small buffer the newest records go to.
const STAGE_LEN: usize = 64;

/// One rank's tracer, kept in the library state while tracing.
pub(crate) struct Tracer {
    file: std::fs::File,
    /// The time source ([`clock`]), and its reading at the start. The buffered
    /// records hold the counter's raw readings; they become nanoseconds since `raw0`
    /// when written.
    clock: &'static quanta::Clock,
    raw0: u64,
    /// Full chunks, oldest first, and the one being filled: records as they are
    /// (encoded only when written).
    chunks: Vec<Vec<Record>>,
    cur: Vec<Record>,
    /// Empty chunks whose memory has been written once: enough, with `cur`, for the
    /// soft threshold, made at the start and given back by each write. Fresh memory
    /// costs a page fault every ~100 records; taken at the start, the faults are
    /// paid before the program runs, not inside its calls.
    spare: Vec<Vec<Record>>,
    /// How many chunks `spare` keeps.
    pool: usize,
    /// The bytes of a chunk being written.
    out: Vec<u8>,
    soft: usize,
    hard: usize,
    peak: usize,
    /// The number of records in the chunk being filled at which [`Self::full`] looks
    /// at the buffer (the peak and the hard cap are checked there, not at every
    /// record).
    room: usize,
    /// Records moved out of the stage so far.
    records: u64,
    epoch: u32,
    /// Messages sent / received so far on each channel (peer, context, tag).
    sent: Channels,
    received: Channels,
    /// Contexts of the receives posted while recording, until they complete.
    recv_ctx: matching::OneMap<RecvId, u32>,
    /// Receives numbered at their match, before they complete.
    pub(crate) early: crate::tools::Early,
    tool: SimpleCommunicator,
    /// Writing failed: the trace stops (and says so once).
    failed: bool,
}

impl Tracer {
    /// Nanoseconds since the tracer started.
    fn now(&self) -> u64 {
        self.ns(self.clock.raw())
    }

    /// A raw reading in nanoseconds since the tracer started.
    fn ns(&self, raw: u64) -> u64 {
        self.clock.delta_as_nanos(self.raw0, raw)
    }

    /// Bytes of events held.
    fn buffered(&self) -> usize {
        (self.chunks.len() * PER_CHUNK + self.cur.len() + staged()) * RECORD
    }

    /// Appends a record of the time now (see [`Stage::push`] for `Send` and `Recv`),
    /// if recording.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn push(&mut self, kind: Kind, op: u8, a: u32, b: i32, c: u32, d: u64, e: u64) {
        if STAGE.with(|s| s.push(kind, op, a, b, c, d, e)) {
            self.spill();
        }
    }

    /// Appends a record of the (raw) time `ts`, recording or not (the tracer's own
    /// records).
    #[allow(clippy::too_many_arguments)]
    fn push_at(&mut self, ts: u64, kind: Kind, op: u8, a: u32, b: i32, c: u32, d: u64, e: u64) {
        if STAGE.with(|s| s.push_at(ts, kind, op, a, b, c, d, e)) {
            self.spill();
        }
    }

    /// Whether records are taken: off while the tracer's own traffic runs.
    fn recording(&self) -> bool {
        STAGE.with(|s| s.recording.get())
    }

    fn set_recording(&mut self, on: bool) {
        STAGE.with(|s| s.recording.set(on));
    }

    /// Moves the stage's records to the chunk being filled, the receives among them
    /// that still wait for their time stamped now.
    fn take_stage(&mut self) {
        STAGE.with(|s| {
            if s.unstamped.get() > 0 {
                s.stamp(self.clock.raw());
            }
            let n = s.len.replace(0);
            self.cur.extend(s.recs[..n].iter().map(Cell::get));
            self.records += n as u64;
        });
    }

    /// Moves the stage to the chunk being filled.
    #[cold]
    #[inline(never)]
    fn spill(&mut self) {
        self.take_stage();
        if self.cur.len() >= self.room {
            self.full();
        }
        self.set_rooms();
    }

    /// The chunk being filled is full, or the buffer reached the hard cap.
    #[cold]
    #[inline(never)]
    fn full(&mut self) {
        // the buffer only grows between writes: its peak is reached here or at a write
        let held = self.buffered();
        self.peak = self.peak.max(held);
        if self.cur.len() == PER_CHUNK {
            let next = self
                .spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(PER_CHUNK));
            self.chunks.push(std::mem::replace(&mut self.cur, next));
        }
        self.set_rooms();
        if held >= self.hard && self.recording() {
            // no collective in sight: write alone, and say so
            let t = self.clock.raw();
            self.write();
            let now = self.clock.raw();
            let dt = self.ns(now).saturating_sub(self.ns(t));
            self.push_at(now, Kind::Unsync, 0, self.epoch, 0, 0, dt, 0);
        }
    }

    /// Sets how far the chunk being filled and the stage may grow.
    fn set_rooms(&mut self) {
        self.room = self.room();
        let room = STAGE_LEN.min(self.room.saturating_sub(self.cur.len()));
        STAGE.with(|s| s.room.set(room));
    }

    /// How far (in records) the chunk being filled may grow before [`Self::full`]
    /// must look: to its end, or to the hard cap.
    fn room(&self) -> usize {
        PER_CHUNK.min((self.hard / RECORD).saturating_sub(self.chunks.len() * PER_CHUNK))
    }

    /// The job ends here (an abort, a fatal error, a panic, a stop signal): writes
    /// what the buffer holds, and the call the rank is in, so that the trace keeps
    /// this rank's last events. No `Finish` record follows, which tells the reader
    /// that the rank stopped early.
    pub(crate) fn write_at_abort(&mut self) {
        // the stage is taken by the write whether or not this filled it
        STAGE.with(Stage::open_call);
        self.write();
    }

    /// Writes every buffered event to the file and empties the buffer.
    fn write(&mut self) {
        self.peak = self.peak.max(self.buffered());
        if self.failed {
            self.chunks.clear();
            self.cur.clear();
            STAGE.with(Stage::clear);
            self.set_rooms();
            return;
        }
        #[cfg(feature = "fault-injection")]
        crate::fault::slow_trace_write();
        let mut res = Ok(());
        self.take_stage();
        let mut chunks = std::mem::take(&mut self.chunks);
        chunks.push(std::mem::take(&mut self.cur));
        for mut c in chunks.drain(..) {
            if res.is_ok() {
                res = self.encode_write(&c);
            }
            if self.cur.capacity() == 0 {
                c.clear();
                self.cur = c;
            } else if self.spare.len() < self.pool {
                c.clear();
                self.spare.push(c);
            }
        }
        self.chunks = chunks;
        self.set_rooms();
        if let Err(e) = res {
            // a trace with a hole is worse than none: say so and stop tracing
            eprintln!("rsmpi: RSMPI_TRACE: writing the trace failed ({e}); tracing stops");
            self.set_recording(false);
            self.failed = true;
        }
    }

    /// Writes the records `c` to the file, their times in nanoseconds.
    fn encode_write(&mut self, c: &[Record]) -> std::io::Result<()> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        for r in c {
            let ns = self.ns(r.ts);
            // a call's record holds its second time in `d`
            let d = if r.kind == Kind::Call {
                self.ns(r.d)
            } else {
                r.d
            };
            out.extend_from_slice(&Record { ts: ns, d, ..*r }.encode());
        }
        let res = self.file.write_all(&out);
        self.out = out;
        res
    }

    /// A message of `bytes` bytes left for world rank `dest`.
    pub fn send(&mut self, dest: u32, ctx: u32, tag: i32, bytes: u64) {
        // the channel counted outside the stage's closure, which stays small enough
        // to inline
        if !self.recording() {
            return;
        }
        let seq = self.sent.next((dest, ctx, tag));
        if STAGE.with(|s| s.message(Kind::Send, dest, tag, ctx, bytes, seq)) {
            self.spill();
        }
    }

    /// A receive was posted on context `ctx`.
    pub fn posted(&mut self, id: RecvId, ctx: u32) {
        if self.recording() {
            self.recv_ctx.insert(id, ctx);
        }
    }

    /// A receive on `ctx` was posted and completed with `outcome` at once
    /// (`Tools::posted_done`): [`Tracer::posted`] and [`Tracer::received`] in one.
    pub fn posted_done(&mut self, ctx: u32, outcome: &RecvOutcome) {
        if self.recording() {
            self.push_received(ctx, outcome, None);
        }
    }

    /// Receive `id` matched a message from `source` with `tag` whose data comes later
    /// (`Tools::matched`): numbered now.
    pub fn matched(&mut self, id: RecvId, source: u32, tag: i32) {
        if let Some(&ctx) = self.recv_ctx.get(&id) {
            if !self.early.has(id.0) {
                let seq = self.received.next_received((source, ctx, tag));
                self.early.insert(id.0, seq);
            }
        }
    }

    /// A message from `source` on (`ctx`, `tag`) was withdrawn by its sender's cancel
    /// (`Tools::withdrawn`): its number is passed over. Only a user's send is ever
    /// cancelled, and its sender numbered it, so this holds whenever the cancel comes
    /// in: also while the tracer's own traffic runs (a flush at the end of a
    /// collective, whose progress may take the cancel), when nothing is recorded.
    pub fn withdrawn(&mut self, source: u32, ctx: u32, tag: i32, ahead: u64) {
        self.received.withdraw((source, ctx, tag), ahead);
    }

    /// A matched probe took message `msg` (`Tools::probe_matched`): numbered now.
    pub fn probe_matched(&mut self, msg: matching::MsgId, source: u32, ctx: u32, tag: i32) {
        if self.recording() {
            let seq = self.received.next_received((source, ctx, tag));
            self.early.insert(msg.0, seq);
        }
    }

    /// Whether receives posted while recording wait for their completion
    /// ([`Tracer::received`]).
    #[inline(always)]
    pub(crate) fn tracks_receives(&self) -> bool {
        !self.recv_ctx.is_empty()
    }

    /// A receive completed.
    pub fn received(&mut self, id: RecvId, outcome: &RecvOutcome) {
        let Some(ctx) = self.recv_ctx.remove(&id) else {
            return;
        };
        if let RecvOutcome::Received { .. } = outcome {
            let seq = self.early.take(id.0);
            self.push_received(ctx, outcome, seq);
        }
    }

    /// A blocking receive on `ctx` completed with `outcome` in the call that posted
    /// it ([`crate::tools::Traced`]): its `Recv` record, numbered now, if recording.
    #[inline(always)]
    pub(crate) fn received_in_call(&mut self, ctx: u32, outcome: &RecvOutcome) {
        if self.recording() {
            self.push_received(ctx, outcome, None);
        }
    }

    /// The `Recv` record of a receive on `ctx` that completed with `outcome`: its
    /// number on its channel is `seq` if it was numbered when it matched, the next
    /// one otherwise. Made whether recording or not: the callers know that the
    /// receive was posted while recording.
    fn push_received(&mut self, ctx: u32, outcome: &RecvOutcome, seq: Option<u64>) {
        if let RecvOutcome::Received {
            source,
            tag,
            len,
            truncated_from,
        } = *outcome
        {
            let seq = seq.unwrap_or_else(|| self.received.next_received((source, ctx, tag)));
            let bytes = truncated_from.unwrap_or(len);
            // (recording or not: see `Stage::message_now`)
            if STAGE.with(|s| s.message_now(Kind::Recv, source, tag, ctx, bytes, seq)) {
                self.spill();
            }
        }
    }
}

thread_local! {
    /// This thread's newest records (the tracer lives in the library state, which is
    /// this thread's too). A record is appended here, to memory that stays in the
    /// cache, and the stage is moved to the tracer's chunks when full: appended
    /// straight to the chunks, each record landed on a line not in the cache, and a
    /// small message's latency traced rose by ~40 ns. The stage is kept apart from the
    /// library state, in cells with no destructor, so that making a record is a store
    /// at a fixed thread-local address: no visit to the library state (its borrow, the
    /// tools' box, the tracer's option, the stage's vector); a few ns a traced message
    /// here (`docs/performance.md`, "Tools on, twelfth round").
    static STAGE: Stage = const { Stage::new() };
}

/// The clock every tracer reads: the CPU's time-stamp counter where it is invariant,
/// calibrated against the monotonic clock (8–13 ns a read here, against 16–35 ns for
/// `Instant`; `docs/tools.md`, "Cost"), calibrated once per process.
fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// Records in the stage now.
fn staged() -> usize {
    STAGE.with(|s| s.len.get())
}

/// The stage: the newest records and what making the next one needs. Its fields are
/// cells, so that a record is made without a borrow flag.
struct Stage {
    recs: [Cell<Record>; STAGE_LEN],
    len: Cell<usize>,
    /// The length at which the stage is moved to the chunks ([`Tracer::spill`]):
    /// [`STAGE_LEN`], or less where the chunk being filled or the hard cap ends sooner.
    room: Cell<usize>,
    /// Off while the tracer's own traffic runs, and while not tracing.
    recording: Cell<bool>,
    clock: Cell<Option<&'static quanta::Clock>>,
    /// The last timestamp taken (raw); whether the last record is an `Enter`; how
    /// many `Recv` records at the end of the stage still wait for their time.
    last_ts: Cell<u64>,
    after_enter: Cell<bool>,
    unstamped: Cell<usize>,
    /// The call begun by [`Self::enter`] and not ended yet: its op and (raw) start,
    /// 0 if none. A rank stopped in it records it ([`Self::open_call`]).
    open: Cell<(u8, u64)>,
}

impl Stage {
    const fn new() -> Self {
        Stage {
            recs: [const { Cell::new(BLANK) }; STAGE_LEN],
            len: Cell::new(0),
            room: Cell::new(STAGE_LEN),
            recording: Cell::new(false),
            clock: Cell::new(None),
            last_ts: Cell::new(0),
            after_enter: Cell::new(false),
            unstamped: Cell::new(0),
            open: Cell::new((0, 0)),
        }
    }

    /// Drops the stage's records (a trace that could not be written).
    fn clear(&self) {
        self.len.set(0);
        self.unstamped.set(0);
    }

    /// Empties the stage for a tracer that reads `clock` (none: not tracing), not
    /// recording yet.
    fn reset(&self, clock: Option<&'static quanta::Clock>, room: usize) {
        self.len.set(0);
        self.room.set(room);
        self.recording.set(false);
        self.clock.set(clock);
        self.last_ts.set(0);
        self.after_enter.set(false);
        self.unstamped.set(0);
        self.open.set((0, 0));
    }

    /// Appends a record of the time now, if recording; says whether the stage is full
    /// (the caller then runs [`Tracer::spill`]).
    ///
    /// A clock read costs ~8 ns here, a twentieth of a small message's latency: a send
    /// right after its call's enter shares the enter's time, and a completed receive
    /// takes the time of the next record (the leave of the call that completed it),
    /// stamped when that one is made.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn push(&self, kind: Kind, op: u8, a: u32, b: i32, c: u32, d: u64, e: u64) -> bool {
        if !self.recording.get() {
            return false;
        }
        let ts = match kind {
            Kind::Send if self.after_enter.get() => self.last_ts.get(),
            Kind::Recv => {
                self.unstamped.set(self.unstamped.get() + 1);
                u64::MAX
            }
            _ => self.now(),
        };
        let full = self.push_at(ts, kind, op, a, b, c, d, e);
        self.after_enter.set(kind == Kind::Enter);
        full
    }

    /// [`Self::push`] for a message's record, `Send` or `Recv`, made on every traced
    /// message and so kept small enough to inline: a send right after its call's
    /// enter (the common case) and a receive read no clock here, and the clock read
    /// of a send made later in its call is out of line.
    #[inline(always)]
    fn message(&self, kind: Kind, a: u32, b: i32, c: u32, d: u64, e: u64) -> bool {
        if !self.recording.get() {
            return false;
        }
        self.message_now(kind, a, b, c, d, e)
    }

    /// [`Self::message`], recording or not: the `Recv` record of a receive posted
    /// while recording, which may complete while the tracer's own traffic runs (a
    /// flush), when nothing else is recorded: its sender recorded its `Send`.
    #[inline(always)]
    fn message_now(&self, kind: Kind, a: u32, b: i32, c: u32, d: u64, e: u64) -> bool {
        let ts = if kind == Kind::Recv {
            self.unstamped.set(self.unstamped.get() + 1);
            u64::MAX
        } else {
            let ts = if self.after_enter.get() {
                self.last_ts.get()
            } else {
                self.now_out_of_line()
            };
            self.mark(ts);
            ts
        };
        self.after_enter.set(false);
        self.append(Record {
            ts,
            kind,
            op: 0,
            a,
            b,
            c,
            d,
            e,
        })
    }

    /// [`Self::now`], out of line.
    #[inline(never)]
    fn now_out_of_line(&self) -> u64 {
        self.now()
    }

    /// The start of a call `op` that will be recorded whole ([`Self::call`]): its
    /// (raw) time, 0 while not recording. ([`enter`] is this with the clock read
    /// outside the stage's closure.)
    #[cfg(test)]
    fn enter(&self, op: u8) -> u64 {
        if !self.recording.get() {
            return 0;
        }
        let ts = self.now();
        self.entered(op, ts);
        ts
    }

    /// [`Self::enter`] with the time `ts` read by the caller ([`enter`]), recording.
    #[inline(always)]
    fn entered(&self, op: u8, ts: u64) {
        self.mark(ts);
        self.after_enter.set(true);
        self.open.set((op, ts));
    }

    /// The rank stops (a signal, an abort) in the call begun by [`Self::enter`], if
    /// one is open: its [`Kind::Call`] record, marked [`format::OPEN`], with the time
    /// now as `d`. Says whether the stage is full.
    fn open_call(&self) -> bool {
        let (op, t0) = self.open.get();
        t0 != 0 && self.call_at(op, t0, self.now(), format::OPEN)
    }

    /// The end of a call `op` begun at (raw) time `t0` by [`Self::enter`]: one
    /// [`Kind::Call`] record (time `t0`, `d` = the time now), made after the records
    /// of what happened in the call; the receives among them that wait for their time
    /// take the time now. Nothing while not recording, or if the call began while not
    /// recording (`t0` = 0). Says whether the stage is full. ([`leave`] is this with
    /// the clock read outside the stage's closure.)
    #[cfg(test)]
    fn call(&self, op: u8, t0: u64) -> bool {
        t0 != 0 && self.call_at(op, t0, self.now(), 0)
    }

    /// [`Self::call`] with the time now, `now`, read by the caller ([`leave`]), and
    /// `e` for the record ([`format::OPEN`] from [`Self::open_call`]).
    #[inline(always)]
    fn call_at(&self, op: u8, t0: u64, now: u64, e: u64) -> bool {
        if !self.recording.get() {
            return false;
        }
        self.mark(now);
        self.after_enter.set(false);
        self.open.set((0, 0));
        self.append(Record {
            ts: t0,
            kind: Kind::Call,
            op,
            a: 0,
            b: 0,
            c: 0,
            d: now,
            e,
        })
    }

    /// The clock's (raw) reading now.
    #[inline(always)]
    fn now(&self) -> u64 {
        self.clock.get().map_or(0, quanta::Clock::raw)
    }

    /// A record other than a receive's takes the (raw) time `ts`: the receives
    /// waiting for their time take it too, and it is the last time taken.
    #[inline(always)]
    fn mark(&self, ts: u64) {
        if self.unstamped.get() > 0 {
            self.stamp(ts);
        }
        self.last_ts.set(ts);
    }

    /// Appends `rec`; says whether the stage is full.
    #[inline(always)]
    fn append(&self, rec: Record) -> bool {
        let len = self.len.get();
        // never past the end: the stage is moved out as soon as it reaches its room
        if let Some(r) = self.recs.get(len) {
            r.set(rec);
            self.len.set(len + 1);
        }
        len + 1 >= self.room.get()
    }

    /// Appends a record of the (raw) time `ts`; says whether the stage is full.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn push_at(&self, ts: u64, kind: Kind, op: u8, a: u32, b: i32, c: u32, d: u64, e: u64) -> bool {
        if kind != Kind::Recv {
            self.mark(ts);
        }
        self.append(Record {
            ts,
            kind,
            op,
            a,
            b,
            c,
            d,
            e,
        })
    }

    /// Gives the receives recorded since the last timestamp (the stage's last
    /// `unstamped` records) the (raw) time `now`.
    #[inline(always)]
    fn stamp(&self, now: u64) {
        let n = self.unstamped.replace(0);
        let recs = &self.recs[..self.len.get().min(STAGE_LEN)];
        match (n, recs.last()) {
            // the common case: one receive, the last record
            (1, Some(r)) => r.set(Record { ts: now, ..r.get() }),
            _ => stamp_many(recs, n, now),
        }
    }
}

/// [`Stage::stamp`] for more than one receive: the last `n` records of `recs`.
#[cold]
#[inline(never)]
fn stamp_many(recs: &[Cell<Record>], n: usize, now: u64) {
    for r in recs.iter().rev().take(n) {
        r.set(Record { ts: now, ..r.get() });
    }
}

/// An unused record.
const BLANK: Record = Record {
    ts: 0,
    kind: Kind::Enter,
    op: 0,
    a: 0,
    b: 0,
    c: 0,
    d: 0,
    e: 0,
};

/// A size from the environment: bytes, or with a K, M or G suffix.
fn env_size(name: &str) -> crate::Result<Option<usize>> {
    let Ok(v) = std::env::var(name) else {
        return Ok(None);
    };
    let t = v.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n > 0)
        .map(Some)
        .ok_or_else(|| {
            crate::Error::Setting(format!(
                "{name}={v}: expected a size such as 1048576, 64M or 1G"
            ))
        })
}

/// The tracer's settings from the environment: `None` unless `RSMPI_TRACE` names a
/// directory.
pub(crate) struct Settings {
    dir: PathBuf,
    soft: usize,
    hard: usize,
}

pub(crate) fn settings() -> crate::Result<Option<Settings>> {
    let Some(dir) = std::env::var_os("RSMPI_TRACE").filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    // at least a page: a buffer that could not hold the record saying that it was
    // written alone would be written again for it, without end
    let soft = env_size("RSMPI_TRACE_SOFT")?
        .unwrap_or(64 << 20)
        .max(MIN_BUFFER);
    let hard = env_size("RSMPI_TRACE_HARD")?
        .unwrap_or(soft.saturating_mul(4))
        .max(soft);
    Ok(Some(Settings {
        dir: PathBuf::from(dir),
        soft,
        hard,
    }))
}

/// Starts tracing (every rank at initialisation, a collective).
pub(crate) fn init(world: &SimpleCommunicator, set: Settings) -> crate::Result<()> {
    let Settings { dir, soft, hard } = set;
    let tool = world.duplicate();
    let (rank, size) = (world.rank() as u32, world.size() as u32);
    let io =
        |e: std::io::Error| crate::Error::Setting(format!("RSMPI_TRACE={}: {e}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let mut file = std::fs::File::create(format::rank_file(&dir, rank)).map_err(io)?;
    file.write_all(&format::header(rank, size)).map_err(io)?;
    let clock = clock();
    // the chunks up to the soft threshold, their pages touched now rather than at
    // the first record that lands on each
    let pool = soft.min(hard).div_ceil(CHUNK);
    let spare: Vec<Vec<Record>> = (0..pool).map(|_| touched_chunk()).collect();
    let t = Tracer {
        file,
        raw0: clock.raw(),
        clock,
        chunks: Vec::new(),
        cur: touched_chunk(),
        spare,
        pool,
        out: Vec::new(),
        soft,
        hard,
        peak: 0,
        room: PER_CHUNK.min(hard / RECORD),
        records: 0,
        epoch: 0,
        sent: Channels::new(size as usize),
        received: Channels::new(size as usize),
        recv_ctx: matching::OneMap::default(),
        early: crate::tools::Early::default(),
        tool,
        failed: false,
    };
    STAGE.with(|s| s.reset(Some(clock), STAGE_LEN.min(hard / RECORD)));
    tools::with(|s| s.trace = Some(t));
    signal::catch();
    // epoch 0: the clocks as the run starts
    let (offset, err) = tools::own_traffic(|| clocks(&tool));
    with_tracer(|t| {
        t.set_recording(true);
        let ts = t.clock.raw();
        t.push_at(ts, Kind::Clock, 0, 0, 0, 0, offset as u64, err);
    });
    Ok(())
}

/// An empty chunk whose memory has been written.
fn touched_chunk() -> Vec<Record> {
    let mut c = std::hint::black_box(vec![BLANK; PER_CHUNK]);
    c.clear();
    c
}

/// Ends tracing: writes what is left (a local step; every rank does it at finalize).
pub(crate) fn finish() {
    tools::with(|s| {
        if let Some(mut t) = s.trace.take() {
            if t.failed {
                return;
            }
            let ts = t.clock.raw();
            let (peak, records) = (
                t.peak.max(t.buffered()) as u64,
                t.records + staged() as u64 + 1,
            );
            t.push_at(ts, Kind::Finish, 0, t.epoch, 0, 0, peak, records);
            t.write();
            STAGE.with(|s| s.reset(None, STAGE_LEN));
        }
    });
    signal::release();
}

/// An MPI call begins (the tracer alone is on): its time, to hand to [`leave`] (0
/// while not recording). Inlined into the watched copy of each call
/// (`tools::watched`), which the unwatched path never enters. Nothing is recorded
/// yet: the call's one record ([`Kind::Call`]) is made when it ends, with both
/// times, so that a call costs one record, not an enter and a leave
/// (`docs/performance.md`, "Tools on, thirteenth round"). A send made in the call
/// shares this time.
#[inline(always)]
pub(crate) fn enter(op: Op) -> u64 {
    // the clock read outside the stage's closures, which then stay small enough for
    // LLVM to inline them (with the read inside, a traced send's leave was a call of
    // ~54 instructions)
    if !STAGE.with(|s| s.recording.get()) {
        return 0;
    }
    let ts = clock().raw();
    STAGE.with(|s| s.entered(op as u8, ts));
    ts
}

/// The MPI call `op`, entered at (raw) time `t0`, ends (the tracer alone is on):
/// its record goes to this thread's stage, without a visit to the library state
/// unless the stage is full; inlined like [`enter`].
#[inline(always)]
pub(crate) fn leave(op: Op, t0: u64) {
    if t0 == 0 {
        return; // not recording when the call began
    }
    let now = clock().raw();
    if STAGE.with(|s| s.call_at(op as u8, t0, now, 0)) {
        spill();
    }
}

/// The stage is full: moves it to the tracer's chunks.
#[cold]
#[inline(never)]
fn spill() {
    with_tracer(Tracer::spill);
}

fn with_tracer<R>(f: impl FnOnce(&mut Tracer) -> R) -> Option<R> {
    tools::with(|s| s.trace.as_mut().map(f)).flatten()
}

/// The end of a blocking collective over `comm`: a flush point if `comm` spans every
/// rank.
#[inline(always)]
pub(crate) fn after_collective(comm: &SimpleCommunicator) {
    if tools::is_on() {
        flush_point(comm, false);
    }
}

/// A flush point for programs without collectives: every rank of the job must call it
/// (it is a collective over all ranks, like a barrier that may write the trace and
/// pause). Does nothing unless tracing.
///
/// ```no_run
/// let universe = rsmpi::initialize().unwrap();
/// for step in 0..1000 {
///     // ... point-to-point work ...
///     if step % 100 == 0 {
///         rsmpi::trace::sync_point();
///     }
/// }
/// ```
pub fn sync_point() {
    if tools::is_on() {
        let _c = tools::call(Op::SyncPoint);
        if let Some(tool) = with_tracer(|t| t.tool) {
            flush_point(&tool, true);
        }
    }
}

#[cold]
#[inline(never)]
fn flush_point(comm: &SimpleCommunicator, always_agree: bool) {
    // not for a tool's own collectives (the flush's reduction among them); a rank
    // whose trace could not be written still takes part, or the others would wait
    if tools::with(|t| t.busy) != Some(false) {
        return;
    }
    let Some((tool, want)) = with_tracer(|t| {
        (always_agree || comm.size == t.tool.size).then(|| (t.tool, t.buffered() > t.soft))
    })
    .flatten() else {
        return;
    };
    let raw_in = with_tracer(|t| {
        t.set_recording(false);
        t.clock.raw()
    })
    .unwrap_or(0);
    // the flush's own traffic is no tool's business
    tools::own_traffic(|| flush(&tool, want, raw_in));
}

/// The flush proper, every rank together: agree, write, measure, pause. `raw_in` is
/// the clock's raw reading as the flush began.
fn flush(tool: &SimpleCommunicator, want: bool, raw_in: u64) {
    let mut any = 0u8;
    tool.all_reduce_into(
        &u8::from(want),
        &mut any,
        crate::collective::SystemOperation::max(),
    );
    if any == 0 {
        with_tracer(|t| t.set_recording(!t.failed));
        return;
    }
    // every rank writes, then all pause for the same Z
    with_tracer(|t| {
        t.epoch += 1;
        let (e, held) = (t.epoch, t.buffered() as u64 + RECORD as u64);
        t.push_at(raw_in, Kind::FlushBegin, 0, e, 0, 0, held, 0);
        t.write();
    });
    let t_in = with_tracer(|t| t.ns(raw_in)).unwrap_or(0);
    let (offset, err) = clocks(tool);
    let z = pause_time(tool, t_in, offset, err);
    loop {
        let now = with_tracer(|t| t.now()).unwrap_or(u64::MAX);
        if now.saturating_sub(t_in) >= z {
            break;
        }
        std::hint::spin_loop();
    }
    with_tracer(|t| {
        let ts = t.clock.raw();
        let e = t.epoch;
        t.push_at(ts, Kind::FlushEnd, 0, e, 0, 0, z, 1);
        t.push_at(ts, Kind::Clock, 0, e, 0, 0, offset as u64, err);
        t.set_recording(!t.failed);
    });
}

/// The equalised pause (the paper's `suspension_time`): rank 0 gathers every rank's
/// flush start `t_in`, maps it to its own clock, and broadcasts
/// `Z = now - earliest start + m·⌈log2 P⌉ + d`, where `m` bounds a message's time and
/// `d` the clocks' error.
fn pause_time(tool: &SimpleCommunicator, t_in: u64, offset: i64, err: u64) -> u64 {
    let p = tool.size() as usize;
    let root = tool.process_at_rank(0);
    let mine = [t_in as i64 + offset, err as i64];
    let mut z = [0u64];
    if tool.rank() == 0 {
        let mut all = vec![0i64; 2 * p];
        root.gather_into_root(&mine[..], &mut all[..]);
        let now = with_tracer(|t| t.now()).unwrap_or(0) as i64;
        let earliest = all.chunks(2).map(|c| c[0]).min().unwrap_or(now);
        let d = all.chunks(2).map(|c| c[1]).max().unwrap_or(0);
        // the message time: half the best round trip, as measured in `clocks`
        let m = MSG_NS.with(|m| m.get()) as i64;
        let hops = (usize::BITS - (p.max(1) - 1).leading_zeros()) as i64;
        z[0] = (now - earliest + m * hops + d).max(0) as u64;
    } else {
        root.gather_into(&mine[..]);
    }
    root.broadcast_into(&mut z[..]);
    z[0]
}

thread_local! {
    /// Rank 0's estimate of one message's time, from the last clock measurement.
    static MSG_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Round trips per rank when measuring clocks (the fastest one is kept).
const PINGS: usize = 4;

/// Measures this rank's clock offset to rank 0 (Fig. 6 of the paper): rank 0 sends,
/// the rank answers with its clock, rank 0 takes the midpoint of its send and receive
/// times, keeping the fastest of `PINGS` round trips. Returns (offset to add to this
/// rank's timestamps to get rank 0's, error bound in ns).
fn clocks(tool: &SimpleCommunicator) -> (i64, u64) {
    let now = || with_tracer(|t| t.now()).unwrap_or(0) as i64;
    if tool.rank() != 0 {
        let zero = tool.process_at_rank(0);
        for _ in 0..PINGS {
            let _: u8 = zero.lib_receive(1);
            zero.lib_send(&now(), 2);
        }
        let (res, _): (Vec<i64>, _) = zero.receive_vec_with_tag(3);
        return (res[0], res[1] as u64);
    }
    let mut halves = Vec::new();
    let mut results = Vec::new();
    for k in 1..tool.size() {
        let peer = tool.process_at_rank(k);
        let mut best: Option<(i64, i64)> = None; // (round trip, offset)
        for _ in 0..PINGS {
            let u1 = now();
            peer.lib_send(&0u8, 1);
            let u2: i64 = peer.lib_receive(2);
            let u3 = now();
            let rtt = u3 - u1;
            if best.is_none_or(|(b, _)| rtt < b) {
                best = Some((rtt, (u1 + u3) / 2 - u2));
            }
        }
        let (rtt, off) = best.expect("PINGS > 0");
        halves.push(rtt / 2);
        results.push((peer, off, rtt / 2));
    }
    let m = if halves.is_empty() {
        0
    } else {
        halves.iter().sum::<i64>() / halves.len() as i64
    };
    MSG_NS.with(|c| c.set(m as u64));
    for (peer, off, half) in results {
        // the midpoint is off by at most half the round trip's asymmetry
        peer.lib_send(&[off, half.max(1)][..], 3);
    }
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::{clock, Kind, Op, Stage, STAGE_LEN};

    /// A send right after its call's enter shares the enter's time; receives take the
    /// time of the next record; nothing is taken while not recording; the stage says
    /// when it reaches its room.
    #[test]
    fn stage_times_and_room() {
        let s = Stage::new();
        s.reset(Some(clock()), 5);
        assert!(!s.push(Kind::Enter, 1, 0, 0, 0, 0, 0));
        assert_eq!(s.len.get(), 0, "not recording yet");
        s.recording.set(true);
        assert!(!s.push(Kind::Enter, 1, 0, 0, 0, 0, 0));
        assert!(!s.push(Kind::Send, 0, 3, 7, 0, 8, 0));
        assert!(!s.push(Kind::Recv, 0, 3, 7, 0, 8, 0));
        assert!(!s.push(Kind::Recv, 0, 3, 7, 0, 8, 1));
        assert_eq!(s.unstamped.get(), 2);
        assert!(s.push(Kind::Leave, 1, 0, 0, 0, 0, 0), "full at its room");
        let r: Vec<_> = s.recs[..s.len.get()].iter().map(|c| c.get()).collect();
        let kinds: Vec<_> = r.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [Kind::Enter, Kind::Send, Kind::Recv, Kind::Recv, Kind::Leave]
        );
        assert_eq!(r[1].ts, r[0].ts, "the send shares its call's enter time");
        assert_eq!((r[2].ts, r[3].ts), (r[4].ts, r[4].ts), "receives stamped");
        assert!(r[4].ts >= r[0].ts);
        assert_eq!((r[3].e, s.unstamped.get()), (1, 0));
        // a stage that was not moved out keeps its records and drops the next one
        s.reset(Some(clock()), STAGE_LEN);
        s.recording.set(true);
        for _ in 0..STAGE_LEN - 1 {
            assert!(!s.push(Kind::Enter, 1, 0, 0, 0, 0, 0));
        }
        assert!(s.push(Kind::Recv, 0, 1, 0, 0, 0, 0));
        assert!(s.push(Kind::Leave, 1, 0, 0, 0, 0, 0), "still full");
        assert_eq!(s.len.get(), STAGE_LEN);
        let last = s.recs[STAGE_LEN - 1].get();
        assert_eq!((last.kind, last.ts), (Kind::Recv, s.last_ts.get()));
    }

    /// A call watched by the tracer alone is one record with both its times, made
    /// after the records of what happened in it: its send shares its start time, the
    /// receive it completed takes its end time; nothing while not recording, nor for
    /// a call that began before recording did.
    #[test]
    fn calls_are_one_record() {
        let s = Stage::new();
        s.reset(Some(clock()), STAGE_LEN);
        assert_eq!(s.enter(Op::Send as u8), 0, "not recording");
        assert!(!s.call(Op::Send as u8, 0));
        assert_eq!(s.len.get(), 0);
        s.recording.set(true);
        let t0 = s.enter(Op::Sendrecv as u8);
        assert!(t0 > 0);
        assert!(!s.push(Kind::Send, 0, 3, 7, 0, 8, 0));
        assert!(!s.push(Kind::Recv, 0, 3, 7, 0, 8, 0));
        assert!(!s.call(Op::Sendrecv as u8, t0));
        let r: Vec<_> = s.recs[..s.len.get()].iter().map(|c| c.get()).collect();
        let kinds: Vec<_> = r.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [Kind::Send, Kind::Recv, Kind::Call]);
        assert_eq!((r[0].ts, r[2].ts), (t0, t0), "the send shares the start");
        assert!(r[2].d >= t0);
        assert_eq!(r[1].ts, r[2].d, "the receive takes the end");
        assert_eq!((r[2].op, s.unstamped.get()), (Op::Sendrecv as u8, 0));
        // begun while not recording: no record for it
        s.recording.set(false);
        let t = s.enter(Op::Wait as u8);
        s.recording.set(true);
        assert!(!s.call(Op::Wait as u8, t));
        assert_eq!(s.len.get(), 3);
        // the stage says when a call's record fills it
        s.reset(Some(clock()), 2);
        s.recording.set(true);
        let t = s.enter(Op::Irecv as u8);
        assert!(!s.call(Op::Irecv as u8, t));
        let t = s.enter(Op::Irecv as u8);
        assert!(s.call(Op::Irecv as u8, t), "full at its room");
    }

    /// A rank stopped in a call (a signal, an abort) records that call, marked open,
    /// ending when it was stopped; a call that ended leaves nothing open.
    #[test]
    fn a_call_a_rank_is_stopped_in_is_recorded_open() {
        let s = Stage::new();
        s.reset(Some(clock()), STAGE_LEN);
        s.recording.set(true);
        assert!(!s.open_call());
        assert_eq!(s.len.get(), 0, "no call open");
        let t = s.enter(Op::Send as u8);
        s.call(Op::Send as u8, t);
        assert!(!s.open_call());
        assert_eq!(s.len.get(), 1, "the send ended: nothing open");
        let t0 = s.enter(Op::Recv as u8);
        assert!(!s.push(Kind::Recv, 0, 3, 7, 0, 8, 0));
        assert!(!s.open_call());
        let r: Vec<_> = s.recs[..s.len.get()].iter().map(|c| c.get()).collect();
        assert_eq!(r.len(), 3);
        let open = r[2];
        assert_eq!(
            (open.kind, open.op, open.ts),
            (Kind::Call, Op::Recv as u8, t0)
        );
        assert_eq!(open.e, super::format::OPEN);
        assert!(open.d >= t0);
        assert_eq!(
            r[1].ts, open.d,
            "a receive waiting for its time takes the stop's"
        );
        assert!(!s.open_call());
        assert_eq!(s.len.get(), 3, "recorded once");
    }
}

//! The runtime checks (`RSMPI_CHECK`, `docs/tools.md`): message-race detection
//! (`races`, this file), after MPIRace-Check, corrected; deadlock and hang detection
//! (`deadlock`, `deadlock.rs`); the error checks (`errors`, `errors.rs` and
//! `types.rs`). The notes sent ahead of each user message (this file) carry what the
//! race and type checks need.
//!
//! ```sh
//! RSMPI_CHECK=races RSMPI_CHECK_LOG=/tmp/races rsmpirun -n 3 ./app
//! # stderr: rsmpi: message race at rank 0: ... ; /tmp/races/rank-0.jsonl: one JSON line per race
//! ```
//!
//! Two messages race when both could have been taken by the same wildcard receive:
//! they were sent concurrently (neither send knew of the other's effect) over the same
//! logical channel. Every rank keeps one vector clock. Each message of a user
//! communicator carries its sender's clock and the send's source line, in a small note
//! the checker sends on a private communicator (the payload is never copied; notes to
//! one rank travel in batches). The receiver pairs each note with its message by
//! channel and number, keeping each sender's notes in the order sent (`Inbox`). For
//! every receive that completes, in the order the engine matched them (checked once a
//! few have gathered and their notes are here, and always before this rank's own next
//! note leaves, so that its clock holds them):
//!
//! * the message from rank `s` with clock `S` races with an earlier wildcard-source
//!   receive `r` of this rank (a receive or a probe with `ANY_SOURCE`) if `r` could
//!   have taken it (same communicator, `r`'s tag matches), `r` took a message from
//!   another sender (MPI's non-overtaking rule orders one sender's messages), and
//!   the sender did not know of `r` (`S[me] < clock(r)`);
//! * the rank's clock merges `S` and ticks.
//!
//! Each wildcard receive is reported once, naming the receive (call, source line,
//! pattern), the message it took and the message that raced with it (ranks, tags and
//! the sends' source lines), as a line on stderr and a JSON line in
//! `RSMPI_CHECK_LOG/rank-<r>.jsonl`. Which message a racing receive takes depends on
//! timing; the report does not: it names the same receive and the same two messages
//! either way.

pub(crate) mod coll;
pub(crate) mod deadlock;
pub(crate) mod errors;
pub(crate) mod types;

pub(crate) use errors::request_started;

use std::collections::VecDeque;
use std::io::Write;
use std::panic::Location;
use std::path::PathBuf;
use std::sync::Arc;

use matching::{OneMap, RecvId, RecvOutcome, Source as Src, TagSel};
use rustc_hash::FxHashMap as HashMap;

use crate::point_to_point::LibTraffic;
use crate::tools::{self, Channels};
use crate::topology::{SimpleCommunicator, INTERNAL};
use crate::trace::format::Op;
use crate::traits::*;
use types::TypeSig;

type Site = Option<&'static Location<'static>>;

/// Notes to one rank are sent together, once they cover this many messages, or
/// sooner when the sender has nothing else to do (`idle`) or finalizes: a message of
/// its own per note cost the checked run ~6x (`docs/tools.md`, "Cost"). Each batch
/// waits in the receiver's unexpected queue until a check takes it, and the user's
/// wildcard receives look at it meanwhile while it is first there (the run of taken
/// messages behind it they skip, `matching::Window`): the fewer, the better. A note covers a
/// run of messages with the same clock and call, so a batch for a stream of sends is
/// a few dozen bytes.
const BATCH: u32 = 512;

/// Wildcard receives kept per sender for later messages to race with: past this
/// many (that took messages from the same sender), the oldest half is forgotten, and
/// a message racing with one of those goes unreported.
const WATCH_LIMIT: usize = 1 << 16;

/// Completed receives kept waiting for their notes ([`check_events`]) before the
/// checker waits for the notes instead: two batches' worth from every other rank
/// ([`BATCH`]: a sender holds back the notes of up to that many messages), at
/// least [`DEFER_MIN`], at most [`DEFER_MAX`]. A receiver that waited sooner, with
/// more ranks than CPUs, waited for the sender that owed the note to be scheduled:
/// with 4 096 at 17 ranks of the paper's Table 2 (16 senders, 8 192 messages
/// under notes held back), the checked run took 3.6x the unchecked one instead of
/// 1.3x (`docs/tools.md`, race checker "Cost", thirty-third round).
fn defer_limit(ranks: usize) -> usize {
    (2 * BATCH as usize * ranks.saturating_sub(1)).clamp(DEFER_MIN, DEFER_MAX)
}

/// The fewest completed receives kept waiting for their notes ([`defer_limit`]).
const DEFER_MIN: usize = 1 << 12;

/// The most completed receives kept waiting for their notes (~56 bytes each).
const DEFER_MAX: usize = 1 << 18;

/// Completed receives the race checker lets gather (beyond those still waiting for
/// their notes) before it looks for notes at the end of a call ([`settle`]): looking
/// costs one visit per rank, and takes the batches that have arrived out of the
/// unexpected queue, where the user's wildcard receives would look past them.
/// Nothing is lost by the wait: a race found later is the same race.
const SETTLE_AT: usize = 128;

/// Where the user's MPI call was made, and which call it is.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Call {
    pub op: Option<Op>,
    pub site: Site,
}

/// A receive posted on a user communicator.
#[derive(Clone, Debug)]
struct Posted {
    ctx: u32,
    source: Src,
    tag: TagSel,
    call: Call,
    /// Its type signature (for the type check; boxed, so that a receive recorded
    /// without one stays small).
    ty: Option<Box<TypeSig>>,
}

/// What the race check reads of a receive: [`Posted`] without its type signature.
#[derive(Clone, Copy, Debug)]
struct Brief {
    ctx: u32,
    source: Src,
    tag: TagSel,
    call: Call,
}

impl Posted {
    #[inline(always)]
    fn brief(&self) -> Brief {
        Brief {
            ctx: self.ctx,
            source: self.source,
            tag: self.tag,
            call: self.call,
        }
    }
}

/// The receives recorded, each written once (when posted) and read where it lies
/// (when checked), by number. Moving a receive's record from table to table cost
/// more than the rest of recording it: wide copies of fields just written
/// narrowly stall the processor.
#[derive(Default)]
struct Slab {
    items: Vec<Posted>,
    free: Vec<u32>,
}

impl Slab {
    /// Records a receive, field by field where a slot is free (released with no
    /// type signature: nothing to drop), inlined so that the fields go from
    /// registers.
    #[inline(always)]
    fn insert(&mut self, p: Posted) -> u32 {
        match self.free.pop() {
            Some(i) => {
                let slot = &mut self.items[i as usize];
                slot.ctx = p.ctx;
                slot.source = p.source;
                slot.tag = p.tag;
                slot.call = p.call;
                if p.ty.is_some() {
                    slot.ty = p.ty;
                }
                i
            }
            None => {
                self.items.push(p);
                (self.items.len() - 1) as u32
            }
        }
    }

    fn get(&self, i: u32) -> &Posted {
        &self.items[i as usize]
    }

    /// Lets record `i` go (inlined into the check, which lets go of every receive
    /// it checks: a call of its own was ~30 instructions a message).
    #[inline(always)]
    fn release(&mut self, i: u32) {
        let ty = &mut self.items[i as usize].ty;
        if ty.is_some() {
            *ty = None;
        }
        self.free.push(i);
    }
}

/// What completed, for the checker to look at after the call; the receive is in
/// [`Notes::slab`].
#[derive(Clone, Copy, Debug)]
enum Event {
    /// A receive took the message number `seq` on channel (`src`, its context,
    /// `tag`).
    Recv {
        at: u32,
        src: u32,
        tag: i32,
        seq: u64,
    },
    /// [`Event::Recv`] for a receive that took a message already here, posted
    /// without a type signature (the common case, [`Notes::posted_done`]): its
    /// record in place of its number in the slab, written once, with the event.
    Done {
        rec: Brief,
        src: u32,
        tag: i32,
        seq: u64,
    },
    /// A wildcard-source probe saw a message from `src`.
    Probe { at: u32, src: u32, tag: i32 },
}

/// The completed receives not checked yet, in the order they matched: read where
/// they lie, and let go together once all are checked (or once most are, when the
/// rest wait for their notes).
#[derive(Default)]
struct Events {
    list: Vec<Event>,
    /// How many of `list` are checked.
    done: usize,
}

impl Events {
    fn push(&mut self, e: Event) {
        self.list.push(e);
    }

    /// How many are waiting.
    fn len(&self) -> usize {
        self.list.len() - self.done
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` more are checked.
    fn checked(&mut self, n: usize) {
        self.done += n;
        if self.done == self.list.len() {
            self.list.clear();
            self.done = 0;
        } else if self.done > 1024 && self.done * 2 > self.list.len() {
            self.list.drain(..self.done);
            self.done = 0;
        }
    }
}

/// What the sender of a message says about it, as the type check's report names it.
#[derive(Clone, Debug)]
struct Note {
    /// The send's source file.
    file: Option<Arc<str>>,
    line: u32,
    op: Option<Op>,
    /// The message's type signature (with the type check, when it has one).
    ty: Option<TypeSig>,
}

/// A note as kept until its message is taken; its clock is kept apart ([`Inbox`]).
/// A note covers `count` messages, numbered `seq` onwards on its channel: a sender
/// whose clock, call and channel have not changed since its previous note to a rank
/// extends that note instead of writing another ([`Notes::add_note`]).
#[derive(Clone, Debug)]
struct Kept {
    /// The channel and the number of the first message the note covers.
    ctx: u32,
    tag: i32,
    seq: u64,
    /// How many messages it covers (at least 1).
    count: u32,
    /// The send's source file, by the number its sender gave it (`Notes::files_got`).
    file: u32,
    line: u32,
    op: Option<Op>,
    ty: Option<Box<TypeSig>>,
}

impl Kept {
    /// The note as its message `seq` (one it covers) takes it, and whether that is
    /// the last it covers. A note with a type signature covers one message: the
    /// signature is moved, not copied.
    #[inline(always)]
    fn message(&mut self, seq: u64) -> (Kept, bool) {
        let last = seq == self.seq + u64::from(self.count) - 1;
        let out = Kept {
            seq,
            ty: self.ty.take(),
            ..*self
        };
        (out, last)
    }
}

/// A vector clock, one value per world rank.
type Clock = Box<[u64]>;

/// The notes received from one rank and not yet paired with their messages, in the
/// batches they came in. A rank's messages are nearly always taken in the order it
/// sent them, so a note is read from its batch only when its message is taken:
/// pairing one is a read of its fixed part, a comparison and a copy of its clock, with
/// no allocation. Notes passed over by a message taken ahead of them (on another
/// channel) move to a table.
#[derive(Default)]
struct Inbox {
    /// Batches received and not read to their end, oldest first (each a run of notes
    /// behind their lengths, [`put_note`]).
    batches: VecDeque<Vec<u8>>,
    /// How far the oldest batch has been read.
    at: usize,
    /// The note read last, whose messages are being taken, and its clock (kept when
    /// the note's last message has been taken, until the next note is read).
    cur: Option<Kept>,
    cur_clock: Vec<u64>,
    /// Whether `cur_clock` has been handed out ([`Inbox::take`]).
    cur_given: bool,
    /// The receiver's own value in `cur_clock`, kept by its checks once it is
    /// handed out ([`Notes::run_events_in`]).
    cur_known: u64,
    /// Notes passed over by messages taken ahead of theirs, with their clocks (a
    /// message taken out of its sender's order is rare: a short list).
    passed: Vec<(Kept, Clock)>,
    /// The vector of the last batch read to its end, for the next batch to be
    /// received into ([`take_arrived_batches`]).
    spent: Option<Vec<u8>>,
}

/// A note that does not read as one ([`put_note`]).
#[derive(Debug)]
struct Malformed;

impl Inbox {
    /// Keeps a batch of notes received.
    fn push(&mut self, batch: Vec<u8>) {
        if !batch.is_empty() {
            self.batches.push_back(batch);
        }
    }

    /// The send's file number and line from the note of message `seq` on channel
    /// (`ctx`, `tag`), if it is the note being read and its clock was given with an
    /// earlier message (as [`Inbox::take`] would take it, saying `false`; such a
    /// note has no type signature); `None` otherwise.
    #[inline(always)]
    fn take_next(&mut self, ctx: u32, tag: i32, seq: u64) -> Option<(u32, u32)> {
        let k = self.cur.as_ref()?;
        let ahead = seq.wrapping_sub(k.seq);
        if !(self.cur_given && k.ctx == ctx && k.tag == tag && ahead < u64::from(k.count)) {
            return None;
        }
        // (a note with a type signature covers one message: given, it is gone)
        debug_assert!(k.ty.is_none(), "a typed note covers one message");
        let out = (k.file, k.line);
        if ahead + 1 == u64::from(k.count) {
            self.cur = None;
        }
        Some(out)
    }

    /// Whether no note is waiting.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.batches.is_empty() && self.passed.is_empty() && self.cur.is_none()
    }

    /// Reads the next note of the oldest batch, its clock (of `width` values) into
    /// `clock`; the file name it gives, if any, joins `files` (the sender's, by
    /// number). `Ok(None)` if every batch has been read.
    fn next(
        &mut self,
        files: &mut Vec<Arc<str>>,
        width: usize,
        clock: &mut Vec<u64>,
    ) -> Result<Option<Kept>, Malformed> {
        let Some(b) = self.batches.front() else {
            return Ok(None);
        };
        let len = b
            .get(self.at..self.at + 4)
            .map(|l| u32::from_le_bytes(l.try_into().expect("4")) as usize)
            .ok_or(Malformed)?;
        let note = b.get(self.at + 4..self.at + 4 + len).ok_or(Malformed)?;
        let kept = read_note(note, files, width, clock).ok_or(Malformed)?;
        self.at += 4 + len;
        if self.at == b.len() {
            self.spent = self
                .batches
                .pop_front()
                .filter(|b| b.capacity() <= SPENT_BYTES);
            self.at = 0;
        }
        Ok(Some(kept))
    }

    /// The note of message `seq` on channel (`ctx`, `tag`) (its `seq` that message's),
    /// with its clock in `clock` (of `width` values) and `true`; `Ok(None)` if it has
    /// not arrived. A note covering several messages gives its clock with the first
    /// of them taken, and with the others leaves `clock` as it is and says `false`:
    /// the caller has merged that clock already, and finds it in `cur_clock`.
    /// Notes read on the way name their files into `files`. [`Inbox::take_next`] is
    /// its common case, inlined; this is out of line.
    #[inline(never)]
    fn take(
        &mut self,
        ctx: u32,
        tag: i32,
        seq: u64,
        files: &mut Vec<Arc<str>>,
        width: usize,
        clock: &mut Vec<u64>,
    ) -> Result<Option<(Kept, bool)>, Malformed> {
        let covers =
            |k: &Kept| k.ctx == ctx && k.tag == tag && seq.wrapping_sub(k.seq) < u64::from(k.count);
        if !self.passed.is_empty() {
            if let Some(i) = self.passed.iter().position(|(k, _)| covers(k)) {
                let (k, c) = &mut self.passed[i];
                clock.clear();
                clock.extend_from_slice(c);
                let (out, done) = k.message(seq);
                if done {
                    self.passed.swap_remove(i);
                }
                return Ok(Some((out, true)));
            }
        }
        loop {
            if let Some(k) = &mut self.cur {
                if covers(k) {
                    let fresh = !self.cur_given;
                    if fresh {
                        clock.clone_from(&self.cur_clock);
                        self.cur_given = true;
                    }
                    let (out, done) = k.message(seq);
                    if done {
                        self.cur = None;
                    }
                    return Ok(Some((out, fresh)));
                }
                // a note whose messages come later, on another channel
                let k = self.cur.take().expect("just seen");
                self.passed.push((k, self.cur_clock.as_slice().into()));
            }
            let mut c = std::mem::take(&mut self.cur_clock);
            let next = self.next(files, width, &mut c);
            self.cur_clock = c;
            let Some(k) = next? else {
                return Ok(None);
            };
            self.cur = Some(k);
            self.cur_given = false;
        }
    }
}

/// What a note says before its file name, type signature and clock.
struct NoteHead {
    ctx: u32,
    tag: i32,
    seq: u64,
    line: u32,
    op: Option<Op>,
    /// The send's source file by number (`NO_FILE`: none).
    file: u32,
}

/// Where a note's count of messages sits, from the start of its length
/// ([`Notes::add_note`] extends a note in place).
const COUNT_AT: usize = 30;

/// Appends a note of one message to a batch, behind its length: its head and its
/// count of messages (1, [`COUNT_AT`]); the file's name, when the sender names it for
/// the first time; its type signature, if any; its clock (empty without the race
/// check).
fn put_note(
    b: &mut Vec<u8>,
    n: &NoteHead,
    name: Option<&str>,
    ty: Option<&TypeSig>,
    clock: &[u64],
) {
    let start = b.len();
    // the fixed part in one write: length (filled in below), ctx, tag, seq, line,
    // op, file number, whether the file's name follows, count
    let mut head = [0u8; COUNT_AT + 4];
    head[4..8].copy_from_slice(&n.ctx.to_le_bytes());
    head[8..12].copy_from_slice(&n.tag.to_le_bytes());
    head[12..20].copy_from_slice(&n.seq.to_le_bytes());
    head[20..24].copy_from_slice(&n.line.to_le_bytes());
    head[24] = n.op.map_or(u8::MAX, |o| o as u8);
    head[25..29].copy_from_slice(&n.file.to_le_bytes());
    head[29] = u8::from(name.is_some());
    head[COUNT_AT..].copy_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&head);
    if let Some(name) = name {
        b.extend_from_slice(&(name.len() as u32).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
    }
    match ty {
        Some(t) => {
            b.push(1);
            t.encode(b);
        }
        None => b.push(0),
    }
    for c in clock {
        b.extend_from_slice(&c.to_le_bytes());
    }
    let len = (b.len() - start - 4) as u32;
    b[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Reads one note (without its length) of a sender whose files are `files`, its
/// clock of `width` values into `clock`; `None` if it is malformed.
fn read_note(
    b: &[u8],
    files: &mut Vec<Arc<str>>,
    width: usize,
    clock: &mut Vec<u64>,
) -> Option<Kept> {
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let ctx = u32_at(0)?;
    let tag = u32_at(4)? as i32;
    let seq = u64_at(8)?;
    let line = u32_at(16)?;
    let op = Op::from_u8(*b.get(20)?);
    let file = u32_at(21)?;
    let count = u32_at(26).filter(|&c| c > 0)?;
    let mut o = 30;
    if *b.get(25)? != 0 {
        // a file named for the first time: its number is the next one
        let flen = u32_at(30)? as usize;
        let name = String::from_utf8_lossy(b.get(34..34 + flen)?);
        if file as usize != files.len() {
            return None;
        }
        files.push(Arc::from(name));
        o = 34 + flen;
    }
    if file != NO_FILE && file as usize >= files.len() {
        return None;
    }
    let ty = match *b.get(o)? {
        0 => {
            o += 1;
            None
        }
        _ => {
            o += 1;
            Some(Box::new(TypeSig::decode(b, &mut o)?))
        }
    };
    let c = b.get(o..)?;
    if c.len() != width * 8 {
        return None;
    }
    clock.resize(width, 0);
    for (v, c) in clock.iter_mut().zip(c.chunks_exact(8)) {
        *v = u64::from_le_bytes(c.try_into().expect("8"));
    }
    Some(Kept {
        ctx,
        tag,
        seq,
        count,
        file,
        line,
        op,
        ty,
    })
}

/// A message as a report names it.
#[derive(Clone, Debug)]
struct Msg {
    src: u32,
    tag: i32,
    /// The send's source file, by its sender's number for it (`NO_FILE`: none).
    file: u32,
    line: u32,
}

/// A wildcard receive (or probe) that later messages may race with: what of it a
/// later message is checked against, and what a report names.
#[derive(Clone, Debug)]
struct Watched {
    ctx: u32,
    tag: TagSel,
    call: Call,
    /// This rank's own clock value after the receive.
    clock: u64,
    took: Msg,
}

impl Watched {
    /// Whether a message on `ctx` with `tag`, from a sender that did not know of this
    /// receive, races with it (the receive could have taken it instead).
    #[inline(always)]
    fn races(&self, ctx: u32, tag: i32) -> bool {
        self.ctx == ctx
            && match self.tag {
                TagSel::Any => true,
                TagSel::Tag(t) => t == tag,
            }
    }
}

/// The notes sent ahead of the messages of user communicators, and the two checks
/// that read them: message races (`RSMPI_CHECK=races`: the sender's clock) and type
/// signatures (`errors`: the send's type signature, `errors.rs`). In the library
/// state while either is on.
pub(crate) struct Notes {
    /// The arrival number from which the next look for arrived batches starts
    /// ([`take_arrived_batches`]): the unexpected messages that arrived before it
    /// hold no batch that a look has not taken.
    looked: u64,
    /// Which checks are on.
    races: bool,
    types: bool,
    me: u32,
    clock: Vec<u64>,
    tool: SimpleCommunicator,
    /// Messages so far on each channel, sent and received.
    sent: Channels,
    received: Channels,
    /// Receives numbered at their match, before they complete.
    pub(crate) early: tools::Early,
    /// The receives posted on user communicators and not completed yet.
    posted: OneMap<RecvId, u32>,
    /// The receives `posted` and `events` name.
    slab: Slab,
    events: Events,
    /// How many `events` make the next check due ([`SETTLE_AT`] more than were left
    /// waiting for their notes by the last).
    settle_at: usize,
    /// How many `events` waiting for their notes make the checker wait for them
    /// ([`defer_limit`]).
    defer_limit: usize,
    /// Notes received ahead of their messages, by sender.
    inbox: Vec<Inbox>,
    /// A vector for the next batch taken from any sender to be received into
    /// ([`take_arrived_batches`]).
    batch_spare: Option<Vec<u8>>,
    /// The clock of the note being checked.
    scratch: Vec<u64>,
    /// Wildcard receives that may still race.
    watched: Watching,
    /// Reports printed so far, and the most to print (`RSMPI_CHECK_REPORTS`).
    printed: u64,
    max_reports: u64,
    /// The largest clock of this rank each rank has been seen to know.
    known_by: Vec<u64>,
    /// Races found.
    found: u64,
    /// The type signature of the receive about to be posted (`expect_type`).
    next_type: Option<TypeSig>,
    /// Notes not sent yet, by destination.
    pending: Vec<Held>,
    /// Messages whose notes are held in `pending`, all destinations together.
    held: u32,
    /// Vectors of batches sent, for the next notes ([`SPARES`]), and the list of
    /// batches [`idle`] sends, kept for the next time.
    spare: Vec<Vec<u8>>,
    outgoing: Vec<(u32, Vec<u8>)>,
    /// The source files named to each destination so far, by the address of their
    /// name, with the number each destination knows them by: a note names its file
    /// once per destination, then by number. The file named last sits beside the table.
    files_sent: Vec<FilesSent>,
    /// The source files each rank has named, by their number.
    files_got: Vec<Vec<Arc<str>>>,
}

/// The notes held back for one rank.
#[derive(Clone, Default)]
struct Held {
    /// The notes, each behind its length.
    bytes: Vec<u8>,
    /// How many messages they cover.
    count: u32,
    /// The last note, while the next message may extend it.
    open: Option<Open>,
}

impl Held {
    /// The notes, to be sent; what is held starts again in a spare vector (from
    /// `spare`, the vectors of batches sent before).
    fn take_bytes(&mut self, spare: &mut Vec<Vec<u8>>) -> Vec<u8> {
        debug_assert!(self.open.is_none(), "the last note is closed first");
        self.count = 0;
        std::mem::replace(&mut self.bytes, spare.pop().unwrap_or_default())
    }
}

/// Vectors of batches sent kept for the next notes, at most this many of at most
/// [`SPARE_BYTES`] each: a batch written into a new vector cost an allocation and
/// its growth, ~500 instructions a batch where every message has a note of its own
/// (a ping-pong).
const SPARES: usize = 8;
const SPARE_BYTES: usize = 64 << 10;

/// The largest vector of a batch read that a rank's [`Inbox`] keeps for its next
/// batch: one is kept per rank, so the bound is small (a batch of a note or two at a
/// few hundred ranks).
const SPENT_BYTES: usize = 4 << 10;

/// The last note held for a rank, as the next message would have to repeat it to
/// extend it instead of writing a note of its own.
#[derive(Clone, Copy)]
struct Open {
    ctx: u32,
    tag: i32,
    /// The number of the note's first message on the channel, and the number the
    /// next would have. The messages the note covers past its first are counted
    /// here alone, in neither the note's bytes nor [`Notes::sent`], until the note
    /// is closed ([`Notes::close_open`]).
    first: u64,
    seq: u64,
    /// The send's call and source line (the same line, when the same location).
    site: Site,
    op: Option<Op>,
    /// This rank's own clock value when the note was written: the clock changes only
    /// when its own value ticks (at each receive and wildcard probe checked), so an
    /// equal value is an equal clock.
    own: u64,
    /// Where the note starts in [`Held::bytes`].
    at: usize,
}

/// A source file's name, by its address and length (`Location::file`).
type FileKey = (usize, usize);

/// The source files named to one rank, with their numbers; the one named last beside
/// the table (most sends to a rank come from one file).
#[derive(Clone, Default)]
struct FilesSent {
    last: Option<(FileKey, u32)>,
    ids: HashMap<FileKey, u32>,
}

/// The file number of a note sent without a source line.
const NO_FILE: u32 = u32::MAX;

/// What `RSMPI_CHECK` asks for.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Settings {
    pub races: bool,
    pub deadlock: bool,
    pub errors: bool,
}

impl Settings {
    pub fn any(&self) -> bool {
        self.races || self.deadlock || self.errors
    }

    /// Whether the race check is the only check.
    pub fn races_alone(&self) -> bool {
        self.races && !self.deadlock && !self.errors
    }
}

/// The checks `RSMPI_CHECK` asks for; an error for what it cannot do.
pub(crate) fn settings() -> crate::Result<Settings> {
    let mut set = Settings::default();
    let Ok(v) = std::env::var("RSMPI_CHECK") else {
        return Ok(set);
    };
    for w in v.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match w {
            "races" => set.races = true,
            "deadlock" => set.deadlock = true,
            "errors" => set.errors = true,
            "all" => {
                set.races = true;
                set.deadlock = true;
                set.errors = true;
            }
            _ => {
                return Err(crate::Error::Setting(format!(
                    "RSMPI_CHECK={v}: expected a list of: races, deadlock, errors, all"
                )))
            }
        }
    }
    Ok(set)
}

/// Seconds from the environment variable `name`, if set.
fn env_secs(name: &str) -> crate::Result<Option<std::time::Duration>> {
    let Ok(v) = std::env::var(name) else {
        return Ok(None);
    };
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Some(std::time::Duration::from_secs_f64(s)))
        .ok_or_else(|| {
            crate::Error::Setting(format!("{name}={v}: expected seconds, such as 1 or 0.5"))
        })
}

thread_local! {
    /// `RSMPI_CHECK_LOG/rank-<r>.jsonl`, where every report's JSON line also goes.
    static LOG: std::cell::RefCell<Option<std::fs::File>> = const { std::cell::RefCell::new(None) };
}

/// A report's JSON line: to stderr, and to the log if there is one.
pub(crate) fn log_line(line: &str) {
    eprintln!("rsmpi-check: {line}");
    LOG.with(|l| {
        if let Some(f) = &mut *l.borrow_mut() {
            let _ = writeln!(f, "{line}");
        }
    });
}

/// Starts the checks `set` asks for (every rank at initialisation, a collective).
pub(crate) fn init(world: &SimpleCommunicator, set: Settings) -> crate::Result<()> {
    let me = world.rank() as u32;
    if let Some(d) = std::env::var_os("RSMPI_CHECK_LOG").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        let f = std::fs::create_dir_all(&d)
            .and_then(|_| std::fs::File::create(d.join(format!("rank-{me}.jsonl"))))
            .map_err(|e| crate::Error::Setting(format!("RSMPI_CHECK_LOG={}: {e}", d.display())))?;
        LOG.with(|l| *l.borrow_mut() = Some(f));
    }
    if set.deadlock {
        let timeout = env_secs("RSMPI_CHECK_TIMEOUT")?.unwrap_or(std::time::Duration::from_secs(1));
        let hang = env_secs("RSMPI_CHECK_HANG")?.unwrap_or(timeout * 10);
        let sync = std::env::var("RSMPI_CHECK_SYNC").is_ok_and(|v| v == "1");
        let tool = world.duplicate();
        let d = deadlock::Deadlock::new(me, tool, timeout, hang, sync);
        if sync {
            tools::set_sync_sends();
        }
        tools::with(|t| t.deadlock = Some(d));
    }
    if set.races || set.errors {
        notes_init(world, set);
    }
    if set.errors {
        types::want();
        let e = errors::Errors::new(me, world.duplicate());
        tools::with(|t| t.errors = Some(e));
    }
    Ok(())
}

fn notes_init(world: &SimpleCommunicator, set: Settings) {
    let tool = world.duplicate();
    let (me, size) = (world.rank() as u32, world.size() as usize);
    let r = Notes::new(me, size, tool, set);
    tools::with(|t| t.notes = Some(r));
}

impl Notes {
    /// The notes of world rank `me` of `size`, whose own traffic goes on `tool`.
    fn new(me: u32, size: usize, tool: SimpleCommunicator, set: Settings) -> Notes {
        Notes {
            races: set.races,
            types: set.errors,
            me,
            clock: vec![0; size],
            tool,
            sent: Channels::new(size),
            received: Channels::new(size),
            early: tools::Early::default(),
            posted: OneMap::default(),
            slab: Slab::default(),
            events: Events::default(),
            settle_at: SETTLE_AT,
            defer_limit: defer_limit(size),
            inbox: (0..size).map(|_| Inbox::default()).collect(),
            batch_spare: None,
            scratch: Vec::new(),
            watched: Watching::new(size),
            printed: 0,
            max_reports: std::env::var("RSMPI_CHECK_REPORTS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(100),
            known_by: vec![0; size],
            found: 0,
            next_type: None,
            pending: vec![Held::default(); size],
            held: 0,
            spare: Vec::new(),
            outgoing: Vec::new(),
            files_sent: vec![FilesSent::default(); size],
            files_got: vec![Vec::new(); size],
            looked: 0,
        }
    }
}

/// At finalize: the error checks' last reports; says how many races this rank found.
pub(crate) fn finish() {
    // the notes held back: a peer's last receives may wait for them
    idle();
    errors::finish();
    // receives completed outside any watched call (in finalize's own progress), and
    // those still waiting for their notes
    check_events(true);
    if let Some(Some(r)) = tools::with(|t| t.notes.take()) {
        if r.races && r.found > 0 {
            eprintln!(
                "rsmpi: RSMPI_CHECK=races: rank {} found {} message race{}{}",
                r.me,
                r.found,
                if r.found == 1 { "" } else { "s" },
                if r.found > r.printed {
                    format!(
                        " ({} reported; RSMPI_CHECK_REPORTS raises the limit)",
                        r.printed
                    )
                } else {
                    String::new()
                }
            );
        }
    }
}

impl Notes {
    /// Keeps the vector of a batch sent for the next notes, if there is room.
    fn keep_spare(&mut self, mut b: Vec<u8>) {
        if self.spare.len() < SPARES && b.capacity() <= SPARE_BYTES {
            b.clear();
            self.spare.push(b);
        }
    }

    /// The receives posted and not completed yet.
    fn posted_list(&self) -> Vec<(RecvId, Posted)> {
        self.posted
            .iter()
            .map(|(id, at)| (*id, self.slab.get(*at).clone()))
            .collect()
    }

    /// An MPI call ended: a type signature no receive took is dropped.
    pub fn call_ended(&mut self) {
        if self.types {
            self.next_type = None;
        }
    }

    /// Whether notes are held back for any rank.
    pub fn holds_notes(&self) -> bool {
        self.held > 0
    }

    /// Whether the completed receives are due for their checks at the end of a call:
    /// once [`SETTLE_AT`] are waiting, or at once with the type check on.
    pub fn settle_due(&self) -> bool {
        self.events.len() >= self.settle_at || (self.types && !self.events.is_empty())
    }

    /// [`Notes::settle_due`] with the type check known to be off (the race check
    /// alone on, [`tools::Noted`]).
    #[inline(always)]
    pub fn settle_due_untyped(&self) -> bool {
        debug_assert!(!self.types, "the type check is off");
        self.events.len() >= self.settle_at
    }

    #[inline(always)]
    pub fn posted(&mut self, id: RecvId, ctx: u32, source: Src, tag: TagSel, call: Call) {
        if let Some(at) = self.record(ctx, source, tag, call) {
            self.posted.insert(id, at);
        }
    }

    /// Records a receive posted on `ctx` from `source` with `tag` in `call`, with the
    /// type signature expected of it (taken); its number in the slab, unless it is on
    /// a context of the library's own (not recorded).
    #[inline(always)]
    fn record(&mut self, ctx: u32, source: Src, tag: TagSel, call: Call) -> Option<u32> {
        let ty = self.next_type.take().map(Box::new);
        (ctx & INTERNAL == 0).then(|| {
            self.slab.insert(Posted {
                ctx,
                source,
                tag,
                call,
                ty,
            })
        })
    }

    /// A receive was posted and completed with `outcome` at once (`Tools::posted_done`):
    /// [`Notes::posted`] and [`Notes::received`] in one, with no entry in `posted`.
    #[inline(always)]
    pub fn posted_done(
        &mut self,
        ctx: u32,
        source: Src,
        tag: TagSel,
        call: Call,
        outcome: &RecvOutcome,
    ) {
        let RecvOutcome::Received {
            source: from,
            tag: took,
            ..
        } = *outcome
        else {
            self.next_type = None;
            return;
        };
        if ctx & INTERNAL != 0 {
            self.next_type = None;
            return;
        }
        let seq = self.received.next_received((from, ctx, took));
        // (only the type check gives a receive a type signature)
        let ty = if self.types {
            self.next_type.take()
        } else {
            None
        };
        match ty {
            // (no slab: the record is the event's)
            None => self.events.push(Event::Done {
                rec: Brief {
                    ctx,
                    source,
                    tag,
                    call,
                },
                src: from,
                tag: took,
                seq,
            }),
            Some(ty) => {
                let at = self.slab.insert(Posted {
                    ctx,
                    source,
                    tag,
                    call,
                    ty: Some(Box::new(ty)),
                });
                self.events.push(Event::Recv {
                    at,
                    src: from,
                    tag: took,
                    seq,
                });
            }
        }
    }

    /// Receive `id` matched a message from `source` with `tag` whose data comes later
    /// (`Tools::matched`): numbered now, in match order.
    pub fn matched(&mut self, id: RecvId, source: u32, tag: i32) {
        if let Some(&at) = self.posted.get(&id) {
            if !self.early.has(id.0) {
                let seq = self
                    .received
                    .next_received((source, self.slab.get(at).ctx, tag));
                self.early.insert(id.0, seq);
            }
        }
    }

    /// A message from `source` on (`ctx`, `tag`) was withdrawn by its sender's cancel
    /// (`Tools::withdrawn`): its number is passed over (its note stays unused, as a
    /// ready send's that found no receive), and it counts as taken for the
    /// unmatched-send check.
    pub fn withdrawn(&mut self, source: u32, ctx: u32, tag: i32, ahead: u64) {
        if ctx & INTERNAL == 0 {
            self.received.withdraw((source, ctx, tag), ahead);
        }
    }

    /// A matched probe took message `msg` (`Tools::probe_matched`): numbered now.
    pub fn probe_matched(&mut self, msg: matching::MsgId, source: u32, ctx: u32, tag: i32) {
        if ctx & INTERNAL == 0 {
            let seq = self.received.next_received((source, ctx, tag));
            self.early.insert(msg.0, seq);
        }
    }

    pub fn received(&mut self, id: RecvId, outcome: &RecvOutcome) {
        let Some(at) = self.posted.remove(&id) else {
            return;
        };
        if let RecvOutcome::Received { source, tag, .. } = *outcome {
            let seq = match self.early.take(id.0) {
                Some(n) => n,
                None => self
                    .received
                    .next_received((source, self.slab.get(at).ctx, tag)),
            };
            self.events.push(Event::Recv {
                at,
                src: source,
                tag,
                seq,
            });
        } else {
            self.slab.release(at);
        }
    }

    /// Appends the note of a message to world rank `dest` (of type signature `ty`)
    /// to the notes held for `dest`, or counts the message in the last of them if
    /// it says the same (channel, call, clock, no type signature). Returns how many
    /// messages `dest` now has notes held for.
    ///
    /// Sending does not tick the clock. A race check compares a message's knowledge
    /// of the receiver's own value with the value of the receive (`S[me] <
    /// clock(r)`); that value ticks at every receive, which is all the check needs
    /// to tell what a rank sent before a receive from what it sent after it. So a
    /// rank that sends without receiving, as each sender in MPIRace-Check's Table 2
    /// does, keeps its clock, and one note covers its consecutive messages.
    #[inline(always)]
    fn add_note(&mut self, ctx: u32, dest: u32, tag: i32, call: Call, ty: Option<&TypeSig>) -> u32 {
        let own = self.clock.get(self.me as usize).copied().unwrap_or(0);
        let ty = ty.filter(|_| self.types);
        let held = &mut self.pending[dest as usize];
        self.held += 1;
        held.count += 1;
        if let Some(o) = &mut held.open {
            let same_site = match (o.site, call.site) {
                (Some(a), Some(b)) => std::ptr::eq(a, b),
                (a, b) => a.is_none() && b.is_none(),
            };
            // (on the note's channel, this message's number is the next: every
            // message to `dest` is noted, and a message on another channel closes it)
            if ty.is_none() && same_site && (o.ctx, o.tag, o.op, o.own) == (ctx, tag, call.op, own)
            {
                // the same note again: one more message counted in it
                o.seq += 1;
                return held.count;
            }
        }
        self.add_new_note(ctx, dest, tag, call, ty, own)
    }

    /// Closes the last note held for world rank `dest`, if open: the messages it
    /// covers are written into it and counted on its channel.
    fn close_open(&mut self, dest: u32) {
        let held = &mut self.pending[dest as usize];
        let Some(o) = held.open.take() else {
            return;
        };
        let covers = o.seq - o.first;
        let c = &mut held.bytes[o.at + COUNT_AT..o.at + COUNT_AT + 4];
        c.copy_from_slice(&(covers as u32).to_le_bytes());
        // its first message was counted when it was opened
        self.sent.advance((dest, o.ctx, o.tag), covers - 1);
    }

    /// [`Notes::add_note`] for a message the last note does not cover: a note of
    /// its own (message number `seq`; `own`, this rank's own clock value).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn add_new_note(
        &mut self,
        ctx: u32,
        dest: u32,
        tag: i32,
        call: Call,
        ty: Option<&TypeSig>,
        own: u64,
    ) -> u32 {
        self.close_open(dest);
        let seq = self.sent.next((dest, ctx, tag));
        let (file, line) = call.site.map_or(("", 0), |l| (l.file(), l.line()));
        // a file named for the first time goes with its number; later notes only
        // give the number
        let (id, new) = if call.site.is_none() {
            (NO_FILE, false)
        } else {
            let key = (file.as_ptr() as usize, file.len());
            let FilesSent { last, ids } = &mut self.files_sent[dest as usize];
            match *last {
                Some((k, id)) if k == key => (id, false),
                _ => {
                    let next = ids.len() as u32;
                    let (id, new) = match ids.entry(key) {
                        std::collections::hash_map::Entry::Occupied(e) => (*e.get(), false),
                        std::collections::hash_map::Entry::Vacant(e) => (*e.insert(next), true),
                    };
                    *last = Some((key, id));
                    (id, new)
                }
            }
        };
        let head = NoteHead {
            ctx,
            tag,
            seq,
            line,
            op: call.op,
            file: id,
        };
        let held = &mut self.pending[dest as usize];
        let at = held.bytes.len();
        let clock: &[u64] = if self.races { &self.clock } else { &[] };
        put_note(&mut held.bytes, &head, new.then_some(file), ty, clock);
        held.open = ty.is_none().then_some(Open {
            ctx,
            tag,
            first: seq,
            seq: seq + 1,
            site: call.site,
            op: call.op,
            own,
            at,
        });
        held.count
    }

    /// Checks the message `m` against the watched receives (its sender knew of this
    /// rank's clock up to `known`), then merges its sender's clock `merge` into this
    /// rank's (`None`: merged with an earlier message already) and ticks.
    ///
    /// Inlined into the loop of [`Notes::run_events_in`], with what is rare in it out
    /// of line (a racing receive reported one by one, a sender that has learnt of this
    /// rank's clock): the loop then keeps its values in registers.
    #[inline(always)]
    fn check(
        &mut self,
        ctx: u32,
        m: &Msg,
        known: u64,
        merge: Option<&[u64]>,
        report: &mut Vec<(Watched, Msg)>,
    ) {
        let me = self.me as usize;
        self.check_unknown(ctx, m, known, report);
        let Some(s) = merge else {
            self.clock[me] += 1;
            return;
        };
        for (c, x) in self.clock.iter_mut().zip(s) {
            *c = (*c).max(*x);
        }
        self.clock[me] += 1;
        if known > self.known_by[m.src as usize] {
            self.learnt(m.src, known);
        }
    }

    /// The race check proper of [`Notes::check`]: message `m` on `ctx`, whose sender
    /// knew of this rank's clock up to `known`, against the watched receives.
    #[inline(always)]
    fn check_unknown(&mut self, ctx: u32, m: &Msg, known: u64, report: &mut Vec<(Watched, Msg)>) {
        let full = self.printed + report.len() as u64 >= self.max_reports;
        let (printed, max, found) = (self.printed, self.max_reports, &mut self.found);
        self.watched
            .unknown_to(m.src as usize, known, |group, from| {
                if full && group[from..].iter().all(|w| w.races(ctx, m.tag)) {
                    // past the most to print, and every one races: counted, in one go
                    *found += (group.len() - from) as u64;
                    group.truncate(from);
                } else {
                    report_group(group, from, ctx, m, report, printed, max, found);
                }
            });
    }

    /// World rank `src` has been seen to know this rank's clock up to `known`, more
    /// than before: the watched receives every other rank now knows of can no longer
    /// race, and are let go.
    #[inline(never)]
    fn learnt(&mut self, src: u32, known: u64) {
        let me = self.me as usize;
        self.known_by[src as usize] = known;
        // a receive that took a message from `g` can race only with the messages of
        // ranks other than `g`; once each of them has been seen to know of it, never
        let (mut low, mut low_at, mut second) = (u64::MAX, usize::MAX, u64::MAX);
        for (r, k) in self.known_by.iter().enumerate().filter(|(r, _)| *r != me) {
            if *k < low {
                (second, low, low_at) = (low, *k, r);
            } else if *k < second {
                second = *k;
            }
        }
        self.watched
            .forget(|g| if g == low_at { second } else { low });
    }

    #[inline(always)]
    fn watch(&mut self, posted: &Brief, took: Msg) {
        let clock = self.clock[self.me as usize];
        self.watch_at(posted, took, clock);
    }

    /// [`Notes::watch`] with this rank's clock value after the receive, `clock`.
    #[inline(always)]
    fn watch_at(&mut self, posted: &Brief, took: Msg, clock: u64) {
        if posted.source == Src::Any {
            self.watched.push(
                took.src as usize,
                Watched {
                    ctx: posted.ctx,
                    tag: posted.tag,
                    call: posted.call,
                    clock,
                    took,
                },
            );
        }
    }
}

/// [`Notes::check`] for a group whose racing receives from `from` on are not all
/// counted in one go: each is reported once (while fewer than `max` are printed,
/// `printed` so far), or counted in `found`.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn report_group(
    group: &mut Vec<Watched>,
    from: usize,
    ctx: u32,
    m: &Msg,
    report: &mut Vec<(Watched, Msg)>,
    printed: u64,
    max: u64,
    found: &mut u64,
) {
    // in one pass, the rest kept in order: a receive taken out at a time moved every
    // one after it, and a group of thousands (a sender that ran alone for a while)
    // made a check take as long as the run (Table 2 at 3 ranks, one run in ten:
    // 0.5-1.2 s instead of 0.24 s, two thirds of it in `memmove`)
    let mut at = 0;
    group.retain(|w| {
        at += 1;
        if at <= from || !w.races(ctx, m.tag) {
            return true;
        }
        if printed + (report.len() as u64) < max {
            report.push((w.clone(), m.clone()));
        } else {
            *found += 1;
        }
        false
    });
}

/// The wildcard receives that later messages may race with, in groups by the sender
/// of the message each took, oldest (lowest clock) first; and which groups hold any.
///
/// A message is checked against the groups that hold receives (`live`), not against
/// every rank's: a look at each rank's cost ~12 instructions a message and rank
/// (+84 a message at 9 ranks of the paper's Table 2, where every message empties all
/// groups but its sender's).
struct Watching {
    groups: Vec<Vec<Watched>>,
    /// The ranks whose groups are not empty, each once, in no order.
    live: Vec<u32>,
}

impl Watching {
    /// Empty groups for `size` ranks.
    fn new(size: usize) -> Watching {
        Watching {
            groups: vec![Vec::new(); size],
            live: Vec::new(),
        }
    }

    /// Adds receive `w` (the newest) to group `g`.
    #[inline(always)]
    fn push(&mut self, g: usize, w: Watched) {
        let group = &mut self.groups[g];
        match group.len() {
            0 => self.live.push(g as u32),
            // a rank that never hears from this one keeps every receive racy: bound
            // the memory, forget the oldest half
            WATCH_LIMIT => drop(group.drain(..WATCH_LIMIT / 2)),
            _ => {}
        }
        group.push(w);
    }

    /// Calls `f` with each group, apart from `src`'s, that holds receives a sender
    /// knowing this rank's clock up to `known` did not know of (clock above
    /// `known`), and where they start; `f` may take receives out of the group.
    #[inline(always)]
    fn unknown_to(&mut self, src: usize, known: u64, mut f: impl FnMut(&mut Vec<Watched>, usize)) {
        let mut i = 0;
        while let Some(&g) = self.live.get(i) {
            let g = g as usize;
            i += 1;
            let group = &mut self.groups[g];
            // one sender's messages cannot race with each other (non-overtaking), and
            // only the receives the sender did not know of can; the newest is at the
            // back
            if g == src || group.last().is_none_or(|w| w.clock <= known) {
                continue;
            }
            // the sender knew of none of them, most often (a rank that never hears
            // from this one)
            let from = match group.first() {
                Some(w) if w.clock > known => 0,
                _ => group.partition_point(|w| w.clock <= known),
            };
            f(group, from);
            if group.is_empty() {
                i -= 1;
                self.live.swap_remove(i);
            }
        }
    }

    /// Lets go of the receives of each group `g` with clock up to `floor(g)`.
    fn forget(&mut self, floor: impl Fn(usize) -> u64) {
        let groups = &mut self.groups;
        self.live.retain(|&g| {
            let group = &mut groups[g as usize];
            let n = group.partition_point(|w| w.clock <= floor(g as usize));
            group.drain(..n);
            !group.is_empty()
        });
    }
}

/// What the note of a send is made of: its context and tag, its destination's world
/// rank (`dest`, found in the library state: `None` when the send will fail or goes
/// to `PROC_NULL`, and then it has no note) and its type signature (`ty`, when the
/// type check wants it).
pub(crate) struct SendNote<D, T> {
    pub ctx: u32,
    pub tag: i32,
    pub dest: D,
    pub ty: T,
}

/// What adding a send's note led to.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Added {
    /// No note (a tool's own send, or no race or type check).
    No,
    /// Receives are waiting for their checks: they go first (the note carries this
    /// rank's clock, which must hold every message received before it).
    Behind,
    /// The note is held back with the others for its rank.
    Held,
    /// The notes held for its rank cover a batch: they leave now.
    Full,
}

/// Adds the note of a send to world rank `dest` (`first`: unless receives are
/// waiting for their checks).
#[inline(always)]
fn add_in(
    t: &mut tools::Tools,
    ctx: u32,
    dest: u32,
    tag: i32,
    ty: Option<&TypeSig>,
    first: bool,
) -> Added {
    if t.busy {
        return Added::No;
    }
    let call = t.call;
    add_as(t, call, ctx, dest, tag, ty, first)
}

/// [`add_in`] for a send made by `call`, with no tool's own traffic running.
#[inline(always)]
fn add_as(
    t: &mut tools::Tools,
    call: Call,
    ctx: u32,
    dest: u32,
    tag: i32,
    ty: Option<&TypeSig>,
    first: bool,
) -> Added {
    let Some(r) = t.notes.as_mut() else {
        return Added::No;
    };
    if first && !r.events.is_empty() {
        return Added::Behind;
    }
    match r.add_note(ctx, dest, tag, call, ty) >= BATCH {
        true => Added::Full,
        false => Added::Held,
    }
}

/// Adds the note that goes ahead of a send of context `ctx` to world rank `dest`.
/// The receives still waiting for their checks are checked first (a visit of their
/// own, rare), and a full batch is sent in a visit of its own.
#[cold]
#[inline(never)]
pub(crate) fn before_send(ctx: u32, dest: u32, tag: i32, ty: Option<TypeSig>) {
    if ctx & INTERNAL != 0 {
        return;
    }
    let ty = ty.as_ref();
    let added = tools::with(|t| add_in(t, ctx, dest, tag, ty, true));
    after_add(added.unwrap_or(Added::No), ctx, dest, tag, ty);
}

/// The watched send `op` made at `site` begins: the call's enter, its destination
/// found and its note added ([`before_send`]) in one visit to the library state.
pub(crate) fn enter_send(
    op: Op,
    site: &'static Location<'static>,
    note: SendNote<
        impl FnOnce(&crate::progress::State) -> Option<u32>,
        impl FnOnce() -> Option<TypeSig>,
    >,
) {
    let SendNote { ctx, tag, dest, ty } = note;
    let ty = ty();
    let ty = ty.as_ref();
    let noted = crate::progress::try_with(|s| enter_send_in(s, op, site, ctx, tag, dest, ty));
    if let Ok(Some(n)) = noted {
        n.finish(ty);
    }
}

/// [`enter_send`]'s visit, in the library state `s` the caller holds (a send that
/// starts in the same visit): `None` if the send has no note.
#[inline(always)]
pub(crate) fn enter_send_in(
    s: &mut crate::progress::State,
    op: Op,
    site: &'static Location<'static>,
    ctx: u32,
    tag: i32,
    dest: impl FnOnce(&crate::progress::State) -> Option<u32>,
    ty: Option<&TypeSig>,
) -> Option<Noted> {
    let dest = dest(s).filter(|_| ctx & INTERNAL == 0);
    let t = s.tools.as_deref_mut()?;
    enter_send_with(t, op, site, ctx, tag, dest, ty)
}

/// [`enter_send_in`] with the tools in hand and the destination (of a user
/// context) found.
#[inline(always)]
fn enter_send_with(
    t: &mut tools::Tools,
    op: Op,
    site: &'static Location<'static>,
    ctx: u32,
    tag: i32,
    dest: Option<u32>,
    ty: Option<&TypeSig>,
) -> Option<Noted> {
    t.enter(op, site);
    dest.map(|d| Noted {
        ctx,
        dest: d,
        tag,
        added: add_in(t, ctx, d, tag, ty, true),
    })
}

/// [`enter_send_in`] for a blocking send whose destination, `dest`, is checked:
/// its note, and whether the call was entered. Where the notes are the only tool
/// that watches the call ([`tools::Tools::notes_alone`]), the note carries the call
/// itself, and the call is entered only if the note leaves more to do: a send that
/// then leaves at once is neither entered nor left, and its caller ends it with
/// [`tools::Tools::ended_unentered`] (an enter and a leave cost a checked send ~45
/// instructions; `docs/tools.md`, race checker "Cost").
///
/// `W::NOTED` ([`tools::Noted`]): the race check is the only tool on, so the notes
/// are alone outside any other call and any tool's own traffic.
#[inline(always)]
pub(crate) fn note_send_in<W: tools::Mode>(
    s: &mut crate::progress::State,
    op: Op,
    site: &'static Location<'static>,
    ctx: u32,
    tag: i32,
    dest: Option<u32>,
    ty: Option<&TypeSig>,
) -> (Option<Noted>, bool) {
    let dest = dest.filter(|_| ctx & INTERNAL == 0);
    let Some(t) = s.tools.as_deref_mut() else {
        return (None, false);
    };
    let alone = if W::NOTED {
        t.outside_calls()
    } else {
        t.notes_alone()
    };
    if !alone {
        return (enter_send_with(t, op, site, ctx, tag, dest, ty), true);
    }
    let call = Call {
        op: Some(op),
        site: Some(site),
    };
    // (no closure: one was left out of line, with the note's addition in it)
    let Some(d) = dest else {
        return (None, false);
    };
    let n = Noted {
        ctx,
        dest: d,
        tag,
        added: add_as(t, call, ctx, d, tag, ty, true),
    };
    if n.unfinished() {
        t.enter(op, site);
        return (Some(n), true);
    }
    (Some(n), false)
}

/// A send's note added in a visit to the library state ([`enter_send_in`]), and
/// what it led to.
#[derive(Clone, Copy)]
pub(crate) struct Noted {
    ctx: u32,
    dest: u32,
    tag: i32,
    added: Added,
}

impl Noted {
    /// Whether there is more to do, outside the library state, before the send
    /// starts ([`Noted::finish`]): the receives waiting for their checks, or a full
    /// batch of notes to send. Rare: a check every 128 receives, a batch every 512
    /// messages.
    #[inline(always)]
    pub(crate) fn unfinished(&self) -> bool {
        matches!(self.added, Added::Behind | Added::Full)
    }

    /// Does what [`Noted::unfinished`] says is left (type signature `ty`).
    pub(crate) fn finish(self, ty: Option<&TypeSig>) {
        after_add(self.added, self.ctx, self.dest, self.tag, ty);
    }
}

/// What follows a note's addition: the receives that were waiting are checked and
/// the note added again, a full batch sent.
#[inline(always)]
fn after_add(mut added: Added, ctx: u32, dest: u32, tag: i32, ty: Option<&TypeSig>) {
    if added == Added::Behind {
        check_events(true);
        added = tools::with(|t| add_in(t, ctx, dest, tag, ty, false)).unwrap_or(Added::No);
    }
    if added == Added::Full {
        send_held(dest);
    }
}

/// Sends the notes held for world rank `dest`.
#[cold]
#[inline(never)]
fn send_held(dest: u32) {
    let Some(Some((tool, b))) = with_notes(|r| {
        if r.pending[dest as usize].count == 0 {
            return None;
        }
        r.close_open(dest);
        let h = &mut r.pending[dest as usize];
        r.held -= h.count;
        Some((r.tool, h.take_bytes(&mut r.spare)))
    }) else {
        return;
    };
    send_notes(&tool, dest, &b);
    with_notes(|r| r.keep_spare(b));
}

fn send_notes(tool: &SimpleCommunicator, dest: u32, batch: &[u8]) {
    tools::own_traffic(|| tool.process_at_rank(dest as i32).lib_send(batch, 0));
}

/// This rank has nothing to do (a wait's idle poll): sends the notes it holds back,
/// which a peer may be waiting for.
#[cold]
#[inline(never)]
pub(crate) fn idle() {
    let Some(Some((tool, mut batches))) = tools::with(|t| {
        let r = t.notes.as_mut()?;
        if r.held == 0 {
            return None;
        }
        r.held = 0;
        let mut batches = std::mem::take(&mut r.outgoing);
        for d in 0..r.pending.len() {
            if r.pending[d].count > 0 {
                r.close_open(d as u32);
                batches.push((d as u32, r.pending[d].take_bytes(&mut r.spare)));
            }
        }
        Some((r.tool, batches))
    }) else {
        return;
    };
    for (dest, b) in &batches {
        send_notes(&tool, *dest, b);
    }
    with_notes(|r| {
        for (_, b) in batches.drain(..) {
            r.keep_spare(b);
        }
        r.outgoing = batches;
    });
}

/// The receive about to be posted has type signature `ty` (from the watched calls;
/// the next receive posted takes it, and the end of the call drops it).
#[cold]
#[inline(never)]
pub(crate) fn expect_type(ty: Option<TypeSig>) {
    tools::with(|t| {
        if let Some(n) = t.notes.as_mut().filter(|n| n.types) {
            n.next_type = ty;
        }
    });
}

/// A wildcard-source probe on `ctx` saw a message from world rank `src`.
pub(crate) fn probed(ctx: u32, source: Src, tag_sel: TagSel, src: u32, tag: i32) {
    if source != Src::Any || ctx & INTERNAL != 0 {
        return;
    }
    tools::with(|t| {
        if t.busy {
            return;
        }
        if let Some(r) = t.notes.as_mut().filter(|r| r.races) {
            let posted = Posted {
                ctx,
                source,
                tag: tag_sel,
                call: t.call,
                ty: None,
            };
            let at = r.slab.insert(posted);
            r.events.push(Event::Probe { at, src, tag });
        }
    });
}

/// Checks the receives completed so far, in the order they matched, as far as their
/// notes are here (from the tools' leave hook, outside the library state, when
/// [`Notes::settle_due`]).
pub(crate) fn settle() {
    check_events(false);
}

fn with_notes<R>(f: impl FnOnce(&mut Notes) -> R) -> Option<R> {
    tools::with(|t| t.notes.as_mut().map(f)).flatten()
}

/// Checks the completed receives the race checker holds, in the order they matched.
/// The checker stays in the tools while the notes are fetched, so that receives
/// completing meanwhile are recorded too (and checked after these, if their notes are
/// here).
///
/// With `block` (or the type check on, or [`defer_limit`] receives waiting) it waits
/// for the notes of every receive it holds on entry. Otherwise it stops at the first
/// receive whose note has not arrived and keeps it, and those after it, for later:
/// waiting for a note here would leave the user's next messages to arrive with no
/// receive posted, so that each took the unexpected path, which cost more than the
/// check itself. Deferring changes no result: the clock only merges what was
/// received, in the same order, and every note this rank sends waits until its clock
/// holds all it has received ([`before_send`]).
fn check_events(block: bool) {
    check_events_now(block);
    with_notes(|r| r.settle_at = r.events.len() + SETTLE_AT);
}

/// [`check_events`]' work.
fn check_events_now(block: bool) {
    let settling = !block;
    let Some((tool, block, mut owed)) = with_notes(|r| {
        let block = block || r.types || r.events.len() > r.defer_limit;
        (r.tool, block, r.events.len())
    }) else {
        return;
    };
    let mut found = Vec::new();
    let mut mismatches = Vec::new();
    // the batches that have arrived, from every rank, out of the unexpected queue: a
    // wildcard receive of the user's looks past one still there at its front
    // (at the checks that end a call, every 128 receives, not before each send)
    if settling {
        tools::own_traffic(|| take_arrived_batches(&tool));
    }
    tools::own_traffic(|| loop {
        // the receives whose notes are here, in one visit
        let next = with_notes(|r| r.run_events(&mut found, &mut mismatches, &mut owed));
        match next {
            Some(Ok(Some(_))) => {}
            Some(Err(Malformed)) => {
                crate::progress::with(|s| s.fatal("RSMPI_CHECK", &"malformed checker note"))
            }
            _ => break,
        }
        // the next one's note has not been taken in yet: take what has arrived since
        // the last look (a look walks only the messages that arrived since), and wait
        // for it if it is owed and still not here
        if take_arrived_batches(&tool) > 0 {
            continue;
        }
        if !(block && owed > 0) {
            break;
        }
        wait_for_batches(&tool);
    });
    for (posted, src, tag, note, at) in mismatches {
        errors::type_mismatch(&posted, src, tag, &note, at);
    }
    if found.is_empty() {
        return;
    }
    // past the most to print, a race is only counted
    let counted = with_notes(|r| {
        if r.printed >= r.max_reports {
            r.found += found.len() as u64;
            return true;
        }
        false
    });
    if counted != Some(false) {
        return;
    }
    // reporting moves no message: the checker can leave the tools meanwhile
    if let Some(Some(mut r)) = tools::with(|t| t.notes.take()) {
        for (w, m) in found {
            report(&mut r, &w, &m);
        }
        tools::with(|t| t.notes = Some(r));
    }
}

/// Waits until a batch of notes arrives on `tool`, from any rank, and takes every
/// batch that has into the inboxes ([`take_arrived_batches`]).
///
/// The batch owed is waited for by looking for any batch where the last look
/// stopped, between progresses: a blocking probe for it walked the whole unexpected
/// queue at each poll (at 17 ranks of the paper's Table 2, where the receiver waits
/// for notes once thousands of its receives are unchecked and thousands of messages
/// wait, ~240 instructions a message), and a probe for its one source, past 16
/// unexpected messages (`matching`'s `INDEX_AT`), builds the engine's index of them
/// by source, kept up at every arrival until the queue empties (~180 more).
fn wait_for_batches(tool: &SimpleCommunicator) {
    // (every turn without a batch is idle, whatever else progress moved: counted as
    // busy, a wait while the user's messages streamed in never gave its CPU away,
    // and on a machine with fewer CPUs than ranks kept the sender it waited for off
    // it: Table 2 at 3 ranks on 2 CPUs took 0.298 s instead of 0.274 s)
    let mut backoff = crate::progress::Backoff::new();
    loop {
        crate::progress::with(|s| s.progress());
        if take_arrived_batches(tool) > 0 {
            return;
        }
        backoff.idle();
    }
}

/// Takes every batch of notes that has arrived, from any rank, into the inboxes (the
/// oldest first, so that each sender's stay in order); how many. One look for any
/// source rather than one for each rank: a look for one source past a few dozen
/// unexpected messages builds the engine's index of them by source, which a queue of
/// wildcard receives' messages then keeps up at every arrival for nothing
/// (~20 instructions a message of the paper's Table 2). Each look starts where the
/// last one found nothing ([`Notes::looked`]): from the queue's front, a look walked
/// every user message waiting, again at each look (at 17 ranks of Table 2, where
/// thousands wait, ~100 instructions a message). Each batch is received into the
/// vector its sender's last batch was read from, as it was read from.
fn take_arrived_batches(tool: &SimpleCommunicator) -> usize {
    let Some((mut buf, mut looked)) =
        with_notes(|r| (r.batch_spare.take().unwrap_or_default(), r.looked))
    else {
        return 0;
    };
    let mut taken = 0;
    loop {
        match crate::point_to_point::arrived_into(tool, None, 0, buf, false, Some(&mut looked)) {
            Ok((b, src)) => {
                taken += 1;
                buf = with_notes(|r| {
                    r.take_batch(src as u32, b);
                    r.inbox[src as usize].spent.take()
                })
                .flatten()
                .unwrap_or_default();
            }
            Err(b) => {
                with_notes(|r| {
                    r.batch_spare = Some(b);
                    r.looked = looked;
                });
                return taken;
            }
        }
    }
}

/// A type mismatch found: the receive, the message's sender and tag, its note, and
/// where the signatures differ.
type Mismatch = (Posted, u32, i32, Note, (u64, u8, u8));

impl Notes {
    /// Checks the completed receives, in the order they matched, as far as their notes
    /// are here (counting `owed` down by one for each); the world rank whose note the
    /// next one waits for, if any.
    #[inline(never)]
    fn run_events(
        &mut self,
        found: &mut Vec<(Watched, Msg)>,
        mismatches: &mut Vec<Mismatch>,
        owed: &mut usize,
    ) -> Result<Option<u32>, Malformed> {
        let width = if self.races { self.clock.len() } else { 0 };
        let me = self.me as usize;
        let mut clock = std::mem::take(&mut self.scratch);
        // the events are read where they lie and let go together
        let mut events = std::mem::take(&mut self.events);
        let mut slab = std::mem::take(&mut self.slab);
        let mut done = events.done;
        let out = self.run_events_in(
            &events.list,
            &mut slab,
            &mut done,
            found,
            mismatches,
            width,
            me,
            &mut clock,
        );
        self.slab = slab;
        *owed = owed.saturating_sub(done - events.done);
        events.checked(done - events.done);
        debug_assert!(self.events.is_empty(), "no event is recorded meanwhile");
        self.events = events;
        self.scratch = clock;
        out
    }

    /// [`Notes::run_events`] on `events` from `done` on (counted up as they are
    /// checked), with the clock of the note being checked in `clock`.
    #[allow(clippy::too_many_arguments)]
    fn run_events_in(
        &mut self,
        events: &[Event],
        slab: &mut Slab,
        done: &mut usize,
        found: &mut Vec<(Watched, Msg)>,
        mismatches: &mut Vec<Mismatch>,
        width: usize,
        me: usize,
        clock: &mut Vec<u64>,
    ) -> Result<Option<u32>, Malformed> {
        loop {
            if self.races {
                self.run_common(events, done, found);
            }
            let Some(ev) = events.get(*done) else {
                break;
            };
            // (with the race check off, the common case here)
            if let Event::Done { rec, src, tag, seq } = ev {
                if !self.races
                    && self.inbox[*src as usize]
                        .take_next(rec.ctx, *tag, *seq)
                        .is_some()
                {
                    *done += 1;
                    continue;
                }
            }
            // (the receive's record apart from its type signature, so that the
            // common one, written in its event, is read in place)
            let (rec, at, src, tag, seq) = match *ev {
                Event::Recv { at, src, tag, seq } => {
                    (slab.get(at).brief(), Some(at), src, tag, seq)
                }
                Event::Done { rec, src, tag, seq } => (rec, None, src, tag, seq),
                Event::Probe { at, src, tag } => {
                    let m = Msg {
                        src,
                        tag,
                        file: NO_FILE,
                        line: 0,
                    };
                    self.clock[me] += 1;
                    self.watch(&slab.get(at).brief(), m);
                    slab.release(at);
                    *done += 1;
                    continue;
                }
            };
            let ctx = rec.ctx;
            let ib = &mut self.inbox[src as usize];
            // (what the sender knew of this rank's clock, for a note whose clock was
            // merged with an earlier message)
            let taken = match ib.take_next(ctx, tag, seq) {
                Some((file, line)) => Some((
                    Kept {
                        ctx,
                        tag,
                        seq,
                        count: 1,
                        file,
                        line,
                        op: None,
                        ty: None,
                    },
                    false,
                    ib.cur_known,
                )),
                None => {
                    let files = &mut self.files_got[src as usize];
                    let taken = ib.take(ctx, tag, seq, files, width, clock)?;
                    let known = ib.cur_clock.get(me).copied().unwrap_or(0);
                    ib.cur_known = known;
                    taken.map(|(k, fresh)| (k, fresh, known))
                }
            };
            let Some((kept, fresh, known_before)) = taken else {
                return Ok(Some(src));
            };
            *done += 1;
            // (its fields apart, so that they stay in registers)
            let Kept {
                file, line, op, ty, ..
            } = kept;
            if let (Some(sent), Some(at)) = (&ty, at) {
                if slab.get(at).ty.is_some() {
                    self.type_check(sent, slab.get(at), (file, line, op), src, tag, mismatches);
                }
            }
            if self.races {
                let m = Msg {
                    src,
                    tag,
                    file,
                    line,
                };
                if fresh {
                    let known = clock.get(me).copied().unwrap_or(0);
                    self.check(ctx, &m, known, Some(clock), found);
                } else {
                    // a note seen with an earlier message: its clock is merged already
                    self.check(ctx, &m, known_before, None, found);
                }
                self.watch(&rec, m);
            }
            if let Some(at) = at {
                slab.release(at);
            }
        }
        Ok(None)
    }

    /// The common case of [`Notes::run_events_in`] with the race check on, checked
    /// in a loop of its own from `done` on (counted up): receives recorded in their
    /// events ([`Event::Done`]) whose messages the notes being read cover, each
    /// note's clock merged with an earlier message already (in the paper's Table 2,
    /// every message but a note's first). This rank's own clock value stays in a
    /// register meanwhile, and the loop holds nothing else: with the general case
    /// in the same loop, its values went to the stack and back at every message.
    #[inline(always)]
    fn run_common(&mut self, events: &[Event], done: &mut usize, found: &mut Vec<(Watched, Msg)>) {
        let me = self.me as usize;
        let mut own = self.clock[me];
        let mut i = *done;
        while let Some(Event::Done { rec, src, tag, seq }) = events.get(i) {
            let Some(ib) = self.inbox.get_mut(*src as usize) else {
                break;
            };
            let Some((file, line)) = ib.take_next(rec.ctx, *tag, *seq) else {
                break;
            };
            let known = ib.cur_known;
            let m = Msg {
                src: *src,
                tag: *tag,
                file,
                line,
            };
            self.check_unknown(rec.ctx, &m, known, found);
            own += 1;
            self.watch_at(rec, m, own);
            i += 1;
        }
        self.clock[me] = own;
        *done = i;
    }

    /// The type check of a message whose note gave its type signature `sent` (and
    /// the send's file number, line and operation), taken by `posted` (which expected
    /// its own type signature, if it has one): a mismatch joins `mismatches`.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    fn type_check(
        &self,
        sent: &TypeSig,
        posted: &Posted,
        (file, line, op): (u32, u32, Option<Op>),
        src: u32,
        tag: i32,
        mismatches: &mut Vec<Mismatch>,
    ) {
        let Some(recv) = &posted.ty else {
            return;
        };
        if let Some(differ) = types::mismatch(sent, recv) {
            let note = Note {
                file: self.file_name(src, file),
                line,
                op,
                ty: Some(sent.clone()),
            };
            mismatches.push((posted.clone(), src, tag, note, differ));
        }
    }

    /// The name of the source file world rank `src` numbers `id`.
    fn file_name(&self, src: u32, id: u32) -> Option<Arc<str>> {
        self.files_got[src as usize].get(id as usize).cloned()
    }

    /// Keeps a batch of notes from world rank `src`.
    fn take_batch(&mut self, src: u32, b: Vec<u8>) {
        self.inbox[src as usize].push(b);
    }
}

pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn report(r: &mut Notes, w: &Watched, m: &Msg) {
    r.found += 1;
    if r.printed >= r.max_reports {
        return;
    }
    r.printed += 1;
    let ctx = w.ctx;
    let rank_in = |world: u32| crate::progress::with(|s| s.comm_rank(ctx, world));
    let call = w.call.op.map_or("receive", Op::name);
    let (file, line) = w.call.site.map_or(("?", 0), |l| (l.file(), l.line()));
    let tag = match w.tag {
        TagSel::Any => "any".to_string(),
        TagSel::Tag(t) => t.to_string(),
    };
    let file_of = |x: &Msg| r.file_name(x.src, x.file);
    let (took_file, m_file) = (file_of(&w.took), file_of(m));
    let at = |f: &Option<Arc<str>>, x: &Msg| match f {
        Some(f) => format!("{f}:{}", x.line),
        None => "?".into(),
    };
    eprintln!(
        "rsmpi: message race at rank {me}: {call} (source any, tag {tag}) at {file}:{line} \
         took the message from rank {} (tag {}, sent at {}), but the message from rank {} \
         (tag {}, sent at {}) was sent concurrently and could have been taken instead",
        rank_in(w.took.src),
        w.took.tag,
        at(&took_file, &w.took),
        rank_in(m.src),
        m.tag,
        at(&m_file, m),
        me = rank_in(r.me),
    );
    let msg_json = |f: &Option<Arc<str>>, x: &Msg| {
        format!(
            "{{\"source\":{},\"tag\":{},\"file\":{},\"line\":{}}}",
            rank_in(x.src),
            x.tag,
            f.as_deref().map_or("null".into(), json_str),
            x.line
        )
    };
    let tag_json = match w.tag {
        TagSel::Any => "\"any\"".to_string(),
        TagSel::Tag(t) => t.to_string(),
    };
    let line_json = format!(
        "{{\"check\":\"race\",\"rank\":{},\"receive\":{{\"call\":{},\"file\":{},\"line\":{line},\"source\":\"any\",\"tag\":{tag_json},\"context\":{ctx}}},\"messages\":[{},{}]}}",
        rank_in(r.me),
        json_str(call),
        json_str(file),
        msg_json(&took_file, &w.took),
        msg_json(&m_file, m),
    );
    log_line(&line_json);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Watching`] against a model that looks at every rank's group, over a random
    /// run of receives watched, messages checked (taking all, some or none of the
    /// racing receives out of each group visited) and receives forgotten: the same
    /// groups visited, from the same receive, the same receives kept, and `live`
    /// naming each group that holds receives, once, and no other.
    #[test]
    fn watching_visits_the_groups_a_look_at_every_rank_would() {
        const RANKS: usize = 7;
        let mut w = Watching::new(RANKS);
        let mut model: Vec<Vec<u64>> = vec![Vec::new(); RANKS];
        let mut clock = 0u64;
        // (a linear congruential generator, Knuth's MMIX constants)
        let mut x = 1_u64;
        let mut rnd = move |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        // what a check takes out of a group from `from` on: all, the even clocks, none
        let take = |group: &mut Vec<u64>, from: usize, how: u64| match how {
            0 => group.truncate(from),
            1 => {
                let kept: Vec<u64> = group[from..]
                    .iter()
                    .copied()
                    .filter(|c| c % 2 == 1)
                    .collect();
                group.truncate(from);
                group.extend(kept);
            }
            _ => {}
        };
        let (mut visits, mut emptied) = (0, 0);
        for _ in 0..20_000 {
            match rnd(5) {
                0..=2 => {
                    clock += 1;
                    let g = rnd(RANKS as u64) as usize;
                    let took = Msg {
                        src: g as u32,
                        tag: 0,
                        file: NO_FILE,
                        line: 0,
                    };
                    let r = Watched {
                        ctx: 0,
                        tag: TagSel::Any,
                        call: Call::default(),
                        clock,
                        took,
                    };
                    w.push(g, r);
                    model[g].push(clock);
                }
                3 => {
                    let src = rnd(RANKS as u64) as usize;
                    let known = clock.saturating_sub(rnd(12));
                    let how = rnd(3);
                    let mut seen = Vec::new();
                    w.unknown_to(src, known, |group, from| {
                        seen.push((group[0].took.src as usize, from));
                        let mut clocks: Vec<u64> = group.iter().map(|r| r.clock).collect();
                        take(&mut clocks, from, how);
                        group.retain(|r| clocks.contains(&r.clock));
                    });
                    let mut want = Vec::new();
                    for (g, group) in model.iter_mut().enumerate() {
                        if g == src || group.last().is_none_or(|c| *c <= known) {
                            continue;
                        }
                        let from = group.partition_point(|c| *c <= known);
                        want.push((g, from));
                        take(group, from, how);
                        emptied += usize::from(group.is_empty());
                    }
                    seen.sort();
                    assert_eq!(seen, want, "groups visited, from src {src} known {known}");
                    visits += want.len();
                }
                _ => {
                    let floors: Vec<u64> =
                        (0..RANKS).map(|_| clock.saturating_sub(rnd(20))).collect();
                    w.forget(|g| floors[g]);
                    for (g, group) in model.iter_mut().enumerate() {
                        group.retain(|c| *c > floors[g]);
                    }
                }
            }
            for (g, group) in model.iter().enumerate() {
                let got: Vec<u64> = w.groups[g].iter().map(|r| r.clock).collect();
                assert_eq!(&got, group, "group {g}");
            }
            let mut live: Vec<usize> = w.live.iter().map(|g| *g as usize).collect();
            live.sort();
            let want: Vec<usize> = (0..RANKS).filter(|g| !model[*g].is_empty()).collect();
            assert_eq!(live, want, "live groups");
        }
        // (the run exercised what it checks)
        assert!(
            visits > 1_000 && emptied > 100,
            "{visits} visits, {emptied} emptied"
        );
    }

    /// A batch of notes (tag, number, clock) on context 0, each with its number as its
    /// line and no source file.
    fn batch(notes: &[(i32, u64, [u64; 2])]) -> Vec<u8> {
        let mut b = Vec::new();
        for &(tag, seq, c) in notes {
            let head = NoteHead {
                ctx: 0,
                tag,
                seq,
                line: seq as u32,
                op: None,
                file: NO_FILE,
            };
            put_note(&mut b, &head, None, None, &c);
        }
        b
    }

    type Taken = Result<Option<Kept>, Malformed>;

    fn take(ib: &mut Inbox, tag: i32, seq: u64, clock: &mut Vec<u64>) -> Taken {
        let t = ib.take(0, tag, seq, &mut Vec::new(), 2, clock);
        t.map(|k| k.map(|k| k.0))
    }

    /// Counts one more message in the note starting at `at` (as `add_note` does).
    fn extend(b: &mut [u8], at: usize) {
        let c = &mut b[at + COUNT_AT..at + COUNT_AT + 4];
        let n = u32::from_le_bytes((&*c).try_into().unwrap()) + 1;
        c.copy_from_slice(&n.to_le_bytes());
    }

    /// The notes of world rank `me` of `size`, with the race check alone on.
    fn races_only(me: u32, size: u32) -> Notes {
        let tool = SimpleCommunicator {
            ctx: 2,
            rank: me as i32,
            size: size as i32,
        };
        let set = Settings {
            races: true,
            deadlock: false,
            errors: false,
        };
        Notes::new(me, size as usize, tool, set)
    }

    /// A sender's run of messages with the same clock, call and channel is one
    /// note, counted in its bytes and on its channel when another channel's message
    /// or the batch's departure closes it; the next message on the channel starts a
    /// note of its own with the next number.
    #[test]
    fn a_run_of_sends_is_one_note_counted_when_closed() {
        let mut n = races_only(0, 2);
        let call = Call {
            op: Some(Op::Send),
            site: Some(Location::caller()),
        };
        let runs: [(i32, u64); 4] = [(1, 3), (2, 2), (1, 2), (2, 1)];
        // (the receiver's file names: a file is named once)
        let mut files = Vec::new();
        let mut read = |n: &mut Notes| {
            n.close_open(1);
            let mut ib = Inbox::default();
            ib.push(n.pending[1].take_bytes(&mut Vec::new()));
            let mut notes = Vec::new();
            while let Some(k) = ib.next(&mut files, 2, &mut Vec::new()).unwrap() {
                notes.push((k.tag, k.seq, k.count));
            }
            notes
        };
        for &(tag, k) in &runs[..3] {
            for _ in 0..k {
                n.add_note(0, 1, tag, call, None);
            }
        }
        assert_eq!(read(&mut n), [(1, 0, 3), (2, 0, 2), (1, 3, 2)]);
        // a batch sent in the middle of a run: the run goes on in a note of its own
        n.add_note(0, 1, 1, call, None);
        for _ in 0..runs[3].1 {
            n.add_note(0, 1, 2, call, None);
        }
        assert_eq!(read(&mut n), [(1, 5, 1), (2, 2, 1)]);
        assert_eq!(n.sent.count((1, 0, 1)), 6);
        assert_eq!(n.sent.count((1, 0, 2)), 3);
        // a clock that ticked (a receive in between) starts a new note
        n.add_note(0, 1, 1, call, None);
        n.clock[0] += 1;
        n.add_note(0, 1, 1, call, None);
        n.add_note(0, 1, 1, call, None);
        assert_eq!(read(&mut n), [(1, 6, 1), (1, 7, 2)]);
    }

    /// Wildcard receives checked in the common case (a note's later messages, read
    /// in place, [`Notes::run_common`]) are watched and checked as a note's first:
    /// rank 0 takes rank 1's three messages (one note), rank 2's two (one note),
    /// and rank 1's fourth; neither sender heard from rank 0, so each message from
    /// one races with every receive before it that took the other's.
    #[test]
    fn receives_of_a_notes_later_messages_are_watched_and_checked() {
        let call = |op| Call {
            op: Some(op),
            site: Some(Location::caller()),
        };
        let batch_of = |me: u32, tag: i32, k: usize| {
            let mut s = races_only(me, 3);
            for _ in 0..k {
                s.add_note(0, 0, tag, call(Op::Send), None);
            }
            s.close_open(0);
            s.pending[0].take_bytes(&mut Vec::new())
        };
        for (source, want) in [(Src::Any, 5), (Src::Rank(1), 0)] {
            let mut r = races_only(0, 3);
            r.take_batch(1, batch_of(1, 5, 4));
            r.take_batch(2, batch_of(2, 6, 2));
            for from in [1, 1, 1, 2, 2, 1] {
                let tag = if from == 1 { 5 } else { 6 };
                let outcome = RecvOutcome::Received {
                    source: from,
                    tag,
                    len: 0,
                    truncated_from: None,
                };
                r.posted_done(0, source, TagSel::Any, call(Op::Recv), &outcome);
            }
            let (mut found, mut mismatches, mut owed) = (Vec::new(), Vec::new(), 0);
            assert_eq!(
                r.run_events(&mut found, &mut mismatches, &mut owed)
                    .unwrap(),
                None
            );
            assert_eq!(r.clock[0], 6, "each receive ticks the clock once");
            // (the sender of the message each receive took, its clock; the racing
            // message's sender)
            let got: Vec<(u32, u64, u32)> = found
                .iter()
                .map(|(w, m)| (w.took.src, w.clock, m.src))
                .collect();
            let all = [(1, 1, 2), (1, 2, 2), (1, 3, 2), (2, 4, 1), (2, 5, 1)];
            assert_eq!(got, all[..want], "{source:?}");
        }
    }

    /// A group's racing receives are taken out in one pass: reported while there
    /// is room, counted after, and every other receive kept in its order.
    #[test]
    fn a_groups_racing_receives_leave_it_in_one_pass() {
        let msg = |tag| Msg {
            src: 1,
            tag,
            file: NO_FILE,
            line: 0,
        };
        let n = 1000u64;
        // tags 7 and 8 by turns, clocks 1..=n
        let mut group: Vec<Watched> = (1..=n)
            .map(|c| Watched {
                ctx: 0,
                tag: TagSel::Tag(if c % 2 == 1 { 7 } else { 8 }),
                call: Call::default(),
                clock: c,
                took: msg(7),
            })
            .collect();
        let (mut report, mut found) = (Vec::new(), 0);
        // from the fourth on, a message with tag 7; room for 3 reports
        report_group(&mut group, 3, 0, &msg(7), &mut report, 10, 13, &mut found);
        let reported: Vec<u64> = report.iter().map(|(w, _)| w.clock).collect();
        assert_eq!(reported, [5, 7, 9]);
        assert_eq!(found, n / 2 - 2 - 3);
        let kept: Vec<u64> = group.iter().map(|w| w.clock).collect();
        let want: Vec<u64> = [1, 2, 3].into_iter().chain((4..=n).step_by(2)).collect();
        assert_eq!(kept, want);
    }

    /// Receives wait for their notes up to two batches from every other rank,
    /// within bounds.
    #[test]
    fn receives_wait_for_two_batches_from_every_sender() {
        assert_eq!(defer_limit(1), DEFER_MIN);
        assert_eq!(defer_limit(3), DEFER_MIN);
        assert_eq!(defer_limit(17), 16 * 2 * BATCH as usize);
        assert_eq!(defer_limit(65), 64 * 2 * BATCH as usize);
        assert_eq!(defer_limit(1 << 20), DEFER_MAX);
    }

    #[test]
    fn a_note_covers_the_messages_it_counts() {
        // tag 1's messages 0-2 under one note, then tag 2's 0-1, then tag 1's 3
        let mut b = batch(&[(1, 0, [5, 6])]);
        extend(&mut b, 0);
        extend(&mut b, 0);
        let at = b.len();
        b.extend(batch(&[(2, 0, [7, 8])]));
        extend(&mut b, at);
        b.extend(batch(&[(1, 3, [9, 10])]));
        let mut ib = Inbox::default();
        ib.push(b);
        let mut clock = Vec::new();
        let get = |ib: &mut Inbox, tag, seq, clock: &mut Vec<u64>| {
            let t = ib.take(0, tag, seq, &mut Vec::new(), 2, clock).unwrap();
            t.map(|(k, fresh)| (k.seq, k.line, fresh))
        };
        // in order: each message of the run, numbered as the message, with the run's
        // line; its clock with the first, and then left to the caller (merged)
        assert_eq!(get(&mut ib, 1, 0, &mut clock), Some((0, 0, true)));
        assert_eq!(clock, [5, 6]);
        clock = vec![0, 0];
        // the next: the common case, or through `take`, alike
        assert!(ib.take_next(0, 2, 1).is_none());
        let (_, line) = ib.take_next(0, 1, 1).unwrap();
        assert_eq!(line, 0);
        assert_eq!(get(&mut ib, 1, 2, &mut clock), Some((2, 0, false)));
        assert_eq!(clock, [0, 0]);
        assert_eq!(ib.cur_clock, [5, 6]);
        assert!(ib.take_next(0, 1, 3).is_none());
        // tag 1's next message passes over tag 2's run, which waits whole
        assert_eq!(get(&mut ib, 1, 3, &mut clock), Some((3, 3, true)));
        assert_eq!(clock, [9, 10]);
        assert_eq!(ib.passed.len(), 1);
        // a run passed over gives its clock with each message
        for seq in 0..2 {
            clock = vec![0, 0];
            assert_eq!(get(&mut ib, 2, seq, &mut clock), Some((seq, 0, true)));
            assert_eq!(clock, [7, 8]);
        }
        assert!(ib.is_empty());
        // a message past the run's end is not under it
        let mut b = batch(&[(1, 0, [1, 1])]);
        extend(&mut b, 0);
        let mut ib = Inbox::default();
        ib.push(b);
        assert!(take(&mut ib, 1, 2, &mut clock).unwrap().is_none());
        // a note counting no message is malformed
        let mut b = batch(&[(1, 0, [1, 1])]);
        b[COUNT_AT..COUNT_AT + 4].copy_from_slice(&0u32.to_le_bytes());
        let mut ib = Inbox::default();
        ib.push(b);
        assert!(take(&mut ib, 1, 0, &mut clock).is_err());
    }

    #[test]
    fn inbox_pairs_notes_in_order_and_out_of_order() {
        let mut ib = Inbox::default();
        let mut clock = Vec::new();
        // a note not here yet: nothing
        assert!(take(&mut ib, 1, 0, &mut clock).unwrap().is_none());
        ib.push(batch(&[
            (1, 0, [10, 11]),
            (2, 0, [20, 21]),
            (1, 1, [30, 31]),
        ]));
        // in order: the front, with its own clock
        let k = take(&mut ib, 1, 0, &mut clock).unwrap().unwrap();
        assert_eq!(k.line, 0);
        assert_eq!(clock, [10, 11]);
        // out of order: tag 1's second message taken before tag 2's first
        let k = take(&mut ib, 1, 1, &mut clock).unwrap().unwrap();
        assert_eq!((k.tag, k.seq), (1, 1));
        assert_eq!(clock, [30, 31]);
        assert_eq!(ib.passed.len(), 1);
        // the batch was read to its end and let go
        assert!(ib.batches.is_empty());
        // the note passed over is still there, with its clock
        let k = take(&mut ib, 2, 0, &mut clock).unwrap().unwrap();
        assert_eq!((k.tag, k.seq), (2, 0));
        assert_eq!(clock, [20, 21]);
        assert!(ib.is_empty());
        // a missing note passes over only the notes sent before it, across batches
        ib.push(batch(&[(3, 0, [40, 41])]));
        ib.push(batch(&[(3, 1, [42, 43])]));
        assert!(take(&mut ib, 1, 2, &mut clock).unwrap().is_none());
        assert_eq!(ib.passed.len(), 2);
        assert_eq!(take(&mut ib, 3, 1, &mut clock).unwrap().unwrap().seq, 1);
        assert_eq!(clock, [42, 43]);
        assert_eq!(take(&mut ib, 3, 0, &mut clock).unwrap().unwrap().seq, 0);
        assert_eq!(clock, [40, 41]);
        // and the one that was missing comes later
        ib.push(batch(&[(1, 2, [50, 51])]));
        assert_eq!(take(&mut ib, 1, 2, &mut clock).unwrap().unwrap().seq, 2);
        assert_eq!(clock, [50, 51]);
        assert!(ib.is_empty());
    }

    #[test]
    fn inbox_keeps_only_unread_batches_in_a_steady_stream() {
        let mut ib = Inbox::default();
        let mut clock = Vec::new();
        ib.push(batch(&[(1, 0, [0, 0])]));
        for seq in 1..100_000u64 {
            // one note always waits: the queue never empties
            ib.push(batch(&[(1, seq, [seq, seq + 1])]));
            let k = take(&mut ib, 1, seq - 1, &mut clock).unwrap().unwrap();
            assert_eq!(k.seq, seq - 1);
            assert_eq!(clock, [seq - 1, if seq == 1 { 0 } else { seq }]);
            assert_eq!(ib.batches.len(), 1);
        }
    }

    #[test]
    fn a_batch_read_to_its_end_is_kept_for_the_next() {
        let mut ib = Inbox::default();
        let mut clock = Vec::new();
        ib.push(batch(&[(1, 0, [3, 4]), (1, 1, [5, 6])]));
        take(&mut ib, 1, 0, &mut clock).unwrap().unwrap();
        assert!(ib.spent.is_none(), "a batch still being read is not spent");
        take(&mut ib, 1, 1, &mut clock).unwrap().unwrap();
        let spent = ib.spent.take().expect("the batch read to its end");
        assert!(spent.capacity() > 0);
        // a batch too large to keep is let go
        let mut big = batch(&[(1, 2, [7, 8])]);
        big.reserve(SPENT_BYTES);
        ib.push(big);
        take(&mut ib, 1, 2, &mut clock).unwrap().unwrap();
        assert!(ib.spent.is_none());
    }

    #[test]
    fn held_notes_leave_in_their_vector_and_the_next_start_in_a_spare() {
        let mut spare = vec![Vec::with_capacity(100)];
        let mut h = Held {
            bytes: batch(&[(1, 0, [1, 2])]),
            count: 3,
            open: None,
        };
        let sent = h.take_bytes(&mut spare);
        assert_eq!(sent, batch(&[(1, 0, [1, 2])]));
        assert_eq!((h.count, h.bytes.len(), h.bytes.capacity()), (0, 0, 100));
        assert!(h.open.is_none() && spare.is_empty());
        // with no spare left, a new vector
        let mut h2 = Held {
            bytes: sent,
            count: 1,
            open: None,
        };
        assert!(!h2.take_bytes(&mut spare).is_empty());
        assert_eq!(h2.bytes.capacity(), 0);
    }

    #[test]
    fn notes_name_their_files_once_and_malformed_ones_are_refused() {
        let mut ib = Inbox::default();
        let (mut files, mut clock) = (Vec::new(), Vec::new());
        let head = |seq: u64, file: u32| NoteHead {
            ctx: 5,
            tag: 9,
            seq,
            line: 40 + seq as u32,
            op: None,
            file,
        };
        let mut b = Vec::new();
        put_note(&mut b, &head(0, 0), Some("src/a.rs"), None, &[1]);
        put_note(&mut b, &head(1, 0), None, None, &[2]);
        ib.push(b);
        for seq in 0..2 {
            let k = ib
                .take(5, 9, seq, &mut files, 1, &mut clock)
                .unwrap()
                .unwrap()
                .0;
            assert_eq!((k.file, k.line), (0, 40 + seq as u32));
            assert_eq!(clock, [seq + 1]);
        }
        assert_eq!(files.len(), 1);
        assert_eq!(&*files[0], "src/a.rs");
        // a file numbered before it was named
        let mut b = Vec::new();
        put_note(&mut b, &head(2, 3), None, None, &[3]);
        ib.push(b);
        assert!(ib.take(5, 9, 2, &mut files, 1, &mut clock).is_err());
        // a clock of the wrong width
        let mut ib = Inbox::default();
        let mut b = Vec::new();
        put_note(&mut b, &head(3, NO_FILE), None, None, &[1, 2]);
        ib.push(b);
        assert!(ib.take(5, 9, 3, &mut files, 1, &mut clock).is_err());
        // a batch cut short
        let mut ib = Inbox::default();
        let mut b = Vec::new();
        put_note(&mut b, &head(4, NO_FILE), None, None, &[1]);
        b.pop();
        ib.push(b);
        assert!(ib.take(5, 9, 4, &mut files, 1, &mut clock).is_err());
    }
}

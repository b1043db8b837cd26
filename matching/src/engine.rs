//! The engine: one rank's whole protocol state, driven by API calls and incoming
//! control messages, answering with [`Output`]s for the driver to carry out.

use crate::advertised::{Adv, AdvTable, Crossing};
use crate::map::{Counts, HMap, OneMap, Window};
use crate::queues::{CopyEarly, Posted, Spares, UData, UEntry, Unexpected};
use crate::types::*;
use crate::wire::{self, Body, Ctrl, Frame, Header, SendFlags};
use std::collections::VecDeque;
use std::ops::Range;

/// Something the driver must do. Drain them with [`Engine::poll_output`] after every
/// call, and carry them out in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Send control message `header` to `to`, followed by the first `len` bytes of
    /// send `payload`'s buffer if there is one (an eager send).
    Transmit {
        to: Rank,
        header: Header,
        payload: Option<(SendId, u64)>,
    },
    /// Post a one-sided write of the first `len` bytes of `send`'s buffer into `dst`
    /// at `to`, then call [`Engine::put_done`] once the write has completed locally
    /// (the send buffer may be reused); the write may complete long after this output,
    /// and `send` completes (`SendDone`, or `BufferFree` for a buffered send) only at
    /// `put_done`. The `Written` notice follows as a later `Transmit` without waiting
    /// for the write to complete, so the write must be visible at `to` before that
    /// notice is delivered (the transport's ordering rule: a write posted before a
    /// control message on the same connection lands before the message is delivered).
    Put {
        to: Rank,
        send: SendId,
        dst: RemoteBuf,
        len: u64,
    },
    /// Read `len` bytes of `src` at `from` (one-sided) into `into`, then call
    /// [`Engine::get_done`].
    Get {
        xfer: XferId,
        from: Rank,
        src: RemoteBuf,
        len: u64,
        into: GetInto,
    },
    /// Copy `data` (already cut to the receive's capacity) into `recv`'s buffer, then
    /// hand `data` back with [`Engine::recycle`] (or drop it).
    CopyIn { recv: RecvId, data: Vec<u8> },
    /// A receive completed (after its data was delivered by earlier outputs, or by
    /// the [`Deliver`] that [`Engine::handle`] returned without its completion).
    RecvDone { recv: RecvId, outcome: RecvOutcome },
    /// A send completed.
    SendDone { send: SendId, outcome: SendOutcome },
    /// A buffered send finished internally: its copy of the data may be freed.
    BufferFree { send: SendId },
    /// Receive `recv` matched the message `source` sent with `tag`, and its data comes
    /// later (a read, or a staging read still under way): its `RecvDone` follows. Only
    /// with [`Engine::report_matches`] on, for tools that number the messages of each
    /// channel in the order MPI matches them (a receive that completes at its match
    /// needs no such output: its completion comes in order). A driver may ignore it.
    Matched {
        recv: RecvId,
        source: Rank,
        tag: Tag,
    },
    /// The message `source` sent on (`ctx`, `tag`) was withdrawn from the unexpected
    /// queue by its sender's cancel (rule 11): no receive will match it. `ahead`
    /// earlier messages of that channel were still unmatched (in the unexpected
    /// queue): it is the `ahead`-th message of the channel after those already
    /// matched, not counting others withdrawn. Only with [`Engine::report_matches`]
    /// on; a driver may ignore it.
    Withdrawn {
        source: Rank,
        ctx: Ctx,
        tag: Tag,
        ahead: u64,
    },
}

/// Where a one-sided read goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GetInto {
    /// The buffer of this receive, from offset 0.
    Recv(RecvId),
    /// A staging buffer the driver allocates and hands back to `get_done`.
    Staging,
}

/// The part of an incoming control message the driver must copy into a receive
/// buffer before it releases the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deliver {
    pub recv: RecvId,
    /// Byte range of the incoming message (already cut to the receive's capacity).
    pub range: Range<usize>,
    /// The receive's completion, handed back with its payload: when `Some`, the
    /// receive is complete once the driver has copied `range`, and no
    /// [`Output::RecvDone`] follows for it. The engine hands it back only when no
    /// output was queued before it, so the driver sees completions in the order the
    /// queue would have given them; otherwise it is `None` and the `RecvDone` comes
    /// through the queue.
    pub done: Option<RecvOutcome>,
}

/// A receive posted by [`Engine::post_recv_early`].
#[derive(Debug, PartialEq, Eq)]
pub enum Posting {
    /// Posted; its completion comes through the outputs.
    Queued(RecvId),
    /// It took a message that had arrived before it with its payload, and is
    /// complete.
    Early(Early),
}

/// A receive that took, as it was posted, a message already here with its payload
/// ([`Posting::Early`]): the driver copies `data` (already cut to the receive's
/// capacity) into the receive's buffer, and may then hand `data` back with
/// [`Engine::recycle`]. No output follows for the receive.
#[derive(Debug, PartialEq, Eq)]
pub struct Early {
    pub recv: RecvId,
    pub data: Vec<u8>,
    pub outcome: RecvOutcome,
}

/// A receive to post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvSpec {
    pub source: Source,
    pub tag: TagSel,
    pub ctx: Ctx,
    /// Capacity of the receive buffer in bytes.
    pub capacity: u64,
    /// The buffer exposed for direct writes, or `None` when it is not contiguous (the
    /// receive is then matched at the receiver and the driver unpacks).
    pub buf: Option<RemoteBuf>,
}

/// A send to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendSpec {
    pub dest: Rank,
    pub tag: Tag,
    pub ctx: Ctx,
    pub len: u64,
    pub mode: SendMode,
    /// The (contiguous) send buffer, exposed for the receiver's one-sided read.
    pub buf: RemoteBuf,
    /// The transport's advice that a message this large is cheaper read once by its
    /// receiver than carried eagerly: a standard send above
    /// [`Config::lone_read_above`] with this set is read at once by its receiver (a
    /// get-now request) when it is lone (nothing else of this rank's in flight to
    /// `dest`; docs/protocol.md rule 18), and one above
    /// [`Config::stream_read_above`] when it is not (a stream's, rule 20). The driver
    /// asks the transport the question [`Engine::lone_now`] or
    /// [`Engine::stream_now`] says the send will be judged by.
    pub read_advised: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RStage {
    /// In the posted queue; `adv` = (peer, k) once advertised.
    Posted { adv: Option<u64>, cancelling: bool },
    /// Matched; the payload is being read (rendezvous) or staged. The receive's
    /// outcome waits with the read ([`StageOwner::Recv`]).
    Fetching,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct RecvState {
    source: Source,
    tag: TagSel,
    ctx: Ctx,
    cap: u64,
    /// Not advertised when posted (ANY_SOURCE, not contiguous, receiver-only matching,
    /// or paused): holds later receives of its context back from advertising.
    blocker: bool,
    stage: RStage,
}

/// What matching an incoming send needs of the receive it takes, read in place: on
/// the per-message path the whole [`RecvState`] (over 100 bytes) was copied out of its
/// slot and moved again.
#[derive(Clone, Copy)]
struct Taken {
    source: Source,
    ctx: Ctx,
    cap: u64,
    blocker: bool,
    /// The advertisement (`k`) of a receive still posted, if it was advertised.
    adv: Option<u64>,
}

impl RecvState {
    /// The state of a receive posted as `spec`.
    #[inline(always)]
    fn posted(spec: &RecvSpec, blocker: bool) -> RecvState {
        RecvState {
            source: spec.source,
            tag: spec.tag,
            ctx: spec.ctx,
            cap: spec.capacity,
            blocker,
            stage: RStage::Posted {
                adv: None,
                cancelling: false,
            },
        }
    }

    #[inline(always)]
    fn taken(&self) -> Taken {
        Taken {
            source: self.source,
            ctx: self.ctx,
            cap: self.cap,
            blocker: self.blocker,
            adv: match self.stage {
                RStage::Posted { adv, .. } => adv,
                RStage::Fetching => None,
            },
        }
    }
}

/// How a send's message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Path {
    /// Written into an advertised receive, the payload inline in the notice: completes
    /// when the notice leaves.
    Inline,
    /// Written into an advertised receive by a one-sided write (`Output::Put`) that
    /// has not completed yet: completes at [`Engine::put_done`].
    Put,
    /// Went as the send request with this number.
    Req(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SendState {
    dest: Rank,
    len: u64,
    path: Path,
    /// Completes on Ack / Nack / Fin rather than when it leaves the outbox.
    needs_reply: bool,
    /// Left the outbox.
    emitted: bool,
    /// A `CancelSend` is on its way.
    cancelling: bool,
    /// Completion owed to the user (false for buffered sends, completed at start).
    user: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Queued {
    Ctrl {
        msg: Ctrl,
        payload: Option<(SendId, u64)>,
        done: Option<SendId>,
    },
}

/// The advertisements to one peer since a pause was ended by a receive posted ahead
/// ([`Engine::resume`]) or ran out, and how many of them were written into and
/// wasted so far (rule 15). A resume bets that the advertisements will arrive before
/// the peer sends; its phase settles the bet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Phase {
    /// The number (`k`) of the phase's first advertisement.
    from: u64,
    resumed: bool,
    written: u32,
    wasted: u32,
}

impl Phase {
    /// A phase that wasted more than this many advertisements per direct write lost
    /// its bet: in a message-rate window the receiver posts ahead of the sends, but
    /// the sender has sent them before the advertisements arrive, so only the first
    /// few of a window are written into (`docs/performance.md`, "Windows that post
    /// ahead of their sends").
    const WASTED_PER_WRITE: u32 = 2;

    /// Whether the phase shows that advertising pays (`Some(true)`), that it does not
    /// (`Some(false)`), or nothing yet (`None`).
    fn verdict(&self) -> Option<bool> {
        (self.written > 0 || self.wasted > 0)
            .then(|| self.wasted <= Self::WASTED_PER_WRITE.saturating_mul(self.written))
    }
}

/// State shared with one peer (both directions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Peer {
    // as receiver of this peer's messages
    recvreq_sent: u64,
    sendreq_seen: u64,
    /// `sendreq_seen` when this rank last sent the peer an `m` (in a `Credit` or a
    /// receive request): the peer keeps the send requests after it for crossing
    /// replays until it hears a higher one.
    told: u64,
    adv_recv: Window<u64, RecvId>,
    // as sender to this peer
    sendreq_sent: u64,
    recvreq_seen: u64,
    adv: AdvTable,
    crossing: Crossing,
    waiting: Window<u64, SendId>,
    // adaptive advertising (as receiver of this peer's messages)
    /// Advertised receives matched by send requests in a row.
    wasted_run: u32,
    /// Receives still to leave unadvertised, and the length of the current pause.
    pause_left: u32,
    pause_len: u32,
    /// The last receive left unadvertised by a pause (it may have completed since).
    paused_recv: Option<(RecvId, RemoteBuf)>,
    /// The current advertising phase ([`Phase`]), begun by a resume or by the end of
    /// a pause.
    phase: Phase,
    /// A phase begun by a resume wasted more than [`Phase::WASTED_PER_WRITE`]
    /// advertisements per direct write: posting ahead ends no pause until a phase
    /// shows advertisements written into again.
    distrust: bool,
    // flow control
    credits: u32,
    owed: u32,
    outbox: VecDeque<Queued>,
    /// Sends to this peer still to be read because traffic crossed
    /// ([`Config::cross_read_above`]): set to [`CROSS_HOLD`] by each crossing arrival,
    /// one less for each send it makes read.
    cross_left: u32,
}

/// Credits a peer may have missing with nothing of this rank's in flight: control
/// messages it has not answered yet (each costs one: a ping-pong's reply, a
/// rendezvous' done).
const SLACK: u32 = 4;

/// Sends to a peer that one crossing arrival from it lets be read
/// ([`Config::cross_read_above`]): enough for two windows of a bandwidth benchmark's
/// sends made before the arrivals behind them are handled, few enough that a stream
/// that has turned one-way soon goes eager again.
pub const CROSS_HOLD: u32 = 128;

/// The [`Config::tell_after`] rsmpi uses: a receiver whose credits ride back on its
/// replies tells its sender how far it has read after 256 send requests (or every
/// `low_water`, if more), one explicit message per 256 rather than per `low_water`
/// (5 on the verbs transport's 64 KiB rings, where each is a work request and a
/// doorbell). The sender's list of send requests kept for crossing replays is in runs
/// of one context and tag, so it holds at most this many runs past the last `m` told.
pub const TELL_AFTER: u32 = 256;

impl Peer {
    /// Whether a stream of this rank's is in flight to the peer: two sends or more
    /// not finished (waiting for a reply, queued, or not yet sent), or more credits
    /// missing than one message the eager limit carries costs and a few control
    /// messages. One message each way, as an exchange (`sendrecv`) makes, is not a
    /// stream: there a read's extra crossings cost more than the copies it saves.
    #[inline(always)]
    fn streaming(&self, cfg: &Config) -> bool {
        self.waiting.len() >= 2
            || cfg.credits.saturating_sub(self.credits)
                > cfg.credit_cost(cfg.eager_limit).saturating_add(SLACK)
    }

    /// Whether every credit towards the peer is back but a few: control messages it
    /// has not answered yet (each costs one).
    #[inline(always)]
    fn credits_back(&self, cfg: &Config) -> bool {
        self.credits.saturating_add(SLACK) >= cfg.credits
    }

    /// Settles the current phase as far as its outcomes tell: a resume's phase that
    /// lost its bet distrusts posting ahead; any phase that shows advertising paying
    /// trusts it again.
    fn judge(&mut self) {
        match self.phase.verdict() {
            Some(false) if self.phase.resumed => self.distrust = true,
            Some(true) => self.distrust = false,
            _ => {}
        }
    }

    /// Judges the current phase and begins the next with the next advertisement.
    fn new_phase(&mut self, resumed: bool) {
        self.judge();
        self.phase = Phase {
            from: self.recvreq_sent + 1,
            resumed,
            written: 0,
            wasted: 0,
        };
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StageOwner {
    Unexpected(u64),
    Probed(MsgId),
    /// A matched receive, with the outcome it completes with once the read is done.
    Recv(RecvId, RecvOutcome),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Xfer {
    from: Rank,
    i: u64,
    /// Who gets the data once read.
    owner: StageOwner,
    /// Read into a staging buffer (else straight into the receive `owner`).
    staged: bool,
}

/// Per context, how many posted receives block advertising there (rule 6), kept
/// only for the contexts where the number has been asked for: by a receive that
/// could be advertised, or a paused one resuming ([`Engine::blockers_in`] counts
/// them from the receives' states then). A program whose receives are never
/// advertised (every one of eager size, or receiver-side matching) counts nothing,
/// and a blocking receive's posting and matching look nothing up here.
///
/// The counts are a function of the receives' states (`Engine::recvs`), so they take
/// no part in comparing or hashing engine states (the model checker's): two states
/// with the same receives are the same whichever contexts are counted.
#[derive(Clone, Debug, Default)]
struct Blockers {
    /// For each counted context, 1 + its count (0, vacant: not counted).
    counted: Counts<Ctx>,
    /// Whether any context is counted: while none is, there is nothing to look up.
    any: bool,
}

impl Blockers {
    /// A blocking receive was posted in `ctx`.
    #[inline(always)]
    fn posted(&mut self, ctx: Ctx) {
        if self.any {
            self.posted_counted(ctx);
        }
    }

    /// [`Self::posted`] once some context is counted (out of line: the common case
    /// stays one test).
    #[inline(never)]
    fn posted_counted(&mut self, ctx: Ctx) {
        if let Some(n) = self.counted.get_mut(&ctx).filter(|n| **n > 0) {
            *n += 1;
        }
    }

    /// A blocking receive of `ctx` left the posted queue (or stopped blocking): the
    /// number left, if `ctx` is counted.
    #[inline(always)]
    fn left(&mut self, ctx: Ctx) -> Option<u32> {
        if !self.any {
            return None;
        }
        self.left_counted(ctx)
    }

    /// [`Self::left`] once some context is counted.
    #[inline(never)]
    fn left_counted(&mut self, ctx: Ctx) -> Option<u32> {
        let n = self.counted.get_mut(&ctx).filter(|n| **n > 0)?;
        assert!(*n > 1, "a blocker left context {ctx}, which had none");
        *n -= 1;
        Some(*n - 1)
    }

    /// The count of `ctx`, if it is counted.
    fn counted(&self, ctx: Ctx) -> Option<u32> {
        self.counted.count(&ctx).checked_sub(1)
    }

    /// Starts counting `ctx`, which has `n` blockers now.
    fn start(&mut self, ctx: Ctx, n: u32) {
        self.counted.set(ctx, n + 1);
        self.any = true;
    }
}

impl PartialEq for Blockers {
    fn eq(&self, _: &Self) -> bool {
        // a function of the receives' states, which are compared (type docs)
        true
    }
}

impl Eq for Blockers {}

impl std::hash::Hash for Blockers {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {
        // as `eq`: nothing of its own
    }
}

/// One rank's protocol engine. See the crate docs for the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Engine {
    cfg: Config,
    /// The largest eager payload the send fast path takes: the eager limit, or
    /// [`Config::lone_read_above`], [`Config::cross_read_above`] or
    /// [`Config::stream_read_above`] if lower (a larger send may be read if lone,
    /// crossing or advised in a stream, which [`Engine::start_send`] decides).
    fast_limit: u64,
    me: Rank,
    size: u32,
    peers: Vec<Peer>,
    posted: Posted,
    unexpected: Unexpected,
    /// Buffers for the payloads of unexpected eager messages, handed back by
    /// [`Engine::recycle`].
    spares: Spares,
    /// How an early payload too big for a spare buffer is copied.
    copy_early: CopyEarly,
    probed: HMap<MsgId, UEntry>,
    recvs: OneMap<RecvId, RecvState>,
    sends: OneMap<SendId, SendState>,
    /// Per context: pending receives that block advertising (ANY_SOURCE, or not
    /// advertisable), and the receives held back behind them, in posting order.
    blockers: Blockers,
    held: HMap<Ctx, VecDeque<(RecvId, RemoteBuf)>>,
    xfers: HMap<XferId, Xfer>,
    next_id: u64,
    bsend: Option<(u64, u64)>,
    out: VecDeque<Output>,
    stats: Stats,
    /// The job is finishing ([`Engine::closing`]).
    closing: bool,
    /// [`Output::Matched`] and [`Output::Withdrawn`] are reported
    /// ([`Engine::report_matches`]).
    report: bool,
}

/// A send request's fields, as [`Engine::send_req`] takes them.
#[derive(Clone, Copy)]
struct SendReqFields {
    ctx: Ctx,
    tag: Tag,
    len: u64,
    flags: wire::SendFlags,
    body: Body,
}

impl Engine {
    /// A new engine for rank `me` of a job of `size` ranks.
    pub fn new(me: Rank, size: u32, mut cfg: Config) -> Engine {
        assert!(me < size, "rank {me} outside a job of {size}");
        assert!(
            cfg.credits >= 1 && (1..=cfg.credits).contains(&cfg.low_water),
            "need credits >= 1 and 1 <= low_water <= credits"
        );
        // never more often than `low_water` (rule 13): one comparison in `arrived`
        cfg.tell_after = cfg.tell_after.max(cfg.low_water);
        let peer = Peer {
            credits: cfg.credits,
            pause_len: cfg.adapt_pause,
            ..Peer::default()
        };
        Engine {
            cfg,
            fast_limit: cfg
                .eager_limit
                .min(cfg.lone_read_above)
                .min(cfg.cross_read_above)
                .min(cfg.stream_read_above),
            me,
            size,
            peers: vec![peer; size as usize],
            posted: Posted::default(),
            unexpected: Unexpected::default(),
            spares: Spares::default(),
            copy_early: CopyEarly::default(),
            probed: HMap::default(),
            recvs: OneMap::default(),
            sends: OneMap::default(),
            blockers: Blockers::default(),
            held: HMap::default(),
            xfers: HMap::default(),
            next_id: 1,
            bsend: None,
            out: VecDeque::new(),
            stats: Stats::default(),
            closing: false,
            report: false,
        }
    }

    /// Reports, from now on, the order in which messages are matched where a
    /// completion alone would not show it ([`Output::Matched`] for a receive whose data
    /// comes later, [`Output::Withdrawn`] for a message its sender cancelled), for
    /// tools that number each channel's messages in match order. MPI's non-overtaking
    /// rule makes the k-th message matched on a channel the k-th sent on it, but a
    /// rendezvous message can complete after a later eager one. Off by default; only
    /// the rendezvous and cancel paths look at it.
    pub fn report_matches(&mut self) {
        self.report = true;
    }

    /// The job is finishing (`MPI_Finalize`, before its last barrier): from now on a
    /// receiver returns credits explicitly only when it owes `low_water` of them, as
    /// flow control needs, and no longer to tell a sender how far it has read (rule
    /// 13), which only keeps the sender's crossing list short. So the last barrier's
    /// messages do not set off a `Credit` that nobody will read. (Over libfabric's
    /// verbs provider such a message, still on its way when both ends closed, crashed
    /// inside the provider; the transport's `close` and the fence after it now make it
    /// harmless, `docs/transports.md`, "How it grew for teardown".)
    pub fn closing(&mut self) {
        self.closing = true;
    }

    pub fn rank(&self) -> Rank {
        self.me
    }
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Whether protocol mutation `m` is in force: only in builds with the `mutations`
    /// feature (the model checker's tests); elsewhere a constant `false`, so the
    /// checks compile out of the protocol's paths.
    #[inline(always)]
    fn mutated(&self, m: Mutation) -> bool {
        cfg!(feature = "mutations") && self.cfg.mutation == m
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Sets how the payload of an eager message that arrives before its receive is
    /// copied out of the transport's buffer, for payloads of more than 1 KiB (smaller
    /// ones go into reused buffers): `extend` appends its second argument to its
    /// first. The default is `Vec::extend_from_slice`; rsmpi passes
    /// `transport::copy::extend`, which avoids a slow case of some CPUs' string
    /// copies. Not part of the protocol: it changes no output.
    ///
    /// ```
    /// # use matching::{Config, Engine};
    /// let mut e = Engine::new(0, 2, Config::default());
    /// e.copy_early_with(|v, bytes| v.extend_from_slice(bytes));
    /// ```
    pub fn copy_early_with(&mut self, extend: fn(&mut Vec<u8>, &[u8])) {
        self.copy_early = CopyEarly(extend);
    }

    /// Takes back the buffer of an [`Output::CopyIn`] once its payload is copied out,
    /// to hold the next early message's payload: small messages that arrive before
    /// their receives then cost no allocation. Dropping the buffer instead is correct
    /// too.
    #[inline(always)]
    pub fn recycle(&mut self, data: Vec<u8>) {
        self.spares.keep(data);
    }

    /// Whether an output waits for the driver ([`Engine::poll_output`]).
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// The next output for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// True when nothing is pending: no request, no queued message, no transfer. A send
    /// whose one-sided write ([`Output::Put`]) has not been reported by
    /// [`Engine::put_done`] is pending.
    pub fn is_idle(&self) -> bool {
        self.recvs.is_empty()
            && self.sends.is_empty()
            && self.xfers.is_empty()
            && self.out.is_empty()
            && self.peers.iter().all(|p| p.outbox.is_empty())
    }

    /// Number of receives in the posted queue and of unexpected messages.
    pub fn queue_lengths(&self) -> (usize, usize) {
        (self.posted.len(), self.unexpected.len())
    }

    /// Number of live receives advertised to us by `peer` (sender-side memory).
    pub fn advertised_by(&self, peer: Rank) -> usize {
        self.peers
            .get(peer as usize)
            .map_or(0, |p| p.adv.live_count())
    }

    fn id(&mut self) -> u64 {
        let v = self.next_id;
        self.next_id += 1;
        v
    }

    fn check_rank(&self, r: Rank) -> Result<(), CallError> {
        if r < self.size {
            Ok(())
        } else {
            Err(CallError::InvalidRank {
                rank: r,
                size: self.size,
            })
        }
    }

    fn check_tag(t: Tag) -> Result<(), CallError> {
        if t >= 0 {
            Ok(())
        } else {
            Err(CallError::InvalidTag(t))
        }
    }

    // ------------------------------------------------------------------ output

    /// Queues a control message (and the action carrying it) towards `to`, subject to
    /// credits. Credit messages bypass the queue.
    fn emit(&mut self, to: Rank, q: Queued) {
        let cost = self.cost(&q);
        let p = &mut self.peers[to as usize];
        if p.credits < cost || !p.outbox.is_empty() {
            if p.outbox.is_empty() {
                self.stats.credit_stalls += 1;
            }
            p.outbox.push_back(q);
            return;
        }
        self.transmit(to, q);
    }

    /// Credits a queued message costs (rule 13).
    fn cost(&self, q: &Queued) -> u32 {
        let Queued::Ctrl { payload, .. } = q;
        self.cfg.credit_cost(payload.map_or(0, |(_, len)| len))
    }

    fn transmit(&mut self, to: Rank, q: Queued) {
        let cost = self.cost(&q);
        let p = &mut self.peers[to as usize];
        p.credits -= cost;
        let credit = std::mem::take(&mut p.owed);
        match q {
            Queued::Ctrl { msg, payload, done } => {
                let header = wire::encode(&Frame { credit, msg });
                self.out.push_back(Output::Transmit {
                    to,
                    header,
                    payload,
                });
                if let Some(s) = done {
                    let st = self.sends.get_mut(&s).expect("queued send");
                    st.emitted = true;
                    if !st.needs_reply && !st.cancelling {
                        self.finish_send(s, SendOutcome::Sent);
                    }
                }
            }
        }
    }

    /// Transmits what waits in `to`'s outbox as far as the credits go. Always inlined,
    /// with the loop out of line: the outbox is empty on the per-message path, and
    /// inlined whole into [`Self::handle`], the loop and the credit message
    /// ([`Self::arrived`]) took the receive path's registers.
    #[inline(always)]
    fn flush(&mut self, to: Rank) {
        if !self.peers[to as usize].outbox.is_empty() {
            self.flush_outbox(to);
        }
    }

    #[inline(never)]
    fn flush_outbox(&mut self, to: Rank) {
        while let Some(q) = self.peers[to as usize].outbox.front() {
            if self.peers[to as usize].credits < self.cost(q) {
                break;
            }
            let q = self.peers[to as usize].outbox.pop_front().expect("front");
            self.transmit(to, q);
        }
    }

    fn ctrl(&mut self, to: Rank, msg: Ctrl) {
        self.emit(
            to,
            Queued::Ctrl {
                msg,
                payload: None,
                done: None,
            },
        );
    }

    /// A message from `from` arrived: takes the credits it returns (more than `from`
    /// was given is a protocol violation) and, unless it is an explicit credit
    /// message, counts its `cost` as consumed. Returns credits explicitly when
    /// `low_water` are owed, or tells `from` how far it has read once
    /// [`Config::tell_after`] send requests have come since it last did (rule 13):
    /// credits that ride back on messages carry no `m`, and without it `from` would
    /// keep every send request for crossing replays. Always inlined, with the credit
    /// message out of line (see [`Self::flush`]); one access to the peer's state.
    #[inline(always)]
    fn arrived(&mut self, from: Rank, credit: u32, cost: Option<u32>) -> Result<(), ProtocolError> {
        let (max, lw, tell) = (self.cfg.credits, self.cfg.low_water, !self.closing);
        let tell_after = self.cfg.tell_after;
        let p = &mut self.peers[from as usize];
        p.credits = p
            .credits
            .checked_add(credit)
            .filter(|c| *c <= max)
            .ok_or_else(|| ProtocolError::Violation {
                from,
                what: "returned more credits than it was given".to_string(),
            })?;
        let Some(cost) = cost else {
            return Ok(());
        };
        p.owed += cost;
        if p.owed >= lw || (tell && p.sendreq_seen - p.told >= u64::from(tell_after)) {
            self.credit_back(from);
        }
        Ok(())
    }

    /// Returns `from`'s owed credits in a message of their own ([`Self::arrived`]).
    #[inline(never)]
    fn credit_back(&mut self, from: Rank) {
        let p = &mut self.peers[from as usize];
        let credit = std::mem::take(&mut p.owed);
        // The credit overtakes whatever waits in the outbox, so its `m` must not
        // run ahead of a receive request still waiting there: the peer forgets
        // send requests up to `m`, and that request's crossing replay needs them.
        let m = p
            .outbox
            .iter()
            .find_map(|q| match q {
                Queued::Ctrl {
                    msg: Ctrl::RecvReq { m, .. },
                    ..
                } => Some(*m),
                _ => None,
            })
            .unwrap_or(p.sendreq_seen);
        p.told = p.sendreq_seen;
        let header = wire::encode(&Frame {
            credit,
            msg: Ctrl::Credit { m },
        });
        self.out.push_back(Output::Transmit {
            to: from,
            header,
            payload: None,
        });
    }

    /// The send waiting for a reply to send request `i` from `from`, if `from` can
    /// have seen it: a send request still in the outbox cannot be answered.
    fn replied(&self, from: Rank, i: u64) -> Option<SendId> {
        let s = *self.peers[from as usize].waiting.get(&i)?;
        self.sends.get(&s).is_some_and(|st| st.emitted).then_some(s)
    }

    fn finish_send(&mut self, s: SendId, outcome: SendOutcome) {
        let Some(st) = self.sends.remove(&s) else {
            return;
        };
        if let Path::Req(i) = st.path {
            self.peers[st.dest as usize].waiting.remove(&i);
        }
        if st.user {
            self.out.push_back(Output::SendDone { send: s, outcome });
        } else {
            if let Some((_, used)) = &mut self.bsend {
                *used -= st.len;
            }
            self.out.push_back(Output::BufferFree { send: s });
        }
    }

    fn finish_recv(&mut self, r: RecvId, outcome: RecvOutcome) {
        self.recvs.remove(&r);
        self.out.push_back(Output::RecvDone { recv: r, outcome });
    }

    // ---------------------------------------------------------------- receives

    /// Posts a receive (`MPI_Irecv`). Matches the unexpected queue first (rule 1); if
    /// nothing matches, queues it and advertises it to its source unless an ANY_SOURCE
    /// or non-contiguous receive is pending in the context (rules 2, 6).
    #[inline(always)]
    pub fn post_recv(&mut self, spec: RecvSpec) -> Result<RecvId, CallError> {
        let id = self.new_recv(&spec)?;
        // nothing to look for in the common case, a receive posted in time
        let early = match self.unexpected.is_empty() {
            true => None,
            false => self.unexpected.find(spec.ctx, spec.source, spec.tag),
        };
        if let Some(seq) = early {
            self.post_found_queued(id, &spec, seq);
            return Ok(id);
        }
        self.post_queued(id, spec);
        Ok(id)
    }

    /// [`Engine::post_recv`], except that a receive which takes a message already
    /// here with its payload (an eager one, not synchronous) completes at once and
    /// comes back with the payload ([`Posting::Early`]) instead of as an
    /// [`Output::CopyIn`] and an [`Output::RecvDone`]: the common case of a message
    /// that arrived before its receive, with no queue of outputs and no state kept
    /// for the receive. It comes back so only while no output waits, so that the
    /// driver sees completions in the order the queue would have given them.
    ///
    /// Out of line: a driver calls it when [`Engine::has_unexpected`] says there is
    /// something to take, and [`Engine::post_recv_in_time`] otherwise. `post_recv`
    /// takes a message through the same decision, then queues an early receive's
    /// completion as outputs, so the model checker, which posts with `post_recv`,
    /// runs it.
    #[inline(never)]
    pub fn post_recv_early(&mut self, spec: RecvSpec) -> Result<Posting, CallError> {
        let id = self.new_recv(&spec)?;
        if let Some(seq) = self.unexpected.find(spec.ctx, spec.source, spec.tag) {
            return Ok(self.post_found(id, &spec, seq));
        }
        self.post_queued(id, spec);
        Ok(Posting::Queued(id))
    }

    /// Whether any message waits for its receive: [`Engine::post_recv_early`] may
    /// then find one; otherwise [`Engine::post_recv_in_time`] posts a receive.
    #[inline(always)]
    pub fn has_unexpected(&self) -> bool {
        !self.unexpected.is_empty()
    }

    /// [`Engine::post_recv`] while no message waits for its receive
    /// ([`Engine::has_unexpected`] is false): the same, without looking again.
    #[inline(always)]
    pub fn post_recv_in_time(&mut self, spec: RecvSpec) -> Result<RecvId, CallError> {
        debug_assert!(!self.has_unexpected(), "a message waits: post_recv_early");
        let id = self.new_recv(&spec)?;
        self.post_queued(id, spec);
        Ok(id)
    }

    /// The id of a receive posted as `spec`, its source and tag checked.
    #[inline(always)]
    fn new_recv(&mut self, spec: &RecvSpec) -> Result<RecvId, CallError> {
        if let Source::Rank(r) = spec.source {
            self.check_rank(r)?;
        }
        if let TagSel::Tag(t) = spec.tag {
            Self::check_tag(t)?;
        }
        Ok(RecvId(self.id()))
    }

    /// Queues receive `id`, posted as `spec`, which found no message: rules 2 and 6.
    #[inline(always)]
    fn post_queued(&mut self, id: RecvId, spec: RecvSpec) {
        let mut paused = false;
        // a receive of a specific source with its buffer, in `both` mode and above
        // the size that is advertised, goes to its sender unless it is paused there:
        // its buffer is kept only then, with the advertisement or beside a held or
        // paused receive until it goes
        let adv = match (spec.buf, spec.source) {
            (Some(b), Source::Rank(r))
                if self.cfg.matching == MatchingMode::Both
                    && spec.capacity > self.cfg.advertise_above =>
            {
                let buf = RemoteBuf {
                    len: b.len.min(spec.capacity),
                    ..b
                };
                self.resume(r);
                paused = self.paused(r, id, buf);
                (!paused).then_some(buf)
            }
            _ => None,
        };
        let blocker = !(adv.is_some() || paused && self.mutated(Mutation::PausedNoHold));
        self.recvs
            .insert_with(id, || RecvState::posted(&spec, blocker));
        self.posted.insert(id.0, spec.ctx, spec.source, spec.tag);
        if blocker {
            self.blockers.posted(spec.ctx);
        } else if let Some(buf) = adv {
            if self.blockers_in(spec.ctx) == 0 || self.mutated(Mutation::NoHold) {
                self.advertise(id, buf);
            } else {
                self.held.entry(spec.ctx).or_default().push_back((id, buf));
            }
        }
        // (else, mutation only: neither advertised nor holding anything back)
    }

    /// Receive `id`, posted as `spec`, takes unexpected message `seq`, its completion
    /// queued as outputs ([`Engine::post_recv`]).
    #[inline(never)]
    fn post_found_queued(&mut self, id: RecvId, spec: &RecvSpec, seq: u64) {
        if let Posting::Early(e) = self.post_found(id, spec, seq) {
            self.out.push_back(Output::CopyIn {
                recv: e.recv,
                data: e.data,
            });
            self.finish_recv(e.recv, e.outcome);
        }
    }

    /// Receive `id`, posted as `spec`, takes unexpected message `seq`: handed back
    /// complete with its payload if it can be ([`Engine::post_recv_early`]), its
    /// completion queued otherwise.
    #[inline(always)]
    fn post_found(&mut self, id: RecvId, spec: &RecvSpec, seq: u64) -> Posting {
        let e = self.unexpected.take(seq).expect("found");
        if let (UData::Eager(_), false, true) = (&e.data, e.flags.sync, self.out.is_empty()) {
            let (len, outcome) = Self::outcome_in(spec.capacity, e.src, e.tag, e.len);
            let UData::Eager(mut data) = e.data else {
                unreachable!("an eager message")
            };
            data.truncate(len as usize);
            return Posting::Early(Early {
                recv: id,
                data,
                outcome,
            });
        }
        self.recvs.insert_with(id, || RecvState::posted(spec, true));
        self.deliver_unexpected(id, e);
        Posting::Queued(id)
    }

    fn advertise(&mut self, id: RecvId, buf: RemoteBuf) {
        let st = self.recvs[&id];
        let Source::Rank(peer) = st.source else {
            unreachable!("only specific sources")
        };
        let p = &mut self.peers[peer as usize];
        p.recvreq_sent += 1;
        let k = p.recvreq_sent;
        p.adv_recv.insert(k, id);
        let m = p.sendreq_seen;
        p.told = m;
        self.recvs.get_mut(&id).unwrap().stage = RStage::Posted {
            adv: Some(k),
            cancelling: false,
        };
        self.stats.advertised += 1;
        self.ctrl(
            peer,
            Ctrl::RecvReq {
                ctx: st.ctx,
                tag: st.tag,
                buf,
                m,
            },
        );
    }

    /// A receive that blocked advertising left the posted queue: once none is left in
    /// its context, advertise the held receives in posting order (rule 6).
    #[inline(always)]
    fn unblock(&mut self, ctx: Ctx) {
        // a context whose blockers are not counted holds nothing back: a receive is
        // held only after its context's count was asked for
        match self.blockers.left(ctx) {
            Some(0) if !self.held.is_empty() => self.release_held(ctx),
            _ => {}
        }
    }

    /// How many posted receives block advertising in `ctx` (rule 6). Counted from
    /// the receives' states the first time it is asked for a context, and kept from
    /// then on ([`Blockers`]). Out of line: only a receive that could be advertised
    /// asks.
    #[inline(never)]
    fn blockers_in(&mut self, ctx: Ctx) -> u32 {
        let scan = |recvs: &OneMap<RecvId, RecvState>| {
            let n = recvs
                .iter()
                .filter(|(_, st)| {
                    st.ctx == ctx && st.blocker && matches!(st.stage, RStage::Posted { .. })
                })
                .count();
            u32::try_from(n).expect("posted receives fit in u32")
        };
        if let Some(n) = self.blockers.counted(ctx) {
            debug_assert_eq!(n, scan(&self.recvs), "blockers of context {ctx}");
            return n;
        }
        let n = scan(&self.recvs);
        self.blockers.start(ctx, n);
        n
    }

    /// The last blocker of `ctx` left: advertises the receives it held back.
    #[inline(never)]
    fn release_held(&mut self, ctx: Ctx) {
        let held = self.held.remove(&ctx).unwrap_or_default();
        for (id, buf) in held {
            if self.is_posted(id) {
                self.advertise(id, buf);
            }
        }
    }

    /// Adaptive advertising: whether receive `id` from `peer`, posted now, stays
    /// unadvertised (counts it if so).
    fn paused(&mut self, peer: Rank, id: RecvId, buf: RemoteBuf) -> bool {
        let p = &mut self.peers[peer as usize];
        if p.pause_left == 0 {
            return false;
        }
        p.paused_recv = Some((id, buf));
        p.pause_left -= 1;
        if p.pause_left == 0 {
            // on probation: one more wasted advertisement starts a longer pause
            p.wasted_run = self.cfg.adapt_after.saturating_sub(1);
            p.new_phase(false);
        }
        self.stats.paused += 1;
        true
    }

    /// A receive from `peer` is being posted while the last paused one is still
    /// pending: the receiver is posting ahead of the sender, so advertisements can
    /// arrive in time again. Ends the pause, and advertises that paused receive now if
    /// it is the only blocker of its context (rule 15: it is then exactly a held
    /// receive being released, rule 3) — unless an earlier resume from this peer lost
    /// its bet ([`Phase`]).
    fn resume(&mut self, peer: Rank) {
        let Some((r, buf)) = self.peers[peer as usize].paused_recv.take() else {
            return;
        };
        if !self.is_posted(r) || self.mutated(Mutation::PausedNoHold) {
            return;
        }
        let p = &mut self.peers[peer as usize];
        p.judge();
        if p.distrust {
            return;
        }
        p.new_phase(true);
        p.pause_left = 0;
        p.wasted_run = 0;
        p.pause_len = self.cfg.adapt_pause;
        let st = self.recvs[&r];
        let ctx = st.ctx;
        let cancelling = matches!(
            st.stage,
            RStage::Posted {
                cancelling: true,
                ..
            }
        );
        if !cancelling && self.blockers_in(ctx) == 1 {
            self.recvs.get_mut(&r).expect("posted receive").blocker = false;
            self.advertise(r, buf);
            self.unblock(ctx);
        }
    }

    /// An advertised receive from `peer` was matched by a send request (`wasted`) or
    /// written directly.
    fn advertisement_outcome(&mut self, peer: Rank, k: u64, wasted: bool) {
        let (after, base) = (self.cfg.adapt_after, self.cfg.adapt_pause);
        let p = &mut self.peers[peer as usize];
        if after == 0 {
            return;
        }
        if k >= p.phase.from {
            let n = match wasted {
                true => &mut p.phase.wasted,
                false => &mut p.phase.written,
            };
            *n = n.saturating_add(1);
        }
        if !wasted {
            p.wasted_run = 0;
            p.pause_len = base;
            return;
        }
        p.wasted_run += 1;
        if p.wasted_run >= after {
            p.wasted_run = 0;
            p.pause_left = p.pause_len;
            p.pause_len = p.pause_len.saturating_mul(2).min(base.saturating_mul(64));
        }
    }

    /// Removes a matched receive from the posted queue and its advertisement.
    /// Whether receive `id` is in the posted queue.
    fn is_posted(&self, id: RecvId) -> bool {
        self.recvs
            .get(&id)
            .is_some_and(|st| matches!(st.stage, RStage::Posted { .. }))
    }

    fn unpost(&mut self, id: RecvId) -> RecvState {
        let st = self.recvs[&id];
        self.posted.remove(id.0, st.ctx, st.source, st.tag);
        self.unadvertise(&st);
        st
    }

    /// Forgets the advertisement of a receive leaving the posted queue.
    #[inline(always)]
    fn unadvertise(&mut self, st: &RecvState) {
        if let RStage::Posted { adv: Some(k), .. } = st.stage {
            self.forget_advertised(st.source, k);
        }
    }

    #[inline(never)]
    fn forget_advertised(&mut self, source: Source, k: u64) {
        let Source::Rank(p) = source else {
            unreachable!()
        };
        self.peers[p as usize].adv_recv.remove(&k);
    }

    fn outcome(st: &RecvState, source: Rank, tag: Tag, msg_len: u64) -> (u64, RecvOutcome) {
        Self::outcome_in(st.cap, source, tag, msg_len)
    }

    /// [`Self::outcome`] for a receive of capacity `cap`.
    #[inline(always)]
    fn outcome_in(cap: u64, source: Rank, tag: Tag, msg_len: u64) -> (u64, RecvOutcome) {
        let len = msg_len.min(cap);
        let truncated_from = (msg_len > cap).then_some(msg_len);
        (
            len,
            RecvOutcome::Received {
                source,
                tag,
                len,
                truncated_from,
            },
        )
    }

    /// Completes receive `id` (already out of the posted queue) with an unexpected
    /// message.
    fn deliver_unexpected(&mut self, id: RecvId, e: UEntry) {
        let st = self.recvs[&id];
        let (len, outcome) = Self::outcome(&st, e.src, e.tag, e.len);
        if e.flags.sync && matches!(e.data, UData::Eager(_)) {
            self.ctrl(e.src, Ctrl::Ack { i: e.i });
        }
        match e.data {
            UData::Eager(mut d) | UData::Staged(mut d) => {
                d.truncate(len as usize);
                self.out.push_back(Output::CopyIn { recv: id, data: d });
                self.finish_recv(id, outcome);
            }
            UData::Rndv(src) => {
                self.start_get(id, e.src, e.i, src, len, outcome);
            }
            UData::Staging(x) => {
                self.xfers.get_mut(&x).expect("staging xfer").owner = StageOwner::Recv(id, outcome);
                self.recvs.get_mut(&id).unwrap().stage = RStage::Fetching;
                self.matched_later(id, outcome);
            }
        }
    }

    /// Receive `id` matched with `outcome`, and completes later: reported when asked
    /// to ([`Engine::report_matches`]).
    fn matched_later(&mut self, id: RecvId, outcome: RecvOutcome) {
        if let (true, RecvOutcome::Received { source, tag, .. }) = (self.report, outcome) {
            self.out.push_back(Output::Matched {
                recv: id,
                source,
                tag,
            });
        }
    }

    fn start_get(
        &mut self,
        id: RecvId,
        from: Rank,
        i: u64,
        src: RemoteBuf,
        len: u64,
        o: RecvOutcome,
    ) {
        let xfer = XferId(self.id());
        self.xfers.insert(
            xfer,
            Xfer {
                from,
                i,
                owner: StageOwner::Recv(id, o),
                staged: false,
            },
        );
        self.recvs.get_mut(&id).unwrap().stage = RStage::Fetching;
        self.matched_later(id, o);
        self.out.push_back(Output::Get {
            xfer,
            from,
            src,
            len,
            into: GetInto::Recv(id),
        });
    }

    /// Cancels a receive (`MPI_Cancel`). A receive still local is cancelled at once; an
    /// advertised one is retracted at its sender first, and completes either as
    /// cancelled or with the message that was already on its way — never both.
    pub fn cancel_recv(&mut self, id: RecvId) -> Result<(), CallError> {
        let st = *self.recvs.get(&id).ok_or(CallError::UnknownRequest)?;
        match st.stage {
            RStage::Fetching
            | RStage::Posted {
                cancelling: true, ..
            } => Ok(()),
            RStage::Posted {
                adv: Some(k),
                cancelling: false,
            } => {
                self.recvs.get_mut(&id).unwrap().stage = RStage::Posted {
                    adv: Some(k),
                    cancelling: true,
                };
                let Source::Rank(p) = st.source else {
                    unreachable!()
                };
                self.ctrl(p, Ctrl::Retract { k });
                Ok(())
            }
            RStage::Posted { adv: None, .. } => {
                self.posted.remove(id.0, st.ctx, st.source, st.tag);
                self.finish_recv(id, RecvOutcome::Cancelled);
                if st.blocker {
                    self.unblock(st.ctx);
                } else if let Some(h) = self.held.get_mut(&st.ctx) {
                    h.retain(|x| x.0 != id);
                }
                Ok(())
            }
        }
    }

    /// `MPI_Iprobe`: the envelope of the earliest unexpected message matching. (`&mut`:
    /// a look into many waiting messages may build their index.)
    pub fn probe(&mut self, source: Source, tag: TagSel, ctx: Ctx) -> Option<Envelope> {
        let seq = self.unexpected.find(ctx, source, tag)?;
        let e = self.unexpected.peek(seq)?;
        Some(Envelope {
            source: e.src,
            tag: e.tag,
            ctx: e.ctx,
            len: e.len,
        })
    }

    /// `MPI_Improbe`: takes the earliest matching unexpected message out of the queue,
    /// so that only [`Engine::mrecv`] can receive it.
    pub fn mprobe(&mut self, source: Source, tag: TagSel, ctx: Ctx) -> Option<(MsgId, Envelope)> {
        let seq = self.unexpected.find(ctx, source, tag)?;
        self.probe_take(seq)
    }

    /// [`Engine::mprobe`] among the unexpected messages that arrived since `*from`
    /// (a number of arrival); `*from` is moved past what was looked at, so that the
    /// next look starts there. A message that arrived before it is not found: for a
    /// context whose messages only such looks take (the race checker's notes), a
    /// look walks each message of the queue once, not at every look.
    pub fn mprobe_from(
        &mut self,
        source: Source,
        tag: TagSel,
        ctx: Ctx,
        from: &mut u64,
    ) -> Option<(MsgId, Envelope)> {
        let Some(seq) = self.unexpected.find_from(ctx, source, tag, *from) else {
            *from = self.unexpected.next_number();
            return None;
        };
        *from = seq + 1;
        self.probe_take(seq)
    }

    /// Takes unexpected message `seq` out of the queue for [`Engine::mrecv`].
    fn probe_take(&mut self, seq: u64) -> Option<(MsgId, Envelope)> {
        let e = self.unexpected.take(seq)?;
        let env = Envelope {
            source: e.src,
            tag: e.tag,
            ctx: e.ctx,
            len: e.len,
        };
        let id = MsgId(self.id());
        if let UData::Staging(x) = e.data {
            self.xfers.get_mut(&x).unwrap().owner = StageOwner::Probed(id);
        }
        self.probed.insert(id, e);
        Some((id, env))
    }

    /// `MPI_Imrecv`: receives a message taken by [`Engine::mprobe`].
    pub fn mrecv(&mut self, msg: MsgId, capacity: u64) -> Result<RecvId, CallError> {
        let e = self.probed.remove(&msg).ok_or(CallError::UnknownRequest)?;
        let id = RecvId(self.id());
        let st = RecvState {
            source: Source::Rank(e.src),
            tag: TagSel::Tag(e.tag),
            ctx: e.ctx,
            cap: capacity,
            blocker: false,
            stage: RStage::Posted {
                adv: None,
                cancelling: false,
            },
        };
        self.recvs.insert(id, st);
        self.deliver_unexpected(id, e);
        Ok(id)
    }

    // ------------------------------------------------------------------- sends

    /// Attaches a buffer of `size` bytes for buffered sends (`MPI_Buffer_attach`).
    pub fn attach_buffer(&mut self, size: u64) -> Result<(), CallError> {
        if self.bsend.is_some() {
            return Err(CallError::BufferAlreadyAttached);
        }
        self.bsend = Some((size, 0));
        Ok(())
    }

    /// Size of the attached buffer (0 when none).
    pub fn buffer_size(&self) -> u64 {
        self.bsend.map_or(0, |b| b.0)
    }

    /// Detaches the buffer; returns its size, or `None` while buffered sends are still
    /// in flight (the driver keeps progressing and asks again).
    pub fn detach_buffer(&mut self) -> Result<Option<u64>, CallError> {
        match self.bsend {
            None => Err(CallError::NoBufferAttached),
            Some((size, 0)) => {
                self.bsend = None;
                Ok(Some(size))
            }
            Some(_) => Ok(None),
        }
    }

    /// Starts a send (`MPI_Isend` and its modes). With an advertised receive matching
    /// (rules 2, 3) the payload is written straight into it; otherwise a send request
    /// goes to the receiver (rule 4).
    pub fn start_send(&mut self, spec: SendSpec) -> Result<SendId, CallError> {
        self.check_rank(spec.dest)?;
        Self::check_tag(spec.tag)?;
        let id = SendId(self.id());
        let mut user = true;
        if spec.mode == SendMode::Buffered {
            let (size, used) = self.bsend.as_mut().ok_or(CallError::NoBufferAttached)?;
            let free = *size - *used;
            if spec.len > free {
                return Err(CallError::Buffer(SendError::BufferTooSmall {
                    needed: spec.len,
                    free,
                }));
            }
            *used += spec.len;
            user = false;
        }
        let mut st = SendState {
            dest: spec.dest,
            len: spec.len,
            path: Path::Inline,
            needs_reply: false,
            emitted: false,
            cancelling: false,
            user,
        };
        if !user {
            self.out.push_back(Output::SendDone {
                send: id,
                outcome: SendOutcome::Sent,
            });
        }
        let to = spec.dest;
        let p = &mut self.peers[to as usize];
        if let Some((k, adv)) = p.adv.take_match(spec.ctx, spec.tag) {
            self.stats.direct_writes += 1;
            let len = spec.len.min(adv.buf.len);
            if len <= self.cfg.inline_limit {
                // small: the payload rides in the notice; the send completes when the
                // notice leaves (it may wait for a credit)
                self.stats.inline_writes += 1;
                self.sends.insert(id, st);
                let msg = Ctrl::WrittenInline {
                    k,
                    tag: spec.tag,
                    len,
                    msg_len: spec.len,
                };
                self.emit(
                    to,
                    Queued::Ctrl {
                        msg,
                        payload: Some((id, len)),
                        done: Some(id),
                    },
                );
                return Ok(id);
            }
            // the payload goes now, whatever the credits: the buffer is ours alone
            // since the entry was taken; only the notice waits for a credit. The send
            // completes when the write does (`put_done`).
            st.path = Path::Put;
            self.sends.insert(id, st);
            self.out.push_back(Output::Put {
                to,
                send: id,
                dst: adv.buf,
                len,
            });
            if self.mutated(Mutation::SendDoneBeforePut) {
                self.finish_send(id, SendOutcome::Sent);
            }
            self.ctrl(
                to,
                Ctrl::Written {
                    k,
                    tag: spec.tag,
                    len,
                    msg_len: spec.len,
                },
            );
            return Ok(id);
        }
        p.sendreq_sent += 1;
        let i = p.sendreq_sent;
        p.crossing.push(i, spec.ctx, spec.tag);
        p.waiting.insert(i, id);
        let flags = SendFlags {
            sync: spec.mode == SendMode::Synchronous,
            ready: spec.mode == SendMode::Ready,
        };
        let fits = self.cfg.protocol == RecvProtocol::Eager && spec.len <= self.cfg.eager_limit;
        // (`p.waiting` holds this send already: lone if it is the only one)
        let lone = fits
            && spec.read_advised
            && p.waiting.len() == 1
            && Self::lone(&self.cfg, self.me, p, spec.dest, spec.len, spec.mode);
        // traffic crosses: read, whether lone or not (rule 19)
        let cross = fits
            && p.cross_left > 0
            && spec.len > self.cfg.cross_read_above
            && spec.mode == SendMode::Standard
            && spec.dest != self.me;
        // a stream's send, advised to be read (rule 20)
        let stream = fits
            && !(p.waiting.len() == 1 && Self::quiet(&self.cfg, p))
            && !cross
            && spec.read_advised
            && spec.len > self.cfg.stream_read_above
            && spec.mode == SendMode::Standard
            && spec.dest != self.me;
        if cross {
            p.cross_left -= 1;
            self.stats.cross_reads += 1;
        } else if lone {
            self.stats.lone_reads += 1;
        } else if stream {
            self.stats.stream_reads += 1;
        }
        let lone = lone || cross || stream;
        let eager = fits && !lone;
        // a lone or crossing send is read at once, into a staging buffer if no receive
        // takes it yet: it completes as the eager send it replaces would, whether or
        // not its receive is posted (two ranks that both send before they receive
        // still meet)
        let now = self.cfg.protocol == RecvProtocol::Get || lone;
        let body = if eager {
            self.stats.eager_sends += 1;
            Body::Eager
        } else if now && !flags.sync && !flags.ready {
            self.stats.rndv_sends += 1;
            Body::GetNow(spec.buf)
        } else {
            self.stats.rndv_sends += 1;
            Body::Rndv(spec.buf)
        };
        st.path = Path::Req(i);
        st.needs_reply = !eager || flags.sync || flags.ready;
        self.sends.insert(id, st);
        let msg = Ctrl::SendReq {
            ctx: spec.ctx,
            tag: spec.tag,
            len: spec.len,
            flags,
            body,
        };
        let payload = eager.then_some((id, spec.len));
        self.emit(
            to,
            Queued::Ctrl {
                msg,
                payload,
                done: Some(id),
            },
        );
        Ok(id)
    }

    /// Whether a standard send of `spec` (advised `read_advised`, to `p`, with no
    /// other send of this rank's waiting for a reply from it: the caller checks both)
    /// is read by its receiver although the eager limit would carry it
    /// ([`Config::lone_read_above`]): it is large enough, and nothing of this rank's
    /// is in flight to `p` (nothing queued, every credit back but those of a few
    /// control messages not answered yet: a ping-pong's reply, a rendezvous' done).
    /// The first send of a stream is lone, the ones that follow it while it is in
    /// flight are not.
    #[inline(always)]
    fn lone(cfg: &Config, me: Rank, p: &Peer, dest: Rank, len: u64, mode: SendMode) -> bool {
        // (`p.waiting` holds this send already, or [`Engine::lone_now`] asks before
        // it does: the caller checks the rest)
        len > cfg.lone_read_above && mode == SendMode::Standard && dest != me && Self::quiet(cfg, p)
    }

    /// Whether the eager protocol carries a payload of `len` bytes.
    #[inline(always)]
    fn eager_carries(cfg: &Config, len: u64) -> bool {
        cfg.protocol == RecvProtocol::Eager && len <= cfg.eager_limit
    }

    /// Whether nothing of this rank's is in flight to `p` but what the caller checks
    /// (`p.waiting`): nothing queued, every credit back but those of a few control
    /// messages not answered yet. A send then is lone (rule 18), else a stream's
    /// (rule 20).
    #[inline(always)]
    fn quiet(cfg: &Config, p: &Peer) -> bool {
        p.outbox.is_empty() && p.credits_back(cfg)
    }

    /// Whether a send of `len` bytes to `dest` in `mode`, started now with
    /// [`SendSpec::read_advised`] set, would be lone and so read by its receiver
    /// (docs/protocol.md rule 18): what [`Engine::start_send`] decides, asked
    /// beforehand without changing anything, so that the driver asks the transport's
    /// advice ([`SendSpec::read_advised`]) on a lone send as such (and a stream's,
    /// [`Engine::stream_now`], as a stream's). `false` for a rank outside the job.
    #[inline]
    pub fn lone_now(&self, dest: Rank, len: u64, mode: SendMode) -> bool {
        let cfg = &self.cfg;
        // (the size first: a small send is answered by one comparison; then what
        // `start_send` checks around `lone`: the eager protocol carries it, and no
        // other send waits for a reply from `dest`)
        len > cfg.lone_read_above
            && Self::eager_carries(cfg, len)
            && self.peers.get(dest as usize).is_some_and(|p| {
                p.waiting.is_empty() && Self::lone(cfg, self.me, p, dest, len, mode)
            })
    }

    /// Whether a send of `len` bytes to `dest` in `mode`, started now, is a stream's
    /// send that [`Engine::start_send`] reads when the driver marks it
    /// [`SendSpec::read_advised`] (docs/protocol.md rule 20): above
    /// [`Config::stream_read_above`], carried by the eager protocol, standard, to
    /// another rank, and not lone (another send of this rank's waits for a reply
    /// from `dest`, or its channel to `dest` is not quiet: something queued, or more
    /// than a few credits out). Asked without changing anything, so that the driver
    /// asks the transport's advice on a stream's send as such. `false` for a rank
    /// outside the job.
    #[inline]
    pub fn stream_now(&self, dest: Rank, len: u64, mode: SendMode) -> bool {
        let cfg = &self.cfg;
        len > cfg.stream_read_above
            && Self::eager_carries(cfg, len)
            && mode == SendMode::Standard
            && dest != self.me
            && self
                .peers
                .get(dest as usize)
                .is_some_and(|p| !(p.waiting.is_empty() && Self::quiet(cfg, p)))
    }

    /// The fast path of a standard send whose message can leave at once and carries its
    /// payload: an eager send request, or an inline direct write into an advertised
    /// receive. Needs a free credit towards the destination and nothing queued before
    /// the message (no pending output, nothing in the outbox). The send is then
    /// complete when this returns `Some(len)`: the driver transmits the header written
    /// into `header` (in place, [`wire::encode_into`]) followed by the first `len` bytes
    /// of the buffer, and no id, `SendDone` or later output refers to it. Returns
    /// `Ok(None)`, having changed nothing (`header` included), when the send must go
    /// through [`Engine::start_send`] instead.
    #[inline(always)]
    pub fn send_now(
        &mut self,
        spec: &SendSpec,
        header: &mut Header,
    ) -> Result<Option<u64>, CallError> {
        self.check_rank(spec.dest)?;
        Self::check_tag(spec.tag)?;
        let p = &mut self.peers[spec.dest as usize];
        if spec.mode != SendMode::Standard || !self.out.is_empty() || !p.outbox.is_empty() {
            return Ok(None);
        }
        let cfg = &self.cfg;
        let (msg, len, cost) = if let Some((k, adv)) = p.adv.find_match(spec.ctx, spec.tag) {
            let len = spec.len.min(adv.buf.len);
            let cost = cfg.credit_cost(len);
            if len > cfg.inline_limit || p.credits < cost {
                return Ok(None);
            }
            p.adv.kill(k);
            self.stats.direct_writes += 1;
            self.stats.inline_writes += 1;
            let msg = Ctrl::WrittenInline {
                k,
                tag: spec.tag,
                len,
                msg_len: spec.len,
            };
            (msg, len, cost)
        } else if cfg.protocol == RecvProtocol::Eager && spec.len <= self.fast_limit {
            let cost = cfg.credit_cost(spec.len);
            if p.credits < cost {
                return Ok(None);
            }
            p.sendreq_sent += 1;
            p.crossing.push(p.sendreq_sent, spec.ctx, spec.tag);
            self.stats.eager_sends += 1;
            let msg = Ctrl::SendReq {
                ctx: spec.ctx,
                tag: spec.tag,
                len: spec.len,
                flags: SendFlags::default(),
                body: Body::Eager,
            };
            (msg, spec.len, cost)
        } else {
            return Ok(None);
        };
        p.credits -= cost;
        let credit = std::mem::take(&mut p.owed);
        wire::encode_into(&Frame { credit, msg }, header);
        Ok(Some(len))
    }

    /// A standard send to this rank itself that a posted receive takes at once, without
    /// a message (rule 17): the receive is matched and completed here as an eager send
    /// request from this rank would be on arrival (it is the first posted receive that
    /// matches), and the send is complete when this returns. The driver copies the
    /// range of the send buffer that the returned [`Deliver`] names into the receive's
    /// buffer, exactly as for a delivery from [`Engine::handle`].
    ///
    /// Only when nothing to itself is on its way (a send request or a receive request
    /// not yet handled, an output or a queued message not yet sent) and no receive is
    /// advertised to itself: then no earlier message of this rank can still match
    /// first, and no advertisement can still be written into. Returns `Ok(None)`,
    /// having changed nothing, otherwise, when the message is not eager, and when no
    /// posted receive matches (the send then goes through [`Engine::send_now`] or
    /// [`Engine::start_send`]: an unexpected message must be queued in order with the
    /// ones before it).
    ///
    /// ```
    /// use matching::{Config, Engine, RecvSpec, RemoteBuf, SendMode, SendSpec, Source, TagSel};
    /// let mut e = Engine::new(0, 1, Config::default());
    /// let r = e
    ///     .post_recv(RecvSpec {
    ///         source: Source::Rank(0),
    ///         tag: TagSel::Tag(7),
    ///         ctx: 0,
    ///         capacity: 8,
    ///         buf: None,
    ///     })
    ///     .unwrap();
    /// let spec = SendSpec {
    ///     dest: 0,
    ///     tag: 7,
    ///     ctx: 0,
    ///     len: 4,
    ///     mode: SendMode::Standard,
    ///     read_advised: false,
    ///     buf: RemoteBuf::default(),
    /// };
    /// let d = e.send_to_self(&spec).unwrap().expect("the receive is posted");
    /// assert_eq!((d.recv, d.range), (r, 0..4));
    /// assert!(d.done.is_some() && e.is_idle());
    /// ```
    #[inline(always)]
    pub fn send_to_self(&mut self, spec: &SendSpec) -> Result<Option<Deliver>, CallError> {
        Self::check_tag(spec.tag)?;
        let me = self.me;
        let p = &self.peers[me as usize];
        let settled = (p.sendreq_sent == p.sendreq_seen && p.recvreq_sent == p.recvreq_seen)
            || self.mutated(Mutation::SelfPastInFlight);
        let unadvertised = (p.adv_recv.is_empty() && p.adv.is_empty())
            || self.mutated(Mutation::SelfIntoAdvertised);
        let quiet = spec.dest == me
            && spec.mode == SendMode::Standard
            && self.out.is_empty()
            && p.outbox.is_empty()
            && settled
            && unadvertised;
        if !quiet || self.cfg.protocol != RecvProtocol::Eager || spec.len > self.cfg.eager_limit {
            return Ok(None);
        }
        let Some(r) = self.posted.take_match(spec.ctx, me, spec.tag).map(RecvId) else {
            return Ok(None);
        };
        let st = self.recvs.remove(&r).expect("posted receive");
        debug_assert!(
            matches!(st.stage, RStage::Posted { adv: None, .. })
                || self.mutated(Mutation::SelfIntoAdvertised)
        );
        let (len, outcome) = Self::outcome(&st, me, spec.tag, spec.len);
        self.stats.eager_sends += 1;
        if st.blocker {
            self.unblock(st.ctx);
        }
        Ok(Some(Deliver {
            recv: r,
            range: 0..len as usize,
            done: Some(outcome),
        }))
    }

    /// Cancels a send (`MPI_Cancel`). A send that already matched, or whose buffer was
    /// already released, cannot be cancelled; otherwise the receiver is asked to drop
    /// it from its unexpected queue, and the send completes as cancelled or as sent.
    pub fn cancel_send(&mut self, id: SendId) -> Result<(), CallError> {
        let st = self.sends.get_mut(&id).ok_or(CallError::UnknownRequest)?;
        // a direct write (even one whose one-sided write is still in flight) is
        // already matched; a second cancel is a no-op
        if let (Path::Req(i), false, true) = (st.path, st.cancelling, st.user) {
            st.cancelling = true;
            let to = st.dest;
            self.ctrl(to, Ctrl::CancelSend { i });
        }
        Ok(())
    }

    // ------------------------------------------------------------------ incoming

    /// Processes one incoming control message (`bytes` = header + payload) from `from`.
    /// If it carries a payload for a posted receive, returns where to copy it from;
    /// the driver copies it before releasing the message and before draining outputs,
    /// and completes the receive then if the delivery carries its completion
    /// ([`Deliver::done`]).
    ///
    /// The same as [`Engine::handle_common`], or where that returns `None`,
    /// [`Engine::handle_other`]: a driver that calls those two itself keeps the
    /// common case's result out of memory (the other's comes back through it).
    #[inline]
    pub fn handle(&mut self, from: Rank, bytes: &[u8]) -> Result<Option<Deliver>, ProtocolError> {
        match self.handle_common(from, bytes) {
            Some(r) => r,
            None => self.handle_other(from, bytes),
        }
    }

    /// [`Engine::handle`] for the common case, a small eager send request, in straight
    /// code from its fields; `None` (having changed nothing) for any other message,
    /// malformed ones included, which [`Engine::handle_other`] then handles.
    #[inline]
    pub fn handle_common(
        &mut self,
        from: Rank,
        bytes: &[u8],
    ) -> Option<Result<Option<Deliver>, ProtocolError>> {
        let e = wire::decode_small_eager(bytes)?;
        Some(self.small_eager(from, e, bytes))
    }

    /// [`Engine::handle_common`]'s message, decoded: the credits it returns and its
    /// cost taken, then the send request, as [`Engine::handle_frame`] would.
    #[inline(always)]
    fn small_eager(
        &mut self,
        from: Rank,
        e: wire::SmallEager,
        bytes: &[u8],
    ) -> Result<Option<Deliver>, ProtocolError> {
        self.known(from)?;
        let cost = self.cfg.credit_cost((bytes.len() - e.hl) as u64);
        self.arrived(from, e.credit, Some(cost))?;
        let req = SendReqFields {
            ctx: e.ctx,
            tag: e.tag,
            len: e.len,
            flags: e.flags,
            body: Body::Eager,
        };
        let deliver = self.send_req(from, req, e.hl, Some(bytes));
        self.flush(from);
        Ok(deliver)
    }

    /// [`Engine::handle`] for any message (out of line): decodes its header, then
    /// handles it.
    #[inline(never)]
    pub fn handle_other(
        &mut self,
        from: Rank,
        bytes: &[u8],
    ) -> Result<Option<Deliver>, ProtocolError> {
        self.known(from)?;
        let (frame, hl) =
            wire::decode(bytes).map_err(|err| ProtocolError::Malformed { from, err })?;
        self.handle_frame(from, frame, hl, bytes.len(), Some(bytes))
    }

    /// [`Engine::handle`] for a message of `len` bytes that is still arriving, of which
    /// `head` (holding at least the header) is there: if it is an eager send that a
    /// posted receive takes, handles it exactly as `handle` would handle the whole
    /// message and returns the delivery, so that the driver copies the payload into
    /// the receive buffer as it arrives. Otherwise changes nothing and returns `None`:
    /// the driver waits for the whole message and passes it to `handle`.
    pub fn handle_head(
        &mut self,
        from: Rank,
        head: &[u8],
        len: usize,
    ) -> Result<Option<Deliver>, ProtocolError> {
        self.known(from)?;
        let (frame, hl) =
            wire::decode_head(head, len).map_err(|err| ProtocolError::Malformed { from, err })?;
        match frame.msg {
            Ctrl::SendReq {
                ctx,
                tag,
                body: Body::Eager,
                ..
            } if self.posted.has_match(ctx, from, tag) => {
                let d = self.handle_frame(from, frame, hl, len, None)?;
                debug_assert!(d.is_some(), "a matched eager send delivers");
                Ok(d)
            }
            _ => Ok(None),
        }
    }

    #[inline]
    fn known(&self, from: Rank) -> Result<(), ProtocolError> {
        if from >= self.size {
            return Err(ProtocolError::Violation {
                from,
                what: "unknown rank".into(),
            });
        }
        Ok(())
    }

    /// The rest of [`Engine::handle`] once the header is decoded: `len` is the whole
    /// message's length, and `bytes` the whole message, needed only where an eager
    /// payload is kept (unexpected), which [`Engine::handle_head`] never reaches.
    #[inline(always)]
    fn handle_frame(
        &mut self,
        from: Rank,
        frame: wire::Frame,
        hl: usize,
        len_all: usize,
        bytes: Option<&[u8]>,
    ) -> Result<Option<Deliver>, ProtocolError> {
        let violation = |what: &str| ProtocolError::Violation {
            from,
            what: what.to_string(),
        };
        let cost = frame
            .msg
            .consumes_credit()
            .then(|| self.cfg.credit_cost((len_all - hl) as u64));
        self.arrived(from, frame.credit, cost)?;
        let mut deliver = None;
        match frame.msg {
            Ctrl::Credit { m } => self.peers[from as usize].crossing.seen(m),
            Ctrl::RecvReq { ctx, tag, buf, m } => {
                if let TagSel::Tag(t) = tag {
                    if t < 0 {
                        return Err(violation("negative tag"));
                    }
                }
                let replay = !self.mutated(Mutation::RecvReqWins);
                let p = &mut self.peers[from as usize];
                p.recvreq_seen += 1;
                let k = p.recvreq_seen;
                let mut live = true;
                if replay {
                    if p.crossing.replay(m, ctx, tag).is_some() {
                        live = false;
                        self.stats.crossed += 1;
                    }
                } else {
                    p.crossing.seen(m);
                }
                p.adv.push(
                    k,
                    Adv {
                        ctx,
                        tag,
                        buf,
                        live,
                    },
                );
            }
            Ctrl::SendReq {
                ctx,
                tag,
                len,
                flags,
                body,
            } => {
                let req = SendReqFields {
                    ctx,
                    tag,
                    len,
                    flags,
                    body,
                };
                deliver = self.send_req(from, req, hl, bytes);
            }
            Ctrl::Written {
                k,
                tag,
                len,
                msg_len,
            }
            | Ctrl::WrittenInline {
                k,
                tag,
                len,
                msg_len,
            } => {
                let r = self.peers[from as usize]
                    .adv_recv
                    .get(&k)
                    .copied()
                    .ok_or_else(|| violation("direct write into a receive that is not pending"))?;
                let st = self.unpost(r);
                if len > st.cap || len != msg_len.min(st.cap) {
                    return Err(violation("direct write longer than the advertised buffer"));
                }
                self.advertisement_outcome(from, k, false);
                let truncated_from = (msg_len > len).then_some(msg_len);
                if matches!(frame.msg, Ctrl::WrittenInline { .. }) {
                    deliver = Some(Deliver {
                        recv: r,
                        range: hl..hl + len as usize,
                        done: None,
                    });
                }
                self.finish_recv(
                    r,
                    RecvOutcome::Received {
                        source: from,
                        tag,
                        len,
                        truncated_from,
                    },
                );
            }
            Ctrl::Ack { i } | Ctrl::Fin { i } => {
                let s = self
                    .replied(from, i)
                    .ok_or_else(|| violation("acknowledged an unknown send"))?;
                self.finish_send(s, SendOutcome::Sent);
            }
            Ctrl::Nack { i } => {
                let s = self
                    .replied(from, i)
                    .ok_or_else(|| violation("rejected an unknown send"))?;
                self.finish_send(s, SendOutcome::Failed(SendError::NoReceivePosted));
            }
            Ctrl::Retract { k } => {
                let ok = self.peers[from as usize].adv.kill(k).is_some();
                self.ctrl(from, Ctrl::RetractAck { k, ok });
            }
            Ctrl::RetractAck { k, ok } => {
                let pending = self.peers[from as usize].adv_recv.get(&k).copied();
                match (ok, pending) {
                    (true, Some(r)) => {
                        let st = self.unpost(r);
                        if !matches!(
                            st.stage,
                            RStage::Posted {
                                cancelling: true,
                                ..
                            }
                        ) {
                            return Err(violation("retracted a receive that was not cancelled"));
                        }
                        self.finish_recv(r, RecvOutcome::Cancelled);
                    }
                    (false, None) => {}
                    (true, None) => return Err(violation("retracted a completed receive")),
                    (false, Some(_)) => {
                        return Err(violation("refused a retract but sent nothing for it"))
                    }
                }
            }
            Ctrl::CancelSend { i } => {
                let seq = self.unexpected.find_send(from, i);
                // A message read (or being read) into a staging buffer has completed
                // its send already (get protocol, `Fin`): too late to cancel.
                let ok = match seq {
                    Some(seq)
                        if !matches!(
                            self.unexpected.peek(seq).unwrap().data,
                            UData::Staging(_) | UData::Staged(_)
                        ) =>
                    {
                        let ahead = if self.report {
                            self.unexpected.ahead_on_channel(seq)
                        } else {
                            0
                        };
                        let e = self.unexpected.take(seq).expect("found");
                        if self.report {
                            self.out.push_back(Output::Withdrawn {
                                source: from,
                                ctx: e.ctx,
                                tag: e.tag,
                                ahead,
                            });
                        }
                        true
                    }
                    _ => false,
                };
                self.ctrl(from, Ctrl::CancelAck { i, ok });
            }
            Ctrl::CancelAck { i, ok } => {
                let s = self.replied(from, i);
                match (ok, s) {
                    (true, Some(s)) => self.finish_send(s, SendOutcome::Cancelled),
                    (true, None) => return Err(violation("cancelled an unknown send")),
                    (false, Some(s)) => {
                        let st = self.sends.get_mut(&s).expect("waiting send");
                        st.cancelling = false;
                        if !st.needs_reply && st.emitted {
                            self.finish_send(s, SendOutcome::Sent);
                        }
                    }
                    (false, None) => {}
                }
            }
        }
        self.flush(from);
        Ok(deliver)
    }

    /// A send request above [`Config::cross_read_above`] arrived from `from`: if a
    /// stream of this rank's is in flight to it, their traffic crosses, and the
    /// next [`CROSS_HOLD`] sends to it may be read (rule 19).
    #[cold]
    fn crossed_by(&mut self, from: Rank) {
        let p = &mut self.peers[from as usize];
        if from != self.me && p.streaming(&self.cfg) {
            p.cross_left = CROSS_HOLD;
        }
    }

    /// A send request from `from` (its credits taken): matched against the posted
    /// receives, or queued as unexpected. Returns the delivery of an eager payload
    /// that a posted receive takes. `hl`: the header's length; `bytes`: the whole
    /// message, needed only for an unexpected eager payload.
    #[inline(always)]
    fn send_req(
        &mut self,
        from: Rank,
        req: SendReqFields,
        hl: usize,
        bytes: Option<&[u8]>,
    ) -> Option<Deliver> {
        let SendReqFields {
            ctx,
            tag,
            len,
            flags,
            body,
        } = req;
        let mut deliver = None;
        if len > self.cfg.cross_read_above {
            self.crossed_by(from);
        }
        let count_first = !self.mutated(Mutation::CountAfterRelease);
        let p = &mut self.peers[from as usize];
        p.sendreq_seen += u64::from(count_first);
        let i = p.sendreq_seen + u64::from(!count_first);
        let hit = self.posted.take_match(ctx, from, tag).map(RecvId);
        if let Some(r) = hit {
            // `take_match` has taken it off the posted queue; an eager message
            // completes it here, so its state goes at once
            let st = if body == Body::Eager {
                self.recvs
                    .take_if(&r, |s| Some(s.taken()))
                    .expect("posted receive")
            } else {
                self.recvs[&r].taken()
            };
            if let Some(k) = st.adv {
                self.forget_advertised(st.source, k);
                self.advertisement_outcome(from, k, true);
            }
            let (dlen, outcome) = Self::outcome_in(st.cap, from, tag, len);
            if (flags.sync || flags.ready) && body == Body::Eager {
                self.ctrl(from, Ctrl::Ack { i });
            }
            match body {
                Body::Eager => {
                    // the completion goes back with the payload unless an
                    // output waits before it (the common case: no queue)
                    let done = self.out.is_empty().then_some(outcome);
                    if done.is_none() {
                        self.out.push_back(Output::RecvDone { recv: r, outcome });
                    }
                    deliver = Some(Deliver {
                        recv: r,
                        range: hl..hl + dlen as usize,
                        done,
                    });
                }
                Body::Rndv(src) | Body::GetNow(src) => {
                    self.start_get(r, from, i, src, dlen, outcome);
                }
            }
            if st.blocker {
                self.unblock(st.ctx);
            }
        } else if flags.ready {
            self.ctrl(from, Ctrl::Nack { i });
        } else {
            self.unexpected_send(from, i, ctx, tag, len, flags, body, hl, bytes);
        }
        if !count_first {
            self.peers[from as usize].sendreq_seen += 1;
        }
        deliver
    }

    /// A send request that no posted receive takes: queued as unexpected, its eager
    /// payload copied out of the message (`bytes`, the whole message; `hl`, its
    /// header's length), a get-protocol payload read into a staging buffer at once.
    /// Out of line: a matched send's path (the common case) stays short.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn unexpected_send(
        &mut self,
        from: Rank,
        i: u64,
        ctx: Ctx,
        tag: Tag,
        len: u64,
        flags: wire::SendFlags,
        body: Body,
        hl: usize,
        bytes: Option<&[u8]>,
    ) {
        let data = match body {
            Body::Eager => UData::Eager(self.spares.copy(
                &bytes.expect("handle_head hands over matched sends only")[hl..],
                self.copy_early.0,
            )),
            Body::Rndv(src) => UData::Rndv(src),
            Body::GetNow(src) => {
                let xfer = XferId(self.id());
                self.out.push_back(Output::Get {
                    xfer,
                    from,
                    src,
                    len,
                    into: GetInto::Staging,
                });
                UData::Staging(xfer)
            }
        };
        let staging = if let UData::Staging(x) = data {
            Some(x)
        } else {
            None
        };
        let seq = self.unexpected.push(UEntry {
            src: from,
            ctx,
            tag,
            i,
            len,
            flags,
            data,
        });
        if let Some(x) = staging {
            let owner = StageOwner::Unexpected(seq);
            self.xfers.insert(
                x,
                Xfer {
                    from,
                    i,
                    owner,
                    staged: true,
                },
            );
        }
    }

    /// The one-sided write emitted as [`Output::Put`] for `send` has completed locally:
    /// the send buffer may be reused. Completes the send (`SendDone` with
    /// [`SendOutcome::Sent`], or `BufferFree` for a buffered send). Fails with
    /// [`CallError::UnknownRequest`], changing nothing, when `send` is unknown, already
    /// complete, or has no write in flight (it was not sent by `Output::Put`).
    pub fn put_done(&mut self, send: SendId) -> Result<(), CallError> {
        match self.sends.get(&send) {
            Some(st) if st.path == Path::Put => {
                self.finish_send(send, SendOutcome::Sent);
                Ok(())
            }
            _ => Err(CallError::UnknownRequest),
        }
    }

    /// A one-sided read of [`Output::Get`] finished. For a staging read, `staged` is the
    /// buffer that was read into.
    pub fn get_done(&mut self, xfer: XferId, staged: Option<Vec<u8>>) -> Result<(), CallError> {
        let x = self.xfers.remove(&xfer).ok_or(CallError::UnknownRequest)?;
        self.ctrl(x.from, Ctrl::Fin { i: x.i });
        let data = staged.unwrap_or_default();
        match x.owner {
            StageOwner::Unexpected(seq) => {
                if let Some(e) = self.unexpected.get_mut(seq) {
                    e.data = UData::Staged(data);
                }
            }
            StageOwner::Probed(m) => {
                if let Some(e) = self.probed.get_mut(&m) {
                    e.data = UData::Staged(data);
                }
            }
            StageOwner::Recv(r, outcome) => {
                if x.staged {
                    let mut d = data;
                    if let RecvOutcome::Received { len, .. } = outcome {
                        d.truncate(len as usize);
                    }
                    self.out.push_back(Output::CopyIn { recv: r, data: d });
                }
                self.finish_recv(r, outcome);
            }
        }
        Ok(())
    }
}

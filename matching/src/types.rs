//! Identifiers, envelopes, settings and errors shared by the engine and the wire format.

use std::fmt;

/// A rank in the job (`MPI_COMM_WORLD` numbering).
pub type Rank = u32;
/// A communicator's context id: traffic in one context never matches receives in another.
pub type Ctx = u32;
/// An MPI tag. Valid user tags are `0 ..= TAG_UB`.
pub type Tag = i32;

/// Largest tag a user may send with (`MPI_TAG_UB`).
pub const TAG_UB: Tag = i32::MAX;

/// Memory of a peer exposed for one-sided access (same shape as the transport's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RemoteBuf {
    /// Address in the exposing process.
    pub addr: u64,
    /// Length in bytes; nothing outside `addr .. addr + len` may be touched.
    pub len: u64,
    /// Transport key (RDMA rkey; 0 for shared memory).
    pub key: u64,
}

/// Source selector of a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A specific rank.
    Rank(Rank),
    /// `MPI_ANY_SOURCE`.
    Any,
}

impl Source {
    pub(crate) fn matches(self, r: Rank) -> bool {
        match self {
            Source::Any => true,
            Source::Rank(s) => s == r,
        }
    }
}

/// Tag selector of a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TagSel {
    /// A specific tag.
    Tag(Tag),
    /// `MPI_ANY_TAG`.
    Any,
}

impl TagSel {
    pub(crate) fn matches(self, t: Tag) -> bool {
        match self {
            TagSel::Any => true,
            TagSel::Tag(x) => x == t,
        }
    }
}

/// Identifies a receive request of this engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecvId(pub u64);

/// Identifies a send request of this engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendId(pub u64);

impl crate::map::Numbered for RecvId {
    #[inline]
    fn number(self) -> u64 {
        self.0
    }
}

impl crate::map::Numbered for SendId {
    #[inline]
    fn number(self) -> u64 {
        self.0
    }
}

/// A message taken off the unexpected queue by a matched probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId(pub u64);

/// A one-sided read the driver performs for the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XferId(pub u64);

/// What a probe reports about a message: MPI's status fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    pub source: Rank,
    pub tag: Tag,
    pub ctx: Ctx,
    /// Length of the message in bytes.
    pub len: u64,
}

/// MPI send modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SendMode {
    /// `MPI_Send`: eager below the limit, rendezvous above; completes when the buffer
    /// may be reused.
    #[default]
    Standard,
    /// `MPI_Ssend`: completes only once a receive has matched the message.
    Synchronous,
    /// `MPI_Rsend`: the receive must already be posted; if it is not, the send
    /// completes with [`SendError::NoReceivePosted`] and the message is discarded.
    Ready,
    /// `MPI_Bsend`: the data is copied into the attached buffer and the send completes
    /// at once; fails with [`SendError::BufferTooSmall`] when the buffer lacks room.
    Buffered,
}

/// Which side matches sends with receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MatchingMode {
    /// Receivers advertise receives to senders; senders write directly when they find
    /// a match (the rsmpi protocol).
    #[default]
    Both,
    /// Classic MPI: only the receiver matches.
    Receiver,
}

/// How a send travels when the sender found no advertised receive (the paper's
/// receiver-side protocols).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum RecvProtocol {
    /// Payload inside the send request up to the eager limit; rendezvous (the
    /// receiver reads with a one-sided get once matched) above it. The paper's
    /// "buffer" protocol for small messages.
    #[default]
    Eager,
    /// The send request carries no payload; the receiver reads the payload at once,
    /// into the matched receive or, if none, into a staging buffer, so the sender
    /// completes early.
    Get,
    /// The send request carries no payload; the receiver reads it only once a receive
    /// matched (pure rendezvous, zero copy; the send is effectively synchronous).
    Sync,
}

/// Deliberately broken protocol rules, for showing that the model checker has teeth.
/// Never set outside tests; they take effect only with the `mutations` feature.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mutation {
    #[default]
    None,
    /// Rule 5 broken: a crossing receive request always stays live at the sender.
    RecvReqWins,
    /// Rule 6 broken: receives are advertised even while an ANY_SOURCE receive is
    /// pending.
    NoHold,
    /// Rule 6 ordering detail broken: a send request is counted in `m` only after the
    /// receives its match released were advertised.
    CountAfterRelease,
    /// Adaptive advertising broken: a receive left unadvertised by a pause does not
    /// hold later receives back from advertising.
    PausedNoHold,
    /// Asynchronous direct writes broken: a send written by `Output::Put` completes
    /// when the write is posted instead of at `Engine::put_done`.
    SendDoneBeforePut,
    /// `Engine::send_to_self` broken: it takes a posted receive although a message of
    /// this rank to itself is still on its way.
    SelfPastInFlight,
    /// `Engine::send_to_self` broken: it takes a posted receive although a receive is
    /// advertised to this rank itself.
    SelfIntoAdvertised,
}

/// Run-time settings of an engine. Every rank of a job must use the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    pub matching: MatchingMode,
    pub protocol: RecvProtocol,
    /// Largest payload carried inside a send request (`RecvProtocol::Eager`).
    pub eager_limit: u64,
    /// Largest direct write sent inline in its notice (copied by the receiver when
    /// it reads the notice) instead of by a one-sided write; 0 = always one-sided.
    pub inline_limit: u64,
    /// Control messages one rank may have outstanding towards one peer. The
    /// transport's ring must hold `credits + credits / low_water + 2` messages.
    pub credits: u32,
    /// A receiver returns credits in an explicit message once this many are owed.
    pub low_water: u32,
    /// A receiver whose credits all ride back on its own messages still tells its
    /// sender how far it has read, in an explicit `Credit{m}`, once this many send
    /// requests have come since it last did (rule 13), so that the sender's list of
    /// send requests kept for crossing replays stays bounded. Never more often than
    /// every `low_water` (a smaller value counts as `low_water`). Each tell is a
    /// message of its own: on a small channel (RDMA rings of 64 KiB, `low_water` 5) a
    /// ping-pong sent one after every fifth message; rsmpi uses
    /// [`TELL_AFTER`](crate::TELL_AFTER).
    pub tell_after: u32,
    /// Size-weighted credits: with `credit_unit` = U > 0 a message carrying `p` payload
    /// bytes costs `1 + p / U` credits, so a channel sized in bytes holds many small
    /// messages or few large ones; 0 = one credit per message. A cost is capped at
    /// `credits - low_water + 1`: a sender short of credits then always has at least
    /// `low_water` owed to it, which the receiver returns explicitly (no deadlock).
    /// Choose `credits` so that the largest message stays under the cap.
    pub credit_unit: u64,
    /// Adaptive advertising: once this many receives advertised to one peer in a row
    /// were matched by that peer's send requests instead (the peer sent before it saw
    /// them: the advertisement was wasted), the next `adapt_pause` receives from that
    /// peer are not advertised and are matched here, as ANY_SOURCE ones are. A pause
    /// that ends in another wasted advertisement doubles (up to 64 times
    /// `adapt_pause`); a direct write ends it. 0 = always advertise.
    pub adapt_after: u32,
    /// See `adapt_after`.
    pub adapt_pause: u32,
    /// Receives whose capacity is at most this many bytes are not advertised (they
    /// are matched here and hold later receives back, as paused ones do). With the
    /// eager protocol a message that fits the eager limit costs one control message
    /// either way, so advertising such a receive only adds its receive request; rsmpi
    /// sets this to the eager limit. 0 = advertise receives of every size.
    pub advertise_above: u64,
    /// A standard send of more than this many bytes that its driver marks
    /// (`SendSpec::read_advised`, the transport's advice) goes as a get-now request
    /// (its receiver reads it at once, into the receive or a staging buffer) although
    /// the eager limit would carry it, when it is
    /// *lone*: nothing of this rank's is in flight to the destination (no send waiting
    /// for a reply, none queued, every credit but a few control messages' back). A
    /// stream of sends keeps the eager channel after its first. The receiver takes
    /// either kind of send request, so ranks may differ. `u64::MAX` = never.
    pub lone_read_above: u64,
    /// A standard send of more than this many bytes, within the eager limit, goes as
    /// a get-now request (read once by its receiver, as a lone send is) while traffic
    /// *crosses*: the destination's own send requests of more than this many bytes
    /// have been arriving while a stream of this rank's was in flight to it (two
    /// sends or more unfinished, or more credits missing than an eager-limit message
    /// and a few control messages cost). Each such arrival lets the next
    /// [`CROSS_HOLD`](crate::CROSS_HOLD) sends to that peer be read. A one-way stream,
    /// a ping-pong and an exchange of one message each way keep the eager channel
    /// (and the lone rule). With streams both ways both CPUs copy, and one read each
    /// costs them less than a copy in and a copy out each. The receiver takes either
    /// kind of send request, so ranks may differ. `u64::MAX` = never.
    pub cross_read_above: u64,
    /// A standard send of more than this many bytes, within the eager limit, to
    /// another rank, that its driver marks (`SendSpec::read_advised`, the transport's
    /// advice for a stream's send) goes as a get-now request (read once by its
    /// receiver, as a lone send is) when it is *not* lone: a send of a stream, behind
    /// others of this rank's still in flight to the destination. Where the two CPUs
    /// do not share a cache, a stream through the eager channel moves every line
    /// between them twice, and the receiver's copy out of lines the sender has just
    /// written sets the stream's pace; one read takes clean lines once. The driver
    /// asks the transport only for such sends ([`Engine::stream_now`](crate::Engine::stream_now)),
    /// and the transport answers from what both ways take (shared memory measures
    /// them per peer). The receiver takes either kind of send request, so ranks may
    /// differ. `u64::MAX` = never.
    pub stream_read_above: u64,
    #[doc(hidden)]
    pub mutation: Mutation,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            matching: MatchingMode::Both,
            protocol: RecvProtocol::Eager,
            eager_limit: 8192,
            inline_limit: 0,
            credits: 32,
            low_water: 16,
            tell_after: 0,
            credit_unit: 0,
            adapt_after: 4,
            adapt_pause: 64,
            advertise_above: 0,
            lone_read_above: u64::MAX,
            cross_read_above: u64::MAX,
            stream_read_above: u64::MAX,
            mutation: Mutation::None,
        }
    }
}

impl Config {
    /// Ring capacity (messages per ordered pair) a transport needs for these settings
    /// when credits count messages (`credit_unit` = 0).
    pub fn ring_slots_needed(&self) -> u32 {
        self.credits + self.credits / self.low_water.max(1) + 2
    }

    /// Credits a message with `payload` bytes of payload costs (the sender and the
    /// receiver both compute it from the payload length).
    #[inline]
    pub fn credit_cost(&self, payload: u64) -> u32 {
        if payload < self.credit_unit {
            // a small message, the common case: no division on the per-message path
            return 1;
        }
        match payload.checked_div(self.credit_unit) {
            None => 1,
            Some(units) => {
                let cap = self.credits.saturating_sub(self.low_water) + 1;
                (1 + units).min(u64::from(cap)) as u32
            }
        }
    }
}

/// How a receive ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecvOutcome {
    /// Matched a message; `len` bytes were placed in the buffer. If the message was
    /// longer than the buffer, `truncated_from` holds its full length (MPI_ERR_TRUNCATE)
    /// and nothing was written past the buffer.
    Received {
        source: Rank,
        tag: Tag,
        len: u64,
        truncated_from: Option<u64>,
    },
    /// Cancelled before any message matched it.
    Cancelled,
}

/// How a send ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendOutcome {
    /// The buffer may be reused (and, for synchronous sends, a receive matched).
    Sent,
    /// Cancelled before any receive matched it.
    Cancelled,
    /// The send failed (ready mode without a posted receive).
    Failed(SendError),
}

/// Errors of a send that are reported on its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SendError {
    /// Ready-mode send with no matching receive posted at the destination.
    #[error("ready-mode send found no matching receive posted at the destination")]
    NoReceivePosted,
    /// Buffered send larger than the free space of the attached buffer.
    #[error("buffered send needs {needed} bytes but the attached buffer has {free} free")]
    BufferTooSmall { needed: u64, free: u64 },
}

/// Errors of an API call into the engine (bad input).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("rank {rank} is out of range for a job of {size} ranks")]
    InvalidRank { rank: Rank, size: u32 },
    #[error("tag {0} is invalid (valid tags are 0..={TAG_UB})")]
    InvalidTag(Tag),
    #[error("unknown or already completed request")]
    UnknownRequest,
    #[error("{0}")]
    Buffer(SendError),
    #[error("no buffer is attached for buffered sends")]
    NoBufferAttached,
    #[error("a buffer is already attached")]
    BufferAlreadyAttached,
}

/// A peer sent something the protocol does not allow; the job should be aborted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("malformed control message from rank {from}: {err}")]
    Malformed {
        from: Rank,
        err: crate::wire::WireError,
    },
    #[error("rank {from} violated the protocol: {what}")]
    Violation { from: Rank, what: String },
}

/// Counters of which path messages took, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stats {
    /// Sends matched at the sender and written straight into an advertised receive
    /// buffer (one-sided, or inline in the notice for small ones).
    pub direct_writes: u64,
    /// Of those, the ones carried inline in their notice.
    pub inline_writes: u64,
    /// Sends that went as a send request with the payload inline, and standard
    /// eager sends to itself that went straight into a posted receive (rule 17,
    /// [`Engine::send_to_self`](crate::Engine::send_to_self)).
    pub eager_sends: u64,
    /// Sends that went as a rendezvous send request (receiver reads).
    pub rndv_sends: u64,
    /// Of those, lone sends the eager limit would have carried
    /// ([`Config::lone_read_above`]).
    pub lone_reads: u64,
    /// Of those, sends the eager limit would have carried, read because traffic
    /// crossed ([`Config::cross_read_above`]).
    pub cross_reads: u64,
    /// Of those, sends of a stream the eager limit would have carried, read on the
    /// transport's advice ([`Config::stream_read_above`]).
    pub stream_reads: u64,
    /// Receive requests advertised to senders.
    pub advertised: u64,
    /// Advertised receives consumed at the sender by the crossing rule.
    pub crossed: u64,
    /// Control messages queued because the peer had no credits.
    pub credit_stalls: u64,
    /// Receives from a specific source left unadvertised by adaptive advertising.
    pub paused: u64,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "direct={} (inline {}) eager={} rndv={} (lone {}, crossing {}, stream {}) advertised={} crossed={} paused={} credit_stalls={}",
            self.direct_writes,
            self.inline_writes,
            self.eager_sends,
            self.rndv_sends,
            self.lone_reads,
            self.cross_reads,
            self.stream_reads,
            self.advertised,
            self.crossed,
            self.paused,
            self.credit_stalls
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Config;

    /// A message's credit cost: one below the unit (no division), `1 + p / U` above,
    /// capped at `credits - low_water + 1`; one always without a unit.
    #[test]
    fn credit_cost() {
        let none = Config::default();
        assert_eq!(none.credit_unit, 0);
        for p in [0, 1, 63, 64, 1 << 20] {
            assert_eq!(none.credit_cost(p), 1, "no unit, {p} bytes");
        }
        let c = Config {
            credit_unit: 64,
            credits: 32,
            low_water: 16,
            ..Config::default()
        };
        for (p, cost) in [
            (0, 1),
            (1, 1),
            (63, 1),
            (64, 2),
            (127, 2),
            (128, 3),
            (1 << 20, 17),
        ] {
            assert_eq!(c.credit_cost(p), cost, "unit 64, {p} bytes");
        }
    }
}

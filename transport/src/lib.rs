//! The transport interface of rsmpi.
//!
//! A transport moves bytes between the ranks of one job and knows nothing about MPI:
//! no tags, no communicators, no matching. The protocol layer (`matching`, driven by
//! `rsmpi-core`) decides *what* to move; a transport only offers:
//!
//! * an **ordered control channel** per peer ([`Transport::try_send`] /
//!   [`Transport::poll`]): small messages (a header plus an optional inline payload),
//!   delivered exactly once and in order per (sender, receiver) pair;
//! * **one-sided put and get** ([`Transport::put`] / [`Transport::get`]) into and out
//!   of memory that the peer exposed with [`Transport::expose`]; they return once
//!   *posted* and, where the transport cannot finish them at once (RDMA), report their
//!   completion later through [`Transport::poll_done`], so many can be in flight;
//! * **capabilities** ([`Caps`]) so that the protocol layer picks a path by size and
//!   capability, never by transport name.
//!
//! The one ordering rule that ties them together: data written by `put` to a peer is
//! visible in the peer's memory before any control message sent to that peer *after*
//! the `put` returned (was posted) is delivered, even while the put itself has not yet
//! reported its completion. This is what lets a sender write a payload straight
//! into a receive buffer and then announce it on the control channel (an RDMA WRITE
//! followed by a SEND on the same RC queue pair; `process_vm_writev` followed by a ring
//! entry on shared memory).
//!
//! ```
//! use transport::{Caps, Posted, Rank, RemoteBuf, Transport, TransportError};
//!
//! /// A one-rank transport: everything sent to self comes back from `poll`.
//! struct Loopback(std::collections::VecDeque<Vec<u8>>);
//!
//! impl Transport for Loopback {
//!     fn rank(&self) -> Rank { 0 }
//!     fn size(&self) -> u32 { 1 }
//!     fn caps(&self) -> Caps { Caps { max_ctrl: 1 << 16, ctrl_slots: 64, ring_bytes: 0, put: false, get: false, registers: false, put_inline: 0, put_bounce: 0, lone_read_above: u64::MAX, cross_read_above: u64::MAX } }
//!     fn try_send(&mut self, _peer: Rank, header: &[u8], payload: &[u8]) -> Result<(), TransportError> {
//!         self.0.push_back([header, payload].concat());
//!         Ok(())
//!     }
//!     fn poll(&mut self, max: usize, f: &mut dyn FnMut(Rank, &[u8])) -> Result<usize, TransportError> {
//!         let mut n = 0;
//!         while n < max {
//!             let Some(m) = self.0.pop_front() else { break };
//!             f(0, &m);
//!             n += 1;
//!         }
//!         Ok(n)
//!     }
//!     fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError> {
//!         Ok(RemoteBuf { addr: addr as u64, len: len as u64, key: 0 })
//!     }
//!     fn put(&mut self, _: Rank, _: &[u8], _: RemoteBuf, _: u64, _: u64) -> Result<Posted, TransportError> { Err(TransportError::Unsupported("put")) }
//!     fn get(&mut self, _: Rank, _: &mut [u8], _: RemoteBuf, _: u64, _: u64) -> Result<Posted, TransportError> { Err(TransportError::Unsupported("get")) }
//! }
//!
//! let mut t = Loopback(Default::default());
//! t.try_send(0, b"hdr", b"payload").unwrap();
//! let mut got = Vec::new();
//! t.poll(16, &mut |from, m| got.push((from, m.to_vec()))).unwrap();
//! assert_eq!(got, vec![(0, b"hdrpayload".to_vec())]);
//! ```
#![deny(unsafe_code)]

pub mod copy;
pub mod mem;
pub mod route;

/// A rank in the job (`MPI_COMM_WORLD` numbering).
pub type Rank = u32;

/// Memory of a peer that the peer exposed for one-sided access: the address in the
/// peer's address space (always the virtual address, also for transports whose
/// registrations are addressed by offset: they ignore it), its length, and a
/// transport-specific key (an RDMA rkey; 0 for shared memory). Only the range
/// `addr .. addr + len` may ever be touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RemoteBuf {
    pub addr: u64,
    pub len: u64,
    pub key: u64,
}

/// What a transport can do, and its size limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Largest control message (header + inline payload) `try_send` accepts.
    pub max_ctrl: usize,
    /// Control messages that may be in flight to one peer before `try_send` reports
    /// `Full` (the receiving ring's capacity). The protocol's credits never exceed it.
    pub ctrl_slots: usize,
    /// Bytes of one peer's receiving channel that messages in flight may fill, or 0
    /// when the channel counts messages, not bytes. With it the protocol weighs its
    /// credits by message size, so that many small messages can be in flight where
    /// only `ctrl_slots` maximum-size ones fit. The transport reserves its own slack
    /// (wrap-around padding) before reporting it; each message takes its length
    /// rounded up to 64 bytes plus 8.
    pub ring_bytes: usize,
    /// One-sided write into exposed peer memory is available.
    pub put: bool,
    /// One-sided read from exposed peer memory is available.
    pub get: bool,
    /// Exposing memory registers it (costs a system call or more, holds a resource):
    /// every [`Transport::expose`] must be paired with a [`Transport::unexpose`] when
    /// the request using the memory ends. `false` (shared memory): exposing is free —
    /// the descriptor is `{ addr, len, key: 0 }`, which callers may build themselves
    /// without calling `expose` — and `unexpose` does nothing.
    pub registers: bool,
    /// Capability tier 1: a `put` of up to this many bytes travels inside its work
    /// request (RDMA inline data): no registration, no copy the caller waits for, and
    /// the cheapest way to move a few bytes one-sidedly. 0 = no such tier. The protocol
    /// sends small direct writes one-sidedly only where this is set; elsewhere (shared
    /// memory) a small payload rides in the control message, which is faster there.
    pub put_inline: usize,
    /// Capability tier 2: a `put` of up to this many bytes is copied into memory the
    /// transport registered beforehand (a bounce buffer) and is finished for the caller
    /// when `put` returns. Above it (tier 3) the transport works from the caller's
    /// buffer itself (zero copy, registered on the fly) and may report the completion
    /// later. 0 = no bounce tier.
    pub put_bounce: usize,
    /// A message of more than this many bytes, sent while nothing else of the sender's
    /// is in flight to its destination (a ping-pong's message, not a stream's), is
    /// cheaper read once by its receiver with [`Transport::get`] than copied into the
    /// channel and out again, even under the protocol's eager limit. `u64::MAX` =
    /// never (transports that have not measured it). A stream's message above it is
    /// read where [`Transport::prefers_read`] advises it, asked with `stream` set.
    pub lone_read_above: u64,
    /// A message of more than this many bytes, sent while the peer's own large sends
    /// keep arriving (traffic crossing both ways), is cheaper read once by its
    /// receiver than carried through the channel, under the protocol's eager limit
    /// too. Unlike a lone message's, this read is not judged per message, so a
    /// transport sets it where the read wins in every state measured. `u64::MAX` =
    /// never.
    pub cross_read_above: u64,
}

/// How a one-sided operation stands when [`Transport::put`] or [`Transport::get`]
/// returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posted {
    /// Finished: the local buffer may be reused (and, for `get`, read).
    Done,
    /// Posted: the transport still uses the local buffer, which the caller keeps alive
    /// and untouched until [`Transport::poll_done`] reports the operation's token.
    Pending,
}

/// Errors a transport reports.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The control channel to this peer has no room now; retry after polling.
    #[error("control channel to rank {0} is full")]
    Full(Rank),
    /// The message is larger than [`Caps::max_ctrl`].
    #[error("control message of {len} bytes exceeds the transport limit of {max}")]
    TooLarge { len: usize, max: usize },
    /// The peer rank does not exist in this job.
    #[error("rank {0} is not part of this job")]
    NoSuchRank(Rank),
    /// A one-sided access fell outside the exposed range.
    #[error("one-sided access of {len} bytes at offset {offset} is outside the exposed buffer of {limit} bytes")]
    OutOfBounds { offset: u64, len: u64, limit: u64 },
    /// The peer is gone (exited or crashed).
    #[error("rank {0} is unreachable: {1}")]
    PeerGone(Rank, String),
    /// The peer refused a one-sided access (for example a bad or revoked key, after
    /// the peer ended the exposure); its memory was not touched.
    #[error("one-sided access to rank {0} was refused: {1}")]
    AccessDenied(Rank, String),
    /// The operation is not offered by this transport.
    #[error("operation {0} is not supported by this transport")]
    Unsupported(&'static str),
    /// The transport cannot run on this machine (no device, no library); the text says
    /// why. Callers may fall back to another transport.
    #[error("{0}")]
    Unavailable(String),
    /// The start-up exchange (launcher / PMI) failed.
    #[error("start-up exchange failed: {0}")]
    Exchange(String),
    /// An operating-system call failed.
    #[error("{call} failed: {source}")]
    Os {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The interface every transport (shm, verbs, ofi) implements.
///
/// All calls are non-blocking. `put`/`get` return once the operation is posted, saying
/// whether it is already finished ([`Posted::Done`]) or will be reported later by
/// [`Transport::poll_done`] ([`Posted::Pending`]). A transport makes progress only
/// inside its own calls: there are no hidden threads moving data.
pub trait Transport {
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Number of ranks in the job.
    fn size(&self) -> u32;
    /// Capabilities and limits.
    fn caps(&self) -> Caps;

    /// Queues one control message, `header` followed by `payload`, to `peer`.
    /// Messages to one peer are delivered in the order they were sent, exactly once.
    /// Returns [`TransportError::Full`] when the peer's ring has no room; nothing is
    /// sent in that case.
    fn try_send(&mut self, peer: Rank, header: &[u8], payload: &[u8])
        -> Result<(), TransportError>;

    /// Delivers up to `max` incoming control messages to `f` as `(source, bytes)`, in
    /// per-source order. The slice is valid only during the call. Returns how many,
    /// plus the records of the transport's own that it took or wrote meanwhile (shared
    /// memory's pulls, a sign of progress for callers that back off while idle).
    fn poll(&mut self, max: usize, f: &mut dyn FnMut(Rank, &[u8]))
        -> Result<usize, TransportError>;

    /// [`Transport::poll`] for callers that can use a message before all of it has
    /// arrived: a transport that streams large messages (shared memory, from a few
    /// KiB) hands those over as [`Incoming::Arriving`] as soon as
    /// their first bytes are there, so that the caller's copy out of the channel
    /// overlaps the sender's copy into it. Everything else, and everything from
    /// transports that keep the default, comes as [`Incoming::Whole`]. Order and
    /// exactly-once delivery are as for `poll`; the message is released when `f`
    /// returns (after the transport has waited for the rest of it).
    fn poll_incoming(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Rank, Incoming<'_>),
    ) -> Result<usize, TransportError> {
        self.poll(max, &mut |from, bytes| f(from, Incoming::Whole(bytes)))
    }

    /// Exposes `len` bytes at local address `addr` for one-sided access by peers and
    /// returns the descriptor to advertise. For shared memory this is the address
    /// itself; network transports register the memory, which can fail (for example
    /// when the registration limit is reached). The exposure lasts until
    /// [`Transport::unexpose`]; a peer's access to memory no longer exposed fails at
    /// the peer and never touches the memory.
    fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError>;

    /// Ends an exposure made by [`Transport::expose`] (the request using the memory
    /// has ended). Only needed where [`Caps::registers`] is set.
    fn unexpose(&mut self, buf: RemoteBuf) {
        let _ = buf;
    }

    /// Writes `src` into `dst` at byte `offset` of the peer's exposed buffer. The write
    /// is visible at the peer before any control message sent after this call returns
    /// (also while it is still [`Posted::Pending`]). `dst` must be a descriptor the peer
    /// produced with [`Transport::expose`] and advertised (the protocol layer guarantees
    /// this); transports check the bounds. On [`Posted::Pending`] the caller keeps `src`
    /// alive and unchanged until `poll_done` reports `token`.
    fn put(
        &mut self,
        peer: Rank,
        src: &[u8],
        dst: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError>;

    /// Reads `dst.len()` bytes from byte `offset` of the peer's exposed buffer `src`.
    /// On [`Posted::Pending`] the caller keeps `dst` alive and does not read it until
    /// `poll_done` reports `token`.
    fn get(
        &mut self,
        peer: Rank,
        dst: &mut [u8],
        src: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError>;

    /// Reports one-sided operations that returned [`Posted::Pending`] and have since
    /// finished, as `(token, outcome)`; an error names the peer (for example
    /// [`TransportError::AccessDenied`] for a write with a revoked key). Returns how
    /// many. Transports whose operations always finish at once keep the default.
    fn poll_done(
        &mut self,
        f: &mut dyn FnMut(u64, Result<(), TransportError>),
    ) -> Result<usize, TransportError> {
        let _ = f;
        Ok(0)
    }

    /// Whether a lone message of `len` bytes to `peer` (above
    /// [`Caps::lone_read_above`], nothing else of this rank's in flight to it) should
    /// now be read by the receiver rather than carried through the channel. Asked
    /// once per such send; a transport that measures both ways per peer answers from
    /// its measurements (and may answer `false` now and then to measure the channel
    /// again). The default follows `Caps::lone_read_above` alone.
    ///
    /// With `stream` set the question is a stream's message's instead (above
    /// [`Caps::lone_read_above`] too, sent while others of this rank's are in flight
    /// to `peer`): whether one read by the receiver carries a stream faster than the
    /// channel, whose two copies then run at once, one on each side. The default
    /// says no: the channel.
    fn prefers_read(&mut self, peer: Rank, len: usize, stream: bool) -> bool {
        let _ = (peer, len);
        !stream
    }

    /// Finishes this rank's traffic before the job ends (`MPI_Finalize`, after its
    /// last barrier): on return nothing this rank sent is still on its way and every
    /// message a peer sent it has arrived (and was dropped: the library above has
    /// finished). The caller then waits for every rank at a fence outside the
    /// transport (the launcher's), and only after it lets the transport go, so that no
    /// rank tears down an endpoint while a peer still reads from its own. Transports
    /// whose teardown cannot disturb a peer keep the default, which does nothing. An
    /// error names a peer that could not be finished with (it may have died); the
    /// transport is still let go.
    fn close(&mut self) -> Result<(), TransportError> {
        Ok(())
    }
}

/// One incoming control message, as [`Transport::poll_incoming`] hands it over.
pub enum Incoming<'a> {
    /// All of the message.
    Whole(&'a [u8]),
    /// A message whose bytes are still being written by the sender.
    Arriving(&'a mut dyn Arriving),
}

/// A control message that is still arriving (see [`Transport::poll_incoming`]).
///
/// Its bytes arrive in order, and the sender is already writing them: every wait
/// below ends as soon as the sender's copy gets there, unless the sender dies, which
/// the transport reports as [`TransportError::PeerGone`].
pub trait Arriving {
    /// Length of the whole message (header and payload).
    fn len(&self) -> usize;
    /// Whether the message is empty (never, for a streamed message).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes that have arrived so far: at least the first
    /// `min(len, STREAM_HEAD)` bytes, which hold any protocol header.
    fn head(&self) -> &[u8];
    /// Copies the message's bytes `offset .. offset + dst.len()` into `dst` as they
    /// arrive, overlapping with the sender's copy.
    fn copy_out(&mut self, offset: usize, dst: &mut [u8]) -> Result<(), TransportError>;
    /// Waits for the whole message and returns it.
    fn whole(&mut self) -> Result<&[u8], TransportError>;
}

/// Bytes at the start of an [`Arriving`] message that are always there when it is
/// handed over: enough for any protocol header.
pub const STREAM_HEAD: usize = 256;

/// The start-up key-value exchange a transport uses to find its peers (the launcher's
/// or PMI's). Keys are per rank: `publish` stores under this rank, `lookup` reads what
/// `rank` published. Everything published before a `fence` is visible to every rank
/// after it.
pub trait Exchange {
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Number of ranks in the job.
    fn size(&self) -> u32;
    /// An identifier unique to this job on this node, made of `[A-Za-z0-9_-]` only, so
    /// that transports can name files after it (shared segments are
    /// `/dev/shm/rsmpi-{job_id}-*`, which the launcher removes when the job ends).
    fn job_id(&self) -> &str;
    /// Publishes `value` under `key` for this rank.
    fn publish(&mut self, key: &str, value: &[u8]) -> Result<(), TransportError>;
    /// Collective barrier over all ranks of the job.
    fn fence(&mut self) -> Result<(), TransportError>;
    /// Reads what `rank` published under `key` (after a fence).
    fn lookup(&mut self, rank: Rank, key: &str) -> Result<Vec<u8>, TransportError>;
}

/// Checks that `len` bytes at `offset` fit inside `buf`; every transport calls this
/// before a one-sided access so that no write can land outside an advertised buffer.
pub fn check_bounds(buf: &RemoteBuf, offset: u64, len: u64) -> Result<(), TransportError> {
    match offset.checked_add(len) {
        Some(end) if end <= buf.len => Ok(()),
        _ => Err(TransportError::OutOfBounds {
            offset,
            len,
            limit: buf.len,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        let b = RemoteBuf {
            addr: 4096,
            len: 100,
            key: 0,
        };
        assert!(check_bounds(&b, 0, 100).is_ok());
        assert!(check_bounds(&b, 99, 1).is_ok());
        assert!(check_bounds(&b, 100, 0).is_ok());
        assert!(matches!(
            check_bounds(&b, 99, 2),
            Err(TransportError::OutOfBounds {
                offset: 99,
                len: 2,
                limit: 100
            })
        ));
        assert!(check_bounds(&b, u64::MAX, 2).is_err());
    }
}

//! The protocol brain of rsmpi: MPI point-to-point matching done at the sender *and*
//! the receiver, as a deterministic state machine with no I/O, threads, clock or
//! `unsafe`.
//!
//! # The protocol
//!
//! Each ordered pair of ranks has a FIFO control channel each way. A receiver R that
//! posts a receive for a specific source S first looks in its unexpected queue; if
//! nothing there matches, it **advertises** the receive to S with a receive request
//! `RecvReq{ctx, tag, buffer, m}` (the k-th to S; `m` = send requests from S that R had
//! processed). S keeps advertised receives in an associative memory: per context a FIFO
//! per tag plus a FIFO of ANY_TAG entries, so the earliest live entry matching a send
//! is found in O(1). When S sends and finds an entry, it **writes the payload straight
//! into R's buffer** and queues a `Written{k}` notice behind it: R's CPU takes no part.
//! The write is only posted then (the transport makes it visible at R before any
//! control message queued after it); the send completes when the driver reports the
//! write complete with [`Engine::put_done`], which may be after R has completed the
//! receive.
//!
//! Otherwise S falls back to receiver-side matching with a send request `SendReq` that
//! carries the payload (eager, up to [`Config::eager_limit`]) or a descriptor R reads
//! with a one-sided get (rendezvous). When a send request and a receive request
//! **cross** (each was sent before the other arrived), the send request wins: R matches
//! it as usual, and S, reading a receive request whose `m` is below the send requests
//! it issued, replays R's matching over the ones R had not seen and drops the
//! advertisements they consumed. Both sides decide from the same counters, so they
//! agree without another message.
//!
//! ANY_SOURCE receives are matched at the receiver only; while one is pending in a
//! context (or a receive whose buffer cannot be advertised), later receives in that
//! context are held back and advertised, in posting order, once it is matched. A
//! send request is counted in `m` *before* it is matched, so receive requests released
//! by that match carry an `m` that includes it.
//!
//! Cancelling an advertised receive retracts it at the sender, which answers whether
//! it was still live: exactly one of cancel and completion succeeds. Sends are
//! cancelled at the receiver's unexpected queue. Credits bound the control messages in
//! flight per pair; when they run out, messages wait in order in a local outbox.
//!
//! `docs/protocol.md` in the repository states every rule; `tests/model_check.rs`
//! explores every interleaving of small programs against them.
//!
//! # Driving two engines by hand
//!
//! The driver moves control messages between engines and performs the one-sided
//! reads and writes the engines ask for, reporting each one's completion. Here rank 1
//! posts a receive first, so rank 0's send becomes a direct write:
//!
//! ```
//! use matching::*;
//!
//! let mut e = [Engine::new(0, 2, Config::default()), Engine::new(1, 2, Config::default())];
//! let mut rbuf = [0u8; 8];
//! let sbuf = *b"hi there";
//!
//! // rank 1: MPI_Irecv(rbuf, source 0, tag 7); its buffer "address" is 0x1000
//! let buf = RemoteBuf { addr: 0x1000, len: 8, key: 0 };
//! let spec = RecvSpec { source: Source::Rank(0), tag: TagSel::Tag(7), ctx: 0, capacity: 8, buf: Some(buf) };
//! let r = e[1].post_recv(spec).unwrap();
//!
//! // deliver rank 1's outputs: one RecvReq to rank 0
//! while let Some(o) = e[1].poll_output() {
//!     let Output::Transmit { to: 0, header, payload: None } = o else { panic!("{o:?}") };
//!     e[0].handle(1, header.as_bytes()).unwrap();
//! }
//! assert_eq!(e[0].advertised_by(1), 1);
//!
//! // rank 0: MPI_Isend(sbuf, dest 1, tag 7) finds the advertised receive
//! let sbuf_desc = RemoteBuf { addr: 0x2000, len: 8, key: 0 };
//! let s = e[0].start_send(SendSpec { dest: 1, tag: 7, ctx: 0, len: 8, mode: SendMode::Standard, buf: sbuf_desc, read_advised: false }).unwrap();
//! let mut notices = vec![];
//! while let Some(o) = e[0].poll_output() {
//!     match o {
//!         Output::Put { to: 1, send, dst, len } => {
//!             assert_eq!((send, dst, len), (s, buf, 8));
//!             rbuf.copy_from_slice(&sbuf[..len as usize]); // post the one-sided write
//!         }
//!         Output::Transmit { to: 1, header, payload: None } => notices.push(header),
//!         o => panic!("{o:?}"), // in particular no SendDone: the write is in flight
//!     }
//! }
//! assert_eq!(&rbuf, b"hi there"); // before rank 1 did anything
//!
//! // the write completes at rank 0: only now is the send done
//! e[0].put_done(s).unwrap();
//! assert_eq!(e[0].poll_output(), Some(Output::SendDone { send: s, outcome: SendOutcome::Sent }));
//!
//! // rank 1 reads the notice when it next polls
//! e[1].handle(0, notices[0].as_bytes()).unwrap();
//! let done = e[1].poll_output().unwrap();
//! let want = RecvOutcome::Received { source: 0, tag: 7, len: 8, truncated_from: None };
//! assert_eq!(done, Output::RecvDone { recv: r, outcome: want });
//! assert_eq!(e[0].stats().direct_writes, 1);
//! ```
#![forbid(unsafe_code)]

mod advertised;
mod engine;
mod map;
mod queues;
mod types;
pub mod wire;

pub use engine::{
    Deliver, Early, Engine, GetInto, Output, Posting, RecvSpec, SendSpec, CROSS_HOLD, TELL_AFTER,
};
pub use map::{Numbered, OneMap, Window};
pub use types::*;

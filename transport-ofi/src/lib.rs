//! The libfabric transport of rsmpi: one reliable-datagram (`FI_EP_RDM`) endpoint per
//! rank carries the ordered control channel with `fi_send`/`fi_recv`, and one-sided
//! `put`/`get` become `fi_write`/`fi_read` into memory the peer registered with
//! `fi_mr_reg`. It runs over whatever provider libfabric offers: `tcp;ofi_rxm` between
//! hosts over Ethernet, `verbs;ofi_rxm` over InfiniBand/RoCE, `shm` on one node, ...
//!
//! ```no_run
//! use transport::Transport;
//! use transport_ofi::{OfiConfig, OfiTransport};
//!
//! # fn demo(ex: &mut dyn transport::Exchange) -> Result<(), transport::TransportError> {
//! // Every rank of the job calls `new` with the launcher's start-up exchange.
//! let mut t = OfiTransport::new(ex, &OfiConfig::from_env())?;
//! eprintln!("libfabric provider: {}", t.provider_name());
//! let me = t.rank();
//! t.try_send(me, b"hello ", b"self")?;
//! // Manual progress: completions (and peers' one-sided accesses) advance in `poll`.
//! while t.poll(16, &mut |from, msg| println!("{from}: {}", String::from_utf8_lossy(msg)))? == 0 {}
//! # Ok(()) }
//! ```
//!
//! # Building
//!
//! The cargo feature `libfabric` (off by default) compiles `src/shim.c` with the `cc`
//! crate against the system's headers (`<rdma/fabric.h>`, ...) and links `libfabric`
//! (Debian: `libfabric-dev`; tested with 1.17). Without the feature the crate builds
//! with no system package and no C compiler, and [`OfiTransport::new`] returns
//! [`transport::TransportError::Unsupported`], so that the default build of rsmpi needs nothing
//! beyond Rust.
//!
//! **Why a C shim rather than a `-sys` crate.** libfabric's API is almost entirely
//! `static inline` functions (`fi_send`, `fi_cq_read`, `fi_mr_reg`, `fi_close`, ...)
//! that call through per-provider ops tables, so there are no symbols to link against,
//! and bindgen cannot generate callable bindings for static inline functions anyway.
//! The existing crates do not fit: `ofi-libfabric-sys` requires libfabric >= 1.22 while
//! Debian ships 1.17, and `lamellar-libfabric-sys` builds a vendored 1.22 from source
//! (about 6 minutes here) instead of using the system library. A C file of about 500
//! lines that exposes the two dozen calls we need as plain functions builds in a second
//! against the system headers (tested with 1.17; it uses nothing newer than the 1.5
//! memory-registration API). Only opaque pointers and three small POD structs of our
//! own (`rsofi_info_desc`, `rsofi_comp`, `rsofi_cqerr`) cross the boundary; no
//! libfabric structure layout is mirrored in Rust. All `unsafe` Rust is in one module
//! (`fabric::ffi`), every block with a `// SAFETY:` comment.
//!
//! # Configuration
//!
//! [`OfiConfig::from_env`] reads `RSMPI_OFI_PROVIDER` (for example `tcp;ofi_rxm` or
//! `shm`); libfabric itself also honours `FI_PROVIDER` (and its other `FI_*`
//! variables). `prefer_external` (set by rsmpi when the job spans hosts or network
//! namespaces) makes the transport pick an fi_getinfo result whose address is not a
//! loopback one. `RSMPI_OFI_MR_LOCAL=1` forces the `FI_MR_LOCAL` code path (every local
//! buffer registered and passed with its descriptor) on providers that do not need it,
//! so that tests cover it with `tcp;ofi_rxm`. `RSMPI_OFI_NO_SAW=1` (a testing aid)
//! stops the transport from asking for `FI_ORDER_SAW`, which makes `shm` address its
//! registrations by virtual address, so that tests cover that mode too.
//!
//! # Provider selection
//!
//! fi_getinfo is asked for `FI_EP_RDM` with `FI_MSG | FI_RMA | FI_SEND | FI_RECV |
//! FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE`, `FI_AV_TABLE`, manual data
//! and control progress, no mode bits (our operation contexts are plain integers, so
//! providers needing `FI_CONTEXT` are not used), the mr_mode bits we can handle
//! (`FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT`;
//! `FI_MR_RAW` is not supported) and message ordering `FI_ORDER_SAS | FI_ORDER_SAW` on
//! both sides. If nothing matches, the ordering and then the progress model are
//! relaxed step by step. Among the results the first usable one is taken; without an
//! explicit provider (`RSMPI_OFI_PROVIDER` or `FI_PROVIDER`), `sockets` and
//! `udp;ofi_rxd` are skipped (they hang here). With `prefer_external` the first result
//! with a routable (or non-IP) address is taken, else a link-local one; loopback never.
//!
//! (With `FI_ORDER_SAW` requested, `shm` in libfabric 1.17 answers with registrations
//! addressed by offset, and without it with `FI_MR_VIRT_ADDR`; `tcp;ofi_rxm` addresses
//! them by offset either way.)
//!
//! # Start-up
//!
//! Every rank opens fabric, domain, completion queue, address vector (`FI_AV_TABLE`
//! sized for the job) and endpoint, posts its receive buffers, then publishes its
//! `fi_getname` bytes under `ofi.addr`, its provider name under `ofi.prov` and its
//! registration addressing mode under `ofi.mode`, and fences. It then checks that all
//! ranks chose the same provider and mode (a [`transport::TransportError::Exchange`] naming the
//! ranks and providers otherwise; a rank that failed to open publishes its error in
//! `ofi.prov` so that the others report it instead of waiting), inserts all addresses
//! in rank order (so that `fi_addr == rank`, which it verifies) and fences again, so
//! that no rank sends before every rank knows every address.
//!
//! # Control channel
//!
//! Each message travels as one `fi_send` of `rank: u32 LE | seq: u32 LE | header |
//! payload`, at most [`MAX_CTRL`] + 8 bytes ([`MAX_CTRL`] is the shared-memory
//! transport's limit, so that a job mixing both keeps one eager limit).
//!
//! * **Sources and order.** The 8-byte header names the sender and numbers its
//!   messages per (sender, receiver) pair. The sequence number is needed whatever the
//!   provider: `FI_ORDER_SAS` orders the *matching* of messages to receive buffers,
//!   not the completions (`comp_order` is `FI_ORDER_NONE`), and `tcp;ofi_rxm`, whose
//!   rendezvous protocol completes a large message after smaller ones sent later,
//!   reports about half of the messages of the all-to-all test out of order. With the
//!   header in place the sender's rank travels in it too, so `FI_SOURCE` and
//!   `fi_cq_readfrom` are not needed (the AV lookup they cost is saved, and providers
//!   without `FI_SOURCE` work). The receiver files completed messages per source by
//!   sequence number and delivers them strictly in order, round-robin over sources. A
//!   message that can be delivered next stays in its receive slot until then (no
//!   copy); one that arrived ahead of an earlier one is copied out and its slot
//!   reposted at once, so that the posted slots can never all be held by messages
//!   waiting for one that has no slot to arrive in.
//! * **Sending.** Messages that fit the provider's `inject_size` go out with
//!   `fi_inject` (copied by the provider, no completion). Larger ones are copied into
//!   one of 64 send bounce slots (one registered region under `FI_MR_LOCAL`) and posted
//!   with `fi_send`; the slot returns to the pool on the send's completion. When no slot
//!   is free or the provider answers `-FI_EAGAIN`, `try_send` reads the completion
//!   queue once and retries once, then reports [`transport::TransportError::Full`]
//!   (nothing sent). The pool is shared by all peers, so `Full` can come before
//!   `ctrl_slots` messages are in flight to one peer when several peers are being sent
//!   to; and the first message to a peer is `Full` until the connection (which needs
//!   both sides' progress under manual progress) stands. The caller polls and retries.
//! * **Receiving.** 64 receive slots of [`MAX_CTRL`] + 8 bytes (one registered region
//!   under `FI_MR_LOCAL`) are posted with `fi_recv`. A pool of per-message slots rather
//!   than `FI_MULTI_RECV`: messages are delivered in sequence order, not completion
//!   order, so a slot may have to wait for an earlier message; per-message slots can be
//!   reposted one by one as they are delivered, whereas a multi-receive buffer stays
//!   pinned until the last message in it is delivered, and the smallest buffer space
//!   `FI_OPT_MIN_MULTI_RECV` leaves would have to be a whole maximum message anyway.
//!   Messages beyond the posted slots
//!   are buffered by the provider (`FI_RM_ENABLED`), never dropped. `poll` reads the
//!   completion queue (up to 16 × 64 entries), delivers up to `max` messages, and
//!   reposts each slot after its callback returns. Completions read while `put`/`get`
//!   wait are filed the same way and delivered by the next `poll`.
//!
//! [`Caps`](transport::Caps): `max_ctrl` = [`MAX_CTRL`], `ctrl_slots` = 64,
//! `ring_bytes` = 0 (the channel counts messages), `put`, `get` and `registers` true.
//!
//! # One-sided
//!
//! [`Transport::expose`](transport::Transport::expose) registers the range with
//! `FI_REMOTE_READ | FI_REMOTE_WRITE` (bound to the endpoint and enabled under
//! `FI_MR_ENDPOINT`), requesting a key from a counter that never repeats (or taking
//! the provider's under `FI_MR_PROV_KEY`), and returns `{ addr: the virtual address,
//! len, key }`. Zero-length exposures register nothing. Live registrations are kept by
//! key, so `unexpose` closes the right one (and ignores descriptors it does not know);
//! after it, a peer's access with the old key never touches the memory (how it fails
//! at the peer depends on the provider: see "Errors").
//!
//! `put`/`get` check the bounds with [`transport::check_bounds`], then post `fi_write`
//! / `fi_read` (split at `max_msg_size`) to `addr + offset` under `FI_MR_VIRT_ADDR`, or
//! to `offset` where the provider addresses registrations by offset, and return once
//! every piece has completed, reading the completion queue meanwhile (messages that
//! arrive then are kept for the next `poll`). Under `FI_MR_LOCAL` the local buffer is
//! registered for the duration of the call.
//!
//! Writes are posted with `fi_writemsg(FI_DELIVERY_COMPLETE)`, whether or not the
//! provider offers `FI_ORDER_SAW`: a put returns only once its data is visible at the
//! target, so a control message sent afterwards is delivered after the data with any
//! provider, and a write the target refuses comes back as an error of that `put`.
//! With `tcp;ofi_rxm` and the default completion (transmit complete) a write with a
//! stale key completes successfully at the origin while the target drops it, and
//! closes the connection. The price is one acknowledgement per write piece, small
//! next to the sizes rsmpi puts (above the eager limit). A provider that refuses the
//! flag (`-FI_EBADFLAGS`, `-FI_EOPNOTSUPP`) gets plain `fi_write` where it offers
//! `FI_ORDER_SAW` (send after write), which keeps the data-before-message rule.
//!
//! **Progress is manual**: the provider moves data only inside our calls, so a rank
//! whose memory a peer writes or reads must keep calling `poll` until the peer is done
//! (rsmpi's progress engine does; tests must too). There are no hidden threads.
//!
//! # Errors
//!
//! Error completions (`fi_cq_readerr`) are mapped by their error code: unreachable
//! peers (connection refused or reset, host unreachable, ...) become
//! [`transport::TransportError::PeerGone`] naming the peer, refused accesses (bad or revoked key,
//! outside the registration) [`transport::TransportError::AccessDenied`], anything else
//! [`transport::TransportError::Os`]; the text includes `fi_cq_strerror`'s. Failures of
//! sends are reported by the next `poll`; a peer found unreachable is remembered and
//! later sends and one-sided calls to it fail at once.
//!
//! What a refused one-sided access looks like depends on the provider (libfabric
//! 1.17): `tcp;ofi_rxm` closes the connection, so the `put`/`get` fails with
//! `PeerGone` (its text says that a refused key closes tcp connections) and the pair
//! stays unusable afterwards; providers that report the remote access error as such
//! (`FI_EACCES`, `FI_EKEYREJECTED`, `FI_EREMOTEIO`; RDMA hardware does) give
//! [`transport::TransportError::AccessDenied`] (not seen here: no RDMA provider on
//! this machine); `shm` drops the request at the
//! target without answering, so a stale `put` or `get` waits forever (rsmpi uses its
//! own shared-memory transport on a node; `shm` serves tests here).
//! In every case the target's memory is left untouched. rsmpi never uses a descriptor
//! after the request it belongs to has ended; these are the consequences of a bug.
//!
//! # Teardown
//!
//! Closing (`Transport::close`, which `MPI_Finalize` calls after its last barrier, or
//! dropping the transport) first says goodbye: every rank sends each reachable peer a
//! message whose header has the top bit of the rank word set, after everything else
//! it sent and with `fi_send` (which completes, unlike `fi_inject`), then reads on
//! until every reachable peer's goodbye has arrived and its own sends have completed
//! (at most 10 s; a peer found unreachable is not waited for). Messages arrive in
//! order per source, so once a peer's goodbye is in, nothing from it is still on its
//! way, and nothing of ours is on its way to it once our sends have completed. What
//! arrives in the meantime is dropped: the library above has finished. Without this,
//! a message still in flight when both ends closed (a credit set off by
//! `MPI_Finalize`'s last barrier) crashed `verbs;ofi_rxm` inside the provider, on both
//! ranks, in the SoftRoCE guest. `MPI_Finalize` then waits at the launcher's fence
//! (PMI) before it drops the transport: a rank whose peers had already closed their
//! endpoints while it still read its completion queue for the last goodbyes crashed
//! there the same way. Then the endpoint, completion queue and address vector close,
//! then every registration, then domain and fabric; the bounce pools are freed last.
//!
//! # Limitations
//!
//! Providers that need `FI_CONTEXT`/`FI_CONTEXT2` operation contexts or `FI_MR_RAW`
//! keys (psm2, some RDMA providers) are not used. Under `FI_MR_PROV_KEY` a provider may
//! reuse the key of a closed registration for a new one, so a stale descriptor could
//! then reach new memory; with requested keys (tcp, shm) keys never repeat.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "libfabric")]
mod fabric;
#[cfg(feature = "libfabric")]
pub use fabric::OfiTransport;
#[cfg(not(feature = "libfabric"))]
pub use stub::OfiTransport;

/// Largest control message (header + payload), the same as the shared-memory
/// transport's so that mixed jobs keep the same eager limit.
pub const MAX_CTRL: usize = 64 * 1024 + 120;
/// Control messages in flight per peer that the protocol may count on.
pub const CTRL_SLOTS: usize = 64;
/// Exchange key of each rank's endpoint address (`fi_getname` bytes).
pub const KEY_ADDR: &str = "ofi.addr";
/// Exchange key of each rank's provider name (or `!error` when it could not open one).
pub const KEY_PROV: &str = "ofi.prov";
/// Exchange key of each rank's registration addressing mode.
pub const KEY_MODE: &str = "ofi.mode";
/// Environment variable naming the libfabric provider (`tcp;ofi_rxm`, `shm`, ...).
pub const ENV_PROVIDER: &str = "RSMPI_OFI_PROVIDER";
/// Environment variable forcing the `FI_MR_LOCAL` path (`1`).
pub const ENV_MR_LOCAL: &str = "RSMPI_OFI_MR_LOCAL";
/// Environment variable (`1`) that stops the transport from asking for
/// `FI_ORDER_SAW`; a testing aid (with `shm` it selects virtual-address registrations).
pub const ENV_NO_SAW: &str = "RSMPI_OFI_NO_SAW";

/// How to open the transport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OfiConfig {
    /// The libfabric provider to use, as fi_getinfo names it (`tcp;ofi_rxm`, `shm`,
    /// `verbs;ofi_rxm`); `None` takes the first suitable one.
    pub provider: Option<String>,
    /// The ranks are on different hosts or network namespaces: use an address that is
    /// not a loopback one.
    pub prefer_external: bool,
}

impl OfiConfig {
    /// The provider from `RSMPI_OFI_PROVIDER` (unset or empty: any), loopback allowed.
    pub fn from_env() -> OfiConfig {
        OfiConfig {
            provider: std::env::var(ENV_PROVIDER).ok().filter(|p| !p.is_empty()),
            prefer_external: false,
        }
    }
}

#[cfg(not(feature = "libfabric"))]
mod stub {
    use super::OfiConfig;
    use transport::{Caps, Exchange, Posted, Rank, RemoteBuf, Transport, TransportError};

    /// The libfabric transport, absent from this build (no `libfabric` feature): it
    /// cannot be constructed.
    #[derive(Debug)]
    pub struct OfiTransport {
        never: std::convert::Infallible,
    }

    impl OfiTransport {
        /// Always [`transport::TransportError::Unsupported`] in this build.
        pub fn new(
            _ex: &mut dyn Exchange,
            _cfg: &OfiConfig,
        ) -> Result<OfiTransport, TransportError> {
            Err(TransportError::Unsupported(
                "libfabric (build with the `ofi` feature)",
            ))
        }
        /// Unreachable (no value of this type exists).
        pub fn provider_name(&self) -> &str {
            match self.never {}
        }
        /// Unreachable (no value of this type exists).
        pub fn live_registrations(&self) -> usize {
            match self.never {}
        }
    }

    impl Transport for OfiTransport {
        fn rank(&self) -> Rank {
            match self.never {}
        }
        fn size(&self) -> u32 {
            match self.never {}
        }
        fn caps(&self) -> Caps {
            match self.never {}
        }
        fn try_send(&mut self, _: Rank, _: &[u8], _: &[u8]) -> Result<(), TransportError> {
            match self.never {}
        }
        fn poll(
            &mut self,
            _: usize,
            _: &mut dyn FnMut(Rank, &[u8]),
        ) -> Result<usize, TransportError> {
            match self.never {}
        }
        fn expose(&mut self, _: usize, _: usize) -> Result<RemoteBuf, TransportError> {
            match self.never {}
        }
        fn put(
            &mut self,
            _: Rank,
            _: &[u8],
            _: RemoteBuf,
            _: u64,
            _: u64,
        ) -> Result<Posted, TransportError> {
            match self.never {}
        }
        fn get(
            &mut self,
            _: Rank,
            _: &mut [u8],
            _: RemoteBuf,
            _: u64,
            _: u64,
        ) -> Result<Posted, TransportError> {
            match self.never {}
        }
    }
}

#[cfg(all(test, not(feature = "libfabric")))]
mod tests {
    use super::*;
    use transport::{Exchange, Rank, TransportError};

    /// An exchange that must never be used: `new` has to fail before touching it.
    struct NoExchange;

    impl Exchange for NoExchange {
        fn rank(&self) -> Rank {
            0
        }
        fn size(&self) -> u32 {
            1
        }
        fn job_id(&self) -> &str {
            "t"
        }
        fn publish(&mut self, _: &str, _: &[u8]) -> Result<(), TransportError> {
            panic!("publish without libfabric")
        }
        fn fence(&mut self) -> Result<(), TransportError> {
            panic!("fence without libfabric")
        }
        fn lookup(&mut self, _: Rank, _: &str) -> Result<Vec<u8>, TransportError> {
            panic!("lookup without libfabric")
        }
    }

    #[test]
    fn new_without_libfabric_is_unsupported() {
        let r = OfiTransport::new(&mut NoExchange, &OfiConfig::from_env());
        assert!(
            matches!(r, Err(TransportError::Unsupported(w)) if w.contains("libfabric")),
            "{r:?}"
        );
    }
}

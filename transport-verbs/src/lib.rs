//! The RDMA verbs transport of rsmpi (InfiniBand, RoCE; SoftRoCE in CI).
//!
//! ```no_run
//! # fn main() -> Result<(), transport::TransportError> {
//! use transport::Transport;
//! use transport_verbs::{VerbsConfig, VerbsTransport};
//! # let mut ex = transport_shm::testing::FileExchange::new("/tmp/job", 0, 1, "job");
//! // collective over the job: every rank connects a queue pair to every other one
//! let mut t = VerbsTransport::new(&mut ex, &VerbsConfig::from_env())?;
//! t.try_send(0, b"hello", b"")?;
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     t.poll(16, &mut |from, m| got.push((from, m.to_vec())))?;
//! }
//! # Ok(()) }
//! ```
//!
//! * One **RC queue pair per peer**, connected at start-up through the job's key-value
//!   exchange (QPN, LID, GID); all queue pairs share one completion queue, which
//!   `poll` / `poll_done` drain. GID: RoCE v2 with an IPv4 address first
//!   (`RSMPI_VERBS_GID_INDEX` overrides); InfiniBand uses the LID.
//! * The **control channel** is a ring per (sender, receiver) pair in the receiver's
//!   memory that the sender fills with RDMA WRITEs and the receiver's `poll` reads;
//!   the receiver writes its read position back now and then (credits). No receive work
//!   request is consumed and no interrupt is taken, so an advertised receive's
//!   envelope reaches the sender as the design has it: one RDMA WRITE into memory the
//!   sender polls.
//! * **put / get** are RDMA WRITE / READ in three tiers ([`transport::Caps`]): inline in
//!   the work request, copied into a registered bounce buffer, or zero copy from the
//!   caller's buffer with a completion reported later by `poll_done`.
//! * Every `expose` registers exactly the advertised buffer; `unexpose` deregisters it,
//!   so a write with a stale key fails at the writer ([`transport::TransportError::AccessDenied`])
//!   and never touches memory.
//! * libibverbs is opened with `dlopen`: without the library or a device `new` returns
//!   [`transport::TransportError::Unavailable`] on every rank, and rsmpi falls back.
//!
//! Build with the `ibverbs` feature (needs `<infiniband/verbs.h>`, Debian
//! `libibverbs-dev`); without it `new` always reports `Unsupported`.
//!
//! Environment: `RSMPI_VERBS_DEVICE` (default: the first with an active port),
//! `RSMPI_VERBS_PORT` (1), `RSMPI_VERBS_GID_INDEX`, `RSMPI_VERBS_RING` (bytes of each
//! pair's ring, a power of two, default 65536).

#[cfg(feature = "ibverbs")]
mod verbs;
#[cfg(feature = "ibverbs")]
pub use verbs::{VerbsTransport, MAX_CTRL};

#[cfg(not(feature = "ibverbs"))]
mod stub;
#[cfg(not(feature = "ibverbs"))]
pub use stub::VerbsTransport;

/// How to open the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Device name (`mlx5_0`, `rxe0`); `None`: the first with an active port.
    pub device: Option<String>,
    /// Port number (from 1).
    pub port: u8,
    /// GID table index; `None`: chosen (RoCE v2 with an IPv4 address first).
    pub gid_index: Option<u32>,
    /// Bytes of the ring of each (sender, receiver) pair; a power of two.
    pub ring: usize,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            device: None,
            port: 1,
            gid_index: None,
            ring: 65536,
        }
    }
}

impl VerbsConfig {
    /// From `RSMPI_VERBS_DEVICE`, `RSMPI_VERBS_PORT`, `RSMPI_VERBS_GID_INDEX`,
    /// `RSMPI_VERBS_RING`; unparsable numbers keep the defaults.
    pub fn from_env() -> VerbsConfig {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let d = VerbsConfig::default();
        VerbsConfig {
            device: var("RSMPI_VERBS_DEVICE"),
            port: var("RSMPI_VERBS_PORT")
                .and_then(|v| v.parse().ok())
                .unwrap_or(d.port),
            gid_index: var("RSMPI_VERBS_GID_INDEX").and_then(|v| v.parse().ok()),
            ring: var("RSMPI_VERBS_RING")
                .and_then(|v| v.parse().ok())
                .unwrap_or(d.ring),
        }
    }
}

//! `rsmpirun`, the rsmpi launcher: starts the ranks of a job on this node, serves their
//! start-up key-value exchange, and tears the whole job down when one rank fails.
//!
//! A rank program uses [`Boot`] for the start-up exchange ([`transport::Exchange`]);
//! run alone it is a job of one rank:
//!
//! ```
//! use launcher::Boot;
//! use transport::Exchange;
//!
//! # fn main() -> Result<(), transport::TransportError> {
//! // Under rsmpirun this connects to the launcher; run alone it is a singleton.
//! # std::env::remove_var("RSMPI_RANK");
//! let mut boot = Boot::init()?;
//! let me = boot.rank();
//! boot.publish("addr", format!("endpoint-of-{me}").as_bytes())?;
//! boot.fence()?;
//! for peer in 0..boot.size() {
//!     let addr = boot.lookup(peer, "addr")?;
//!     assert_eq!(addr, format!("endpoint-of-{peer}").into_bytes());
//! }
//! assert!(boot.job_id().bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
//! # Ok(())
//! # }
//! ```
//!
//! and a program (such as a benchmark driver) can launch a job itself with [`run`]:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! let mut job = launcher::Job::new(4, "target/release/pingpong", ["--iters", "1000"]);
//! job.timeout = Some(Duration::from_secs(60));
//! job.prefix_output = true;
//! let status = launcher::run(&job)?;
//! std::process::exit(status);
//! # Ok::<(), launcher::LaunchError>(())
//! ```
//!
//! # Usage
//!
//! ```text
//! rsmpirun -n N [--prefix] [--transport shm] [--timeout SECS] [--] program [args…]
//! ```
//!
//! starts `N` ranks of `program` on this node and exits with the job's status:
//!
//! * 0 when every rank exited with status 0;
//! * otherwise the status of the failed rank (its exit code, or 128 + signal when it
//!   was killed by a signal), after printing `rsmpirun: rank R exited with status S`
//!   (or `killed by signal SIG`) to stderr. The other ranks get SIGTERM at once and
//!   SIGKILL [`KILL_GRACE`] (2 s) later;
//! * the code a rank passed to [`Boot::abort`] (the job is torn down the same way);
//! * 124 when `--timeout SECS` expired;
//! * 128 + signal when `rsmpirun` itself got SIGINT, SIGTERM or SIGHUP: the signal is
//!   forwarded to the ranks, SIGKILL follows 2 s later (at once on a second signal).
//!
//! Whatever the outcome, the job's files are removed before `rsmpirun` exits: its
//! private socket directory and every `/dev/shm/rsmpi-{job_id}-*` (the ranks'
//! shared-memory segments).
//!
//! `--prefix` prefixes each line a rank writes to stdout or stderr with `[rank] `;
//! without it the ranks write straight to `rsmpirun`'s stdout and stderr. Standard
//! input goes to rank 0 only.
//!
//! # Environment of a rank
//!
//! | variable | value |
//! | --- | --- |
//! | `RSMPI_RANK` | this rank, `0..N` |
//! | `RSMPI_SIZE` | `N` |
//! | `RSMPI_JOB_ID` | `{launcher pid}-{8 random hex digits}`, only `[A-Za-z0-9_-]` |
//! | `RSMPI_KVS` | path of the launcher's Unix socket, in a private (mode 0700) directory |
//! | `RSMPI_SECRET` | the job's random 128-bit secret, 32 hex digits |
//! | `RSMPI_TRANSPORT` | the transport to use, `--transport` (default `shm`) |
//!
//! Everything else in the launcher's environment is passed through unchanged.
//!
//! # Key-value protocol
//!
//! A rank opens one stream connection to `RSMPI_KVS`. Every frame, both ways, is a
//! little-endian `u32` length `L` followed by `L` bytes: a kind byte and `L - 1`
//! payload bytes (integers little-endian):
//!
//! | kind | direction | payload | reply |
//! | --- | --- | --- | --- |
//! | `1` hello | rank → launcher | `secret[16]`, `rank: u32` | ok with `size: u32` |
//! | `2` publish | rank → launcher | `key_len: u32`, key, value | ok |
//! | `3` fence | rank → launcher | — | ok once all `N` ranks sent fence |
//! | `4` lookup | rank → launcher | `rank: u32`, key | ok with the value, or error if not published |
//! | `5` abort | rank → launcher | `code: i32`, message | ok; the launcher ends the job with `code` |
//! | `0x80` ok | launcher → rank | reply data | |
//! | `0x81` error | launcher → rank | UTF-8 message | |
//!
//! The hello must be the first frame and exactly 21 bytes long. The launcher compares
//! the secret in constant time and closes, without any answer, a connection whose hello
//! is malformed, carries a wrong secret or names a rank outside the job; it never
//! serves such a connection. Requests on one connection are answered in order; a
//! lookup is answered at once (after a fence, everything published before it by any
//! rank is there).
// One `unsafe` block: taking ownership of the socket a PMI launcher passes as
// `PMI_FD` (`pmi::adopt_fd`), an FFI boundary.
#![deny(unsafe_code)]

mod boot;
mod pmi;
mod proto;
mod run;
mod server;

pub use boot::Boot;
pub use run::{
    run, Job, LaunchError, ENV_JOB_ID, ENV_KVS, ENV_RANK, ENV_SECRET, ENV_SIZE, ENV_TRANSPORT,
    KILL_GRACE, TIMEOUT_STATUS,
};

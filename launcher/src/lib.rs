//! `rsmpirun`, the rsmpi launcher: starts the ranks of a job, serves them PMI-1 (the
//! start-up protocol MPICH's Hydra serves), and tears the whole job down when one rank
//! fails.
//!
//! A rank program uses [`Boot`] for the start-up exchange ([`transport::Exchange`]).
//! `Boot` is a PMI client: under rsmpirun, Hydra's `mpiexec` (PMI-1) or Slurm's
//! `srun --mpi=pmi2` (PMI-2) it talks to the launcher; run alone it is a job of one
//! rank:
//!
//! ```
//! use launcher::Boot;
//! use transport::Exchange;
//!
//! # fn main() -> Result<(), transport::TransportError> {
//! // Under a launcher this connects to it; run alone it is a singleton.
//! # for v in ["RSMPI_RANK", "PMI_FD", "PMI_PORT"] { std::env::remove_var(v); }
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
//! rsmpirun -n N [--prefix] [--transport auto|shm|ofi] [--hosts LIST --kvs-addr ADDR]
//!          [--timeout SECS] [--] program [args…]
//! ```
//!
//! starts `N` ranks of `program` (on this node, or on the network namespaces `--hosts`
//! names) and exits with the job's status:
//!
//! * 0 when every rank exited with status 0;
//! * otherwise the status of the failed rank (its exit code, or 128 + signal when it
//!   was killed by a signal), after printing `rsmpirun: rank R exited with status S`
//!   (or `killed by signal SIG`) to stderr. The other ranks get SIGTERM at once and
//!   SIGKILL [`KILL_GRACE`] (2 s) later;
//! * the code a rank passed to [`Boot::abort`] (PMI `abort`), after printing
//!   `rsmpirun: rank R called abort with code C: MSG` (the job is torn down the same
//!   way);
//! * [`LOST_STATUS`] (255) when the connection to ranks on another host failed before
//!   they finalized (keepalive: about 5 s after the host stopped answering), after
//!   printing `rsmpirun: lost contact with rank R (host H): ERROR`;
//! * 124 when `--timeout SECS` expired;
//! * 128 + signal when `rsmpirun` itself got SIGINT, SIGTERM or SIGHUP: the signal is
//!   forwarded to the ranks, SIGKILL follows 2 s later (at once on a second signal).
//!
//! Whatever the outcome, every `/dev/shm/rsmpi-{job_id}-*` (the ranks' shared-memory
//! segments) is removed before `rsmpirun` exits.
//!
//! `--prefix` prefixes each line a rank writes to stdout or stderr with `[rank] `;
//! without it the ranks write straight to `rsmpirun`'s stdout and stderr. Standard
//! input goes to rank 0 only.
//!
//! # Environment of a rank
//!
//! | variable | value |
//! | --- | --- |
//! | `PMI_RANK`, `RSMPI_RANK` | this rank, `0..N` |
//! | `PMI_SIZE`, `RSMPI_SIZE` | `N` |
//! | `PMI_FD` | ranks on this node: the number of the rank's inherited socket to `rsmpirun` |
//! | `PMI_PORT` | with `--kvs-addr` (ranks on `--hosts`, or all ranks when given alone): `ADDR:PORT` of `rsmpirun`'s PMI listener |
//! | `PMI_ID` | with `PMI_PORT`: this rank |
//! | `RSMPI_SECRET` | with `PMI_PORT`: this rank's random 128-bit secret, 32 hex digits |
//! | `RSMPI_JOB_ID` | `{launcher pid}-{8 random hex digits}`, only `[A-Za-z0-9_-]`; also the PMI key-value space name |
//! | `RSMPI_TRANSPORT` | the transport to use, `--transport` (default `auto`) |
//!
//! Every other `PMI_*` variable of `rsmpirun`'s environment, and `RSMPI_PMI`, are
//! removed (the ranks must talk to this launcher, not to one that started it);
//! everything else is passed through unchanged. `Boot` takes the rank and the size
//! from PMI; `RSMPI_RANK` and `RSMPI_SIZE` are for programs that want to know whether
//! they run under `rsmpirun` before initializing.
//!
//! # The PMI-1 service
//!
//! `rsmpirun` serves the PMI-1 wire protocol: one request per line, `cmd=NAME
//! key=value …` (words separated by spaces, so values hold no space), one answer line
//! per request, in order:
//!
//! | request | answer |
//! | --- | --- |
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` (another version: `rc=-1`) |
//! | `cmd=get_maxes` | `cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0` |
//! | `cmd=get_appnum` | `cmd=appnum appnum=0 rc=0` |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname kvsname=JOB_ID rc=0` |
//! | `cmd=get_universe_size` | `cmd=universe_size size=N rc=0` |
//! | `cmd=put kvsname=K key=KEY value=V` | `cmd=put_result rc=0 msg=success` |
//! | `cmd=get kvsname=K key=KEY` | `cmd=get_result rc=0 msg=success value=V`, or `rc=-1 msg=key_not_found` |
//! | `cmd=barrier_in` | `cmd=barrier_out rc=0`, once all `N` ranks entered the barrier |
//! | `cmd=abort exitcode=C error_msg=MSG` | none: `rsmpirun` ends the job with status `C`; `MSG` is the rest of the line |
//! | `cmd=finalize` | `cmd=finalize_ack rc=0` |
//!
//! Keys and values are at most 64 and 1024 bytes (`Boot` hex-encodes values and splits
//! longer ones over several keys). A `put` is refused (`rc=-1`) when the key names
//! another rank (`r{R}-…`, the form `Boot` gives every key of rank `R`) or was put by
//! another rank: a rank cannot publish in another's name. A value is visible to `get`
//! as soon as it is put. A request that is not `key=value` words, an unknown command or
//! missing fields get an answer with `rc=-1` (blank lines none); a line longer than
//! 2048 bytes gets `cmd=error rc=-1 msg=line_too_long` and the connection is closed.
//!
//! **Connections.** A rank on this node inherits its end of a socketpair (`PMI_FD`):
//! nothing listens, and only that rank holds the socket, so no authentication is
//! needed; its requests are served as that rank. With `--kvs-addr`, the ranks connect
//! to a TCP listener on that address (`PMI_PORT`, which ranks in network namespaces
//! reach), and the first line must be the rsmpi extension of Hydra's `initack`:
//!
//! ```text
//! cmd=initack pmiid=RANK rsmpi_secret=HEX
//! ```
//!
//! with `HEX` that rank's `RSMPI_SECRET` (the PMI client adds `rsmpi_secret` only
//! when `RSMPI_SECRET` is set, so Hydra never sees it). `rsmpirun` compares the secret
//! in constant time and closes, without any answer, a connection whose first line is
//! malformed, longer than 256 bytes or slower than 10 s, carries a wrong or missing
//! secret, names a rank outside the job, or names a rank that already connected (one
//! connection per rank); it never serves such a connection. At most 64 connections
//! wait for their first line at a time: a new one closes the one waiting longest (a
//! rank sends its line at once). An accepted one gets `cmd=initack rc=0`, `cmd=set
//! size=N`, `cmd=set rank=RANK`, `cmd=set debug=0`, and is then served like a `PMI_FD`
//! connection. The secret travels in clear text: the network between the hosts must be
//! trusted.
// One `unsafe` block: taking ownership of the socket a PMI launcher passes as
// `PMI_FD` (`pmi::adopt_fd`), an FFI boundary.
#![deny(unsafe_code)]

mod bind;
mod boot;
pub mod netns;
mod pmi;
mod proto;
mod run;
mod server;

pub use bind::{own_cpus, Bind};
pub use boot::Boot;
pub use pmi::{ENV_PMI_FD, ENV_PMI_ID, ENV_PMI_PORT, ENV_PMI_RANK, ENV_PMI_SIZE};
pub use run::{
    clear_job_env, place, run, Host, Job, LaunchError, ENV_JOB_ID, ENV_RANK, ENV_SECRET, ENV_SIZE,
    ENV_TRANSPORT, KILL_GRACE, LOST_STATUS, TIMEOUT_STATUS,
};

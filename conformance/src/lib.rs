//! The rsmpi conformance and reliability suite.
//!
//! Every check is a [`Case`]. A *job* case is a function that runs on every rank of a
//! real multi-process job started by the launcher ([`launcher::run`]): the ranks are
//! the `conformance` binary itself, started as `conformance rank NAME`, which looks the
//! case up with [`find`] and runs its body. A *host* case runs in the calling process
//! and starts jobs (or other processes) itself and inspects them from outside: faults,
//! security, the soak and the checks of the checkers.
//!
//! Every case runs once per matching mode ([`Matching`]); the transport is `shm` (the
//! only one this build has). `cargo test -p conformance` runs each case as one test
//! (both modes); the `conformance` binary runs them all and prints a summary per
//! transport and mode.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod bad_input;
pub mod collectives;
pub mod faults;
pub mod hosts;
pub mod launchers;
pub mod one_sided;
pub mod semantics;
pub mod soak;

/// The matching modes every case runs in (`RSMPI_MATCHING`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matching {
    Both,
    Receiver,
}

impl Matching {
    pub const ALL: [Matching; 2] = [Matching::Both, Matching::Receiver];

    /// The value of `RSMPI_MATCHING`.
    pub fn env(self) -> &'static str {
        match self {
            Matching::Both => "both",
            Matching::Receiver => "receiver",
        }
    }
}

/// The transports of this build.
pub const TRANSPORTS: [&str; 1] = ["shm"];

/// What a host case gets: the path of the `conformance` binary (to start ranks), the
/// matching mode and the transport.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub exe: PathBuf,
    pub matching: Matching,
    pub transport: String,
}

/// How a case runs.
#[derive(Clone, Copy)]
pub enum Kind {
    /// Runs on `ranks` ranks of a real job; passes iff the job exits with status 0.
    Job {
        ranks: u32,
        body: fn(rsmpi::Universe),
    },
    /// Runs in the calling process.
    Host(fn(&Ctx) -> Result<(), String>),
    /// A rank body used by a host case (not a test by itself): the job is expected to
    /// fail or is inspected from outside.
    Helper { body: fn(rsmpi::Universe) },
}

/// One check of the suite.
#[derive(Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub kind: Kind,
    /// Time limit of the job (a hang fails the case).
    pub timeout: Duration,
}

impl Case {
    pub const fn job(name: &'static str, ranks: u32, body: fn(rsmpi::Universe)) -> Case {
        Case {
            name,
            kind: Kind::Job { ranks, body },
            timeout: Duration::from_secs(60),
        }
    }
    pub const fn host(name: &'static str, f: fn(&Ctx) -> Result<(), String>) -> Case {
        Case {
            name,
            kind: Kind::Host(f),
            timeout: Duration::from_secs(120),
        }
    }
    pub const fn helper(name: &'static str, body: fn(rsmpi::Universe)) -> Case {
        Case {
            name,
            kind: Kind::Helper { body },
            timeout: Duration::from_secs(60),
        }
    }
    /// Whether the case runs its jobs on the transport CONFORMANCE_TRANSPORT names: the
    /// job cases, the soak, the rank-failure cases and the stopped-receiver case (the
    /// other host cases inspect this node's shared memory).
    pub fn follows_transport(&self) -> bool {
        matches!(self.kind, Kind::Job { .. })
            || self.name.starts_with("soak_")
            || self.name.starts_with("fault_rank_")
            // over libfabric's software providers (tcp) a write needs the target's
            // progress, so a stopped receiver holds it: that case is for transports
            // whose writes need no help (RDMA, and CMA on shared memory)
            || (self.name.starts_with("one_sided_")
                && std::env::var("CONFORMANCE_TRANSPORT").map_or(true, |t| t != "ofi"))
    }
    /// Whether this is a test of its own (not a helper body).
    pub fn is_test(&self) -> bool {
        !matches!(self.kind, Kind::Helper { .. })
    }
}

/// Every case and helper body of the suite.
pub fn all() -> Vec<Case> {
    let mut v = semantics::cases();
    v.extend(bad_input::cases());
    v.extend(collectives::cases());
    v.extend(faults::cases());
    v.extend(one_sided::cases());
    v.extend(soak::cases());
    v
}

/// The case called `name`.
pub fn find(name: &str) -> Option<Case> {
    all().into_iter().find(|c| c.name == name)
}

/// The rank side: runs the body of job or helper case `name` on this rank (called by
/// the `conformance` binary as `conformance rank NAME` under the launcher).
pub fn rank_main(name: &str) {
    let case = find(name).unwrap_or_else(|| panic!("no case named {name}"));
    let body = match case.kind {
        Kind::Job { body, .. } | Kind::Helper { body } => body,
        Kind::Host(_) => panic!("{name} is a host case"),
    };
    if let Ok(dir) = std::env::var(ENV_SCRATCH) {
        if let Some(r) = env_rank() {
            let tmp = Path::new(&dir).join(format!("pid.{r}.tmp"));
            std::fs::write(&tmp, std::process::id().to_string()).expect("pid file");
            std::fs::rename(&tmp, Path::new(&dir).join(format!("pid.{r}"))).expect("pid file");
        }
    }
    let u = rsmpi::try_initialize().expect("rsmpi::initialize");
    let r = rsmpi::traits::Communicator::rank(&u.world());
    body(u);
    // the body returned (and finalized): this rank passed
    if let Ok(dir) = std::env::var(ENV_DONE) {
        std::fs::write(Path::new(&dir).join(format!("done.{r}")), b"").expect("done marker");
    }
}

/// This process's rank as its launcher set it (rsmpirun, Hydra's PMI, Slurm), before
/// MPI is initialized.
fn env_rank() -> Option<String> {
    ["RSMPI_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
}

/// Environment variable naming the directory where each rank of a job case marks that
/// its body returned: a job passes only if every rank did, whatever the launcher's
/// status (which has been seen to be 0 for a job whose ranks all aborted at once).
pub const ENV_DONE: &str = "CONFORMANCE_DONE";

/// Environment variable naming a scratch directory for a job (pid files, markers).
pub const ENV_SCRATCH: &str = "CONFORMANCE_SCRATCH";

/// A launcher job running the body of case `name` on `ranks` ranks of `ctx.exe`.
pub fn job_for(ctx: &Ctx, name: &str, ranks: u32, timeout: Duration) -> launcher::Job {
    let mut j = launcher::Job::new(ranks, &ctx.exe, ["rank", name]);
    j.timeout = Some(timeout);
    j.prefix_output = true;
    j.forward_signals = false;
    j.transport = ctx.transport.clone();
    j.env
        .push(("RSMPI_MATCHING".into(), ctx.matching.env().into()));
    // CONFORMANCE_TRANSPORT=ofi runs the jobs over libfabric; CONFORMANCE_HOSTS places
    // them on network namespaces (see `hosts::from_env`)
    if let Ok(t) = std::env::var("CONFORMANCE_TRANSPORT") {
        j.transport = t;
    }
    if let Some((hosts, addr)) = hosts::from_env() {
        j.hosts = hosts;
        j.kvs_addr = Some(addr);
        if j.transport == "shm" {
            j.transport = "auto".into();
        }
    }
    j
}

/// A job of `ranks` ranks of `exe args` with `env` added, as the tools' tests run
/// them (`tests/trace.rs`, `races.rs`, `deadlocks.rs`): output prefixed by rank, a
/// time limit of `secs` seconds.
pub fn tool_job(
    exe: &Path,
    ranks: u32,
    args: &[&str],
    env: &[(&str, &str)],
    secs: u64,
) -> launcher::Job {
    let mut j = launcher::Job::new(ranks, exe, args.iter().copied());
    j.timeout = Some(Duration::from_secs(secs));
    j.prefix_output = true;
    j.forward_signals = false;
    for (k, v) in env {
        j.env.push(((*k).into(), (*v).into()));
    }
    j
}

/// Runs one case in one mode; `Err` describes the failure.
pub fn run_case(ctx: &Ctx, case: &Case) -> Result<(), String> {
    match case.kind {
        Kind::Job { ranks, .. } => {
            // CONFORMANCE_TIMEOUT (seconds) overrides the time limit, e.g. for debugging
            let limit = std::env::var("CONFORMANCE_TIMEOUT")
                .ok()
                .and_then(|s| s.parse().ok())
                .map_or(case.timeout, Duration::from_secs);
            let mut j = job_for(ctx, case.name, ranks, limit);
            let done = scratch(case.name);
            j.env.push((ENV_DONE.into(), done.clone().into_os_string()));
            let t = Instant::now();
            let code = match std::env::var("CONFORMANCE_LAUNCHER") {
                Ok(l) if l != "rsmpirun" => launchers::run_external(&l, &j),
                _ => launcher::run(&j).map_err(|e| format!("launch failed: {e}")),
            };
            let finished = (0..ranks)
                .filter(|r| done.join(format!("done.{r}")).exists())
                .count();
            let _ = std::fs::remove_dir_all(&done);
            match code? {
                0 if finished == ranks as usize => Ok(()),
                0 => Err(format!(
                    "{} ({}): job exited with status 0 but only {finished} of {ranks} ranks finished their body",
                    case.name,
                    ctx.matching.env()
                )),
                launcher::TIMEOUT_STATUS => Err(format!(
                    "{} ({}): timed out after {:.1} s (hang?)",
                    case.name,
                    ctx.matching.env(),
                    t.elapsed().as_secs_f64()
                )),
                c => Err(format!(
                    "{} ({}): job exited with status {c}",
                    case.name,
                    ctx.matching.env()
                )),
            }
        }
        Kind::Host(f) => f(ctx).map_err(|e| format!("{} ({}): {e}", case.name, ctx.matching.env())),
        Kind::Helper { .. } => Err(format!("{} is a helper, not a test", case.name)),
    }
}

/// Runs case `name` in every matching mode on every transport (what each `#[test]`
/// does); panics with every failure.
pub fn run_everywhere(exe: &Path, name: &str) {
    let case = find(name).unwrap_or_else(|| panic!("no case named {name}"));
    let mut failures = Vec::new();
    for transport in TRANSPORTS {
        for m in Matching::ALL {
            let ctx = Ctx {
                exe: exe.to_owned(),
                matching: m,
                transport: transport.into(),
            };
            if let Err(e) = run_case(&ctx, &case) {
                failures.push(format!("[{transport}] {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A fresh scratch directory.
pub fn scratch(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "conformance-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// What a job run through `conformance launch` (a separate launcher process) did.
#[derive(Debug)]
pub struct Launched {
    pub code: Option<i32>,
    pub stderr: String,
    pub stdout: String,
    pub elapsed: Duration,
    /// The launcher's pid: the job id starts with it.
    pub launcher_pid: u32,
}

/// Starts `conformance launch` (the launcher in its own process, like `rsmpirun`) for
/// case `name` on `ranks` ranks, with extra environment; waits at most `limit`.
pub fn launch(
    ctx: &Ctx,
    name: &str,
    ranks: u32,
    timeout: Duration,
    env: &[(&str, OsString)],
    limit: Duration,
) -> Launched {
    use std::io::Read;
    let t = Instant::now();
    let mut cmd = std::process::Command::new(&ctx.exe);
    cmd.arg("launch")
        .arg(ranks.to_string())
        .arg(timeout.as_secs().to_string())
        .arg(name)
        .env("RSMPI_MATCHING", ctx.matching.env())
        .env_remove(launcher::ENV_RANK)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn conformance launch");
    let pid = child.id();
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let t1 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t2 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code();
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = t.elapsed();
    Launched {
        code,
        stdout: t1.join().unwrap_or_default(),
        stderr: t2.join().unwrap_or_default(),
        elapsed,
        launcher_pid: pid,
    }
}

/// The launcher side of `conformance launch RANKS TIMEOUT NAME`: runs the job and
/// returns its status.
pub fn launch_main(exe: &Path, ranks: u32, timeout_s: u64, name: &str) -> i32 {
    let mut j = launcher::Job::new(ranks, exe, ["rank", name]);
    j.timeout = Some(Duration::from_secs(timeout_s));
    j.prefix_output = true;
    if let Ok(t) = std::env::var("CONFORMANCE_TRANSPORT") {
        j.transport = t;
    }
    if let Some((hosts, addr)) = hosts::from_env() {
        j.hosts = hosts;
        j.kvs_addr = Some(addr);
    }
    match launcher::run(&j) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("conformance launch: {e}");
            127
        }
    }
}

/// `/dev/shm` entries whose name starts with `prefix`.
pub fn shm_entries(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// A deterministic byte pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

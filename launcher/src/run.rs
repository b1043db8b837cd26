//! Starting and supervising the ranks of a job.

use std::ffi::OsString;
use std::fs::{self, DirBuilder};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Writes a line to stderr, ignoring errors (stderr may be closed: reporting must not
/// panic and leave ranks behind).
macro_rules! report {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

use rustix::process::{kill_process, Pid, Signal};

use crate::proto;
use crate::server::Server;

/// How long ranks get between SIGTERM (or a forwarded signal) and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Interval of the supervision loop.
const POLL: Duration = Duration::from_millis(2);
/// Exit status of a job that hit its time limit (as `timeout(1)`).
pub const TIMEOUT_STATUS: i32 = 124;

/// Environment variable: this process's rank.
pub const ENV_RANK: &str = "RSMPI_RANK";
/// Environment variable: number of ranks.
pub const ENV_SIZE: &str = "RSMPI_SIZE";
/// Environment variable: the job id (`[A-Za-z0-9_-]`).
pub const ENV_JOB_ID: &str = "RSMPI_JOB_ID";
/// Environment variable: path of the launcher's key-value socket.
pub const ENV_KVS: &str = "RSMPI_KVS";
/// Environment variable: the job secret, 32 hex digits.
pub const ENV_SECRET: &str = "RSMPI_SECRET";
/// Environment variable: the transport to use (`shm`).
pub const ENV_TRANSPORT: &str = "RSMPI_TRANSPORT";

/// A job to launch: `size` ranks of `program args…` on this node.
///
/// Build one with [`Job::new`] and adjust the public fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Job {
    /// The program every rank runs (looked up in `PATH` like a shell does).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Number of ranks (at least 1).
    pub size: u32,
    /// Prefix each line of the ranks' stdout/stderr with `[rank] ` (through pipes);
    /// otherwise the ranks inherit the launcher's stdout and stderr.
    pub prefix_output: bool,
    /// Value of `RSMPI_TRANSPORT` (default `shm`).
    pub transport: String,
    /// Kill the whole job after this long (the job then exits with status 124).
    pub timeout: Option<Duration>,
    /// Catch SIGINT, SIGTERM and SIGHUP sent to this process while the job runs,
    /// forward them to the ranks and clean up. Installs process-wide signal handlers
    /// (unregistered afterwards, but the default action of those signals is not
    /// restored), so a library caller may prefer `false`.
    pub forward_signals: bool,
    /// Extra environment variables for every rank (set after the `RSMPI_*` ones).
    pub env: Vec<(OsString, OsString)>,
}

impl Job {
    /// A job of `size` ranks running `program args…`, with default settings: no output
    /// prefix, transport `shm`, no time limit, signal forwarding on.
    pub fn new<P, I, A>(size: u32, program: P, args: I) -> Job
    where
        P: Into<OsString>,
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        Job {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            size,
            prefix_output: false,
            transport: "shm".into(),
            timeout: None,
            forward_signals: true,
            env: Vec::new(),
        }
    }
}

/// Why a job could not be run (as opposed to a job that ran and failed, which is a
/// non-zero status from [`run`]).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The job description is unusable.
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// A rank could not be started.
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        rank: u32,
        program: String,
        #[source]
        source: io::Error,
    },
    /// Setting up the job failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> LaunchError {
    let what = what.into();
    move |source| LaunchError::Io { what, source }
}

/// Removes the job's private directory and its shared-memory segments when dropped.
struct Cleanup {
    dir: PathBuf,
    job_id: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
        remove_segments(&self.job_id);
    }
}

/// Removes every `/dev/shm/rsmpi-{job_id}-*`.
pub(crate) fn remove_segments(job_id: &str) {
    let prefix = format!("rsmpi-{job_id}-");
    let Ok(dir) = fs::read_dir("/dev/shm") else {
        return;
    };
    for e in dir.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Signals forwarded while a job runs, and the handlers registered for them.
struct SignalGuard {
    got: Arc<AtomicUsize>,
    ids: Vec<signal_hook::SigId>,
}

impl SignalGuard {
    fn install(enable: bool) -> Result<SignalGuard, LaunchError> {
        let got = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        if enable {
            use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
            for sig in [SIGINT, SIGTERM, SIGHUP] {
                let id = signal_hook::flag::register_usize(sig, Arc::clone(&got), sig as usize)
                    .map_err(io_err("installing signal handlers"))?;
                ids.push(id);
            }
        }
        Ok(SignalGuard { got, ids })
    }

    /// The last signal received since the previous call, if any.
    fn take(&self) -> Option<i32> {
        match self.got.swap(0, Ordering::SeqCst) {
            0 => None,
            s => Some(s as i32),
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Maps a signal number to rustix's type (only the ones the launcher sends).
fn to_signal(sig: i32) -> Signal {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGKILL};
    match sig {
        SIGINT => Signal::INT,
        SIGHUP => Signal::HUP,
        SIGKILL => Signal::KILL,
        _ => Signal::TERM,
    }
}

/// A conventional name for a signal number (Linux numbering).
pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => "?",
    }
}

/// The status a failed rank gives the job: its exit code, or 128 + signal.
fn status_code(st: ExitStatus) -> i32 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}

fn describe(rank: usize, st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("rsmpirun: rank {rank} exited with status {c}"),
        (None, Some(s)) => {
            format!(
                "rsmpirun: rank {rank} killed by signal {s} ({})",
                signal_name(s)
            )
        }
        (None, None) => format!("rsmpirun: rank {rank} ended with {st}"),
    }
}

/// Copies `from` to `to` line by line, each line prefixed with `[rank] `.
fn forward_lines(rank: u32, from: impl Read, mut to: impl FnMut(&[u8]), done: mpsc::Sender<()>) {
    let mut r = BufReader::new(from);
    let prefix = format!("[{rank}] ");
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                let mut out = Vec::with_capacity(prefix.len() + line.len());
                out.extend_from_slice(prefix.as_bytes());
                out.extend_from_slice(&line);
                to(&out);
            }
        }
    }
    let _ = done.send(());
}

/// State of the supervision loop.
struct Supervisor {
    children: Vec<Child>,
    status: Vec<Option<ExitStatus>>,
}

impl Supervisor {
    fn alive(&self) -> impl Iterator<Item = &Child> {
        self.children
            .iter()
            .zip(&self.status)
            .filter(|(_, s)| s.is_none())
            .map(|(c, _)| c)
    }

    fn signal_all(&self, sig: Signal) {
        // Only children not yet reaped: their pids cannot have been reused.
        for c in self.alive() {
            let _ = kill_process(Pid::from_child(c), sig);
        }
    }

    /// Reaps every rank that ended; returns the ones that ended now.
    fn reap(&mut self) -> Vec<(usize, ExitStatus)> {
        let mut ended = Vec::new();
        for (r, c) in self.children.iter_mut().enumerate() {
            if self.status[r].is_none() {
                let st = match c.try_wait() {
                    Ok(Some(st)) => st,
                    Ok(None) => continue,
                    // Cannot happen for our own child; treat it as gone.
                    Err(_) => ExitStatus::from_raw(1 << 8),
                };
                self.status[r] = Some(st);
                ended.push((r, st));
            }
        }
        ended
    }

    fn all_done(&self) -> bool {
        self.status.iter().all(Option::is_some)
    }

    /// Kills and reaps every rank still running (error paths).
    fn kill_all(&mut self) {
        self.signal_all(Signal::KILL);
        for (c, s) in self.children.iter_mut().zip(&mut self.status) {
            if s.is_none() {
                *s = c.wait().ok();
            }
        }
    }
}

/// Launches `job` and supervises it until every rank has ended.
///
/// Returns the job's exit status: 0 when every rank exited with status 0; otherwise the
/// status of the first rank seen to fail (its exit code, or 128 + signal number; the
/// largest if several are seen failing at the same time), the code passed to
/// [`Boot::abort`](crate::Boot::abort), 124 on time-out, or 128 + signal when this
/// process was interrupted. As soon as the job fails, the other ranks get SIGTERM (or
/// the forwarded signal) and, [`KILL_GRACE`] later, SIGKILL. Messages about failures
/// go to stderr, prefixed `rsmpirun: `. In every case the private socket directory and
/// all `/dev/shm/rsmpi-{job_id}-*` files are removed before returning.
pub fn run(job: &Job) -> Result<i32, LaunchError> {
    if job.size == 0 {
        return Err(LaunchError::InvalidJob(
            "a job needs at least one rank".into(),
        ));
    }
    if job.program.is_empty() {
        return Err(LaunchError::InvalidJob("no program given".into()));
    }
    let signals = SignalGuard::install(job.forward_signals)?;

    let secret: [u8; proto::SECRET_LEN] =
        proto::random_bytes().map_err(io_err("reading /dev/urandom"))?;
    let tag: [u8; 4] = proto::random_bytes().map_err(io_err("reading /dev/urandom"))?;
    let job_id = format!("{}-{}", std::process::id(), proto::hex(&tag));

    let dir = std::env::temp_dir().join(format!("rsmpi-{job_id}"));
    DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(io_err(format!("creating {}", dir.display())))?;
    let cleanup = Cleanup {
        dir: dir.clone(),
        job_id: job_id.clone(),
    };
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
        .map_err(io_err(format!("setting permissions of {}", dir.display())))?;
    let sock = dir.join("kvs");
    let listener =
        UnixListener::bind(&sock).map_err(io_err(format!("binding {}", sock.display())))?;
    let mut server = Server::start(listener, sock.clone(), job.size, secret)
        .map_err(io_err("starting the key-value service"))?;

    let (done_tx, done_rx) = mpsc::channel();
    let mut forwarders = 0usize;
    let mut sup = Supervisor {
        children: Vec::new(),
        status: Vec::new(),
    };
    for rank in 0..job.size {
        match spawn_rank(job, rank, &job_id, &sock, &secret) {
            Ok(mut child) => {
                if job.prefix_output {
                    if let Some(out) = child.stdout.take() {
                        let tx = done_tx.clone();
                        spawn_forwarder(rank, out, false, tx);
                        forwarders += 1;
                    }
                    if let Some(err) = child.stderr.take() {
                        let tx = done_tx.clone();
                        spawn_forwarder(rank, err, true, tx);
                        forwarders += 1;
                    }
                }
                sup.children.push(child);
                sup.status.push(None);
            }
            Err(source) => {
                sup.kill_all();
                server.stop();
                drop(cleanup);
                return Err(LaunchError::Spawn {
                    rank,
                    program: job.program.to_string_lossy().into_owned(),
                    source,
                });
            }
        }
    }
    drop(done_tx);

    let code = supervise(job, &mut sup, &server, &signals);

    server.stop();
    // Let the forwarders drain what the ranks wrote (bounded: a grandchild could keep a
    // pipe open forever).
    let drain_until = Instant::now() + Duration::from_secs(2);
    for _ in 0..forwarders {
        let left = drain_until.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    drop(cleanup);
    drop(signals);
    Ok(code)
}

fn spawn_forwarder(
    rank: u32,
    from: impl Read + Send + 'static,
    to_err: bool,
    tx: mpsc::Sender<()>,
) {
    let name = format!("rsmpirun-out-{rank}");
    let res = std::thread::Builder::new().name(name).spawn(move || {
        if to_err {
            forward_lines(rank, from, |b| drop(io::stderr().lock().write_all(b)), tx);
        } else {
            forward_lines(
                rank,
                from,
                |b| {
                    let mut o = io::stdout().lock();
                    let _ = o.write_all(b);
                    let _ = o.flush();
                },
                tx,
            );
        }
    });
    if let Err(e) = res {
        report!("rsmpirun: cannot forward the output of rank {rank}: {e}");
    }
}

fn spawn_rank(job: &Job, rank: u32, job_id: &str, sock: &Path, secret: &[u8]) -> io::Result<Child> {
    let mut cmd = Command::new(&job.program);
    cmd.args(&job.args)
        .env(ENV_RANK, rank.to_string())
        .env(ENV_SIZE, job.size.to_string())
        .env(ENV_JOB_ID, job_id)
        .env(ENV_KVS, sock)
        .env(ENV_SECRET, proto::hex(secret))
        .env(ENV_TRANSPORT, &job.transport)
        .envs(job.env.iter().map(|(k, v)| (k, v)));
    // Like mpirun: standard input goes to rank 0 only.
    if rank != 0 {
        cmd.stdin(Stdio::null());
    }
    if job.prefix_output {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    cmd.spawn()
}

/// How long an abort waits for a signal-killed rank to be reaped (see `supervise`).
const ABORT_SETTLE: Duration = Duration::from_millis(150);

/// The supervision loop; returns the job's exit status once every rank is reaped.
fn supervise(job: &Job, sup: &mut Supervisor, server: &Server, signals: &SignalGuard) -> i32 {
    let start = Instant::now();
    let mut result: Option<i32> = None;
    // Set once the job is being torn down: when to escalate to SIGKILL.
    let mut kill_at: Option<Instant> = None;
    // When a rank aborts because a peer died, the peer's death is the real cause:
    // give its exit a moment to be reaped before blaming the aborting rank.
    let mut abort_seen: Option<Instant> = None;
    let mut failed_so_far: Vec<(usize, ExitStatus)> = Vec::new();
    loop {
        let ended = sup.reap();
        let sig = signals.take();
        failed_so_far.extend(ended.iter().filter(|(_, st)| !st.success()).copied());
        if result.is_none() {
            let failed: Vec<_> = ended.iter().filter(|(_, st)| !st.success()).collect();
            let worst = failed
                .iter()
                .max_by_key(|(r, st)| (status_code(*st), std::cmp::Reverse(*r)));
            let abort = server.abort_request();
            if abort.is_some() && abort_seen.is_none() {
                abort_seen = Some(Instant::now());
            }
            let killed = failed_so_far
                .iter()
                .find(|(_, st)| st.signal().is_some())
                .copied();
            let abort_settled = abort_seen.is_some_and(|t| t.elapsed() >= ABORT_SETTLE);
            // An abort is recorded before the aborting rank exits, so look at it first,
            // unless another rank was killed by a signal: that is the cause.
            let first = if let (Some(_), Some((rank, st))) = (&abort, killed) {
                report!("{}", describe(rank, st));
                Some((status_code(st), Signal::TERM))
            } else if let (Some(a), true) = (&abort, abort_settled) {
                report!(
                    "rsmpirun: rank {} called abort with code {}: {}",
                    a.rank,
                    a.code,
                    a.msg
                );
                Some((a.code, Signal::TERM))
            } else if abort.is_some() {
                None
            } else if let Some(&&(rank, st)) = worst {
                report!("{}", describe(rank, st));
                Some((status_code(st), Signal::TERM))
            } else if let Some(s) = sig {
                report!(
                    "rsmpirun: received signal {s} ({}), stopping the job",
                    signal_name(s)
                );
                Some((128 + s, to_signal(s)))
            } else if job.timeout.is_some_and(|t| start.elapsed() >= t) {
                report!(
                    "rsmpirun: job timed out after {:.1} s, killing all ranks",
                    job.timeout.unwrap_or_default().as_secs_f64()
                );
                Some((TIMEOUT_STATUS, Signal::TERM))
            } else {
                None
            };
            if let Some((code, signal)) = first {
                result = Some(code);
                sup.signal_all(signal);
                kill_at = Some(Instant::now() + KILL_GRACE);
            }
        } else if sig.is_some() {
            // Interrupted again while tearing down: do not wait any longer.
            kill_at = Some(Instant::now());
        }
        if sup.all_done() {
            break;
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            sup.signal_all(Signal::KILL);
            kill_at = Some(Instant::now() + Duration::from_secs(1));
        }
        std::thread::sleep(POLL);
    }
    if let Some(code) = result {
        return code;
    }
    // every rank ended before an abort had settled (all ranks failing at once): the
    // job still failed
    if let Some(a) = server.abort_request() {
        report!(
            "rsmpirun: rank {} called abort with code {}: {}",
            a.rank,
            a.code,
            a.msg
        );
        return a.code;
    }
    match failed_so_far
        .iter()
        .max_by_key(|(r, st)| (status_code(*st), std::cmp::Reverse(*r)))
    {
        Some(&(rank, st)) => {
            report!("{}", describe(rank, st));
            status_code(st)
        }
        None => 0,
    }
}

//! Starting and supervising the ranks of a job.

use std::ffi::OsString;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
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

use crate::bind::{spawning_on, Bind};
use crate::pmi::{ENV_PMI_FD, ENV_PMI_ID, ENV_PMI_PORT, ENV_PMI_RANK, ENV_PMI_SIZE};
use crate::proto;
use crate::server::Server;

/// Writes `rsmpirun: {msg}` to stderr, ignoring errors.
pub(crate) fn report_err(msg: &str) {
    report!("rsmpirun: {msg}");
}

/// How long ranks get between SIGTERM (or a forwarded signal) and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Interval of the supervision loop.
const POLL: Duration = Duration::from_millis(2);
/// Exit status of a job that hit its time limit (as `timeout(1)`).
pub const TIMEOUT_STATUS: i32 = 124;

/// Environment variable: this process's rank (informational: `Boot` takes its rank
/// from PMI; programs use it to tell whether they run under rsmpirun).
pub const ENV_RANK: &str = "RSMPI_RANK";
/// Environment variable: number of ranks (informational, like `RSMPI_RANK`).
pub const ENV_SIZE: &str = "RSMPI_SIZE";
/// Environment variable: the job id (`[A-Za-z0-9_-]`), also the name of the job's PMI
/// key-value space.
pub const ENV_JOB_ID: &str = "RSMPI_JOB_ID";
/// Environment variable: with `PMI_PORT`, this rank's secret, 32 hex digits, which the
/// PMI client sends in its `cmd=initack` line.
pub const ENV_SECRET: &str = "RSMPI_SECRET";
/// Environment variable: the transport to use (`auto`, `shm`, `ofi`).
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
    /// Value of `RSMPI_TRANSPORT` (default `auto`: shared memory between the ranks of
    /// a node, the network between nodes).
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
    /// Hosts to place the ranks on, in order; empty: all on this node. rsmpirun has
    /// no remote shell, so a host is a network namespace of this machine (`ip netns`),
    /// which is how multi-host jobs are tested on one machine: the ranks of one
    /// namespace count as one node and reach the others over its network.
    pub hosts: Vec<Host>,
    /// The address of this machine at which the ranks reach the launcher's PMI
    /// service over TCP (`PMI_PORT`). Needed with `hosts`; without `hosts`, the ranks
    /// of this node use it too instead of an inherited socket (`PMI_FD`).
    pub kvs_addr: Option<std::net::IpAddr>,
    /// How the ranks are bound to CPUs, out of those this process may use (default
    /// [`Bind::None`]; rsmpirun's is [`Bind::Block`]). The ranks placed on hosts
    /// (network namespaces of this machine) share its CPUs, and are bound among all
    /// the job's ranks alike.
    pub bind: Bind,
}

/// One host of a job: a network namespace of this machine and how many ranks it takes
/// (`None`: an equal share).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub netns: String,
    pub slots: Option<u32>,
}

impl Host {
    /// Parses `name` or `name:slots` items separated by commas (`--hosts a,b:3,c`).
    pub fn parse_list(list: &str) -> Result<Vec<Host>, LaunchError> {
        list.split(',')
            .map(|item| {
                let (name, slots) = match item.split_once(':') {
                    Some((n, s)) => match s.parse::<u32>() {
                        Ok(k) if k > 0 => (n, Some(k)),
                        _ => {
                            return Err(LaunchError::InvalidJob(format!(
                                "host {item:?}: slots must be a positive number"
                            )))
                        }
                    },
                    None => (item, None),
                };
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
                {
                    return Err(LaunchError::InvalidJob(format!(
                        "host {item:?}: expected a network namespace name"
                    )));
                }
                Ok(Host {
                    netns: name.to_owned(),
                    slots,
                })
            })
            .collect()
    }
}

/// The host of every rank: filled in order up to each host's slots, or in equal blocks
/// when no host gives slots.
pub fn place(hosts: &[Host], size: u32) -> Result<Vec<usize>, LaunchError> {
    if hosts.is_empty() {
        return Ok(vec![]);
    }
    if hosts.iter().all(|h| h.slots.is_none()) {
        let per = size.div_ceil(hosts.len() as u32).max(1);
        return Ok((0..size).map(|r| (r / per) as usize).collect());
    }
    let mut out = Vec::with_capacity(size as usize);
    for (i, h) in hosts.iter().enumerate() {
        let k = h.slots.ok_or_else(|| {
            LaunchError::InvalidJob(format!(
                "host {}: give slots to every host or to none",
                h.netns
            ))
        })?;
        out.extend(std::iter::repeat_n(i, k as usize));
    }
    if out.len() < size as usize {
        return Err(LaunchError::InvalidJob(format!(
            "{size} ranks do not fit the hosts' {} slots",
            out.len()
        )));
    }
    out.truncate(size as usize);
    Ok(out)
}

impl Job {
    /// A job of `size` ranks running `program args…`, with default settings: no output
    /// prefix, transport `auto`, no time limit, signal forwarding on.
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
            transport: "auto".into(),
            timeout: None,
            forward_signals: true,
            env: Vec::new(),
            hosts: Vec::new(),
            kvs_addr: None,
            bind: Bind::None,
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

/// Removes the job's shared-memory segments when dropped.
struct Cleanup {
    job_id: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
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
/// go to stderr, prefixed `rsmpirun: `. In every case all `/dev/shm/rsmpi-{job_id}-*`
/// files are removed before returning.
pub fn run(job: &Job) -> Result<i32, LaunchError> {
    if job.size == 0 {
        return Err(LaunchError::InvalidJob(
            "a job needs at least one rank".into(),
        ));
    }
    if job.program.is_empty() {
        return Err(LaunchError::InvalidJob("no program given".into()));
    }
    let placement = place(&job.hosts, job.size)?;
    if !job.hosts.is_empty() && job.kvs_addr.is_none() {
        return Err(LaunchError::InvalidJob(
            "ranks on other hosts need the address they reach the launcher at (--kvs-addr)".into(),
        ));
    }
    if let Some(ip) = job.kvs_addr.filter(|ip| ip.is_unspecified()) {
        return Err(LaunchError::InvalidJob(format!(
            "--kvs-addr {ip}: give an address the ranks can reach, not a wildcard"
        )));
    }
    // each rank's CPUs, out of this thread's (`bind`)
    let cpus = match job.bind {
        Bind::None => None,
        b => b.plan(
            job.size,
            &crate::bind::own_cpus().map_err(io_err("sched_getaffinity"))?,
        ),
    };
    let signals = SignalGuard::install(job.forward_signals)?;

    let tag: [u8; 4] = proto::random_bytes().map_err(io_err("reading /dev/urandom"))?;
    let job_id = format!("{}-{}", std::process::id(), proto::hex(&tag));
    let cleanup = Cleanup {
        job_id: job_id.clone(),
    };

    // PMI_PORT (TCP, a secret per rank) when the ranks reach us over the network,
    // else an inherited socketpair per rank (PMI_FD)
    let mut secrets = Vec::new();
    let mut listener = None;
    if let Some(ip) = job.kvs_addr {
        for _ in 0..job.size {
            secrets.push(proto::random_bytes().map_err(io_err("reading /dev/urandom"))?);
        }
        let l = TcpListener::bind((ip, 0)).map_err(io_err(format!("listening on {ip}")))?;
        let a = l.local_addr().map_err(io_err("getsockname"))?;
        listener = Some((l, a));
    }
    let mut server = Server::new(job.size, job_id.clone(), secrets.clone());
    let port = match listener {
        Some((l, a)) => {
            server
                .listen(l)
                .map_err(io_err("starting the PMI service"))?;
            Some(a)
        }
        None => None,
    };

    let (done_tx, done_rx) = mpsc::channel();
    let mut forwarders = 0usize;
    let mut sup = Supervisor {
        children: Vec::new(),
        status: Vec::new(),
    };
    for rank in 0..job.size {
        let host = placement
            .get(rank as usize)
            .map(|&h| job.hosts[h].netns.as_str());
        let pmi = match port {
            Some(addr) => Ok(RankPmi::Port {
                addr,
                secret: secrets[rank as usize],
            }),
            None => local_pmi(&server, rank),
        };
        match pmi.and_then(|pmi| {
            spawn_rank(
                job,
                rank,
                host,
                &job_id,
                pmi,
                cpus.as_ref().map(|c| &c[rank as usize][..]),
            )
        }) {
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

/// How a rank reaches the PMI service.
enum RankPmi {
    /// The rank's end of a socketpair (close-on-exec until its spawn).
    Fd(OwnedFd),
    /// TCP, authenticated with the rank's secret.
    Port {
        addr: SocketAddr,
        secret: [u8; proto::SECRET_LEN],
    },
}

/// A socketpair for `rank`: the server serves one end, the rank inherits the other.
fn local_pmi(server: &Server, rank: u32) -> io::Result<RankPmi> {
    // both ends are close-on-exec
    let (ours, theirs) = UnixStream::pair()?;
    server.serve_fd(rank, ours)?;
    let theirs = OwnedFd::from(theirs);
    // descriptors 0-2 become the rank's stdio: keep the socket above them
    let theirs = if theirs.as_raw_fd() < 3 {
        rustix::io::fcntl_dupfd_cloexec(&theirs, 3)?
    } else {
        theirs
    };
    Ok(RankPmi::Fd(theirs))
}

/// Held from making a rank's socket inheritable to closing it after the spawn, so that
/// the ranks of jobs started concurrently by this process (a library caller of [`run`])
/// do not inherit each other's sockets. (A process this one spawns by other means in
/// that window could; rsmpirun itself spawns nothing else.)
static SPAWN: Mutex<()> = Mutex::new(());

fn spawn_rank(
    job: &Job,
    rank: u32,
    netns: Option<&str>,
    job_id: &str,
    pmi: RankPmi,
    cpus: Option<&[usize]>,
) -> io::Result<Child> {
    let mut cmd = match netns {
        // `ip netns exec` enters the namespace and execs the program (no fork), so
        // the child is the rank itself
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&job.program);
            c
        }
        None => Command::new(&job.program),
    };
    cmd.args(&job.args);
    // nothing of an enclosing launcher's PMI session (or an outer rsmpirun's) must
    // reach the ranks: they talk to this one
    clear_job_env(&mut cmd);
    cmd.env(ENV_RANK, rank.to_string())
        .env(ENV_SIZE, job.size.to_string())
        .env(ENV_JOB_ID, job_id)
        .env(ENV_TRANSPORT, &job.transport)
        .env(ENV_PMI_RANK, rank.to_string())
        .env(ENV_PMI_SIZE, job.size.to_string());
    match &pmi {
        RankPmi::Fd(fd) => {
            cmd.env(ENV_PMI_FD, fd.as_raw_fd().to_string());
        }
        RankPmi::Port { addr, secret } => {
            cmd.env(ENV_PMI_PORT, addr.to_string())
                .env(ENV_PMI_ID, rank.to_string())
                .env(ENV_SECRET, proto::hex(secret));
        }
    }
    cmd.envs(job.env.iter().map(|(k, v)| (k, v)));
    // Like mpirun: standard input goes to rank 0 only.
    if rank != 0 {
        cmd.stdin(Stdio::null());
    }
    if job.prefix_output {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    match pmi {
        RankPmi::Fd(fd) => {
            let _one_at_a_time = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
            // inherited by this rank only: close-on-exec again once it is spawned (by
            // closing this process's copy)
            rustix::io::fcntl_setfd(fd.as_fd(), rustix::io::FdFlags::empty())?;
            let child = spawning_on(cpus, || cmd.spawn());
            drop(fd);
            child
        }
        RankPmi::Port { .. } => spawning_on(cpus, || cmd.spawn()),
    }
}

/// Removes from `cmd`'s environment everything that would make the program think it is
/// a rank of a job (this process's own job, if it is one): the `RSMPI_*` variables a
/// launcher sets and every `PMI_*`. For starting ranks of another job, or programs that
/// must run on their own.
pub fn clear_job_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k_s = k.to_string_lossy();
        if k_s.starts_with("PMI_")
            || [ENV_RANK, ENV_SIZE, ENV_JOB_ID, ENV_SECRET, "RSMPI_PMI"].contains(&&*k_s)
        {
            cmd.env_remove(&k);
        }
    }
}

/// How long an abort waits for a signal-killed rank to be reaped (see `supervise`).
const ABORT_SETTLE: Duration = Duration::from_millis(150);

/// How long after the first lost rank the job waits for the other ranks of the same
/// host to be seen lost, so that the report names them all.
const LOST_SETTLE: Duration = Duration::from_millis(1500);

/// Exit status of a job that lost contact with ranks on another host (as ssh's 255).
pub const LOST_STATUS: i32 = 255;

/// `rsmpirun: lost contact with ranks 2,3 (host ns1): …`.
fn describe_lost(job: &Job, lost: &[(u32, String)]) -> String {
    let mut ranks: Vec<u32> = lost.iter().map(|(r, _)| *r).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let placement = place(&job.hosts, job.size).unwrap_or_default();
    let mut hosts: Vec<&str> = ranks
        .iter()
        .filter_map(|&r| {
            placement
                .get(r as usize)
                .map(|&h| job.hosts[h].netns.as_str())
        })
        .collect();
    hosts.dedup();
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    format!(
        "rsmpirun: lost contact with rank{} {} (host {}): {}",
        if ranks.len() > 1 { "s" } else { "" },
        list.join(","),
        if hosts.is_empty() {
            "?".into()
        } else {
            hosts.join(",")
        },
        lost[0].1
    )
}

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
    // when the first rank was seen lost (its host stopped answering)
    let mut lost_seen: Option<Instant> = None;
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
            let lost = server.lost();
            if !lost.is_empty() && lost_seen.is_none() {
                lost_seen = Some(Instant::now());
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
            } else if lost_seen.is_some_and(|t| t.elapsed() >= LOST_SETTLE) {
                report!("{}", describe_lost(job, &lost));
                Some((LOST_STATUS, Signal::TERM))
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

//! Test support (cargo feature `testing`): a file-based [`Exchange`] and a harness that
//! runs a test body in several real processes by re-executing the current test binary.
//!
//! ```no_run
//! use transport_shm::testing::{run_ranks, RankEnv};
//! use std::time::Duration;
//!
//! #[test]
//! fn my_test() {
//!     // In the parent: spawns 2 children running `my_test` and waits (≤ 30 s) for them
//!     // to succeed. In each child: runs the closure as that rank.
//!     run_ranks("my_test", 2, Duration::from_secs(30), |env: RankEnv| {
//!         let mut ex = env.exchange();
//!         let t = transport_shm::ShmTransport::new(&mut ex).unwrap();
//!         // ...
//!     });
//! }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use transport::{Exchange, Rank, TransportError};

/// A start-up exchange through files in a directory shared by all ranks:
/// `publish` writes `{dir}/{rank}.{key}` (atomically, via rename), `fence` creates
/// `{dir}/fence.{n}.{rank}` and waits (1 ms sleeps, 20 s timeout) until all ranks' markers
/// exist, `lookup` reads the file.
#[derive(Debug)]
pub struct FileExchange {
    dir: PathBuf,
    rank: Rank,
    size: u32,
    job_id: String,
    fences: u64,
    timeout: Duration,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> TransportError {
    TransportError::Exchange(format!("{what} {}: {e}", path.display()))
}

impl FileExchange {
    /// An exchange for `rank` of `size` through `dir` (which must exist).
    pub fn new(dir: impl Into<PathBuf>, rank: Rank, size: u32, job_id: impl Into<String>) -> Self {
        Self {
            dir: dir.into(),
            rank,
            size,
            job_id: job_id.into(),
            fences: 0,
            timeout: Duration::from_secs(20),
        }
    }

    /// Changes the fence timeout (20 s by default).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Number of fences completed so far.
    pub fn fences(&self) -> u64 {
        self.fences
    }
}

impl Exchange for FileExchange {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn job_id(&self) -> &str {
        &self.job_id
    }

    fn publish(&mut self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        let path = self.dir.join(format!("{}.{key}", self.rank));
        let tmp = self.dir.join(format!("{}.{key}.tmp", self.rank));
        std::fs::write(&tmp, value).map_err(|e| io_err("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err("rename to", &path, e))
    }

    fn fence(&mut self) -> Result<(), TransportError> {
        let n = self.fences;
        let mine = self.dir.join(format!("fence.{n}.{}", self.rank));
        std::fs::write(&mine, b"").map_err(|e| io_err("write", &mine, e))?;
        let deadline = Instant::now() + self.timeout;
        for r in 0..self.size {
            let marker = self.dir.join(format!("fence.{n}.{r}"));
            while !marker.exists() {
                if Instant::now() > deadline {
                    return Err(TransportError::Exchange(format!(
                        "fence {n}: rank {r} did not arrive within {:?}",
                        self.timeout
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.fences += 1;
        Ok(())
    }

    fn lookup(&mut self, rank: Rank, key: &str) -> Result<Vec<u8>, TransportError> {
        let path = self.dir.join(format!("{rank}.{key}"));
        std::fs::read(&path).map_err(|e| io_err("read", &path, e))
    }
}

/// Environment variables through which the harness tells a child what to do.
pub const ENV_ROLE: &str = "RSMPI_TEST_ROLE";
const ENV_RANK: &str = "RSMPI_TEST_RANK";
const ENV_SIZE: &str = "RSMPI_TEST_SIZE";
const ENV_DIR: &str = "RSMPI_TEST_DIR";
const ENV_JOB: &str = "RSMPI_TEST_JOB";

/// What a child process of [`spawn_ranks`] is: its rank, the job size, the exchange
/// directory and the job id.
#[derive(Clone, Debug)]
pub struct RankEnv {
    pub rank: Rank,
    pub size: u32,
    pub dir: PathBuf,
    pub job_id: String,
}

impl RankEnv {
    /// The [`FileExchange`] of this rank.
    pub fn exchange(&self) -> FileExchange {
        FileExchange::new(&self.dir, self.rank, self.size, self.job_id.clone())
    }
}

/// `Some` when this process is a child spawned by [`spawn_ranks`] for `role`.
pub fn child_env(role: &str) -> Option<RankEnv> {
    if std::env::var(ENV_ROLE).ok()? != role {
        return None;
    }
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    Some(RankEnv {
        rank: var(ENV_RANK).parse().expect(ENV_RANK),
        size: var(ENV_SIZE).parse().expect(ENV_SIZE),
        dir: var(ENV_DIR).into(),
        job_id: var(ENV_JOB),
    })
}

/// A fresh job id and exchange directory (under the system temp dir) for `role`.
pub fn new_job(role: &str) -> (String, PathBuf) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let clean: String = role
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(24)
        .collect();
    let job = format!(
        "t{}-{}-{nanos}-{clean}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(format!("rsmpi-ex-{job}"));
    std::fs::create_dir_all(&dir).expect("create exchange dir");
    (job, dir)
}

/// Removes what a job may have left: its exchange directory and, like the launcher,
/// `/dev/shm/rsmpi-{job}-*`. Returns the shm segment names that were still there.
pub fn cleanup_job(job: &str, dir: &Path) -> Vec<String> {
    let _ = std::fs::remove_dir_all(dir);
    let prefix = format!("rsmpi-{job}-");
    let mut left = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
                left.push(name);
            }
        }
    }
    left
}

/// What became of the ranks of [`spawn_ranks`].
#[derive(Debug)]
pub struct Outcome {
    /// Each rank's exit status.
    pub status: Vec<ExitStatus>,
    /// Whether each rank called [`mark_ran`] (so a child that matched no test, and
    /// therefore "succeeded" without doing anything, is caught).
    pub ran: Vec<bool>,
    /// Shm segments of the job that were still in `/dev/shm` (and are now removed).
    pub left: Vec<String>,
}

/// Records that this rank ran its test body to the end (see [`Outcome::ran`]).
pub fn mark_ran(env: &RankEnv) {
    std::fs::write(env.dir.join(format!("ran.{}", env.rank)), b"").expect("write ran marker");
}

/// Runs `n` children that re-execute the current test binary with `role` as the
/// (exact) test name, each as one rank of a fresh job, and waits for all of them.
/// On `timeout` kills them all and panics. Every rank runs to its end, whatever the
/// others do: for the tests of a rank's failure, which its peers must survive.
pub fn spawn_ranks(role: &str, n: u32, timeout: Duration) -> Outcome {
    spawn_ranks_until(role, n, timeout, None)
}

/// How long the other ranks of a [`run_ranks`] job may run on once one has failed,
/// before they are killed: long enough for a peer's own failure (often caused by the
/// first, `PeerGone`) to be reported, far shorter than a test's timeout, which a rank
/// waiting for its failed peer would otherwise sit out.
pub const AFTER_FAILURE: Duration = Duration::from_secs(5);

/// [`spawn_ranks`]; with `after_failure`, the ranks still running that long after one
/// exited unsuccessfully are killed (their status then says so: SIGKILL).
fn spawn_ranks_until(
    role: &str,
    n: u32,
    timeout: Duration,
    after_failure: Option<Duration>,
) -> Outcome {
    let (job, dir) = new_job(role);
    let exe = std::env::current_exe().expect("current_exe");
    let mut children: Vec<Child> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args([role, "--exact", "--nocapture", "--test-threads=1"])
                .env(ENV_ROLE, role)
                .env(ENV_RANK, r.to_string())
                .env(ENV_SIZE, n.to_string())
                .env(ENV_DIR, &dir)
                .env(ENV_JOB, &job)
                // The child's own test-harness summary would only add noise; panics and
                // eprintln! go to stderr, which stays inherited.
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn child rank")
        })
        .collect();
    let mut deadline = Instant::now() + timeout;
    let mut status: Vec<Option<ExitStatus>> = vec![None; n as usize];
    let mut cut_short = false;
    while status.iter().any(Option::is_none) {
        for (c, s) in children.iter_mut().zip(status.iter_mut()) {
            if s.is_none() {
                *s = c.try_wait().expect("wait for child");
            }
        }
        let failed = status.iter().flatten().any(|s| !s.success());
        if let (Some(grace), true, false) = (after_failure, failed, cut_short) {
            cut_short = true;
            deadline = deadline.min(Instant::now() + grace);
        }
        if Instant::now() > deadline && cut_short {
            for (c, s) in children.iter_mut().zip(status.iter_mut()) {
                if s.is_none() {
                    let _ = c.kill();
                    *s = Some(c.wait().expect("wait for killed child"));
                }
            }
            break;
        }
        if Instant::now() > deadline {
            for c in &mut children {
                let _ = c.kill();
                let _ = c.wait();
            }
            cleanup_job(&job, &dir);
            panic!("{role}: ranks did not finish within {timeout:?} (states: {status:?})");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let ran = (0..n)
        .map(|r| dir.join(format!("ran.{r}")).exists())
        .collect();
    let left = cleanup_job(&job, &dir);
    Outcome {
        status: status.into_iter().map(Option::unwrap).collect(),
        ran,
        left,
    }
}

/// The usual multi-process test: in a child spawned for `role`, runs `body` as that
/// rank (a panic fails the child); in the parent, spawns `n` ranks and asserts that all
/// ran `body` to the end and exited successfully within `timeout`, leaving no shm
/// segment behind. Once a rank has failed, the others are killed [`AFTER_FAILURE`]
/// later, and the test fails naming every rank that failed or was killed.
pub fn run_ranks(role: &str, n: u32, timeout: Duration, body: impl FnOnce(RankEnv)) {
    if let Some(env) = child_env(role) {
        body(env.clone());
        mark_ran(&env);
        return;
    }
    let out = spawn_ranks_until(role, n, timeout, Some(AFTER_FAILURE));
    // every rank that failed, not only the first: a rank that waits for a failed peer
    // fails too, later, and its panic alone would hide the cause
    let failed: Vec<String> = out
        .status
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.success())
        .map(|(r, s)| format!("rank {r} ({s})"))
        .collect();
    assert!(
        failed.is_empty(),
        "{role}: {} failed; their panics are above",
        failed.join(", ")
    );
    for (r, ran) in out.ran.iter().enumerate() {
        assert!(ran, "{role}: rank {r} exited without running the test body");
    }
    assert!(
        out.left.is_empty(),
        "{role}: segments left in /dev/shm: {:?}",
        out.left
    );
}

/// xorshift64*: deterministic test data without a dependency.
pub struct Rng(pub u64);

#[allow(clippy::should_implement_trait)] // an endless generator, not an iterator
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// FNV-1a over 8-byte words (fast enough for hundreds of MB at opt-level 2): the payload
/// checks of the transports' multi-process tests.
pub fn checksum(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ data.len() as u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(0x100_0000_01b3);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

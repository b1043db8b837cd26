//! A PMI-1 client: the text protocol that MPICH's Hydra (`mpiexec`) serves to the
//! processes it starts, over an inherited socket (`PMI_FD`) or a TCP port
//! (`PMI_PORT`, with `PMI_ID`). rsmpi ranks use it for their rank, the job size and the
//! start-up exchange when they were started by such a launcher.
//!
//! The protocol: one request per line, `cmd=NAME key=value …`, each answered by one
//! line (`init` → `response_to_init`, `get_maxes` → `maxes`, `get_my_kvsname` →
//! `my_kvsname`, `put` → `put_result`, `barrier_in` → `barrier_out`, `get` →
//! `get_result`, `finalize` → `finalize_ack`; `abort` has no answer). Values may not
//! contain spaces, so published bytes travel hex-encoded; a value of `vallen_max` hex
//! digits or more (the limit counts a C string's NUL: Hydra keeps 1023 of 1024) is
//! split: its parts go under `KEY:1`, `KEY:2`, … and `KEY` holds `*N` (`*` is no hex
//! digit), both in PMI-1 and PMI-2.
//!
//! With `PMI_PORT`, the first line is `cmd=initack pmiid=ID`; when `RSMPI_SECRET` is
//! set (only rsmpirun sets it) the line also carries it, `rsmpi_secret=HEX`, and
//! rsmpirun serves only a connection that does.
//!
//! PMI-2 (Slurm's `srun --mpi=pmi2`, which sets `PMI_JOBID`; or any launcher with
//! `RSMPI_PMI=2`, Hydra included) chooses the version in PMI-1's format (`cmd=init
//! pmi_version=2 pmi_subversion=0`) and then sends each command as a 6-digit length and
//! a body `cmd=NAME;key=value;…;` (`fullinit`, `job-getid`, `kvs-put`, `kvs-fence`,
//! `kvs-get`, `finalize`, `abort`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

use transport::TransportError;

/// Most parts a split value may have.
const MAX_PARTS: usize = 4096;

/// The environment variables of a PMI-1 launcher.
pub const ENV_PMI_FD: &str = "PMI_FD";
pub const ENV_PMI_PORT: &str = "PMI_PORT";
pub const ENV_PMI_ID: &str = "PMI_ID";
pub const ENV_PMI_RANK: &str = "PMI_RANK";
pub const ENV_PMI_SIZE: &str = "PMI_SIZE";
/// Set by Slurm's PMI-2 plugin (`srun --mpi=pmi2`), not by Hydra.
pub const ENV_PMI_JOBID: &str = "PMI_JOBID";

fn exch(msg: impl Into<String>) -> TransportError {
    TransportError::Exchange(msg.into())
}

/// The connection to the launcher's PMI server.
enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn reader(&self) -> std::io::Result<Box<dyn std::io::Read + Send>> {
        Ok(match self {
            Conn::Unix(s) => Box::new(s.try_clone()?),
            Conn::Tcp(s) => Box::new(s.try_clone()?),
        })
    }
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.write_all(b),
            Conn::Tcp(s) => s.write_all(b),
        }
    }
}

/// A PMI-1 session.
pub(crate) struct Pmi {
    conn: Conn,
    reader: BufReader<Box<dyn std::io::Read + Send>>,
    pub rank: u32,
    pub size: u32,
    pub kvsname: String,
    vallen_max: usize,
    keylen_max: usize,
    finalized: bool,
    /// Served by rsmpirun (set by `Boot`): an abort message may keep its spaces.
    pub rsmpirun: bool,
    /// Speaking PMI-2 (length-prefixed `cmd=…;key=value;` messages).
    v2: bool,
    /// The PMI-2 job id (for `kvs-get`).
    jobid: String,
    /// Fences passed (PMI-2 barrier marks).
    epoch: u64,
}

impl std::fmt::Debug for Pmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmi")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("kvsname", &self.kvsname)
            .finish()
    }
}

fn env_num(name: &str) -> Result<u32, TransportError> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| exch(format!("{name} is not set to a number")))
}

/// Takes the socket the launcher passed as file descriptor `fd`.
#[allow(unsafe_code)]
fn adopt_fd(fd: i32) -> Result<UnixStream, TransportError> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // refuse anything that is not an open socket before taking ownership
    let borrowed = rustix::fs::fstat(
        // SAFETY: `fd` is only borrowed for this `fstat`; it is checked to be open
        // (fstat fails otherwise) before anything else uses it.
        unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) },
    )
    .map_err(|e| exch(format!("{ENV_PMI_FD}={fd} is not an open descriptor: {e}")))?;
    if rustix::fs::FileType::from_raw_mode(borrowed.st_mode) != rustix::fs::FileType::Socket {
        return Err(exch(format!("{ENV_PMI_FD}={fd} is not a socket")));
    }
    // SAFETY: the launcher passed this descriptor to this process for the PMI session
    // alone (that is what PMI_FD means); it is open and a socket (checked above), and
    // this is the only place that takes it: `Boot::from_env` runs once per process
    // (MPI is initialized once) and nothing else in rsmpi reads PMI_FD.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // the session is this process's alone: not inherited by the programs it starts
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| exch(format!("{ENV_PMI_FD}={fd}: fcntl: {e}")))?;
    Ok(UnixStream::from(owned))
}

impl Pmi {
    /// Connects when the environment names a PMI-1 launcher; `Ok(None)` otherwise.
    pub fn from_env() -> Result<Option<Pmi>, TransportError> {
        let fd = std::env::var(ENV_PMI_FD).ok();
        let port = std::env::var(ENV_PMI_PORT).ok();
        if fd.is_none() && port.is_none() {
            return Ok(None);
        }
        // Slurm's PMI-2 plugin sets PMI_JOBID and speaks PMI-2 only; Hydra speaks both
        let v2 = std::env::var_os(ENV_PMI_JOBID).is_some()
            || std::env::var("RSMPI_PMI").is_ok_and(|v| v.trim() == "2");
        let mut conn = match (fd, port) {
            (Some(fd), _) => {
                let fd: i32 = fd
                    .trim()
                    .parse()
                    .map_err(|_| exch(format!("{ENV_PMI_FD} is not a number")))?;
                Conn::Unix(adopt_fd(fd)?)
            }
            (None, Some(port)) => {
                let s = TcpStream::connect(port.trim())
                    .map_err(|e| exch(format!("{ENV_PMI_PORT}={port}: {e}")))?;
                Conn::Tcp(s)
            }
            (None, None) => unreachable!(),
        };
        let pmi_id = std::env::var(ENV_PMI_ID).ok();
        if let Some(id) = &pmi_id {
            // with PMI_PORT the process says who it is first (and proves it to rsmpirun)
            let secret = match std::env::var(crate::run::ENV_SECRET) {
                Ok(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    format!(" {}={s}", crate::proto::SECRET_KEY)
                }
                Ok(_) => {
                    return Err(exch(format!(
                        "{} is not hex digits",
                        crate::run::ENV_SECRET
                    )))
                }
                Err(_) => String::new(),
            };
            conn.write_all(format!("cmd=initack pmiid={}{secret}\n", id.trim()).as_bytes())
                .map_err(|e| exch(format!("PMI initack: {e}")))?;
        }
        let reader = BufReader::new(conn.reader().map_err(|e| exch(format!("PMI: {e}")))?);
        let mut p = Pmi {
            conn,
            reader,
            rank: 0,
            size: 0,
            kvsname: String::new(),
            vallen_max: 1024,
            keylen_max: 64,
            finalized: false,
            rsmpirun: false,
            v2,
            jobid: String::new(),
            epoch: 0,
        };
        let (mut rank, mut size) = (None, None);
        if pmi_id.is_some() {
            // the server answers `cmd=initack`, then `cmd=set` lines with the size, the
            // rank and last the debug flag
            for _ in 0..8 {
                let l = p.read_line()?;
                if let Some(v) = l.get("size") {
                    size = v.parse().ok();
                }
                if let Some(v) = l.get("rank") {
                    rank = v.parse().ok();
                }
                if l.get("debug").is_some() {
                    break;
                }
            }
        }
        let rank = match rank {
            Some(r) => r,
            None => env_num(ENV_PMI_RANK)?,
        };
        let size = match size {
            Some(n) => n,
            None => env_num(ENV_PMI_SIZE)?,
        };
        if rank >= size {
            return Err(exch(format!(
                "PMI rank {rank} is not below the size {size}"
            )));
        }
        (p.rank, p.size) = (rank, size);
        if v2 {
            p.init_v2()?;
            return Ok(Some(p));
        }
        let r = p.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        )?;
        if r.get("rc").is_some_and(|rc| rc != "0") {
            return Err(exch(format!("PMI init refused: {}", r.line)));
        }
        let m = p.call("cmd=get_maxes", "maxes")?;
        if let Some(v) = m.get("vallen_max").and_then(|v| v.parse().ok()) {
            p.vallen_max = v;
        }
        if let Some(v) = m.get("keylen_max").and_then(|v| v.parse().ok()) {
            p.keylen_max = v;
        }
        let k = p.call("cmd=get_my_kvsname", "my_kvsname")?;
        p.kvsname = k
            .get("kvsname")
            .ok_or_else(|| exch("PMI answered without a kvsname"))?
            .to_string();
        Ok(Some(p))
    }

    /// PMI-2 start-up: the version is chosen in PMI-1's wire format, then `fullinit`.
    fn init_v2(&mut self) -> Result<(), TransportError> {
        let r = self.call(
            "cmd=init pmi_version=2 pmi_subversion=0",
            "response_to_init",
        )?;
        if r.get("rc").is_some_and(|rc| rc != "0") || r.get("pmi_version") != Some("2") {
            return Err(exch(format!(
                "the launcher does not speak PMI-2: {}",
                r.line
            )));
        }
        // Slurm wants the job id it exported; Hydra has none to give
        let jobid = std::env::var(ENV_PMI_JOBID)
            .map(|j| format!("pmijobid={};", j.trim()))
            .unwrap_or_default();
        let f = self.call2(
            &format!("cmd=fullinit;{jobid}pmirank={};threaded=FALSE;", self.rank),
            "fullinit-response",
        )?;
        if let Some(v) = f.get("size").and_then(|v| v.parse().ok()) {
            self.size = v;
        }
        if let Some(v) = f.get("rank").and_then(|v| v.parse().ok()) {
            self.rank = v;
        }
        let j = self.call2("cmd=job-getid;", "job-getid-response")?;
        self.jobid = j
            .get("jobid")
            .ok_or_else(|| exch("PMI-2 answered without a job id"))?
            .to_string();
        self.kvsname = self.jobid.clone();
        // PMI-2's minimum value and key lengths (PMI2_MAX_VALLEN, PMI2_MAX_KEYLEN)
        self.vallen_max = 1024;
        self.keylen_max = 64;
        Ok(())
    }

    /// Sends a PMI-2 command (6-digit length, then the body) and reads the answer,
    /// which must be `cmd=want` with `rc=0`.
    fn call2(&mut self, req: &str, want: &str) -> Result<Line, TransportError> {
        self.conn
            .write_all(format!("{:6}{req}", req.len()).as_bytes())
            .map_err(|e| exch(format!("PMI write: {e}")))?;
        let mut len = [0u8; 6];
        self.reader
            .read_exact(&mut len)
            .map_err(|e| exch(format!("PMI-2 read: {e}")))?;
        let n: usize = std::str::from_utf8(&len)
            .ok()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| exch(format!("PMI-2: bad length {len:?}")))?;
        let mut body = vec![0u8; n];
        self.reader
            .read_exact(&mut body)
            .map_err(|e| exch(format!("PMI-2 read: {e}")))?;
        let l = Line {
            line: String::from_utf8_lossy(&body).replace(';', " "),
        };
        if l.get("cmd") != Some(want) || l.get("rc").is_some_and(|rc| rc != "0") {
            return Err(exch(format!("PMI-2: `{req}` was answered by `{}`", l.line)));
        }
        Ok(l)
    }

    fn read_line(&mut self) -> Result<Line, TransportError> {
        let mut s = String::new();
        let n = self
            .reader
            .read_line(&mut s)
            .map_err(|e| exch(format!("PMI read: {e}")))?;
        if n == 0 {
            return Err(exch("the PMI server closed the connection"));
        }
        Ok(Line {
            line: s.trim_end().to_string(),
        })
    }

    /// Sends `req` and reads the answer, which must be `cmd=want`.
    fn call(&mut self, req: &str, want: &str) -> Result<Line, TransportError> {
        self.conn
            .write_all(format!("{req}\n").as_bytes())
            .map_err(|e| exch(format!("PMI write: {e}")))?;
        let l = self.read_line()?;
        match l.get("cmd") {
            Some(c) if c == want => Ok(l),
            _ => Err(exch(format!("PMI: `{req}` was answered by `{}`", l.line))),
        }
    }

    /// Publishes `value` under `key` (hex-encoded, split when longer than the
    /// launcher's `vallen_max`).
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        let v = crate::proto::hex(value);
        // the limits count a C string's terminating NUL (Hydra keeps 1023 of 1024)
        let part = self.vallen_max.saturating_sub(1).max(16);
        if v.len() <= part {
            return self.put_raw(key, &v);
        }
        let n = v.len().div_ceil(part);
        if n > MAX_PARTS {
            return Err(exch(format!(
                "a start-up value of {} bytes is too large for PMI",
                value.len()
            )));
        }
        for (i, chunk) in v.as_bytes().chunks(part).enumerate() {
            let chunk = std::str::from_utf8(chunk).expect("hex is ASCII");
            self.put_raw(&format!("{key}:{}", i + 1), chunk)?;
        }
        self.put_raw(key, &format!("*{n}"))
    }

    fn put_raw(&mut self, key: &str, v: &str) -> Result<(), TransportError> {
        if key.len() >= self.keylen_max {
            return Err(exch(format!(
                "PMI key {key} is longer than the launcher's limit of {}",
                self.keylen_max
            )));
        }
        if self.v2 {
            return self
                .call2(
                    &format!("cmd=kvs-put;key={key};value={v};"),
                    "kvs-put-response",
                )
                .map(|_| ());
        }
        let req = format!("cmd=put kvsname={} key={key} value={v}", self.kvsname);
        let r = self.call(&req, "put_result")?;
        if r.get("rc").is_some_and(|rc| rc != "0") {
            return Err(exch(format!("PMI put of {key} failed: {}", r.line)));
        }
        Ok(())
    }

    /// The collective barrier that also makes every `put` visible.
    pub fn barrier(&mut self) -> Result<(), TransportError> {
        if !self.v2 {
            return self.call("cmd=barrier_in", "barrier_out").map(|_| ());
        }
        // PMI-2's fence makes the puts visible, but Hydra answers it at once (its gets
        // wait for their key instead), so it is no barrier there: every rank also
        // publishes that it reached this fence and reads everyone's mark (Slurm's
        // fence waits for all ranks, so there the marks are simply there)
        self.epoch += 1;
        let mark = format!("fence{}-r{}", self.epoch, self.rank);
        self.call2(
            &format!("cmd=kvs-put;key={mark};value=1;"),
            "kvs-put-response",
        )?;
        self.call2("cmd=kvs-fence;", "kvs-fence-response")?;
        let (me, n) = (self.rank, self.size);
        for r in (0..n).filter(|&r| r != me) {
            let key = format!("fence{}-r{r}", self.epoch);
            let req = format!("cmd=kvs-get;jobid={};srcid=-1;key={key};", self.jobid);
            let got = self.call2(&req, "kvs-get-response")?;
            if got.get("found") != Some("TRUE") {
                return Err(exch(format!("PMI-2 fence: rank {r} did not reach it")));
            }
        }
        Ok(())
    }

    /// Reads `key` (joining the parts of a split value).
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, TransportError> {
        let v = self.get_raw(key)?;
        let hex = match v.strip_prefix('*') {
            Some(n) => {
                let n: usize = n
                    .parse()
                    .ok()
                    .filter(|&n| n <= MAX_PARTS)
                    .ok_or_else(|| exch(format!("PMI value of {key} is not hex")))?;
                let mut all = String::new();
                for i in 1..=n {
                    all.push_str(&self.get_raw(&format!("{key}:{i}"))?);
                }
                all
            }
            None => v,
        };
        crate::proto::unhex(&hex).ok_or_else(|| exch(format!("PMI value of {key} is not hex")))
    }

    fn get_raw(&mut self, key: &str) -> Result<String, TransportError> {
        let r = if self.v2 {
            let req = format!("cmd=kvs-get;jobid={};srcid=-1;key={key};", self.jobid);
            let r = self.call2(&req, "kvs-get-response")?;
            if r.get("found") != Some("TRUE") {
                return Err(exch(format!("PMI has no value for {key}")));
            }
            r
        } else {
            let req = format!("cmd=get kvsname={} key={key}", self.kvsname);
            let r = self.call(&req, "get_result")?;
            if r.get("rc").is_some_and(|rc| rc != "0") {
                return Err(exch(format!("PMI has no value for {key}")));
            }
            r
        };
        Ok(r.get("value").unwrap_or_default().to_owned())
    }

    /// Asks the launcher to end the job with `code` (no answer comes).
    pub fn abort(&mut self, code: i32, msg: &str) {
        if self.rsmpirun && !self.v2 {
            // rsmpirun takes the rest of the line as the message
            let msg: String = msg
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(512)
                .collect();
            let req = format!("cmd=abort exitcode={code} error_msg={msg}\n");
            let _ = self.conn.write_all(req.as_bytes());
            return;
        }
        let msg: String = msg
            .chars()
            .map(|c| {
                if c.is_whitespace() || c == '=' || c == ';' {
                    '_'
                } else {
                    c
                }
            })
            .take(512)
            .collect();
        let req = if self.v2 {
            let body = format!("cmd=abort;isworld=TRUE;msg={msg};");
            format!("{:6}{body}", body.len())
        } else {
            format!("cmd=abort exitcode={code} error_msg={msg}\n")
        };
        let _ = self.conn.write_all(req.as_bytes());
    }

    /// Ends the session (`MPI_Finalize`).
    pub fn finalize(&mut self) {
        if !self.finalized {
            self.finalized = true;
            let _ = if self.v2 {
                self.call2("cmd=finalize;", "finalize-response")
            } else {
                self.call("cmd=finalize", "finalize_ack")
            };
        }
    }
}

impl Drop for Pmi {
    fn drop(&mut self) {
        self.finalize();
    }
}

/// One answer line.
struct Line {
    line: String,
}

impl Line {
    fn get(&self, key: &str) -> Option<&str> {
        crate::proto::field(&self.line, key)
    }
}

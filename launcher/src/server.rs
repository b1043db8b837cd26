//! rsmpirun's PMI-1 server: one thread per rank connection (an inherited socketpair,
//! `PMI_FD`, or an authenticated TCP connection to `PMI_PORT`), plus an acceptor
//! thread for `PMI_PORT`, all sharing a [`Shared`]. The protocol is described in the
//! crate documentation.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::proto::{self, ReadLine};

/// How long a new `PMI_PORT` connection may take to send its `initack` line.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many `PMI_PORT` connections may be waiting to authenticate; a new one
/// closes the one waiting longest (a rank sends its `initack` at once, so a flood of
/// silent connections neither piles up threads nor locks the ranks out).
const MAX_PENDING: usize = 64;
/// What one rank may store (keys and values), in bytes.
const RANK_BYTES_MAX: usize = 16 << 20;
/// Longest abort message kept.
const ABORT_MSG_MAX: usize = 1024;

/// An `abort` request received from a rank.
#[derive(Clone, Debug)]
pub(crate) struct AbortReq {
    pub rank: u32,
    pub code: i32,
    pub msg: String,
}

/// A rank's connection.
enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn try_clone(&self) -> io::Result<Conn> {
        Ok(match self {
            Conn::Unix(s) => Conn::Unix(s.try_clone()?),
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        let _ = match self {
            Conn::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Conn::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.set_read_timeout(t),
            Conn::Tcp(s) => s.set_read_timeout(t),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(buf),
            Conn::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Default)]
struct State {
    /// key → (the rank that put it, value)
    kv: HashMap<String, (u32, String)>,
    /// Bytes of keys and values stored by each rank.
    used: Vec<usize>,
    /// Ranks that entered the current barrier.
    in_barrier: Vec<bool>,
    barrier_count: u32,
    barrier_gen: u64,
    abort: Option<AbortReq>,
    /// `PMI_PORT` ids already connected (each may connect once).
    claimed: Vec<bool>,
    /// `PMI_PORT` connections not yet authenticated, oldest first.
    pending: VecDeque<u64>,
    /// Clones of every open connection, shut down when the server stops.
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    workers: Vec<JoinHandle<()>>,
    /// Ranks whose `PMI_PORT` connection failed (timed out: the host is unreachable)
    /// before they finalized, with the error.
    lost: Vec<(u32, String)>,
}

struct Shared {
    size: u32,
    kvsname: String,
    /// Each rank's `PMI_PORT` secret (empty without `PMI_PORT`).
    secrets: Vec<[u8; proto::SECRET_LEN]>,
    state: Mutex<State>,
    barrier_cv: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `conn` and serves it on a new thread (`rank`: `None` for a `PMI_PORT`
    /// connection, which authenticates first). Closes it when stopping.
    fn spawn(self: &Arc<Self>, conn: Conn, rank: Option<u32>) -> io::Result<()> {
        let clone = conn.try_clone()?;
        let mut st = self.lock();
        // checked under the lock: `stop` shuts down every connection in `conns`
        if self.stop.load(Ordering::SeqCst) {
            conn.shutdown();
            return Ok(());
        }
        let id = st.next_conn;
        st.next_conn += 1;
        if rank.is_none() {
            if st.pending.len() >= MAX_PENDING {
                if let Some(old) = st.pending.pop_front() {
                    if let Some(c) = st.conns.get(&old) {
                        c.shutdown();
                    }
                }
            }
            st.pending.push_back(id);
        }
        st.conns.insert(id, clone);
        let sh = Arc::clone(self);
        let name = match rank {
            Some(r) => format!("rsmpirun-pmi-{r}"),
            None => "rsmpirun-pmi".into(),
        };
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || serve(conn, rank, &sh, id));
        match spawned {
            Ok(h) => {
                st.workers.retain(|h| !h.is_finished());
                st.workers.push(h);
                Ok(())
            }
            Err(e) => {
                if let Some(c) = st.conns.remove(&id) {
                    c.shutdown();
                }
                st.pending.retain(|&p| p != id);
                Err(e)
            }
        }
    }
}

/// A running PMI-1 server for one job.
pub(crate) struct Server {
    shared: Arc<Shared>,
    /// The `PMI_PORT` acceptor.
    acceptor: Option<JoinHandle<()>>,
    stopped: bool,
}

impl Server {
    /// A server for a job of `size` ranks whose key-value space is `kvsname`; with
    /// `secrets` (one per rank), [`Server::listen`] can serve `PMI_PORT`.
    pub fn new(size: u32, kvsname: String, secrets: Vec<[u8; proto::SECRET_LEN]>) -> Server {
        let n = size as usize;
        Server {
            shared: Arc::new(Shared {
                size,
                kvsname,
                secrets,
                state: Mutex::new(State {
                    used: vec![0; n],
                    in_barrier: vec![false; n],
                    claimed: vec![false; n],
                    ..State::default()
                }),
                barrier_cv: Condvar::new(),
                stop: AtomicBool::new(false),
            }),
            acceptor: None,
            stopped: false,
        }
    }

    /// Serves rank `rank` on its end of an inherited socketpair (`PMI_FD`): private by
    /// construction, so no authentication.
    pub fn serve_fd(&self, rank: u32, s: UnixStream) -> io::Result<()> {
        self.shared.spawn(Conn::Unix(s), Some(rank))
    }

    /// Accepts `PMI_PORT` connections on `l`; each must authenticate with its rank's
    /// secret.
    pub fn listen(&mut self, l: TcpListener) -> io::Result<()> {
        assert_eq!(self.shared.secrets.len(), self.shared.size as usize);
        // polled, so that stopping needs no connection to wake it
        l.set_nonblocking(true)?;
        let sh = Arc::clone(&self.shared);
        let h = std::thread::Builder::new()
            .name("rsmpirun-accept".into())
            .spawn(move || accept_loop(&l, &sh))?;
        self.acceptor = Some(h);
        Ok(())
    }

    /// Ranks whose connection over the network failed before they finalized (their
    /// host stopped answering), with the error.
    pub fn lost(&self) -> Vec<(u32, String)> {
        self.shared.lock().lost.clone()
    }

    /// The first `abort` request received, if any.
    pub fn abort_request(&self) -> Option<AbortReq> {
        self.shared.lock().abort.clone()
    }

    /// Stops serving: closes every connection and joins every server thread.
    pub fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            // under the lock: a rank's thread checks `stop` and starts waiting in the
            // barrier while it holds it, so it cannot miss this wake-up
            let st = self.shared.lock();
            for c in st.conns.values() {
                c.shutdown();
            }
            self.shared.barrier_cv.notify_all();
        }
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        let workers = std::mem::take(&mut self.shared.lock().workers);
        for w in workers {
            let _ = w.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How often the acceptor looks for new connections (and for the server stopping).
const ACCEPT_POLL: Duration = Duration::from_millis(5);

fn accept_loop(l: &TcpListener, sh: &Arc<Shared>) {
    while !sh.stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((s, _)) => {
                let _ = s.set_nodelay(true);
                watch(&s);
                if let Err(e) = s
                    .set_nonblocking(false)
                    .and_then(|()| sh.spawn(Conn::Tcp(s), None))
                {
                    crate::run::report_err(&format!("cannot serve a PMI connection: {e}"));
                }
            }
            // nothing waiting; or out of descriptors and the like: do not spin
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Keepalive on a rank's connection: a host that stops answering (cut off, powered
/// off) makes the connection fail within about 5 s of silence, and the job ends
/// naming its ranks, where a rank waiting for a message from it would wait forever.
fn watch(s: &TcpStream) {
    use rustix::net::sockopt;
    let _ = sockopt::set_socket_keepalive(s, true);
    let _ = sockopt::set_tcp_keepidle(s, Duration::from_secs(2));
    let _ = sockopt::set_tcp_keepintvl(s, Duration::from_secs(1));
    let _ = sockopt::set_tcp_keepcnt(s, 3);
    // unacknowledged data (an answer the rank never receives) fails as fast
    let _ = sockopt::set_tcp_user_timeout(s, 5000);
}

/// Serves one connection until it closes, misbehaves beyond repair, or the server
/// stops. A `PMI_PORT` connection whose first line is not a valid `initack` with the
/// secret of a rank not yet connected is closed without any answer.
fn serve(conn: Conn, rank: Option<u32>, sh: &Shared, id: u64) {
    let Ok(mut w) = conn.try_clone() else {
        end(sh, id, &conn);
        return;
    };
    let mut r = BufReader::with_capacity(4096, conn);
    let rank = match rank {
        Some(rank) => rank,
        None => {
            let auth = authenticate(&mut r, sh);
            sh.lock().pending.retain(|&p| p != id);
            let Some(rank) = auth else {
                end(sh, id, &w);
                return;
            };
            let hello = format!(
                "cmd=initack rc=0\ncmd=set size={}\ncmd=set rank={rank}\ncmd=set debug=0\n",
                sh.size
            );
            if r.get_ref().set_read_timeout(None).is_err() || w.write_all(hello.as_bytes()).is_err()
            {
                end(sh, id, &w);
                return;
            }
            rank
        }
    };
    let mut finalized = false;
    loop {
        let line = match proto::read_line_bounded(&mut r, proto::LINE_MAX) {
            Ok(ReadLine::Line(l)) => l,
            Ok(ReadLine::TooLong) => {
                // cannot find the next request reliably: say why and close
                let _ = w.write_all(b"cmd=error rc=-1 msg=line_too_long\n");
                break;
            }
            Ok(ReadLine::Eof) => break,
            Err(e) => {
                if !finalized && !sh.stop.load(Ordering::SeqCst) {
                    sh.lock().lost.push((rank, e.to_string()));
                }
                break;
            }
        };
        if sh.stop.load(Ordering::SeqCst) {
            break;
        }
        let reply = match std::str::from_utf8(&line) {
            Ok(l) => {
                finalized |= proto::field(l, "cmd") == Some("finalize");
                handle(sh, rank, l)
            }
            Err(_) => Reply::Line("cmd=error rc=-1 msg=request_is_not_UTF-8".into()),
        };
        match reply {
            Reply::Line(mut s) => {
                s.push('\n');
                if w.write_all(s.as_bytes()).is_err() {
                    break;
                }
            }
            Reply::Nothing => {}
            Reply::Close => break,
        }
    }
    end(sh, id, &w);
}

/// Closes connection `id` and forgets it.
fn end(sh: &Shared, id: u64, c: &Conn) {
    c.shutdown();
    let mut st = sh.lock();
    st.conns.remove(&id);
    st.pending.retain(|&p| p != id);
}

/// Reads and checks the first line of a `PMI_PORT` connection, `cmd=initack
/// pmiid=N rsmpi_secret=HEX`; returns the rank, now claimed.
fn authenticate(r: &mut BufReader<Conn>, sh: &Shared) -> Option<u32> {
    r.get_ref().set_read_timeout(Some(AUTH_TIMEOUT)).ok()?;
    let ReadLine::Line(line) = proto::read_line_bounded(r, proto::FIRST_LINE_MAX).ok()? else {
        return None;
    };
    let line = std::str::from_utf8(&line).ok()?;
    let f = proto::fields(line)?;
    let once = |key: &str| {
        let mut it = f.iter().filter(|(k, _)| *k == key).map(|(_, v)| *v);
        let v = it.next();
        if it.next().is_some() {
            None
        } else {
            v
        }
    };
    let id = once("pmiid")
        .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&i| i < sh.size);
    let given = once(proto::SECRET_KEY)
        .and_then(proto::unhex)
        .unwrap_or_default();
    // compare the secret before looking at anything else (and against a dummy for an
    // id outside the job, so that the time taken tells nothing)
    const DUMMY: [u8; proto::SECRET_LEN] = [0; proto::SECRET_LEN];
    let want = id.map_or(&DUMMY, |i| &sh.secrets[i as usize]);
    let good = proto::ct_eq(&given, want);
    if !good || once("cmd") != Some("initack") || f.len() != 3 {
        return None;
    }
    let id = id?;
    let mut st = sh.lock();
    if std::mem::replace(&mut st.claimed[id as usize], true) {
        // a second connection for one rank
        return None;
    }
    Some(id)
}

enum Reply {
    Line(String),
    Nothing,
    Close,
}

fn err(cmd: &str, msg: &str) -> Reply {
    Reply::Line(format!("cmd={cmd} rc=-1 msg={msg}"))
}

/// The rank a key belongs to by rsmpi's naming (`r{rank}-…`, see `Boot`), if any.
fn key_owner(key: &str) -> Option<u32> {
    let rest = key.strip_prefix('r')?;
    let (digits, _) = rest.split_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Answers one request line of an authenticated rank.
fn handle(sh: &Shared, rank: u32, line: &str) -> Reply {
    if line.trim().is_empty() {
        return Reply::Nothing;
    }
    // the message of an abort is the rest of its line (it may hold spaces)
    let (head, abort_msg) = match line.split_once(" error_msg=") {
        Some((h, m)) if proto::field(h, "cmd") == Some("abort") => (h, Some(m)),
        _ => (line, None),
    };
    let Some(f) = proto::fields(head) else {
        return err("error", "malformed_request");
    };
    let get = |key: &str| f.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let Some(cmd) = f.first().filter(|(k, _)| *k == "cmd").map(|(_, v)| *v) else {
        return err("error", "no_command");
    };
    let kvsname_ok = || get("kvsname") == Some(sh.kvsname.as_str());
    match cmd {
        "init" => {
            if get("pmi_version") == Some("1") {
                Reply::Line("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into())
            } else {
                Reply::Line(
                    "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=only_PMI-1_is_served"
                        .into(),
                )
            }
        }
        "get_maxes" => Reply::Line(format!(
            "cmd=maxes kvsname_max={} keylen_max={} vallen_max={} rc=0",
            proto::KVSNAME_MAX,
            proto::KEYLEN_MAX,
            proto::VALLEN_MAX
        )),
        "get_appnum" => Reply::Line("cmd=appnum appnum=0 rc=0".into()),
        "get_my_kvsname" => Reply::Line(format!("cmd=my_kvsname kvsname={} rc=0", sh.kvsname)),
        "get_universe_size" => Reply::Line(format!("cmd=universe_size size={} rc=0", sh.size)),
        "barrier_in" => barrier(sh, rank),
        "put" => {
            let (Some(key), Some(value)) = (get("key"), get("value")) else {
                return err("put_result", "missing_key_or_value");
            };
            if !kvsname_ok() {
                return err("put_result", "unknown_kvsname");
            }
            if key.len() > proto::KEYLEN_MAX || value.len() > proto::VALLEN_MAX {
                return err("put_result", "key_or_value_too_long");
            }
            if key_owner(key).is_some_and(|o| o != rank) {
                return err("put_result", "key_of_another_rank");
            }
            let mut st = sh.lock();
            let old = match st.kv.get(key) {
                Some((owner, _)) if *owner != rank => {
                    return err("put_result", "key_put_by_another_rank")
                }
                Some((_, v)) => key.len() + v.len(),
                None => 0,
            };
            let used = st.used[rank as usize] - old + key.len() + value.len();
            if used > RANK_BYTES_MAX {
                return err("put_result", "too_much_data");
            }
            st.used[rank as usize] = used;
            st.kv.insert(key.to_owned(), (rank, value.to_owned()));
            Reply::Line("cmd=put_result rc=0 msg=success".into())
        }
        "get" => {
            let Some(key) = get("key") else {
                return err("get_result", "missing_key");
            };
            if !kvsname_ok() {
                return err("get_result", "unknown_kvsname");
            }
            match sh.lock().kv.get(key) {
                Some((_, v)) => Reply::Line(format!("cmd=get_result rc=0 msg=success value={v}")),
                None => err("get_result", "key_not_found"),
            }
        }
        "abort" => {
            let code = get("exitcode").and_then(|c| c.parse().ok()).unwrap_or(1);
            let msg: String = abort_msg
                .unwrap_or("")
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(ABORT_MSG_MAX)
                .collect();
            sh.lock().abort.get_or_insert(AbortReq {
                rank,
                code,
                msg: msg.trim().to_owned(),
            });
            Reply::Nothing
        }
        "finalize" => Reply::Line("cmd=finalize_ack rc=0".into()),
        "initack" => err("initack", "already_initialized"),
        _ => err("error", "unknown_command"),
    }
}

/// Blocks until every rank entered the barrier (or the server stops).
fn barrier(sh: &Shared, rank: u32) -> Reply {
    let mut st = sh.lock();
    let r = rank as usize;
    if st.in_barrier[r] {
        return err("barrier_out", "already_in_the_barrier");
    }
    st.in_barrier[r] = true;
    st.barrier_count += 1;
    if st.barrier_count == sh.size {
        st.barrier_count = 0;
        st.in_barrier.iter_mut().for_each(|f| *f = false);
        st.barrier_gen += 1;
        sh.barrier_cv.notify_all();
        return Reply::Line("cmd=barrier_out rc=0".into());
    }
    let gen = st.barrier_gen;
    while st.barrier_gen == gen {
        if sh.stop.load(Ordering::SeqCst) {
            return Reply::Close;
        }
        st = sh.barrier_cv.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    Reply::Line("cmd=barrier_out rc=0".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(size: u32) -> Shared {
        Shared {
            size,
            kvsname: "job".into(),
            secrets: Vec::new(),
            state: Mutex::new(State {
                used: vec![0; size as usize],
                in_barrier: vec![false; size as usize],
                claimed: vec![false; size as usize],
                ..State::default()
            }),
            barrier_cv: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    fn line(r: Reply) -> String {
        match r {
            Reply::Line(s) => s,
            Reply::Nothing => "<nothing>".into(),
            Reply::Close => "<close>".into(),
        }
    }

    #[test]
    fn requests_are_answered() {
        let sh = shared(2);
        let ask = |rank, l: &str| line(handle(&sh, rank, l));
        assert_eq!(
            ask(0, "cmd=init pmi_version=1 pmi_subversion=1"),
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"
        );
        assert!(ask(0, "cmd=init pmi_version=2 pmi_subversion=0").contains("rc=-1"));
        assert!(ask(0, "cmd=get_maxes").contains("vallen_max=1024"));
        assert_eq!(
            ask(1, "cmd=get_my_kvsname"),
            "cmd=my_kvsname kvsname=job rc=0"
        );
        assert_eq!(
            ask(1, "cmd=get_universe_size"),
            "cmd=universe_size size=2 rc=0"
        );
        assert_eq!(ask(1, "cmd=get_appnum"), "cmd=appnum appnum=0 rc=0");
        assert_eq!(
            ask(0, "cmd=put kvsname=job key=r0-a value=0a0b"),
            "cmd=put_result rc=0 msg=success"
        );
        assert_eq!(
            ask(1, "cmd=get kvsname=job key=r0-a"),
            "cmd=get_result rc=0 msg=success value=0a0b"
        );
        assert!(ask(1, "cmd=get kvsname=job key=r0-b").starts_with("cmd=get_result rc=-1 "));
        assert!(ask(1, "cmd=get kvsname=other key=r0-a").contains("rc=-1"));
        // rank 1 can write neither rank 0's keys nor a key rank 0 put first
        assert!(ask(1, "cmd=put kvsname=job key=r0-a value=ff").contains("rc=-1"));
        assert_eq!(
            ask(0, "cmd=put kvsname=job key=shared value=1"),
            "cmd=put_result rc=0 msg=success"
        );
        assert!(ask(1, "cmd=put kvsname=job key=shared value=2").contains("rc=-1"));
        assert!(ask(1, "cmd=get kvsname=job key=r0-a").ends_with("value=0a0b"));
        let long = "0".repeat(proto::VALLEN_MAX + 1);
        assert!(ask(0, &format!("cmd=put kvsname=job key=x value={long}")).contains("rc=-1"));
        // malformed requests get an error answer
        for bad in [
            "cmd",
            "junk",
            "cmd=put key",
            "key=a cmd=get",
            "cmd=nonsense",
            "cmd=put kvsname=job",
        ] {
            assert!(ask(0, bad).contains("rc=-1"), "{bad}");
        }
        assert_eq!(ask(0, "  "), "<nothing>");
        assert_eq!(ask(0, "cmd=finalize"), "cmd=finalize_ack rc=0");
        assert_eq!(
            ask(1, "cmd=abort exitcode=7 error_msg=it went  wrong"),
            "<nothing>"
        );
        let a = sh.lock().abort.clone().unwrap();
        assert_eq!((a.rank, a.code, a.msg.as_str()), (1, 7, "it went  wrong"));
    }

    #[test]
    fn key_owners() {
        assert_eq!(key_owner("r12-addr"), Some(12));
        assert_eq!(key_owner("r-addr"), None);
        assert_eq!(key_owner("rx-addr"), None);
        assert_eq!(key_owner("addr"), None);
    }
}

//! The launcher side of the key-value service: one acceptor thread and one thread per
//! connection, all sharing a [`Shared`].

use std::collections::HashMap;
use std::io;
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::proto::{self, take_u32};

/// How long a new connection may take to send its hello frame.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// An `abort` request received from a rank.
#[derive(Clone, Debug)]
pub(crate) struct AbortReq {
    pub rank: u32,
    pub code: i32,
    pub msg: String,
}

#[derive(Default)]
struct State {
    kv: HashMap<(u32, String), Vec<u8>>,
    /// Ranks that entered the current fence.
    in_fence: Vec<bool>,
    fence_count: u32,
    fence_gen: u64,
    abort: Option<AbortReq>,
    /// Clones of every accepted stream, shut down when the server stops.
    conns: Vec<UnixStream>,
}

struct Shared {
    size: u32,
    secret: [u8; proto::SECRET_LEN],
    state: Mutex<State>,
    fence_cv: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running key-value server.
pub(crate) struct Server {
    shared: Arc<Shared>,
    path: PathBuf,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `listener` (bound at `path`) for a job of `size` ranks.
    pub fn start(
        listener: UnixListener,
        path: PathBuf,
        size: u32,
        secret: [u8; proto::SECRET_LEN],
    ) -> io::Result<Server> {
        let shared = Arc::new(Shared {
            size,
            secret,
            state: Mutex::new(State {
                in_fence: vec![false; size as usize],
                ..State::default()
            }),
            fence_cv: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let sh = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("rsmpirun-kvs".into())
            .spawn(move || accept_loop(listener, sh))?;
        Ok(Server {
            shared,
            path,
            acceptor: Some(acceptor),
        })
    }

    /// The first `abort` request received, if any.
    pub fn abort_request(&self) -> Option<AbortReq> {
        self.shared.lock().abort.clone()
    }

    /// Stops serving: closes every connection and joins all server threads.
    pub fn stop(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let st = self.shared.lock();
            for c in &st.conns {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
        self.shared.fence_cv.notify_all();
        // Wake the acceptor out of `accept`.
        let _ = UnixStream::connect(&self.path);
        let _ = acceptor.join();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        {
            let mut st = shared.lock();
            // Re-check under the lock: `stop` shuts down every stream in `conns`.
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
            st.conns.push(clone);
        }
        let sh = Arc::clone(&shared);
        match std::thread::Builder::new()
            .name("rsmpirun-conn".into())
            .spawn(move || serve(stream, &sh))
        {
            Ok(h) => workers.push(h),
            Err(e) => eprintln!("rsmpirun: cannot start a key-value service thread: {e}"),
        }
        workers.retain(|h| !h.is_finished());
    }
    for w in workers {
        let _ = w.join();
    }
}

/// Serves one connection until it closes or misbehaves. A connection whose first frame
/// is not a valid hello with the job's secret is closed without any answer.
fn serve(mut s: UnixStream, shared: &Shared) {
    let Some(rank) = authenticate(&mut s, shared) else {
        let _ = s.shutdown(Shutdown::Both);
        return;
    };
    if s.set_read_timeout(None).is_err()
        || proto::write_frame(&mut s, proto::OK, &[&shared.size.to_le_bytes()]).is_err()
    {
        return;
    }
    while let Ok((kind, body)) = proto::read_frame(&mut s) {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let reply = handle(shared, rank, kind, &body);
        let sent = match reply {
            Some(Ok(v)) => proto::write_frame(&mut s, proto::OK, &[&v]),
            Some(Err(m)) => proto::write_frame(&mut s, proto::ERR, &[m.as_bytes()]),
            None => break,
        };
        if sent.is_err() {
            break;
        }
    }
    let _ = s.shutdown(Shutdown::Both);
}

/// Reads and checks the hello frame; returns the client's rank.
fn authenticate(s: &mut UnixStream, shared: &Shared) -> Option<u32> {
    s.set_read_timeout(Some(HELLO_TIMEOUT)).ok()?;
    let len = proto::read_len(s).ok()?;
    if len != proto::HELLO_LEN {
        return None;
    }
    let (kind, body) = proto::read_body(s, len).ok()?;
    let (secret, rest) = body.split_at(proto::SECRET_LEN);
    // Compare the secret before looking at anything else.
    let good = proto::ct_eq(secret, &shared.secret);
    let (rank, _) = take_u32(rest)?;
    (good && kind == proto::HELLO && rank < shared.size).then_some(rank)
}

/// Handles one request. `None` closes the connection (malformed or stopping).
fn handle(shared: &Shared, rank: u32, kind: u8, body: &[u8]) -> Option<Result<Vec<u8>, String>> {
    match kind {
        proto::PUBLISH => {
            let (klen, rest) = take_u32(body)?;
            let klen = klen as usize;
            if klen > rest.len() {
                return Some(Err("malformed publish request".into()));
            }
            let Ok(key) = std::str::from_utf8(&rest[..klen]) else {
                return Some(Err("key is not UTF-8".into()));
            };
            let value = rest[klen..].to_vec();
            shared.lock().kv.insert((rank, key.to_owned()), value);
            Some(Ok(Vec::new()))
        }
        proto::LOOKUP => {
            let (peer, key) = take_u32(body)?;
            let Ok(key) = std::str::from_utf8(key) else {
                return Some(Err("key is not UTF-8".into()));
            };
            if peer >= shared.size {
                return Some(Err(format!("rank {peer} is not part of this job")));
            }
            let st = shared.lock();
            Some(match st.kv.get(&(peer, key.to_owned())) {
                Some(v) => Ok(v.clone()),
                None => Err(format!("rank {peer} has not published key {key:?}")),
            })
        }
        proto::FENCE => fence(shared, rank),
        proto::ABORT => {
            let (code, msg) = take_u32(body)?;
            let req = AbortReq {
                rank,
                code: code as i32,
                msg: String::from_utf8_lossy(msg).into_owned(),
            };
            shared.lock().abort.get_or_insert(req);
            Some(Ok(Vec::new()))
        }
        _ => Some(Err(format!("unknown request kind {kind}"))),
    }
}

/// Blocks until every rank entered the fence (or the server stops).
fn fence(shared: &Shared, rank: u32) -> Option<Result<Vec<u8>, String>> {
    let mut st = shared.lock();
    let r = rank as usize;
    if st.in_fence[r] {
        return Some(Err(format!("rank {rank} is already in the fence")));
    }
    st.in_fence[r] = true;
    st.fence_count += 1;
    if st.fence_count == shared.size {
        st.fence_count = 0;
        st.in_fence.iter_mut().for_each(|f| *f = false);
        st.fence_gen += 1;
        shared.fence_cv.notify_all();
        return Some(Ok(Vec::new()));
    }
    let gen = st.fence_gen;
    while st.fence_gen == gen {
        if shared.stop.load(Ordering::SeqCst) {
            return None;
        }
        st = shared.fence_cv.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    Some(Ok(Vec::new()))
}

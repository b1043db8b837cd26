//! Faults (crashing ranks, a peer that stops polling) and security (segment modes,
//! bounded remote writes, the job secret).

use crate::{launch, pattern, scratch, shm_entries, Case, Ctx, ENV_SCRATCH};
use rsmpi::traits::*;
use rsmpi::{request, Universe};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

pub fn cases() -> Vec<Case> {
    vec![
        Case::host("fault_rank_panics_mid_transfer", fault_panic),
        Case::helper("helper_panic_mid_transfer", helper_panic),
        Case::host("fault_rank_sigkilled_mid_transfer", fault_sigkill),
        Case::helper("helper_sigkill_mid_transfer", helper_sigkill),
        Case::host(
            "fault_rank_killed_from_outside_mid_transfer",
            fault_external_kill,
        ),
        Case::helper("helper_transfer_forever", helper_transfer_forever),
        Case::job("peer_stops_polling_loses_nothing", 3, peer_stops_polling),
        Case::job("security_mapped_segments_are_0600", 3, segments_are_private),
        Case::host(
            "security_segment_file_is_0600_while_it_exists",
            segment_file_mode,
        ),
        Case::host(
            "security_remote_write_is_bounded_by_the_advertised_buffer",
            remote_write_bounded,
        ),
        Case::host(
            "security_foreign_process_cannot_join",
            foreign_process_cannot_join,
        ),
        Case::helper("helper_wait_for_intruder", helper_wait_for_intruder),
        Case::helper("helper_intruder", helper_intruder),
    ]
}

/// Rank 0 streams 100 kB messages to rank 1; rank 2 waits for a message from rank 1
/// that never comes. Rank 1 calls `fail` after `after` messages.
fn stream_then(u: Universe, after: usize, fail: fn()) {
    let w = u.world();
    match w.rank() {
        0 => {
            for i in 0..10_000u32 {
                w.process_at_rank(1)
                    .send_with_tag(&pattern(100_000, i as u8)[..], 1);
            }
        }
        1 => {
            let mut b = vec![0u8; 100_000];
            let mut x = [0u8; 8];
            request::scope(|sc| {
                // a pending receive of rank 2's, to fail with it outstanding
                let _r = w.process_at_rank(2).immediate_receive_into(sc, &mut x[..]);
                for i in 0..after {
                    w.process_at_rank(0).receive_into_with_tag(&mut b[..], 1);
                    assert_eq!(b[..100], pattern(100_000, i as u8)[..100]);
                }
                fail();
            });
        }
        _ => {
            let _: (u8, _) = w.process_at_rank(1).receive();
        }
    }
}

fn helper_panic(u: Universe) {
    stream_then(u, 30, || panic!("rank 1 panics on purpose mid-transfer"));
}

fn helper_sigkill(u: Universe) {
    stream_then(u, 30, || {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::thread::sleep(Duration::from_secs(30));
    });
}

fn helper_transfer_forever(u: Universe) {
    let w = u.world();
    if let Ok(dir) = std::env::var(ENV_SCRATCH) {
        if w.rank() == 1 {
            std::fs::write(Path::new(&dir).join("transferring"), b"").expect("marker");
        }
    }
    stream_then(u, usize::MAX, || {});
}

/// Runs a job whose rank 1 dies; checks the job's end, status, message and cleanup.
fn check_failed_job(
    ctx: &Ctx,
    helper: &str,
    want_code: Option<i32>,
    want_msg: &str,
    kill_rank1: bool,
) -> Result<(), String> {
    let dir = scratch(helper);
    let env = [(ENV_SCRATCH, dir.clone().into_os_string())];
    let ranks = 3;
    let started = Instant::now();
    let out = if kill_rank1 {
        // kill rank 1 from outside once it is transferring
        let ctx2 = ctx.clone();
        let helper2 = helper.to_owned();
        let env2 = env.clone();
        let h = std::thread::spawn(move || {
            launch(
                &ctx2,
                &helper2,
                ranks,
                Duration::from_secs(60),
                &env2,
                Duration::from_secs(60),
            )
        });
        let until = Instant::now() + Duration::from_secs(30);
        while !dir.join("transferring").exists() || !dir.join("pid.1").exists() {
            if Instant::now() > until {
                return Err("rank 1 never started transferring".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
        let pid: i32 = std::fs::read_to_string(dir.join("pid.1"))
            .map_err(|e| e.to_string())?
            .trim()
            .parse()
            .map_err(|e| format!("{e}"))?;
        let pid = rustix::process::Pid::from_raw(pid).ok_or("pid 0")?;
        rustix::process::kill_process(pid, rustix::process::Signal::KILL)
            .map_err(|e| format!("kill: {e}"))?;
        let killed_at = Instant::now();
        let out = h.join().map_err(|_| "launch thread panicked")?;
        if killed_at.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "the job took {:?} to end after the kill",
                killed_at.elapsed()
            ));
        }
        out
    } else {
        launch(
            ctx,
            helper,
            ranks,
            Duration::from_secs(60),
            &env,
            Duration::from_secs(60),
        )
    };
    let mut problems = Vec::new();
    match out.code {
        None => problems.push(format!(
            "launcher did not finish within 60 s (hang): {}",
            out.stderr
        )),
        Some(0) => problems.push("job succeeded although rank 1 died".into()),
        Some(c) => {
            // A surviving peer may notice the death first (its CMA write or read fails
            // with ESRCH) and abort the job itself, naming the dead rank: the launcher
            // then reports that abort (status 1) instead of the signal.
            let peer_noticed = c == 1 && out.stderr.contains("rank 1 is unreachable");
            if want_code.is_some_and(|w| w != c) && !peer_noticed {
                problems.push(format!("status {c}, expected {want_code:?}"));
            }
        }
    }
    if !kill_rank1
        && out.elapsed > Duration::from_secs(10)
        && started.elapsed() > Duration::from_secs(10)
    {
        problems.push(format!("the job took {:?} to end", out.elapsed));
    }
    if !out.stderr.contains(want_msg) && !out.stderr.contains("rank 1 is unreachable") {
        problems.push(format!(
            "stderr does not name the failed rank ({want_msg:?}):\n{}",
            out.stderr
        ));
    }
    let left = shm_entries(&format!("rsmpi-{}-", out.launcher_pid));
    if !left.is_empty() {
        problems.push(format!("segments left in /dev/shm: {left:?}"));
    }
    for r in 0..ranks {
        let Ok(pid) = std::fs::read_to_string(dir.join(format!("pid.{r}"))) else {
            problems.push(format!("rank {r} wrote no pid file"));
            continue;
        };
        let pid = pid.trim();
        let until = Instant::now() + Duration::from_secs(2);
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains("(conformance)"))
        };
        while alive() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if alive() {
            problems.push(format!("rank {r} (pid {pid}) is still running"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn fault_panic(ctx: &Ctx) -> Result<(), String> {
    // the panicking rank aborts the job with code 101 through the launcher
    check_failed_job(ctx, "helper_panic_mid_transfer", Some(101), "rank 1", false)
}

fn fault_sigkill(ctx: &Ctx) -> Result<(), String> {
    check_failed_job(
        ctx,
        "helper_sigkill_mid_transfer",
        Some(128 + 9),
        "rank 1 killed by signal 9",
        false,
    )
}

fn fault_external_kill(ctx: &Ctx) -> Result<(), String> {
    check_failed_job(
        ctx,
        "helper_transfer_forever",
        Some(128 + 9),
        "rank 1 killed by signal 9",
        true,
    )
}

/// A receiver that stops calling into the library for 1 s (with pre-posted receives
/// and unexpected traffic piling up, beyond the ring's capacity) loses nothing; a
/// sender that stops polling in the middle of rendezvous sends neither.
fn peer_stops_polling(u: Universe) {
    let w = u.world();
    const PRE: usize = 40;
    const MORE: usize = 400;
    let len = |i: usize| [16usize, 3000, 9000, 70_000][i % 4];
    let msg = |src: i32, i: usize| {
        let mut v = pattern(len(i), (i as u8).wrapping_add(src as u8));
        v[..4].copy_from_slice(&(i as u32).to_le_bytes());
        v
    };
    if w.rank() == 0 {
        let mut bufs = vec![vec![0u8; 70_000]; PRE];
        request::scope(|sc| {
            let reqs: Vec<_> = bufs
                .iter_mut()
                .map(|b| {
                    w.any_process()
                        .immediate_receive_into_with_tag(sc, &mut b[..], 1)
                })
                .collect();
            w.barrier();
            std::thread::sleep(Duration::from_secs(1)); // no polling
            let mut next = [0usize; 3];
            for r in reqs {
                let s = r.wait();
                let src = s.source_rank() as usize;
                assert_eq!(s.count_bytes(), len(next[src]) as u64);
                next[src] += 1;
            }
            for _ in PRE..2 * (PRE + MORE) {
                let (v, s) = w.any_process().receive_vec_with_tag::<u8>(1);
                let src = s.source_rank();
                let i = next[src as usize];
                assert_eq!(v, msg(src, i), "message {i} from {src}");
                next[src as usize] += 1;
            }
            assert_eq!(next, [0, PRE + MORE, PRE + MORE]);
        });
        for b in &bufs {
            let i = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
            assert!(i < PRE);
        }
        w.barrier();
        // now rank 0 is the sender that stops polling in the middle
        let big: Vec<Vec<u8>> = (0..8).map(|i| pattern(200_000, i)).collect();
        request::scope(|sc| {
            let reqs: Vec<_> = big
                .iter()
                .map(|b| w.process_at_rank(1).immediate_send_with_tag(sc, &b[..], 2))
                .collect();
            w.barrier();
            std::thread::sleep(Duration::from_secs(1));
            for r in reqs {
                r.wait();
            }
        });
    } else {
        w.barrier();
        let data: Vec<Vec<u8>> = (0..PRE + MORE).map(|i| msg(w.rank(), i)).collect();
        request::scope(|sc| {
            let reqs: Vec<_> = data
                .iter()
                .map(|d| w.process_at_rank(0).immediate_send_with_tag(sc, &d[..], 1))
                .collect();
            for r in reqs {
                r.wait();
            }
        });
        w.barrier();
        if w.rank() == 1 {
            w.barrier();
            for i in 0..8 {
                let (v, _) = w.process_at_rank(0).receive_vec_with_tag::<u8>(2);
                assert_eq!(v, pattern(200_000, i));
            }
        } else {
            w.barrier();
        }
    }
}

/// Every shared-memory segment a rank has mapped (its own and its peers', already
/// unlinked) is a regular file of mode 0600 owned by this user — checked through
/// `/proc/self/map_files` (the names are gone from `/dev/shm`).
fn segments_are_private(u: Universe) {
    let w = u.world();
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let uid = rustix::process::getuid().as_raw();
    let mut seen = std::collections::BTreeSet::new();
    for line in maps.lines().filter(|l| l.contains("/dev/shm/rsmpi-")) {
        let range = line.split_whitespace().next().unwrap();
        let name = line.split_whitespace().nth(5).unwrap().to_owned();
        let md = std::fs::metadata(format!("/proc/self/map_files/{range}"))
            .unwrap_or_else(|e| panic!("stat of the mapping {range} ({name}): {e}"));
        assert_eq!(
            md.mode() & 0o7777,
            0o600,
            "segment {name} has mode {:o}",
            md.mode() & 0o7777
        );
        assert_eq!(md.uid(), uid, "segment {name} is owned by uid {}", md.uid());
        assert!(
            line.ends_with("(deleted)"),
            "segment {name} is still linked: {line}"
        );
        seen.insert(name);
    }
    assert_eq!(seen.len(), w.size() as usize, "mapped segments: {seen:?}");
    w.barrier();
}

/// A start-up exchange for a job of one rank that looks at the segment file at the
/// second fence, while it still exists.
struct HookExchange {
    job: String,
    kv: HashMap<String, Vec<u8>>,
    fences: u32,
    seen: Option<Result<(u32, u32, bool), String>>,
}

impl transport::Exchange for HookExchange {
    fn rank(&self) -> u32 {
        0
    }
    fn size(&self) -> u32 {
        1
    }
    fn job_id(&self) -> &str {
        &self.job
    }
    fn publish(&mut self, key: &str, value: &[u8]) -> Result<(), transport::TransportError> {
        self.kv.insert(key.into(), value.into());
        Ok(())
    }
    fn fence(&mut self) -> Result<(), transport::TransportError> {
        self.fences += 1;
        if self.fences == 2 {
            let p = transport_shm::segment_path(&self.job, 0);
            self.seen = Some(
                std::fs::metadata(&p)
                    .map(|m| (m.mode(), m.uid(), m.is_file()))
                    .map_err(|e| format!("{}: {e}", p.display())),
            );
        }
        Ok(())
    }
    fn lookup(&mut self, _rank: u32, key: &str) -> Result<Vec<u8>, transport::TransportError> {
        self.kv
            .get(key)
            .cloned()
            .ok_or_else(|| transport::TransportError::Exchange(format!("no {key}")))
    }
}

fn hook_exchange(name: &str) -> HookExchange {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    HookExchange {
        job: format!(
            "conf{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ),
        kv: HashMap::new(),
        fences: 0,
        seen: None,
    }
}

/// The segment file in `/dev/shm` is mode 0600 and owned by this user while it exists
/// (seen from inside the transport's start-up), and unlinked afterwards, even with a
/// permissive umask in effect.
fn segment_file_mode(_ctx: &Ctx) -> Result<(), String> {
    let mut ex = hook_exchange("mode");
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let t = transport_shm::ShmTransport::new(&mut ex);
    rustix::process::umask(old);
    let t = t.map_err(|e| format!("transport start-up: {e}"))?;
    let (mode, uid, file) = ex.seen.clone().ok_or("no second fence")??;
    let me = rustix::process::getuid().as_raw();
    if mode & 0o7777 != 0o600 || uid != me || !file {
        return Err(format!(
            "segment mode {:o}, uid {uid} (mine {me}), regular file {file}",
            mode & 0o7777
        ));
    }
    if transport_shm::segment_path(&ex.job, 0).exists() {
        return Err("segment still linked after start-up".into());
    }
    drop(t);
    Ok(())
}

/// One-sided writes are checked against the advertised buffer: a put that would run
/// past its end (or start beyond it) is refused and writes nothing; the bytes around
/// the buffer are never touched.
fn remote_write_bounded(_ctx: &Ctx) -> Result<(), String> {
    use transport::Transport;
    let mut ex = hook_exchange("bounds");
    let mut t = transport_shm::ShmTransport::new(&mut ex)
        .map_err(|e| format!("transport start-up: {e}"))?;
    if !t.caps().put {
        return Err("CMA is not available here: cannot check one-sided writes".into());
    }
    let mut buf = vec![0xEEu8; 64];
    let base = buf.as_mut_ptr() as usize;
    let desc = t.expose(base + 16, 16);
    let mut problems = Vec::new();
    for (len, off) in [(17usize, 0u64), (1, 16), (9, 8), (16, 1), (1, u64::MAX)] {
        match t.put(0, &[0x11u8; 17][..len], desc, off) {
            Err(transport::TransportError::OutOfBounds { .. }) => {}
            other => problems.push(format!(
                "put of {len} B at offset {off} into 16 B: {other:?}"
            )),
        }
    }
    if buf.iter().any(|&b| b != 0xEE) {
        problems.push("a refused put wrote bytes".into());
    }
    t.put(0, &[0x22u8; 16], desc, 0)
        .map_err(|e| format!("put that fits: {e}"))?;
    let buf = std::hint::black_box(buf);
    if buf[16..32].iter().any(|&b| b != 0x22)
        || buf[..16].iter().chain(&buf[32..]).any(|&b| b != 0xEE)
    {
        problems.push(format!("put that fits wrote the wrong bytes: {buf:?}"));
    }
    let mut rd = [0u8; 17];
    if !matches!(
        t.get(0, &mut rd, desc, 0),
        Err(transport::TransportError::OutOfBounds { .. })
    ) {
        problems.push("a get past the buffer was not refused".into());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Rank 0 publishes the job's socket to the scratch directory and waits for `go`; then
/// both ranks exchange messages.
fn helper_wait_for_intruder(u: Universe) {
    let w = u.world();
    let dir = std::env::var(ENV_SCRATCH).expect("scratch dir");
    let dir = Path::new(&dir);
    if w.rank() == 0 {
        let info = format!(
            "{}\n{}\n",
            std::env::var(launcher::ENV_KVS).unwrap(),
            std::env::var(launcher::ENV_JOB_ID).unwrap()
        );
        std::fs::write(dir.join("kvs.tmp"), info).unwrap();
        std::fs::rename(dir.join("kvs.tmp"), dir.join("kvs")).unwrap();
        let until = Instant::now() + Duration::from_secs(40);
        while !dir.join("go").exists() {
            assert!(Instant::now() < until, "no go");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let peer = 1 - w.rank();
    let mut v = vec![0u8; 50_000];
    w.sendrecv(
        &pattern(50_000, w.rank() as u8)[..],
        peer,
        3,
        &mut v[..],
        peer,
        3,
    );
    assert_eq!(v, pattern(50_000, peer as u8));
}

fn helper_intruder(_u: Universe) {
    unreachable!("initialize must fail for an intruder");
}

/// A process that knows the job's socket and id but not its secret cannot join: its
/// `initialize` fails at once and the job goes on unaffected.
fn foreign_process_cannot_join(ctx: &Ctx) -> Result<(), String> {
    let dir = scratch("intruder");
    let env = [(ENV_SCRATCH, dir.clone().into_os_string())];
    let ctx2 = ctx.clone();
    let h = std::thread::spawn(move || {
        launch(
            &ctx2,
            "helper_wait_for_intruder",
            2,
            Duration::from_secs(60),
            &env,
            Duration::from_secs(90),
        )
    });
    let until = Instant::now() + Duration::from_secs(30);
    while !dir.join("kvs").exists() {
        if Instant::now() > until {
            let _ = std::fs::write(dir.join("go"), b"");
            return Err("the job never published its socket".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let info = std::fs::read_to_string(dir.join("kvs")).map_err(|e| e.to_string())?;
    let mut lines = info.lines();
    let (kvs, job) = (
        lines.next().unwrap_or_default().to_owned(),
        lines.next().unwrap_or_default().to_owned(),
    );
    let mut problems = Vec::new();
    for (rank, secret) in [
        ("1", "00000000000000000000000000000000"),
        ("0", "ffffffffffffffffffffffffffffffff"),
    ] {
        let t = Instant::now();
        let out = std::process::Command::new(&ctx.exe)
            .args(["rank", "helper_intruder"])
            .env(launcher::ENV_RANK, rank)
            .env(launcher::ENV_SIZE, "2")
            .env(launcher::ENV_KVS, &kvs)
            .env(launcher::ENV_JOB_ID, &job)
            .env(launcher::ENV_SECRET, secret)
            .env_remove(ENV_SCRATCH)
            .output()
            .map_err(|e| e.to_string())?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("rsmpi::initialize") {
            problems.push(format!("intruder as rank {rank}: {:?}: {err}", out.status));
        }
        if err.contains("unreachable") {
            problems.push(format!("intruder as rank {rank} joined the job"));
        }
        if t.elapsed() > Duration::from_secs(10) {
            problems.push(format!(
                "intruder as rank {rank} took {:?} to be refused",
                t.elapsed()
            ));
        }
        if !shm_entries(&format!("rsmpi-{job}-")).is_empty() && rank == "1" {
            // the real ranks' segments are unlinked at start-up: anything now is the intruder's
            problems.push(format!(
                "intruder left segments: {:?}",
                shm_entries(&format!("rsmpi-{job}-"))
            ));
        }
    }
    std::fs::write(dir.join("go"), b"").map_err(|e| e.to_string())?;
    let out = h.join().map_err(|_| "launch thread panicked")?;
    if out.code != Some(0) {
        problems.push(format!(
            "the job was affected: status {:?}\n{}",
            out.code, out.stderr
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

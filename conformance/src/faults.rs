//! Faults (crashing ranks, a peer that stops polling) and security (segment modes,
//! bounded remote writes, rsmpirun's PMI service: the secrets of `PMI_PORT`, bad
//! input, the private `PMI_FD` of local ranks).

use crate::{job_for, launch, pattern, scratch, shm_entries, Case, Ctx, ENV_SCRATCH};
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
        Case::host(
            "security_pmi_port_survives_malformed_and_oversized_input",
            pmi_port_survives_bad_input,
        ),
        Case::host(
            "security_local_ranks_get_a_private_socket_not_a_listener",
            local_ranks_get_a_private_socket,
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
    // one segment per rank this rank shares memory with: the ranks of its node
    // (hostname and network namespace), none when every peer goes over the network
    let node = format!(
        "{}/{:?}",
        rsmpi::environment::processor_name().unwrap_or_default(),
        std::fs::read_link("/proc/self/ns/net").ok()
    );
    let id = node.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut ids = vec![0u64; w.size() as usize];
    w.all_gather_into(&id, &mut ids[..]);
    let local = ids.iter().filter(|&&x| x == id).count();
    let want = if u.transport().contains("shm") {
        local
    } else {
        0
    };
    assert_eq!(seen.len(), want, "mapped segments: {seen:?}");
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
    let desc = t.expose(base + 16, 16).unwrap();
    let mut problems = Vec::new();
    for (len, off) in [(17usize, 0u64), (1, 16), (9, 8), (16, 1), (1, u64::MAX)] {
        match t.put(0, &[0x11u8; 17][..len], desc, off, 0) {
            Err(transport::TransportError::OutOfBounds { .. }) => {}
            other => problems.push(format!(
                "put of {len} B at offset {off} into 16 B: {other:?}"
            )),
        }
    }
    if buf.iter().any(|&b| b != 0xEE) {
        problems.push("a refused put wrote bytes".into());
    }
    t.put(0, &[0x22u8; 16], desc, 0, 0)
        .map_err(|e| format!("put that fits: {e}"))?;
    let buf = std::hint::black_box(buf);
    if buf[16..32].iter().any(|&b| b != 0x22)
        || buf[..16].iter().chain(&buf[32..]).any(|&b| b != 0xEE)
    {
        problems.push(format!("put that fits wrote the wrong bytes: {buf:?}"));
    }
    let mut rd = [0u8; 17];
    if !matches!(
        t.get(0, &mut rd, desc, 0, 0),
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

/// What rank 0 of `helper_wait_for_intruder` tells the scratch directory, one per line:
/// `PMI_PORT`, `RSMPI_SECRET`, `RSMPI_JOB_ID`, `PMI_FD` (each empty when unset) and the
/// launcher's pid.
struct JobInfo {
    port: String,
    secret: String,
    job: String,
    fd: String,
    launcher: i32,
}

/// Rank 0 writes [`JobInfo`] to the scratch directory and waits for `go`; then both
/// ranks exchange messages (over the addresses they published at start-up).
fn helper_wait_for_intruder(u: Universe) {
    let w = u.world();
    let dir = std::env::var(ENV_SCRATCH).expect("scratch dir");
    let dir = Path::new(&dir);
    if w.rank() == 0 {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        let info = format!(
            "{}\n{}\n{}\n{}\n{}\n",
            var(launcher::ENV_PMI_PORT),
            var(launcher::ENV_SECRET),
            var(launcher::ENV_JOB_ID),
            var(launcher::ENV_PMI_FD),
            rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()),
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

/// Waits for rank 0's [`JobInfo`].
fn wait_for_info(dir: &Path) -> Result<JobInfo, String> {
    let until = Instant::now() + Duration::from_secs(30);
    while !dir.join("kvs").exists() {
        if Instant::now() > until {
            return Err("the job never started (no rank 0 info)".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let info = std::fs::read_to_string(dir.join("kvs")).map_err(|e| e.to_string())?;
    let l: Vec<&str> = info.lines().collect();
    if l.len() != 5 {
        return Err(format!("rank 0 info: {info:?}"));
    }
    Ok(JobInfo {
        port: l[0].into(),
        secret: l[1].into(),
        job: l[2].into(),
        fd: l[3].into(),
        launcher: l[4]
            .parse()
            .map_err(|_| format!("launcher pid {:?}", l[4]))?,
    })
}

/// What the wrapper of rank 0 of [`with_pmi_port_job`] tells before the rank starts:
/// `PMI_PORT`, its `RSMPI_SECRET`, `RSMPI_JOB_ID`.
struct Early {
    port: String,
    secret: String,
    job: String,
}

/// Starts rank `R` of `helper_wait_for_intruder` (`$0` is the conformance binary):
/// rank 0 first writes [`Early`] to the scratch directory, rank 1 waits for `go1`
/// there before it starts (and connects to the launcher).
const WRAPPER: &str = r#"d="$CONFORMANCE_SCRATCH"
case "$PMI_RANK" in
0) printf '%s\n%s\n%s\n' "$PMI_PORT" "$RSMPI_SECRET" "$RSMPI_JOB_ID" >"$d/early.tmp" &&
   mv "$d/early.tmp" "$d/early" ;;
1) i=0; while [ ! -e "$d/go1" ] && [ $i -lt 4000 ]; do sleep 0.01; i=$((i+1)); done ;;
esac
exec "$0" rank helper_wait_for_intruder"#;

/// Runs `helper_wait_for_intruder` on 2 ranks in this process, its PMI service on TCP
/// (`PMI_PORT` at 127.0.0.1, as for ranks on other hosts). `before` runs while rank 0
/// is connected and rank 1 has not started yet, `after` once both are initialized
/// (rank 0 waits for `go`); then the job goes on and must succeed — which it cannot if
/// anything `before` did took rank 1's place. Problems of the attacks and a job that
/// did not end well are reported together.
fn with_pmi_port_job(
    ctx: &Ctx,
    name: &str,
    before: impl FnOnce(&Early, &mut Vec<String>),
    after: impl FnOnce(&JobInfo, &mut Vec<String>),
) -> Result<(), String> {
    let dir = scratch(name);
    let mut job = job_for(ctx, "helper_wait_for_intruder", 2, Duration::from_secs(60));
    job.program = "/bin/sh".into();
    job.args = vec![
        "-c".into(),
        WRAPPER.into(),
        ctx.exe.clone().into_os_string(),
    ];
    job.hosts.clear();
    job.kvs_addr = Some(std::net::Ipv4Addr::LOCALHOST.into());
    job.env
        .push((ENV_SCRATCH.into(), dir.clone().into_os_string()));
    let h = std::thread::spawn(move || launcher::run(&job));
    let mut problems = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while !dir.join("early").exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let early = std::fs::read_to_string(dir.join("early")).unwrap_or_default();
    let l: Vec<&str> = early.lines().collect();
    match l[..] {
        [port, secret, job] if port.starts_with("127.0.0.1:") && secret.len() == 32 => {
            let early = Early {
                port: port.into(),
                secret: secret.into(),
                job: job.into(),
            };
            // rank 0 connects at once: give it a moment, so that a second rank 0
            // below is the second one
            std::thread::sleep(Duration::from_millis(300));
            before(&early, &mut problems);
            let _ = std::fs::write(dir.join("go1"), b"");
            match wait_for_info(&dir) {
                Ok(info) => after(&info, &mut problems),
                Err(e) => problems.push(e),
            }
        }
        _ => problems.push(format!("rank 0 never said where PMI is: {early:?}")),
    }
    let _ = std::fs::write(dir.join("go1"), b"");
    let _ = std::fs::write(dir.join("go"), b"");
    match h.join() {
        Ok(Ok(0)) => {}
        Ok(other) => problems.push(format!("the job was affected: {other:?}")),
        Err(_) => problems.push("the launcher panicked".into()),
    }
    let _ = std::fs::remove_dir_all(&dir);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Connects to `port`, sends `bytes` and expects the connection closed without a byte
/// of answer (end of stream, or a reset when closed with input unread) within 12 s.
fn closed_unanswered(port: &str, bytes: &[u8]) -> Result<(), String> {
    use std::io::{Read, Write};
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(port).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(|e| e.to_string())?;
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 256];
    let r = match s.read(&mut buf) {
        Ok(0) => Ok(()),
        Ok(n) => Err(format!("answered {:?}", String::from_utf8_lossy(&buf[..n]))),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(()),
        Err(e) => Err(format!("not closed: {e}")),
    };
    if t.elapsed() > Duration::from_secs(12) {
        return Err(format!("took {:?} to be closed", t.elapsed()));
    }
    r
}

/// Starts the conformance binary as an intruder claiming to be rank `id` of the job at
/// `port`, with `secret` (or none); it must fail in `initialize` within 10 s.
fn intruder(
    exe: &Path,
    early: &Early,
    id: &str,
    secret: Option<&str>,
    what: &str,
) -> Option<String> {
    let t = Instant::now();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["rank", "helper_intruder"])
        .env(launcher::ENV_RANK, id)
        .env(launcher::ENV_SIZE, "2")
        .env(launcher::ENV_PMI_PORT, &early.port)
        .env(launcher::ENV_PMI_ID, id)
        .env(launcher::ENV_JOB_ID, &early.job)
        .env_remove(launcher::ENV_PMI_FD)
        .env_remove(ENV_SCRATCH);
    match secret {
        Some(s) => cmd.env(launcher::ENV_SECRET, s),
        None => cmd.env_remove(launcher::ENV_SECRET),
    };
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return Some(format!("{what}: {e}")),
    };
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("unreachable") {
        return Some(format!("{what} joined the job"));
    }
    if out.status.success() || !err.contains("rsmpi::initialize") {
        return Some(format!("{what}: {:?}: {err}", out.status));
    }
    if t.elapsed() > Duration::from_secs(10) {
        return Some(format!("{what} took {:?} to be refused", t.elapsed()));
    }
    None
}

/// A process that knows the job's `PMI_PORT` but not the secret of the rank it claims
/// to be cannot join: its `initialize` fails at once — claiming rank 1 (not connected
/// yet) without a secret, with a wrong one, or with rank 0's secret (a rank cannot
/// impersonate another); or as a second rank 0 with rank 0's secret. A client
/// speaking PMI by hand without the secret is closed unanswered: it can neither
/// publish nor read a key. The job goes on unaffected: rank 1 then connects, and the
/// ranks reach each other at the addresses they published.
fn foreign_process_cannot_join(ctx: &Ctx) -> Result<(), String> {
    let exe = ctx.exe.clone();
    let exe2 = ctx.exe.clone();
    let zeros = "0".repeat(32);
    let z2 = zeros.clone();
    with_pmi_port_job(
        ctx,
        "intruder",
        move |early, problems| {
            for (secret, what) in [
                (None, "rank 1 without a secret"),
                (Some(zeros.as_str()), "rank 1 with a wrong secret"),
                (Some(early.secret.as_str()), "rank 1 with rank 0's secret"),
            ] {
                problems.extend(intruder(&exe, early, "1", secret, what));
            }
            // the real ranks have no segment yet: anything now is an intruder's
            let left = shm_entries(&format!("rsmpi-{}-", early.job));
            if !left.is_empty() {
                problems.push(format!("intruders left segments: {left:?}"));
            }
            // by hand: publish as rank 1 and rank 0, read what rank 0 published
            let job = &early.job;
            for first in [
                "cmd=initack pmiid=1".to_owned(),
                format!("cmd=initack pmiid=1 rsmpi_secret={zeros}"),
                format!("cmd=initack pmiid=1 rsmpi_secret={}", early.secret),
                format!("cmd=initack pmiid=1 rsmpi_secret={}", &early.secret[..31]),
                format!("cmd=initack pmiid=2 rsmpi_secret={}", early.secret),
            ] {
                let req = format!(
                    "{first}\ncmd=init pmi_version=1 pmi_subversion=1\n\
                     cmd=put kvsname={job} key=r1-node value=00\n\
                     cmd=put kvsname={job} key=r0-node value=00\n\
                     cmd=get kvsname={job} key=r0-node\ncmd=barrier_in\n"
                );
                if let Err(e) = closed_unanswered(&early.port, req.as_bytes()) {
                    problems.push(format!("a client starting {first:?}: {e}"));
                }
            }
        },
        move |info, problems| {
            let early = Early {
                port: info.port.clone(),
                secret: info.secret.clone(),
                job: info.job.clone(),
            };
            problems.extend(intruder(
                &exe2,
                &early,
                "0",
                Some(&info.secret),
                "a second rank 0",
            ));
            problems.extend(intruder(&exe2, &early, "1", Some(&z2), "a second rank 1"));
        },
    )
}

/// Malformed and oversized input to `PMI_PORT` is closed unanswered and neither crashes
/// nor blocks the launcher: a first line of 1 MiB, binary junk, a line without `=`, an
/// `initack` for a rank id beyond `u32`, an empty line; and 100 connections that say
/// nothing and stay open (more than may wait to authenticate at once) lock out neither
/// rank 1, which connects after them, nor the end of the job.
fn pmi_port_survives_bad_input(ctx: &Ctx) -> Result<(), String> {
    let mut silent = Vec::new();
    let attack = |port: &str, secret: &str, problems: &mut Vec<String>| {
        let long = format!("cmd=initack pmiid=1 rsmpi_secret={}", "0".repeat(1 << 20));
        for (what, bytes) in [
            ("a 1 MiB first line", long.into_bytes()),
            ("binary junk", vec![0xff, 0xfe, 0, 1, b'\n', 0x80, b'\n']),
            ("a line without =", b"hello there\n".to_vec()),
            (
                "rank 4294967297",
                format!("cmd=initack pmiid=4294967297 rsmpi_secret={secret}\n").into_bytes(),
            ),
            ("an empty line", b"\n".to_vec()),
        ] {
            if let Err(e) = closed_unanswered(port, &bytes) {
                problems.push(format!("{what}: {e}"));
            }
        }
    };
    let r = with_pmi_port_job(
        ctx,
        "bad-pmi-input",
        |early, problems| {
            attack(&early.port, &early.secret, problems);
            for _ in 0..100 {
                match std::net::TcpStream::connect(&early.port) {
                    Ok(s) => silent.push(s),
                    Err(e) => {
                        problems.push(format!("connect: {e}"));
                        break;
                    }
                }
            }
        },
        |info, problems| attack(&info.port, &info.secret, problems),
    );
    // the job ended although they were still open
    drop(silent);
    r
}

/// A rank on this node gets an inherited socket (`PMI_FD`) and no `PMI_PORT` or secret,
/// and its launcher (a separate process, like `rsmpirun`) listens on no socket at all:
/// there is nothing another process could connect to.
fn local_ranks_get_a_private_socket(ctx: &Ctx) -> Result<(), String> {
    let dir = scratch("private-fd");
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
    let mut problems = Vec::new();
    match wait_for_info(&dir) {
        Ok(info) => {
            if info.fd.parse::<i32>().map_or(true, |fd| fd < 3)
                || !info.port.is_empty()
                || !info.secret.is_empty()
            {
                problems.push(format!(
                    "rank 0 has PMI_FD={:?} PMI_PORT={:?} RSMPI_SECRET={:?}",
                    info.fd, info.port, info.secret
                ));
            }
            match listening_sockets(info.launcher) {
                Ok(l) if l.is_empty() => {}
                Ok(l) => problems.push(format!("the launcher listens: {l:?}")),
                Err(e) => problems.push(e),
            }
        }
        Err(e) => problems.push(e),
    }
    let _ = std::fs::write(dir.join("go"), b"");
    let out = h.join().map_err(|_| "launch thread panicked")?;
    if out.code != Some(0) {
        problems.push(format!(
            "the job failed: status {:?}\n{}",
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

/// The listening sockets (Unix, TCP, UDP is no listener) among the descriptors of
/// process `pid`, from `/proc`.
fn listening_sockets(pid: i32) -> Result<Vec<String>, String> {
    let fds =
        std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| format!("/proc/{pid}/fd: {e}"))?;
    let inodes: Vec<String> = fds
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    if inodes.is_empty() {
        return Err(format!(
            "process {pid} has no socket at all (not the launcher?)"
        ));
    }
    let mut found = Vec::new();
    // /proc/net/unix: Num RefCount Protocol Flags Type St Inode [Path]; flag
    // __SO_ACCEPTCON (0x10000) marks a listener
    let unix = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
    for l in unix.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 7
            && inodes.iter().any(|i| i == f[6])
            && u32::from_str_radix(f[3], 16).is_ok_and(|fl| fl & 0x10000 != 0)
        {
            found.push(format!("unix {}", f.get(7).unwrap_or(&"(unnamed)")));
        }
    }
    // /proc/net/tcp{,6}: sl local rem st … inode (field 9); state 0A is LISTEN
    for t in ["tcp", "tcp6"] {
        let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).unwrap_or_default();
        for l in tcp.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 10 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                found.push(format!("{t} {}", f[1]));
            }
        }
    }
    Ok(found)
}

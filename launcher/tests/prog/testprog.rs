//! Helper program for the launcher's integration tests (`tests/launch.rs`). Not part of
//! the public interface.
//!
//! Modes (first argument):
//!
//! * `kvs` — two rounds of publish / fence / lookup of every rank; prints
//!   `rank R of N ok job ID` on success, exits 3 on any mismatch.
//! * `echo` — writes a few lines to stdout and stderr (one without final newline).
//! * `exit C0 C1 …` — rank r exits with status `Cr` (0 when missing).
//! * `fail DIR HOW RANK` — every rank writes its pid to `DIR/pid.R`, creates
//!   `/dev/shm/rsmpi-{job_id}-test{R}`, and fences; then rank `RANK` fails `HOW`
//!   (`panic`, `abort`, `exit`, `sigabrt`, or `none`) while rank 0 sleeps, rank 2 ignores
//!   SIGTERM and blocks in a fence, and the others block in a fence.
//! * `abort-last` — the last rank aborts with code 7 while the others wait in a fence
//!   (then sleep): the launcher must end the job.
//! * `wait-go DIR` — publishes; rank 0 writes `RSMPI_KVS` to `DIR/kvs` and waits for
//!   `DIR/go` to exist; then like `kvs`.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use launcher::Boot;
use transport::{Exchange, TransportError};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("kvs") => {
            let mut b = Boot::init().expect("boot");
            kvs_check(&mut b);
        }
        Some("echo") => {
            let r = std::env::var("RSMPI_RANK").unwrap_or_default();
            println!("out line 1 from {r}");
            eprintln!("err from {r}");
            println!("out line 2 from {r}");
            print!("tail {r}");
        }
        Some("exit") => {
            let r: usize = std::env::var("RSMPI_RANK").unwrap().parse().unwrap();
            let code = args.get(1 + r).map_or(0, |c| c.parse().unwrap());
            std::process::exit(code);
        }
        Some("fail") => fail(Path::new(&args[1]), &args[2], args[3].parse().unwrap()),
        Some("abort-last") => {
            // the last rank aborts the job while the others wait in a fence
            let mut b = Boot::init().expect("boot");
            if b.rank() + 1 == b.size() {
                b.abort(7, "testprog abort-last");
            }
            let _ = b.fence();
            std::thread::sleep(Duration::from_secs(30));
        }
        Some("wait-go") => {
            let dir = PathBuf::from(&args[1]);
            let mut b = Boot::init().expect("boot");
            if b.rank() == 0 {
                let tmp = dir.join("kvs.tmp");
                std::fs::write(&tmp, std::env::var("RSMPI_KVS").unwrap()).unwrap();
                std::fs::rename(&tmp, dir.join("kvs")).unwrap();
                let until = Instant::now() + Duration::from_secs(25);
                while !dir.join("go").exists() {
                    assert!(Instant::now() < until, "no go file");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            kvs_check(&mut b);
        }
        _ => {
            eprintln!("usage: rsmpirun-testprog kvs|echo|exit|fail|wait-go …");
            std::process::exit(2);
        }
    }
}

fn value(round: u32, rank: u32, job: &str) -> Vec<u8> {
    format!("value {round} of rank {rank} in {job}").into_bytes()
}

fn bad(msg: String) -> ! {
    eprintln!("testprog: {msg}");
    std::process::exit(3)
}

fn kvs_check(b: &mut Boot) {
    let (me, n) = (b.rank(), b.size());
    let job = b.job_id().to_owned();
    for round in 0..2 {
        let key = format!("key{round}");
        b.publish(&key, &value(round, me, &job)).expect("publish");
        b.fence().expect("fence");
        for peer in 0..n {
            let got = b.lookup(peer, &key).expect("lookup");
            if got != value(round, peer, &job) {
                bad(format!(
                    "rank {me}: round {round}: rank {peer} has {:?}",
                    String::from_utf8_lossy(&got)
                ));
            }
        }
    }
    match b.lookup(0, "never-published") {
        Err(TransportError::Exchange(_)) => {}
        other => bad(format!("lookup of a missing key gave {other:?}")),
    }
    match b.lookup(n, "key0") {
        Err(TransportError::NoSuchRank(r)) if r == n => {}
        other => bad(format!("lookup of rank {n} gave {other:?}")),
    }
    println!("rank {me} of {n} ok job {job}");
}

fn fail(dir: &Path, how: &str, fail_rank: u32) {
    let mut b = Boot::init().expect("boot");
    let me = b.rank();
    let job = b.job_id().to_owned();
    std::fs::write(format!("/dev/shm/rsmpi-{job}-test{me}"), b"segment").unwrap();
    let tmp = dir.join(format!("pid.{me}.tmp"));
    std::fs::write(&tmp, std::process::id().to_string()).unwrap();
    std::fs::rename(&tmp, dir.join(format!("pid.{me}"))).unwrap();
    if me == 0 {
        std::fs::write(dir.join("job_id"), &job).unwrap();
    }
    b.fence().expect("first fence");
    if me == fail_rank {
        match how {
            "panic" => panic!("rank {me} panics on purpose"),
            "abort" => b.abort(42, "test abort"),
            "exit" => std::process::exit(9),
            "sigabrt" => std::process::abort(),
            _ => {}
        }
    }
    if me == 0 {
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    if me == 2 {
        // Ignore SIGTERM: the launcher must escalate to SIGKILL.
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGTERM, flag).unwrap();
    }
    // Blocks: the failing rank never joins this fence.
    let r = b.fence();
    eprintln!("rank {me}: second fence returned {r:?}");
    std::thread::sleep(Duration::from_secs(60));
}

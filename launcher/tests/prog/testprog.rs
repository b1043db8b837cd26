//! Helper program for the launcher's integration tests (`tests/launch.rs`). Not part of
//! the public interface.
//!
//! Modes (first argument):
//!
//! * `kvs` — two rounds of publish / fence / lookup of every rank, and a value of
//!   3000 bytes (longer than PMI's `vallen_max`, so split); prints `rank R of N ok
//!   job ID` on success, exits 3 on any mismatch.
//! * `echo` — writes a few lines to stdout and stderr (one without final newline).
//! * `exit C0 C1 …` — rank r exits with status `Cr` (0 when missing).
//! * `fail DIR HOW RANK` — every rank writes its pid to `DIR/pid.R`, creates
//!   `/dev/shm/rsmpi-{job_id}-test{R}`, and fences; then rank `RANK` fails `HOW`
//!   (`panic`, `abort`, `exit`, `sigabrt`, or `none`) while rank 0 sleeps, rank 2 ignores
//!   SIGTERM and blocks in a fence, and the others block in a fence.
//! * `abort-last` — the last rank aborts with code 7 while the others wait in a fence
//!   (then sleep): the launcher must end the job.
//! * `wait-go DIR` — rank 1 waits for `DIR/go` to exist before it connects to the
//!   launcher; rank 0 connects, writes `PMI_PORT`, its `RSMPI_SECRET` and the job id to
//!   `DIR/kvs` (one per line) and waits for `DIR/go`; then like `kvs`.
//! * `segment DIR` — every rank writes its pid to `DIR/pid.R` and creates
//!   `/dev/shm/rsmpi-{job_id}-test{R}` (rank 0 writes the job id to `DIR/job_id`),
//!   fences and exits 0.
//! * `stdin` — every rank reads its standard input to the end, fences, and prints
//!   `rank R read: TEXT` (TEXT trimmed).
//! * `cpus` — prints `rank R cpus C0,C1,…`: the CPUs it may run on.
//! * `raw` — (under `rsmpirun --kvs-addr`) speaks PMI-1 by hand over `PMI_PORT` and
//!   checks every answer of the server, malformed requests, refused connections;
//!   prints `rank R raw ok`.
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
        Some("cpus") => {
            let r = std::env::var("RSMPI_RANK").unwrap_or_default();
            let cpus: Vec<String> = launcher::own_cpus()
                .expect("sched_getaffinity")
                .iter()
                .map(|c| c.to_string())
                .collect();
            println!("rank {r} cpus {}", cpus.join(","));
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
            let wait_go = || {
                let until = Instant::now() + Duration::from_secs(25);
                while !dir.join("go").exists() {
                    assert!(Instant::now() < until, "no go file");
                    std::thread::sleep(Duration::from_millis(10));
                }
            };
            if std::env::var("PMI_RANK").as_deref() == Ok("1") {
                wait_go();
            }
            let mut b = Boot::init().expect("boot");
            if b.rank() == 0 {
                let tmp = dir.join("kvs.tmp");
                let info = format!(
                    "{}\n{}\n{}\n",
                    std::env::var("PMI_PORT").unwrap_or_default(),
                    std::env::var("RSMPI_SECRET").unwrap_or_default(),
                    b.job_id()
                );
                std::fs::write(&tmp, info).unwrap();
                std::fs::rename(&tmp, dir.join("kvs")).unwrap();
                wait_go();
            }
            kvs_check(&mut b);
        }
        Some("segment") => {
            let dir = PathBuf::from(&args[1]);
            let mut b = Boot::init().expect("boot");
            let (me, job) = (b.rank(), b.job_id().to_owned());
            std::fs::write(format!("/dev/shm/rsmpi-{job}-test{me}"), b"segment").unwrap();
            std::fs::write(
                dir.join(format!("pid.{me}")),
                std::process::id().to_string(),
            )
            .unwrap();
            if me == 0 {
                std::fs::write(dir.join("job_id"), &job).unwrap();
            }
            b.fence().expect("fence");
        }
        Some("raw") => raw(),
        Some("stdin") => {
            use std::io::Read;
            let mut text = String::new();
            let _ = std::io::stdin().read_to_string(&mut text);
            let mut b = Boot::init().expect("boot");
            b.fence().expect("fence");
            println!("rank {} read: {}", b.rank(), text.trim());
        }
        _ => {
            eprintln!(
                "usage: rsmpirun-testprog kvs|echo|exit|fail|abort-last|wait-go|segment|raw …"
            );
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
    let big = |r: u32| -> Vec<u8> { (0..3000u32).map(|i| (i * 7 + r) as u8).collect() };
    b.publish("big", &big(me)).expect("publish big");
    b.fence().expect("fence");
    for peer in 0..n {
        if b.lookup(peer, "big").expect("lookup big") != big(peer) {
            bad(format!("rank {me}: the big value of rank {peer} differs"));
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

/// A raw PMI-1 session over `PMI_PORT`.
struct Raw {
    w: std::net::TcpStream,
    r: std::io::BufReader<std::net::TcpStream>,
}

impl Raw {
    fn connect(id: &str, secret: &str) -> Raw {
        use std::io::Write;
        let port = std::env::var("PMI_PORT").expect("PMI_PORT (run with --kvs-addr)");
        let mut w = std::net::TcpStream::connect(port.trim()).expect("connect PMI_PORT");
        w.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let r = std::io::BufReader::new(w.try_clone().unwrap());
        w.write_all(format!("cmd=initack pmiid={id} rsmpi_secret={secret}\n").as_bytes())
            .unwrap();
        Raw { w, r }
    }

    fn send(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.w.write_all(bytes).expect("write to rsmpirun");
    }

    /// The next answer line; "" at end of stream.
    fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(_) => l.trim_end().to_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => String::new(),
            Err(e) => bad(format!("reading an answer: {e}")),
        }
    }

    fn ask(&mut self, req: &str) -> String {
        self.send(format!("{req}\n").as_bytes());
        self.line()
    }
}

fn expect(got: &str, want: &str) {
    if !got.starts_with(want) {
        bad(format!("answer {got:?}, expected {want:?}…"));
    }
}

fn expect_refused(id: &str, secret: &str, why: &str) {
    let mut c = Raw::connect(id, secret);
    let l = c.line();
    if !l.is_empty() {
        bad(format!("{why}: the connection was served: {l:?}"));
    }
}

fn raw() {
    let id = std::env::var("PMI_ID").expect("PMI_ID");
    let secret = std::env::var("RSMPI_SECRET").expect("RSMPI_SECRET");
    let job = std::env::var("RSMPI_JOB_ID").expect("RSMPI_JOB_ID");
    let n: u32 = std::env::var("PMI_SIZE").unwrap().parse().unwrap();
    let me: u32 = id.parse().unwrap();
    let mut c = Raw::connect(&id, &secret);
    expect(&c.line(), "cmd=initack rc=0");
    expect(&c.line(), &format!("cmd=set size={n}"));
    expect(&c.line(), &format!("cmd=set rank={me}"));
    expect(&c.line(), "cmd=set debug=0");
    expect(
        &c.ask("cmd=init pmi_version=1 pmi_subversion=1"),
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
    );
    expect(
        &c.ask("cmd=get_maxes"),
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0",
    );
    expect(&c.ask("cmd=get_appnum"), "cmd=appnum appnum=0 rc=0");
    expect(
        &c.ask("cmd=get_my_kvsname"),
        &format!("cmd=my_kvsname kvsname={job} rc=0"),
    );
    expect(
        &c.ask("cmd=get_universe_size"),
        &format!("cmd=universe_size size={n} rc=0"),
    );
    // a second connection for this rank, and this rank's secret for another rank, are
    // refused; so is a rank outside the job
    expect_refused(&id, &secret, "a second connection for one rank");
    expect_refused(&((me + 1) % n).to_string(), &secret, "another rank's id");
    expect_refused(&n.to_string(), &secret, "a rank outside the job");
    let put = |c: &mut Raw, key: &str, v: &str| {
        c.ask(&format!("cmd=put kvsname={job} key={key} value={v}"))
    };
    expect(
        &put(&mut c, &format!("r{me}-addr"), &format!("{me:02x}ab")),
        "cmd=put_result rc=0",
    );
    expect(
        &put(&mut c, &format!("own{me}"), "00"),
        "cmd=put_result rc=0",
    );
    // another rank's key is not this rank's to write
    let other = (me + 1) % n;
    expect(
        &put(&mut c, &format!("r{other}-addr"), "ff"),
        "cmd=put_result rc=-1",
    );
    expect(&put(&mut c, &"k".repeat(65), "00"), "cmd=put_result rc=-1");
    expect(
        &put(&mut c, "long", &"0".repeat(1025)),
        "cmd=put_result rc=-1",
    );
    expect(
        &put(&mut c, &format!("max{me}"), &"0".repeat(1024)),
        "cmd=put_result rc=0",
    );
    expect(
        &c.ask(&format!("cmd=put kvsname=not-{job} key=x value=00")),
        "cmd=put_result rc=-1",
    );
    // malformed requests get an error answer and the session goes on
    for req in [
        "junk",
        "cmd=nonsense",
        "cmd=get",
        "cmd",
        "cmd=put key=x",
        "key=x cmd=get",
    ] {
        expect(&c.ask(req), "cmd=");
        if !c.ask("cmd=get_appnum").starts_with("cmd=appnum") {
            bad(format!("the session did not survive {req:?}"));
        }
    }
    c.send(b"cmd=get \xff\xfe\n");
    expect(&c.line(), "cmd=error rc=-1");
    expect(&c.ask("cmd=barrier_in"), "cmd=barrier_out rc=0");
    // a key another rank put first is not this rank's to overwrite
    expect(
        &put(&mut c, &format!("own{other}"), "ff"),
        "cmd=put_result rc=-1",
    );
    for peer in 0..n {
        expect(
            &c.ask(&format!("cmd=get kvsname={job} key=r{peer}-addr")),
            &format!("cmd=get_result rc=0 msg=success value={peer:02x}ab"),
        );
    }
    expect(
        &c.ask(&format!("cmd=get kvsname={job} key=never-put")),
        "cmd=get_result rc=-1",
    );
    expect(&c.ask("cmd=barrier_in"), "cmd=barrier_out rc=0");
    if me == 0 {
        // a line over the limit: an error answer, then the connection is closed
        let mut big = b"cmd=put key=x value=".to_vec();
        big.resize(100_000, b'0');
        big.push(b'\n');
        {
            use std::io::Write;
            // the server may close before it has read everything
            let _ = c.w.write_all(&big);
        }
        // the answer says why (unless the close overtook it), then the end
        let mut l = c.line();
        if l.starts_with("cmd=error rc=-1 msg=line_too_long") {
            l = c.line();
        }
        if !l.is_empty() {
            bad(format!("served after a line too long: {l:?}"));
        }
    } else {
        expect(&c.ask("cmd=finalize"), "cmd=finalize_ack rc=0");
    }
    println!("rank {me} raw ok");
}

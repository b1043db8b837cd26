//! End-to-end tests: real `rsmpirun` processes running `rsmpirun-testprog` ranks.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const RUN: &str = env!("CARGO_BIN_EXE_rsmpirun");
const PROG: &str = env!("CARGO_BIN_EXE_rsmpirun-testprog");
/// No test may take longer than this for one launcher run.
const LIMIT: Duration = Duration::from_secs(60);

struct Out {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Starts `rsmpirun args…` with piped output.
fn start(args: &[&str]) -> Child {
    Command::new(RUN)
        .args(args)
        .env_remove("RSMPI_RANK")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rsmpirun")
}

/// Waits for `child` (killing it and failing after [`LIMIT`]) and collects its output.
fn finish(mut child: Child, started: Instant) -> Out {
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t1 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t2 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rsmpirun did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = started.elapsed();
    Out {
        status,
        stdout: t1.join().unwrap(),
        stderr: t2.join().unwrap(),
        elapsed,
    }
}

fn rsmpirun(args: &[&str]) -> Out {
    let t = Instant::now();
    finish(start(args), t)
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "rsmpirun-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether a test rank with this pid still exists (a zombie counts).
fn rank_process_exists(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.contains("(rsmpirun-testp"))
}

fn read_pids(dir: &Path, n: u32) -> Vec<u32> {
    (0..n)
        .map(|r| {
            std::fs::read_to_string(dir.join(format!("pid.{r}")))
                .unwrap_or_else(|e| panic!("rank {r} wrote no pid file: {e}"))
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

fn wait_for_file(p: &Path) {
    let until = Instant::now() + Duration::from_secs(30);
    while !p.exists() {
        assert!(Instant::now() < until, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn shm_files(job_id: &str) -> Vec<String> {
    let prefix = format!("rsmpi-{job_id}-");
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// After a job ended: no rank process, no segment, no socket directory is left.
fn assert_cleaned_up(dir: &Path, n: u32) {
    let pids = read_pids(dir, n);
    // Reaped ranks disappear from /proc at once; allow a moment for the kernel anyway.
    let until = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&p| rank_process_exists(p)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    for (r, &p) in pids.iter().enumerate() {
        assert!(!rank_process_exists(p), "rank {r} (pid {p}) is still there");
    }
    let job_id = std::fs::read_to_string(dir.join("job_id")).unwrap();
    assert!(!job_id.is_empty());
    assert_eq!(
        shm_files(&job_id),
        Vec::<String>::new(),
        "segments left behind"
    );
    let sockdir = std::env::temp_dir().join(format!("rsmpi-{job_id}"));
    assert!(!sockdir.exists(), "{} left behind", sockdir.display());
    let _ = std::fs::remove_dir_all(dir);
}

fn check_kvs(n: u32) {
    let n_s = n.to_string();
    let out = rsmpirun(&["--timeout", "30", "-n", &n_s, PROG, "kvs"]);
    assert!(
        out.status.success(),
        "n={n}: {:?}\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    let mut job_ids = Vec::new();
    for r in 0..n {
        let head = format!("rank {r} of {n} ok job ");
        let lines: Vec<_> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with(&head))
            .collect();
        assert_eq!(lines.len(), 1, "n={n}, rank {r}:\n{}", out.stdout);
        job_ids.push(lines[0][head.len()..].to_owned());
    }
    assert_eq!(out.stdout.lines().count(), n as usize);
    job_ids.dedup();
    assert_eq!(
        job_ids.len(),
        1,
        "ranks disagree on the job id: {job_ids:?}"
    );
    let id = &job_ids[0];
    assert!(
        !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    );
    // `{launcher pid}-{random hex}`
    let (pid, tag) = id.split_once('-').unwrap();
    assert!(
        pid.parse::<u32>().is_ok(),
        "job id {id} does not start with a pid"
    );
    assert!(
        tag.len() == 8 && tag.bytes().all(|b| b.is_ascii_hexdigit()),
        "job id {id}"
    );
}

#[test]
fn kvs_one_rank() {
    check_kvs(1);
}

#[test]
fn kvs_two_ranks() {
    check_kvs(2);
}

#[test]
fn kvs_four_ranks_on_two_cores() {
    check_kvs(4);
}

#[test]
fn kvs_eight_ranks_oversubscribed() {
    check_kvs(8);
}

#[test]
fn prefix_marks_every_line_with_its_rank() {
    let out = rsmpirun(&["--timeout", "30", "--prefix", "-n", "3", PROG, "echo"]);
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);
    for r in 0..3 {
        for want in [
            format!("[{r}] out line 1 from {r}"),
            format!("[{r}] out line 2 from {r}"),
            format!("[{r}] tail {r}"),
        ] {
            assert!(
                out.stdout.lines().any(|l| l == want),
                "missing {want:?} in\n{}",
                out.stdout
            );
        }
        let want = format!("[{r}] err from {r}");
        assert!(
            out.stderr.lines().any(|l| l == want),
            "missing {want:?} in\n{}",
            out.stderr
        );
    }
    assert_eq!(out.stdout.lines().count(), 9, "{}", out.stdout);
    for l in out.stdout.lines().chain(out.stderr.lines()) {
        let r = l.strip_prefix('[').and_then(|s| s.split_once("] "));
        let (r, rest) = r.unwrap_or_else(|| panic!("unprefixed line {l:?}"));
        assert!(
            rest.ends_with(&format!(" {r}")),
            "line {l:?} carries the wrong rank"
        );
    }
}

#[test]
fn without_prefix_output_is_passed_through() {
    let out = rsmpirun(&["--timeout", "30", "-n", "2", PROG, "echo"]);
    assert!(out.status.success());
    // No newline after "tail R", so lines of different ranks may run together.
    assert!(out.stdout.contains("out line 1 from 1\n"), "{}", out.stdout);
    assert!(out.stdout.contains("tail 1"), "{}", out.stdout);
    assert!(!out.stdout.contains('['));
}

#[test]
fn failing_exit_code_is_returned() {
    let out = rsmpirun(&[
        "--timeout",
        "30",
        "-n",
        "4",
        PROG,
        "exit",
        "0",
        "0",
        "5",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(5), "{}", out.stderr);
    assert!(
        out.stderr.contains("rsmpirun: rank 2 exited with status 5"),
        "{}",
        out.stderr
    );
    let out = rsmpirun(&["--timeout", "30", "-n", "1", PROG, "exit", "3"]);
    assert_eq!(out.status.code(), Some(3));
    let out = rsmpirun(&["--timeout", "30", "-n", "3", PROG, "exit", "0", "0", "0"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!out.stderr.contains("rsmpirun:"), "{}", out.stderr);
}

#[test]
fn panicking_rank_ends_the_job() {
    let dir = scratch("panic");
    let d = dir.to_str().unwrap();
    let out = rsmpirun(&["--timeout", "40", "-n", "4", PROG, "fail", d, "panic", "1"]);
    assert_eq!(out.status.code(), Some(101), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("rsmpirun: rank 1 exited with status 101"),
        "{}",
        out.stderr
    );
    // Rank 2 ignores SIGTERM, so this includes the 2 s escalation to SIGKILL.
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?}",
        out.elapsed
    );
    assert_cleaned_up(&dir, 4);
}

#[test]
fn rank_killed_by_signal_ends_the_job() {
    let dir = scratch("sigabrt");
    let d = dir.to_str().unwrap();
    let out = rsmpirun(&[
        "--timeout",
        "40",
        "-n",
        "4",
        PROG,
        "fail",
        d,
        "sigabrt",
        "3",
    ]);
    assert_eq!(out.status.code(), Some(128 + 6), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("rsmpirun: rank 3 killed by signal 6 (SIGABRT)"),
        "{}",
        out.stderr
    );
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?}",
        out.elapsed
    );
    assert_cleaned_up(&dir, 4);
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let dir = scratch("abort");
    let d = dir.to_str().unwrap();
    let out = rsmpirun(&["--timeout", "40", "-n", "3", PROG, "fail", d, "abort", "1"]);
    assert_eq!(out.status.code(), Some(42), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("rank 1 called abort with code 42: test abort"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("test abort"));
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?}",
        out.elapsed
    );
    assert_cleaned_up(&dir, 3);
}

#[test]
fn timeout_kills_the_job() {
    let dir = scratch("timeout");
    let d = dir.to_str().unwrap();
    let out = rsmpirun(&["--timeout", "1", "-n", "3", PROG, "fail", d, "none", "99"]);
    assert_eq!(out.status.code(), Some(124), "{}", out.stderr);
    assert!(out.stderr.contains("timed out"), "{}", out.stderr);
    // 1 s limit + 2 s grace before SIGKILL for rank 2, which ignores SIGTERM.
    assert!(out.elapsed >= Duration::from_secs(1));
    assert!(
        out.elapsed < Duration::from_secs(8),
        "took {:?}",
        out.elapsed
    );
    assert_cleaned_up(&dir, 3);
}

#[test]
fn sigterm_to_the_launcher_is_forwarded_and_cleans_up() {
    let dir = scratch("sigterm");
    let d = dir.to_str().unwrap();
    let t = Instant::now();
    let child = start(&["--timeout", "40", "-n", "3", PROG, "fail", d, "none", "99"]);
    for r in 0..3 {
        wait_for_file(&dir.join(format!("pid.{r}")));
    }
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = finish(child, t);
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "{:?} {}",
        out.status,
        out.stderr
    );
    assert!(out.stderr.contains("received signal 15"), "{}", out.stderr);
    assert_cleaned_up(&dir, 3);
}

#[test]
fn wrong_secret_is_rejected_and_the_job_is_unaffected() {
    let dir = scratch("secret");
    let t = Instant::now();
    let child = start(&[
        "--timeout",
        "40",
        "-n",
        "2",
        PROG,
        "wait-go",
        dir.to_str().unwrap(),
    ]);
    wait_for_file(&dir.join("kvs"));
    let sock = PathBuf::from(std::fs::read_to_string(dir.join("kvs")).unwrap());
    let sockdir = sock.parent().unwrap();
    let mode = std::fs::metadata(sockdir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "socket directory mode {mode:o}");

    // A hello with a wrong secret for rank 0, followed by a publish that would spoil
    // rank 0's value if it were served.
    let mut frames = Vec::new();
    let hello: Vec<u8> = [&[1u8][..], &[0xa5; 16], &0u32.to_le_bytes()].concat();
    frames.extend_from_slice(&(hello.len() as u32).to_le_bytes());
    frames.extend_from_slice(&hello);
    let key = b"key0";
    let publish: Vec<u8> = [
        &[2u8][..],
        &(key.len() as u32).to_le_bytes(),
        key,
        b"spoiled",
    ]
    .concat();
    frames.extend_from_slice(&(publish.len() as u32).to_le_bytes());
    frames.extend_from_slice(&publish);
    let fence = [1u32.to_le_bytes().as_slice(), &[3u8]].concat();
    frames.extend_from_slice(&fence);
    let lookup: Vec<u8> = [&[4u8][..], &1u32.to_le_bytes(), key].concat();
    frames.extend_from_slice(&(lookup.len() as u32).to_le_bytes());
    frames.extend_from_slice(&lookup);

    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(&frames);
    let mut buf = [0u8; 64];
    // Closed without a single byte of answer (a timeout error would fail here too).
    assert_eq!(
        s.read(&mut buf).expect("connection closed, not timed out"),
        0
    );

    // A hello of the wrong length is dropped as well.
    let mut s2 = UnixStream::connect(&sock).unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s2.write_all(&[200, 0, 0, 0, 1, 2, 3]);
    assert_eq!(
        s2.read(&mut buf).expect("connection closed, not timed out"),
        0
    );

    std::fs::write(dir.join("go"), b"").unwrap();
    let out = finish(child, t);
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("rank 0 of 2 ok"), "{}", out.stdout);
    assert!(out.stdout.contains("rank 1 of 2 ok"), "{}", out.stdout);
    assert!(!sockdir.exists(), "socket directory left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn singleton_without_launcher() {
    let t = Instant::now();
    let mut cmd = Command::new(PROG);
    cmd.arg("kvs")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    for v in [
        "RSMPI_RANK",
        "RSMPI_SIZE",
        "RSMPI_KVS",
        "RSMPI_SECRET",
        "RSMPI_JOB_ID",
    ] {
        cmd.env_remove(v);
    }
    let out = finish(cmd.spawn().unwrap(), t);
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);
    assert!(
        out.stdout.starts_with("rank 0 of 1 ok job single-"),
        "{}",
        out.stdout
    );
}

#[test]
fn missing_program_is_reported() {
    let out = rsmpirun(&["-n", "2", "/nonexistent/rsmpi-program"]);
    assert_eq!(out.status.code(), Some(127), "{}", out.stderr);
    assert!(out.stderr.contains("cannot start rank 0"), "{}", out.stderr);
    assert!(out.status.signal().is_none());
}

#[test]
fn bad_arguments_are_refused() {
    assert_eq!(rsmpirun(&["-n", "0", PROG, "kvs"]).status.code(), Some(2));
    assert_eq!(rsmpirun(&["-n", "2"]).status.code(), Some(2));
}

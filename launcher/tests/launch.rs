//! End-to-end tests: real `rsmpirun` processes running `rsmpirun-testprog` ranks.

use std::io::{Read, Write};
use std::net::TcpStream;
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
    start_env(args, &[])
}

fn start_env(args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(RUN)
        .args(args)
        .env_remove("RSMPI_RANK")
        .envs(env.iter().copied())
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

/// A failed job ended with `code`, said `msg` on stderr, within 10 s, and left none of
/// its `ranks` ranks' files behind.
fn assert_job_failed(out: &Out, code: i32, msg: &str, dir: &Path, ranks: u32) {
    assert_eq!(out.status.code(), Some(code), "{}", out.stderr);
    assert!(out.stderr.contains(msg), "no {msg:?} in {}", out.stderr);
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?}",
        out.elapsed
    );
    assert_cleaned_up(dir, ranks);
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
    let _ = std::fs::remove_dir_all(dir);
}

fn check_kvs(n: u32) {
    check_kvs_with(n, &[], &[]);
}

/// A `kvs` job of `n` ranks, with extra rsmpirun arguments and environment.
fn check_kvs_with(n: u32, extra: &[&str], env: &[(&str, &str)]) {
    let n_s = n.to_string();
    let mut args = vec!["--timeout", "30", "-n", &n_s];
    args.extend_from_slice(extra);
    args.extend([PROG, "kvs"]);
    let out = finish(start_env(&args, env), Instant::now());
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
    // Rank 2 ignores SIGTERM, so this includes the 2 s escalation to SIGKILL.
    assert_job_failed(
        &out,
        101,
        "rsmpirun: rank 1 exited with status 101",
        &dir,
        4,
    );
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
    assert_job_failed(
        &out,
        128 + 6,
        "rsmpirun: rank 3 killed by signal 6 (SIGABRT)",
        &dir,
        4,
    );
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let dir = scratch("abort");
    let d = dir.to_str().unwrap();
    let out = rsmpirun(&["--timeout", "40", "-n", "3", PROG, "fail", d, "abort", "1"]);
    assert_job_failed(
        &out,
        42,
        "rank 1 called abort with code 42: test abort",
        &dir,
        3,
    );
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

/// Standard input goes to rank 0 only (the others read end of file at once).
#[test]
fn stdin_goes_to_rank_0() {
    let t = Instant::now();
    let mut child = Command::new(RUN)
        .args(["--timeout", "30", "-n", "3", PROG, "stdin"])
        .env_remove("RSMPI_RANK")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"to rank zero\n").unwrap();
    drop(input);
    let out = finish(child, t);
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);
    let mut lines: Vec<&str> = out.stdout.lines().map(str::trim_end).collect();
    lines.sort();
    assert_eq!(
        lines,
        ["rank 0 read: to rank zero", "rank 1 read:", "rank 2 read:"],
        "{}",
        out.stdout
    );
}

#[test]
fn kvs_over_pmi_port() {
    // --kvs-addr without --hosts: the local ranks use PMI_PORT (TCP) too
    check_kvs_with(3, &["--kvs-addr", "127.0.0.1"], &[]);
}

/// A PMI session of an enclosing launcher (or an outer rsmpirun) in rsmpirun's
/// environment does not reach the ranks: `PMI_JOBID` or `RSMPI_PMI=2` would make them
/// speak PMI-2, a stale `PMI_ID` would make them send an `initack` on `PMI_FD`.
#[test]
fn outer_pmi_variables_do_not_reach_the_ranks() {
    let outer = [
        ("PMI_JOBID", "77"),
        ("RSMPI_PMI", "2"),
        ("PMI_ID", "5"),
        ("PMI_PORT", "127.0.0.1:1"),
        ("PMI_FD", "1"),
        ("RSMPI_SECRET", "zz"),
    ];
    check_kvs_with(2, &[], &outer);
    check_kvs_with(2, &["--kvs-addr", "127.0.0.1"], &outer);
}

/// Every PMI-1 request rsmpirun serves, answered as documented, spoken by hand over
/// PMI_PORT by the ranks themselves (`testprog raw`): puts and gets (a missing key is
/// an error answer), barriers, another rank's key refused, malformed and non-UTF-8
/// requests answered with an error, a line over the limit closing the connection, a
/// second connection for a rank and a rank's secret used for another rank refused.
#[test]
fn pmi_server_answers_every_request() {
    let out = rsmpirun(&[
        "--timeout",
        "30",
        "--kvs-addr",
        "127.0.0.1",
        "-n",
        "3",
        PROG,
        "raw",
    ]);
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    for r in 0..3 {
        assert!(
            out.stdout.contains(&format!("rank {r} raw ok")),
            "{}",
            out.stdout
        );
    }
}

/// Sends `bytes` to a fresh connection to `port` and expects it closed without a byte
/// of answer (EOF, or a reset when the server closed with unread input).
fn expect_closed_unanswered(port: &str, bytes: &[u8], what: &str) {
    let t = Instant::now();
    let mut s = TcpStream::connect(port).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.write_all(bytes);
    if bytes.is_empty() {
        // said nothing and hung up (a silent client is closed after 10 s)
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{what}: answered {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{what}: not closed ({e})"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "{what}: took {:?}",
        t.elapsed()
    );
}

/// Over PMI_PORT, connections without the right secret for a rank not yet connected
/// (rank 1 connects only once told to go) are closed unanswered and unserved (had one
/// been served, rank 1 could not connect, and its puts would spoil the ranks' values),
/// as are a second connection for rank 0, malformed and oversized first lines; the job
/// goes on unaffected.
#[test]
fn bad_secret_over_pmi_port_is_refused_and_the_job_is_unaffected() {
    let dir = scratch("secret");
    let t = Instant::now();
    let child = start(&[
        "--timeout",
        "40",
        "--kvs-addr",
        "127.0.0.1",
        "-n",
        "2",
        PROG,
        "wait-go",
        dir.to_str().unwrap(),
    ]);
    wait_for_file(&dir.join("kvs"));
    let info = std::fs::read_to_string(dir.join("kvs")).unwrap();
    let mut lines = info.lines();
    let (port, secret0, job) = (
        lines.next().unwrap().to_owned(),
        lines.next().unwrap().to_owned(),
        lines.next().unwrap().to_owned(),
    );
    assert!(port.starts_with("127.0.0.1:"), "{port}");
    assert_eq!(secret0.len(), 32);
    let spoil = |id: u32| {
        format!(
            "cmd=put kvsname={job} key=r{id}-key0 value=00\ncmd=barrier_in\ncmd=get kvsname={job} key=r{id}-key0\n"
        )
    };
    let wrong = "0".repeat(32);
    for (first, what) in [
        ("cmd=initack pmiid=1".to_owned(), "no secret"),
        (
            format!("cmd=initack pmiid=1 rsmpi_secret={wrong}"),
            "wrong secret",
        ),
        (
            format!("cmd=initack pmiid=1 rsmpi_secret={}", &secret0[..30]),
            "short secret",
        ),
        (
            format!("cmd=initack pmiid=1 rsmpi_secret={secret0}"),
            "rank 0's secret for rank 1",
        ),
        (
            format!("cmd=initack pmiid=0 rsmpi_secret={secret0}"),
            "a second connection for rank 0",
        ),
        (
            format!("cmd=initack pmiid=2 rsmpi_secret={secret0}"),
            "a rank outside the job",
        ),
        (
            format!("cmd=initack pmiid=-1 rsmpi_secret={secret0}"),
            "a negative rank",
        ),
        (
            format!("cmd=init pmiid=0 rsmpi_secret={secret0}"),
            "not an initack",
        ),
        (
            format!("cmd=initack pmiid=0 pmiid=1 rsmpi_secret={secret0}"),
            "two ids",
        ),
    ] {
        let id = if first.contains("pmiid=0") { 0 } else { 1 };
        expect_closed_unanswered(&port, format!("{first}\n{}", spoil(id)).as_bytes(), what);
    }
    // oversized, binary, and silent-then-closed first lines
    expect_closed_unanswered(&port, &vec![b'a'; 1 << 20], "a 1 MiB first line");
    expect_closed_unanswered(&port, &[0xff, 0, 0x80, b'\n', 1, 2, 3], "binary junk");
    expect_closed_unanswered(&port, b"", "nothing, then end of stream");

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
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn abort_over_pmi_port_ends_the_job_with_its_code() {
    let dir = scratch("abort-port");
    let d = dir.to_str().unwrap();
    let out = rsmpirun(&[
        "--timeout",
        "40",
        "--kvs-addr",
        "127.0.0.1",
        "-n",
        "3",
        PROG,
        "fail",
        d,
        "abort",
        "2",
    ]);
    assert_job_failed(
        &out,
        42,
        "rsmpirun: rank 2 called abort with code 42: test abort",
        &dir,
        3,
    );
}

/// The ranks' job id (from PMI: rsmpirun names the key-value space after its job id)
/// is the one rsmpirun cleans up after: no segment is left after a job that ended
/// well (here, as after the failed ones above).
#[test]
fn no_segment_is_left_after_a_normal_job() {
    let dir = scratch("segment");
    let d = dir.to_str().unwrap();
    let out = rsmpirun(&["--timeout", "30", "-n", "3", PROG, "segment", d]);
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);
    // the ranks created /dev/shm/rsmpi-{their job id}-test{R}
    assert_cleaned_up(&dir, 3);
}

#[test]
fn singleton_without_launcher() {
    let t = Instant::now();
    let mut cmd = Command::new(PROG);
    cmd.arg("kvs")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    launcher::clear_job_env(&mut cmd);
    let out = finish(cmd.spawn().unwrap(), t);
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);
    assert!(
        out.stdout.starts_with("rank 0 of 1 ok job single-"),
        "{}",
        out.stdout
    );
    // RSMPI_RANK without a PMI connection: not a singleton, an error
    let out = Command::new(PROG)
        .arg("kvs")
        .env("RSMPI_RANK", "0")
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("neither PMI_FD nor PMI_PORT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
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

/// The CPUs each rank of a `cpus` job said it may run on, by rank.
fn cpus_of_ranks(out: &Out, ranks: usize) -> Vec<Vec<usize>> {
    assert!(out.status.success(), "{}", out.stderr);
    let mut seen = vec![None; ranks];
    for line in out.stdout.lines() {
        let rest = line.strip_prefix("rank ").expect(line);
        let (r, cpus) = rest.split_once(" cpus ").expect(line);
        let cpus: Vec<usize> = cpus.split(',').map(|c| c.parse().unwrap()).collect();
        seen[r.parse::<usize>().unwrap()] = Some(cpus);
    }
    seen.into_iter()
        .enumerate()
        .map(|(r, c)| c.unwrap_or_else(|| panic!("rank {r} said nothing: {}", out.stdout)))
        .collect()
}

#[test]
fn ranks_are_bound_to_cpus_of_their_own() {
    let cpus = launcher::own_cpus().expect("sched_getaffinity");
    let k = cpus.len();
    let all = |n: usize| vec![cpus.clone(); n];
    if k >= 2 {
        // the default: the CPUs cut into a block per rank
        let out = rsmpirun(&["-n", "2", PROG, "cpus"]);
        assert_eq!(
            cpus_of_ranks(&out, 2),
            [cpus[..k / 2].to_vec(), cpus[k / 2..].to_vec()]
        );
        let out = rsmpirun(&["--bind-to", "block", "-n", "2", PROG, "cpus"]);
        assert_eq!(
            cpus_of_ranks(&out, 2),
            [cpus[..k / 2].to_vec(), cpus[k / 2..].to_vec()]
        );
        let out = rsmpirun(&["--bind-to", "core", "-n", "2", PROG, "cpus"]);
        assert_eq!(cpus_of_ranks(&out, 2), [vec![cpus[0]], vec![cpus[1]]]);
    }
    // as many ranks as CPUs: one each, either way
    let n = k.to_string();
    let one_each: Vec<Vec<usize>> = cpus.iter().map(|&c| vec![c]).collect();
    assert_eq!(
        cpus_of_ranks(&rsmpirun(&["-n", &n, PROG, "cpus"]), k),
        one_each
    );
    // not bound: asked so, or more ranks than CPUs
    let out = rsmpirun(&["--bind-to", "none", "-n", "2", PROG, "cpus"]);
    assert_eq!(cpus_of_ranks(&out, 2), all(2));
    let n = (k + 1).to_string();
    assert_eq!(
        cpus_of_ranks(&rsmpirun(&["-n", &n, PROG, "cpus"]), k + 1),
        all(k + 1)
    );
    // out of the launcher's own CPUs (here set by taskset)
    let last = cpus[k - 1].to_string();
    let under_taskset = |n: &str| {
        let t = Instant::now();
        let child = Command::new("taskset")
            .args(["-c", &last, RUN, "-n", n, PROG, "cpus"])
            .env_remove("RSMPI_RANK")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("taskset (util-linux)");
        finish(child, t)
    };
    let only = vec![cpus[k - 1]];
    assert_eq!(
        cpus_of_ranks(&under_taskset("1"), 1),
        std::slice::from_ref(&only)
    );
    assert_eq!(cpus_of_ranks(&under_taskset("2"), 2), [only.clone(), only]);
    // a binding that does not exist
    let out = rsmpirun(&["--bind-to", "socket", "-n", "1", PROG, "cpus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stderr.contains("expected block, core or none"),
        "{}",
        out.stderr
    );
}

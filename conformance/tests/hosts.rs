//! `cargo test -p conformance --features ofi --test hosts` (as root): jobs across
//! three hosts — network namespaces of this machine joined by veth pairs and a
//! bridge (`conformance::hosts`) — started by rsmpirun's `--hosts` with its TCP
//! start-up service: shared memory inside a namespace, libfabric's tcp provider
//! between them.
//!
//! Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and `ip`; without them every test
//! fails, saying so, unless `RSMPI_NO_NETNS=1` is set (then they pass without
//! running, and print that they did not run).
#![cfg(feature = "ofi")]

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use conformance::hosts::Hosts;

const EXE: &str = env!("CARGO_BIN_EXE_conformance");
const SOAK: &str = env!("CARGO_BIN_EXE_soak");
/// The provider between namespaces (libfabric's shm provider would cross them).
const PROVIDER: &str = "tcp;ofi_rxm";

/// One set of namespaces at a time: the tests share the machine's 2 CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

fn hosts(n: usize) -> Option<Hosts> {
    if std::env::var_os("RSMPI_NO_NETNS").is_some() {
        eprintln!("RSMPI_NO_NETNS is set: this test did NOT run");
        return None;
    }
    match Hosts::create(n) {
        Ok(h) => Some(h),
        Err(e) => panic!(
            "cannot create network namespaces ({e}); run as root with iproute2, or set \
             RSMPI_NO_NETNS=1 to skip the tests across hosts"
        ),
    }
}

fn with_hosts(cmd: &mut Command, h: &Hosts) {
    cmd.env("CONFORMANCE_HOSTS", h.list())
        .env("CONFORMANCE_KVS_ADDR", h.kvs_addr().to_string())
        .env("RSMPI_OFI_PROVIDER", PROVIDER)
        .env_remove("RSMPI_RANK");
}

/// Runs the conformance binary's job cases (both matching modes) on 3 hosts, started
/// by `launcher` (`None`: rsmpirun).
fn suite_across_three_hosts(launcher: Option<&str>) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = hosts(3) else { return };
    let mut cmd = Command::new(EXE);
    with_hosts(&mut cmd, &h);
    if let Some(l) = launcher {
        cmd.env("CONFORMANCE_LAUNCHER", l);
    }
    let t = Instant::now();
    let out = cmd.output().expect("run the conformance binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the suite failed across hosts under {} ({:.0} s)",
        launcher.unwrap_or("rsmpirun"),
        t.elapsed().as_secs_f64()
    );
    assert!(stdout.contains(" passed, 0 failed"), "no summary line");
}

/// Every job case of the suite, in both matching modes, on 3 hosts.
#[test]
fn conformance_suite_across_three_hosts() {
    suite_across_three_hosts(None);
}

/// The same, started by MPICH's Hydra (`mpiexec.hydra`, only as the launcher) on the
/// three namespaces: its proxies start there through an ssh stand-in and the ranks
/// speak PMI-1 to them.
#[test]
fn conformance_suite_under_hydra_across_three_hosts() {
    if !conformance::launchers::found("mpiexec.hydra") {
        assert!(
            std::env::var_os("CI").is_none(),
            "mpiexec.hydra is missing on CI"
        );
        eprintln!("mpiexec.hydra is missing (apt-get install mpich): this test did NOT run");
        return;
    }
    suite_across_three_hosts(Some("hydra"));
}

/// The randomized soak with checksummed payloads, 6 ranks on 3 hosts, both modes.
#[test]
fn soak_across_three_hosts() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = hosts(3) else { return };
    let mut cmd = Command::new(SOAK);
    cmd.args(["--seconds", "15", "--ranks", "6", "--matching", "all"]);
    with_hosts(&mut cmd, &h);
    let out = cmd.output().expect("run the soak");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the soak failed across hosts");
}

/// A job of 6 ranks on 3 hosts uses shared memory to its neighbour and libfabric to
/// the other hosts at once, and says so in its debug line.
#[test]
fn transports_are_chosen_per_peer() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = hosts(3) else { return };
    let ctx = conformance::Ctx {
        exe: EXE.into(),
        matching: conformance::Matching::Both,
        transport: "auto".into(),
    };
    let env = [
        ("CONFORMANCE_HOSTS", h.list().into()),
        ("CONFORMANCE_KVS_ADDR", h.kvs_addr().to_string().into()),
        ("RSMPI_OFI_PROVIDER", PROVIDER.into()),
        ("RSMPI_DEBUG", "1".into()),
    ];
    let out = conformance::launch(
        &ctx,
        "every_pair_every_protocol_any_size",
        6,
        Duration::from_secs(60),
        &env,
        Duration::from_secs(90),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for (r, line) in [
        (0, "shm to ranks 0-1, ofi (tcp;ofi_rxm) to ranks 2-5"),
        (3, "shm to ranks 2-3, ofi (tcp;ofi_rxm) to ranks 0-1,4-5"),
        (5, "shm to ranks 4-5, ofi (tcp;ofi_rxm) to ranks 0-3"),
    ] {
        let want = format!("rsmpi: rank {r}: transport: {line}");
        assert!(
            out.stderr.contains(&want),
            "no line {want:?} in:\n{}",
            out.stderr
        );
    }
}

/// How a host is lost in [`lose_host`].
#[derive(Clone, Copy, PartialEq)]
enum Loss {
    /// Every process of its namespace is killed.
    Killed,
    /// Its veth goes down: its processes live on, unreachable.
    Cut,
}

/// Runs a job with one rank per host, rank 1 (host 1) streaming to rank 0 over tcp,
/// loses host 1, and checks that the job ends within 10 s with an error naming rank
/// 1 and leaves no shared-memory segment behind.
fn lose_host(loss: Loss) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = hosts(3) else { return };
    let dir = conformance::scratch("lose-host");
    let ctx = conformance::Ctx {
        exe: EXE.into(),
        matching: conformance::Matching::Both,
        transport: "auto".into(),
    };
    let env = vec![
        (conformance::ENV_SCRATCH, dir.clone().into_os_string()),
        ("CONFORMANCE_HOSTS", h.list().into()),
        ("CONFORMANCE_KVS_ADDR", h.kvs_addr().to_string().into()),
        ("RSMPI_OFI_PROVIDER", PROVIDER.into()),
    ];
    let job = std::thread::spawn(move || {
        conformance::launch(
            &ctx,
            "helper_transfer_forever",
            3,
            Duration::from_secs(120),
            &env,
            Duration::from_secs(120),
        )
    });
    let until = Instant::now() + Duration::from_secs(60);
    while !dir.join("transferring").exists() {
        assert!(Instant::now() < until, "rank 1 never started transferring");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let lost_at = Instant::now();
    match loss {
        Loss::Killed => {
            let pids = h.pids(1);
            assert!(!pids.is_empty(), "no process in host 1's namespace");
            for p in &pids {
                if let Some(pid) = rustix::process::Pid::from_raw(*p) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        Loss::Cut => h.cut(1).expect("cut host 1's veth"),
    }
    let out = job.join().expect("launcher thread");
    let took = lost_at.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        took < Duration::from_secs(10),
        "the job took {took:?} to end:\n{}",
        out.stderr
    );
    match loss {
        Loss::Killed => {
            assert_eq!(out.code, Some(128 + 9), "{}", out.stderr);
            assert!(
                out.stderr.contains("rank 1 killed by signal 9"),
                "{}",
                out.stderr
            );
        }
        Loss::Cut => {
            assert_eq!(out.code, Some(launcher::LOST_STATUS), "{}", out.stderr);
            let want = format!("lost contact with rank 1 (host {})", h.names()[1]);
            assert!(
                out.stderr.contains(&want),
                "no {want:?} in:\n{}",
                out.stderr
            );
        }
    }
    let prefix = format!("rsmpi-{}-", out.launcher_pid);
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "segments left: {left:?}");
}

#[test]
fn losing_a_host_ends_the_job() {
    lose_host(Loss::Killed);
}

#[test]
fn cutting_a_host_off_ends_the_job() {
    lose_host(Loss::Cut);
}

//! Runs every program of this crate as a real job of 4 ranks under `rsmpirun` and checks
//! that it exits with status 0 and prints its `NAME ok` line.
//!
//! Nothing is built here: cargo builds the programs (`CARGO_BIN_EXE_<name>`); the launcher
//! is found, in this order, at `$RSMPIRUN`, next to the programs (when this crate is a
//! member of the main workspace, `rsmpirun` lands in the same target directory), or in
//! the main workspace's `target/{debug,release}`. `RSMPI_COMPAT_NP` overrides the number
//! of ranks (default 4).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const DEFAULT_RANKS: u32 = 4;
/// Passed to `rsmpirun --timeout`: the launcher ends a job that runs longer.
const JOB_TIMEOUT_SECS: u32 = 60;

fn launcher() -> PathBuf {
    let exe = if cfg!(windows) {
        "rsmpirun.exe"
    } else {
        "rsmpirun"
    };
    if let Some(p) = std::env::var_os("RSMPIRUN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "RSMPIRUN={} is not a file", p.display());
        return p;
    }
    // any program of this crate tells us where the target directory is
    let here = Path::new(env!("CARGO_BIN_EXE_p2p_basic"))
        .parent()
        .expect("programs live in a directory")
        .to_path_buf();
    let workspace_target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    let candidates = [
        here.join(exe),
        workspace_target.join("debug").join(exe),
        workspace_target.join("release").join(exe),
    ];
    for c in &candidates {
        if c.is_file() {
            return c.clone();
        }
    }
    panic!(
        "rsmpirun not found (looked at {:?}); build it with `cargo build -p rsmpirun` in the \
         main workspace or set RSMPIRUN=/path/to/rsmpirun",
        candidates
    );
}

fn ranks() -> u32 {
    std::env::var("RSMPI_COMPAT_NP")
        .ok()
        .map(|s| s.parse().expect("RSMPI_COMPAT_NP must be a number"))
        .unwrap_or(DEFAULT_RANKS)
}

/// One job at a time: the ranks of a job poll, and the machine may have few cores.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `program` on the ranks and asserts success and the `name ok` line.
fn run(name: &str, program: &str) {
    let _turn = ONE_JOB_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let n = ranks();
    let started = Instant::now();
    let out = Command::new(launcher())
        .arg("-n")
        .arg(n.to_string())
        .arg("--timeout")
        .arg(JOB_TIMEOUT_SECS.to_string())
        .arg(program)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start rsmpirun for {name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let took = started.elapsed();
    let report = format!(
        "{name} on {n} ranks: {} after {:.1?}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}",
        out.status, took
    );
    assert!(out.status.success(), "{report}");
    let ok_line = format!("{name} ok");
    let oks = stdout.lines().filter(|l| l.trim() == ok_line).count();
    assert_eq!(oks, 1, "expected exactly one line `{ok_line}`\n{report}");
    assert!(
        took < Duration::from_secs(JOB_TIMEOUT_SECS as u64 + 10),
        "{report}"
    );
}

macro_rules! programs {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), env!(concat!("CARGO_BIN_EXE_", stringify!($name))));
            }
        )*

        /// Every program in src/bin has a test above, and every test names a program.
        #[test]
        fn every_program_has_a_test() {
            let listed: Vec<&str> = vec![$(stringify!($name)),*];
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin");
            let mut found: Vec<String> = std::fs::read_dir(&dir)
                .expect("src/bin")
                .filter_map(|e| {
                    let p = e.ok()?.path();
                    if p.extension()? != "rs" {
                        return None;
                    }
                    p.file_stem()?.to_str().map(String::from)
                })
                .collect();
            found.sort();
            let mut want: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(found, want, "src/bin and the tests in tests/run.rs differ");
        }
    };
}

programs!(
    p2p_basic,
    p2p_modes,
    p2p_immediate,
    p2p_multiple,
    p2p_probe,
    sendrecv,
    derive_struct,
    user_datatypes,
    comm_split,
    groups,
    cartesian,
    coll_basic,
    coll_varcount,
    coll_reduce,
    user_ops,
    coll_immediate,
    environment,
    pack_unpack,
    generic_comm,
    heat_1d,
    matvec,
);

/// The same programs started by MPICH's Hydra (`mpiexec.hydra`, used only as a
/// launcher: the ranks start up over PMI-1). `.ci/run` installs Debian's `mpich`;
/// elsewhere the test says so and passes when it is missing, unless `CI` is set.
#[test]
fn programs_under_mpich_hydra() {
    let found = Command::new("mpiexec.hydra")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "mpiexec.hydra is missing on CI (.ci/run installs Debian's mpich)"
        );
        eprintln!("mpiexec.hydra not installed (apt-get install mpich): not run");
        return;
    }
    let _turn = ONE_JOB_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // (program, extra mpiexec arguments, PMI version)
    let programs = [
        ("coll_basic", env!("CARGO_BIN_EXE_coll_basic"), &[][..], "1"),
        (
            "p2p_immediate",
            env!("CARGO_BIN_EXE_p2p_immediate"),
            &[][..],
            "1",
        ),
        (
            "heat_1d",
            env!("CARGO_BIN_EXE_heat_1d"),
            &["-pmi-port"][..],
            "1",
        ),
        (
            "derive_struct",
            env!("CARGO_BIN_EXE_derive_struct"),
            &[][..],
            "2",
        ),
    ];
    for (name, exe, extra, pmi) in programs {
        let out = Command::new("timeout")
            .env("RSMPI_PMI", pmi)
            .arg("120")
            .arg("mpiexec.hydra")
            .args(extra)
            .args(["-n", "4", exe])
            .stdin(Stdio::null())
            .output()
            .expect("mpiexec.hydra runs");
        common::assert_ok(name, "under Hydra", &out);
    }
}

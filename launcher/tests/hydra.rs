//! Ranks started by MPICH's Hydra (`mpiexec.hydra`, Debian's `mpich` package, used only
//! as a launcher): the PMI-1 start-up over `PMI_FD` and over `PMI_PORT`, PMI-2 (forced
//! with `RSMPI_PMI=2`; Hydra serves both), and an abort ending the job. `.ci/run` installs `mpich`; elsewhere the tests say so and pass when
//! it is missing, unless `CI` is set.

use std::process::Command;
use std::time::{Duration, Instant};

const PROG: &str = env!("CARGO_BIN_EXE_rsmpirun-testprog");

fn hydra() -> Option<&'static str> {
    let found = Command::new("mpiexec.hydra")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("mpiexec.hydra");
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "mpiexec.hydra is missing on CI (.ci/run installs Debian's mpich)"
    );
    eprintln!("mpiexec.hydra not installed (apt-get install mpich): Hydra tests not run");
    None
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String, Duration) {
    let t = Instant::now();
    let out = Command::new("timeout")
        .envs(env.iter().copied())
        .arg("60")
        .arg(hydra().expect("checked"))
        .args(args)
        .output()
        .expect("mpiexec.hydra runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t.elapsed(),
    )
}

fn check_kvs(extra: &[&str], env: &[(&str, &str)], n: u32) {
    if hydra().is_none() {
        return;
    }
    let np = n.to_string();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["-n", &np, PROG, "kvs"]);
    let (code, out, err, _) = run_env(&args, env);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    for r in 0..n {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("rank {r} of {n} ok job pmi-"))),
            "rank {r} missing: {out}"
        );
    }
}

#[test]
fn kvs_exchange_over_pmi_fd() {
    check_kvs(&[], &[], 3);
}

#[test]
fn kvs_exchange_over_pmi_port() {
    check_kvs(&["-pmi-port"], &[], 4);
}

/// PMI-2 (what Slurm's `srun --mpi=pmi2` speaks), against Hydra's PMI-2 server.
#[test]
fn kvs_exchange_over_pmi2() {
    check_kvs(&[], &[("RSMPI_PMI", "2")], 3);
}

#[test]
fn an_abort_ends_the_hydra_job() {
    abort_ends_the_job(&[]);
}

#[test]
fn a_pmi2_abort_ends_the_hydra_job() {
    abort_ends_the_job(&[("RSMPI_PMI", "2")]);
}

fn abort_ends_the_job(env: &[(&str, &str)]) {
    if hydra().is_none() {
        return;
    }
    let (code, out, err, took) = run_env(&["-n", "3", PROG, "abort-last"], env);
    assert_ne!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(
        took < Duration::from_secs(20),
        "the job took {took:?} to end"
    );
    // the other ranks sleep 30 s after their fence: only the launcher acting on the
    // abort ends the job this early (the aborting rank's own message may be lost when
    // Hydra tears the job down before forwarding its stderr)
}

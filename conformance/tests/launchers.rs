//! The conformance suite's job cases (both matching modes) started by other
//! launchers, used only as launchers: MPICH's Hydra (`mpiexec.hydra`, PMI-1) and Slurm
//! (`srun --mpi=pmi2`, PMI-2, a one-node Slurm the test starts itself, as root).
//! `.ci/run` installs both (Debian's `mpich` and `slurm-wlm`); elsewhere a missing
//! launcher is reported and the test passes without running, unless `CI` is set.

use std::process::Command;

use conformance::launchers::{found, is_root, start_slurm};

const EXE: &str = env!("CARGO_BIN_EXE_conformance");

fn missing(what: &str) {
    assert!(std::env::var_os("CI").is_none(), "{what} is missing on CI");
    eprintln!("{what} is missing: this test did NOT run");
}

/// One suite at a time: each runs jobs of up to 8 ranks on the machine's 2 CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn suite(cmd: &mut Command, how: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // CONFORMANCE_FILTER=NAME runs the cases whose name contains NAME (debugging)
    if let Ok(f) = std::env::var("CONFORMANCE_FILTER") {
        cmd.arg(f);
    }
    let out = cmd
        .env_remove("RSMPI_RANK")
        .output()
        .expect("run the conformance binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAILED")).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "the suite failed under {how}:\n{}\n{}",
        failed.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[test]
fn suite_under_hydra() {
    if !found("mpiexec.hydra") {
        return missing("mpiexec.hydra (apt-get install mpich)");
    }
    suite(
        Command::new(EXE).env("CONFORMANCE_LAUNCHER", "hydra"),
        "mpiexec.hydra",
    );
}

#[test]
fn suite_under_slurm() {
    if !(is_root() && found("slurmctld") && found("slurmd") && found("srun")) {
        return missing("Slurm (apt-get install slurm-wlm) or root");
    }
    let slurm = start_slurm();
    suite(
        Command::new(EXE)
            .env("CONFORMANCE_LAUNCHER", "srun")
            .env("SLURM_CONF", &slurm.conf),
        "srun --mpi=pmi2",
    );
}

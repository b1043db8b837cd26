//! Programs started by Slurm's `srun --mpi=pmi2` (PMI-2): the test configures and
//! starts a one-node Slurm of its own (`slurmctld` and `slurmd`, Debian's `slurm-wlm`,
//! state and spool in a temporary directory, no authentication, ports of its own) and
//! stops it afterwards. It needs root; `.ci/run` installs `slurm-wlm`. Elsewhere the
//! test says so and passes when Slurm is missing, unless `CI` is set.

mod common;

use std::process::{Command, Stdio};

use conformance::launchers::{found, start_slurm};

#[test]
fn programs_under_slurm_srun_pmi2() {
    let root = conformance::launchers::is_root();
    if !(root && found("slurmctld") && found("slurmd") && found("srun")) {
        assert!(
            std::env::var_os("CI").is_none(),
            "Slurm is missing on CI, or CI is not root (.ci/run installs Debian's slurm-wlm)"
        );
        eprintln!("Slurm not installed (apt-get install slurm-wlm) or not root: not run");
        return;
    }
    let slurm = start_slurm();
    let programs = [
        ("coll_basic", env!("CARGO_BIN_EXE_coll_basic")),
        ("p2p_immediate", env!("CARGO_BIN_EXE_p2p_immediate")),
        ("heat_1d", env!("CARGO_BIN_EXE_heat_1d")),
        ("user_ops", env!("CARGO_BIN_EXE_user_ops")),
    ];
    for (name, exe) in programs {
        // 4 tasks on 2 CPUs: -O (overcommit)
        let out = Command::new("timeout")
            .args(["120", "srun", "--mpi=pmi2", "-O", "-n", "4", exe])
            .env("SLURM_CONF", &slurm.conf)
            .stdin(Stdio::null())
            .output()
            .expect("srun runs");
        common::assert_ok(name, "under srun", &out);
    }
}

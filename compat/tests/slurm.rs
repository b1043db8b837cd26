//! Programs started by Slurm's `srun --mpi=pmi2` (PMI-2): the test configures and
//! starts a one-node Slurm of its own (`slurmctld` and `slurmd`, Debian's `slurm-wlm`,
//! state and spool in a temporary directory, no authentication, ports of its own) and
//! stops it afterwards. It needs root; `.ci/run` installs `slurm-wlm`. Elsewhere the
//! test says so and passes when Slurm is missing, unless `CI` is set.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn found(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The daemons and their directory, stopped and removed on drop.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_slurm() -> Slurm {
    let host = String::from_utf8(
        Command::new("hostname")
            .arg("-s")
            .output()
            .expect("hostname")
            .stdout,
    )
    .expect("utf-8 hostname")
    .trim()
    .to_string();
    let dir = std::env::temp_dir().join(format!("rsmpi-slurm-{}", std::process::id()));
    for d in ["state", "spool", "log"] {
        std::fs::create_dir_all(dir.join(d)).expect("slurm directories");
    }
    // ports of this test only (derived from the pid, away from Slurm's 6817/6818)
    let port = 20000 + (std::process::id() % 20000) as u16 * 2;
    let d = dir.display();
    let conf = format!(
        "ClusterName=rsmpitest\n\
         SlurmctldHost={host}\n\
         AuthType=auth/none\n\
         CredType=cred/none\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         StateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/log/slurmctld.log\n\
         SlurmdLogFile={d}/log/slurmd.log\n\
         SlurmctldPort={port}\n\
         SlurmdPort={}\n\
         MpiDefault=none\n\
         ReturnToService=2\n\
         SchedulerType=sched/builtin\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_Core\n\
         NodeName={host} CPUs=2 State=UNKNOWN\n\
         PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n",
        port + 1
    );
    let path = dir.join("slurm.conf");
    std::fs::write(&path, conf).expect("slurm.conf");
    let mut s = Slurm {
        dir: dir.clone(),
        conf: path.clone(),
        daemons: Vec::new(),
    };
    for daemon in ["slurmctld", "slurmd"] {
        let child = Command::new(daemon)
            .args(["-D", "-f"])
            .arg(&path)
            .env("SLURM_CONF", &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{daemon}: {e}"));
        s.daemons.push(child);
    }
    // wait until the node takes jobs
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new("sinfo")
            .args(["-h", "-o", "%T"])
            .env("SLURM_CONF", &path)
            .output()
            .expect("sinfo");
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if state == "idle" {
            return s;
        }
        assert!(
            Instant::now() < until,
            "the test's Slurm did not come up (node state {state:?}); logs in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn programs_under_slurm_srun_pmi2() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
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

//! The launchers jobs can be started by besides `rsmpirun`: MPICH's Hydra
//! (`mpiexec.hydra`, PMI-1) and Slurm (`srun --mpi=pmi2`, PMI-2), used only as
//! launchers. `CONFORMANCE_LAUNCHER=hydra|srun` makes every job case start that way
//! ([`run_external`]); [`start_slurm`] brings up a one-node Slurm of the test's own
//! (`slurmctld` and `slurmd`, state and spool in a temporary directory, no
//! authentication, ports of its own), stopped on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn found(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A one-node Slurm: the daemons and their directory, stopped and removed on drop.
pub struct Slurm {
    dir: PathBuf,
    /// The `slurm.conf` to pass as `SLURM_CONF` to `srun`.
    pub conf: PathBuf,
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

/// Configures and starts a one-node Slurm of its own (needs root and `slurm-wlm`).
pub fn start_slurm() -> Slurm {
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

/// Whether this process runs as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Runs `job` under the launcher `CONFORMANCE_LAUNCHER` names (`hydra`: `mpiexec.hydra
/// -n N`; `srun`: `srun --mpi=pmi2 -O -n N` with the `SLURM_CONF` of the environment)
/// instead of rsmpirun; returns its exit status (124 on time-out, after killing it).
pub fn run_external(launcher: &str, job: &launcher::Job) -> Result<i32, String> {
    let n = job.size.to_string();
    let mut cmd = match launcher {
        "hydra" => {
            let mut c = Command::new("mpiexec.hydra");
            c.args(["-n", &n]);
            if let (false, Some(addr)) = (job.hosts.is_empty(), job.kvs_addr) {
                // on network namespaces: Hydra starts its proxies there through an
                // ssh stand-in, and they reach it at the bridge's address
                let placement = launcher::place(&job.hosts, job.size).map_err(|e| e.to_string())?;
                let list: Vec<String> = job
                    .hosts
                    .iter()
                    .enumerate()
                    .map(|(i, h)| {
                        let k = placement.iter().filter(|&&p| p == i).count();
                        format!("{}:{}", h.netns, k.max(1))
                    })
                    .collect();
                let agent = launcher::netns::write_ssh_agent(
                    &std::env::temp_dir().join(format!("conformance-agent-{}", std::process::id())),
                )
                .map_err(|e| format!("ssh stand-in: {e}"))?;
                c.args(["-bootstrap", "ssh", "-bootstrap-exec"])
                    .arg(agent)
                    .args(["-hosts", &list.join(","), "-localhost", &addr.to_string()]);
            }
            c
        }
        "srun" => {
            let mut c = Command::new("srun");
            c.args(["--mpi=pmi2", "-O", "-n", &n]);
            c
        }
        other => {
            return Err(format!(
                "CONFORMANCE_LAUNCHER={other:?}: expected hydra or srun"
            ))
        }
    };
    if launcher == "srun" && !job.hosts.is_empty() {
        return Err("srun places ranks on Slurm's nodes, not on CONFORMANCE_HOSTS".into());
    }
    cmd.arg(&job.program)
        .args(&job.args)
        .env("RSMPI_TRANSPORT", &job.transport)
        .envs(job.env.iter().map(|(k, v)| (k, v)))
        .env_remove(launcher::ENV_RANK)
        .stdin(Stdio::null());
    let mut child = cmd.spawn().map_err(|e| format!("{launcher}: {e}"))?;
    let limit = job.timeout.unwrap_or(Duration::from_secs(600));
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(st.code().unwrap_or(1));
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(launcher::TIMEOUT_STATUS);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

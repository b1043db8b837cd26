//! `--compare`: builds the C reference (benches/reference/bench_ref.c) with Debian's
//! Open MPI and MPICH and runs it with the same methodology.

use crate::report::Row;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("../reference/bench_ref.c");

/// Benchmarks the C reference implements (besides the collectives,
/// [`crate::report::COLLECTIVES`]).
pub const COMPARABLE: [&str; 6] = [
    "latency",
    "bw",
    "bibw",
    "pingpong-preposted",
    "queue-depth",
    "mbw_mr",
];
/// The benchmarks `--across-hosts` runs (one rank on each of two hosts).
pub const ACROSS_HOSTS: [&str; 4] = ["latency", "bw", "bibw", "pingpong-preposted"];

/// A built reference: how to launch it.
pub struct Reference {
    /// `openmpi-vader`, `openmpi-ucx`, `mpich`; `openmpi-tcp`, `mpich-tcp` across hosts.
    pub name: &'static str,
    launcher: &'static str,
    /// The launcher's option for the number of ranks (`-np`, `-n`).
    np_flag: &'static str,
    launch_args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    exe: PathBuf,
    /// What the rows say it ran over.
    transport: &'static str,
}

/// Two network namespaces of this machine standing in for two hosts
/// (`--across-hosts`): how the references reach them, as rsmpirun's `--hosts` does.
pub struct Across {
    /// A stand-in for `ssh host command` that runs the command in namespace `host`.
    pub agent: PathBuf,
    /// `ns0,ns1`.
    pub hosts: String,
    /// The namespaces' subnet (`10.213.X.0/24`), for the interface choices.
    pub subnet: String,
    /// The launcher's address as the namespaces reach it.
    pub launcher_ip: String,
}

/// The references placed one rank per namespace, over TCP: Open MPI with ob1 and its
/// tcp BTL, MPICH (ch4:ucx) with UCX's tcp transport and no shared memory.
pub fn across(refs: Vec<Reference>, a: &Across) -> Vec<Reference> {
    let agent = a.agent.display().to_string();
    let mut out = Vec::new();
    for r in refs {
        match r.name {
            "openmpi-vader" => out.push(Reference {
                name: "openmpi-tcp",
                // the daemons' hwloc topology sharing (rtc hwloc) has crashed orted in
                // a namespace here (a segfault in hwloc_shmem_topology_write): off
                launch_args: [
                    "--bind-to",
                    "none",
                    "--mca",
                    "rtc",
                    "^hwloc",
                    "--mca",
                    "plm_rsh_agent",
                    &agent,
                    "--host",
                    &a.hosts,
                    "--mca",
                    "oob_tcp_if_include",
                    &a.subnet,
                    "--mca",
                    "pml",
                    "ob1",
                    "--mca",
                    "btl",
                    "tcp,self",
                    "--mca",
                    "btl_tcp_if_include",
                    &a.subnet,
                ]
                .map(String::from)
                .to_vec(),
                // a TMPDIR per host for the daemons (launcher::netns, the ssh stand-in)
                env: [r.env.as_slice(), &[("NETNS_SSH_OWN_TMPDIR", "1")]].concat(),
                transport: "tcp",
                ..r
            }),
            "mpich" => out.push(Reference {
                name: "mpich-tcp",
                launch_args: [
                    "-bootstrap",
                    "ssh",
                    "-bootstrap-exec",
                    &agent,
                    "-hosts",
                    &a.hosts,
                    "-localhost",
                    &a.launcher_ip,
                ]
                .map(String::from)
                .to_vec(),
                env: vec![
                    ("MPIR_CVAR_NOLOCAL", "1"),
                    ("UCX_TLS", "tcp"),
                    ("UCX_NET_DEVICES", "eth0"),
                ],
                transport: "tcp",
                ..r
            }),
            _ => {}
        }
    }
    out
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd} >/dev/null 2>&1"))
        .status()
        .is_ok_and(|s| s.success())
}

/// The install hint printed when the MPI packages are missing.
pub fn install_hint() -> String {
    "rsmpi-bench --compare needs Debian's Open MPI and MPICH (mpicc.openmpi, mpicc.mpich).\n\
     Install them with:\n    sh benches/reference/install.sh\n\
     or: apt-get install -y openmpi-bin libopenmpi-dev mpich libmpich-dev"
        .to_string()
}

/// Checks the packages, writes the C source into `dir`, compiles it with both
/// `mpicc`s and returns the references to run (Open MPI over ob1/vader, Open MPI over
/// UCX when its PML is present, MPICH with its default).
pub fn build(dir: &Path) -> Result<Vec<Reference>, String> {
    let missing: Vec<&str> = [
        "mpicc.openmpi",
        "mpirun.openmpi",
        "mpicc.mpich",
        "mpiexec.mpich",
    ]
    .into_iter()
    .filter(|c| !have(c))
    .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing: {}\n{}",
            missing.join(", "),
            install_hint()
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let src = dir.join("bench_ref.c");
    std::fs::write(&src, SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
    let compile = |cc: &str, out: &Path| -> Result<(), String> {
        let o = Command::new(cc)
            .arg("-O2")
            .arg("-o")
            .arg(out)
            .arg(&src)
            .output()
            .map_err(|e| format!("{cc}: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{cc} failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ))
        }
    };
    let ompi = dir.join("bench_ref_openmpi");
    let mpich = dir.join("bench_ref_mpich");
    compile("mpicc.openmpi", &ompi)?;
    compile("mpicc.mpich", &mpich)?;
    let root_env = vec![
        ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ];
    let mut refs = vec![Reference {
        name: "openmpi-vader",
        launcher: "mpirun.openmpi",
        np_flag: "-np",
        launch_args: [
            "--bind-to",
            "none",
            "--mca",
            "pml",
            "ob1",
            "--mca",
            "btl",
            "self,vader",
        ]
        .map(String::from)
        .to_vec(),
        env: root_env.clone(),
        exe: ompi.clone(),
        transport: "shm",
    }];
    let ucx = Reference {
        name: "openmpi-ucx",
        launcher: "mpirun.openmpi",
        np_flag: "-np",
        launch_args: [
            "--bind-to",
            "none",
            "--mca",
            "pml",
            "ucx",
            "--mca",
            "pml_ucx_tls",
            "any",
            "--mca",
            "pml_ucx_devices",
            "any",
        ]
        .map(String::from)
        .to_vec(),
        env: root_env,
        exe: ompi,
        transport: "shm",
    };
    // UCX only if Open MPI was built with it and it runs here
    if ucx
        .run("latency", 2, &["--quick", "--max-size", "0"])
        .is_ok()
    {
        refs.push(ucx);
    } else {
        eprintln!("rsmpi-bench: Open MPI's UCX PML does not run here; comparing without it");
    }
    refs.push(Reference {
        name: "mpich",
        launcher: "mpiexec.mpich",
        np_flag: "-n",
        launch_args: vec![],
        env: vec![],
        exe: mpich,
        transport: "shm",
    });
    Ok(refs)
}

impl Reference {
    /// Runs one benchmark; returns the output's data lines split into numbers.
    /// `ranks`: the job's size.
    fn run(&self, bench: &str, ranks: u32, args: &[&str]) -> Result<Vec<Vec<f64>>, String> {
        let mut cmd = Command::new(self.launcher);
        cmd.arg(self.np_flag).arg(ranks.to_string());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.launcher == "mpirun.openmpi" && ranks as usize > cpus {
            // more ranks than CPUs: Open MPI refuses without this (and then yields
            // when idle, as rsmpi and MPICH's ranks do when oversubscribed)
            cmd.arg("--oversubscribe");
        }
        cmd.args(&self.launch_args)
            .arg(&self.exe)
            .arg(bench)
            .args(args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // the reference must not think it runs inside an rsmpi job, nor find the PMI
        // session of a launcher that started this driver (its own launcher sets its own)
        launcher::clear_job_env(&mut cmd);
        let o = cmd
            .output()
            .map_err(|e| format!("{}: {e}", self.launcher))?;
        if !o.status.success() {
            return Err(format!(
                "{} {bench} on {ranks} ranks failed ({}):\n{}",
                self.name,
                o.status,
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        let out = String::from_utf8_lossy(&o.stdout);
        Ok(out
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                l.split_whitespace()
                    .map(|x| x.parse::<f64>().ok())
                    .collect::<Option<Vec<f64>>>()
            })
            .collect())
    }

    /// Runs `bench` and converts its output to rows.
    pub fn rows(
        &self,
        bench: &str,
        ranks: u32,
        quick: bool,
        min: usize,
        max: usize,
    ) -> Result<Vec<Row>, String> {
        let (min_s, max_s) = (min.to_string(), max.to_string());
        let mut args = vec!["--min-size", &min_s, "--max-size", &max_s];
        if quick {
            args.push("--quick");
        }
        let lines = self.run(bench, ranks, &args)?;
        let mut rows = Vec::new();
        for l in lines {
            let size = l[0] as u64;
            let mut push = |metric: &str, value: f64, unit: &str, iterations: usize| {
                rows.push(Row {
                    benchmark: bench.into(),
                    implementation: self.name.into(),
                    transport: self.transport.into(),
                    matching: "-".into(),
                    protocol: "-".into(),
                    metric: metric.into(),
                    size,
                    value,
                    unit: unit.into(),
                    iterations: iterations as u64,
                    ranks,
                })
            };
            let s = size as usize;
            match bench {
                "latency" if l.len() >= 2 => {
                    push("", l[1], "us", crate::rank::lat_iters(s, quick).0)
                }
                "bw" | "bibw" if l.len() >= 2 => push(
                    "",
                    l[1],
                    "MB/s",
                    crate::rank::bw_iters(s, quick).0 * crate::rank::WINDOW,
                ),
                "mbw_mr" if l.len() >= 3 => {
                    let pairs = format!("{} pair(s)", ranks / 2);
                    let it = crate::rank::bw_iters(s, quick).0 * crate::rank::WINDOW;
                    push(&pairs, l[1], "MB/s", it);
                    push(&pairs, l[2], "msg/s", it);
                }
                "pingpong-preposted" if l.len() >= 4 => {
                    let n = crate::rank::prepost_count(s, quick);
                    push("plain", l[1], "us", crate::rank::lat_iters(s, quick).0);
                    push("preposted", l[2], "us", n);
                    push("post", l[3], "us", n);
                    push("preposted+post", l[2] + l[3], "us", n);
                }
                // "N latency post first" (us), N receives posted
                "queue-depth" if l.len() >= 4 => {
                    let it = crate::rank::lat_iters(4, quick).0;
                    push("latency", l[1], "us", it);
                    push("post total", l[2], "us", s);
                    push("first post total", l[3], "us", s);
                }
                // collectives: "size avg min max" (us)
                b if crate::report::is_collective(b) && l.len() >= 4 => {
                    let it = crate::rank::coll_iters(s, quick).0;
                    push("", l[1], "us", it);
                    push("min", l[2], "us", it);
                    push("max", l[3], "us", it);
                }
                _ => {}
            }
        }
        Ok(rows)
    }
}

//! `rsmpirun -n N [--prefix] [--transport auto|shm|verbs|ofi] [--hosts LIST --kvs-addr ADDR] [--timeout SECS] [--bind-to block|core|none] [--] program args…`
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::time::Duration;

use clap::Parser;
use launcher::{run, Job, LaunchError};

/// Starts N ranks of an rsmpi program on this node and exits with the job's status.
#[derive(Parser, Debug)]
#[command(name = "rsmpirun", version)]
struct Args {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    n: u32,
    /// Prefix each output line of a rank with `[rank] `.
    #[arg(long)]
    prefix: bool,
    /// Transport the ranks should use (passed as RSMPI_TRANSPORT): auto (shared memory
    /// within a node, the network between nodes), shm, verbs or ofi (that network
    /// transport to every peer) [default: $RSMPI_TRANSPORT, else auto].
    #[arg(long)]
    transport: Option<String>,
    /// Place the ranks on these hosts: network namespaces of this machine (`ip netns`),
    /// `name` or `name:slots`, comma-separated; ranks fill each host's slots in
    /// order, or equal blocks when no host gives slots. Needs --kvs-addr.
    #[arg(long, value_name = "LIST")]
    hosts: Option<String>,
    /// The address of this machine at which the ranks reach rsmpirun's PMI service
    /// over TCP (PMI_PORT, each rank with its own secret). Needed with --hosts; without
    /// it, the ranks of this node use it too instead of an inherited socket (PMI_FD).
    #[arg(long, value_name = "ADDR")]
    kvs_addr: Option<std::net::IpAddr>,
    /// Kill the whole job after SECS seconds (exit status 124).
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Bind the ranks to CPUs, out of those rsmpirun may use: block (the CPUs cut into
    /// one equal block per rank, in order), core (rank r to the r-th CPU) or none.
    /// Ranks are not bound when there are more of them than CPUs.
    #[arg(long, value_name = "HOW", default_value = "block")]
    bind_to: String,
    /// The program to run and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    command: Vec<OsString>,
}

fn main() {
    let args = Args::parse();
    let mut command = args.command.into_iter();
    let program = command.next().unwrap_or_default();
    let mut job = Job::new(args.n, program, command);
    job.prefix_output = args.prefix;
    job.transport = args
        .transport
        .or_else(|| {
            std::env::var("RSMPI_TRANSPORT")
                .ok()
                .filter(|t| !t.is_empty())
        })
        .unwrap_or_else(|| "auto".into());
    job.kvs_addr = args.kvs_addr;
    job.bind = match launcher::Bind::parse(&args.bind_to) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rsmpirun: {e}");
            std::process::exit(2);
        }
    };
    if let Some(list) = &args.hosts {
        match launcher::Host::parse_list(list) {
            Ok(h) => job.hosts = h,
            Err(e) => {
                eprintln!("rsmpirun: {e}");
                std::process::exit(2);
            }
        }
    }
    if let Some(secs) = args.timeout {
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if secs > 0.0 => job.timeout = Some(d),
            _ => {
                eprintln!("rsmpirun: --timeout needs a positive number of seconds");
                std::process::exit(2);
            }
        }
    }
    match run(&job) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("rsmpirun: {e}");
            let code = match e {
                LaunchError::Spawn { ref source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    127
                }
                LaunchError::Spawn { .. } => 126,
                _ => 1,
            };
            std::process::exit(code)
        }
    }
}

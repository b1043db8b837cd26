//! `rsmpi-bench`: the rsmpi benchmark suite.
//!
//! ```text
//! rsmpi-bench [BENCH] [--quick] [--json FILE] [--plot FILE.png] [--compare]
//!             [--min-size B] [--max-size B] [--runs N] [--pairs N] [--ranks N,N]
//! BENCH: latency | bw | bibw | pingpong-preposted | table1 | queue-depth | mbw_mr |
//!        multi_lat | overlap | limits | all   (no BENCH: `all --quick`)
//!        allreduce | bcast | reduce | allgather | alltoall | barrier | coll
//!        (the collectives, OSU's osu_* methodology, on each of --ranks; `coll`: all six)
//! ```
//!
//! Started directly, it is the driver: it starts every measurement as its own job of
//! ranks of itself (through rsmpirun's library), collects the rows, runs the C
//! references for `--compare`, and prints OSU-style tables. Started inside a job
//! (`rsmpirun -n 2 rsmpi-bench latency`), it runs the benchmark as it is and rank 0
//! prints the table.

use rsmpi::traits::*;
mod compare;
mod limits;
mod perftest;
mod plot;
mod rank;
mod report;

use clap::Parser;
use report::Row;
use std::path::PathBuf;
use std::time::Duration;

/// Jobs that failed and were retried.
static FAILURES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Where the driver tells a job's rank 0 to write its rows (JSON lines).
const ENV_OUT: &str = "RSMPI_BENCH_OUT";

const ALL: [&str; 10] = [
    "latency",
    "bw",
    "bibw",
    "pingpong-preposted",
    "table1",
    "queue-depth",
    "mbw_mr",
    "multi_lat",
    "overlap",
    "limits",
];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "rsmpi-bench",
    about = "rsmpi benchmark suite (OSU methodology, MPI-EMX experiments, limits)"
)]
struct Cli {
    /// latency | bw | bibw | pingpong-preposted | table1 | queue-depth | mbw_mr |
    /// multi_lat | overlap | limits | all (point-to-point and limits);
    /// allreduce | bcast | reduce | allgather | alltoall | barrier | coll (collectives).
    /// Without it: `all --quick`.
    bench: Option<String>,
    /// Fewer iterations (a tenth of OSU's counts, or fewer for large messages).
    #[arg(long)]
    quick: bool,
    /// Write every row as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw latency and bandwidth against message size to FILE.png (or FILE.svg).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Also build and run the C reference with Open MPI and MPICH, and print
    /// rsmpi/best-reference ratios. With `--transport verbs`: perftest's
    /// ib_write_lat, ib_send_lat and ib_write_bw on the same device instead.
    #[arg(long)]
    compare: bool,
    /// Smallest message size in bytes.
    #[arg(long, default_value_t = 0)]
    min_size: usize,
    /// Largest message size in bytes [default: 4 MiB; 1 MiB for the collectives].
    #[arg(long)]
    max_size: Option<usize>,
    /// Job sizes (ranks) for the collectives, e.g. `--ranks 2,3,4`.
    #[arg(long, value_delimiter = ',', default_values_t = [2u32, 4])]
    ranks: Vec<u32>,
    /// Run every measurement N times (each its own job) and report medians; with
    /// `--compare`, in N rounds of one job per implementation.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Pairs of ranks for mbw_mr and multi_lat (default: one pair per two CPUs).
    #[arg(long)]
    pairs: Option<usize>,
    /// mbw_mr: put the barrier after the warm-up windows, where osu_mbw_mr has it.
    /// Reproduces an rsmpi engine bug (a protocol error within a few runs).
    #[arg(long, hide = true)]
    mid_barrier: bool,
    /// Seconds after which one job is killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Run the two-rank benchmarks across two hosts: network namespaces of this
    /// machine joined by veth pairs (created for the run and removed after; needs
    /// root and iproute2), rsmpi over libfabric's tcp provider (build with
    /// `--features ofi`), the references over TCP (Open MPI's tcp BTL, MPICH with
    /// UCX's tcp transport).
    #[arg(long)]
    across_hosts: bool,
    /// The transport of rsmpi's ranks (`RSMPI_TRANSPORT`): auto, shm, verbs (build with
    /// `--features verbs`; how 2 ranks run over one RDMA device) or ofi. Every row
    /// names the transport its ranks used.
    #[arg(long, default_value = "auto")]
    transport: String,
}

/// With `--across-hosts`: where the jobs' ranks go (the namespaces and the address
/// they reach the launcher at).
static PLACE: std::sync::Mutex<Option<(Vec<launcher::Host>, std::net::IpAddr)>> =
    std::sync::Mutex::new(None);

impl Cli {
    /// The largest message size of `bench`: `--max-size`, or OSU's default (4 MiB for
    /// point-to-point, 1 MiB for collectives).
    fn max_for(&self, bench: &str) -> usize {
        let default = if bench == "coll" || report::is_collective(bench) {
            1 << 20
        } else {
            4 << 20
        };
        self.max_size.unwrap_or(default)
    }

    fn opts(&self) -> rank::Opts {
        self.opts_for("")
    }

    fn opts_for(&self, bench: &str) -> rank::Opts {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        rank::Opts {
            quick: self.quick,
            min_size: self.min_size,
            max_size: self.max_for(bench),
            pairs: self.pairs.unwrap_or((cpus / 2).max(1)),
            mid_barrier: self.mid_barrier,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__limits-child") {
        let path = args.get(2).expect("path");
        if let Err(e) = limits::child(std::path::Path::new(path)) {
            eprintln!("rsmpi-bench: limits child: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.get(1).map(String::as_str) == Some("__plot") && args.len() == 4 {
        // redraw a plot from a --json file: rsmpi-bench __plot ROWS.json OUT.png (or .svg)
        let text = std::fs::read_to_string(&args[2]).expect("rows");
        let rows: Vec<Row> = serde_json::from_str(&text).expect("rows");
        if let Err(e) = plot::draw(std::path::Path::new(&args[3]), &rows) {
            eprintln!("rsmpi-bench: plot: {e}");
            std::process::exit(1);
        }
        return;
    }
    let mut cli = Cli::parse();
    if cli.bench.is_none() {
        cli.bench = Some("all".into());
        cli.quick = true;
    }
    if std::env::var_os(launcher::ENV_RANK).is_some() {
        in_job(&cli);
    } else {
        std::process::exit(driver(&cli));
    }
}

/// Inside a job: run the benchmark; rank 0 hands the rows to the driver or prints them.
fn in_job(cli: &Cli) {
    let universe = rsmpi::initialize().expect("MPI init");
    let bench = cli.bench.clone().unwrap_or_default();
    let list: Vec<&str> = match bench.as_str() {
        // under a foreign rsmpirun: everything that runs in one job
        "all" => ALL
            .iter()
            .copied()
            .filter(|b| !matches!(*b, "limits" | "table1"))
            .chain(["table1-cell"])
            .collect(),
        "table1" => vec!["table1-cell"],
        "coll" => report::COLLECTIVES.to_vec(),
        b => vec![b],
    };
    let mut rows = Vec::new();
    for b in list {
        rows.extend(rank::run(&universe, b, &cli.opts_for(b)));
    }
    if universe.world().rank() == 0 {
        if let Some(out) = std::env::var_os(ENV_OUT) {
            let text: String = rows
                .iter()
                .map(|r| serde_json::to_string(r).expect("row") + "\n")
                .collect();
            std::fs::write(out, text).expect("writing rows");
        } else {
            report::print_tables(&rows, &mut std::io::stdout()).expect("stdout");
            if let Some(p) = &cli.json {
                report::write_json(p, &rows).expect("writing json");
            }
        }
    }
}

/// Runs `bench` as a job of `ranks` ranks of this program with `env`; returns rank 0's rows.
fn job(
    cli: &Cli,
    bench: &str,
    ranks: u32,
    env: &[(&str, &str)],
    min: usize,
    max: usize,
) -> Result<Vec<Row>, String> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("rsmpi-bench-{}-{n}.jsonl", std::process::id()));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut args = vec![
        bench.to_string(),
        "--min-size".into(),
        min.to_string(),
        "--max-size".into(),
        max.to_string(),
        "--pairs".into(),
        cli.opts().pairs.to_string(),
    ];
    if cli.quick {
        args.push("--quick".into());
    }
    if cli.mid_barrier {
        args.push("--mid-barrier".into());
    }
    let mut j = launcher::Job::new(ranks, exe, args);
    j.timeout = Some(Duration::from_secs(cli.timeout));
    j.transport = cli.transport.clone();
    j.env = env
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    j.env.push((ENV_OUT.into(), out.clone().into()));
    let across = PLACE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some((hosts, addr)) = across {
        j.hosts = hosts;
        j.kvs_addr = Some(addr);
        j.env
            .push(("RSMPI_OFI_PROVIDER".into(), "tcp;ofi_rxm".into()));
        j.env.push(("RSMPI_NET".into(), "ofi".into()));
    }
    let code = launcher::run(&j).map_err(|e| format!("{bench}: cannot launch: {e}"))?;
    let rows = report::read_lines(&out).map(|mut rows| {
        if j.kvs_addr.is_some() {
            for r in &mut rows {
                r.transport = "ofi-tcp".into();
            }
        }
        rows
    });
    let _ = std::fs::remove_file(&out);
    if matches!(code, 129 | 130 | 143) {
        // the launcher caught SIGHUP, SIGINT or SIGTERM (and ended the job): stop here
        eprintln!("rsmpi-bench: interrupted");
        std::process::exit(code);
    }
    if code != 0 {
        return Err(format!("{bench}: the job failed with status {code}"));
    }
    rows.map_err(|e| format!("{bench}: reading the rows: {e}"))
}

/// `runs` jobs of the same measurement, reduced to medians.
fn jobs(
    cli: &Cli,
    bench: &str,
    ranks: u32,
    env: &[(&str, &str)],
    min: usize,
    max: usize,
) -> Result<Vec<Row>, String> {
    let mut all = Vec::new();
    for _ in 0..cli.runs.max(1) {
        // a failed job is retried (twice at most) so that one failure does not lose
        // the figure; every failure is reported on stderr and counted in the summary
        let mut tries = 0;
        loop {
            match job(cli, bench, ranks, env, min, max) {
                Ok(rows) => {
                    all.extend(rows);
                    break;
                }
                Err(e) if tries < 2 => {
                    eprintln!("rsmpi-bench: {e}; retrying");
                    FAILURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(report::median_of_runs(all))
}

/// `rounds` rounds of rsmpi's jobs (`rsmpi`) and then the references' (`refs`, which
/// add their rows), all rows together; stops at rsmpi's first error.
fn in_rounds(
    rounds: usize,
    mut rsmpi: impl FnMut() -> Result<Vec<Row>, String>,
    mut refs: impl FnMut(&mut Vec<Row>),
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for _ in 0..rounds {
        rows.extend(rsmpi()?);
        refs(&mut rows);
    }
    Ok(rows)
}

/// The measurements of one benchmark on rsmpi.
fn rsmpi_rows(cli: &Cli, bench: &str) -> Result<Vec<Row>, String> {
    let (min, max) = (cli.min_size, cli.max_for(bench));
    match bench {
        b if report::is_collective(b) => {
            let mut rows = Vec::new();
            for &n in &cli.ranks {
                rows.extend(jobs(cli, bench, n, &[], min, max)?);
            }
            Ok(rows)
        }
        "table1" => {
            let mut rows = Vec::new();
            for m in ["both", "receiver"] {
                for p in ["eager", "get", "sync"] {
                    rows.extend(jobs(
                        cli,
                        "table1-cell",
                        2,
                        // the paper's dual matching advertises every receive
                        &[
                            ("RSMPI_MATCHING", m),
                            ("RSMPI_PROTOCOL", p),
                            ("RSMPI_ADVERTISE", "always"),
                        ],
                        4,
                        4,
                    )?);
                }
            }
            Ok(rows)
        }
        "queue-depth" => {
            let mut rows = Vec::new();
            for m in ["both", "receiver"] {
                rows.extend(jobs(cli, bench, 2, &[("RSMPI_MATCHING", m)], min, max)?);
            }
            Ok(rows)
        }
        "mbw_mr" | "multi_lat" => jobs(cli, bench, 2 * cli.opts().pairs as u32, &[], min, max),
        "limits" => {
            let mut rows = Vec::new();
            for _ in 0..cli.runs.max(1) {
                rows.extend(limits::measure().map_err(|e| format!("limits: {e}"))?);
            }
            Ok(report::median_of_runs(rows))
        }
        _ => jobs(cli, bench, 2, &[], min, max),
    }
}

/// glibc's environment variable for its mmap threshold.
const MMAP_THRESHOLD: &str = "MALLOC_MMAP_THRESHOLD_";

fn driver(cli: &Cli) -> i32 {
    // Every job this driver starts, rsmpi's and the C references', allocates its
    // large buffers under one fixed policy: glibc's mmap threshold held at its
    // initial 128 KiB. Left dynamic, it rises to the largest block freed so far, so
    // whether a size's buffers are fresh pages or reused heap depends on the sizes
    // run before it; that alone moved `bw` at 512 KiB-4 MiB by up to 30 % between
    // two builds whose paths for those sizes were the same (docs/performance.md,
    // "Pulls"). A value the user set is kept.
    if std::env::var_os(MMAP_THRESHOLD).is_none() {
        std::env::set_var(MMAP_THRESHOLD, "131072");
    }
    let bench = cli.bench.clone().unwrap_or_default();
    let list: Vec<&str> = match bench.as_str() {
        "all" => ALL.to_vec(),
        "coll" => report::COLLECTIVES.to_vec(),
        b => vec![b],
    };
    if let Some(b) = list
        .iter()
        .find(|b| !ALL.contains(b) && !report::is_collective(b))
    {
        eprintln!(
            "rsmpi-bench: unknown benchmark {b:?}; expected one of {}, all, {} or coll",
            ALL.join(", "),
            report::COLLECTIVES.join(", ")
        );
        return 2;
    }
    if list.iter().any(|b| report::is_collective(b)) && cli.ranks.iter().any(|&n| n < 2) {
        eprintln!("rsmpi-bench: --ranks: the collective benchmarks need at least 2 ranks");
        return 2;
    }
    // --across-hosts: two namespaces for the whole run, removed when `_net` drops
    let mut _net = None;
    if cli.across_hosts {
        if let Some(b) = list.iter().find(|b| !compare::ACROSS_HOSTS.contains(b)) {
            eprintln!(
                "rsmpi-bench: --across-hosts runs {} only, not {b}",
                compare::ACROSS_HOSTS.join(", ")
            );
            return 2;
        }
        match launcher::netns::Hosts::create(2) {
            Ok(h) => {
                let mut job = launcher::Job::new(2, "", Vec::<String>::new());
                h.place(&mut job);
                *PLACE.lock().unwrap_or_else(|e| e.into_inner()) = Some((job.hosts, h.kvs_addr()));
                _net = Some(h);
            }
            Err(e) => {
                eprintln!("rsmpi-bench: --across-hosts: {e} (needs root and iproute2)");
                return 2;
            }
        }
    }
    // on verbs the references are perftest's (the hardware floor), below: Debian's MPIs
    // do not run over SoftRoCE
    let refs = if cli.compare && cli.transport != "verbs" {
        let dir = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|p| p.join("rsmpi-bench-reference")))
            .unwrap_or_else(|| std::env::temp_dir().join("rsmpi-bench-reference"));
        let built = compare::build(&dir).and_then(|refs| match &_net {
            Some(h) => {
                let agent = launcher::netns::write_ssh_agent(&dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                let kvs = h.kvs_addr().to_string();
                Ok(compare::across(
                    refs,
                    &compare::Across {
                        agent,
                        hosts: h.list(),
                        subnet: h.subnet(),
                        launcher_ip: kvs,
                    },
                ))
            }
            None => Ok(refs),
        });
        match built {
            Ok(r) => r,
            Err(e) => {
                eprintln!("rsmpi-bench: {e}");
                return 3;
            }
        }
    } else {
        Vec::new()
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    // the machine's state (how far apart its two CPUs are) can change during a run,
    // which makes figures measured at different times incomparable: bracket the run
    let line_before = limits::cacheline_pingpong().ok().map(|(us, _)| us);
    let ranks = if list.iter().any(|b| report::is_collective(b)) {
        let r: Vec<String> = cli.ranks.iter().map(u32::to_string).collect();
        format!(" on {} ranks", r.join(", "))
    } else {
        String::new()
    };
    println!(
        "# rsmpi-bench {bench}{}{ranks}: sizes {}..{} B, {} run(s) per figure (median), load average at start: {}, cache-line one-way at start: {}",
        if cli.quick { " (quick)" } else { "" },
        cli.min_size,
        cli.max_for(&bench),
        cli.runs.max(1),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        line_before.map_or("-".into(), |us| format!("{us:.3} us"))
    );
    println!();
    let mut all_rows: Vec<Row> = Vec::new();
    let mut failed = false;
    for b in list {
        let compared = compare::COMPARABLE.contains(&b) || report::is_collective(b);
        let job_sizes = if report::is_collective(b) {
            cli.ranks.clone()
        } else if b == "mbw_mr" {
            vec![2 * cli.opts().pairs as u32]
        } else {
            vec![2]
        };
        // With references, the runs go in rounds: rsmpi's job, then each reference's,
        // then the next round. The machine's state can change within minutes
        // (docs/performance.md), and run one implementation after another, N jobs
        // each, one implementation could meet one state and the next another.
        let interleaved = compared && !refs.is_empty();
        let (rounds, each) = if interleaved {
            (
                cli.runs.max(1),
                Cli {
                    runs: 1,
                    ..cli.clone()
                },
            )
        } else {
            (1, cli.clone())
        };
        let measured = in_rounds(
            rounds,
            || rsmpi_rows(&each, b),
            |rows| {
                if !interleaved {
                    return;
                }
                for r in &refs {
                    for &n in &job_sizes {
                        match r.rows(b, n, cli.quick, cli.min_size, cli.max_for(b)) {
                            Ok(x) => rows.extend(x),
                            Err(e) => {
                                eprintln!("rsmpi-bench: {e}");
                                failed = true;
                            }
                        }
                    }
                }
            },
        );
        let mut rows = match measured {
            Ok(rows) if interleaved => report::median_of_runs(rows),
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("rsmpi-bench: {e}");
                failed = true;
                continue;
            }
        };
        if b == "limits" {
            // rsmpi's side of the ratios: from this run, or measured now
            let mut have = all_rows.clone();
            if !have.iter().any(|r| r.benchmark == "latency") {
                let q = Cli {
                    quick: true,
                    ..cli.clone()
                };
                have.extend(jobs(&q, "latency", 2, &[], 0, 8).unwrap_or_default());
            }
            if !have
                .iter()
                .any(|r| r.benchmark == "bw" && r.size == 4 << 20)
            {
                let q = Cli {
                    quick: true,
                    ..cli.clone()
                };
                have.extend(jobs(&q, "bw", 2, &[], 1 << 20, 4 << 20).unwrap_or_default());
                have.extend(jobs(&q, "bibw", 2, &[], 1 << 20, 4 << 20).unwrap_or_default());
            }
            have.extend(rows.iter().cloned());
            rows.extend(limits::ratios(&have));
        }
        if cli.compare && cli.transport == "verbs" && perftest::COMPARABLE.contains(&b) {
            let sizes = rank::sizes(cli.min_size, cli.max_for(b));
            // the reference is an outside tool: without it the table has rsmpi alone
            match perftest::rows(b, cli.quick, &sizes) {
                Ok(x) => rows.extend(x),
                Err(e) => eprintln!("rsmpi-bench: no perftest columns: {e}"),
            }
        }
        report::print_tables(&rows, &mut std::io::stdout()).expect("stdout");
        all_rows.extend(rows);
    }
    let line_after = limits::cacheline_pingpong().ok().map(|(us, _)| us);
    if let (Some(a), Some(b)) = (line_before, line_after) {
        println!("# cache-line one-way at end: {b:.3} us (at start: {a:.3} us)");
        if a.max(b) > 2.0 * a.min(b) {
            println!(
                "# WARNING: the machine changed state during the run (the cache-line figure \
                 moved {a:.3} -> {b:.3} us): figures measured at different times, and their \
                 ratios, may not be comparable; run again"
            );
        }
    }
    let retried = FAILURES.load(std::sync::atomic::Ordering::Relaxed);
    if retried > 0 {
        println!("# {retried} rsmpi job(s) failed and were run again: see stderr for the errors");
    }
    if let Some(p) = &cli.json {
        if let Err(e) = report::write_json(p, &all_rows) {
            eprintln!("rsmpi-bench: {}: {e}", p.display());
            failed = true;
        }
    }
    if let Some(p) = &cli.plot {
        if let Err(e) = plot::draw(p, &all_rows) {
            eprintln!("rsmpi-bench: plot {}: {e}", p.display());
            failed = true;
        }
    }
    i32::from(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn row(imp: &str, value: f64) -> Row {
        report::test_row(imp, 8, value, "us")
    }

    #[test]
    fn compared_runs_alternate_in_rounds() {
        let order = RefCell::new(Vec::new());
        let mut n = 0.0;
        let rows = in_rounds(
            3,
            || {
                order.borrow_mut().push("rsmpi");
                n += 1.0;
                Ok(vec![row("rsmpi", n)])
            },
            |rows| {
                order.borrow_mut().push("ref");
                rows.push(row("mpich", 10.0));
            },
        )
        .unwrap();
        assert_eq!(
            *order.borrow(),
            ["rsmpi", "ref", "rsmpi", "ref", "rsmpi", "ref"]
        );
        assert_eq!(rows.len(), 6);
        // each implementation's figure is the median of its rounds
        let m = report::median_of_runs(rows);
        let of = |imp: &str| m.iter().find(|r| r.implementation == imp).unwrap().value;
        assert_eq!((of("rsmpi"), of("mpich")), (2.0, 10.0));
    }

    #[test]
    fn a_failed_rsmpi_job_ends_the_rounds() {
        let mut calls = 0;
        let mut refs = 0;
        let r = in_rounds(
            4,
            || {
                calls += 1;
                if calls == 2 {
                    Err("the job failed".to_string())
                } else {
                    Ok(vec![row("rsmpi", 1.0)])
                }
            },
            |_| refs += 1,
        );
        assert_eq!(r.unwrap_err(), "the job failed");
        assert_eq!((calls, refs), (2, 1));
    }
}

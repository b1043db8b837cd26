//! `conformance`: runs every case of the suite as a job in every matching mode on every
//! transport and prints `conformance: N passed, M failed` per transport and mode, then
//! `N passed, M failed` overall; exits non-zero if anything failed.
//!
//! ```text
//! conformance [FILTER]            run the suite (cases whose name contains FILTER)
//! conformance --transport T [FILTER]
//!                                 the same with every job on transport T (verbs, ofi,
//!                                 shm; as CONFORMANCE_TRANSPORT=T)
//! conformance --list              list the cases
//! CONFORMANCE_MATCHING=M conformance ...
//!                                 the suite in matching mode M alone (both or
//!                                 receiver) rather than in each
//! conformance rank NAME           (internal) one rank of case NAME, under the launcher
//! conformance launch N SECS NAME  (internal) launch case NAME on N ranks, like rsmpirun
//! ```
#![forbid(unsafe_code)]

use conformance::{Ctx, Matching, TRANSPORTS};
use std::time::Instant;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--transport") {
        let Some(t) = args.get(1).cloned() else {
            eprintln!("conformance: --transport needs a value (verbs, ofi, shm)");
            std::process::exit(2);
        };
        // set before any thread exists; the jobs and their launchers inherit it
        std::env::set_var("CONFORMANCE_TRANSPORT", t);
        args.drain(..2);
    }
    let exe = std::env::current_exe().expect("current_exe");
    match args.first().map(String::as_str) {
        Some("rank") => {
            conformance::rank_main(&args[1]);
        }
        Some("soak-rank") => conformance::soak::rank_main(),
        Some("launch") => {
            let n = args[1].parse().expect("ranks");
            let secs = args[2].parse().expect("timeout");
            std::process::exit(conformance::launch_main(&exe, n, secs, &args[3]));
        }
        Some("--list") => {
            for c in conformance::all().iter().filter(|c| c.is_test()) {
                println!("{}", c.name);
            }
        }
        Some("-h" | "--help") => {
            println!("usage: conformance [--transport T] [FILTER] | --list");
        }
        filter => {
            // placed on hosts (CONFORMANCE_HOSTS) or on another transport
            // (CONFORMANCE_TRANSPORT), the job cases run there; the host cases (faults,
            // security, soak) inspect this node's shared memory and run without them,
            // except the soak and the rank-failure cases, which follow the transport
            let placed = conformance::hosts::from_env().is_some()
                || std::env::var_os("CONFORMANCE_LAUNCHER").is_some();
            let other_transport = std::env::var_os("CONFORMANCE_TRANSPORT").is_some();
            let cases: Vec<_> = conformance::all()
                .into_iter()
                .filter(|c| c.is_test() && filter.is_none_or(|f| c.name.contains(f)))
                .filter(|c| !placed || matches!(c.kind, conformance::Kind::Job { .. }))
                .filter(|c| !other_transport || c.follows_transport())
                // CONFORMANCE_JOBS_ONLY=1: the job cases alone (ci/guest-ofi-verbs.sh)
                .filter(|c| {
                    std::env::var_os("CONFORMANCE_JOBS_ONLY").is_none()
                        || matches!(c.kind, conformance::Kind::Job { .. })
                })
                .collect();
            // CONFORMANCE_MATCHING=both|receiver: that mode alone
            let only = std::env::var("CONFORMANCE_MATCHING").ok().map(|o| {
                Matching::ALL
                    .into_iter()
                    .find(|m| m.env() == o)
                    .unwrap_or_else(|| {
                        eprintln!(
                            "conformance: CONFORMANCE_MATCHING={o:?}: expected both or receiver"
                        );
                        std::process::exit(2)
                    })
            });
            let t0 = Instant::now();
            let (mut passed, mut failed) = (0, 0);
            let mut summary = Vec::new();
            let mut failures = Vec::new();
            for transport in TRANSPORTS {
                // the transport the jobs really use, for the report
                let label = match (
                    std::env::var("CONFORMANCE_TRANSPORT"),
                    conformance::hosts::from_env(),
                ) {
                    (Ok(t), None) => t,
                    (Ok(t), Some(_)) => format!("{t} across hosts"),
                    (Err(_), Some(_)) => "auto across hosts".to_string(),
                    (Err(_), None) => transport.to_string(),
                };
                for m in Matching::ALL
                    .into_iter()
                    .filter(|m| only.is_none_or(|o| o == *m))
                {
                    let ctx = Ctx {
                        exe: exe.clone(),
                        matching: m,
                        transport: transport.into(),
                    };
                    let (mut p, mut f) = (0, 0);
                    for c in &cases {
                        let t = Instant::now();
                        match conformance::run_case(&ctx, c) {
                            Ok(()) => {
                                p += 1;
                                println!(
                                    "ok     [{label} {}] {} ({:.2} s)",
                                    m.env(),
                                    c.name,
                                    t.elapsed().as_secs_f64()
                                );
                            }
                            Err(e) => {
                                f += 1;
                                println!("FAILED [{label} {}] {}: {e}", m.env(), c.name);
                                failures.push(format!("[{label} {}] {e}", m.env()));
                            }
                        }
                    }
                    summary.push(format!(
                        "conformance: {p} passed, {f} failed (transport {label}, matching {})",
                        m.env()
                    ));
                    passed += p;
                    failed += f;
                }
            }
            println!();
            for f in &failures {
                println!("failure: {f}");
            }
            for s in &summary {
                println!("{s}");
            }
            println!("(took {:.1} s)", t0.elapsed().as_secs_f64());
            println!("{passed} passed, {failed} failed");
            std::process::exit(i32::from(failed > 0));
        }
    }
}

//! `soak`: the long randomized soak.
//!
//! ```text
//! soak [--minutes N | --seconds N] [--ranks R] [--seed S] [--matching both|receiver|all]
//! ```
//!
//! Runs seeded random traffic between R ranks (default 4, 2..=8) for the given time
//! (default 1 minute) per matching mode (default: both modes, one after the other),
//! verifying every payload; prints the seed (random unless given) and exits non-zero
//! with the command that reproduces a failure.
#![forbid(unsafe_code)]

use conformance::soak::{self, Settings};
use conformance::Matching;
use std::time::Duration;

fn usage() -> ! {
    eprintln!("usage: soak [--minutes N | --seconds N] [--ranks R] [--seed S] [--matching both|receiver|all]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("soak-rank") {
        soak::rank_main();
        return;
    }
    let mut secs = 60.0f64;
    let mut ranks = 4u32;
    let mut seed = None;
    let mut modes = Matching::ALL.to_vec();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage()).clone();
        match a.as_str() {
            "--minutes" => secs = val().parse::<f64>().unwrap_or_else(|_| usage()) * 60.0,
            "--seconds" => secs = val().parse().unwrap_or_else(|_| usage()),
            "--ranks" => ranks = val().parse().unwrap_or_else(|_| usage()),
            "--seed" => seed = Some(val().parse().unwrap_or_else(|_| usage())),
            "--matching" => {
                modes = match val().as_str() {
                    "both" => vec![Matching::Both],
                    "receiver" => vec![Matching::Receiver],
                    "all" => Matching::ALL.to_vec(),
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    if !(2..=8).contains(&ranks) {
        eprintln!("soak: --ranks must be 2..=8");
        std::process::exit(2);
    }
    let seed = seed.unwrap_or_else(soak::fresh_seed);
    let exe = std::env::current_exe().expect("current_exe");
    let mut failed = false;
    for m in modes {
        let s = Settings {
            seed,
            ranks,
            duration: Duration::from_secs_f64(secs),
        };
        match soak::run(&exe, &s, m) {
            Ok(()) => println!(
                "soak: seed {seed} ranks {ranks} matching {}: passed",
                m.env()
            ),
            Err(e) => {
                println!("soak: {e}");
                failed = true;
            }
        }
    }
    std::process::exit(i32::from(failed));
}

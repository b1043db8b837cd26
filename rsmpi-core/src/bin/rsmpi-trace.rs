//! `rsmpi-trace DIR [OUT.json]`: converts the trace a job wrote with `RSMPI_TRACE=DIR`
//! to Chrome Trace Event JSON (default `DIR/trace.json`), which
//! <https://ui.perfetto.dev> opens: one track per rank, the flush pauses removed.
//! `rsmpi-trace --check DIR` only verifies the trace (every call left, every receive
//! paired with its send, the same flush epochs on every rank).
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use rsmpi::trace::{chrome, format};

/// Problems `--check` prints before it counts the rest.
const SHOWN: usize = 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (check_only, rest): (bool, Vec<&String>) = match args.first().map(String::as_str) {
        Some("--check") => (true, args[1..].iter().collect()),
        _ => (false, args.iter().collect()),
    };
    let Some(dir) = rest.first().map(PathBuf::from) else {
        eprintln!("usage: rsmpi-trace [--check] DIR [OUT.json]");
        return ExitCode::from(2);
    };
    let mut say = |m: &str| eprintln!("rsmpi-trace: {m}");
    if check_only {
        let traces = match format::read_dir(&dir, &mut |d, t| say(&chrome::read_line(d, t))) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("rsmpi-trace: {e}");
                return ExitCode::FAILURE;
            }
        };
        let bad = chrome::check(&traces);
        // a damaged trace (a rank that died) can fail every receive: the first few
        for b in bad.iter().take(SHOWN) {
            eprintln!("rsmpi-trace: {b}");
        }
        if bad.len() > SHOWN {
            eprintln!("rsmpi-trace: ... and {} more problems", bad.len() - SHOWN);
        }
        let lost = chrome::unreceived(&traces);
        if !lost.is_empty() {
            eprintln!(
                "rsmpi-trace: {} messages sent and never received",
                lost.len()
            );
        }
        return if bad.is_empty() {
            eprintln!("rsmpi-trace: {} ranks: trace is sound", traces.len());
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let out = rest
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join("trace.json"));
    let file = match std::fs::File::create(&out) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rsmpi-trace: {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    };
    let mut w = BufWriter::with_capacity(1 << 20, file);
    match chrome::convert(&dir, &mut w, &mut say) {
        Ok(_) => {
            eprintln!("rsmpi-trace: wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rsmpi-trace: {e}");
            ExitCode::FAILURE
        }
    }
}

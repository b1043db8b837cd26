//! `postloop N [ROUNDS]`: posts N receives from self on distinct tags that never
//! match, then cancels them, ROUNDS times (default 3); prints the posting time of each
//! round and the minor page faults taken while posting (`docs/performance.md`,
//! "Posting 4 096 receives: whose page faults"), and the size of one request.
use rsmpi::request;
use rsmpi::traits::*;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4096);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let universe = rsmpi::initialize().expect("init");
    let w = universe.world();
    let me = w.process_at_rank(w.rank());
    let mut idle = vec![0u8; 4 * n];
    println!(
        "a request: {} bytes",
        std::mem::size_of::<request::Request<'static, [u8], request::StaticScope>>()
    );
    for round in 0..rounds {
        request::scope(|sc| {
            let f0 = minor_faults();
            let t0 = Instant::now();
            let reqs: Vec<_> = idle
                .chunks_mut(4)
                .enumerate()
                .map(|(i, b)| me.immediate_receive_into_with_tag(sc, b, 10_000 + i as i32))
                .collect();
            let post = t0.elapsed().as_secs_f64() * 1e6;
            let faults = minor_faults() - f0;
            for r in &reqs {
                r.cancel();
            }
            for r in reqs {
                assert!(r.wait().is_cancelled());
            }
            println!(
                "round {round}: {n} posted in {post:.1} us ({:.3} us each), {faults} minor page faults",
                post / n as f64
            );
        });
    }
}

/// This process's minor page faults so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // the fields after the command name, which is in parentheses
    let after = stat.rsplit(')').next().unwrap_or("");
    after
        .split_whitespace()
        .nth(7)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

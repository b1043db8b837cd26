//! `postloop N`: posts N receives from self on distinct tags that never match, then
//! cancels them, twice; prints the posting time of each round.
use rsmpi::request;
use rsmpi::traits::*;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4096);
    let universe = rsmpi::initialize().expect("init");
    let w = universe.world();
    let me = w.process_at_rank(w.rank());
    let mut idle = vec![0u8; 4 * n];
    for round in 0..3 {
        request::scope(|sc| {
            let t0 = Instant::now();
            let reqs: Vec<_> = idle
                .chunks_mut(4)
                .enumerate()
                .map(|(i, b)| me.immediate_receive_into_with_tag(sc, b, 10_000 + i as i32))
                .collect();
            let post = t0.elapsed().as_secs_f64() * 1e6;
            for r in &reqs {
                r.cancel();
            }
            for r in reqs {
                assert!(r.wait().is_cancelled());
            }
            println!(
                "round {round}: {n} posted in {post:.1} us ({:.3} us each)",
                post / n as f64
            );
        });
    }
}

//! `depthloop N DEPTH`: the self loop of `selfloop.rs` (post a receive from self,
//! send to self, wait) with DEPTH receives that never match posted for the whole
//! run, as `rsmpi-bench queue-depth` posts them: for counting instructions per round
//! with callgrind (difference of two runs with different N), `docs/performance.md`.
use rsmpi::request;
use rsmpi::traits::*;
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let depth: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let universe = rsmpi::initialize().expect("singleton init");
    let world = universe.world();
    let me = world.this_process();
    let sbuf = [7u8; 8];
    let mut rbuf = [0u8; 8];
    let mut idle = vec![0u8; 4 * depth];
    request::scope(|outer| {
        let reqs: Vec<_> = idle
            .chunks_mut(4)
            .enumerate()
            .map(|(i, b)| me.immediate_receive_into_with_tag(outer, b, 10_000 + i as i32))
            .collect();
        for _ in 0..n {
            request::scope(|sc| {
                let r = me.immediate_receive_into_with_tag(sc, &mut rbuf[..], 1);
                me.send_with_tag(&sbuf[..], 1);
                r.wait();
            });
        }
        for r in &reqs {
            r.cancel();
        }
        for r in reqs {
            r.wait();
        }
    });
}

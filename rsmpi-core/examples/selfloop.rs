//! The per-message software path, for instruction counts: one rank posts a receive
//! from itself, sends to itself and waits, `N` times (`selfloop N`, default 1000). Run
//! as a singleton (no launcher) under `valgrind --tool=callgrind`; the difference of two
//! runs with different N divided by their difference is the cost of one round
//! (`benches/callgrind.sh` does that, next to the same loop in C on Open MPI and MPICH).
use rsmpi::request;
use rsmpi::traits::*;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let universe = rsmpi::initialize().expect("singleton init");
    let world = universe.world();
    let me = world.this_process();
    let sbuf = [7u8; 8];
    let mut rbuf = [0u8; 8];
    for _ in 0..n {
        request::scope(|sc| {
            let r = me.immediate_receive_into_with_tag(sc, &mut rbuf[..], 1);
            me.send_with_tag(&sbuf[..], 1);
            r.wait();
        });
    }
    assert_eq!(rbuf, sbuf);
}

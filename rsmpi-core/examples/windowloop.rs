//! `windowloop N`: N rounds of a 64-message window to self (receives posted first,
//! then the sends, then a wait on each), for counting instructions per message with
//! callgrind (difference of two runs).
use rsmpi::traits::*;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    let me = world.process_at_rank(world.rank());
    let sbuf = [7u8; 8];
    let mut rbufs = vec![[0u8; 8]; 64];
    for _ in 0..n {
        rsmpi::request::scope(|sc| {
            let mut reqs = Vec::with_capacity(128);
            for b in rbufs.iter_mut() {
                reqs.push(me.immediate_receive_into_with_tag(sc, &mut b[..], 100));
            }
            let mut sends = Vec::with_capacity(64);
            for _ in 0..64 {
                sends.push(me.immediate_send_with_tag(sc, &sbuf[..], 100));
            }
            for r in sends {
                r.wait();
            }
            for r in reqs {
                r.wait();
            }
        });
    }
}

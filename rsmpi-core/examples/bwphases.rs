//! `rsmpi-bench bw`'s loop (OSU's: the receiver posts a window of 64 receives and waits
//! on them, then sends a 4-byte ack; the sender sends the window, waits, and receives
//! the ack), timed in its three phases on each rank, over many windows
//! (`docs/performance.md`, "A window's waits in one visit"):
//!
//! * `start`: posting the window's 64 receives (rank 1) or starting its 64 sends
//!   (rank 0);
//! * `wait`: the window's `request::wait_all`;
//! * `ack`: the ack's send (rank 1) or receive (rank 0);
//!
//! each in nanoseconds per message, and the whole loop's. `bwphases N SIZE` runs `N`
//! windows of `SIZE`-byte messages (default 3000 and 8); `benches/reference/bwphases.c`
//! is the same loop in C, for Open MPI and MPICH:
//!
//! ```text
//! cargo build --release -p rsmpi --example bwphases -p rsmpirun --bin rsmpirun
//! target/release/rsmpirun -n 2 target/release/examples/bwphases 3000 8
//! mpicc.mpich -O2 -o /tmp/bwphases benches/reference/bwphases.c
//! mpiexec.mpich -n 2 /tmp/bwphases 3000 8
//! ```
use rsmpi::request;
use rsmpi::traits::*;
use std::time::{Duration, Instant};

const WINDOW: usize = 64;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    assert_eq!(world.size(), 2, "bwphases needs two ranks");
    let me = world.rank();
    let peer = world.process_at_rank(1 - me);
    let sbuf = vec![7u8; size];
    let mut rbufs = vec![0u8; size.max(1) * WINDOW];
    let mut ack = [0u8; 4];
    let (mut start, mut wait, mut acked) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    world.barrier();
    let t0 = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let mut posted = t;
        request::scope(|sc| {
            let mut reqs = Vec::with_capacity(WINDOW);
            if me == 1 {
                for b in rbufs.chunks_mut(size.max(1)).take(WINDOW) {
                    reqs.push(Some(peer.immediate_receive_into_with_tag(
                        sc,
                        &mut b[..size],
                        100,
                    )));
                }
            } else {
                for _ in 0..WINDOW {
                    reqs.push(Some(peer.immediate_send_with_tag(sc, &sbuf[..], 100)));
                }
            }
            posted = Instant::now();
            request::wait_all(&mut reqs);
        });
        let waited = Instant::now();
        if me == 1 {
            peer.send_with_tag(&ack[..], 101);
        } else {
            peer.receive_into_with_tag(&mut ack[..], 101);
        }
        start += posted - t;
        wait += waited - posted;
        acked += waited.elapsed();
    }
    let total = t0.elapsed();
    if me == 1 {
        let got = rbufs.chunks(size.max(1)).take(WINDOW);
        assert!(got.into_iter().all(|b| b[..size].iter().all(|&x| x == 7)));
    }
    let per = |d: Duration| d.as_nanos() as f64 / (n * WINDOW) as f64;
    println!(
        "rank {me} ({}): start {:.1} wait {:.1} ack {:.1} total {:.1} ns per message",
        if me == 1 { "receiver" } else { "sender" },
        per(start),
        per(wait),
        per(acked),
        per(total)
    );
}

//! `earlyloop SIZE ROUNDS`: the cost of messages that arrive before their receives.
//! In each round rank 0 sends 16 messages of SIZE bytes (immediate sends) and enters
//! a barrier; rank 1 enters it, sleeps 200 µs so that all 16 are there, and then
//! times taking them: a probe that finds nothing (the poll that queues the 16 as
//! unexpected, each eager payload copied into a buffer of the engine's) and 16
//! blocking receives (each copies its payload out). Prints the mean and median time
//! per message over the rounds after the first 10.
//!
//! ```sh
//! cargo build --release -p rsmpi --example earlyloop -p rsmpirun
//! target/release/rsmpirun -n 2 target/release/examples/earlyloop 16384 400
//! ```
use rsmpi::traits::*;
use std::time::{Duration, Instant};

const W: usize = 16;
const SKIP: usize = 10;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let size = args.next().flatten().unwrap_or(8192);
    let rounds = args.next().flatten().unwrap_or(200).max(SKIP + 1);
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    assert_eq!(world.size(), 2, "earlyloop runs on 2 ranks");
    let me = world.rank();
    let peer = world.process_at_rank(1 - me);
    let sbuf = vec![7u8; size];
    let mut rbuf = vec![0u8; size];
    let mut per_msg = Vec::new();
    for r in 0..rounds {
        if me == 0 {
            rsmpi::request::scope(|sc| {
                let sends: Vec<_> = (0..W)
                    .map(|_| peer.immediate_send_with_tag(sc, &sbuf[..], 5))
                    .collect();
                world.barrier();
                for s in sends {
                    s.wait();
                }
            });
        } else {
            world.barrier();
            std::thread::sleep(Duration::from_micros(200));
            let t0 = Instant::now();
            assert!(peer.immediate_probe_with_tag(99).is_none());
            for _ in 0..W {
                peer.receive_into_with_tag(&mut rbuf[..], 5);
            }
            let dt = t0.elapsed().as_secs_f64() * 1e6 / W as f64;
            assert!(rbuf.iter().all(|&b| b == 7), "payload corrupted");
            if r >= SKIP {
                per_msg.push(dt);
            }
        }
        world.barrier();
    }
    if me == 1 {
        let mean = per_msg.iter().sum::<f64>() / per_msg.len() as f64;
        per_msg.sort_by(f64::total_cmp);
        let median = per_msg[per_msg.len() / 2];
        println!("{size} B: {mean:.3} us/msg mean, {median:.3} median");
    }
}

//! Ping-pong between two ranks: one-way latency per message size, for the plain
//! pattern (the receive is posted after the reply, as osu_latency does) and the
//! pre-posted one (every receive of the loop posted before it starts, Fig. 9 of the
//! MPI-EMX paper, where each send becomes a direct write).
//!
//! `cargo run --release -p rsmpi --example pingpong` starts its own two ranks; under
//! `rsmpirun -n 2` it runs as it is. `--max-size BYTES` and `--iters N` tune it.

use rsmpi::request;
use rsmpi::traits::*;
use std::time::Instant;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    if std::env::var_os("RSMPI_RANK").is_none() {
        // started directly: launch a job of two ranks of ourselves
        let exe = std::env::current_exe().expect("own path");
        let mut job = launcher::Job::new(2, exe, std::env::args_os().skip(1));
        job.timeout = Some(std::time::Duration::from_secs(600));
        // each rank on CPUs of its own, as under rsmpirun
        job.bind = launcher::Bind::Block;
        if let Ok(t) = std::env::var("RSMPI_TRANSPORT") {
            job.transport = t;
        }
        std::process::exit(launcher::run(&job).expect("launch"));
    }
    let universe = rsmpi::initialize().expect("MPI init");
    let world = universe.world();
    assert_eq!(world.size(), 2, "pingpong needs exactly 2 ranks");
    let me = world.rank();
    let peer = world.process_at_rank(1 - me);
    let max = arg("--max-size", 1 << 20);
    let base_iters = arg("--iters", 10_000);
    if me == 0 {
        println!("# rsmpi pingpong, one-way latency (us), shared memory, 2 ranks");
        println!(
            "{:>10} {:>12} {:>12} {:>14}",
            "size", "plain", "pre-posted", "post cost/recv"
        );
    }
    let mut size = 0usize;
    while size <= max {
        let iters = if size > 65536 {
            (base_iters / 10).max(100)
        } else {
            base_iters
        };
        let warm = iters / 10;
        let sbuf = vec![me as u8; size];
        let mut rbuf = vec![0u8; size];
        // plain
        let mut t = 0.0;
        for i in 0..warm + iters {
            if i == warm {
                world.barrier();
                t = rsmpi::time();
            }
            if me == 0 {
                peer.send_with_tag(&sbuf[..], 1);
                peer.receive_into_with_tag(&mut rbuf[..], 1);
            } else {
                peer.receive_into_with_tag(&mut rbuf[..], 1);
                peer.send_with_tag(&sbuf[..], 1);
            }
        }
        let plain = (rsmpi::time() - t) / iters as f64 / 2.0 * 1e6;
        assert!(
            rbuf.iter().all(|&b| b == (1 - me) as u8),
            "payload corrupted"
        );
        // pre-posted: every receive of the loop posted up front, each into its own buffer
        let n = iters.min(if size > 4096 { 200 } else { 2000 });
        let mut bufs = vec![vec![0u8; size]; n];
        world.barrier();
        let (post, pre) = request::scope(|sc| {
            let t0 = Instant::now();
            let reqs: Vec<_> = bufs
                .iter_mut()
                .map(|b| peer.immediate_receive_into_with_tag(sc, &mut b[..], 2))
                .collect();
            let post = t0.elapsed().as_secs_f64() / n as f64 * 1e6;
            world.barrier();
            let t1 = rsmpi::time();
            for r in reqs {
                if me == 0 {
                    peer.send_with_tag(&sbuf[..], 2);
                    r.wait();
                } else {
                    r.wait();
                    peer.send_with_tag(&sbuf[..], 2);
                }
            }
            (post, (rsmpi::time() - t1) / n as f64 / 2.0 * 1e6)
        });
        assert!(
            bufs.iter().all(|b| b.iter().all(|&x| x == (1 - me) as u8)),
            "payload corrupted"
        );
        if me == 0 {
            println!("{size:>10} {plain:>12.3} {pre:>12.3} {post:>14.3}");
        }
        size = if size == 0 { 1 } else { size * 4 };
    }
    if me == 0 {
        println!("# paths taken by rank 0's sends: {}", universe.stats());
    }
}

//! One-way latency of small messages over the verbs transport's control channel alone
//! (no engine, no library above it), measured by ping-pong between two processes
//! (this binary re-executed as rank 0 and rank 1, rank r pinned to CPU r): the
//! transport's own floor, to set between `ib_write_lat` (the device's) and
//! `rsmpi-bench latency --transport verbs` (the whole library's), as
//! `transport-shm`'s `ring_pingpong` is for shared memory (`docs/performance.md`,
//! "RDMA verbs on SoftRoCE").
//!
//! ```text
//! cargo build --release -p rsmpi-transport-verbs --features ibverbs --example verbs_pingpong
//! target/release/examples/verbs_pingpong [ROUND_TRIPS] [RUNS] [--size=N]
//! ```
//!
//! Needs an RDMA device (the SoftRoCE guest: `ci/softroce-vm.sh`). Prints the median
//! over RUNS (default 5) of the time of ROUND_TRIPS (default 2 000) round trips
//! divided by twice their number, and the lowest run.

use std::process::Command;
use std::time::{Duration, Instant};

use transport::{Rank, Transport, TransportError};
use transport_shm::testing::{cleanup_job, new_job, FileExchange};
use transport_verbs::{VerbsConfig, VerbsTransport};

const ENV: &str = "RSMPI_VERBS_PINGPONG";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nums: Vec<u64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let size = args
        .iter()
        .find_map(|a| a.strip_prefix("--size="))
        .map_or(8, |n| n.parse::<usize>().expect("--size=N: bytes"));
    let iters = nums.first().copied().unwrap_or(2_000);
    let runs = nums.get(1).copied().unwrap_or(5) as usize;

    if let Ok(spec) = std::env::var(ENV) {
        // child: "rank dir job"
        let mut it = spec.splitn(3, ' ');
        let rank: Rank = it.next().unwrap().parse().unwrap();
        let dir = it.next().unwrap().to_owned();
        let job = it.next().unwrap().to_owned();
        let mut cpus = rustix::thread::CpuSet::new();
        cpus.set(rank as usize);
        // not pinned where the CPU is missing: still a valid (slower) figure
        let _ = rustix::thread::sched_setaffinity(None, &cpus);
        let mut ex = FileExchange::new(dir, rank, 2, job);
        let mut t = VerbsTransport::new(&mut ex, &VerbsConfig::from_env())
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let payload = vec![7u8; size];
        let mut times = Vec::with_capacity(runs);
        for _ in 0..=runs {
            let t0 = Instant::now();
            for _ in 0..iters {
                if rank == 0 {
                    send(&mut t, 1, &payload);
                    recv(&mut t, size);
                } else {
                    recv(&mut t, size);
                    send(&mut t, 0, &payload);
                }
            }
            times.push(t0.elapsed());
        }
        times.remove(0); // the first run warms up
        if rank == 0 {
            times.sort();
            let one_way = |d: Duration| d.as_secs_f64() * 1e6 / (2.0 * iters as f64);
            println!(
                "{size} B one-way: median {:.2} us, lowest {:.2} us ({runs} runs of {iters} round trips)",
                one_way(times[times.len() / 2]),
                one_way(times[0])
            );
        }
        // let the peer's last message settle before the queue pairs go
        std::thread::sleep(Duration::from_millis(200));
        return;
    }

    let (job, dir) = new_job("verbs_pingpong");
    let exe = std::env::current_exe().expect("current_exe");
    let mut kids: Vec<_> = (0..2)
        .map(|r| {
            Command::new(&exe)
                .args(&args)
                .env(ENV, format!("{r} {} {job}", dir.display()))
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    // every rank waited for, not only up to the first that failed
    let status: Vec<bool> = kids
        .iter_mut()
        .map(|k| k.wait().expect("wait rank").success())
        .collect();
    let ok = status.iter().all(|&s| s);
    cleanup_job(&job, &dir);
    assert!(ok, "a rank failed");
}

fn send(t: &mut VerbsTransport, peer: Rank, payload: &[u8]) {
    loop {
        match t.try_send(peer, &[], payload) {
            Ok(()) => return,
            Err(TransportError::Full(_)) => {
                t.poll(0, &mut |_, _| {}).expect("poll");
            }
            Err(e) => panic!("send to {peer}: {e}"),
        }
    }
}

fn recv(t: &mut VerbsTransport, size: usize) {
    let mut got = false;
    while !got {
        t.poll(1, &mut |_, m| {
            assert_eq!(m.len(), size, "message length");
            got = true;
        })
        .expect("poll");
    }
}

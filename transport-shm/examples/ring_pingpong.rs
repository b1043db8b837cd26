//! One-way latency of messages (8 bytes, or `--size=N`) over the shared-memory rings,
//! measured by ping-pong between two processes (this binary re-executed as rank 0 and
//! rank 1).
//!
//! ```text
//! cargo run --release -p rsmpi-transport-shm --example ring_pingpong -- [ROUND_TRIPS] [RUNS] [--no-pin] [--raw] [--size=N] [--window]
//! ```
//!
//! `--raw` additionally measures the floor under the same conditions: two threads
//! bouncing one cache-line-sized atomic counter (no ring, no transport).
//!
//! `--window` measures the rings' message rate instead: rank 0 sends windows of 64
//! messages, rank 1 answers each window with one (`rsmpi-bench bw`'s pattern with
//! nothing above the transport), and the median time per message is printed (here
//! 36 ns for 1 B in the near state, 44 ns for 64 B, 71 ns for 1 KiB:
//! `docs/performance.md`, "The rings' own message rate").
//!
//! Prints the median over RUNS (default 15) of the one-way latency, i.e. the time of
//! ROUND_TRIPS (default 20 000) round trips divided by twice their number. By default
//! rank r is pinned to CPU r.

use std::process::Command;
use std::time::{Duration, Instant};

use transport::{Rank, Transport};
use transport_shm::testing::{cleanup_job, new_job, FileExchange};
use transport_shm::ShmTransport;

const ENV: &str = "RSMPI_PINGPONG";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pin = !args.iter().any(|a| a == "--no-pin");
    let nums: Vec<u64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let size = args
        .iter()
        .find_map(|a| a.strip_prefix("--size="))
        .map_or(8, |n| n.parse::<usize>().expect("--size=N: bytes"));
    let iters = nums.first().copied().unwrap_or(20_000);
    let runs = nums.get(1).copied().unwrap_or(15) as usize;
    let allowed = rustix::thread::sched_getaffinity(None).expect("sched_getaffinity");

    if let Ok(spec) = std::env::var(ENV) {
        // Child: "rank dir job".
        let mut it = spec.splitn(3, ' ');
        let rank: Rank = it.next().unwrap().parse().unwrap();
        let dir = it.next().unwrap().to_owned();
        let job = it.next().unwrap().to_owned();
        if pin {
            pin_to(&allowed, rank as usize);
        }
        let mut t = ShmTransport::new(&mut FileExchange::new(dir, rank, 2, job)).unwrap();
        if args.iter().any(|a| a == "--window") {
            return windows(&mut t, iters, runs, size);
        }
        return ping_pong(&mut t, iters, runs, size);
    }

    if args.iter().any(|a| a == "--raw") {
        raw_ping_pong(iters, runs, pin.then_some(&allowed));
        // Undo the pinning, which the children would inherit.
        let _ = rustix::thread::sched_setaffinity(None, &allowed);
    }
    let (job, dir) = new_job("pingpong");
    let exe = std::env::current_exe().unwrap();
    let mut kids: Vec<_> = (0..2)
        .map(|r| {
            Command::new(&exe)
                .args(args.iter().filter(|a| *a != "--raw"))
                .env(ENV, format!("{r} {} {job}", dir.display()))
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let ok = kids
        .iter_mut()
        .all(|k| k.wait().map(|s| s.success()).unwrap_or(false));
    cleanup_job(&job, &dir);
    std::process::exit(if ok { 0 } else { 1 });
}

fn ping_pong(t: &mut ShmTransport, iters: u64, runs: usize, size: usize) {
    let me = t.rank();
    let peer = 1 - me;
    let msg = vec![0u8; size];
    let wait_one = |t: &mut ShmTransport| {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut spins = 0u32;
        loop {
            if t.poll(1, &mut |_, m| assert_eq!(m.len(), size)).unwrap() == 1 {
                return;
            }
            spins = spins.wrapping_add(1);
            if spins > 2_000 {
                // Probably sharing a core with the peer (or others): let it run.
                std::thread::yield_now();
                if spins % 1024 == 0 && Instant::now() > deadline {
                    panic!("rank {me}: peer stopped answering");
                }
            }
        }
    };
    let mut one_way = Vec::with_capacity(runs);
    // Run 0 is a warm-up (page faults, caches) and is not counted.
    for run in 0..=runs {
        let start = Instant::now();
        for _ in 0..iters {
            if me == 0 {
                t.try_send(peer, &[], &msg).unwrap();
                wait_one(t);
            } else {
                wait_one(t);
                t.try_send(peer, &[], &msg).unwrap();
            }
        }
        if run > 0 {
            one_way.push(start.elapsed().as_secs_f64() * 1e9 / (2 * iters) as f64);
        }
    }
    if me == 0 {
        one_way.sort_by(f64::total_cmp);
        let med = one_way[one_way.len() / 2];
        println!(
            "shm ping-pong, {size} B: one-way latency median {med:.1} ns over {runs} runs of {iters} round trips \
             (min {:.1} ns, max {:.1} ns)",
            one_way[0],
            one_way[one_way.len() - 1]
        );
    }
}

/// `--window`: message rate. Rank 0 sends windows of 64 messages of `size` bytes, each
/// answered by one 4-byte message from rank 1 once it has all 64 (`rsmpi-bench bw`'s
/// pattern, without MPI above the transport). Prints the median time per message.
fn windows(t: &mut ShmTransport, iters: u64, runs: usize, size: usize) {
    const WINDOW: usize = 64;
    let me = t.rank();
    let peer = 1 - me;
    let msg = vec![0u8; size];
    let mut per_msg = Vec::with_capacity(runs);
    let iters = (iters / 10).max(1);
    for run in 0..=runs {
        let start = Instant::now();
        for _ in 0..iters {
            if me == 0 {
                let mut sent = 0;
                while sent < WINDOW {
                    if t.try_send(peer, &[], &msg).is_ok() {
                        sent += 1;
                    } else {
                        t.poll(usize::MAX, &mut |_, _| {}).unwrap();
                    }
                }
                while t.poll(1, &mut |_, m| assert_eq!(m.len(), 4)).unwrap() == 0 {}
            } else {
                let mut got = 0;
                while got < WINDOW {
                    got += t
                        .poll(WINDOW - got, &mut |_, m| assert_eq!(m.len(), size))
                        .unwrap();
                }
                while t.try_send(peer, &[], &[0u8; 4]).is_err() {}
            }
        }
        if run > 0 {
            per_msg.push(start.elapsed().as_secs_f64() * 1e9 / (iters as usize * WINDOW) as f64);
        }
    }
    if me == 0 {
        per_msg.sort_by(f64::total_cmp);
        println!(
            "shm windows of 64, {size} B: {:.1} ns per message (median of {runs} runs; min {:.1}, max {:.1})",
            per_msg[per_msg.len() / 2],
            per_msg[0],
            per_msg[per_msg.len() - 1]
        );
    }
}

/// Pins the calling thread to the `i`-th CPU this process started with.
fn pin_to(allowed: &rustix::thread::CpuSet, i: usize) {
    let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect();
    if cpus.is_empty() {
        return;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpus[i % cpus.len()]);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// The hardware floor: one 8-byte counter on its own cache line, bounced between two
/// threads (each waits for the other's value, then writes the next one).
fn raw_ping_pong(iters: u64, runs: usize, pin: Option<&rustix::thread::CpuSet>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let line = crossbeam_utils::CachePadded::new(AtomicU64::new(0));
    let mut one_way = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(allowed) = pin {
                pin_to(allowed, 1);
            }
            for i in 0..(runs as u64 + 1) * iters {
                let mut spins = 0u32;
                while line.load(Ordering::Acquire) != 2 * i + 1 {
                    spins += 1;
                    if spins > 2_000 {
                        std::thread::yield_now();
                    }
                }
                line.store(2 * i + 2, Ordering::Release);
            }
        });
        if let Some(allowed) = pin {
            pin_to(allowed, 0);
        }
        for run in 0..=runs as u64 {
            let start = Instant::now();
            for j in 0..iters {
                let i = run * iters + j;
                line.store(2 * i + 1, Ordering::Release);
                let mut spins = 0u32;
                while line.load(Ordering::Acquire) != 2 * i + 2 {
                    spins += 1;
                    if spins > 2_000 {
                        std::thread::yield_now();
                    }
                }
            }
            if run > 0 {
                one_way.push(start.elapsed().as_secs_f64() * 1e9 / (2 * iters) as f64);
            }
        }
    });
    one_way.sort_by(f64::total_cmp);
    println!(
        "raw cache-line ping-pong: one-way latency median {:.1} ns over {runs} runs (min {:.1} ns)",
        one_way[one_way.len() / 2],
        one_way[0]
    );
}

//! One-way latency of messages (8 bytes, or `--size=N`) over the shared-memory rings,
//! measured by ping-pong between two processes (this binary re-executed as rank 0 and
//! rank 1). The receiver reads only the message's length, unless `--copy` is given:
//! then it copies each message out of the ring once the whole of it is there (the
//! library copies a streamed record of 8 KiB or more fragment by fragment as it lands,
//! so its own 8–64 KiB figures are lower).
//!
//! ```text
//! cargo run --release -p rsmpi-transport-shm --example ring_pingpong -- [ROUND_TRIPS] [RUNS] [--no-pin] [--raw] [--size=N] [--window] [--copy] [--cma]
//! ```
//!
//! `--raw` additionally measures the floor under the same conditions: two threads
//! bouncing one cache-line-sized atomic counter (no ring, no transport).
//!
//! `--cma` measures a single copy instead, the floor of a rendezvous: each message is
//! an 8-byte record naming nothing (the sender's buffer was exposed once, before the
//! loop), the receiver reads the `--size` bytes with the transport's `get`
//! (`process_vm_readv`: `RSMPI_SHM_READ=cma` is set for both ranks) and answers with
//! an 8-byte record, and only then does the sender go on. Run next to the plain mode,
//! it shows in which state of the machine one copy beats the ring's two for 16–64 KiB
//! (docs/performance.md, "16–64 KiB in the machine's two states").
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
        if args.iter().any(|a| a == "--cma") {
            return single_copy(&mut t, iters, runs, size);
        }
        let copy = args.iter().any(|a| a == "--copy");
        return ping_pong(&mut t, iters, runs, size, copy);
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
                .envs(
                    args.iter()
                        .any(|a| a == "--cma")
                        .then_some((transport_shm::ENV_READ, "cma")),
                )
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

fn ping_pong(t: &mut ShmTransport, iters: u64, runs: usize, size: usize, copy: bool) {
    let me = t.rank();
    let peer = 1 - me;
    let msg = vec![me as u8 + 1; size];
    let mut dst = vec![0u8; size];
    // `--copy`: the receiver copies each message out, as the library does (but whole)
    let wait_one = |t: &mut ShmTransport, dst: &mut [u8]| {
        wait_for(t, &mut |m| match copy {
            true => dst.copy_from_slice(m),
            false => assert_eq!(m.len(), size),
        })
    };
    let one_way = one_way_times(iters, runs, || {
        if me == 0 {
            t.try_send(peer, &[], &msg).unwrap();
            wait_one(t, &mut dst);
        } else {
            wait_one(t, &mut dst);
            t.try_send(peer, &[], &msg).unwrap();
        }
    });
    assert!(
        !copy || dst.iter().all(|&b| b == peer as u8 + 1),
        "payload corrupted"
    );
    if me == 0 {
        print_median(&format!("shm ping-pong, {size} B"), &one_way, iters);
    }
}

/// Times `runs` runs of `iters` round trips of `round`, after one run not counted (a
/// warm-up: page faults, caches): the one-way time of each run in ns, sorted.
fn one_way_times(iters: u64, runs: usize, mut round: impl FnMut()) -> Vec<f64> {
    let mut one_way = Vec::with_capacity(runs);
    for run in 0..=runs {
        let start = Instant::now();
        for _ in 0..iters {
            round();
        }
        if run > 0 {
            one_way.push(start.elapsed().as_secs_f64() * 1e9 / (2 * iters) as f64);
        }
    }
    one_way.sort_by(f64::total_cmp);
    one_way
}

/// Prints the median, least and most of the sorted one-way times `one_way`.
fn print_median(what: &str, one_way: &[f64], iters: u64) {
    println!(
        "{what}: one-way latency median {:.1} ns over {} runs of {iters} round trips \
         (min {:.1} ns, max {:.1} ns)",
        one_way[one_way.len() / 2],
        one_way.len(),
        one_way[0],
        one_way[one_way.len() - 1]
    );
}

/// Polls until one message has come, handing it to `f`; yields the CPU after a while
/// (probably sharing a core with the peer, or others: let it run) and panics after
/// 30 s.
fn wait_for(t: &mut ShmTransport, f: &mut dyn FnMut(&[u8])) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut spins = 0u32;
    while t.poll(1, &mut |_, m| f(m)).unwrap() == 0 {
        spins = spins.wrapping_add(1);
        if spins > 2_000 {
            std::thread::yield_now();
            if spins % 1024 == 0 && Instant::now() > deadline {
                panic!("rank {}: peer stopped answering", t.rank());
            }
        }
    }
}

/// `--cma`: a ping-pong of single copies. The sender sends an 8-byte record and waits
/// for the 8-byte answer that its buffer has been read; the receiver reads the buffer
/// (exposed once, before the loop) with `get`, then answers. Prints the median
/// one-way time, as [`ping_pong`] does.
fn single_copy(t: &mut ShmTransport, iters: u64, runs: usize, size: usize) {
    let me = t.rank();
    let peer = 1 - me;
    let src = vec![me as u8 + 1; size];
    let mut dst = vec![0u8; size];
    let mine = t.expose(src.as_ptr() as usize, size).unwrap();
    let desc: Vec<u8> = [mine.addr, mine.len, mine.key]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    while t.try_send(peer, &[], &desc).is_err() {}
    let mut theirs = None;
    while theirs.is_none() {
        t.poll(1, &mut |_, m| {
            let w = |i: usize| u64::from_le_bytes(m[8 * i..8 * i + 8].try_into().unwrap());
            theirs = Some(transport::RemoteBuf {
                addr: w(0),
                len: w(1),
                key: w(2),
            });
        })
        .unwrap();
    }
    let theirs = theirs.unwrap();
    let read = |t: &mut ShmTransport, dst: &mut [u8]| {
        wait_for(t, &mut |m| assert_eq!(m.len(), 8));
        match t.get(peer, dst, theirs, 0, 0).unwrap() {
            transport::Posted::Done => {}
            transport::Posted::Pending => {
                let mut done = false;
                while !done {
                    t.poll_done(&mut |_, r| {
                        r.unwrap();
                        done = true;
                    })
                    .unwrap();
                }
            }
        }
        while t.try_send(peer, &[], &[0u8; 8]).is_err() {}
    };
    let send = |t: &mut ShmTransport| {
        while t.try_send(peer, &[], &[0u8; 8]).is_err() {}
        wait_for(t, &mut |m| assert_eq!(m.len(), 8));
    };
    let one_way = one_way_times(iters, runs, || {
        if me == 0 {
            send(t);
            read(t, &mut dst);
        } else {
            read(t, &mut dst);
            send(t);
        }
    });
    assert!(
        dst.iter().all(|&b| b == peer as u8 + 1),
        "payload corrupted"
    );
    if me == 0 {
        let what = format!("shm single copies (process_vm_readv), {size} B");
        print_median(&what, &one_way, iters);
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

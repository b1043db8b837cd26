//! The message-rate loop of `rsmpi-bench bw`, cut so that each side's instructions per
//! message can be counted apart (`docs/performance.md`, "The message rate's two
//! sides"). Rank 1 posts a window of 64 receives, tells rank 0, naps so that all 64
//! messages arrive, and waits on them with one `request::wait_all`; rank 0 waits for the
//! word, then sends the window (64 immediate sends of `SIZE` bytes, then one
//! `request::wait_all`), as `rsmpi-bench bw` and OSU's loop (`MPI_Waitall`) do.
//!
//! * `bwloop N [SIZE]`: `N` windows, for callgrind: collect in `*bwloop*send_window*` on
//!   rank 0 and in `*bwloop*recv_window*` on rank 1 (difference of two runs).
//! * `bwloop N SIZE timed`: no nap (the receiver polls while the sender sends); rank 0
//!   prints the time its sends take per message and its peak resident memory, rank 1
//!   the time its waits take per message (`benches/reference/bwloop.c` takes the
//!   same arguments).
use rsmpi::request;
use rsmpi::traits::*;
use std::time::{Duration, Instant};

const NAP: Duration = Duration::from_millis(5);
const WINDOW: usize = 64;

/// Rank 0's side: one window of sends, waited for together.
#[inline(never)]
fn send_window(peer: &rsmpi::topology::Process<'_>, sbuf: &[u8]) {
    request::scope(|sc| {
        let mut reqs = Vec::with_capacity(WINDOW);
        for _ in 0..WINDOW {
            reqs.push(Some(peer.immediate_send_with_tag(sc, sbuf, 100)));
        }
        request::wait_all(&mut reqs);
    });
}

/// Rank 1's side: posts the window, tells rank 0, naps (unless `timed`), completes
/// the window; returns the time its waits took (when `timed`).
#[inline(never)]
fn recv_window(
    peer: &rsmpi::topology::Process<'_>,
    rbufs: &mut [u8],
    size: usize,
    timed: bool,
) -> Duration {
    request::scope(|sc| {
        let mut reqs = Vec::with_capacity(WINDOW);
        for b in rbufs.chunks_mut(size.max(1)).take(WINDOW) {
            reqs.push(Some(peer.immediate_receive_into_with_tag(
                sc,
                &mut b[..size],
                100,
            )));
        }
        peer.send_with_tag(&[0u8; 4][..], 101);
        if !timed {
            std::thread::sleep(NAP);
        }
        // the clock only when timed: the callgrind runs count this function
        let t = timed.then(Instant::now);
        request::wait_all(&mut reqs);
        t.map_or(Duration::ZERO, |t| t.elapsed())
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let timed = args.next().as_deref() == Some("timed");
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    assert_eq!(world.size(), 2, "bwloop needs two ranks");
    let peer = world.process_at_rank(1 - world.rank());
    let sbuf = vec![7u8; size];
    let mut rbufs = vec![0u8; size.max(1) * WINDOW];
    let mut word = [0u8; 4];
    let mut spent = Duration::ZERO;
    for _ in 0..n {
        if world.rank() == 0 {
            peer.receive_into_with_tag(&mut word[..], 101);
            let t = Instant::now();
            send_window(&peer, &sbuf);
            spent += t.elapsed();
        } else {
            spent += recv_window(&peer, &mut rbufs, size, timed);
        }
    }
    if world.rank() == 1 {
        let got = rbufs.chunks(size.max(1)).take(WINDOW);
        assert!(got.into_iter().all(|b| b[..size].iter().all(|&x| x == 7)));
        if timed {
            println!(
                "waits: {:.1} ns per message",
                spent.as_nanos() as f64 / (n * WINDOW) as f64
            );
        }
    }
    if world.rank() == 0 && timed {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let peak = status
            .lines()
            .find(|l| l.starts_with("VmHWM"))
            .unwrap_or("");
        println!(
            "sends: {:.1} ns per message; {}",
            spent.as_nanos() as f64 / (n * WINDOW) as f64,
            peak.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
}

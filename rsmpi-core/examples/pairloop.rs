//! The per-message software path between two ranks, for instruction counts: rank 0
//! posts a receive from rank 1, sends 8 bytes to it, sleeps long enough for the reply
//! to arrive, then waits for it, `N` times (`pairloop N`, default 1000); rank 1 answers
//! each message. Sleeping before the wait means rank 0 never spins, so the
//! instructions it executes per round are one pre-posted receive, one send and one
//! completion — nothing that depends on timing. `pairloop N sleep` runs the loop with
//! the sleeps only (no MPI calls), to subtract their cost. `benches/callgrind.sh` runs
//! rank 0 under callgrind, next to the same loop in C on Open MPI and MPICH.
use rsmpi::request;
use rsmpi::traits::*;
use std::time::Duration;

/// Long enough for an answer from an unmeasured rank while rank 0 runs under valgrind.
const NAP: Duration = Duration::from_millis(5);

/// The sleeps alone (`--toggle-collect='*pairloop*naps*'`).
#[inline(never)]
fn naps(n: usize) {
    (0..n).for_each(|_| std::thread::sleep(NAP));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    if args.next().as_deref() == Some("sleep") {
        naps(n);
        return;
    }
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    assert_eq!(world.size(), 2, "pairloop needs two ranks");
    let peer = world.process_at_rank(1 - world.rank());
    let rbuf = rounds(world.rank(), &peer, n);
    assert_eq!(rbuf, [7u8; 8]);
}

/// The measured loop (`callgrind --toggle-collect='*pairloop*rounds*'`).
#[inline(never)]
fn rounds(rank: i32, peer: &rsmpi::topology::Process<'_>, n: usize) -> [u8; 8] {
    let sbuf = [7u8; 8];
    let mut rbuf = [0u8; 8];
    for _ in 0..n {
        if rank == 0 {
            request::scope(|sc| {
                let r = peer.immediate_receive_into_with_tag(sc, &mut rbuf[..], 1);
                peer.send_with_tag(&sbuf[..], 1);
                std::thread::sleep(NAP);
                r.wait();
            });
        } else {
            peer.receive_into_with_tag(&mut rbuf[..], 1);
            peer.send_with_tag(&sbuf[..], 1);
        }
    }
    rbuf
}

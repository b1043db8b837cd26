//! The path from a message's arrival to the answer, for instruction counts: rank 1
//! naps until rank 0's 8-byte message is there, then receives it and sends 8 bytes
//! back with the blocking calls (`answer`), `N` times (`answerloop N`, default 1000);
//! rank 0 sends and waits for each answer. This is what each rank of `rsmpi-bench
//! latency` runs between a message and its reply, plus posting the receive (which a
//! waiting rank does before the message comes). Napping first means rank 1 never
//! spins: a round is one receive that finds its message and one send.
//! `benches/callgrind.sh` runs rank 1 under callgrind (collecting in
//! `answerloop::answer`), next to the same loop in C on Open MPI and MPICH.
use rsmpi::traits::*;
use std::time::Duration;

/// Long enough for rank 0's next message to be there while rank 1 runs under valgrind.
const NAP: Duration = Duration::from_millis(2);

/// The measured call pair (`callgrind --toggle-collect=answerloop::answer`).
#[inline(never)]
fn answer(peer: &rsmpi::topology::Process<'_>, rbuf: &mut [u8; 8], sbuf: &[u8; 8]) {
    peer.receive_into_with_tag(&mut rbuf[..], 1);
    peer.send_with_tag(&sbuf[..], 1);
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    assert_eq!(world.size(), 2, "answerloop needs two ranks");
    let peer = world.process_at_rank(1 - world.rank());
    let sbuf = [7u8; 8];
    let mut rbuf = [0u8; 8];
    for _ in 0..n {
        if world.rank() == 0 {
            peer.send_with_tag(&sbuf[..], 1);
            peer.receive_into_with_tag(&mut rbuf[..], 1);
        } else {
            std::thread::sleep(NAP);
            answer(&peer, &mut rbuf, &sbuf);
        }
    }
    assert_eq!(rbuf, sbuf);
}

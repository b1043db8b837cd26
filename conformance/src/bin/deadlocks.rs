//! `deadlocks CASE`: programs for the deadlock detector's tests (`tests/deadlocks.rs`),
//! run under `RSMPI_CHECK=deadlock`.
//!
//! * `recv-recv` (2 ranks): each rank receives from the other first: a deadlock,
//!   0 → 1 → 0.
//! * `ring` (3 ranks): each rank receives from its left neighbour first: 0 → 2 → 1 → 0.
//! * `send-send` (2 ranks): each rank sends to the other, then receives. Fine when
//!   MPI buffers the small sends; a deadlock when sends are synchronous
//!   (`RSMPI_CHECK_SYNC=1`): a potential deadlock.
//! * `ordered` (2 ranks): rank 0 sends then receives, rank 1 the other way round: fine.
//! * `barrier-recv` (2 ranks): rank 0 enters a barrier, rank 1 first receives from
//!   rank 0: a deadlock through a collective, 0 → 1 → 0 in `MPI_Barrier` and
//!   `MPI_Recv`.
//! * `any-all` (3 ranks): every rank first receives from any source: a deadlock of
//!   all three, each waiting for any rank (a knot, not a cycle).
//! * `any-mixed` (3 ranks): rank 0 receives from any source, ranks 1 and 2 from
//!   rank 0: a knot.
//! * `any-late` (3 ranks): rank 0 receives twice from any source while ranks 1 and 2
//!   compute for 1.5 s before they send: no deadlock.
//! * `late` (2 ranks): rank 1 computes for 3 s before it sends; rank 0 waits in its
//!   receive: no deadlock, a hang report.
//! * `waitany` (3 ranks): rank 0 waits in `wait_any` for receives from ranks 1 and 2,
//!   rank 1 receives from rank 0, rank 2 waits in `wait_some` for receives from ranks
//!   0 and 1: a knot.
//! * `waitany-late` (3 ranks): rank 0 waits in `wait_any` for receives from ranks 1
//!   and 2, which compute for 1.5 s before they send: no deadlock.
//! * `probe-probe` (2 ranks): each rank probes for the other's message before it
//!   sends: the cycle 0 → 1 → 0 in `MPI_Probe`.
//! * `probe-any` (2 ranks): rank 0 probes for a message from any rank, rank 1
//!   receives from rank 0: a knot.
//! * `ibarrier-recv` (2 ranks): rank 0 starts a nonblocking barrier and waits for it,
//!   rank 1 first receives from rank 0: 0 → 1 → 0 in `MPI_Wait` and `MPI_Recv`.
//! * `iallreduce-any` (3 ranks): rank 0 waits in `wait_any` for two nonblocking
//!   allreduces (on the world and on a duplicate), ranks 1 and 2 first receive from
//!   rank 0: a knot, rank 0 waiting for any of ranks 1 and 2.
//!
//! The helpers are `#[track_caller]`, so that reports name the lines of the cases.
#![forbid(unsafe_code)]

use rsmpi::collective::SystemOperation;
use rsmpi::request;
use rsmpi::traits::*;
use rsmpi::Rank;

#[track_caller]
fn recv(w: &impl Communicator, from: Rank) -> u64 {
    let (v, _) = w.process_at_rank(from).receive_with_tag::<u64>(1);
    v
}

#[track_caller]
fn recv_any(w: &impl Communicator) -> u64 {
    let (v, _) = w.any_process().receive_with_tag::<u64>(1);
    v
}

#[track_caller]
fn send(w: &impl Communicator, to: Rank) {
    w.process_at_rank(to).send_with_tag(&(w.rank() as u64), 1);
}

fn main() {
    let case = std::env::args().nth(1).expect("CASE");
    let universe = rsmpi::initialize().expect("init");
    let w = universe.world();
    let (me, n) = (w.rank(), w.size());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    match case.as_str() {
        "recv-recv" | "ring" => {
            recv(&w, left);
            send(&w, right);
        }
        "send-send" => {
            send(&w, right);
            assert_eq!(recv(&w, left), left as u64);
        }
        "any-all" => {
            recv_any(&w);
            send(&w, right);
        }
        "any-mixed" => {
            if me == 0 {
                recv_any(&w);
            } else {
                recv(&w, 0);
            }
        }
        "any-late" => {
            if me == 0 {
                let (a, b) = (recv_any(&w), recv_any(&w));
                assert_eq!(a + b, 3);
            } else {
                std::thread::sleep(std::time::Duration::from_millis(1500));
                send(&w, 0);
            }
        }
        "barrier-recv" => {
            if me == 0 {
                w.barrier();
                send(&w, 1);
            } else {
                recv(&w, 0);
                w.barrier();
            }
        }
        "ordered" => {
            if me == 0 {
                send(&w, 1);
                recv(&w, 1);
            } else {
                recv(&w, 0);
                send(&w, 0);
            }
        }
        "late" => {
            if me == 0 {
                recv(&w, 1);
            } else {
                std::thread::sleep(std::time::Duration::from_secs(3));
                send(&w, 0);
            }
        }
        "waitany" | "waitany-late" => {
            let (mut a, mut b) = (0u64, 0u64);
            if me == 0 {
                request::scope(|sc| {
                    let mut reqs = vec![
                        w.process_at_rank(1)
                            .immediate_receive_into_with_tag(sc, &mut a, 1),
                        w.process_at_rank(2)
                            .immediate_receive_into_with_tag(sc, &mut b, 1),
                    ];
                    while request::wait_any(&mut reqs).is_some() {}
                });
                assert_eq!((a, b), (1, 2));
            } else if case == "waitany-late" {
                std::thread::sleep(std::time::Duration::from_millis(1500));
                send(&w, 0);
            } else if me == 1 {
                recv(&w, 0);
            } else {
                request::scope(|sc| {
                    let mut reqs = [
                        Some(
                            w.process_at_rank(0)
                                .immediate_receive_into_with_tag(sc, &mut a, 1),
                        ),
                        Some(
                            w.process_at_rank(1)
                                .immediate_receive_into_with_tag(sc, &mut b, 1),
                        ),
                    ];
                    request::wait_some(&mut reqs);
                });
            }
        }
        "probe-probe" => {
            w.process_at_rank(left).probe_with_tag(1);
            send(&w, right);
            recv(&w, left);
        }
        "probe-any" => {
            if me == 0 {
                w.any_process().probe_with_tag(1);
            } else {
                recv(&w, 0);
            }
        }
        "ibarrier-recv" => {
            if me == 0 {
                let r = w.immediate_barrier();
                r.wait();
                send(&w, 1);
            } else {
                recv(&w, 0);
                w.barrier();
            }
        }
        "iallreduce-any" => {
            let dup = w.duplicate();
            let (mut a, mut b, mine) = (0u64, 0u64, 1u64);
            if me == 0 {
                request::scope(|sc| {
                    let mut reqs = vec![
                        w.immediate_all_reduce_into(sc, &mine, &mut a, SystemOperation::sum()),
                        dup.immediate_all_reduce_into(sc, &mine, &mut b, SystemOperation::sum()),
                    ];
                    while request::wait_any(&mut reqs).is_some() {}
                });
                send(&w, 1);
                send(&w, 2);
            } else {
                recv(&w, 0);
                w.all_reduce_into(&1u64, &mut a, SystemOperation::sum());
                dup.all_reduce_into(&1u64, &mut b, SystemOperation::sum());
            }
        }
        c => panic!("unknown case {c}"),
    }
    w.barrier();
}

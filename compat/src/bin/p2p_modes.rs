//! The four MPI send modes: standard, synchronous, buffered (with an attached buffer) and
//! ready (unsafe in mpi 0.8: the receive must already be posted), blocking and immediate.

use std::thread;
use std::time::Duration;

use mpi::request::{scope, WaitGuard};
use mpi::traits::*;

const N: usize = 10_000; // 80 KB of f64: above any eager limit

fn payload(from: i32, to: i32) -> Vec<f64> {
    (0..N)
        .map(|i| from as f64 * 1e6 + to as f64 * 1e3 + i as f64)
        .collect()
}

fn main() {
    let mut universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);

    // --- buffered: every rank bsends a large message to every other rank, then receives.
    // Without the attached buffer this pattern could deadlock; with it, it must not.
    assert_eq!(universe.buffer_size(), 0);
    let per_msg = N * std::mem::size_of::<f64>() + 4096;
    universe.set_buffer_size(2 * per_msg * size as usize);
    assert_eq!(universe.buffer_size(), 2 * per_msg * size as usize);
    for r in 0..size {
        if r != rank {
            world
                .process_at_rank(r)
                .buffered_send_with_tag(&payload(rank, r)[..], 11);
        }
    }
    for r in 0..size {
        if r != rank {
            let (v, st) = world.process_at_rank(r).receive_vec_with_tag::<f64>(11);
            assert_eq!(st.tag(), 11);
            assert_eq!(v, payload(r, rank));
        }
    }
    // Default-tag form and the immediate form, to the next rank.
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);
    let small = [rank; 4];
    next.buffered_send(&small);
    let mut got = [0i32; 4];
    prev.receive_into(&mut got);
    assert_eq!(got, [prev.rank(); 4]);
    scope(|sc| {
        let r = next.immediate_buffered_send_with_tag(sc, &small, 12);
        // a buffered send completes locally, whatever the receiver does
        r.wait();
    });
    let (v, st) = prev.receive_vec_with_tag::<i32>(12);
    assert_eq!((v, st.tag()), (vec![prev.rank(); 4], 12));
    // detaching waits for the buffered messages to be delivered
    universe.detach_buffer();
    assert_eq!(universe.buffer_size(), 0);

    // --- synchronous: cannot complete before the receive is matched. Rank 1 only posts
    // its receive after rank 0 tells it to, so rank 0's issend must still be pending.
    if rank == 0 {
        let data = payload(0, 1);
        let one = world.process_at_rank(1);
        scope(|sc| {
            let mut req = one.immediate_synchronous_send_with_tag(sc, &data[..], 21);
            for _ in 0..5 {
                thread::sleep(Duration::from_millis(10));
                req = match req.test() {
                    Ok(_) => panic!("synchronous send completed before its receive was posted"),
                    Err(req) => req,
                };
            }
            one.send_with_tag(&1u8, 22); // "go"
            req.wait();
        });
        one.synchronous_send(&[3.0f64, 4.0][..]);
        one.synchronous_send_with_tag(&7i16, 23);
    } else if rank == 1 {
        let zero = world.process_at_rank(0);
        let (go, _) = zero.receive_with_tag::<u8>(22);
        assert_eq!(go, 1);
        let (v, st) = zero.receive_vec_with_tag::<f64>(21);
        assert_eq!(st.tag(), 21);
        assert_eq!(v, payload(0, 1));
        let (v, st) = zero.receive_vec::<f64>();
        assert_eq!((v, st.tag()), (vec![3.0, 4.0], 0));
        let (x, st) = zero.receive::<i16>();
        assert_eq!((x, st.tag()), (7, 23));
    }

    // --- ready: rank 0 pre-posts one receive per other rank; the barrier guarantees they
    // are posted before anyone ready-sends.
    let mut slots = vec![[0i64; 3]; size as usize];
    scope(|sc| {
        let mut guards = Vec::new();
        if rank == 0 {
            for (r, slot) in slots.iter_mut().enumerate().skip(1) {
                let req = world
                    .process_at_rank(r as i32)
                    .immediate_receive_into_with_tag(sc, slot, 31);
                guards.push(WaitGuard::from(req));
            }
        }
        world.barrier();
        if rank != 0 {
            let msg = [rank as i64, -(rank as i64), 99];
            unsafe {
                world.process_at_rank(0).ready_send_with_tag(&msg, 31);
            }
        }
        drop(guards); // waits for every receive
    });
    if rank == 0 {
        for (r, slot) in slots.iter().enumerate().skip(1) {
            assert_eq!(*slot, [r as i64, -(r as i64), 99]);
        }
    }

    // ready_send with the default tag, and the immediate ready send, rank 1 -> rank 0
    let mut a = 0u32;
    let mut b = [0u32; 2];
    let vals = [5u32, 6];
    scope(|sc| {
        let reqs = if rank == 0 {
            let one = world.process_at_rank(1);
            Some((
                one.immediate_receive_into_with_tag(sc, &mut a, 0),
                one.immediate_receive_into_with_tag(sc, &mut b, 32),
            ))
        } else {
            None
        };
        world.barrier();
        if rank == 1 {
            let zero = world.process_at_rank(0);
            unsafe {
                zero.ready_send(&41u32);
                let r = zero.immediate_ready_send_with_tag(sc, &vals, 32);
                r.wait();
            }
        }
        if let Some((ra, rb)) = reqs {
            assert_eq!(ra.wait().source_rank(), 1);
            assert_eq!(rb.wait().tag(), 32);
        }
    });
    if rank == 0 {
        assert_eq!((a, b), (41, [5, 6]));
    }

    world.barrier();
    if rank == 0 {
        println!("p2p_modes ok");
    }
}

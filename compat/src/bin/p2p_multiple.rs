//! `request::multiple_scope` and `RequestCollection`: add, incomplete, wait_all, wait_any,
//! wait_some, test_any, test_some, test_all; and the non-overtaking rule (messages from
//! one sender with one tag arrive in the order they were sent).

use mpi::request::multiple_scope;
use mpi::traits::*;

const K: usize = 64;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let next = world.process_at_rank((rank + 1) % size);
    let prev_rank = (rank + size - 1) % size;
    let prev = world.process_at_rank(prev_rank);
    let expect = |from: i32, i: usize| from * 1000 + i as i32;

    // wait_all: K sends to the right, K receives from the left, one collection.
    let sends: Vec<i32> = (0..K).map(|i| expect(rank, i)).collect();
    let mut recvs = vec![0i32; K];
    multiple_scope(2 * K, |sc, coll| {
        for v in recvs.iter_mut() {
            coll.add(prev.immediate_receive_into(sc, v));
        }
        for v in &sends {
            coll.add(next.immediate_send(sc, v));
        }
        assert_eq!(coll.incomplete(), 2 * K);
        let mut done = Vec::new();
        coll.wait_all(&mut done);
        assert_eq!(done.len(), 2 * K);
        assert_eq!(coll.incomplete(), 0);
        for (idx, st, data) in &done {
            if *idx < K {
                assert_eq!(st.source_rank(), prev_rank);
                assert_eq!(**data, expect(prev_rank, *idx), "order broken");
            } else {
                assert_eq!(**data, sends[*idx - K]);
            }
        }
    });
    assert_eq!(
        recvs,
        (0..K).map(|i| expect(prev_rank, i)).collect::<Vec<_>>()
    );

    // wait_any: vectors this time, collection of slices.
    let out: Vec<Vec<u16>> = (0..K).map(|i| vec![i as u16; i % 5 + 1]).collect();
    let mut inb: Vec<Vec<u16>> = (0..K).map(|i| vec![0u16; i % 5 + 1]).collect();
    multiple_scope(2 * K, |sc, coll| {
        for (i, b) in inb.iter_mut().enumerate() {
            coll.add(prev.immediate_receive_into_with_tag(sc, &mut b[..], i as i32));
        }
        for (i, b) in out.iter().enumerate() {
            coll.add(next.immediate_send_with_tag(sc, &b[..], i as i32));
        }
        let mut n = 0;
        while coll.incomplete() > 0 {
            let (idx, st, data) = coll.wait_any().expect("a request completes");
            let i = idx % K;
            assert_eq!(data.len(), i % 5 + 1);
            assert!(data.iter().all(|&x| x == i as u16));
            if idx < K {
                assert_eq!((st.source_rank(), st.tag()), (prev_rank, i as i32));
            }
            n += 1;
        }
        assert_eq!(n, 2 * K);
    });

    // wait_some: rank 0 gathers K messages from every other rank via any_process.
    let mut slots = vec![-1i64; K * (size as usize - 1)];
    let mine: Vec<i64> = (0..K as i64).map(|i| rank as i64 * 1_000_000 + i).collect();
    multiple_scope(slots.len() + K, |sc, coll| {
        if rank == 0 {
            for s in slots.iter_mut() {
                coll.add(
                    world
                        .any_process()
                        .immediate_receive_into_with_tag(sc, s, 77),
                );
            }
        } else {
            for v in &mine {
                coll.add(world.process_at_rank(0).immediate_send_with_tag(sc, v, 77));
            }
        }
        let mut batch = Vec::new();
        let mut total = 0;
        while coll.incomplete() > 0 {
            coll.wait_some(&mut batch);
            assert!(!batch.is_empty());
            // a send's status is undefined in MPI (but for cancellation): check receives
            if rank == 0 {
                for (_, st, _) in &batch {
                    assert_eq!(st.tag(), 77);
                }
            }
            total += batch.len();
        }
        assert_eq!(total, if rank == 0 { slots_len(size) } else { K });
    });
    if rank == 0 {
        // per sender, values arrive in send order
        let mut last = vec![-1i64; size as usize];
        for v in &slots {
            let (src, i) = ((v / 1_000_000) as usize, v % 1_000_000);
            assert!(src >= 1 && src < size as usize);
            assert_eq!(i, last[src] + 1, "non-overtaking violated for sender {src}");
            last[src] = i;
        }
        assert!(last[1..].iter().all(|&l| l == K as i64 - 1));
    }

    // test_any / test_some / test_all: poll until everything completes.
    let a: Vec<f64> = (0..K).map(|i| rank as f64 + i as f64 / 100.0).collect();
    let mut b = vec![0.0f64; K];
    multiple_scope(2 * K, |sc, coll| {
        for v in b.iter_mut() {
            coll.add(prev.immediate_receive_into_with_tag(sc, v, 5));
        }
        for v in &a {
            coll.add(next.immediate_send_with_tag(sc, v, 5));
        }
        let mut completed = 0;
        // a few with test_any ...
        while completed < K / 2 {
            if let Some((idx, _st, _data)) = coll.test_any() {
                assert!(idx < 2 * K);
                completed += 1;
            }
        }
        // ... some with test_some ...
        let mut batch = Vec::new();
        while completed < K {
            coll.test_some(&mut batch);
            completed += batch.len();
        }
        // ... and the rest with test_all
        let mut rest = Vec::new();
        while !coll.test_all(&mut rest) {}
        completed += rest.len();
        assert_eq!(completed, 2 * K);
        assert_eq!(coll.incomplete(), 0);
    });
    for (i, v) in b.iter().enumerate() {
        assert_eq!(*v, prev_rank as f64 + i as f64 / 100.0);
    }

    world.barrier();
    if rank == 0 {
        println!("p2p_multiple ok");
    }
}

fn slots_len(size: i32) -> usize {
    K * (size as usize - 1)
}

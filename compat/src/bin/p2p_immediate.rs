//! Non-blocking point-to-point: `request::scope`, immediate send/receive with and without
//! tags, `wait`/`wait_for_data`/`wait_without_status`/`test`, `WaitGuard`, `CancelGuard`,
//! `ReceiveFuture` (`immediate_receive` + `get`/`try`), and `request::wait_any`.

use mpi::point_to_point::Status;
use mpi::request::{self, CancelGuard, WaitGuard};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let next_rank = (rank + 1) % size;
    let prev_rank = (rank + size - 1) % size;
    let next = world.process_at_rank(next_rank);
    let prev = world.process_at_rank(prev_rank);

    // 1. Exchange with both neighbours at once: receives posted before the sends.
    let out_right: Vec<i32> = (0..1000).map(|i| rank * 10_000 + i).collect();
    let out_left: Vec<i32> = (0..3).map(|i| -rank - i).collect();
    let mut from_left = vec![0i32; 1000];
    let mut from_right = [0i32; 3];
    request::scope(|sc| {
        let r1 = prev.immediate_receive_into_with_tag(sc, &mut from_left[..], 1);
        let r2 = next.immediate_receive_into_with_tag(sc, &mut from_right[..], 2);
        let s1 = next.immediate_send_with_tag(sc, &out_right[..], 1);
        let s2 = prev.immediate_send_with_tag(sc, &out_left[..], 2);
        let st: Status = r1.wait();
        assert_eq!((st.source_rank(), st.tag()), (prev_rank, 1));
        assert_eq!(st.count(i32::equivalent_datatype()), 1000);
        let data: &[i32] = r2.wait_for_data();
        assert_eq!(data, &[-next_rank, -next_rank - 1, -next_rank - 2][..]);
        s1.wait_without_status();
        s2.wait();
    });
    assert_eq!(from_left[999], prev_rank * 10_000 + 999);

    // 2. A message to oneself, default tag, completed by polling with test().
    let x = 3.25f64;
    let mut y = 0.0f64;
    request::scope(|sc| {
        let mut rreq = world.this_process().immediate_receive_into(sc, &mut y);
        let sreq = world.this_process().immediate_send(sc, &x);
        let status = loop {
            match rreq.test() {
                Ok(st) => break st,
                Err(r) => rreq = r,
            }
        };
        assert_eq!((status.source_rank(), status.tag()), (rank, 0));
        sreq.wait();
    });
    assert_eq!(y, 3.25);

    // 3. WaitGuard: a request that completes when the guard is dropped.
    let token = [rank as u8; 16];
    let mut got = [0u8; 16];
    request::scope(|sc| {
        let _recv = WaitGuard::from(prev.immediate_receive_into_with_tag(sc, &mut got, 3));
        let _send = WaitGuard::from(next.immediate_send_with_tag(sc, &token, 3));
        // both guards wait here, at the end of the closure
    });
    assert_eq!(got, [prev_rank as u8; 16]);

    // 4. CancelGuard: a receive nobody will ever match is cancelled (and then completed)
    //    when its guard is dropped; a guard turned back into a WaitGuard waits instead.
    let mut never = [0i64; 4];
    let mut once = 0i64;
    request::scope(|sc| {
        let guard = CancelGuard::from(
            world
                .any_process()
                .immediate_receive_into_with_tag(sc, &mut never, 999),
        );
        drop(guard);
        let keep = CancelGuard::from(prev.immediate_receive_into_with_tag(sc, &mut once, 4));
        let keep: WaitGuard<_, _> = keep.into();
        next.send_with_tag(&(rank as i64 * 7), 4);
        drop(keep);
    });
    assert_eq!(never, [0; 4]);
    assert_eq!(once, prev_rank as i64 * 7);

    // 5. ReceiveFuture: receive a value without a scope, then collect it with get()/try().
    let fut = prev.immediate_receive::<u64>();
    let fut_tagged = prev.immediate_receive_with_tag::<f32>(6);
    next.send(&(rank as u64 + 100));
    next.send_with_tag(&(rank as f32 / 2.0), 6);
    let (v, st) = fut.get();
    assert_eq!((v, st.source_rank()), (prev_rank as u64 + 100, prev_rank));
    let mut fut_tagged = fut_tagged;
    let (f, st) = loop {
        match fut_tagged.r#try() {
            Ok(done) => break done,
            Err(again) => fut_tagged = again,
        }
    };
    assert_eq!((f, st.tag()), (prev_rank as f32 / 2.0, 6));

    // 6. request::wait_any over a Vec of requests: rank 0 collects one message from every
    //    other rank, in whatever order they complete.
    let mut inbox = vec![[0i32; 2]; size as usize];
    let outgoing = [rank, rank * rank];
    request::scope(|sc| {
        if rank == 0 {
            let mut reqs = Vec::new();
            for (r, slot) in inbox.iter_mut().enumerate().skip(1) {
                reqs.push(
                    world
                        .process_at_rank(r as i32)
                        .immediate_receive_into_with_tag(sc, slot, 5),
                );
            }
            let mut seen = vec![false; size as usize];
            let mut completed = 0;
            while let Some((idx, st)) = request::wait_any(&mut reqs) {
                assert!(idx <= reqs.len());
                let src = st.source_rank() as usize;
                assert!(!seen[src]);
                seen[src] = true;
                completed += 1;
            }
            assert_eq!(completed, size - 1);
            assert!(reqs.is_empty());
        } else {
            let r = world
                .process_at_rank(0)
                .immediate_synchronous_send_with_tag(sc, &outgoing, 5);
            r.wait();
        }
    });
    if rank == 0 {
        for (r, slot) in inbox.iter().enumerate().skip(1) {
            assert_eq!(*slot, [r as i32, (r * r) as i32]);
        }
    }

    // 7. Many outstanding requests to every rank (including self) with any_process
    //    receives: counts and sources must add up.
    let k = 20usize;
    let sends: Vec<i32> = (0..size).collect();
    let mut recvs = vec![-1i32; k * size as usize];
    request::scope(|sc| {
        let mut rr = Vec::new();
        for slot in recvs.iter_mut() {
            rr.push(
                world
                    .any_process()
                    .immediate_receive_into_with_tag(sc, slot, 8),
            );
        }
        let mut ss = Vec::new();
        for _ in 0..k {
            for r in 0..size {
                ss.push(world.process_at_rank(r).immediate_send_with_tag(
                    sc,
                    &sends[rank as usize],
                    8,
                ));
            }
        }
        for r in rr {
            let st = r.wait();
            assert_eq!(st.tag(), 8);
        }
        for s in ss {
            s.wait();
        }
    });
    let mut per_source = vec![0usize; size as usize];
    for v in &recvs {
        per_source[*v as usize] += 1;
    }
    assert!(per_source.iter().all(|&c| c == k), "{per_source:?}");

    world.barrier();
    if rank == 0 {
        println!("p2p_immediate ok");
    }
}

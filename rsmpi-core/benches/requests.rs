//! Request creation and completion through the whole library, on one rank sending to
//! itself over shared memory (a singleton: no launcher), so that each figure is the
//! software cost of the path with no cache-line transfer between cores and no
//! waiting on a peer:
//!
//! * `blocking/send_receive` — `send` then `receive_into` (the message is unexpected
//!   when the receive is posted; the send takes the fast path and completes at once);
//! * `immediate/irecv_isend_wait` — `immediate_receive_into`, `immediate_send`, then
//!   wait for both (the receive is posted when the message arrives);
//! * `immediate/test_pending` — `test` on a receive that cannot complete (the cost of
//!   one progress poll with nothing to do).
//!
//! `cargo bench -p rsmpi --bench requests`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rsmpi::request;
use rsmpi::traits::*;
use std::hint::black_box;

fn requests(c: &mut Criterion) {
    let universe = rsmpi::initialize().expect("singleton init");
    let world = universe.world();
    let me = world.process_at_rank(0);
    let mut g = c.benchmark_group("blocking");
    for size in [8usize, 4096] {
        let sbuf = vec![0x5au8; size];
        let mut rbuf = vec![0u8; size];
        g.bench_function(BenchmarkId::new("send_receive", size), |b| {
            b.iter(|| {
                me.send_with_tag(black_box(&sbuf[..]), 3);
                let st = me.receive_into_with_tag(&mut rbuf[..], 3);
                assert_eq!(st.count_bytes(), size as u64);
            })
        });
        assert_eq!(rbuf, sbuf);
    }
    g.finish();

    let mut g = c.benchmark_group("immediate");
    for size in [8usize, 4096] {
        let sbuf = vec![0xa5u8; size];
        let mut rbuf = vec![0u8; size];
        g.bench_function(BenchmarkId::new("irecv_isend_wait", size), |b| {
            b.iter(|| {
                request::scope(|sc| {
                    let r = me.immediate_receive_into_with_tag(sc, &mut rbuf[..], 4);
                    let s = me.immediate_send_with_tag(sc, black_box(&sbuf[..]), 4);
                    s.wait();
                    assert_eq!(r.wait().count_bytes(), size as u64);
                })
            })
        });
        assert_eq!(rbuf, sbuf);
    }
    let mut rbuf = [0u8; 8];
    request::scope(|sc| {
        let mut pending = Some(me.immediate_receive_into_with_tag(sc, &mut rbuf[..], 5));
        g.bench_function("test_pending", |b| {
            b.iter(|| {
                let r = pending.take().expect("pending");
                match r.test() {
                    Ok(_) => panic!("nothing was sent with tag 5"),
                    Err(r) => pending = Some(r),
                }
            })
        });
        let r = pending.take().expect("pending");
        r.cancel();
        assert!(r.wait().is_cancelled());
    });
    g.finish();
}

criterion_group!(benches, requests);
criterion_main!(benches);

//! Enqueue + dequeue of one message through this process's own ring (self-send), for
//! 8-byte and 4 KiB messages: the per-message cost of the ring without any cache-line
//! transfer between cores.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use transport::Transport;
use transport_shm::testing::{cleanup_job, new_job, FileExchange};
use transport_shm::ShmTransport;

fn self_ring(c: &mut Criterion) {
    let (job, dir) = new_job("bench_ring");
    let mut t = ShmTransport::new(&mut FileExchange::new(&dir, 0, 1, job.clone())).unwrap();
    let mut g = c.benchmark_group("self_ring");
    for size in [8usize, 4096] {
        let msg = vec![0x5au8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::new("send_poll", size), |b| {
            b.iter(|| {
                t.try_send(0, &[], black_box(&msg)).unwrap();
                let mut seen = 0;
                let n = t.poll(1, &mut |_, m| seen += black_box(m).len()).unwrap();
                assert_eq!((n, seen), (1, size));
            })
        });
    }
    g.finish();
    drop(t);
    cleanup_job(&job, &dir);
}

criterion_group!(benches, self_ring);
criterion_main!(benches);

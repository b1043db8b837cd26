//! Matching cost as a function of how many receives (or unexpected messages) are
//! queued: the sender's associative memory must stay O(1), and so must the receiver's
//! exact-match paths.
//!
//! `cargo bench -p matching --bench lookup -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use matching::wire::{encode, Body, Ctrl, Frame, SendFlags};
use matching::*;
use std::hint::black_box;

const SIZES: [usize; 4] = [1, 16, 256, 4096];
const LEN: u64 = 8;

fn rbuf(k: usize) -> RemoteBuf {
    RemoteBuf {
        addr: 0x100_0000 + 0x100 * k as u64,
        len: LEN,
        key: 0,
    }
}

/// Moves control messages between two engines until both are quiet. Direct writes
/// and reads are not carried out (no payload is looked at).
fn settle(e: &mut [Engine; 2]) {
    loop {
        let mut moved = false;
        for r in 0..2 {
            while let Some(o) = e[r].poll_output() {
                if let Output::Transmit {
                    to,
                    header,
                    payload,
                } = o
                {
                    let mut bytes = header.as_bytes().to_vec();
                    if let Some((_, len)) = payload {
                        bytes.resize(bytes.len() + len as usize, 0);
                    }
                    e[to as usize]
                        .handle(r as Rank, &bytes)
                        .expect("valid frame");
                    moved = true;
                }
            }
        }
        if !moved {
            return;
        }
    }
}

/// Rank 0 holds `n` receives advertised by rank 1, tags 0..n.
fn sender_with_advertised(n: usize) -> Engine {
    let mut e = [
        Engine::new(0, 2, Config::default()),
        Engine::new(1, 2, Config::default()),
    ];
    for t in 0..n {
        let spec = RecvSpec {
            source: Source::Rank(0),
            tag: TagSel::Tag(t as Tag),
            ctx: 0,
            capacity: LEN,
            buf: Some(rbuf(t)),
        };
        e[1].post_recv(spec).unwrap();
        settle(&mut e);
    }
    assert_eq!(e[0].advertised_by(1), n);
    let [e0, _] = e;
    e0
}

fn bench_sender(c: &mut Criterion) {
    let mut g = c.benchmark_group("sender_direct_write");
    for n in SIZES {
        let tag = (n / 2) as Tag;
        let mut e = sender_with_advertised(n);
        // what rank 1 sends to re-advertise the consumed receive: a RecvReq that also
        // returns the credit the `Written` notice used
        let readvertise = encode(&Frame {
            credit: 1,
            msg: Ctrl::RecvReq {
                ctx: 0,
                tag: TagSel::Tag(tag),
                buf: rbuf(n / 2),
                m: 0,
            },
        });
        let spec = SendSpec {
            dest: 1,
            tag,
            ctx: 0,
            len: LEN,
            mode: SendMode::Standard,
            read_advised: false,
            buf: RemoteBuf {
                addr: 0x200_0000,
                len: LEN,
                key: 0,
            },
        };
        let before = e.stats();
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let s = e.start_send(black_box(spec)).unwrap();
                while let Some(o) = e.poll_output() {
                    if let Output::Put { send, .. } = o {
                        // the write completes at once (as over shared memory)
                        e.put_done(send).unwrap();
                    }
                    black_box(o);
                }
                e.handle(1, readvertise.as_bytes()).unwrap();
                while let Some(o) = e.poll_output() {
                    black_box(o);
                }
                s
            })
        });
        let after = e.stats();
        // every send took the direct-write path
        assert_eq!(after.eager_sends, before.eager_sends);
        assert_eq!(after.credit_stalls, 0);
        assert!(after.direct_writes > before.direct_writes);
        assert_eq!(e.advertised_by(1), n);
        assert!(e.is_idle(), "every write was reported complete");
    }
    g.finish();
}

fn eager_sendreq(tag: Tag) -> Vec<u8> {
    let f = Frame {
        credit: 0,
        msg: Ctrl::SendReq {
            ctx: 0,
            tag,
            len: LEN,
            flags: SendFlags::default(),
            body: Body::Eager,
        },
    };
    let mut b = encode(&f).as_bytes().to_vec();
    b.extend([7u8; LEN as usize]);
    b
}

fn bench_receiver_posted(c: &mut Criterion) {
    // classic receiver-side matching: n posted receives of distinct tags, an eager send
    // request for the middle one arrives; the receive is re-posted to keep n
    let mut g = c.benchmark_group("receiver_posted_match");
    let cfg = Config {
        matching: MatchingMode::Receiver,
        ..Config::default()
    };
    for n in SIZES {
        let mut e = Engine::new(1, 2, cfg);
        let spec = |t: usize| RecvSpec {
            source: Source::Rank(0),
            tag: TagSel::Tag(t as Tag),
            ctx: 0,
            capacity: LEN,
            buf: Some(rbuf(t)),
        };
        for t in 0..n {
            e.post_recv(spec(t)).unwrap();
        }
        let msg = eager_sendreq((n / 2) as Tag);
        let repost = spec(n / 2);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let d = e
                    .handle(0, black_box(&msg))
                    .unwrap()
                    .expect("matched a posted receive");
                while let Some(o) = e.poll_output() {
                    black_box(o);
                }
                e.post_recv(repost).unwrap();
                d
            })
        });
        assert_eq!(e.queue_lengths(), (n, 0));
    }
    g.finish();
}

fn bench_receiver_unexpected(c: &mut Criterion) {
    // n unexpected messages of distinct tags; a new one arrives and a receive for it
    // is posted (found through the exact-match index)
    let mut g = c.benchmark_group("receiver_unexpected_match");
    for n in SIZES {
        let mut e = Engine::new(1, 2, Config::default());
        for t in 0..n {
            assert!(e.handle(0, &eager_sendreq(t as Tag)).unwrap().is_none());
            while e.poll_output().is_some() {}
        }
        let tag = n as Tag; // not among the queued ones
        let msg = eager_sendreq(tag);
        let spec = RecvSpec {
            source: Source::Rank(0),
            tag: TagSel::Tag(tag),
            ctx: 0,
            capacity: LEN,
            buf: Some(rbuf(0)),
        };
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                assert!(e.handle(0, black_box(&msg)).unwrap().is_none());
                let r = e.post_recv(spec).unwrap();
                while let Some(o) = e.poll_output() {
                    black_box(o);
                }
                r
            })
        });
        assert_eq!(e.queue_lengths(), (0, n));
        assert_eq!(e.stats().advertised, 0);
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_sender,
    bench_receiver_posted,
    bench_receiver_unexpected
);
criterion_main!(benches);

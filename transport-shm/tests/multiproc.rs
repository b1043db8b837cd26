//! Multi-process tests: every test re-executes this binary to get 2–4 real ranks
//! (see `transport_shm::testing`), each with a timeout so that a hang fails.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::{poll_until, stream_exchange};
use transport::{Exchange, Incoming, Posted, Rank, RemoteBuf, Transport, TransportError};
use transport_shm::testing::{child_env, mark_ran, run_ranks, spawn_ranks, FileExchange, RankEnv};
use transport_shm::{
    segment_path, PullStats, PushStats, ReadMode, ShmTransport, WriteMode, CHUNK, CTRL_SLOTS,
    MAX_CTRL, PULL_FROM, PUSH_BUDGET, PUSH_CHUNK, PUSH_FROM, PUSH_START, STREAM_FROM,
};

const TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn two_ranks_100k_random_sizes_both_ways() {
    run_ranks("two_ranks_100k_random_sizes_both_ways", 2, TIMEOUT, |env| {
        let mut t = ShmTransport::new(&mut env.exchange()).unwrap();
        let peer = 1 - env.rank;
        stream_exchange(&mut t, &[peer], &[peer], 100_000, Duration::from_secs(100));
    });
}

fn all_to_all(role: &str, n: u32) {
    run_ranks(role, n, TIMEOUT, |env| {
        let mut t = ShmTransport::new(&mut env.exchange()).unwrap();
        let all: Vec<Rank> = (0..env.size).collect();
        stream_exchange(&mut t, &all, &all, 3_000, Duration::from_secs(100));
    });
}

#[test]
fn all_to_all_3_ranks() {
    all_to_all("all_to_all_3_ranks", 3);
}

#[test]
fn all_to_all_4_ranks() {
    all_to_all("all_to_all_4_ranks", 4);
}

/// A poll serves every sender with a message waiting, itself included, at least once
/// when its limit allows: messages a rank keeps sending itself (taken first, they are
/// already in the process) cannot starve its peers' rings, nor the other way round.
#[test]
fn poll_serves_self_and_every_peer() {
    run_ranks("poll_serves_self_and_every_peer", 3, TIMEOUT, |env| {
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        let mine = if env.rank == 0 { 100u32 } else { 10 };
        for i in 0..mine {
            t.try_send(0, &i.to_le_bytes(), b"").unwrap();
        }
        ex.fence().unwrap(); // every message is in its ring or in rank 0's loopback
        if env.rank == 0 {
            for round in 0..10u32 {
                let mut got = Vec::new();
                let n = t
                    .poll(3, &mut |s, m| {
                        got.push((s, u32::from_le_bytes(m.try_into().unwrap())))
                    })
                    .unwrap();
                assert_eq!(n, 3, "round {round}: {got:?}");
                got.sort_unstable();
                assert_eq!(got, [(0, round), (1, round), (2, round)], "round {round}");
            }
            // the peers are drained; the rest of its own messages come in order
            let mut next = 10u32;
            while t
                .poll(usize::MAX, &mut |s, m| {
                    assert_eq!((s, m), (0, &next.to_le_bytes()[..]));
                    next += 1;
                })
                .unwrap()
                > 0
            {}
            assert_eq!(next, 100);
        }
        ex.fence().unwrap(); // rank 0 has read everything
    });
}

fn publish_u64(ex: &mut FileExchange, key: &str, v: u64) {
    ex.publish(key, v.to_string().as_bytes()).unwrap();
}

fn lookup_u64(ex: &mut FileExchange, r: Rank, key: &str) -> u64 {
    String::from_utf8(ex.lookup(r, key).unwrap())
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn ring_full_then_progress() {
    run_ranks("ring_full_then_progress", 2, TIMEOUT, |env| {
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        assert_eq!(t.caps().ctrl_slots, CTRL_SLOTS);
        let big = vec![0xabu8; MAX_CTRL - 8];
        if env.rank == 0 {
            // Phase 1: fill rank 1's ring with maximum-size messages until Full.
            let mut n = 0u64;
            loop {
                match t.try_send(1, &n.to_le_bytes(), &big) {
                    Ok(()) => n += 1,
                    Err(TransportError::Full(1)) => break,
                    Err(e) => panic!("{e}"),
                }
                assert!(n <= 1000, "ring never filled");
            }
            assert!(n as usize >= CTRL_SLOTS, "only {n} max-size messages fit");
            // Full again: nothing was sent by the failed attempt, and it stays full.
            assert!(matches!(
                t.try_send(1, &n.to_le_bytes(), &big),
                Err(TransportError::Full(1))
            ));
            publish_u64(&mut ex, "n", n);
            ex.fence().unwrap(); // A: rank 1 may drain now
            ex.fence().unwrap(); // B: rank 1 has drained
                                 // Phase 2: space is back; stream 5000 more while rank 1 polls concurrently.
            let end = Instant::now() + Duration::from_secs(60);
            let mut fulls = 0u64;
            let total = n + 5_000;
            while n < total {
                match t.try_send(1, &n.to_le_bytes(), &big) {
                    Ok(()) => n += 1,
                    Err(TransportError::Full(1)) => {
                        fulls += 1;
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("{e}"),
                }
                assert!(Instant::now() < end, "no progress after {n} messages");
            }
            eprintln!("ring_full_then_progress: {fulls} Full retries in phase 2");
            // A Full right after the fence would mean the drained space was not reused.
        } else {
            ex.fence().unwrap(); // A
            let n = lookup_u64(&mut ex, 0, "n");
            let k = std::cell::Cell::new(0u64);
            let mut check = |_: Rank, m: &[u8]| {
                assert_eq!(m.len(), MAX_CTRL);
                assert_eq!(m[..8], k.get().to_le_bytes(), "out of order");
                assert!(m[8..].iter().all(|&b| b == 0xab));
                k.set(k.get() + 1);
            };
            let end = Instant::now() + Duration::from_secs(30);
            while k.get() < n {
                t.poll(usize::MAX, &mut check).unwrap();
                assert!(Instant::now() < end, "got {} of {n}", k.get());
            }
            // Exactly n: the refused sends delivered nothing.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(t.poll(usize::MAX, &mut check).unwrap(), 0);
            ex.fence().unwrap(); // B
            let end = Instant::now() + Duration::from_secs(60);
            while k.get() < n + 5_000 {
                t.poll(7, &mut check).unwrap();
                assert!(Instant::now() < end, "got {} of {}", k.get(), n + 5_000);
            }
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(t.poll(usize::MAX, &mut check).unwrap(), 0);
        }
    });
}

/// Messages from `STREAM_FROM` bytes on come through `poll_incoming` while still
/// arriving; copied out in pieces, at offsets, or waited for whole, they hold exactly
/// what was sent, in order, mixed with whole smaller ones.
#[test]
fn streamed_messages_copied_out_as_they_arrive() {
    const N: u64 = 4_000;
    let len_of = |i: u64| -> usize {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        match i % 3 {
            0 => 8 + (x as usize % 200),
            _ => STREAM_FROM - 16 + (x as usize % (MAX_CTRL - STREAM_FROM + 16)),
        }
    };
    let byte = |i: u64, j: usize| (i as usize).wrapping_mul(13).wrapping_add(j * 7) as u8;
    run_ranks(
        "streamed_messages_copied_out_as_they_arrive",
        2,
        TIMEOUT,
        |env| {
            let mut t = ShmTransport::new(&mut env.exchange()).unwrap();
            if env.rank == 0 {
                let end = Instant::now() + Duration::from_secs(100);
                for i in 0..N {
                    let body: Vec<u8> = (8..len_of(i)).map(|j| byte(i, j)).collect();
                    loop {
                        match t.try_send(1, &i.to_le_bytes(), &body) {
                            Ok(()) => break,
                            Err(TransportError::Full(1)) => std::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                        assert!(Instant::now() < end, "stuck at message {i}");
                    }
                    // every other message waits for its acknowledgement, so that the
                    // receiver is polling when the next one starts to arrive
                    if i % 2 == 1 {
                        let got = std::cell::Cell::new(false);
                        while !got.get() {
                            t.poll(1, &mut |_, m| got.set(m == b"ack")).unwrap();
                            assert!(Instant::now() < end, "no acknowledgement of {i}");
                        }
                    }
                }
            } else {
                let mut k = 0u64;
                let (mut early, mut acked) = (0, 0);
                let end = Instant::now() + Duration::from_secs(100);
                while k < N {
                    t.poll_incoming(5, &mut |from, m| {
                        assert_eq!(from, 0);
                        let len = len_of(k);
                        let want = |j: usize| {
                            if j < 8 {
                                k.to_le_bytes()[j]
                            } else {
                                byte(k, j)
                            }
                        };
                        match m {
                            Incoming::Whole(b) => {
                                assert!(len < STREAM_FROM, "message {k} of {len} B came whole");
                                assert_eq!(b.len(), len);
                                assert!(b.iter().enumerate().all(|(j, &x)| x == want(j)));
                            }
                            Incoming::Arriving(a) => {
                                assert!(len >= STREAM_FROM, "message {k} of {len} B streamed");
                                assert_eq!(a.len(), len);
                                let head = a.head();
                                assert!(head.len() >= transport::STREAM_HEAD && head.len() <= len);
                                if head.len() < len {
                                    early += 1;
                                }
                                assert_eq!(head[..8], k.to_le_bytes());
                                if k % 2 == 0 {
                                    // a piece from an offset, as a truncating receive copies
                                    let off = 100 + (k as usize % 1000);
                                    let mut dst = vec![0u8; len - off - 50];
                                    a.copy_out(off, &mut dst).unwrap();
                                    assert!(dst
                                        .iter()
                                        .enumerate()
                                        .all(|(j, &x)| x == want(off + j)));
                                } else {
                                    let b = a.whole().unwrap();
                                    assert_eq!(b.len(), len);
                                    assert!(b.iter().enumerate().all(|(j, &x)| x == want(j)));
                                }
                            }
                        }
                        k += 1;
                    })
                    .unwrap();
                    while acked < k / 2 {
                        acked += 1;
                        while t.try_send(0, b"ack", b"").is_err() {
                            std::thread::yield_now();
                        }
                    }
                    assert!(Instant::now() < end, "got {k} of {N}");
                }
                eprintln!("{early} streamed messages were handed over before all of them arrived");
                std::thread::sleep(Duration::from_millis(50));
                assert_eq!(
                    t.poll(usize::MAX, &mut |_, _| panic!("extra message"))
                        .unwrap(),
                    0
                );
            }
        },
    );
}

fn remote_buf(ex: &mut FileExchange, r: Rank) -> RemoteBuf {
    RemoteBuf {
        addr: lookup_u64(ex, r, "buf.addr"),
        len: lookup_u64(ex, r, "buf.len"),
        key: 0,
    }
}

#[test]
fn cma_put_get_1mib_and_bounds() {
    const LEN: usize = 1 << 20;
    const GUARD: usize = 4096;
    run_ranks("cma_put_get_1mib_and_bounds", 2, TIMEOUT, |env| {
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        assert!(t.caps().put && t.caps().get, "CMA unavailable: {t:?}");
        // every read here is one `process_vm_readv` (pulls are tested below), every
        // write one `process_vm_writev` (pushes and offers too)
        t.set_read_mode(ReadMode::Cma);
        t.set_write_mode(WriteMode::Writev);
        let old = |i: usize| (i * 7 + 1) as u8;
        let new = |i: usize| (i * 13 + 5) as u8;
        if env.rank == 1 {
            // Exposed: the first LEN bytes; then a guard that must stay untouched.
            let mut buf: Vec<u8> = (0..LEN)
                .map(old)
                .chain(std::iter::repeat_n(0xee, GUARD))
                .collect();
            let d = t.expose(buf.as_mut_ptr() as usize, LEN).unwrap();
            publish_u64(&mut ex, "buf.addr", d.addr);
            publish_u64(&mut ex, "buf.len", d.len);
            ex.fence().unwrap();
            assert!(poll_until(&mut t, Duration::from_secs(60), |s, m| s == 0
                && m == b"done"));
            let buf = std::hint::black_box(&buf);
            assert!(
                buf[..LEN].iter().enumerate().all(|(i, &b)| b == new(i)),
                "put data wrong"
            );
            assert!(
                buf[LEN..].iter().all(|&b| b == 0xee),
                "write outside the exposed range"
            );
        } else {
            ex.fence().unwrap();
            let d = remote_buf(&mut ex, 1);
            assert_eq!(d.len, LEN as u64);
            // get: the whole buffer, and a piece at an odd offset.
            let mut got = vec![0u8; LEN];
            t.get(1, &mut got, d, 0, 0).unwrap();
            assert!(
                got.iter().enumerate().all(|(i, &b)| b == old(i)),
                "get data wrong"
            );
            let mut piece = vec![0u8; 1000];
            t.get(1, &mut piece, d, 12_345, 0).unwrap();
            assert!(piece.iter().enumerate().all(|(i, &b)| b == old(i + 12_345)));
            // Out of bounds, both directions: rejected, nothing moved.
            let oob = [
                (LEN as u64 - 10, 20usize),
                (LEN as u64 + 1, 0),
                (u64::MAX, 1),
                (0, LEN + 1),
            ];
            for (off, len) in oob {
                let big = vec![0x55u8; len];
                let e = t.put(1, &big, d, off, 0).unwrap_err();
                assert!(
                    matches!(e, TransportError::OutOfBounds { .. }),
                    "put {off}+{len}: {e:?}"
                );
                let mut sink = vec![0x77u8; len];
                let e = t.get(1, &mut sink, d, off, 0).unwrap_err();
                assert!(
                    matches!(e, TransportError::OutOfBounds { .. }),
                    "get {off}+{len}: {e:?}"
                );
                assert!(sink.iter().all(|&b| b == 0x77));
            }
            // put: the whole buffer in two pieces (one at an unaligned offset).
            let data: Vec<u8> = (0..LEN).map(new).collect();
            t.put(1, &data[..333_333], d, 0, 0).unwrap();
            t.put(1, &data[333_333..], d, 333_333, 0).unwrap();
            t.put(1, &[], d, LEN as u64, 0).unwrap();
            t.get(1, &mut got, d, 0, 0).unwrap();
            assert!(got == data, "read-back after put differs");
            // The put is visible before this message is delivered.
            t.try_send(1, b"done", &[]).unwrap();
        }
    });
}

/// The byte at `i` of the buffers the pull tests read.
fn pattern(i: usize) -> u8 {
    (i ^ (i >> 8) ^ (i >> 17)).wrapping_mul(31) as u8
}

/// Polls (serving peers' pulls, and handing messages to `msg`) until every token of
/// `tokens` is reported by `poll_done`; returns the outcomes in token order.
fn wait_reads(
    t: &mut ShmTransport,
    tokens: &[u64],
    msg: &mut dyn FnMut(Rank, &[u8]),
) -> Vec<Result<(), TransportError>> {
    let mut got: Vec<Option<Result<(), TransportError>>> = tokens.iter().map(|_| None).collect();
    let end = Instant::now() + Duration::from_secs(60);
    while got.iter().any(Option::is_none) {
        t.poll(64, msg).unwrap();
        t.poll_done(&mut |tok, r| {
            let i = tokens
                .iter()
                .position(|&x| x == tok)
                .expect("a token we gave");
            assert!(got[i].is_none(), "token {tok} reported twice");
            got[i] = Some(r);
        })
        .unwrap();
        assert!(Instant::now() < end, "reads not done: {got:?}");
    }
    got.into_iter().map(Option::unwrap).collect()
}

/// Rank 1 exposes a buffer of `len` pattern bytes and serves (polls, sending rank 0
/// numbered messages while it does, if `chatter`) until rank 0 says "done"; returns
/// its transport's figures. `serve` false: it polls only after rank 0 is done.
fn pull_owner(env: &RankEnv, len: usize, serve: bool, chatter: bool) -> PullStats {
    let mut ex = env.exchange();
    let mut t = ShmTransport::new(&mut ex).unwrap();
    let buf: Vec<u8> = (0..len).map(pattern).collect();
    publish_u64(&mut ex, "buf.addr", buf.as_ptr() as u64);
    publish_u64(&mut ex, "buf.len", len as u64);
    ex.fence().unwrap();
    if !serve {
        ex.fence().unwrap(); // rank 0 has read everything itself
    }
    let (mut done, mut k) = (false, 0u64);
    let end = Instant::now() + Duration::from_secs(60);
    while !done {
        t.poll(64, &mut |s, m| {
            assert_eq!((s, m), (0, &b"done"[..]));
            done = true;
        })
        .unwrap();
        if chatter && k < 100_000 && t.try_send(0, &k.to_le_bytes(), &[]).is_ok() {
            k += 1;
        }
        assert!(Instant::now() < end, "rank 0 never finished");
    }
    if chatter {
        // the ring may be full of numbered messages that rank 0 has not read yet (it
        // checks its bytes before it says "done"): it reads them now, so room comes
        loop {
            match t.try_send(0, b"end", &[]) {
                Err(TransportError::Full(0)) => {
                    t.poll(64, &mut |s, m| panic!("rank {s} sent {m:?} after done"))
                        .unwrap();
                    assert!(Instant::now() < end, "no room for \"end\"");
                }
                r => break r.unwrap(),
            }
        }
    }
    assert!(
        buf.iter().enumerate().all(|(i, &b)| b == pattern(i)),
        "source changed"
    );
    t.pull_stats()
}

/// Large reads that the peer serves through the ring, one at a time and many at once,
/// at odd sizes and offsets, while the peer also sends messages that must keep their
/// order around the chunks; every byte is checked, and the peer copied every chunk.
#[test]
fn pulls_are_served_by_the_peer() {
    const LEN: usize = 5 * CHUNK * 4 + 1234; // 1.25 MiB + 1234
    run_ranks("pulls_are_served_by_the_peer", 2, TIMEOUT, |env| {
        if env.rank == 1 {
            let s = pull_owner(&env, LEN, true, true);
            assert!(s.chunks_served > 0 && s.pulls == 0, "{s:?}");
            return;
        }
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        t.set_read_mode(ReadMode::Pull);
        t.set_pull_patience(Duration::from_secs(3600)); // the peer copies every chunk
        ex.fence().unwrap();
        let d = remote_buf(&mut ex, 1);
        let mut next = 0u64;
        let mut msg = |s: Rank, m: &[u8]| {
            assert_eq!(s, 1);
            if m != b"end" {
                assert_eq!(m, next.to_le_bytes(), "message out of order");
                next += 1;
            }
        };
        // one at a time
        let cases = [
            (PULL_FROM, 0),
            (CHUNK, 7),
            (CHUNK + 1, 4099),
            (3 * CHUNK - 5, 12_345),
            (LEN, 0),
            (LEN - 70_001, 70_001),
        ];
        let mut chunks = 0;
        for (k, &(len, off)) in cases.iter().enumerate() {
            let mut dst = vec![0u8; len];
            let token = 100 + k as u64;
            let p = t.get(1, &mut dst, d, off as u64, token).unwrap();
            assert_eq!(p, Posted::Pending, "{len} B at {off}: not a pull");
            assert!(wait_reads(&mut t, &[token], &mut msg)[0].is_ok());
            assert!(
                dst.iter().enumerate().all(|(i, &b)| b == pattern(off + i)),
                "{len} B at {off}: wrong bytes"
            );
            chunks += len.div_ceil(CHUNK) as u64;
        }
        // eight at once, into one buffer
        let sizes = [
            PULL_FROM,
            100_000,
            CHUNK,
            2 * CHUNK + 3,
            40_000,
            CHUNK - 1,
            300_000,
            PULL_FROM + 1,
        ];
        let total: usize = sizes.iter().sum();
        let mut dst = vec![0u8; total];
        let mut rest = &mut dst[..];
        let mut tokens = Vec::new();
        let mut off = 0;
        for (k, &len) in sizes.iter().enumerate() {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            let p = t.get(1, piece, d, off as u64, 200 + k as u64).unwrap();
            assert_eq!(p, Posted::Pending);
            tokens.push(200 + k as u64);
            off += len;
            chunks += len.div_ceil(CHUNK) as u64;
        }
        assert!(wait_reads(&mut t, &tokens, &mut msg)
            .iter()
            .all(Result::is_ok));
        assert!(
            dst.iter().enumerate().all(|(i, &b)| b == pattern(i)),
            "wrong bytes"
        );
        let s = t.pull_stats();
        assert_eq!(
            s,
            PullStats {
                pulls: (cases.len() + sizes.len()) as u64,
                reads: 0,
                chunks_served_to_us: chunks,
                taken_back: 0,
                chunks_served: 0,
                followed: 0,
            }
        );
        t.try_send(1, b"done", &[]).unwrap();
        // the peer's messages sent after its last chunk still come, in order
        let mut end = false;
        assert!(poll_until(&mut t, Duration::from_secs(60), |s, m| {
            msg(s, m);
            end |= m == b"end";
            end
        }));
        assert!(next > 0, "no message came between the chunks");
    });
}

/// Large reads both ways (`ReadMode::Auto`): in bursts that meet (each rank reads 8
/// from the other while the other's count of reads moves by 8), rank 1, the follower,
/// goes rank 0's way (`Reader::follow`); reads that take turns, one each way (a
/// ping-pong), are each judged alone after `FOLLOW_FOR` turns. Every byte arrives.
#[test]
fn reads_both_ways_go_the_leaders_way() {
    const LEN: usize = 128 * 1024;
    const BURST: usize = 8;
    run_ranks("reads_both_ways_go_the_leaders_way", 2, TIMEOUT, |env| {
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        assert!(t.caps().get, "CMA unavailable: {t:?}");
        t.set_read_mode(ReadMode::Auto);
        let me = env.rank;
        let peer = 1 - me;
        // each rank's exposed bytes: the pattern, offset by its rank
        let buf: Vec<u8> = (0..LEN + 64).map(pattern).collect();
        let mine = &buf[usize::from(me == 1) * 64..];
        publish_u64(&mut ex, "buf.addr", mine.as_ptr() as u64);
        publish_u64(&mut ex, "buf.len", LEN as u64);
        ex.fence().unwrap();
        let d = remote_buf(&mut ex, peer);
        let shift = usize::from(peer == 1) * 64;
        let mut dst = vec![0u8; BURST * LEN];
        let mut token = 0u64;
        let mut go = 0u64;
        let mut burst = |t: &mut ShmTransport, n: usize, go: &mut u64| {
            let mut tokens = Vec::new();
            for piece in dst.chunks_mut(LEN).take(n) {
                piece.fill(0);
                token += 1;
                match t.get(peer, piece, d, 0, token).unwrap() {
                    Posted::Pending => tokens.push(token),
                    Posted::Done => {}
                }
            }
            let mut msg = |s: Rank, m: &[u8]| {
                assert_eq!((s, m), (peer, &b"go"[..]));
                *go += 1;
            };
            assert!(wait_reads(t, &tokens, &mut msg).iter().all(Result::is_ok));
            for piece in dst.chunks(LEN).take(n) {
                assert!(
                    piece
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == pattern(shift + i)),
                    "wrong bytes"
                );
            }
        };
        let wait_go = |t: &mut ShmTransport, go: &mut u64, want: u64| {
            if *go >= want {
                return;
            }
            assert!(poll_until(t, Duration::from_secs(60), |s, m| {
                assert_eq!((s, m), (peer, &b"go"[..]));
                *go += 1;
                *go >= want
            }));
        };
        // bursts taking turns: rank 0 reads 8, says go; rank 1 reads 8, says go
        const ROUNDS: u64 = 24;
        for r in 0..ROUNDS {
            if me == 1 {
                wait_go(&mut t, &mut go, r + 1);
            }
            burst(&mut t, BURST, &mut go);
            t.try_send(peer, b"go", &[]).unwrap();
            if me == 0 {
                wait_go(&mut t, &mut go, r + 1);
            }
        }
        let bursts = t.pull_stats();
        if me == 0 {
            assert_eq!(bursts.followed, 0, "the leader follows no one: {bursts:?}");
        } else {
            // from its second burst on, rank 0's count has moved by 8 at each of its
            // first reads and not at the others: it follows every read
            assert!(bursts.followed >= (ROUNDS - 1) * BURST as u64, "{bursts:?}");
        }
        // a ping-pong of single reads: after FOLLOW_FOR turns each judges alone
        const TURNS: u64 = 3 * transport_shm::FOLLOW_FOR as u64;
        for r in 0..TURNS {
            let want = ROUNDS + r + 1;
            if me == 1 {
                wait_go(&mut t, &mut go, want);
            }
            burst(&mut t, 1, &mut go);
            t.try_send(peer, b"go", &[]).unwrap();
            if me == 0 {
                wait_go(&mut t, &mut go, want);
            }
        }
        let turns = t.pull_stats();
        assert!(
            turns.followed - bursts.followed <= u64::from(transport_shm::FOLLOW_FOR),
            "{turns:?}"
        );
        // the peer may still need this rank to serve its last read
        t.try_send(peer, b"go", &[]).unwrap();
        wait_go(&mut t, &mut go, ROUNDS + TURNS + 1);
        drop(buf);
    });
}

/// A peer that does not poll does not stall a pull: the reader reads the rest itself
/// after `PATIENCE`, and a late peer finds nothing left to copy.
#[test]
fn pulls_a_busy_peer_leaves_are_read_back() {
    const LEN: usize = 3 << 20;
    run_ranks(
        "pulls_a_busy_peer_leaves_are_read_back",
        2,
        TIMEOUT,
        |env| {
            if env.rank == 1 {
                let s = pull_owner(&env, LEN, false, false);
                assert_eq!(s.chunks_served, 0, "{s:?}");
                return;
            }
            let mut ex = env.exchange();
            let mut t = ShmTransport::new(&mut ex).unwrap();
            t.set_read_mode(ReadMode::Pull);
            ex.fence().unwrap();
            let d = remote_buf(&mut ex, 1);
            let mut dst = vec![0u8; LEN - 99];
            let t0 = Instant::now();
            assert_eq!(t.get(1, &mut dst, d, 99, 7).unwrap(), Posted::Pending);
            assert!(wait_reads(&mut t, &[7], &mut |s, _| panic!("message from {s}"))[0].is_ok());
            let took = t0.elapsed();
            assert!(dst.iter().enumerate().all(|(i, &b)| b == pattern(99 + i)));
            let s = t.pull_stats();
            assert_eq!(
                (s.pulls, s.taken_back, s.chunks_served_to_us),
                (1, 1, 0),
                "{s:?}"
            );
            assert!(took < Duration::from_secs(5), "took {took:?}");
            ex.fence().unwrap(); // the peer polls now: its ask is stale
            t.try_send(1, b"done", &[]).unwrap();
        },
    );
}

/// Rank 1's side of the push tests: exposes a zeroed buffer of `len` bytes, polls
/// (from the start if `poll`, else only after the second fence) until rank 0 says
/// "done", and checks at each of rank 0's notices `[off, len]`, sent after a push,
/// that the push's bytes are there (then zeroes them for the next). Returns its
/// transport's figures and the number of notices.
fn push_target(env: &RankEnv, len: usize, poll: bool) -> (PushStats, u64) {
    let mut ex = env.exchange();
    let mut t = ShmTransport::new(&mut ex).unwrap();
    let mut buf = vec![0u8; len];
    publish_u64(&mut ex, "buf.addr", buf.as_mut_ptr() as u64);
    publish_u64(&mut ex, "buf.len", len as u64);
    ex.fence().unwrap();
    if !poll {
        ex.fence().unwrap(); // rank 0 has written everything itself
    }
    let (mut done, mut notices) = (false, 0);
    let end = Instant::now() + Duration::from_secs(60);
    while !done {
        t.poll(64, &mut |s, m| {
            assert_eq!(s, 0);
            if m == b"done" {
                done = true;
                return;
            }
            let off = u64::from_le_bytes(m[..8].try_into().unwrap()) as usize;
            let n = u64::from_le_bytes(m[8..16].try_into().unwrap()) as usize;
            // the transport wrote the bytes inside `poll`, before handing over this
            // later message
            let got = &mut buf[off..off + n];
            let bad = got
                .iter()
                .enumerate()
                .position(|(i, &b)| b != pattern(off + i));
            assert!(
                bad.is_none(),
                "push of {n} B at {off}: bytes missing when its notice came, from {bad:?}"
            );
            got.fill(0);
            notices += 1;
        })
        .unwrap();
        assert!(Instant::now() < end, "rank 0 never finished");
    }
    assert!(buf.iter().all(|&b| b == 0), "bytes outside the pushes");
    (t.push_stats(), notices)
}

/// Rank 0's side of the busy-receiver tests, up to its write: its exchange and
/// transport (writing in `mode`), rank 1's buffer of `len` bytes, and the bytes for
/// it from offset 99 on.
fn busy_writer(
    env: &RankEnv,
    mode: WriteMode,
    len: usize,
) -> (FileExchange, ShmTransport, RemoteBuf, Vec<u8>) {
    let mut ex = env.exchange();
    let mut t = ShmTransport::new(&mut ex).unwrap();
    t.set_write_mode(mode);
    ex.fence().unwrap();
    let d = remote_buf(&mut ex, 1);
    (ex, t, d, (99..len).map(pattern).collect())
}

/// Rank 0's last words to `push_target`: the notice of a write of `len` bytes at
/// `off`, then "done".
fn notice_then_done(t: &mut ShmTransport, off: usize, len: usize) {
    let mut notice = (off as u64).to_le_bytes().to_vec();
    notice.extend_from_slice(&(len as u64).to_le_bytes());
    t.try_send(1, &notice, &[]).unwrap();
    t.try_send(1, b"done", &[]).unwrap();
}

/// Large direct writes pushed through the ring and copied out by the receiver as it
/// polls, at odd sizes and offsets: each push's bytes are there when the control
/// message sent after it arrives, and the receiver copied every chunk.
#[test]
fn pushes_are_taken_by_the_receiver() {
    const LEN: usize = 3 << 20;
    let cases = [
        (PUSH_FROM, 0),
        (PUSH_FROM + 1, 7),
        (5 * PUSH_CHUNK - 3, 4099),
        (PUSH_BUDGET as usize + 12_345, 100_001),
        (LEN - 70_001, 70_001),
        (LEN, 0),
    ];
    let chunks: u64 = cases
        .iter()
        .map(|&(n, _)| n.div_ceil(PUSH_CHUNK) as u64)
        .sum();
    run_ranks("pushes_are_taken_by_the_receiver", 2, TIMEOUT, |env| {
        if env.rank == 1 {
            let (s, notices) = push_target(&env, LEN, true);
            assert_eq!(notices, cases.len() as u64);
            assert_eq!(
                s,
                PushStats {
                    chunks_taken: chunks,
                    ..PushStats::default()
                }
            );
            return;
        }
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        t.set_write_mode(WriteMode::Push);
        t.set_push_patience(Duration::from_secs(3600)); // the receiver copies every chunk
        ex.fence().unwrap();
        let d = remote_buf(&mut ex, 1);
        for (k, &(len, off)) in cases.iter().enumerate() {
            let src: Vec<u8> = (off..off + len).map(pattern).collect();
            assert_eq!(
                t.put(1, &src, d, off as u64, k as u64).unwrap(),
                Posted::Done
            );
            let mut notice = (off as u64).to_le_bytes().to_vec();
            notice.extend_from_slice(&(len as u64).to_le_bytes());
            t.try_send(1, &notice, &[]).unwrap();
        }
        // out of bounds: refused before anything moves
        assert!(matches!(
            t.put(1, &vec![1u8; PUSH_FROM], d, (LEN - PUSH_FROM + 1) as u64, 9),
            Err(TransportError::OutOfBounds { .. })
        ));
        t.try_send(1, b"done", &[]).unwrap();
        assert_eq!(
            t.push_stats(),
            PushStats {
                pushes: cases.len() as u64,
                chunks_pushed: chunks,
                ..PushStats::default()
            }
        );
    });
}

/// A receiver that does not poll does not stall a push: the sender writes the rest
/// itself after `PUSH_FIRST_PATIENCE`, having put no more than `PUSH_START` bytes in
/// the ring, and the late receiver skips the chunks left there instead of copying them.
#[test]
fn pushes_to_a_busy_receiver_are_written_back() {
    const LEN: usize = 3 << 20;
    run_ranks(
        "pushes_to_a_busy_receiver_are_written_back",
        2,
        TIMEOUT,
        |env| {
            if env.rank == 1 {
                let (s, notices) = push_target(&env, LEN, false);
                assert_eq!(notices, 1);
                assert_eq!(s.chunks_taken, 0, "{s:?}");
                // what the sender put in the ring before the first claim it waited for
                assert_eq!(s.chunks_skipped, PUSH_START / PUSH_CHUNK as u64, "{s:?}");
                return;
            }
            let (mut ex, mut t, d, src) = busy_writer(&env, WriteMode::Push, LEN);
            let t0 = Instant::now();
            assert_eq!(t.put(1, &src, d, 99, 7).unwrap(), Posted::Done);
            let took = t0.elapsed();
            let s = t.push_stats();
            assert_eq!(
                (s.pushes, s.taken_back, s.chunks_pushed),
                (1, 1, PUSH_START / PUSH_CHUNK as u64),
                "{s:?}"
            );
            assert!(took < Duration::from_secs(5), "took {took:?}");
            ex.fence().unwrap(); // the receiver polls now
            notice_then_done(&mut t, 99, LEN - 99);
        },
    );
}

/// Polls until `poll_done` has reported `token` (handing messages to `msg`); returns
/// its outcome.
fn wait_put(t: &mut ShmTransport, token: u64, msg: &mut dyn FnMut(Rank, &[u8])) {
    let end = Instant::now() + Duration::from_secs(60);
    let mut done = false;
    while !done {
        t.poll(64, msg).unwrap();
        t.poll_done(&mut |tok, r| {
            assert_eq!(tok, token, "a token we did not wait for");
            r.unwrap();
            done = true;
        })
        .unwrap();
        assert!(Instant::now() < end, "offer {token} never finished");
    }
}

/// Large direct writes offered to a receiver that polls, at odd sizes and offsets:
/// `put` returns at once, the notice sent right after it finds the bytes in place
/// (the receiver read them first), and the receiver read every offer.
#[test]
fn offers_are_read_by_the_receiver() {
    const LEN: usize = 3 << 20;
    let cases = [
        (PUSH_FROM, 0),
        (PUSH_FROM + 1, 7),
        (PUSH_BUDGET as usize + 12_345, 100_001),
        (LEN - 70_001, 70_001),
        (LEN, 0),
    ];
    run_ranks("offers_are_read_by_the_receiver", 2, TIMEOUT, |env| {
        if env.rank == 1 {
            let (s, notices) = push_target(&env, LEN, true);
            assert_eq!(notices, cases.len() as u64);
            let want = PushStats {
                offers_read: cases.len() as u64,
                ..PushStats::default()
            };
            assert_eq!(s, want);
            return;
        }
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        t.set_write_mode(WriteMode::Cma);
        t.set_push_patience(Duration::from_secs(3600)); // the receiver reads each
        ex.fence().unwrap();
        let d = remote_buf(&mut ex, 1);
        for (k, &(len, off)) in cases.iter().enumerate() {
            let src: Vec<u8> = (off..off + len).map(pattern).collect();
            let token = 2 * k as u64;
            assert_eq!(
                t.put(1, &src, d, off as u64, token).unwrap(),
                Posted::Pending
            );
            let mut notice = (off as u64).to_le_bytes().to_vec();
            notice.extend_from_slice(&(len as u64).to_le_bytes());
            t.try_send(1, &notice, &[]).unwrap();
            wait_put(&mut t, token, &mut |_, _| panic!("rank 1 sends nothing"));
        }
        t.try_send(1, b"done", &[]).unwrap();
        let want = PushStats {
            offers: cases.len() as u64,
            ..PushStats::default()
        };
        assert_eq!(t.push_stats(), want);
    });
}

/// A receiver that does not poll does not stall an offer: the sender writes it
/// itself after `OFFER_PATIENCE`, when it next looks, and the late receiver skips
/// the record.
#[test]
fn offers_to_a_busy_receiver_are_written_back() {
    const LEN: usize = 1 << 20;
    run_ranks(
        "offers_to_a_busy_receiver_are_written_back",
        2,
        TIMEOUT,
        |env| {
            if env.rank == 1 {
                let (s, notices) = push_target(&env, LEN, false);
                assert_eq!(notices, 1);
                let want = PushStats {
                    offers_skipped: 1,
                    ..PushStats::default()
                };
                assert_eq!(s, want);
                return;
            }
            let (mut ex, mut t, d, src) = busy_writer(&env, WriteMode::Cma, LEN);
            let t0 = Instant::now();
            assert_eq!(t.put(1, &src, d, 99, 4).unwrap(), Posted::Pending);
            wait_put(&mut t, 4, &mut |_, _| panic!("rank 1 does not poll"));
            assert!(t0.elapsed() < Duration::from_secs(5));
            let want = PushStats {
                offers: 1,
                offers_written: 1,
                ..PushStats::default()
            };
            assert_eq!(t.push_stats(), want);
            ex.fence().unwrap(); // the receiver polls now
            notice_then_done(&mut t, 99, LEN - 99);
        },
    );
}

/// Two ranks offering to each other at once, round after round, at random sizes and
/// offsets, each sometimes busy for a while before it polls (so that offers are read,
/// written back, and crossed): every offer finishes, its bytes are in place when its
/// notice comes, and nothing outside it is touched.
#[test]
fn offers_crossing_both_ways() {
    const LEN: usize = 1 << 20;
    const ROUNDS: u64 = 300;
    run_ranks("offers_crossing_both_ways", 2, TIMEOUT, |env| {
        let mut ex = env.exchange();
        let mut t = ShmTransport::new(&mut ex).unwrap();
        t.set_write_mode(WriteMode::Cma);
        let me = env.rank;
        let peer = 1 - me;
        let mut buf = vec![0u8; LEN];
        publish_u64(&mut ex, "buf.addr", buf.as_mut_ptr() as u64);
        publish_u64(&mut ex, "buf.len", LEN as u64);
        ex.fence().unwrap();
        let d = remote_buf(&mut ex, peer);
        // the block `from` writes in `round`: (offset, length, first pattern index)
        let shape = |from: Rank, round: u64| {
            let mut r = 0x9e37_79b9_7f4a_7c15 ^ (round << 1 | from as u64);
            let len = PUSH_FROM + (common::next_rand(&mut r) as usize % (LEN - PUSH_FROM));
            let off = common::next_rand(&mut r) as usize % (LEN - len + 1);
            (off, len, (common::next_rand(&mut r) % 1000) as usize)
        };
        let mut src = Vec::new();
        for round in 0..ROUNDS {
            let (off, len, p) = shape(me, round);
            src.clear();
            src.extend((p..p + len).map(pattern));
            let posted = t.put(peer, &src, d, off as u64, round * 2).unwrap();
            t.try_send(peer, &round.to_le_bytes(), &[]).unwrap();
            if round % 5 == u64::from(me) {
                // busy: the peer's offer waits, or is written back
                std::thread::sleep(Duration::from_micros(50));
            }
            // the peer's notice for this round, and its bytes in place
            let (mut noticed, mut done, mut ok) = (false, posted == Posted::Done, false);
            let end = Instant::now() + Duration::from_secs(60);
            while !(noticed && done) {
                t.poll(64, &mut |s, m| {
                    if noticed {
                        // the peer is done with this round already
                        assert_eq!((s, m, ok), (peer, &b"ok"[..], false));
                        ok = true;
                        return;
                    }
                    assert_eq!((s, m), (peer, &round.to_le_bytes()[..]));
                    let (off, len, p) = shape(peer, round);
                    let bad = buf[off..off + len]
                        .iter()
                        .enumerate()
                        .position(|(i, &b)| b != pattern(p + i));
                    assert!(bad.is_none(), "round {round}: byte {bad:?} not written");
                    buf[off..off + len].fill(0);
                    noticed = true;
                })
                .unwrap();
                t.poll_done(&mut |tok, r| {
                    assert_eq!(tok, round * 2);
                    r.unwrap();
                    done = true;
                })
                .unwrap();
                assert!(Instant::now() < end, "round {round}: stuck");
            }
            // the peer has checked this round's bytes before the next round writes
            // (one message at a time: its next notice may follow at once)
            t.try_send(peer, b"ok", &[]).unwrap();
            while !ok {
                t.poll(1, &mut |s, m| {
                    assert_eq!((s, m), (peer, &b"ok"[..]));
                    ok = true;
                })
                .unwrap();
                assert!(Instant::now() < end, "round {round}: no ok");
            }
        }
        assert!(buf.iter().all(|&b| b == 0), "bytes outside the offers");
        let s = t.push_stats();
        assert_eq!(s.offers, ROUNDS, "{s:?}");
        assert_eq!(s.offers_read + s.offers_skipped, ROUNDS, "{s:?}");
    });
}

#[test]
fn segments_are_0600_and_unlinked_after_init() {
    run_ranks(
        "segments_are_0600_and_unlinked_after_init",
        3,
        TIMEOUT,
        |env| {
            /// Checks every rank's segment at the first fence, when all must exist.
            struct Checking(FileExchange, String, u32, bool);
            impl Exchange for Checking {
                fn rank(&self) -> Rank {
                    self.0.rank()
                }
                fn size(&self) -> u32 {
                    self.0.size()
                }
                fn job_id(&self) -> &str {
                    self.0.job_id()
                }
                fn publish(&mut self, k: &str, v: &[u8]) -> Result<(), TransportError> {
                    self.0.publish(k, v)
                }
                fn lookup(&mut self, r: Rank, k: &str) -> Result<Vec<u8>, TransportError> {
                    self.0.lookup(r, k)
                }
                fn fence(&mut self) -> Result<(), TransportError> {
                    let first = self.0.fences() == 0;
                    self.0.fence()?;
                    if first {
                        // Past the first fence every rank has created its segment, and
                        // none may unlink it before the second.
                        for r in 0..self.2 {
                            let md = std::fs::metadata(segment_path(&self.1, r))
                                .expect("segment exists");
                            assert_eq!(
                                md.permissions().mode() & 0o7777,
                                0o600,
                                "mode of rank {r}'s segment"
                            );
                            assert!(md.len() > 2 << 20);
                        }
                        self.3 = true;
                    }
                    Ok(())
                }
            }
            let mut ex = Checking(env.exchange(), env.job_id.clone(), env.size, false);
            let mut t = ShmTransport::new(&mut ex).unwrap();
            assert!(ex.3, "the first fence was not reached");
            // After init every rank's name is gone, yet the rings work.
            let mut ex = ex.0;
            ex.fence().unwrap();
            for r in 0..env.size {
                assert!(
                    !segment_path(&env.job_id, r).exists(),
                    "segment of rank {r} still linked"
                );
            }
            let next = (env.rank + 1) % env.size;
            t.try_send(next, b"hi", &env.rank.to_le_bytes()).unwrap();
            let prev = (env.rank + env.size - 1) % env.size;
            assert!(poll_until(&mut t, Duration::from_secs(30), |s, m| {
                assert_eq!(
                    (s, m),
                    (prev, &[b"hi".as_slice(), &prev.to_le_bytes()].concat()[..])
                );
                true
            }));
            drop(t);
            assert!(!segment_path(&env.job_id, env.rank).exists());
        },
    );
}

fn crash_body(env: &RankEnv) {
    let mut ex = env.exchange();
    let mut t = ShmTransport::new(&mut ex).unwrap();
    let mut buf = vec![0u8; 4096];
    if env.rank == 1 {
        for i in 0..10u32 {
            t.try_send(0, &i.to_le_bytes(), &[]).unwrap();
        }
        std::process::abort();
    }
    let d = t.expose(buf.as_mut_ptr() as usize, buf.len()).unwrap();
    let mut k = 0u32;
    // The 10 messages sent before the crash arrive; then nothing, without hanging.
    assert!(poll_until(&mut t, Duration::from_secs(30), |s, m| {
        assert_eq!((s, m), (1, &k.to_le_bytes()[..]));
        k += 1;
        k == 10
    }));
    let end = Instant::now() + Duration::from_secs(30);
    while t.peer_alive(1) {
        assert_eq!(
            t.poll(16, &mut |s, _| panic!("message from {s} after its crash"))
                .unwrap(),
            0
        );
        assert!(Instant::now() < end, "crash of rank 1 not noticed");
        std::thread::sleep(Duration::from_millis(1));
    }
    // A dead peer's ring is still mapped: sending does not fail or hang.
    t.try_send(1, b"anyone?", &[]).unwrap();
    // One-sided access to the dead peer reports it (the parent reaps it quickly).
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        match t.put(1, &[1, 2, 3], d, 0, 0) {
            Err(TransportError::PeerGone(1, _)) => break,
            other => assert!(Instant::now() < end, "put to a dead peer: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut b = [0u8; 3];
    assert!(matches!(
        t.get(1, &mut b, d, 0, 0),
        Err(TransportError::PeerGone(1, _))
    ));
    // A large read from it, as a pull: asked, never served, and reported gone when
    // the reader reads it back itself.
    t.set_read_mode(transport_shm::ReadMode::Pull);
    let mut big = vec![0u8; 1 << 20];
    let far = RemoteBuf {
        addr: 1 << 30,
        len: 1 << 20,
        key: 0,
    };
    assert_eq!(t.get(1, &mut big, far, 0, 5).unwrap(), Posted::Pending);
    let r = wait_reads(&mut t, &[5], &mut |s, _| panic!("message from {s}"));
    assert!(matches!(r[0], Err(TransportError::PeerGone(1, _))), "{r:?}");
    // A large write to it, as a push: never taken, and reported gone when the writer
    // writes it itself.
    t.set_write_mode(WriteMode::Push);
    let r = t.put(1, &big, far, 0, 6);
    assert!(matches!(r, Err(TransportError::PeerGone(1, _))), "{r:?}");
    mark_ran(env);
}

#[test]
fn crash_of_a_peer_does_not_hang() {
    const ROLE: &str = "crash_of_a_peer_does_not_hang";
    if let Some(env) = child_env(ROLE) {
        return crash_body(&env);
    }
    let out = spawn_ranks(ROLE, 2, TIMEOUT);
    assert!(out.status[0].success(), "rank 0: {}", out.status[0]);
    assert!(out.ran[0], "rank 0 did not run the test body");
    assert_eq!(
        out.status[1].signal(),
        Some(6),
        "rank 1 should have aborted: {}",
        out.status[1]
    );
    // Rank 1 had unlinked its segment at init, so the crash left nothing behind.
    assert!(out.left.is_empty(), "left in /dev/shm: {:?}", out.left);
}

#[test]
fn peer_missing_at_startup_fails_cleanly() {
    const ROLE: &str = "peer_missing_at_startup_fails_cleanly";
    if let Some(env) = child_env(ROLE) {
        if env.rank == 1 {
            std::process::abort(); // dies before joining
        }
        let mut ex = env.exchange().with_timeout(Duration::from_secs(2));
        let e = ShmTransport::new(&mut ex).unwrap_err();
        assert!(matches!(e, TransportError::Exchange(_)), "{e:?}");
        assert!(
            !segment_path(&env.job_id, 0).exists(),
            "segment left after failed init"
        );
        mark_ran(&env);
        return;
    }
    let out = spawn_ranks(ROLE, 2, TIMEOUT);
    assert!(
        out.status[0].success() && out.ran[0],
        "rank 0: {}",
        out.status[0]
    );
    assert_eq!(out.status[1].signal(), Some(6));
    assert!(out.left.is_empty(), "left in /dev/shm: {:?}", out.left);
}

/// Two "nodes" of two ranks each ({0, 2} and {1, 3}): each transport serves its own
/// node only, traffic inside a node flows, and the ranks of the other node are not
/// reachable through it.
#[test]
fn local_subsets_of_a_job() {
    run_ranks("local_subsets_of_a_job", 4, TIMEOUT, |env| {
        let node: Vec<Rank> = (0..env.size).filter(|r| r % 2 == env.rank % 2).collect();
        let mut t = ShmTransport::with_local(&mut env.exchange(), &node).unwrap();
        assert_eq!(t.local_ranks(), &node[..]);
        let far = (env.rank + 1) % env.size;
        assert!(matches!(
            t.try_send(far, b"x", b""),
            Err(TransportError::NoSuchRank(r)) if r == far
        ));
        assert!(t.peer_pid(far).is_none());
        assert!(t.peer_pid(node[0]).is_some());
        stream_exchange(&mut t, &node, &node, 3_000, Duration::from_secs(100));
    });
}

#[test]
fn local_subset_must_include_this_rank() {
    let dir = std::env::temp_dir().join(format!("shm-subset-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ex = FileExchange::new(&dir, 0, 2, format!("subset{}", std::process::id()));
    let e = ShmTransport::with_local(&mut ex, &[1]).unwrap_err();
    assert!(e.to_string().contains("must include rank 0"), "{e}");
    let e = ShmTransport::with_local(&mut ex, &[0, 2]).unwrap_err();
    assert!(e.to_string().contains("below 2"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rank that fails ends its job `AFTER_FAILURE` later, not at the test's timeout:
/// its peer, which would wait for it until then, is killed, and the failure names
/// both ranks.
#[test]
fn a_failed_rank_ends_the_job_early() {
    const ROLE: &str = "a_failed_rank_ends_the_job_early";
    if let Some(env) = child_env(ROLE) {
        if env.rank == 1 {
            panic!("rank 1 fails on purpose");
        }
        // a peer that would wait for the failed rank until the test's timeout
        std::thread::sleep(Duration::from_secs(120));
        mark_ran(&env);
        return;
    }
    let t0 = Instant::now();
    let r = std::panic::catch_unwind(|| {
        run_ranks(ROLE, 2, Duration::from_secs(120), |_| {
            unreachable!("the ranks run the body above")
        })
    });
    let took = t0.elapsed();
    let e = r.expect_err("a job with a failed rank passed");
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("rank 0 (signal: 9") && msg.contains("rank 1 (exit status: 101)"),
        "{msg}"
    );
    assert!(
        took >= transport_shm::testing::AFTER_FAILURE && took < Duration::from_secs(60),
        "the job took {took:?}"
    );
}

//! Multi-process tests: each test re-runs this test binary as the ranks of a real job
//! started by the launcher (`launcher::run`), with the test's own name as filter.

use rsmpi::request;
use rsmpi::traits::*;
use rsmpi::{Error, ErrorClass};
use std::time::{Duration, Instant};

/// Runs `body` on `n` ranks of a real job; in the parent, asserts the job succeeded.
fn job(n: u32, name: &str, body: fn(&rsmpi::Universe)) {
    job_env(n, name, &[], body)
}

/// [`job`] with `env` set for every rank.
/// [`job_env`] twice, with `var` set to `read`, then to `ring` (a rank runs the body
/// once, in the mode its job was given).
fn read_and_ring(n: u32, name: &str, var: &str, body: fn(&rsmpi::Universe)) {
    let modes = match std::env::var_os("RSMPI_RANK") {
        Some(_) => &["read"][..],
        None => &["read", "ring"][..],
    };
    for mode in modes {
        job_env(n, name, &[(var, mode)], body);
    }
}

fn job_env(n: u32, name: &str, env: &[(&str, &str)], body: fn(&rsmpi::Universe)) {
    if std::env::var_os("RSMPI_RANK").is_some() {
        let u = rsmpi::initialize().expect("init");
        body(&u);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut j = launcher::Job::new(n, exe, ["--exact", name, "--nocapture", "--test-threads=1"]);
    j.timeout = Some(Duration::from_secs(60));
    j.prefix_output = true;
    j.env = env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    assert_eq!(
        launcher::run(&j).unwrap(),
        0,
        "job {name} on {n} ranks failed"
    );
}

/// Runs the test `name` on `n` ranks of a real job that is expected to fail (its
/// ranks run their own branch of the test); returns the job's exit code.
fn job_code(n: u32, name: &str) -> i32 {
    let exe = std::env::current_exe().unwrap();
    let mut j = launcher::Job::new(n, exe, ["--exact", name, "--test-threads=1"]);
    j.timeout = Some(Duration::from_secs(60));
    launcher::run(&j).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn sizes_across_the_eager_limit() {
    job(2, "sizes_across_the_eager_limit", |u| {
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        let e = rsmpi::DEFAULT_EAGER_LIMIT as usize;
        for (i, len) in [0usize, 1, e - 1, e, e + 1, 65536, 1 << 20, 3 << 20]
            .into_iter()
            .enumerate()
        {
            let tag = i as i32;
            if w.rank() == 0 {
                peer.send_with_tag(&pattern(len, 7)[..], tag);
                let (v, st) = peer.receive_vec_with_tag::<u8>(tag);
                assert_eq!(
                    (st.source_rank(), st.tag(), st.count_bytes()),
                    (1, tag, len as u64)
                );
                assert_eq!(v, pattern(len, 9));
            } else {
                let mut buf = vec![0u8; len];
                let st = peer.receive_into_with_tag(&mut buf[..], tag);
                assert_eq!(
                    (
                        st.source_rank(),
                        st.count(u8::equivalent_datatype()) as usize
                    ),
                    (0, len)
                );
                assert_eq!(buf, pattern(len, 7));
                peer.send_with_tag(&pattern(len, 9)[..], tag);
            }
        }
    });
}

/// Lone messages of 8-64 KiB read once by their receiver (`RSMPI_SHM_LONE=read`;
/// by default shared memory chooses by measurement, `transport-shm`'s `lone`): each
/// message of a ping-pong is read, a burst's first only (the others go eager while
/// it waits), two ranks that both send before they receive still meet, and every
/// byte arrives. With `ring` none is read.
#[test]
fn lone_messages_are_read_once() {
    fn body(u: &rsmpi::Universe) {
        let reading = std::env::var("RSMPI_SHM_LONE").as_deref() == Ok("read");
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        // a ping-pong: at the judged sizes' edges and between
        let sizes = [
            8 * 1024,
            8 * 1024 + 1,
            16 * 1024,
            16 * 1024 + 1,
            32 * 1024,
            40_000,
            65536,
        ];
        for (i, &len) in sizes.iter().enumerate() {
            let tag = i as i32;
            if w.rank() == 0 {
                peer.send_with_tag(&pattern(len, 3)[..], tag);
                let (v, st) = peer.receive_vec_with_tag::<u8>(tag);
                assert_eq!((st.tag(), v), (tag, pattern(len, 4)), "reply of {len} B");
            } else {
                let (v, st) = peer.receive_vec_with_tag::<u8>(tag);
                assert_eq!((st.tag(), v), (tag, pattern(len, 3)), "{len} B");
                peer.send_with_tag(&pattern(len, 4)[..], tag);
            }
        }
        // 8 KiB is not judged (`transport_shm::LONE_READ_ABOVE`)
        let lone = u.stats().lone_reads;
        assert_eq!(lone, if reading { 6 } else { 0 }, "{}", u.stats());
        // a burst of 8 while the receiver sleeps: only the first is lone
        const N: usize = 8;
        const LEN: usize = 40_000;
        if w.rank() == 0 {
            let data: Vec<Vec<u8>> = (0..N).map(|i| pattern(LEN, i as u8)).collect();
            request::scope(|sc| {
                let reqs: Vec<_> = data
                    .iter()
                    .map(|d| peer.immediate_send_with_tag(sc, &d[..], 20))
                    .collect();
                for r in reqs {
                    r.wait();
                }
            });
            assert_eq!(
                u.stats().lone_reads - lone,
                u64::from(reading),
                "{}",
                u.stats()
            );
        } else {
            std::thread::sleep(Duration::from_millis(300));
            for i in 0..N {
                let (v, _) = peer.receive_vec_with_tag::<u8>(20);
                assert!(v == pattern(LEN, i as u8), "burst message {i}");
            }
        }
        w.barrier();
        // both ranks send before they receive: each lone send is read into a staging
        // buffer as soon as it arrives, so both sends complete, as eager ones would
        let before = u.stats().lone_reads;
        let me = w.rank() as u8;
        peer.send_with_tag(&pattern(LEN, 10 + me)[..], 30);
        let (v, _) = peer.receive_vec_with_tag::<u8>(30);
        assert!(v == pattern(LEN, 11 - me), "exchanged message");
        assert_eq!(
            u.stats().lone_reads - before,
            u64::from(reading),
            "{}",
            u.stats()
        );
        w.barrier();
    }
    read_and_ring(2, "lone_messages_are_read_once", "RSMPI_SHM_LONE", body);
}

/// Streams both ways at once (`bibw`'s pattern): above the crossing floor
/// (`transport_shm::CROSS_READ_ABOVE`, 8 KiB) the messages that cross the peer's own
/// are read once by their receiver (docs/protocol.md rule 19), at and below it they
/// all go through the ring; every message arrives whole either way.
#[test]
fn streams_both_ways_are_read_above_the_crossing_floor() {
    fn body(u: &rsmpi::Universe) {
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        const WINDOW: usize = 16;
        for (k, len) in [8 * 1024, 8 * 1024 + 1, 16 * 1024].into_iter().enumerate() {
            let before = u.stats().cross_reads;
            let me = w.rank() as u8;
            for round in 0..8u8 {
                let out: Vec<Vec<u8>> = (0..WINDOW)
                    .map(|i| pattern(len, me ^ round ^ i as u8))
                    .collect();
                let mut inb = vec![vec![0u8; len]; WINDOW];
                request::scope(|sc| {
                    let recvs: Vec<_> = inb
                        .iter_mut()
                        .map(|b| peer.immediate_receive_into_with_tag(sc, &mut b[..], k as i32))
                        .collect();
                    let sends: Vec<_> = out
                        .iter()
                        .map(|d| peer.immediate_send_with_tag(sc, &d[..], k as i32))
                        .collect();
                    for r in sends {
                        r.wait();
                    }
                    for r in recvs {
                        r.wait();
                    }
                });
                for (i, b) in inb.iter().enumerate() {
                    let want = pattern(len, (1 - me) ^ round ^ i as u8);
                    assert!(*b == want, "{len} B, round {round}, message {i}");
                }
            }
            let read = u.stats().cross_reads - before;
            if len > 8 * 1024 {
                assert!(read > 0, "{len} B: none read: {}", u.stats());
            } else {
                assert_eq!(read, 0, "{len} B: {}", u.stats());
            }
            w.barrier();
        }
    }
    job(
        2,
        "streams_both_ways_are_read_above_the_crossing_floor",
        body,
    );
}

/// A one-way stream (`bw`'s pattern) of messages above the lone floor
/// (`transport_shm::LONE_READ_ABOVE`, 8 KiB): with `RSMPI_SHM_STREAM=read` every send
/// behind the first of a window is read once by its receiver (docs/protocol.md rule
/// 20), with `ring` none is; at and below the floor none is either way. Every message
/// arrives whole, whether its receive was posted before it came or after (then into a
/// staging buffer), and an oversized one is reported truncated with nothing written
/// past the receive's buffer.
#[test]
fn one_way_streams_are_read_where_advised() {
    fn body(u: &rsmpi::Universe) {
        let reading = std::env::var("RSMPI_SHM_STREAM").as_deref() == Ok("read");
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        const WINDOW: usize = 12;
        let sizes = [8 * 1024, 8 * 1024 + 1, 16 * 1024, 32 * 1024 + 7, 65536];
        for (k, len) in sizes.into_iter().enumerate() {
            for late in [false, true] {
                let tag = (2 * k + usize::from(late)) as i32;
                let before = u.stats().stream_reads;
                if w.rank() == 0 {
                    if late {
                        // the receiver posts after the messages came
                        w.barrier();
                    }
                    let out: Vec<Vec<u8>> =
                        (0..WINDOW).map(|i| pattern(len, (k + i) as u8)).collect();
                    request::scope(|sc| {
                        let sends: Vec<_> = out
                            .iter()
                            .map(|d| peer.immediate_send_with_tag(sc, &d[..], tag))
                            .collect();
                        for r in sends {
                            r.wait();
                        }
                    });
                    let read = u.stats().stream_reads - before;
                    if reading && len > 8 * 1024 {
                        // the first of the window is lone (rule 18), the rest a stream's
                        assert!(read >= (WINDOW - 2) as u64, "{len} B: {}", u.stats());
                    } else {
                        assert_eq!(read, 0, "{len} B: {}", u.stats());
                    }
                    if !late {
                        w.barrier();
                    }
                } else {
                    let mut inb = vec![vec![0u8; len]; WINDOW];
                    if late {
                        w.barrier();
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    request::scope(|sc| {
                        let recvs: Vec<_> = inb
                            .iter_mut()
                            .map(|b| peer.immediate_receive_into_with_tag(sc, &mut b[..], tag))
                            .collect();
                        if !late {
                            w.barrier();
                        }
                        for r in recvs {
                            r.wait();
                        }
                    });
                    for (i, b) in inb.iter().enumerate() {
                        assert!(*b == pattern(len, (k + i) as u8), "{len} B, message {i}");
                    }
                }
            }
        }
        // a stream's message larger than its receive: truncated, nothing written past
        const LEN: usize = 40_000;
        if w.rank() == 0 {
            let out: Vec<Vec<u8>> = (0..4).map(|i| pattern(LEN, 50 + i as u8)).collect();
            request::scope(|sc| {
                let sends: Vec<_> = out
                    .iter()
                    .map(|d| peer.immediate_send_with_tag(sc, &d[..], 99))
                    .collect();
                for r in sends {
                    r.wait();
                }
            });
        } else {
            for i in 0..4u8 {
                let mut b = vec![0xeeu8; LEN];
                let (head, tail) = b.split_at_mut(LEN - 100);
                let e = peer.try_receive_into_with_tag(head, 99).unwrap_err();
                assert_eq!(
                    e,
                    Error::Truncated {
                        len: LEN as u64,
                        capacity: (LEN - 100) as u64
                    },
                    "message {i}"
                );
                assert!(
                    tail.iter().all(|&x| x == 0xee),
                    "message {i} wrote past its buffer"
                );
                assert!(*head == pattern(LEN, 50 + i)[..LEN - 100], "message {i}");
            }
        }
        w.barrier();
    }
    read_and_ring(
        2,
        "one_way_streams_are_read_where_advised",
        "RSMPI_SHM_STREAM",
        body,
    );
}

/// Send and receive buffers at the relative page offsets that matter for 4 KiB
/// aliasing (`transport::copy`): the receive buffer 0, 16, 31 and 32 bytes past the
/// send buffer modulo 4 KiB, through the ring (whole and streamed records), lone reads
/// and rendezvous reads by `process_vm_readv` (through the bounce buffer where the
/// kernel's copy would alias, on a machine measured slow for it), and pulls.
#[test]
fn every_relative_page_offset_delivers_the_bytes() {
    fn body(u: &rsmpi::Universe) {
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        // one allocation, the messages placed from a page boundary
        let mut mem = vec![0u8; (1 << 20) + 3 * 4096];
        let base = (4096 - mem.as_ptr() as usize % 4096) % 4096 + 8;
        let sizes = [4096, 16 * 1024, 40_000, 65536, 256 * 1024, 1 << 20];
        for (i, &len) in sizes.iter().enumerate() {
            for (j, rel) in [0usize, 16, 31, 32].into_iter().enumerate() {
                let tag = (i * 4 + j) as i32;
                let want = pattern(len, tag as u8);
                if w.rank() == 0 {
                    mem[base..base + len].copy_from_slice(&want);
                    peer.send_with_tag(&mem[base..base + len], tag);
                } else {
                    let at = base + rel;
                    mem[at..at + len].fill(0);
                    peer.receive_into_with_tag(&mut mem[at..at + len], tag);
                    assert!(mem[at..at + len] == want[..], "{len} B at +{rel}");
                }
            }
        }
        w.barrier();
    }
    // (a rank runs the body once, in the modes its job was given)
    let modes = match std::env::var_os("RSMPI_RANK") {
        Some(_) => &[("auto", "auto")][..],
        None => &[("read", "cma"), ("ring", "pull"), ("auto", "auto")][..],
    };
    for (lone, read) in modes {
        job_env(
            2,
            "every_relative_page_offset_delivers_the_bytes",
            &[("RSMPI_SHM_LONE", lone), ("RSMPI_SHM_READ", read)],
            body,
        );
    }
}

#[test]
fn preposted_receives_take_the_one_sided_path() {
    job(2, "preposted_receives_take_the_one_sided_path", |u| {
        let w = u.world();
        const N: usize = 50;
        const LEN: usize = 16384;
        if w.rank() == 1 {
            // larger than the inline limit (64 KiB): these take the one-sided write
            let mut bufs = vec![[0u64; LEN]; N];
            request::scope(|sc| {
                let reqs: Vec<_> = bufs
                    .iter_mut()
                    .map(|b| {
                        w.process_at_rank(0)
                            .immediate_receive_into_with_tag(sc, &mut b[..], 3)
                    })
                    .collect();
                w.barrier();
                // do not call into the library while rank 0 sends
                std::thread::sleep(Duration::from_millis(800));
                for (i, r) in reqs.into_iter().enumerate() {
                    let st = r.wait();
                    assert_eq!(
                        (
                            st.source_rank(),
                            st.tag(),
                            st.count(u64::equivalent_datatype()) as usize
                        ),
                        (0, 3, LEN),
                        "receive {i}"
                    );
                }
            });
            for (i, b) in bufs.iter().enumerate() {
                assert_eq!(b, &[i as u64; LEN]);
            }
            w.process_at_rank(0).send(&0u8);
        } else {
            w.barrier();
            let t = Instant::now();
            for i in 0..N {
                w.process_at_rank(1).send_with_tag(&[i as u64; LEN][..], 3);
            }
            let took = t.elapsed();
            let s = u.stats();
            assert_eq!(
                s.direct_writes, N as u64,
                "every send should be a direct write: {s}"
            );
            assert!(
                took < Duration::from_millis(500),
                "sends waited for the sleeping receiver: {took:?}"
            );
            let _: (u8, _) = w.process_at_rank(1).receive();
        }
    });
}

#[test]
fn wildcards_report_the_real_source_and_tag() {
    job(3, "wildcards_report_the_real_source_and_tag", |u| {
        let w = u.world();
        if w.rank() == 0 {
            let mut seen = vec![];
            for _ in 0..4 {
                let (v, st) = w.any_process().receive::<i32>();
                assert_eq!(v, st.source_rank() * 100 + st.tag());
                seen.push((st.source_rank(), st.tag()));
            }
            seen.sort();
            assert_eq!(seen, vec![(1, 5), (1, 6), (2, 5), (2, 6)]);
            w.barrier();
            // ANY_SOURCE with a specific tag, then ANY_TAG from a specific source
            let (v, st) = w.any_process().receive_with_tag::<i32>(9);
            assert_eq!((v, st.tag()), (st.source_rank() * 100 + 9, 9));
            let other = 3 - st.source_rank();
            let (v, st) = w.process_at_rank(other).receive::<i32>();
            assert_eq!((v, st.source_rank(), st.tag()), (other * 100 + 9, other, 9));
        } else {
            let to = w.process_at_rank(0);
            for tag in [5, 6] {
                to.send_with_tag(&(w.rank() * 100 + tag), tag);
            }
            w.barrier();
            to.send_with_tag(&(w.rank() * 100 + 9), 9);
        }
    });
}

#[test]
fn non_overtaking_and_probe() {
    job(2, "non_overtaking_and_probe", |u| {
        let w = u.world();
        if w.rank() == 0 {
            for i in 0..200u32 {
                w.process_at_rank(1).send_with_tag(&i, (i % 3) as i32);
            }
        } else {
            let p = w.process_at_rank(0);
            let st = p.probe();
            assert_eq!(
                (
                    st.source_rank(),
                    st.tag(),
                    st.count(u32::equivalent_datatype()) as usize
                ),
                (0, 0, 1)
            );
            let (msg, st) = p.matched_probe();
            let mut v = 0u32;
            msg.receive_into(&mut v);
            assert_eq!((v, st.tag()), (0, 0));
            // the rest in order per tag, and overall in order with ANY_TAG
            let mut next = 1;
            while next < 200 {
                let (v, st) = p.receive::<u32>();
                assert_eq!((v, st.tag()), (next, (next % 3) as i32));
                next += 1;
            }
            assert!(p.immediate_probe().is_none());
        }
    });
}

#[test]
fn errors_are_reported_and_nothing_is_lost() {
    job(2, "errors_are_reported_and_nothing_is_lost", |u| {
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        let e = w.process_at_rank(5).try_send_with_tag(&1u8, 0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Rank);
        let e = peer.try_send_with_tag(&1u8, -3).unwrap_err();
        assert_eq!(e, Error::InvalidTag(-3));
        if w.rank() == 0 {
            // truncation: 16 bytes into an 8-byte buffer
            let mut small = [0u8; 8];
            let e = peer
                .try_receive_into_with_tag(&mut small[..], 1)
                .unwrap_err();
            assert_eq!(
                e,
                Error::Truncated {
                    len: 16,
                    capacity: 8
                }
            );
            assert_eq!(small, [7u8; 8]);
            // a message that is not a whole number of elements
            let mut words = [0u32; 4];
            let e = peer
                .try_receive_into_with_tag(&mut words[..], 2)
                .unwrap_err();
            assert_eq!(e.class(), ErrorClass::Count);
            // the next message is intact
            let (v, _) = peer.receive_with_tag::<u64>(3);
            assert_eq!(v, 42);
            w.barrier();
            // ready send with no receive posted is an error, and is not delivered
            let e = peer.try_ready_send_with_tag(&1u64, 4).unwrap_err();
            assert_eq!(e, Error::NoReceivePosted);
            w.barrier();
            peer.send_with_tag(&2u64, 4);
        } else {
            peer.send_with_tag(&[7u8; 16][..], 1);
            peer.send_with_tag(&[1u8; 5][..], 2);
            peer.send_with_tag(&42u64, 3);
            w.barrier();
            w.barrier();
            let (v, _) = peer.receive_with_tag::<u64>(4);
            assert_eq!(v, 2, "the failed ready send must not be delivered");
        }
    });
}

#[test]
fn modes_and_communicators() {
    job(2, "modes_and_communicators", |u| {
        let w = u.world();
        let d = w.duplicate();
        assert_eq!(w.compare(&d), rsmpi::CommunicatorRelation::Congruent);
        let peer = w.process_at_rank(1 - w.rank());
        let dpeer = d.process_at_rank(1 - w.rank());
        if w.rank() == 0 {
            // same tag on two communicators: each message stays in its own
            dpeer.send_with_tag(&1i32, 0);
            peer.send_with_tag(&2i32, 0);
            peer.synchronous_send_with_tag(&3i32, 1);
            u.buffer_attach(64).unwrap();
            peer.buffered_send_with_tag(&[4u8; 32][..], 2);
            let e = peer
                .try_buffered_send_with_tag(&[0u8; 100][..], 2)
                .unwrap_err();
            assert_eq!(e.class(), ErrorClass::Buffer);
            assert_eq!(u.buffer_detach().unwrap(), 64);
            let mut x = 0i32;
            let st = w.sendrecv(&10i32, 1, 5, &mut x, 1, 6);
            assert_eq!((x, st.tag()), (11, 6));
            // PROC_NULL
            let st = w.process_at_rank(rsmpi::PROC_NULL).receive_into(&mut x);
            assert_eq!(st.source_rank(), rsmpi::PROC_NULL);
            w.process_at_rank(rsmpi::PROC_NULL).send(&x);
        } else {
            let (a, _) = peer.receive_with_tag::<i32>(0);
            let (b, _) = dpeer.receive_with_tag::<i32>(0);
            assert_eq!((a, b), (2, 1));
            let (c, _) = peer.receive_with_tag::<i32>(1);
            assert_eq!(c, 3);
            let (v, _) = peer.receive_vec_with_tag::<u8>(2);
            assert_eq!(v, vec![4u8; 32]);
            let mut x = 0i32;
            let st = w.sendrecv(&11i32, 0, 6, &mut x, 0, 5);
            assert_eq!((x, st.tag()), (10, 5));
        }
    });
}

#[test]
fn cancel_a_posted_receive() {
    job(2, "cancel_a_posted_receive", |u| {
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        if w.rank() == 1 {
            let mut a = 0u32;
            let mut b = 0u32;
            request::scope(|sc| {
                let ra = peer.immediate_receive_into_with_tag(sc, &mut a, 1);
                let rb = peer.immediate_receive_into_with_tag(sc, &mut b, 2);
                ra.cancel();
                assert!(ra.wait().is_cancelled());
                w.barrier();
                let st = rb.wait();
                assert!(!st.is_cancelled());
            });
            assert_eq!(b, 22);
            let (v, _) = peer.receive_with_tag::<u32>(1);
            assert_eq!(
                v, 11,
                "the message for the cancelled receive goes to the next one"
            );
        } else {
            w.barrier();
            peer.send_with_tag(&11u32, 1);
            peer.send_with_tag(&22u32, 2);
        }
    });
}

#[test]
fn ring_on_four_ranks_oversubscribed() {
    job(4, "ring_on_four_ranks_oversubscribed", |u| {
        let w = u.world();
        let n = w.size();
        let next = w.process_at_rank((w.rank() + 1) % n);
        let prev = w.process_at_rank((w.rank() + n - 1) % n);
        for round in 0..100 {
            let out = vec![w.rank() as u64 * 1000 + round; 100];
            let mut got = vec![0u64; 100];
            request::scope(|sc| {
                let r = prev.immediate_receive_into_with_tag(sc, &mut got[..], 0);
                let s = next.immediate_send_with_tag(sc, &out[..], 0);
                s.wait();
                r.wait();
            });
            assert_eq!(
                got,
                vec![((w.rank() + n - 1) % n) as u64 * 1000 + round; 100]
            );
        }
        w.barrier();
    });
}

#[test]
fn a_panicking_rank_ends_the_job() {
    if std::env::var_os("RSMPI_RANK").is_some() {
        let u = rsmpi::initialize().unwrap();
        let w = u.world();
        if w.rank() == 1 {
            panic!("deliberate");
        }
        // rank 0 blocks in a receive that never completes
        let _: (u8, _) = w.process_at_rank(1).receive();
        return;
    }
    let t = Instant::now();
    let code = job_code(2, "a_panicking_rank_ends_the_job");
    assert_ne!(code, 0);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("rsmpi-{}-", std::process::id()))
        })
        .collect();
    assert!(left.is_empty(), "segments left: {left:?}");
}

#[test]
fn split_free_and_self() {
    job(4, "split_free_and_self", |u| {
        let w = u.world();
        let me = w.rank();
        // evens and odds, reversed order by key
        let half = w
            .split_by_color_with_key(rsmpi::topology::Color::with_value(me % 2), -me)
            .unwrap();
        assert_eq!(half.size(), 2);
        assert_eq!(half.rank(), if me < 2 { 1 } else { 0 });
        let other = half.process_at_rank(1 - half.rank());
        let mut got = -1i32;
        let st = half.sendrecv(&me, 1 - half.rank(), 0, &mut got, 1 - half.rank(), 0);
        assert_eq!(got, (me + 2) % 4);
        assert_eq!(
            st.source_rank(),
            1 - half.rank(),
            "status source is a rank of the new communicator"
        );
        let (v, st) = {
            other.send_with_tag(&(me * 10), 1);
            half.any_process().receive_with_tag::<i32>(1)
        };
        assert_eq!(
            (v, st.source_rank()),
            (((me + 2) % 4) * 10, 1 - half.rank())
        );
        assert_eq!(half.compare(&w), rsmpi::CommunicatorRelation::Unequal);
        let d = half.duplicate();
        assert_eq!(d.compare(&half), rsmpi::CommunicatorRelation::Congruent);
        // only rank 0 joins
        let solo = w.split_by_color(if me == 0 { Some(5) } else { None }.into());
        assert_eq!(solo.map(|c| c.size()), if me == 0 { Some(1) } else { None });
        // self
        let s = u.self_comm();
        assert_eq!((s.rank(), s.size()), (0, 1));
        s.process_at_rank(0).send_with_tag(&7u8, 3);
        let (x, st) = s.process_at_rank(0).receive_with_tag::<u8>(3);
        assert_eq!((x, st.source_rank()), (7, 0));
        // use after free
        let h = half;
        half.free().unwrap();
        let e = h.process_at_rank(0).try_send_with_tag(&1u8, 0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Comm);
        assert!(w.free().is_err(), "the world cannot be freed");
        w.barrier();
    });
}

#[test]
fn persistent_and_request_collections() {
    job(2, "persistent_and_request_collections", |u| {
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        let mut sbuf = [0u32; 4];
        let mut rbuf = [0u32; 4];
        request::scope(|sc| {
            let mut s = peer.send_init(sc, &mut sbuf[..], 9);
            let mut r = peer.receive_init(sc, &mut rbuf[..], Some(9));
            for i in 0..5u32 {
                s.with_buffer::<u32, _>(|b| b.fill(i * 10 + w.rank() as u32))
                    .unwrap();
                r.start().unwrap();
                s.start().unwrap();
                assert!(s.start().is_err(), "starting an active request");
                s.wait().unwrap();
                let st = r.wait().unwrap();
                assert_eq!(st.count(u32::equivalent_datatype()) as usize, 4);
                r.with_buffer::<u32, _>(|b| assert_eq!(b, [i * 10 + 1 - w.rank() as u32; 4]))
                    .unwrap();
            }
            assert!(r.wait().is_none(), "inactive");
        });
        // wait_any / wait_some / test_all with inactive entries
        let mut bufs = [[0u8; 2]; 3];
        let out = [[w.rank() as u8; 2]; 3];
        request::scope(|sc| {
            let mut reqs: Vec<Option<request::Request<_, _>>> = vec![None];
            for (i, b) in bufs.iter_mut().enumerate() {
                reqs.push(Some(peer.immediate_receive_into_with_tag(
                    sc,
                    &mut b[..],
                    i as i32,
                )));
            }
            reqs.push(None);
            for (i, o) in out.iter().enumerate().rev() {
                peer.send_with_tag(&o[..], i as i32);
            }
            let (first, st) = request::wait_any_of(&mut reqs).unwrap();
            assert!((1..=3).contains(&first));
            assert_eq!(st.tag(), first as i32 - 1);
            let mut done = vec![first];
            while done.len() < 3 {
                for (i, _) in request::wait_some(&mut reqs) {
                    done.push(i);
                }
            }
            done.sort();
            assert_eq!(done, vec![1, 2, 3]);
            assert!(request::wait_any_of(&mut reqs).is_none(), "all inactive");
            assert_eq!(request::test_all(&mut reqs), Some(vec![None; 5]));
        });
        assert_eq!(bufs, [[1 - w.rank() as u8; 2]; 3]);
        // sendrecv_replace
        let mut x = [w.rank() as u64; 3];
        w.sendrecv_replace(&mut x[..], 1 - w.rank(), 4, 1 - w.rank(), 4);
        assert_eq!(x, [1 - w.rank() as u64; 3]);
    });
}

#[test]
fn derived_datatypes() {
    job(2, "derived_datatypes", |u| {
        use rsmpi::{datatype::UserDatatype as Datatype, MutView, View};
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        let f = f64::equivalent_datatype();
        if w.rank() == 0 {
            // column 2 of a 4x5 row-major matrix
            let m: Vec<f64> = (0..20).map(|x| x as f64).collect();
            let col = Datatype::vector(4, 1, 5, &f);
            peer.send_with_tag(&View::new(&m[2..], 1, &col), 1);
            // two elements of an indexed type, immediate
            let idx = Datatype::indexed(&[1, 2], &[0, 3], &f);
            let v = View::new(&m[..], 2, &idx);
            request::scope(|sc| {
                peer.immediate_send_with_tag(sc, &v, 2).wait();
            });
            // struct with a gap, received on the other side as plain bytes
            #[derive(Clone, Copy, rsmpi::bytemuck::Pod, rsmpi::bytemuck::Zeroable)]
            #[repr(C)]
            struct P {
                a: u32,
                gap: u32,
                b: f64,
            }
            let ps = [
                P {
                    a: 1,
                    gap: 99,
                    b: 2.5,
                },
                P {
                    a: 3,
                    gap: 99,
                    b: 4.5,
                },
            ];
            let st = Datatype::structured(
                &[1, 1],
                &[0, 8],
                &[Datatype::of::<u32>(), Datatype::of::<f64>()],
            );
            let st = Datatype::structured(&[1, 1], &[0, 16], &[st, Datatype::bytes(0)]);
            assert_eq!(st.extent(), 16);
            let bytes: &[u8] = rsmpi::bytemuck::cast_slice(&ps[..]);
            peer.send_with_tag(&View::new(bytes, 2, &st), 3);
            // a view that does not fit its buffer is a datatype error
            let e = peer
                .try_send_with_tag(&View::new(&m[..4], 1, &col), 4)
                .unwrap_err();
            assert_eq!(e.class(), ErrorClass::Type);
        } else {
            let (v, st) = peer.receive_vec_with_tag::<f64>(1);
            assert_eq!(
                (v, st.count(f64::equivalent_datatype()) as usize),
                (vec![2.0, 7.0, 12.0, 17.0], 4)
            );
            // receive the indexed elements into a strided destination: every other slot
            let mut dst = vec![-1.0f64; 12];
            let every_other = Datatype::vector(6, 1, 2, &f);
            let mut mv = MutView::new(&mut dst[..], 1, &every_other);
            request::scope(|sc| {
                let st = peer.immediate_receive_into_with_tag(sc, &mut mv, 2).wait();
                assert_eq!(st.count_bytes(), 48);
            });
            // indexed {1 at 0, 2 at 3}, extent 5 elements: m[0], m[3], m[4], m[5], m[8], m[9]
            assert_eq!(
                dst,
                vec![0.0, -1.0, 3.0, -1.0, 4.0, -1.0, 5.0, -1.0, 8.0, -1.0, 9.0, -1.0]
            );
            let (raw, _) = peer.receive_vec_with_tag::<u8>(3);
            assert_eq!(raw.len(), 24);
            assert_eq!(raw[..4], 1u32.to_ne_bytes());
            assert_eq!(raw[4..12], 2.5f64.to_ne_bytes());
            assert_eq!(raw[12..16], 3u32.to_ne_bytes());
        }
    });
}

#[test]
fn cancel_sends_and_test() {
    job(2, "cancel_sends_and_test", |u| {
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        assert!(rsmpi::time_resolution() > 0.0 && rsmpi::time() >= 0.0);
        let (_, level) = (0, rsmpi::Threading::Funneled);
        assert!(level >= rsmpi::Threading::Single);
        if w.rank() == 0 {
            // a rendezvous send nobody receives: cancel wins
            let big = vec![5u8; 1 << 20];
            let small = [6u8; 8];
            request::scope(|sc| {
                let s = peer.immediate_send_with_tag(sc, &big[..], 1);
                let s = match s.test() {
                    Ok(_) => panic!("a rendezvous send cannot complete before a receive"),
                    Err(s) => s,
                };
                s.cancel();
                assert!(s.wait().is_cancelled());
                // a synchronous send that is received: cancel loses
                let s = peer.immediate_synchronous_send_with_tag(sc, &small[..], 2);
                w.barrier();
                s.cancel();
                assert!(!s.wait().is_cancelled());
            });
            w.barrier();
        } else {
            let (v, _) = peer.receive_vec_with_tag::<u8>(2);
            assert_eq!(v, vec![6u8; 8]);
            w.barrier();
            w.barrier();
            // the cancelled message never arrives
            assert!(peer.immediate_probe_with_tag(1).is_none());
        }
    });
}

/// `request::wait_all` over a window of every kind of request, as the message-rate
/// loops use it: receives into lent buffers from the world and from a communicator
/// whose ranks are reversed (a wildcard source among them), sends that leave at once,
/// a large receive and send that take the rendezvous, an empty message, and inactive
/// entries. Each status is the request's own, in order, and every buffer is whole.
#[test]
fn wait_all_takes_every_kind_in_order() {
    job(2, "wait_all_takes_every_kind_in_order", |u| {
        let w = u.world();
        let me = w.rank();
        let peer = w.process_at_rank(1 - me);
        let rev = w
            .split_by_color_with_key(rsmpi::topology::Color::with_value(0), -me)
            .expect("in the split");
        assert_eq!(rev.rank(), 1 - me, "ranks reversed");
        let rpeer = rev.process_at_rank(me);
        let big = 1 << 20;
        let out_small = pattern(8, me as u8);
        let out_big = pattern(big, 40 + me as u8);
        for round in 0..3 {
            let mut a = [0u8; 8];
            let mut b = [0u8; 8];
            let mut c = vec![0u8; big];
            let mut d = [0u8; 0];
            let mut many = vec![[0u8; 8]; 64];
            request::scope(|sc| {
                let mut reqs: Vec<Option<request::Request<'_, [u8], _>>> = vec![None];
                reqs.push(Some(peer.immediate_receive_into_with_tag(
                    sc,
                    &mut a[..],
                    0,
                )));
                reqs.push(Some(rev.any_process().immediate_receive_into_with_tag(
                    sc,
                    &mut b[..],
                    1,
                )));
                reqs.push(Some(peer.immediate_send_with_tag(sc, &out_small[..], 0)));
                reqs.push(None);
                reqs.push(Some(peer.immediate_receive_into_with_tag(
                    sc,
                    &mut c[..],
                    2,
                )));
                reqs.push(Some(peer.immediate_send_with_tag(sc, &out_big[..], 2)));
                reqs.push(Some(rpeer.immediate_send_with_tag(sc, &out_small[..], 1)));
                reqs.push(Some(peer.immediate_receive_into_with_tag(
                    sc,
                    &mut d[..],
                    3,
                )));
                reqs.push(Some(peer.immediate_send_with_tag(sc, &[0u8; 0][..], 3)));
                for (i, m) in many.iter_mut().enumerate() {
                    reqs.push(Some(peer.immediate_receive_into_with_tag(
                        sc,
                        &mut m[..],
                        10 + i as i32,
                    )));
                }
                // the window's messages sent in reverse, so that some are early and
                // some wait for their turn
                for i in (0..64i32).rev() {
                    reqs.push(Some(peer.immediate_send_with_tag(
                        sc,
                        &out_small[..],
                        10 + i,
                    )));
                }
                if round == 1 {
                    // the messages there before the wait
                    std::thread::sleep(Duration::from_millis(20));
                }
                let st = request::wait_all(&mut reqs);
                assert!(reqs.iter().all(Option::is_none), "every request taken");
                assert_eq!(st.len(), reqs.len());
                assert!(st[0].is_none() && st[4].is_none(), "inactive entries");
                let s = |i: usize| st[i].expect("active");
                let got = |i: usize| (s(i).source_rank(), s(i).tag(), s(i).count_bytes());
                assert_eq!(got(1), (1 - me, 0, 8));
                // the reversed communicator's rank of the peer, not its world rank
                assert_eq!(got(2), (me, 1, 8));
                assert_eq!(got(5), (1 - me, 2, big as u64));
                assert_eq!(got(8), (1 - me, 3, 0));
                for i in 0..64 {
                    assert_eq!(got(10 + i), (1 - me, 10 + i as i32, 8));
                }
                for i in [3, 6, 7, 9] {
                    assert!(!s(i).is_cancelled());
                }
            });
            let theirs = pattern(8, 1 - me as u8);
            assert_eq!(&a[..], &theirs[..]);
            assert_eq!(&b[..], &theirs[..]);
            assert_eq!(c, pattern(big, 40 + 1 - me as u8));
            assert!(many.iter().all(|m| m[..] == theirs[..]));
        }
    });
}

/// A truncated receive in `request::wait_all` is an error that ends the job (the
/// default handler, as `wait` does), not a status or a hang.
#[test]
fn wait_all_truncation_ends_the_job() {
    if std::env::var_os("RSMPI_RANK").is_some() {
        let u = rsmpi::initialize().unwrap();
        let w = u.world();
        let peer = w.process_at_rank(1 - w.rank());
        if w.rank() == 0 {
            let mut small = [0u8; 4];
            let mut fine = [0u8; 8];
            request::scope(|sc| {
                let mut reqs = vec![
                    Some(peer.immediate_receive_into_with_tag(sc, &mut fine[..], 0)),
                    Some(peer.immediate_receive_into_with_tag(sc, &mut small[..], 1)),
                ];
                request::wait_all(&mut reqs);
            });
            // not reached: the job ends in wait_all
            std::process::exit(0);
        } else {
            peer.send_with_tag(&[1u8; 8][..], 0);
            peer.send_with_tag(&[2u8; 8][..], 1);
            w.barrier();
        }
        return;
    }
    let t = Instant::now();
    let code = job_code(2, "wait_all_truncation_ends_the_job");
    assert_ne!(code, 0, "a truncated receive in wait_all must end the job");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
}

//! Start-up and argument checks over real processes: ranks that chose different
//! providers, a rank that cannot open its provider, `prefer_external`, a single rank's
//! argument checks, and `Full` when the receiver does not poll.
#![cfg(feature = "libfabric")]

mod common;

use std::time::{Duration, Instant};

use common::{open, polling_barrier, send_blocking, SHM, TCP};
use transport::{Rank, RemoteBuf, Transport, TransportError};
use transport_ofi::{OfiConfig, OfiTransport, MAX_CTRL};
use transport_shm::testing::run_ranks;

const TIMEOUT: Duration = Duration::from_secs(60);

fn cfg(provider: &str) -> OfiConfig {
    OfiConfig {
        provider: Some(provider.into()),
        prefer_external: false,
    }
}

#[test]
fn different_providers_are_reported() {
    run_ranks("different_providers_are_reported", 2, TIMEOUT, |env| {
        let p = if env.rank == 0 { TCP } else { SHM };
        let r = OfiTransport::new(&mut env.exchange(), &cfg(p));
        match r {
            Err(TransportError::Exchange(m)) => {
                assert!(m.contains("rank 0") && m.contains("rank 1"), "{m}");
                assert!(m.contains(TCP) && m.contains(SHM), "{m}");
            }
            other => panic!("rank {}: {other:?}", env.rank),
        }
    });
}

#[test]
fn a_rank_without_its_provider_is_reported() {
    run_ranks(
        "a_rank_without_its_provider_is_reported",
        2,
        TIMEOUT,
        |env| {
            let p = if env.rank == 0 {
                "no-such-provider"
            } else {
                TCP
            };
            let r = OfiTransport::new(&mut env.exchange(), &cfg(p));
            match (env.rank, r) {
                (0, Err(TransportError::Os { call, source })) => {
                    assert_eq!(call, "fi_getinfo");
                    assert!(source.to_string().contains("no-such-provider"), "{source}");
                }
                (1, Err(TransportError::Exchange(m))) => {
                    assert!(m.contains("rank 0 could not open libfabric"), "{m}");
                }
                (r, other) => panic!("rank {r}: {other:?}"),
            }
        },
    );
}

#[test]
fn prefer_external_takes_no_loopback() {
    run_ranks("prefer_external_takes_no_loopback", 2, TIMEOUT, |env| {
        let c = OfiConfig {
            provider: Some(TCP.into()),
            prefer_external: true,
        };
        let mut t = OfiTransport::new(&mut env.exchange(), &c).unwrap();
        let dbg = format!("{t:?}");
        assert!(!dbg.contains("domain: \"lo\""), "{dbg}");
        let peer = 1 - env.rank;
        send_blocking(&mut t, peer, b"hello", b"");
        let (from, m) = common::recv_one(&mut t, "hello");
        assert_eq!((from, &m[..]), (peer, &b"hello"[..]));
        polling_barrier(&mut t, &env, "end", &mut |_, _| {
            panic!("unexpected message")
        });
    });
}

#[test]
fn single_rank_checks() {
    run_ranks("single_rank_checks", 1, TIMEOUT, |env| {
        let mut t = open(&env, TCP);
        assert_eq!((t.rank(), t.size()), (0, 1));
        let caps = t.caps();
        assert_eq!(
            (caps.max_ctrl, caps.ctrl_slots, caps.ring_bytes),
            (MAX_CTRL, 64, 0)
        );
        let big = vec![0u8; MAX_CTRL];
        assert!(matches!(
            t.try_send(0, b"x", &big),
            Err(TransportError::TooLarge { len, max: MAX_CTRL }) if len == MAX_CTRL + 1
        ));
        assert!(matches!(
            t.try_send(1, b"x", b""),
            Err(TransportError::NoSuchRank(1))
        ));
        let d = RemoteBuf {
            addr: 0,
            len: 8,
            key: 1,
        };
        assert!(matches!(
            t.put(3, b"x", d, 0, 0),
            Err(TransportError::NoSuchRank(3))
        ));
        assert!(matches!(
            t.get(3, &mut [0], d, 0, 0),
            Err(TransportError::NoSuchRank(3))
        ));
        // the largest message and an empty one, to itself
        t.try_send(0, b"", &big[1..]).unwrap();
        t.try_send(0, b"", b"").unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < 2 {
            t.poll(8, &mut |from, m| got.push((from, m.len()))).unwrap();
            assert!(Instant::now() < deadline);
        }
        assert_eq!(got, vec![(0, MAX_CTRL - 1), (0, 0)]);
    });
}

#[test]
fn full_then_progress_tcp() {
    run_ranks("full_then_progress_tcp", 2, TIMEOUT, |env| {
        let mut t = open(&env, TCP);
        let big = vec![0x5au8; MAX_CTRL - 8];
        let flag = env.dir.join("drain");
        // connect first (with manual progress, a connection needs both sides polling,
        // and until it stands try_send says Full)
        let peer = 1 - env.rank;
        send_blocking(&mut t, peer, b"hi", b"");
        common::recv_one(&mut t, "hi");
        polling_barrier(&mut t, &env, "connected", &mut |_, _| {
            panic!("unexpected message")
        });
        if env.rank == 0 {
            // rank 1 does not poll yet: maximum-size messages pile up until Full
            let mut n = 0u64;
            loop {
                match t.try_send(1, &n.to_le_bytes(), &big) {
                    Ok(()) => n += 1,
                    Err(TransportError::Full(1)) => break,
                    Err(e) => panic!("{e}"),
                }
                assert!(n < 100_000, "never Full");
            }
            assert!(n >= 64, "Full after {n} messages, before ctrl_slots (64)");
            std::fs::write(env.dir.join("count"), n.to_string()).unwrap();
            std::fs::write(&flag, b"").unwrap();
            // the rest follows as room appears
            for k in n..n + 200 {
                send_blocking(&mut t, 1, &k.to_le_bytes(), &big);
            }
        } else {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !flag.exists() {
                assert!(Instant::now() < deadline, "rank 0 never saw Full");
                std::thread::sleep(Duration::from_millis(2));
            }
            let n: u64 = std::fs::read_to_string(env.dir.join("count"))
                .unwrap()
                .parse()
                .unwrap();
            let mut next = 0u64;
            while next < n + 200 {
                t.poll(16, &mut |from: Rank, m: &[u8]| {
                    assert_eq!(from, 0);
                    assert_eq!(u64::from_le_bytes(m[..8].try_into().unwrap()), next);
                    assert!(m[8..] == big[..]);
                    next += 1;
                })
                .unwrap();
                assert!(
                    Instant::now() < deadline,
                    "only {next} of {} arrived",
                    n + 200
                );
            }
            eprintln!("rank 1: {n} maximum-size messages fit before Full");
        }
        polling_barrier(&mut t, &env, "end", &mut |_, _| {
            panic!("unexpected message")
        });
    });
}

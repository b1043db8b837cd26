//! One-sided put/get over real processes. Rank 1 exposes 8 MiB and advertises the
//! descriptor on the control channel; rank 0 puts at several offsets (1 MiB and 8 MiB
//! transfers among them) and gets everything back, checks that out-of-bounds accesses
//! fail without touching memory and that a fresh exposure after an `unexpose` gets a
//! new key, and (tcp) that puts and gets with a stale descriptor fail at rank 0 while
//! rank 1's memory stays as it was. The `mr_local` variants repeat this with
//! RSMPI_OFI_MR_LOCAL=1 (every local buffer registered), which tcp and shm do not need
//! by themselves.
#![cfg(feature = "libfabric")]

mod common;

use std::time::{Duration, Instant};

use common::{checksum, open, polling_barrier, recv_one, send_blocking, Rng, SHM, TCP};
use transport::{Rank, RemoteBuf, Transport, TransportError};
use transport_ofi::{OfiTransport, ENV_MR_LOCAL, ENV_NO_SAW};
use transport_shm::testing::{run_ranks, RankEnv};

const BIG: usize = 8 << 20;
const MIB: usize = 1 << 20;

fn encode(tag: u8, d: &RemoteBuf) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&d.addr.to_le_bytes());
    v.extend_from_slice(&d.len.to_le_bytes());
    v.extend_from_slice(&d.key.to_le_bytes());
    v
}

fn decode(m: &[u8]) -> RemoteBuf {
    let u = |i: usize| u64::from_le_bytes(m[1 + 8 * i..9 + 8 * i].try_into().unwrap());
    RemoteBuf {
        addr: u(0),
        len: u(1),
        key: u(2),
    }
}

/// Polls for the next message, which must come from `from` and start with `tag`.
fn expect(t: &mut OfiTransport, from: Rank, tag: u8) -> Vec<u8> {
    let (src, m) = recv_one(t, &format!("message {:?}", tag as char));
    assert_eq!(src, from);
    assert_eq!(
        m[0], tag,
        "expected {:?}, got {:?}",
        tag as char, m[0] as char
    );
    m
}

fn pattern(buf: &mut [u8], seed: u64) {
    Rng::new(seed).fill(buf);
}

/// A barrier that keeps polling but ignores what `poll` reports (after a refused
/// access the tcp connection between the two ranks is gone, and polls may say so).
fn tolerant_barrier(t: &mut OfiTransport, env: &RankEnv, tag: &str) {
    std::fs::write(env.dir.join(format!("pf.{tag}.{}", env.rank)), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    for r in 0..env.size {
        while !env.dir.join(format!("pf.{tag}.{r}")).exists() {
            let _ = t.poll(64, &mut |from, m| panic!("unexpected {m:?} from {from}"));
            assert!(
                Instant::now() < deadline,
                "barrier {tag}: rank {r} did not arrive"
            );
        }
    }
}

/// Rank 0: the origin of every access.
fn origin(env: &RankEnv, t: &mut OfiTransport, stale: bool) {
    // put/get to itself first
    let mut own = vec![0u8; 64 << 10];
    let od = t.expose(own.as_mut_ptr() as usize, own.len()).unwrap();
    let mut data = vec![0u8; 5000];
    pattern(&mut data, 7);
    t.put(0, &data, od, 100, 0).unwrap();
    let mut back = vec![0u8; 5000];
    t.get(0, &mut back, od, 100, 0).unwrap();
    assert_eq!(back, data);
    t.unexpose(od);
    assert_eq!(&own[100..5100], &data[..]);
    assert_eq!(t.live_registrations(), 0);

    let d = decode(&expect(t, 1, b'D'));
    assert_eq!(d.len, BIG as u64);
    let mut mirror = vec![0u8; BIG];
    let ops: [(usize, usize); 6] = [
        (0, BIG),
        (3, MIB),
        (BIG - MIB, MIB),
        (BIG - 100, 100),
        (4096, 1),
        (1_234_567, 65536 + 7),
    ];
    for (i, &(off, len)) in ops.iter().enumerate() {
        let mut data = vec![0u8; len];
        pattern(&mut data, 100 + i as u64);
        t.put(1, &data, d, off as u64, 0).unwrap();
        mirror[off..off + len].copy_from_slice(&data);
        let mut back = vec![0u8; len];
        t.get(1, &mut back, d, off as u64, 0).unwrap();
        assert!(back == data, "get after put {i} ({off}, {len}) differs");
    }
    let mut all = vec![0u8; BIG];
    t.get(1, &mut all, d, 0, 0).unwrap();
    assert!(all == mirror, "8 MiB get differs from what was put");

    // out of bounds: refused before anything moves
    for (off, len) in [(BIG as u64 - 10, 11), (BIG as u64, 1), (u64::MAX, 2)] {
        let r = t.put(1, &vec![0xee; len], d, off, 0);
        assert!(
            matches!(r, Err(TransportError::OutOfBounds { .. })),
            "put {off}+{len}: {r:?}"
        );
        let r = t.get(1, &mut vec![0; len], d, off, 0);
        assert!(
            matches!(r, Err(TransportError::OutOfBounds { .. })),
            "get {off}+{len}: {r:?}"
        );
    }
    t.put(1, &[], d, BIG as u64, 0).unwrap();
    let mut h = vec![b'C'];
    h.extend_from_slice(&checksum(&mirror).to_le_bytes());
    send_blocking(t, 1, &h, &[]);

    // rank 1 unexposed `d` and exposed a fresh buffer
    let d2 = decode(&expect(t, 1, b'E'));
    assert_ne!(d2.key, d.key, "a new registration reused the stale key");
    let mut data = vec![0u8; 4096];
    pattern(&mut data, 999);
    t.put(1, &data, d2, 0, 0).unwrap();
    send_blocking(t, 1, b"F", &[]);
    // rank 1 unexposed `d2` too and refilled its memory
    expect(t, 1, b'U');

    if stale {
        // The old descriptors must fail here. (tcp: the target refuses the key and
        // closes the connection; with FI_DELIVERY_COMPLETE the write sees that.)
        for (desc, len) in [(d, 4096usize), (d, MIB), (d2, 100)] {
            let r = t.put(1, &vec![0xab; len], desc, 0, 0);
            eprintln!("rank 0: put of {len} bytes with a stale key: {r:?}");
            assert!(
                matches!(
                    r,
                    Err(TransportError::AccessDenied(1, _) | TransportError::PeerGone(1, _))
                ),
                "put with a stale key: {r:?}"
            );
            let r = t.get(1, &mut vec![0; len], desc, 0, 0);
            assert!(
                matches!(
                    r,
                    Err(TransportError::AccessDenied(1, _) | TransportError::PeerGone(1, _))
                ),
                "get with a stale key: {r:?}"
            );
        }
        tolerant_barrier(t, env, "stale");
        tolerant_barrier(t, env, "end");
    } else {
        polling_barrier(t, env, "end", &mut |from, m| {
            panic!("unexpected {m:?} from {from}")
        });
    }
}

/// Rank 1: exposes memory and keeps polling while rank 0 works on it.
fn target(env: &RankEnv, t: &mut OfiTransport, stale: bool) {
    let mut buf = vec![0u8; BIG];
    let d = t.expose(buf.as_mut_ptr() as usize, buf.len()).unwrap();
    assert_eq!(d.addr, buf.as_ptr() as u64);
    assert_eq!(t.live_registrations(), 1);
    // zero-length exposures register nothing; unknown descriptors are ignored
    let z = t.expose(buf.as_mut_ptr() as usize, 0).unwrap();
    assert_eq!(t.live_registrations(), 1);
    t.unexpose(z);
    t.unexpose(RemoteBuf {
        addr: 1,
        len: 5,
        key: d.key ^ 0x5555,
    });
    t.unexpose(RemoteBuf {
        len: d.len - 1,
        ..d
    });
    assert_eq!(t.live_registrations(), 1);
    send_blocking(t, 0, &encode(b'D', &d), &[]);

    let m = expect(t, 0, b'C');
    let want = u64::from_le_bytes(m[1..9].try_into().unwrap());
    assert_eq!(
        checksum(&buf),
        want,
        "target memory differs from rank 0's mirror"
    );
    t.unexpose(d);
    assert_eq!(t.live_registrations(), 0);

    let mut small = vec![0u8; 4096];
    let d2 = t.expose(small.as_mut_ptr() as usize, small.len()).unwrap();
    assert_ne!(d2.key, d.key);
    send_blocking(t, 0, &encode(b'E', &d2), &[]);
    expect(t, 0, b'F');
    let mut want = vec![0u8; 4096];
    pattern(&mut want, 999);
    assert!(small == want, "put into the fresh exposure did not land");
    t.unexpose(d2);
    assert_eq!(t.live_registrations(), 0);

    pattern(&mut buf, 4242);
    pattern(&mut small, 4343);
    let before = (checksum(&buf), checksum(&small));
    send_blocking(t, 0, b"U", &[]);
    if stale {
        // rank 0 tries the stale descriptors meanwhile; keep polling
        tolerant_barrier(t, env, "stale");
        assert_eq!(
            (checksum(&buf), checksum(&small)),
            before,
            "an access with a stale key changed the memory"
        );
        tolerant_barrier(t, env, "end");
    } else {
        polling_barrier(t, env, "end", &mut |from, m| {
            panic!("unexpected {m:?} from {from}")
        });
    }
}

fn put_get(env: RankEnv, provider: &str, mr_local: bool, stale: bool) {
    if mr_local {
        // only this child process (one test, one thread) runs with it
        std::env::set_var(ENV_MR_LOCAL, "1");
    }
    let virt = std::env::var(ENV_NO_SAW).is_ok();
    let started = Instant::now();
    let mut t = open(&env, provider);
    let dbg = format!("{t:?}");
    assert_eq!(dbg.contains("mr_local: true"), mr_local, "{dbg}");
    assert!(t.caps().put && t.caps().get && t.caps().registers);
    if virt {
        assert!(dbg.contains("virt_addr: true"), "{dbg}");
    }
    if env.rank == 0 {
        origin(&env, &mut t, stale);
    } else {
        target(&env, &mut t, stale);
    }
    eprintln!("rank {} {dbg}: {:?}", env.rank, started.elapsed());
}

#[test]
fn put_get_tcp() {
    run_ranks("put_get_tcp", 2, Duration::from_secs(60), |env| {
        put_get(env, TCP, false, true)
    });
}

/// shm (libfabric 1.17) drops an access with an unknown key at the target without
/// answering, so a stale get would wait forever: no stale-key part here.
#[test]
fn put_get_shm() {
    run_ranks("put_get_shm", 2, Duration::from_secs(60), |env| {
        put_get(env, SHM, false, false)
    });
}

#[test]
fn put_get_mr_local_tcp() {
    run_ranks("put_get_mr_local_tcp", 2, Duration::from_secs(60), |env| {
        put_get(env, TCP, true, true)
    });
}

#[test]
fn put_get_mr_local_shm() {
    run_ranks("put_get_mr_local_shm", 2, Duration::from_secs(60), |env| {
        put_get(env, SHM, true, false)
    });
}

/// Without FI_ORDER_SAW in the hints, shm addresses registrations by virtual address
/// (FI_MR_VIRT_ADDR): this covers that mode (no stale-key part, as for shm above).
#[test]
fn put_get_shm_virt_addr() {
    run_ranks("put_get_shm_virt_addr", 2, Duration::from_secs(60), |env| {
        std::env::set_var(ENV_NO_SAW, "1");
        put_get(env, SHM, false, false)
    });
}

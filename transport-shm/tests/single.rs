//! Single-process tests: a job of one rank (self-sends) and start-up error paths.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{stream_exchange, Stream};
use transport::{Exchange, Rank, RemoteBuf, Transport, TransportError};
use transport_shm::testing::{cleanup_job, new_job, FileExchange};
use transport_shm::{segment_path, ShmTransport, CTRL_SLOTS, MAX_CTRL};

/// A one-rank job; returns the transport and what is needed to clean up.
fn solo(role: &str) -> (ShmTransport, String, std::path::PathBuf) {
    let (job, dir) = new_job(role);
    let t = ShmTransport::new(&mut FileExchange::new(&dir, 0, 1, job.clone())).unwrap();
    (t, job, dir)
}

#[test]
fn caps() {
    let (t, job, dir) = solo("caps");
    let c = t.caps();
    // a 64 KiB eager payload plus a header fits; enough slots for rsmpi's 16 credits
    assert!(c.max_ctrl >= 64 * 1024 + 64, "{c:?}");
    assert!(c.ctrl_slots >= 20, "{c:?}");
    assert_eq!((c.max_ctrl, c.ctrl_slots), (MAX_CTRL, CTRL_SLOTS));
    assert!(c.put && c.get, "{c:?}");
    assert_eq!((t.rank(), t.size()), (0, 1));
    drop(t);
    assert!(cleanup_job(&job, &dir).is_empty());
}

#[test]
fn self_send_random_sizes() {
    let (mut t, job, dir) = solo("self_send");
    stream_exchange(&mut t, &[0], &[0], 20_000, Duration::from_secs(60));
    drop(t);
    assert!(cleanup_job(&job, &dir).is_empty());
}

#[test]
fn self_ring_full_and_recovers() {
    let (mut t, job, dir) = solo("self_full");
    let max = t.caps().max_ctrl;
    let pool = common::pool(2 * max);
    // Small and large messages mixed until Full; then the receiver drains a few and the
    // sender can continue. Every message arrives once, in order.
    let mut out = Stream::new(0, 0, max);
    let mut inc = Stream::new(0, 0, max);
    let mut fulls = 0;
    for round in 0..50 {
        let before = out.count;
        while out.try_send(&mut t, 0, &pool).unwrap() {}
        fulls += 1;
        let inflight = out.count - inc.count;
        // Any messages up to max_ctrl: at least ctrl_slots of them fit.
        assert!(
            inflight as usize >= CTRL_SLOTS,
            "round {round}: Full with {inflight} in flight"
        );
        assert!(out.count > before || round > 0);
        let drain = 1 + (round * 37) % 200;
        let n = t.poll(drain, &mut |s, m| inc.check(s, m, &pool)).unwrap();
        assert_eq!(n, drain.min(inflight as usize));
    }
    while t
        .poll(usize::MAX, &mut |s, m| inc.check(s, m, &pool))
        .unwrap()
        > 0
    {}
    assert_eq!(inc.count, out.count);
    assert_eq!(fulls, 50);
    drop(t);
    cleanup_job(&job, &dir);
}

#[test]
fn bad_sends_are_rejected() {
    let (mut t, job, dir) = solo("bad_sends");
    let big = vec![0u8; MAX_CTRL];
    assert!(matches!(
        t.try_send(0, &big, b"x"),
        Err(TransportError::TooLarge { len, max: MAX_CTRL }) if len == MAX_CTRL + 1
    ));
    assert!(matches!(
        t.try_send(1, b"x", b""),
        Err(TransportError::NoSuchRank(1))
    ));
    t.try_send(0, &big[..MAX_CTRL - 3], b"abc").unwrap();
    t.try_send(0, b"", b"").unwrap();
    let mut got = Vec::new();
    assert_eq!(
        t.poll(10, &mut |s, m| got.push((
            s,
            m.len(),
            m[m.len().saturating_sub(3)..].to_vec()
        )))
        .unwrap(),
        2
    );
    assert_eq!(got, vec![(0, MAX_CTRL, b"abc".to_vec()), (0, 0, vec![])]);
    let mut b = [0u8; 1];
    let d = RemoteBuf {
        addr: 1,
        len: 1,
        key: 0,
    };
    assert!(matches!(
        t.put(1, &b, d, 0, 0),
        Err(TransportError::NoSuchRank(1))
    ));
    assert!(matches!(
        t.get(1, &mut b, d, 0, 0),
        Err(TransportError::NoSuchRank(1))
    ));
    drop(t);
    cleanup_job(&job, &dir);
}

#[test]
fn self_put_get() {
    let (mut t, job, dir) = solo("self_put_get");
    let mut buf = vec![0u8; 1 << 20];
    let d = t.expose(buf.as_mut_ptr() as usize, buf.len() - 16).unwrap();
    assert_eq!(
        d,
        RemoteBuf {
            addr: buf.as_ptr() as u64,
            len: (1 << 20) - 16,
            key: 0
        }
    );
    let data: Vec<u8> = (0..(1 << 20) - 16)
        .map(|i: usize| (i % 251) as u8)
        .collect();
    t.put(0, &data, d, 0, 0).unwrap();
    let mut back = vec![0u8; 100];
    t.get(0, &mut back, d, 1000, 0).unwrap();
    assert_eq!(back, data[1000..1100]);
    let e = t.put(0, &[9; 17], d, d.len - 16, 0).unwrap_err();
    assert!(
        matches!(e, TransportError::OutOfBounds { offset, len: 17, limit } if offset == d.len - 16 && limit == d.len)
    );
    let buf = std::hint::black_box(&buf);
    assert_eq!(buf[..data.len()], data[..]);
    assert!(
        buf[data.len()..].iter().all(|&b| b == 0),
        "bytes past the exposed range were written"
    );
    // A descriptor for unmapped memory: the kernel refuses (EFAULT), no crash.
    let bad = RemoteBuf {
        addr: 8,
        len: 64,
        key: 0,
    };
    assert!(matches!(
        t.put(0, &[1; 8], bad, 0, 0),
        Err(TransportError::Os { .. })
    ));
    drop(t);
    cleanup_job(&job, &dir);
}

/// Wraps a FileExchange; can fail a chosen fence and records the segment's mode there.
struct Faulty {
    inner: FileExchange,
    fail_fence: u64,
    seen_mode: Option<u32>,
}

impl Exchange for Faulty {
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn job_id(&self) -> &str {
        self.inner.job_id()
    }
    fn publish(&mut self, k: &str, v: &[u8]) -> Result<(), TransportError> {
        self.inner.publish(k, v)
    }
    fn lookup(&mut self, r: Rank, k: &str) -> Result<Vec<u8>, TransportError> {
        self.inner.lookup(r, k)
    }
    fn fence(&mut self) -> Result<(), TransportError> {
        let path = segment_path(self.inner.job_id(), self.inner.rank());
        self.seen_mode = Some(
            std::fs::metadata(path)
                .expect("segment exists during init")
                .permissions()
                .mode(),
        );
        if self.inner.fences() == self.fail_fence {
            return Err(TransportError::Exchange("injected".into()));
        }
        self.inner.fence()
    }
}

#[test]
fn segment_mode_and_unlink_lifecycle() {
    let (job, dir) = new_job("lifecycle");
    let path = segment_path(&job, 0);
    let mut ex = Faulty {
        inner: FileExchange::new(&dir, 0, 1, job.clone()),
        fail_fence: u64::MAX,
        seen_mode: None,
    };
    let mut t = ShmTransport::new(&mut ex).unwrap();
    assert_eq!(ex.seen_mode.unwrap() & 0o7777, 0o600);
    assert!(!path.exists(), "segment still linked after init");
    t.try_send(0, b"still", b" works").unwrap();
    let mut got = Vec::new();
    t.poll(1, &mut |_, m| got.extend_from_slice(m)).unwrap();
    assert_eq!(got, b"still works");
    drop(t);
    assert!(!path.exists());
    assert!(cleanup_job(&job, &dir).is_empty());
}

#[test]
fn failed_init_removes_segment() {
    for fail in [0, 1] {
        let (job, dir) = new_job("failed_init");
        let path = segment_path(&job, 0);
        let mut ex = Faulty {
            inner: FileExchange::new(&dir, 0, 1, job.clone()),
            fail_fence: fail,
            seen_mode: None,
        };
        let e = ShmTransport::new(&mut ex).unwrap_err();
        assert!(
            matches!(&e, TransportError::Exchange(m) if m == "injected"),
            "{e:?}"
        );
        assert!(
            ex.seen_mode.is_some(),
            "segment did not exist at fence {fail}"
        );
        assert!(!path.exists(), "segment left after failure at fence {fail}");
        assert!(cleanup_job(&job, &dir).is_empty());
    }
}

#[test]
fn existing_segment_is_not_clobbered() {
    let (job, dir) = new_job("exists");
    let path = segment_path(&job, 0);
    std::fs::write(&path, b"someone else's").unwrap();
    let e = ShmTransport::new(&mut FileExchange::new(&dir, 0, 1, job.clone())).unwrap_err();
    assert!(matches!(e, TransportError::Os { .. }), "{e:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    assert_eq!(cleanup_job(&job, &dir).len(), 1);
}

#[test]
fn invalid_job_id_is_rejected() {
    let (_, dir) = new_job("badjob");
    let e = ShmTransport::new(&mut FileExchange::new(&dir, 0, 1, "../etc")).unwrap_err();
    assert!(matches!(e, TransportError::Exchange(_)), "{e:?}");
    let e = ShmTransport::new(&mut FileExchange::new(&dir, 3, 2, "ok")).unwrap_err();
    assert!(matches!(e, TransportError::Exchange(_)), "{e:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn transport_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<ShmTransport>();
}

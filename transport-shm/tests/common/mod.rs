//! Helpers shared by the integration tests: deterministic message streams that a
//! sender and a receiver generate independently, so the receiver can check length,
//! order and every byte of each message.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use transport::{Rank, Transport, TransportError};
use transport_shm::ShmTransport;

/// xorshift64*.
pub fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Random bytes both sides derive from the same seed.
pub fn pool(len: usize) -> Vec<u8> {
    let mut s = 0x9e37_79b9_7f4a_7c15;
    (0..len).map(|_| (next_rand(&mut s) >> 56) as u8).collect()
}

/// The k-th message of the stream from `src` to `dst`: total size uniform in
/// `0..=max`, starting with as much of `k` (8 bytes LE) as fits, then pool bytes.
pub struct Stream {
    state: u64,
    pub count: u64,
    max: usize,
}

impl Stream {
    pub fn new(src: Rank, dst: Rank, max: usize) -> Self {
        Self {
            state: 0x1234_5678 + ((src as u64) << 32) + dst as u64 * 7919 + 1,
            count: 0,
            max,
        }
    }

    /// (total size, pool offset) of the next message.
    pub fn next_shape(&mut self) -> (usize, usize) {
        let r = next_rand(&mut self.state);
        // A third of the messages are small (<= 64 B) to exercise one-line records.
        let size = if r % 3 == 0 {
            (r >> 8) as usize % 65
        } else {
            (r >> 8) as usize % (self.max + 1)
        };
        let off = (next_rand(&mut self.state) >> 8) as usize % self.max;
        (size, off)
    }

    /// Sends the next message through `t` to `dst`; `Ok(false)` when the ring is full
    /// (the stream does not advance then).
    pub fn try_send(
        &mut self,
        t: &mut ShmTransport,
        dst: Rank,
        pool: &[u8],
    ) -> Result<bool, TransportError> {
        let saved = self.state;
        let (size, off) = self.next_shape();
        let hdr = self.count.to_le_bytes();
        let hl = size.min(8);
        match t.try_send(dst, &hdr[..hl], &pool[off..off + size - hl]) {
            Ok(()) => {
                self.count += 1;
                Ok(true)
            }
            Err(TransportError::Full(p)) => {
                assert_eq!(p, dst);
                self.state = saved;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Checks that `m` is the next message of this stream.
    pub fn check(&mut self, src: Rank, m: &[u8], pool: &[u8]) {
        let (size, off) = self.next_shape();
        let k = self.count;
        assert_eq!(m.len(), size, "message {k} from {src}: wrong length");
        let hl = size.min(8);
        assert_eq!(
            m[..hl],
            k.to_le_bytes()[..hl],
            "message {k} from {src}: out of order"
        );
        let body = &pool[off..off + size - hl];
        if m[hl..] != *body {
            panic!("message {k} from {src} ({size} bytes): payload corrupted");
        }
        self.count += 1;
    }
}

/// Sends `n` stream messages to each of `targets` and receives `n` from each of
/// `sources`, interleaving sends and polls; panics on a wrong message or at `deadline`.
pub fn stream_exchange(
    t: &mut ShmTransport,
    targets: &[Rank],
    sources: &[Rank],
    n: u64,
    deadline: Duration,
) {
    let me = t.rank();
    let max = t.caps().max_ctrl;
    let pool = pool(2 * max);
    let size = t.size() as usize;
    let mut out: Vec<Stream> = (0..size as Rank).map(|d| Stream::new(me, d, max)).collect();
    let mut inc: Vec<Stream> = (0..size as Rank).map(|s| Stream::new(s, me, max)).collect();
    let mut expected = vec![0u64; size];
    for &s in sources {
        expected[s as usize] = n;
    }
    let end = Instant::now() + deadline;
    let mut iter = 0u64;
    loop {
        let mut progress = false;
        for &d in targets {
            for _ in 0..8 {
                if out[d as usize].count == n || !out[d as usize].try_send(t, d, &pool).unwrap() {
                    break;
                }
                progress = true;
            }
        }
        let got = t
            .poll(64, &mut |src, m| {
                let st = &mut inc[src as usize];
                assert!(
                    st.count < expected[src as usize],
                    "unexpected extra message from {src}"
                );
                st.check(src, m, &pool);
            })
            .unwrap();
        progress |= got > 0;
        let sent_all = targets.iter().all(|&d| out[d as usize].count == n);
        let got_all = (0..size).all(|s| inc[s].count == expected[s]);
        if sent_all && got_all {
            break;
        }
        if !progress {
            // Oversubscribed machine: let the peers run.
            std::thread::yield_now();
        }
        iter += 1;
        if iter % 256 == 0 && Instant::now() > end {
            let counts: Vec<_> = inc.iter().map(|s| s.count).collect();
            let sent: Vec<_> = out.iter().map(|s| s.count).collect();
            panic!("rank {me}: timed out; received {counts:?}, sent {sent:?}");
        }
    }
    eprintln!(
        "rank {me}: exchanged {n} messages with each of {targets:?} in {:?}",
        deadline.saturating_sub(end.saturating_duration_since(Instant::now()))
    );
    // Nothing beyond what was expected arrives.
    std::thread::sleep(Duration::from_millis(20));
    let extra = t
        .poll(usize::MAX, &mut |src, _| panic!("extra message from {src}"))
        .unwrap();
    assert_eq!(extra, 0);
}

/// Polls until `pred` has seen what it wants or `timeout` passes.
pub fn poll_until(
    t: &mut ShmTransport,
    timeout: Duration,
    mut f: impl FnMut(Rank, &[u8]) -> bool,
) -> bool {
    let end = Instant::now() + timeout;
    let mut done = false;
    while Instant::now() < end {
        t.poll(16, &mut |s, m| done |= f(s, m)).unwrap();
        if done {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

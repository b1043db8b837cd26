//! Pushes: direct writes that the receiver copies out of the ring.
//!
//! A direct write ([`transport::Transport::put`]: the sender matched a receive that
//! was advertised to it and writes the payload into the receive's buffer) of
//! [`PUSH_FROM`] bytes or more to a local peer need not be one `process_vm_writev`.
//! The sender copies the payload into its ring to the receiver in chunks of
//! [`PUSH_CHUNK`] bytes, each a record of the transport's own that names where its bytes
//! go, and the receiver's transport copies each chunk into the receive's buffer when
//! its poll meets the record, as the chunk streams in: two copies that overlap, each
//! at memcpy speed, as for pulls (`crate::pull`), but with no ask: the sender starts
//! at once.
//!
//! Either side may copy any chunk, and each chunk is copied once: the chunks of all
//! of one sender's pushes to one receiver are numbered in one sequence, and the ring
//! between them holds a *push claim word*, the first chunk that neither side has
//! taken. The receiver takes a chunk by compare-and-swap when it meets its record.
//! The sender keeps at most [`PUSH_BUDGET`] bytes of chunks ahead of the claim
//! ([`PUSH_START`] until the receiver has claimed the push's first chunk), and
//! when the receiver has taken nothing for [`PUSH_PATIENCE`] (it is computing, not
//! polling) the sender claims the rest of the push, records already in the ring
//! included, and writes it with one `process_vm_writev`; the receiver skips those
//! records when it meets them. So a receiver busy outside the library costs the
//! sender a few microseconds and costs itself nothing: its CPU stays free, as with a
//! plain direct write.
//!
//! `put` returns once every chunk is claimed: the receiver's copies of the chunks it
//! took are then ahead, in its ring, of anything the sender sends after `put`
//! (the protocol's `Written` notice), and the sender's own writes are done. That is
//! the transport's promise for `put` (visible before any later control message).
//!
//! Record (sender -> receiver, internal):
//!
//! ```text
//! PUSH | pad (7 B) | chunk (u64) | destination address (u64) | the chunk's bytes
//! ```
//!
//! The receiver writes its own memory at the address the sender names: the buffer of
//! a receive it advertised to that sender, which the protocol keeps alive until the
//! notice that follows the chunks. Pushes are made only where CMA works from the
//! sender to the receiver, so a sender that could name any address could already
//! write all of the receiver's memory with `process_vm_writev`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use transport::{Rank, TransportError};

use crate::pull::{Ways, PATIENCE, PULL_FROM, SERVE_BUDGET};
use crate::ring::{Producer, Record, MAX_CTRL};

/// Direct writes of at least this many bytes to a local peer may be pushes.
pub const PUSH_FROM: usize = PULL_FROM;
/// Bytes of chunks a sender keeps in its ring ahead of the receiver's copies.
pub const PUSH_BUDGET: u64 = SERVE_BUDGET;
/// Bytes of chunks a sender puts in the ring before the receiver has claimed any of
/// this push: a receiver waiting in the library claims the first within a
/// microsecond, and then [`PUSH_BUDGET`] applies; a receiver computing would only
/// have the sender copy bytes it must write again after [`PUSH_PATIENCE`].
pub const PUSH_START: u64 = PUSH_CHUNK as u64;
/// Bytes of one chunk of a push: one ring record each (the last may be shorter).
/// Smaller than a pull's, because the receiver's claims are the sender's only sign
/// that it is copying: at this size a receiver copying into cold memory still claims
/// one every few microseconds, well inside [`PUSH_PATIENCE`].
pub const PUSH_CHUNK: usize = 16 * 1024;
/// How long a sender waits for the receiver to claim another chunk before it writes
/// the rest itself.
pub const PUSH_PATIENCE: Duration = PATIENCE;
/// How long a sender waits for the receiver to claim the first chunk of a push
/// (counted from when that chunk is in the ring) before it writes the push itself. A
/// receiver waiting in the library meets the record within a microsecond; a
/// receiver computing should cost its sender as little as possible, since the
/// write that follows is then the whole cost of a plain direct write plus this.
pub const PUSH_FIRST_PATIENCE: Duration = Duration::from_nanos(1500);
/// Pushes are chosen when they cost less than this share of a `process_vm_writev`:
/// closer to 1 than a pull's margin (`crate::pull::MARGIN`), because a push's cost is
/// measured to the last chunk's claim, before the receiver has copied it, and its
/// copies put the message in the receiver's cache, where the receiver will read it
/// (a pull's land in the reader's own, either way). At 256 KiB in the near state a
/// push's measure is 0.7–0.8 of a write's: with the pulls' 0.75, the choice
/// flipped from one run to the next.
pub const PUSH_MARGIN: f64 = 0.9;
/// The kind byte of a push record (after the pull's ask and data kinds).
pub const PUSH: u8 = 3;
/// Bytes in front of a chunk's data in a push record.
pub const PUSH_HDR: usize = 24;
const _: () = assert!(PUSH_HDR + PUSH_CHUNK <= MAX_CTRL);

/// How large direct writes to local peers are made (`RSMPI_SHM_WRITE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Measured: pushes or `process_vm_writev`, whichever has cost less per byte to
    /// this peer (as [`crate::ReadMode::Auto`] for reads).
    #[default]
    Auto,
    /// Always pushes (the sender still writes what the receiver leaves untaken).
    Push,
    /// Always one `process_vm_writev`, as before pushes.
    Cma,
}

/// The environment variable that sets [`WriteMode`]: `auto`, `push` or `cma`.
pub const ENV_WRITE: &str = "RSMPI_SHM_WRITE";

impl WriteMode {
    /// The mode `RSMPI_SHM_WRITE` asks for ([`WriteMode::Auto`] when unset).
    pub fn from_env() -> Result<Self, TransportError> {
        Self::parse(std::env::var(ENV_WRITE).ok().as_deref())
    }

    /// The mode a value of `RSMPI_SHM_WRITE` names (`None`: unset).
    pub fn parse(v: Option<&str>) -> Result<Self, TransportError> {
        match v {
            None | Some("auto") | Some("") => Ok(WriteMode::Auto),
            Some("push") => Ok(WriteMode::Push),
            Some("cma") => Ok(WriteMode::Cma),
            Some(v) => Err(TransportError::Unavailable(format!(
                "{ENV_WRITE}={v:?}: expected auto, push or cma"
            ))),
        }
    }
}

/// What large direct writes to local peers did, and what this rank took in
/// ([`crate::ShmTransport::push_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Large writes made as pushes.
    pub pushes: u64,
    /// Large writes made with one `process_vm_writev`.
    pub writes: u64,
    /// Chunk records this rank wrote into its rings for its pushes.
    pub chunks_pushed: u64,
    /// Pushes whose rest this rank wrote itself because the receiver took nothing for
    /// [`PUSH_PATIENCE`].
    pub taken_back: u64,
    /// Chunks of peers' pushes that this rank copied out of the ring.
    pub chunks_taken: u64,
    /// Chunk records of peers' pushes that this rank skipped: their sender had written
    /// them itself.
    pub chunks_skipped: u64,
}

/// The pushes of this rank to one peer.
pub struct Pusher {
    ways: Ways,
    stats: PushStats,
    /// How long the receiver may take nothing before this rank writes the rest
    /// itself ([`PUSH_PATIENCE`]; tests change it).
    pub patience: Duration,
    /// The same for a push's first chunk ([`PUSH_FIRST_PATIENCE`]).
    pub first_patience: Duration,
    /// The next push's first chunk.
    next: u64,
}

impl Default for Pusher {
    fn default() -> Self {
        Self {
            ways: Ways::default(),
            stats: PushStats::default(),
            patience: PUSH_PATIENCE,
            first_patience: PUSH_FIRST_PATIENCE,
            next: 0,
        }
    }
}

impl Pusher {
    /// Whether the next large write should be a push ([`Ways::prefers_ring`]).
    pub fn prefers_push(&mut self, len: usize) -> bool {
        self.ways.prefers_ring(len, PUSH_MARGIN, 1)
    }

    /// A large write made with `process_vm_writev` took `took`.
    pub fn wrote(&mut self, bytes: usize, took: Duration) {
        self.ways.cma_took(bytes, took);
        self.stats.writes += 1;
    }

    /// This sender's counts (the receiver's fields are zero).
    pub fn stats(&self) -> PushStats {
        self.stats
    }

    /// Pushes `src` to address `addr` of the peer (process `pid`) behind `ring`, whose
    /// push claim word is `ring.push_claim()`. Returns once every chunk is claimed:
    /// taken by the receiver (its copy is then ahead of anything sent later) or
    /// written here with `process_vm_writev`, which fails only if the peer is gone
    /// (or the address is not mapped there).
    pub fn push(
        &mut self,
        ring: &mut Producer,
        src: &[u8],
        addr: u64,
        pid: i32,
    ) -> std::io::Result<()> {
        let t = Instant::now();
        let first = self.next;
        let end = first + src.len().div_ceil(PUSH_CHUNK) as u64;
        self.next = end;
        self.stats.pushes += 1;
        let (budget, start) = (
            PUSH_BUDGET / PUSH_CHUNK as u64,
            PUSH_START / PUSH_CHUNK as u64,
        );
        let mut written = first;
        let mut seen = ring.push_claim().load(Ordering::Acquire);
        let mut since = t;
        loop {
            let cur = ring.push_claim().load(Ordering::Acquire);
            if cur >= end {
                break;
            }
            let ahead = if cur > first { budget } else { start };
            if written < end && written - cur < ahead {
                let off = (written - first) as usize * PUSH_CHUNK;
                let n = PUSH_CHUNK.min(src.len() - off);
                let mut hdr = [0u8; PUSH_HDR];
                hdr[0] = PUSH;
                hdr[8..16].copy_from_slice(&written.to_le_bytes());
                hdr[16..24].copy_from_slice(&(addr + off as u64).to_le_bytes());
                if ring.try_push_internal(&hdr, &src[off..off + n]) {
                    if written == first {
                        // the receiver's patience starts when there is something
                        // to claim
                        since = Instant::now();
                    }
                    written += 1;
                    self.stats.chunks_pushed += 1;
                    continue;
                }
            }
            let now = Instant::now();
            if cur != seen {
                seen = cur;
                since = now;
                continue;
            }
            let waited = now.duration_since(since);
            let patience = if cur > first {
                self.patience
            } else {
                self.first_patience
            };
            if waited < patience {
                std::hint::spin_loop();
                continue;
            }
            // the receiver took nothing for a while: the rest is ours, records already
            // in the ring included (the receiver will skip them); a dead receiver
            // shows here, as the write's failure
            if ring
                .push_claim()
                .compare_exchange(cur, end, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let off = (cur - first) as usize * PUSH_CHUNK;
                crate::cma::write(pid, &src[off..], addr + off as u64)?;
                self.stats.taken_back += 1;
                // its time includes the wait for the receiver: what pushing cost
                self.ways.ring_took(src.len(), t.elapsed());
                return Ok(());
            }
        }
        // judged from the first push: the ring's pages were mapped above, so a first
        // lap costs what later ones do
        self.ways.ring_took(src.len(), t.elapsed());
        Ok(())
    }
}

/// A push record from `from` (process `pid`), whose ring's push claim word is
/// `claim`: copies its chunk into this process's memory where it names, if the
/// sender has not written it itself. Returns whether it copied.
pub fn take(
    rec: Record<'_>,
    claim: &AtomicU64,
    from: Rank,
    pid: i32,
) -> Result<bool, TransportError> {
    let (head, len) = match &rec {
        Record::Whole(m) => (&m[..PUSH_HDR.min(m.len())], m.len()),
        Record::Streamed(s) => (s.bytes(0, PUSH_HDR.min(s.len())), s.len()),
    };
    if head.len() < PUSH_HDR || len - PUSH_HDR > PUSH_CHUNK {
        return Err(crate::pull::bad(
            from,
            format!("push record of {len} bytes"),
        ));
    }
    let c = crate::pull::word(head, 8);
    let addr = crate::pull::word(head, 16);
    let n = len - PUSH_HDR;
    if addr.checked_add(n as u64).is_none() {
        return Err(crate::pull::bad(from, format!("push to {addr:#x}")));
    }
    let cur = claim.load(Ordering::Acquire);
    if c > cur {
        return Err(crate::pull::bad(
            from,
            format!("push of chunk {c}, the claim is at {cur}"),
        ));
    }
    let ours = c == cur
        && claim
            .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
    match rec {
        Record::Whole(m) if ours => {
            // SAFETY: the sender names the buffer of a receive this rank advertised to
            // it, which the protocol keeps alive and untouched by this rank until the
            // notice that follows this record in the ring; the chunk is ours alone
            // (claimed above), so nothing else writes these bytes meanwhile. Pushes
            // come only from a sender whose CMA works on this process, which could
            // write any of its memory anyway (module docs).
            let dst = unsafe { std::slice::from_raw_parts_mut(addr as usize as *mut u8, n) };
            transport::copy::copy(dst, &m[PUSH_HDR..]);
        }
        Record::Whole(_) => {}
        Record::Streamed(s) => {
            let a = crate::Arrival { s, from, pid };
            if ours {
                // SAFETY: as above.
                let dst = unsafe { std::slice::from_raw_parts_mut(addr as usize as *mut u8, n) };
                a.follow(PUSH_HDR, len, |x, y| {
                    transport::copy::copy(&mut dst[x - PUSH_HDR..y - PUSH_HDR], s.bytes(x, y - x))
                })?;
            } else {
                a.follow(PUSH_HDR, len, |_, _| ())?;
            }
        }
    }
    Ok(ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chooses_the_cheaper_way_per_byte() {
        // the first writes alternate, starting with a push; then the cheaper way,
        // a push only if it saves a quarter; where pushes are FAR behind, the
        // exploration at the 16th write is their last early one
        for (push_us, write_us, pushes) in
            [(50, 100, 4 + 56 - 3), (90, 100, 4 + 3), (300, 100, 4 + 1)]
        {
            let mut p = Pusher::default();
            let mut n = 0;
            for _ in 0..64 {
                if p.prefers_push(1 << 20) {
                    n += 1;
                    p.ways.ring_took(1 << 20, Duration::from_micros(push_us));
                } else {
                    p.wrote(1 << 20, Duration::from_micros(write_us));
                }
            }
            // 64 writes: 8 trials, then exploring at the 16th, 32nd and 64th (the
            // 16th only, where pushes are FAR behind)
            assert_eq!(n, pushes, "push {push_us} us, write {write_us} us");
        }
    }

    #[test]
    fn write_mode_settings() {
        assert_eq!(WriteMode::parse(None).unwrap(), WriteMode::Auto);
        assert_eq!(WriteMode::parse(Some("auto")).unwrap(), WriteMode::Auto);
        assert_eq!(WriteMode::parse(Some("push")).unwrap(), WriteMode::Push);
        assert_eq!(WriteMode::parse(Some("cma")).unwrap(), WriteMode::Cma);
        let e = WriteMode::parse(Some("often")).unwrap_err().to_string();
        assert_eq!(e, "RSMPI_SHM_WRITE=\"often\": expected auto, push or cma");
    }
}

//! The verbs transport proper: one RC queue pair per peer, all on one completion
//! queue; control messages as RDMA WRITEs into a ring per (sender, receiver) pair in
//! the receiver's memory, which the receiver's `poll` reads (no receive work request,
//! no interrupt); credits as RDMA WRITEs of the receiver's read position back into the
//! sender's memory; `put` / `get` as RDMA WRITE / READ in three tiers (inline, bounce
//! buffer, zero copy).
//!
//! A ring record: an 8-byte header `len << 32 | seq`, the message, padding to 8 bytes,
//! and an 8-byte trailer equal to the header, rounded up to 64 bytes. The receiver
//! takes a record once header and trailer both carry the sequence number it expects:
//! the record is written by one RDMA WRITE, whose bytes land in address order, so the
//! trailer is the last to arrive. The receiver zeroes the header slots of what it has
//! consumed, so the word it polls is either zero or a header being written. A record that would not fit before the ring's end is
//! preceded by a wrap marker (length `u32::MAX`) and starts again at offset 0.

mod ffi;
mod regs;
mod unmaps;

use ffi::{Device, Mr, Op, Qp, Wc};
use memmap2::MmapMut;
use regs::Regs;
use std::collections::VecDeque;
use transport::{check_bounds, Caps, Exchange, Posted, Rank, RemoteBuf, Transport, TransportError};

use crate::VerbsConfig;

/// Largest control message (header + inline payload).
pub const MAX_CTRL: usize = 8192 + 256;
/// Work requests per queue pair.
const SQ_DEPTH: u32 = 256;
/// Every this many unsignaled work requests one is signaled, so that the send queue's
/// entries are known to be free again (selective signalling).
const SIGNAL_EVERY: u32 = 64;
/// Bounce buffers for tier 2 (`put` copies up to `BOUNCE_SLOT` bytes into one).
const BOUNCE_SLOT: usize = 16384;
const BOUNCE_SLOTS: usize = 64;
/// Inline data asked of each queue pair (the device may grant less).
const WANT_INLINE: u32 = 256;
/// Length of a wrap marker.
const WRAP: u32 = u32::MAX;
/// Credit slot stride in the credit region (one cache line per peer).
const CREDIT_STRIDE: usize = 64;
/// `wr_id` bit of unsignaled work requests (the rest is the peer): their completions
/// only appear when they fail.
const UNSIGNALED: u64 = 1 << 63;

const fn record_len(len: usize) -> usize {
    (16 + len.div_ceil(8) * 8).div_ceil(64) * 64
}
const MAX_RECORD: usize = record_len(MAX_CTRL);

/// What a signaled work request stands for.
#[derive(Clone, Copy, Debug)]
enum What {
    /// Only retires send-queue entries.
    Retire,
    /// A tier-2 put: the bounce slot is free again.
    Bounce(u16),
    /// A put or get the caller waits for (`Posted::Pending`).
    /// `reg`: the local key of the registration the operation holds.
    Pending { token: u64, reg: u32 },
}

#[derive(Clone, Copy, Debug)]
struct Signaled {
    peer: Rank,
    /// Send-queue entries this completion frees (itself and the unsignaled before it).
    retire: u32,
    what: What,
}

/// What a peer published at start-up.
#[derive(Clone, Copy, Debug, Default)]
struct Remote {
    lid: u16,
    gid: [u8; 16],
    rings: u64,
    rings_rkey: u32,
    credits: u64,
    credits_rkey: u32,
    ring: u64,
}

struct Peer {
    qp: Option<Qp>,
    remote: Remote,
    /// Sending into my ring at the peer: bytes written (monotonic), next sequence.
    head: u64,
    seq_out: u32,
    /// Receiving from the peer's ring in my memory: bytes consumed, next sequence, and
    /// the consumed count last written back to the peer.
    tail: u64,
    seq_in: u32,
    tail_sent: u64,
    /// Work requests posted and not yet known complete; unsignaled since the last
    /// signaled one.
    posted: u32,
    since_signal: u32,
    failed: Option<TransportError>,
}

/// The RDMA verbs transport. See the crate documentation.
pub struct VerbsTransport {
    // field order is drop order: queue pairs, then registrations, then memory, then
    // the device
    peers: Vec<Peer>,
    regs: Regs,
    _rings_mr: Mr,
    _credits_mr: Mr,
    mirror_mr: Mr,
    bounce_mr: Mr,
    scratch_mr: Mr,
    rings: MmapMut,
    credits: MmapMut,
    mirror: MmapMut,
    bounce: MmapMut,
    scratch: MmapMut,
    dev: Device,
    me: Rank,
    size: u32,
    ring: usize,
    inline: usize,
    ops: Vec<Option<Signaled>>,
    free_ops: Vec<u32>,
    free_bounce: Vec<u16>,
    done: VecDeque<(u64, Result<(), TransportError>)>,
    to_self: VecDeque<Vec<u8>>,
    next_peer: usize,
    /// Where `reap` has the completion queue written (kept here, not copied per poll).
    wc: [Wc; 32],
    /// `poll` reaped the completion queue since the last `poll_done`, which then need
    /// not reap it again: the progress loop calls the two back to back.
    reaped: bool,
}

fn unavailable(e: impl std::fmt::Display) -> TransportError {
    TransportError::Unavailable(e.to_string())
}

fn anon(len: usize) -> Result<MmapMut, TransportError> {
    MmapMut::map_anon(len.max(4096)).map_err(|source| TransportError::Os {
        call: "mmap",
        source,
    })
}

const KEY: &str = "verbs";

impl VerbsTransport {
    /// Opens the device, publishes this rank's addresses through `ex`, connects a queue
    /// pair to every other rank and waits until all are connected. Collective: when
    /// any rank cannot open a device, every rank returns
    /// [`TransportError::Unavailable`] naming it, so that all can fall back together.
    pub fn new(ex: &mut dyn Exchange, cfg: &VerbsConfig) -> Result<VerbsTransport, TransportError> {
        let (me, size) = (ex.rank(), ex.size());
        let ring = cfg.ring;
        if ring < 4 * MAX_RECORD || !ring.is_power_of_two() {
            return Err(TransportError::Unavailable(format!(
                "RSMPI_VERBS_RING={ring}: must be a power of two of at least {} bytes",
                4 * MAX_RECORD
            )));
        }
        let cqe = (size as usize * SQ_DEPTH as usize).min(1 << 20) as u32;
        let opened = Device::open(cfg.device.as_deref(), cfg.port, cfg.gid_index, cqe);
        let dev = match opened {
            Ok(d) => d,
            Err(why) => {
                // tell the others, so that nobody waits for this rank's queue pairs
                ex.publish(KEY, format!("-{why}").as_bytes())?;
                ex.fence()?;
                return Err(TransportError::Unavailable(format!("rank {me}: {why}")));
            }
        };
        let n = size as usize;
        let rings = anon(n * ring)?;
        let credits = anon(n * CREDIT_STRIDE)?;
        let mirror = anon(n * ring)?;
        let bounce = anon(BOUNCE_SLOTS * BOUNCE_SLOT)?;
        let scratch = anon(n * CREDIT_STRIDE)?;
        let rw = ffi::ACCESS_LOCAL_WRITE | ffi::ACCESS_REMOTE_WRITE;
        let reg = |m: &MmapMut, access| dev.register(m.as_ptr() as usize, m.len(), access);
        let rings_mr = reg(&rings, rw).map_err(unavailable)?;
        let credits_mr = reg(&credits, rw).map_err(unavailable)?;
        let mirror_mr = reg(&mirror, ffi::ACCESS_LOCAL_WRITE).map_err(unavailable)?;
        let bounce_mr = reg(&bounce, ffi::ACCESS_LOCAL_WRITE).map_err(unavailable)?;
        let scratch_mr = reg(&scratch, ffi::ACCESS_LOCAL_WRITE).map_err(unavailable)?;
        let mut peers = Vec::with_capacity(n);
        let mut inline = usize::MAX;
        let mut blob = Vec::with_capacity(64 + 4 * n);
        let info = *dev.info();
        blob.push(b'+');
        blob.extend_from_slice(&info.lid.to_le_bytes());
        blob.extend_from_slice(&info.gid);
        blob.extend_from_slice(&(rings.as_ptr() as u64).to_le_bytes());
        blob.extend_from_slice(&rings_mr.rkey.to_le_bytes());
        blob.extend_from_slice(&(credits.as_ptr() as u64).to_le_bytes());
        blob.extend_from_slice(&credits_mr.rkey.to_le_bytes());
        blob.extend_from_slice(&(ring as u64).to_le_bytes());
        for p in 0..size {
            let qp = if p == me {
                None
            } else {
                let (qp, got) = dev.create_qp(SQ_DEPTH, WANT_INLINE).map_err(unavailable)?;
                inline = inline.min(got as usize);
                Some(qp)
            };
            blob.extend_from_slice(&qp.as_ref().map_or(0, |q| q.qpn).to_le_bytes());
            peers.push(Peer {
                qp,
                remote: Remote::default(),
                head: 0,
                seq_out: 1,
                tail: 0,
                seq_in: 1,
                tail_sent: 0,
                posted: 0,
                since_signal: 0,
                failed: None,
            });
        }
        if inline == usize::MAX {
            inline = WANT_INLINE as usize;
        }
        ex.publish(KEY, &blob)?;
        ex.fence()?;
        let mut theirs = Vec::with_capacity(n);
        for p in 0..size {
            let b = ex.lookup(p, KEY)?;
            match b.first() {
                Some(b'+') => theirs.push(b),
                _ => {
                    let why = String::from_utf8_lossy(b.get(1..).unwrap_or_default()).into_owned();
                    return Err(TransportError::Unavailable(format!("rank {p}: {why}")));
                }
            }
        }
        for (p, b) in theirs.iter().enumerate() {
            let bad = || {
                TransportError::Exchange(format!("rank {p} published a malformed verbs address"))
            };
            let mut r = Reader(&b[1..]);
            let remote = Remote {
                lid: u16::from_le_bytes(r.take()?),
                gid: r.take()?,
                rings: u64::from_le_bytes(r.take()?),
                rings_rkey: u32::from_le_bytes(r.take()?),
                credits: u64::from_le_bytes(r.take()?),
                credits_rkey: u32::from_le_bytes(r.take()?),
                ring: u64::from_le_bytes(r.take()?),
            };
            if remote.ring != ring as u64 {
                return Err(TransportError::Exchange(format!(
                    "rank {p} uses rings of {} bytes, this rank {ring}: set RSMPI_VERBS_RING alike on all ranks",
                    remote.ring
                )));
            }
            let qpns = r.0;
            if qpns.len() != 4 * n {
                return Err(bad());
            }
            let rqpn = u32::from_le_bytes(qpns[4 * me as usize..][..4].try_into().unwrap());
            peers[p].remote = remote;
            if let Some(qp) = &peers[p].qp {
                dev.connect(qp, rqpn, remote.lid, &remote.gid, 0, 0)
                    .map_err(|e| {
                        TransportError::Unavailable(format!("connecting to rank {p}: {e}"))
                    })?;
            }
        }
        // nobody writes before every queue pair of the job is ready to receive
        ex.fence()?;
        Ok(VerbsTransport {
            peers,
            regs: Regs::new(),
            _rings_mr: rings_mr,
            _credits_mr: credits_mr,
            mirror_mr,
            bounce_mr,
            scratch_mr,
            rings,
            credits,
            mirror,
            bounce,
            scratch,
            dev,
            me,
            size,
            ring,
            inline,
            ops: Vec::new(),
            free_ops: Vec::new(),
            free_bounce: (0..BOUNCE_SLOTS as u16).rev().collect(),
            done: VecDeque::new(),
            to_self: VecDeque::new(),
            next_peer: 0,
            wc: [Wc::default(); 32],
            reaped: false,
        })
    }

    /// The device in use, e.g. `rxe0 port 1 (RoCE, GID index 1)`.
    pub fn device_name(&self) -> String {
        let i = self.dev.info();
        if i.ethernet() {
            format!(
                "{} port {} (RoCE, GID index {})",
                i.name(),
                i.port,
                i.gid_index
            )
        } else if i.gid_index >= 0 {
            format!(
                "{} port {} (InfiniBand, GID index {})",
                i.name(),
                i.port,
                i.gid_index
            )
        } else {
            format!("{} port {} (InfiniBand, LID {})", i.name(), i.port, i.lid)
        }
    }

    /// Registrations of user buffers in use now (exposures and zero-copy operations in
    /// flight; idle cached ones not counted).
    pub fn live_registrations(&self) -> usize {
        self.regs.in_use()
    }

    /// Registrations of user buffers made since start, and uses served by the cache.
    pub fn registrations_made(&self) -> (u64, u64) {
        (self.regs.made, self.regs.hits)
    }

    /// Why registrations are not cached past their last use, if they are not.
    pub fn no_registration_cache(&self) -> Option<&str> {
        self.regs.no_cache.as_deref()
    }

    /// Work requests posted to `peer` and not yet known complete.
    pub fn in_flight(&self, peer: Rank) -> u32 {
        self.peers.get(peer as usize).map_or(0, |p| p.posted)
    }

    /// Inline bytes per work request the device granted.
    pub fn max_inline(&self) -> usize {
        self.inline
    }

    fn peer(&mut self, p: Rank) -> Result<&mut Peer, TransportError> {
        // the error built only when needed: `ok_or` would drop one per call, through
        // its drop glue (as in the shared-memory transport's `try_send`)
        #[allow(clippy::unnecessary_lazy_evaluations)]
        let peer = self
            .peers
            .get_mut(p as usize)
            .ok_or_else(|| TransportError::NoSuchRank(p))?;
        match &peer.failed {
            Some(e) => Err(copy_err(e)),
            None => Ok(peer),
        }
    }

    /// Posts one work request to peer `p`, signaled when `what` asks for a completion
    /// or when `SIGNAL_EVERY` unsignaled ones have gone before.
    ///
    /// # Safety
    /// The local range must stay valid until the work request completes (for an inline
    /// write: until this returns), as [`Qp::post`] requires.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post(
        &mut self,
        p: Rank,
        op: Op,
        local: (usize, usize, u32),
        remote: (u64, u32),
        inline: bool,
        what: Option<What>,
    ) -> Result<(), TransportError> {
        let peer = &mut self.peers[p as usize];
        peer.since_signal += 1;
        let signal = what.is_some() || peer.since_signal >= SIGNAL_EVERY;
        let wr_id = if signal {
            let s = Signaled {
                peer: p,
                retire: peer.since_signal,
                what: what.unwrap_or(What::Retire),
            };
            peer.since_signal = 0;
            match self.free_ops.pop() {
                Some(i) => {
                    self.ops[i as usize] = Some(s);
                    i as u64
                }
                None => {
                    self.ops.push(Some(s));
                    (self.ops.len() - 1) as u64
                }
            }
        } else {
            UNSIGNALED | p as u64
        };
        peer.posted += 1;
        let qp = peer.qp.as_ref().expect("not self");
        // SAFETY: forwarded from this function's contract.
        let r = unsafe {
            qp.post(
                op,
                wr_id,
                local.0,
                local.1 as u32,
                local.2,
                remote.0,
                remote.1,
                signal,
                inline,
            )
        };
        r.map_err(|errno| {
            let e = TransportError::PeerGone(
                p,
                format!(
                    "ibv_post_send failed: {}",
                    std::io::Error::from_raw_os_error(errno)
                ),
            );
            self.peers[p as usize].failed = Some(copy_err(&e));
            e
        })
    }

    /// Waits (polling the completion queue) until peer `p`'s send queue has room for
    /// `n` more work requests. A send queue drains by itself: its requests complete or
    /// fail (retries are bounded), so this ends.
    fn room(&mut self, p: Rank, n: u32) -> Result<(), TransportError> {
        while self.peers[p as usize].posted + n > SQ_DEPTH - 1 {
            // force a signaled request into the queue if none is outstanding
            self.reap();
            self.peer(p)?;
        }
        Ok(())
    }

    /// Drains the completion queue.
    fn reap(&mut self) -> usize {
        let mut total = 0;
        loop {
            let n = match self.dev.poll(&mut self.wc) {
                Ok(n) => n,
                Err(e) => {
                    for p in &mut self.peers {
                        p.failed
                            .get_or_insert(TransportError::PeerGone(p_rank_unknown(), e.clone()));
                    }
                    return total;
                }
            };
            for i in 0..n {
                let c = self.wc[i];
                self.complete(&c);
            }
            total += n;
            if n < self.wc.len() {
                return total;
            }
        }
    }

    fn complete(&mut self, c: &Wc) {
        let ok = c.status == 0;
        if c.wr_id & UNSIGNALED != 0 {
            // only failures of unsignaled requests complete
            let p = (c.wr_id & !UNSIGNALED) as Rank;
            self.fail(p, c, &"unsignaled write (control ring or inline put)");
            return;
        }
        let Some(s) = self.ops[c.wr_id as usize].take() else {
            return;
        };
        self.free_ops.push(c.wr_id as u32);
        let peer = &mut self.peers[s.peer as usize];
        peer.posted = peer.posted.saturating_sub(s.retire);
        match s.what {
            What::Retire => {}
            What::Bounce(slot) => self.free_bounce.push(slot),
            What::Pending { token, reg } => {
                self.regs.release(reg);
                let r = if ok {
                    Ok(())
                } else {
                    Err(self.error_of(s.peer, c, &s.what))
                };
                self.done.push_back((token, r));
            }
        }
        if !ok {
            self.fail(s.peer, c, &s.what);
        }
    }

    fn error_of(&self, p: Rank, c: &Wc, what: &dyn std::fmt::Debug) -> TransportError {
        let what = format!(
            "{} (status {}, vendor error {:#x}, work request {what:?})",
            ffi::status_str(c.status),
            c.status,
            c.vendor_err
        );
        if c.status == ffi::status_rem_access() {
            TransportError::AccessDenied(p, what)
        } else {
            TransportError::PeerGone(p, what)
        }
    }

    /// Marks peer `p` failed after a failed completion (the queue pair is in the error
    /// state: every later request to it is flushed). The first real error is kept.
    fn fail(&mut self, p: Rank, c: &Wc, what: &dyn std::fmt::Debug) {
        if c.status == ffi::status_flush() && self.peers[p as usize].failed.is_some() {
            return;
        }
        if self.peers[p as usize].failed.is_none() {
            let e = self.error_of(p, c, what);
            self.peers[p as usize].failed = Some(e);
        }
    }

    /// Posts a zero-copy WRITE from, or READ into, the caller's `addr .. addr + len`,
    /// registered for the operation (or found in the cache) and released when it
    /// completes; `poll_done` reports `token`.
    ///
    /// # Safety
    /// The memory stays valid — unchanged for a WRITE, unread for a READ — until
    /// `poll_done` reports `token`.
    unsafe fn zero_copy(
        &mut self,
        peer: Rank,
        op: Op,
        addr: usize,
        len: usize,
        remote: (u64, u32),
        token: u64,
    ) -> Result<Posted, TransportError> {
        // a READ writes the local memory; a WRITE only reads it (no rights needed)
        let access = if op == Op::Read {
            ffi::ACCESS_LOCAL_WRITE
        } else {
            0
        };
        let (lkey, _) = self
            .regs
            .acquire(&self.dev, addr, len, access)
            .map_err(|e| TransportError::Os {
                call: "ibv_reg_mr",
                source: std::io::Error::other(e),
            })?;
        let what = Some(What::Pending { token, reg: lkey });
        // SAFETY: forwarded from this function's contract.
        let r = unsafe { self.post(peer, op, (addr, len, lkey), remote, false, what) };
        if let Err(e) = r {
            self.regs.release(lkey);
            return Err(e);
        }
        Ok(Posted::Pending)
    }

    fn ring_at(&self, p: Rank) -> usize {
        p as usize * self.ring
    }

    /// Writes this rank's read position of peer `p`'s ring back to `p`.
    fn return_credit(&mut self, p: Rank) -> Result<(), TransportError> {
        let tail = self.peers[p as usize].tail;
        self.room(p, 1)?;
        let at = p as usize * CREDIT_STRIDE;
        self.scratch[at..at + 8].copy_from_slice(&tail.to_le_bytes());
        let local = (self.scratch.as_ptr() as usize + at, 8, self.scratch_mr.lkey);
        let r = self.peers[p as usize].remote;
        let remote = (
            r.credits + self.me as u64 * CREDIT_STRIDE as u64,
            r.credits_rkey,
        );
        let inline = self.inline >= 8;
        // SAFETY: the scratch slot of `p` is only rewritten by the next credit return
        // to `p`, which is queued behind this write on the same queue pair (a non-inline
        // write has read its source before a later one on the queue pair starts).
        unsafe { self.post(p, Op::Write, local, remote, inline, None)? };
        self.peers[p as usize].tail_sent = tail;
        Ok(())
    }

    fn copy_local(&mut self, dst: usize, src: usize, len: usize) {
        // SAFETY: both ranges were checked by the caller against registrations this
        // process made for memory it owns (see `check_self`) or are the caller's own
        // slices; `copy` allows overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
    }

    /// For one-sided access to this rank itself: the descriptor must be one of this
    /// rank's live exposures, and the access inside it.
    fn check_self(&self, buf: &RemoteBuf, offset: u64, len: u64) -> Result<usize, TransportError> {
        check_bounds(buf, offset, len)?;
        match self.regs.range(buf.key as u32) {
            Some((addr, l)) if addr as u64 == buf.addr && l as u64 >= buf.len => {
                Ok((buf.addr + offset) as usize)
            }
            _ => Err(TransportError::AccessDenied(
                self.me,
                format!("no live exposure with key {:#x}", buf.key),
            )),
        }
    }
}

/// Zeroes every 64-byte-aligned word of a consumed stretch of a ring — the places a
/// later record's header may land — so that the reader can never take an old record's
/// inner bytes for a header carrying the sequence number it expects (the transport's
/// and the engine's counters advance together, so such a coincidence happens).
fn clear_slots(stretch: &mut [u8]) {
    for slot in stretch.chunks_mut(64) {
        slot[..8].fill(0);
    }
}

fn p_rank_unknown() -> Rank {
    Rank::MAX
}

/// A copy of an error (TransportError holds an io::Error, which is not Clone).
fn copy_err(e: &TransportError) -> TransportError {
    match e {
        TransportError::PeerGone(p, s) => TransportError::PeerGone(*p, s.clone()),
        TransportError::AccessDenied(p, s) => TransportError::AccessDenied(*p, s.clone()),
        other => TransportError::Unavailable(other.to_string()),
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], TransportError> {
        if self.0.len() < N {
            return Err(TransportError::Exchange("short verbs address".into()));
        }
        let (a, b) = self.0.split_at(N);
        self.0 = b;
        Ok(a.try_into().unwrap())
    }
}

impl Transport for VerbsTransport {
    fn rank(&self) -> Rank {
        self.me
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn caps(&self) -> Caps {
        Caps {
            max_ctrl: MAX_CTRL,
            ctrl_slots: 64,
            // records are rounded up to 64 bytes with 16 of framing, up to twice what
            // the protocol's weight (length rounded to 64, plus 8) counts; one
            // maximum record of wrap-around slack
            ring_bytes: (self.ring - 2 * MAX_RECORD) / 2,
            put: true,
            get: true,
            registers: true,
            put_inline: self.inline,
            put_bounce: BOUNCE_SLOT,
            // not measured over a network: eager up to the eager limit
            lone_read_above: u64::MAX,
            cross_read_above: u64::MAX,
        }
    }

    fn try_send(
        &mut self,
        peer: Rank,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), TransportError> {
        let len = header.len() + payload.len();
        if len > MAX_CTRL {
            return Err(TransportError::TooLarge { len, max: MAX_CTRL });
        }
        if peer == self.me {
            self.to_self.push_back([header, payload].concat());
            return Ok(());
        }
        let ring = self.ring as u64;
        let rec = record_len(len) as u64;
        let at_credit = peer as usize * CREDIT_STRIDE;
        let p = self.peer(peer)?;
        // a power of two (checked in `new`)
        let pos = p.head & (ring - 1);
        let wrap = pos + rec > ring;
        let need = rec + if wrap { ring - pos } else { 0 };
        // SAFETY: the credit slot is inside the credit mapping and 8-byte aligned.
        let consumed = unsafe { ffi::read_u64(self.credits.as_ptr().add(at_credit)) };
        let p = &self.peers[peer as usize];
        if p.head + need - consumed > ring {
            return Err(TransportError::Full(peer));
        }
        if p.posted + 2 > SQ_DEPTH - 1 {
            self.reap();
            if self.peer(peer)?.posted + 2 > SQ_DEPTH - 1 {
                return Err(TransportError::Full(peer));
            }
        }
        let base = self.ring_at(peer);
        let remote = self.peers[peer as usize].remote;
        let remote_ring = remote.rings + self.me as u64 * ring;
        let mut pos = pos;
        if wrap {
            let p = &mut self.peers[peer as usize];
            let word = (WRAP as u64) << 32 | p.seq_out as u64;
            p.seq_out = p.seq_out.wrapping_add(1);
            p.head += ring - pos;
            let at = base + pos as usize;
            self.mirror[at..at + 8].copy_from_slice(&word.to_le_bytes());
            let local = (self.mirror.as_ptr() as usize + at, 8, self.mirror_mr.lkey);
            // SAFETY: the mirror bytes stay untouched until the ring space is free
            // again, which the peer signals only after it read the record (so the write
            // has completed).
            unsafe {
                self.post(
                    peer,
                    Op::Write,
                    local,
                    (remote_ring + pos, remote.rings_rkey),
                    self.inline >= 8,
                    None,
                )?
            };
            pos = 0;
        }
        let p = &mut self.peers[peer as usize];
        let word = (len as u64) << 32 | p.seq_out as u64;
        p.seq_out = p.seq_out.wrapping_add(1);
        p.head += rec;
        let at = base + pos as usize;
        let body = 8 + len.div_ceil(8) * 8;
        let m = &mut self.mirror[at..at + body + 8];
        m[..8].copy_from_slice(&word.to_le_bytes());
        m[8..8 + header.len()].copy_from_slice(header);
        m[8 + header.len()..8 + len].copy_from_slice(payload);
        m[body..body + 8].copy_from_slice(&word.to_le_bytes());
        let wlen = body + 8;
        let local = (
            self.mirror.as_ptr() as usize + at,
            wlen,
            self.mirror_mr.lkey,
        );
        let inline = wlen <= self.inline;
        // SAFETY: as for the wrap marker above.
        unsafe {
            self.post(
                peer,
                Op::Write,
                local,
                (remote_ring + pos, remote.rings_rkey),
                inline,
                None,
            )
        }
    }

    fn poll(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Rank, &[u8]),
    ) -> Result<usize, TransportError> {
        self.reap();
        self.reaped = true;
        let mut n = 0;
        while n < max {
            let Some(m) = self.to_self.pop_front() else {
                break;
            };
            f(self.me, &m);
            n += 1;
        }
        let size = self.size as usize;
        let ring = self.ring as u64;
        // rings are a power of two, and peers taken in turn without a division: an
        // idle poll (a waiting rank's loop) is mostly this
        let next = |q: usize| if q + 1 == size { 0 } else { q + 1 };
        let mut q = self.next_peer;
        for _ in 0..size {
            if n >= max {
                break;
            }
            let p = q as Rank;
            q = next(q);
            if p == self.me {
                continue;
            }
            if let Some(e) = &self.peers[p as usize].failed {
                return Err(copy_err(e));
            }
            let base = self.ring_at(p);
            let mut got = false;
            while n < max {
                let peer = &self.peers[p as usize];
                let pos = (peer.tail & (ring - 1)) as usize;
                // SAFETY: `base + pos` is inside the ring mapping, 8-byte aligned
                // (records are 64-byte aligned).
                let word = unsafe { ffi::read_u64(self.rings.as_ptr().add(base + pos)) };
                if word as u32 != peer.seq_in {
                    break;
                }
                let len = (word >> 32) as u32;
                if len == WRAP {
                    clear_slots(&mut self.rings[base + pos..base + self.ring]);
                    let peer = &mut self.peers[p as usize];
                    peer.tail += ring - pos as u64;
                    peer.seq_in = peer.seq_in.wrapping_add(1);
                    got = true;
                    continue;
                }
                let len = len as usize;
                let body = 8 + len.div_ceil(8) * 8;
                if len > MAX_CTRL || pos + body + 8 > self.ring {
                    // a header word read while it was being written (the slots of
                    // consumed records are zeroed, so it is not an old one)
                    break;
                }
                // SAFETY: as above; the trailer is inside the ring (checked).
                let trailer = unsafe { ffi::read_u64(self.rings.as_ptr().add(base + pos + body)) };
                if trailer != word {
                    break; // still arriving
                }
                std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                f(p, &self.rings[base + pos + 8..base + pos + 8 + len]);
                clear_slots(&mut self.rings[base + pos..base + pos + record_len(len)]);
                let peer = &mut self.peers[p as usize];
                peer.tail += record_len(len) as u64;
                peer.seq_in = peer.seq_in.wrapping_add(1);
                n += 1;
                got = true;
            }
            if got && self.peers[p as usize].tail - self.peers[p as usize].tail_sent >= ring / 4 {
                self.return_credit(p)?;
            }
        }
        self.next_peer = next(self.next_peer);
        Ok(n)
    }

    fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError> {
        if len == 0 {
            return Ok(RemoteBuf {
                addr: addr as u64,
                len: 0,
                key: 0,
            });
        }
        let all = ffi::ACCESS_LOCAL_WRITE | ffi::ACCESS_REMOTE_WRITE | ffi::ACCESS_REMOTE_READ;
        let r = self
            .regs
            .acquire(&self.dev, addr, len, all)
            // read-only memory (a send buffer in a constant) can only be read
            .or_else(|_| {
                self.regs
                    .acquire(&self.dev, addr, len, ffi::ACCESS_REMOTE_READ)
            });
        match r {
            Ok((_, rkey)) => Ok(RemoteBuf {
                addr: addr as u64,
                len: len as u64,
                key: rkey as u64,
            }),
            Err(e) => Err(TransportError::Os {
                call: "ibv_reg_mr",
                source: std::io::Error::other(e),
            }),
        }
    }

    fn unexpose(&mut self, buf: RemoteBuf) {
        if buf.len == 0 {
            return;
        }
        if let Some(l) = self.regs.exposure(buf.key as u32) {
            self.regs.release(l);
        }
    }

    fn put(
        &mut self,
        peer: Rank,
        src: &[u8],
        dst: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError> {
        check_bounds(&dst, offset, src.len() as u64)?;
        if src.is_empty() {
            return Ok(Posted::Done);
        }
        if peer == self.me {
            let to = self.check_self(&dst, offset, src.len() as u64)?;
            self.copy_local(to, src.as_ptr() as usize, src.len());
            return Ok(Posted::Done);
        }
        self.peer(peer)?;
        self.room(peer, 1)?;
        let remote = (dst.addr + offset, dst.key as u32);
        let len = src.len();
        if len <= self.inline {
            // tier 1: the bytes travel in the work request
            // SAFETY: an inline write has copied its source when post returns.
            unsafe {
                self.post(
                    peer,
                    Op::Write,
                    (src.as_ptr() as usize, len, 0),
                    remote,
                    true,
                    None,
                )?
            };
            return Ok(Posted::Done);
        }
        if len <= BOUNCE_SLOT {
            if self.free_bounce.is_empty() {
                self.reap();
            }
            if let Some(slot) = self.free_bounce.pop() {
                // tier 2: copied into a registered bounce buffer
                let at = slot as usize * BOUNCE_SLOT;
                self.bounce[at..at + len].copy_from_slice(src);
                let local = (self.bounce.as_ptr() as usize + at, len, self.bounce_mr.lkey);
                // SAFETY: the slot is not reused before this write's completion frees it.
                unsafe {
                    self.post(
                        peer,
                        Op::Write,
                        local,
                        remote,
                        false,
                        Some(What::Bounce(slot)),
                    )?
                };
                return Ok(Posted::Done);
            }
        }
        // tier 3: zero copy from the caller's buffer
        // SAFETY: the caller keeps `src` alive and unchanged until `poll_done` reports
        // `token` (the `Posted::Pending` contract of `Transport::put`).
        unsafe { self.zero_copy(peer, Op::Write, src.as_ptr() as usize, len, remote, token) }
    }

    fn get(
        &mut self,
        peer: Rank,
        dst: &mut [u8],
        src: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError> {
        check_bounds(&src, offset, dst.len() as u64)?;
        if dst.is_empty() {
            return Ok(Posted::Done);
        }
        if peer == self.me {
            let from = self.check_self(&src, offset, dst.len() as u64)?;
            self.copy_local(dst.as_mut_ptr() as usize, from, dst.len());
            return Ok(Posted::Done);
        }
        self.peer(peer)?;
        self.room(peer, 1)?;
        let remote = (src.addr + offset, src.key as u32);
        // SAFETY: the caller keeps `dst` alive and does not read it until `poll_done`
        // reports `token` (the `Posted::Pending` contract of `Transport::get`).
        unsafe {
            self.zero_copy(
                peer,
                Op::Read,
                dst.as_mut_ptr() as usize,
                dst.len(),
                remote,
                token,
            )
        }
    }

    fn poll_done(
        &mut self,
        f: &mut dyn FnMut(u64, Result<(), TransportError>),
    ) -> Result<usize, TransportError> {
        // the progress loop has just polled (and reaped): a completion that came
        // since is reaped by its next poll. A caller that calls `poll_done` alone
        // reaps every time (only the first call after a `poll` skips it).
        if !std::mem::take(&mut self.reaped) {
            self.reap();
        }
        let n = self.done.len();
        while let Some((t, r)) = self.done.pop_front() {
            f(t, r);
        }
        Ok(n)
    }
}

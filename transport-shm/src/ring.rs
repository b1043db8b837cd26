//! The single-producer/single-consumer byte ring and the segment layout.
//!
//! All raw shared-memory access of the crate lives in [`RingMem`] and [`SegmentView`];
//! [`Producer`] and [`Consumer`] implement the protocol in safe code on top of them.
//! See the crate documentation for the layout and the protocol.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// Records start on, and are padded to, this many bytes (one cache line).
pub const LINE: usize = 64;
/// Size of the header word that starts every record.
pub const HDR: usize = 8;
/// Largest control message (header + payload): 64 KiB of eager payload plus room for
/// a protocol header of up to 120 bytes. A maximum record is exactly 1026 lines.
pub const MAX_CTRL: usize = 64 * 1024 + 120;
/// Bytes of a maximum-size record.
pub const MAX_RECORD: usize = record_size(MAX_CTRL);
/// Data bytes of one ring (a power of two, so offsets are `pos & (RING_BYTES - 1)`).
pub const RING_BYTES: usize = 2 << 20;
/// Messages of any size up to [`MAX_CTRL`] that always fit in one ring at once.
///
/// Records in flight, at most two wrap-around pads (each shorter than a record), the
/// space a consumer holds back ([`HOLD_BYTES`]) and the line after the newest record
/// must fit, hence the `- 3`: `(CTRL_SLOTS + 2) * MAX_RECORD + HOLD_BYTES + LINE <=
/// RING_BYTES`.
pub const CTRL_SLOTS: usize = RING_BYTES / MAX_RECORD - 3;
/// Bytes of records already read that a consumer may keep before releasing their
/// space (the consumer clears and releases them when its ring is next empty).
pub const HOLD_BYTES: usize = MAX_RECORD;
/// A producer past this data offset whose consumer has kept up (is at most
/// [`WRAP_LAG`] bytes behind) goes back to the start of the ring (a pad covers the rest
/// of the lap), so that a stream of small messages cycles through the first
/// `SMALL_LAP` bytes, which stay in the cache, instead of through all of the ring's
/// 2 MiB. Chosen by measurement (docs/performance.md, "A small lap").
pub const SMALL_LAP: usize = 128 * 1024;
/// How far behind its producer a consumer may be for the producer to go back early.
pub const WRAP_LAG: usize = 8 * 1024;
/// A producer past this data offset whose consumer has (nearly) caught up, at most
/// [`TIGHT_LAG`] bytes behind, goes back to the start already here: a ping-pong, or a
/// stream whose consumer keeps up, then cycles through the first `TIGHT_LAP` bytes of
/// each ring, which the two rings of a pair keep in the cores' L1 caches (1–4 KiB
/// ping-pongs in 0.64–0.92x the time of the 128 KiB lap; docs/performance.md, "A
/// tight lap"). A consumer further behind leaves the producer on the small lap.
pub const TIGHT_LAP: usize = 16 * 1024;
/// How far behind its producer a consumer may be for the producer to take the tight
/// lap; also how often (in bytes written) the producer reads `head` again to see
/// whether its consumer has caught up, between the tight and the small lap.
pub const TIGHT_LAG: usize = 2 * 1024;
/// The largest record that takes the tight lap. A larger one below [`STREAM_FROM`]
/// (a message of about 4–16 KiB) goes on to the small lap even when its consumer
/// has caught up: a ping-pong of 4–8 KiB through the small lap took 0.86–0.88x the
/// time of one through the tight lap on the Intel machine in its far state
/// (docs/performance.md, "A 4–16 KiB record's lap"). Streamed records keep the
/// tight lap: on the small one the lone judge of 16 KiB chose the ring more often
/// and lost.
pub const TIGHT_RECORD: usize = 4096;

/// Records of more than this many bytes (messages of ~4 KiB and more) are not cleared
/// by their consumer: their producer clears the one line that matters, the line after
/// a record, where the consumer looks next, before it publishes the record, if that
/// line may hold such a record's bytes (`Stale`). A consumer's clearing stores into
/// every line it has read, each then taken back from its cache by the producer's next
/// copy into it: in a stream of 8–64 KiB messages, `rsmpi-bench bw` carried 1.1–1.35x
/// more without it (`docs/performance.md`, "Large records left uncleared"). Smaller
/// multi-line records are still cleared (the producer's clear of the line after each
/// cost a window of 256 B–2 KiB messages 15–35 %), and so are one-line records,
/// where the clear is of the line just read.
pub const UNCLEARED_ABOVE: usize = 4096;
/// Bytes reserved for the segment header at the start of a segment.
pub const SEG_HDR_BYTES: usize = 128;
/// Bytes reserved for a ring's control block, in front of its data.
pub const CTRL_BYTES: usize = round_up(std::mem::size_of::<RingCtrl>(), 128);
/// Distance between consecutive rings in a segment.
pub const RING_STRIDE: usize = CTRL_BYTES + RING_BYTES;

/// `"rsmpiSHM"` as a little-endian word: identifies a segment.
pub const MAGIC: u64 = u64::from_le_bytes(*b"rsmpiSHM");
/// Layout version; bumped whenever the layout or the record format changes.
pub const VERSION: u32 = 10;

/// Messages of at least this many bytes are **streamed**: the producer publishes the
/// record when its first [`FRAG`] bytes are written and the rest fragment by fragment
/// behind the ring's progress word, so that the consumer's copy out overlaps the
/// producer's copy in. Smaller messages are published whole. Chosen by measurement
/// (docs/performance.md, "The data path"; 8 KiB until the forty-second round,
/// "8 KiB messages published whole": whole, an 8 KiB message carries a window 1.1x
/// faster and its one-way time is no longer).
pub const STREAM_FROM: usize = 16 * 1024;
/// Bytes the producer writes between two stores of the progress word of a streamed
/// record (the first fragment holds the protocol header: at least
/// `transport::STREAM_HEAD` bytes).
pub const FRAG: usize = 4 * 1024;

// Record header word:
// | seq (43 bits) | INTERNAL (1) | STREAM (1) | PAD (1) | VALID (1) | len (17 bits) |
const LEN_MASK: u64 = (1 << 17) - 1;
const VALID: u64 = 1 << 17;
const PAD: u64 = 1 << 18;
const STREAM: u64 = 1 << 19;
/// The record is the transport's own (a rendezvous read's request or data,
/// `crate::pull`), never handed to the caller of `poll`.
const INTERNAL: u64 = 1 << 20;
const SEQ_SHIFT: u32 = 21;

const _: () = {
    assert!(MAX_CTRL as u64 <= LEN_MASK);
    assert!(FRAG >= transport::STREAM_HEAD && FRAG < STREAM_FROM && STREAM_FROM <= MAX_CTRL);
    assert!(MAX_RECORD % LINE == 0);
    assert!(RING_BYTES.is_power_of_two());
    // the engine's default 16 credits (returned at 8) need 16 + 2 + 2 slots
    assert!(CTRL_SLOTS >= 20);
    // (and the line after the newest record, which its producer may clear)
    assert!((CTRL_SLOTS + 2) * MAX_RECORD + HOLD_BYTES + LINE <= RING_BYTES);
    assert!(std::mem::align_of::<RingCtrl>() <= 128);
    assert!(std::mem::size_of::<SegHeader>() <= SEG_HDR_BYTES);
    assert!(CTRL_BYTES % 128 == 0);
    // a record fits before the small lap's pad whatever the consumer's allowed lag
    assert!(WRAP_LAG + MAX_RECORD <= SMALL_LAP && SMALL_LAP < RING_BYTES);
    // the tight lap's pad leaves room for a window of small messages
    assert!(TIGHT_LAG < WRAP_LAG && TIGHT_LAP >= 8 * TIGHT_LAG && TIGHT_LAP < SMALL_LAP);
};

/// Asks the core for the lines of a whole record's message `m` (a slice into the
/// ring) after its first, whose line holds the header the consumer has just read:
/// they then come from the producer's cache together and while the caller decodes
/// and matches the message, not one after another inside the copy out (64 B–4 KiB
/// one-way latency 0.89–0.96x; docs/performance.md, "The rest of a record asked
/// for early"). Out of line, so that a one-line message's path is not rearranged
/// around it. A no-op on other architectures.
#[inline(never)]
pub(crate) fn prefetch_rest(m: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        // m starts HDR bytes into its record's first line
        let mut p = m.as_ptr().wrapping_add(LINE - HDR);
        let end = m.as_ptr().wrapping_add(m.len());
        while p < end {
            // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has. A prefetch
            // is a hint: it never faults, reads nothing into the program and changes no
            // memory, so any address is sound (these are inside `m` anyway).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
            };
            p = p.wrapping_add(LINE);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = m;
}

/// Rounds `n` up to a multiple of 64-byte lines.
pub const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Whether a record of `sz` bytes (a `len`-byte message) at data offset `off` goes
/// back to the ring's start early if its consumer has kept up
/// ([`Producer::early_pad`]): past the tight lap, with room for the lag in front of
/// it, when it is a record of at most [`TIGHT_RECORD`] bytes, a streamed one, or
/// past the small lap.
#[inline(always)]
const fn may_lap_early(off: usize, sz: usize, len: usize) -> bool {
    off >= TIGHT_LAP
        && sz + TIGHT_LAG <= off
        && (sz <= TIGHT_RECORD || off >= SMALL_LAP || len >= STREAM_FROM)
}

/// Whether this core has `PREFETCHW` (CPUID leaf `0x8000_0001`, ECX bit 8; Linux's
/// `3dnowprefetch`), which [`RingMem::prefetch_write`] uses. Every x86_64 CPU has
/// that leaf; Intel's before Broadwell lack the bit.
fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            // (`__cpuid` is an unsafe function in the older Rust of `rust-version`, a
            // safe one in newer)
            #[allow(unused_unsafe)]
            // SAFETY: CPUID exists on every x86_64 CPU, and so does leaf 0x8000_0001
            // (its EDX holds the long-mode bit); it only reads identification bits.
            let leaf = unsafe { std::arch::x86_64::__cpuid(0x8000_0001) };
            leaf.ecx & (1 << 8) != 0
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Bytes a record carrying a `len`-byte message occupies in the ring.
pub const fn record_size(len: usize) -> usize {
    round_up(HDR + len, LINE)
}

/// The data offset of stream position `pos`, a record's start (every record and pad
/// is a whole number of lines, so `pos` is a multiple of [`LINE`]). Masked to a line
/// as well as to the ring, which lets the compiler drop [`RingMem::word`]'s bounds and
/// alignment check (three instructions at each look at a ring).
#[inline(always)]
fn line_off(pos: u64) -> usize {
    debug_assert_eq!(pos % LINE as u64, 0);
    pos as usize & (RING_BYTES - LINE)
}

/// The header word of a record (or pad) starting at stream position `pos`. The
/// sequence is the line number `pos / 64`, so a header left over from an earlier lap
/// never matches what the consumer expects at the same place in a later lap.
fn encode(pos: u64, len: usize, flags: u64) -> u64 {
    ((pos / LINE as u64) << SEQ_SHIFT) | VALID | flags | len as u64
}

/// The control block of a ring: one consumer-written word, which the producer reads
/// only when the ring looks full, one producer-written word, which the consumer
/// reads only while a streamed record is arriving, the claim word of the
/// rendezvous reads that the ring's producer asks its consumer to serve
/// (`crate::pull`), and the claim word of the direct writes that the ring's producer
/// pushes through it (`crate::push`); both sides change a claim word, only while such
/// a transfer is under way. Last, a line in which the consumer tells the producer of
/// its reads of the producer's memory ([`Told`]).
#[repr(C)]
pub struct RingCtrl {
    /// Stream position up to which the consumer has released space (monotonic bytes).
    pub head: CachePadded<AtomicU64>,
    /// Stream position up to which the bytes of the streamed record being written are
    /// there (monotonic bytes; stored with Release after each fragment).
    pub progress: CachePadded<AtomicU64>,
    /// The first chunk of the producer's pulls not yet claimed by either side
    /// (monotonic; advanced only by compare-and-swap).
    pub claim: CachePadded<AtomicU64>,
    /// The first chunk of the producer's pushes not yet claimed by either side
    /// (monotonic; advanced only by compare-and-swap).
    pub push: CachePadded<AtomicU64>,
    /// What the consumer tells the producer of its reads of the producer's memory.
    /// Written by the consumer, read by the producer.
    pub told: CachePadded<Told>,
}

/// What a ring's consumer tells its producer of its reads of the producer's memory
/// (one line, written by the consumer only).
#[repr(C)]
pub struct Told {
    /// What the consumer's reads of the producer's lone messages took, per size class
    /// of `crate::lone` (ns per KiB, the least of its last few; 0: none yet), for the
    /// producer's lone judge.
    pub lone: [AtomicU32; crate::LONE_CLASSES],
    /// The way of the consumer's latest large read from the producer, per size class
    /// of `crate::pull`, with a count of them (`crate::pull::Reader::lead`; 0: none
    /// yet). Where the consumer leads the pair, the producer's own large reads from
    /// it go the same way while the two read at once (`crate::pull::Reader::follow`);
    /// where the producer leads, its judge learns from the count whether they do.
    pub ways: [AtomicU32; crate::pull::CLASSES],
    /// What the consumer's copies of the producer's large messages out of the ring
    /// take, per size class of `crate::lone` (ns per KiB, the lower median of its
    /// last few; 0: not enough yet), for the producer's stream judge.
    pub copies: [AtomicU32; crate::LONE_CLASSES],
}

/// The first bytes of every segment, written by its owner before the first fence.
#[repr(C)]
pub struct SegHeader {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub nranks: AtomicU32,
    pub owner: AtomicU32,
    pub reserved: AtomicU32,
    pub ring_bytes: AtomicU64,
    pub max_ctrl: AtomicU64,
}

/// Total length of a segment holding `nranks` inbound rings.
pub const fn segment_len(nranks: u32) -> usize {
    SEG_HDR_BYTES + nranks as usize * RING_STRIDE
}

/// A shared-memory segment laid out as in the crate docs: a header and one ring per
/// sender rank.
pub struct SegmentView {
    base: NonNull<u8>,
    nranks: u32,
}

impl SegmentView {
    /// Views the `segment_len(nranks)` bytes at `base` as a segment.
    ///
    /// # Safety
    /// `base` must be aligned to 128 bytes (a mapping is page-aligned) and valid for
    /// reads and writes of `segment_len(nranks)` bytes for as long as this view and
    /// every [`RingMem`] obtained from it exist. Other processes may access the memory
    /// concurrently, but only through this module's protocol (atomics on header words
    /// and indices, plain bytes only in space the protocol hands them).
    pub unsafe fn from_raw(base: NonNull<u8>, nranks: u32) -> Self {
        debug_assert_eq!(base.as_ptr() as usize % 128, 0);
        Self { base, nranks }
    }

    /// The segment header.
    pub fn header(&self) -> &SegHeader {
        // SAFETY: the segment starts with SEG_HDR_BYTES >= size_of::<SegHeader>() bytes,
        // `base` is 128-aligned (>= align_of::<SegHeader>()), valid for the lifetime of
        // `self` (from_raw contract), and every field is an atomic, so shared access from
        // several processes is race-free. Zero bytes are a valid value for all fields.
        unsafe { &*(self.base.as_ptr() as *const SegHeader) }
    }

    /// Address of the segment header in this process (what the CMA probe reads).
    pub fn header_addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// Writes the header of a freshly created (zero-filled) segment.
    pub fn init_header(&self, owner: u32) {
        let h = self.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.nranks.store(self.nranks, Ordering::Relaxed);
        h.owner.store(owner, Ordering::Relaxed);
        h.ring_bytes.store(RING_BYTES as u64, Ordering::Relaxed);
        h.max_ctrl.store(MAX_CTRL as u64, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
    }

    /// Checks that a peer's segment has the layout this build expects.
    pub fn validate(&self, owner: u32) -> Result<(), String> {
        let h = self.header();
        let magic = h.magic.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(format!("bad magic {magic:#x}"));
        }
        let got = (
            h.version.load(Ordering::Relaxed),
            h.nranks.load(Ordering::Relaxed),
            h.owner.load(Ordering::Relaxed),
            h.ring_bytes.load(Ordering::Relaxed),
            h.max_ctrl.load(Ordering::Relaxed),
        );
        let want = (
            VERSION,
            self.nranks,
            owner,
            RING_BYTES as u64,
            MAX_CTRL as u64,
        );
        if got != want {
            return Err(format!(
                "layout mismatch: (version, nranks, owner, ring_bytes, max_ctrl) is {got:?}, expected {want:?}"
            ));
        }
        Ok(())
    }

    /// The ring that `sender` writes into.
    pub fn ring(&self, sender: u32) -> RingMem {
        assert!(sender < self.nranks, "ring {sender} of {}", self.nranks);
        let off = SEG_HDR_BYTES + sender as usize * RING_STRIDE;
        // SAFETY: off + RING_STRIDE <= segment_len(nranks), so the pointer stays inside
        // the segment; it is 128-aligned because SEG_HDR_BYTES and RING_STRIDE are
        // multiples of 128. Validity for the ring's lifetime is the from_raw contract.
        unsafe { RingMem::from_raw(NonNull::new_unchecked(self.base.as_ptr().add(off))) }
    }
}

/// Raw access to one ring: its control block followed by `RING_BYTES` of data.
pub struct RingMem {
    ctrl: NonNull<RingCtrl>,
    data: NonNull<u8>,
}

// SAFETY: a RingMem is a pair of pointers into a shared mapping; every access through
// it is either atomic or confined by the ring protocol to bytes no one else touches at
// that time. Nothing ties it to the creating thread.
unsafe impl Send for RingMem {}

impl RingMem {
    /// # Safety
    /// `ring` must be 128-aligned and valid for reads and writes of [`RING_STRIDE`] bytes
    /// for the lifetime of the returned value, and be used by at most one [`Producer`]
    /// and one [`Consumer`] (possibly in other processes) following this module's
    /// protocol. The memory must have been zero-filled before first use.
    pub unsafe fn from_raw(ring: NonNull<u8>) -> Self {
        debug_assert_eq!(ring.as_ptr() as usize % 128, 0);
        Self {
            ctrl: ring.cast(),
            // SAFETY: CTRL_BYTES < RING_STRIDE, inside the ring region (caller contract).
            data: unsafe { NonNull::new_unchecked(ring.as_ptr().add(CTRL_BYTES)) },
        }
    }

    fn ctrl(&self) -> &RingCtrl {
        // SAFETY: ctrl points to CTRL_BYTES >= size_of::<RingCtrl>() valid, suitably
        // aligned bytes (from_raw contract); the struct holds only atomics.
        unsafe { self.ctrl.as_ref() }
    }

    /// Maps the pages of data bytes `from..to` into this process's page tables,
    /// writable, as a first write to each would, without touching any byte: a ring's
    /// pages are otherwise mapped by a fault each on their first use (about a
    /// microsecond a page, more than copying it), which large transfers through the
    /// ring would meet on their first lap. Best effort: an older kernel (before Linux
    /// 5.14) refuses, and the pages are then mapped on first use as before.
    fn populate(&self, from: usize, to: usize) {
        const PAGE: usize = 4096;
        let base = self.data.as_ptr() as usize;
        // whole pages, the range widened to them but kept inside the data area
        let (first, last) = (
            base.next_multiple_of(PAGE),
            (base + RING_BYTES) & !(PAGE - 1),
        );
        let start = ((base + from.min(RING_BYTES)) & !(PAGE - 1)).max(first);
        let end = (base + to.min(RING_BYTES)).next_multiple_of(PAGE).min(last);
        if end <= start {
            return;
        }
        // SAFETY: [start, end) lies inside the data area (whole pages within it),
        // which is mapped for the ring's lifetime (from_raw contract).
        // MADV_POPULATE_WRITE only faults the pages in; it reads and writes no byte,
        // so it cannot race with the other side's use of the ring.
        let _ = unsafe {
            rustix::mm::madvise(
                start as *mut std::ffi::c_void,
                end - start,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        };
    }

    /// The 8-byte word at data offset `off` (a multiple of [`LINE`]).
    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off < RING_BYTES && off % LINE == 0);
        // SAFETY: off is in bounds and 64-aligned inside a 128-aligned data area, so the
        // pointer is valid and aligned for an AtomicU64. Header words are only accessed
        // atomically while they can be read concurrently; plain payload writes to the
        // same bytes happen only in space the consumer has released (happens-before via
        // the Release store of `head` / Acquire load by the producer).
        unsafe { AtomicU64::from_ptr(self.data.as_ptr().add(off) as *mut u64) }
    }

    /// Stores zero, `Relaxed`, in the first word of every line from data offset `from`
    /// up to `to` (multiples of [`LINE`]): the clearing of records read.
    #[inline]
    fn clear_lines(&self, from: usize, to: usize) {
        assert!(from <= to && to <= RING_BYTES && from % LINE == 0);
        for off in (from..to).step_by(LINE) {
            // SAFETY: as in `word`: off < to <= RING_BYTES (checked above) and a
            // multiple of 64 inside a 128-aligned data area, so the pointer is valid and
            // aligned for an AtomicU64, and header words are only accessed atomically.
            unsafe { AtomicU64::from_ptr(self.data.as_ptr().add(off) as *mut u64) }
                .store(0, Ordering::Relaxed);
        }
    }

    /// Asks the core for the lines of data offsets `from..to` (line-aligned, at most
    /// [`RING_BYTES`]) for writing, with x86's `PREFETCHW`: each line is fetched in the
    /// exclusive state, its copy in the consumer's cache invalidated, in the background,
    /// so that the stores that later fill it retire into a line already owned
    /// ([`Producer::prepare_next`]). Only where [`has_prefetchw`] says the core has the
    /// instruction; a no-op on other architectures.
    #[inline(never)]
    fn prefetch_write(&self, from: usize, to: usize) {
        debug_assert!(from <= to && to <= RING_BYTES && from % LINE == 0);
        #[cfg(target_arch = "x86_64")]
        for off in (from..to.min(RING_BYTES)).step_by(LINE) {
            let line = self.data.as_ptr().wrapping_add(off);
            // SAFETY: PREFETCHW is a hint: it never faults (not even on an address
            // outside any mapping), reads nothing into a register and changes no byte
            // of memory, so it cannot break the ring's protocol whichever line it
            // names (these are inside the data area anyway); at worst it moves a line
            // the consumer is reading, which costs time, not correctness. The callers
            // run it only where CPUID reports the instruction (`has_prefetchw`). It
            // touches no stack or flags, as the options say.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{line}]",
                    line = in(reg) line,
                    options(nostack, preserves_flags, readonly)
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (from, to);
    }

    /// Copies `parts` back to back to data offset `off` (a whole message). Always
    /// inlined: with a second caller of `try_push` (the timed push of a lone message,
    /// `lone`) LLVM put it out of line, and a small send paid 12 instructions for the
    /// call.
    #[inline(always)]
    fn write_all(&mut self, off: usize, parts: [&[u8]; 2]) {
        let total = parts[0].len() + parts[1].len();
        if total >= transport::copy::ALIAS_FROM {
            // long enough for 4 KiB aliasing to matter (`transport::copy`); out of
            // line, so that a small message pays one test
            return self.write_all_long(off, parts);
        }
        assert!(off + total <= RING_BYTES);
        let mut dst = off;
        for p in parts.into_iter().filter(|p| !p.is_empty()) {
            // SAFETY: dst + p.len() <= off + total <= RING_BYTES (checked above), so the
            // destination is inside the data area. The producer only writes space that
            // the consumer released (Producer::try_push checks it against `head`), so no
            // one reads these bytes concurrently; `p` is a separate local slice, so the
            // ranges cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), self.data.as_ptr().add(dst), p.len())
            };
            dst += p.len();
        }
    }

    /// [`RingMem::write_all`] of a message of [`transport::copy::ALIAS_FROM`] bytes or
    /// more, each part copied by `transport::copy::copy`.
    #[inline(never)]
    fn write_all_long(&mut self, off: usize, parts: [&[u8]; 2]) {
        let total = parts[0].len() + parts[1].len();
        assert!(off + total <= RING_BYTES);
        let mut dst = off;
        for p in parts.into_iter().filter(|p| !p.is_empty()) {
            // SAFETY: as in `write_all`: inside the data area (checked above), space the
            // consumer released and no one reads meanwhile, not overlapping `p`.
            let to =
                unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr().add(dst), p.len()) };
            transport::copy::copy(to, p);
            dst += p.len();
        }
    }

    /// Copies bytes `from..to` of the message `parts[0] ++ parts[1]` to where they
    /// belong in a message written at data offset `off` (a fragment of a streamed one).
    fn write(&mut self, off: usize, parts: [&[u8]; 2], from: usize, to: usize) {
        let total = parts[0].len() + parts[1].len();
        assert!(from <= to && to <= total && off + total <= RING_BYTES);
        let mut start = 0;
        for p in parts {
            let (a, b) = (from.max(start), to.min(start + p.len()));
            if a < b {
                // SAFETY: off + b <= off + total <= RING_BYTES (checked above), so the
                // destination is inside the data area. The producer only writes space
                // that the consumer released (Producer::try_push checks it against
                // `head`), and the consumer reads a streamed record only below its
                // progress word, which is stored after these bytes; `p` is a separate
                // local slice, so the ranges cannot overlap.
                let to = unsafe {
                    std::slice::from_raw_parts_mut(self.data.as_ptr().add(off + a), b - a)
                };
                transport::copy::copy(to, &p[a - start..b - start]);
            }
            start += p.len();
        }
    }

    /// The `len` bytes at data offset `off`.
    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(off + len <= RING_BYTES);
        // SAFETY: in bounds (checked). The consumer calls this only for bytes of a
        // record whose header it loaded with Acquire (a whole record) or that lie below
        // the progress word it loaded with Acquire (a streamed record), so the
        // producer's writes are visible and the producer does not write them again
        // until the consumer advances `head`, which needs `&mut Consumer` and so cannot
        // happen while the slice is borrowed.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(off), len) }
    }
}

/// The sending end of a ring.
pub struct Producer {
    mem: RingMem,
    /// Next stream position to write (monotonic).
    tail: u64,
    /// Last value of the consumer's `head` this producer saw.
    head_cache: u64,
    /// Past [`TIGHT_LAP`], the position before which `head` is not read again to see
    /// whether the consumer has caught up (once per [`TIGHT_LAG`] or [`WRAP_LAG`]
    /// bytes at most).
    recheck: u64,
    /// Data bytes from the ring's start that this process has mapped ahead of use
    /// (the small lap at the first record, then [`Producer::map_ahead`]'s steps): a
    /// high-water mark, only raised.
    mapped: usize,
    /// The lines that may hold the bytes of a record its consumer did not clear.
    stale: Stale,
    /// Whether the consumer had kept up at the latest early pad's decision
    /// ([`Producer::early_pad`]): whether a ping-pong's next record is expected at
    /// the ring's start ([`Producer::next_lines`]).
    kept_up: bool,
    /// Whether to ask for the next record's lines ahead ([`has_prefetchw`]).
    prefetchw: bool,
    /// The data offsets [`Producer::prepare_next`] last asked for.
    #[cfg(test)]
    last_prepared: Option<(usize, usize)>,
    /// The position and length of the last pad written early (at [`TIGHT_LAP`] or
    /// beyond), and the room it left at the ring's start (its offset less the lag it
    /// allowed).
    #[cfg(test)]
    last_early_pad: Option<(u64, usize, usize)>,
}

/// Words of the [`Stale`] map: one bit per line of the ring.
const STALE_WORDS: usize = RING_BYTES / LINE / 64;

/// The producer's map of the lines that may hold bytes of an earlier record which
/// its consumer did not clear (one of more than [`UNCLEARED_ABOVE`] bytes): one bit
/// per line, and how many are set, so that while none is (a job of small messages)
/// a push of a small record only tests the count.
struct Stale {
    bits: Box<[u64; STALE_WORDS]>,
    /// Bits set.
    n: u32,
}

impl Default for Stale {
    fn default() -> Self {
        Stale {
            bits: Box::new([0; STALE_WORDS]),
            n: 0,
        }
    }
}

impl Stale {
    /// Sets (`set`) or clears the bits of the lines from data offset `off` for `sz`
    /// bytes (multiples of [`LINE`], inside the ring), a word at a time.
    fn range(&mut self, off: usize, sz: usize, set: bool) {
        let (mut a, b) = (off / LINE, (off + sz) / LINE);
        while a < b {
            let k = (64 - a % 64).min(b - a);
            let mask = if k == 64 {
                u64::MAX
            } else {
                ((1u64 << k) - 1) << (a % 64)
            };
            let w = &mut self.bits[(a / 64) % STALE_WORDS];
            if set {
                self.n += (mask & !*w).count_ones();
                *w |= mask;
            } else {
                self.n -= (mask & *w).count_ones();
                *w &= !mask;
            }
            a += k;
        }
    }

    /// A record of `sz` bytes is written at data offset `off`, and the consumer will
    /// look at `next` after it: marks the record's lines (stale once read, if the
    /// consumer does not clear them; clean otherwise: it clears them before it
    /// releases their space) and says whether the line at `next` (outside the
    /// record) may be stale, which the producer must then clear before it publishes
    /// the record. Called for records of more than [`UNCLEARED_ABOVE`] bytes and
    /// while some line is stale ([`Stale::n`]).
    fn settle(&mut self, off: usize, sz: usize, next: usize) -> bool {
        self.range(off, sz, sz > UNCLEARED_ABOVE);
        let l = next / LINE;
        let w = &mut self.bits[(l / 64) % STALE_WORDS];
        let bit = 1u64 << (l % 64);
        let was = *w & bit != 0;
        if was {
            *w &= !bit;
            self.n -= 1;
        }
        was
    }
}

/// How far past a large internal record (a pull's or a push's chunk) the pages of a
/// ring's first lap are mapped in one step ([`Producer::map_ahead`]).
pub const MAP_AHEAD: usize = 128 * 1024;

impl Producer {
    /// Starts producing into a zero-filled ring (positions start at 0).
    pub fn new(mem: RingMem) -> Self {
        Self {
            mem,
            tail: 0,
            head_cache: 0,
            recheck: 0,
            mapped: 0,
            stale: Stale::default(),
            kept_up: true,
            prefetchw: has_prefetchw(),
            #[cfg(test)]
            last_prepared: None,
            #[cfg(test)]
            last_early_pad: None,
        }
    }

    /// At data offset `off` (at least [`TIGHT_LAP`]), before a record of `sz` bytes:
    /// the pad that takes the record to the start of the ring if the consumer has kept
    /// up, else 0. Kept up means at most [`TIGHT_LAG`] bytes behind; past
    /// [`SMALL_LAP`], when the record fits in front of that lag, [`WRAP_LAG`] bytes.
    /// Reads the consumer's `head` (the one line the producer shares with it) only
    /// while its cached value says the consumer is behind, and then, before a record
    /// of at most [`TIGHT_RECORD`] bytes, at most once per allowed lag's worth of
    /// bytes; before a larger one always (one line against the copy of more than 4
    /// KiB). Until issue 11's sixty-sixth round the larger ones were held to that
    /// rate too, and in a 2-rank bcast of 8 KiB (an 8 KiB record, then a barrier's
    /// one-line record, each round) the head was read only at the one-line record,
    /// just after the 8 KiB one, which the consumer had not read yet: 64 B more than
    /// [`WRAP_LAG`] behind, every lap; the next 8 KiB record, with the consumer
    /// caught up, was not allowed a look, and the producer went round all of the
    /// ring's 2 MiB (`docs/performance.md`, "Larger records look at the head").
    #[inline(never)]
    fn early_pad(&mut self, off: usize, sz: usize) -> usize {
        let lag = if off >= SMALL_LAP && sz + WRAP_LAG <= off {
            WRAP_LAG as u64
        } else {
            TIGHT_LAG as u64
        };
        if self.tail - self.head_cache > lag {
            if self.tail < self.recheck && sz <= TIGHT_RECORD {
                self.kept_up = false;
                return 0;
            }
            self.head_cache = self.mem.ctrl().head.load(Ordering::Acquire);
            self.recheck = self.tail + lag;
            if self.tail - self.head_cache > lag {
                self.kept_up = false;
                return 0;
            }
        }
        self.kept_up = true;
        #[cfg(test)]
        {
            self.last_early_pad = Some((self.tail, RING_BYTES - off, off - lag as usize));
        }
        RING_BYTES - off
    }

    /// Appends one record holding `header ++ payload` (at most [`MAX_CTRL`] bytes).
    /// Returns `false`, writing nothing, when the ring has no room.
    #[inline]
    pub fn try_push(&mut self, header: &[u8], payload: &[u8]) -> bool {
        self.try_push_flagged(header, payload, 0)
    }

    /// [`Producer::try_push`] for a record of the transport's own, which the consumer's
    /// transport keeps (see [`Consumer::pop_record`]).
    pub fn try_push_internal(&mut self, header: &[u8], payload: &[u8]) -> bool {
        self.map_ahead(record_size(header.len() + payload.len()));
        self.try_push_flagged(header, payload, INTERNAL)
    }

    /// Bytes written and not yet released by the consumer (reads the consumer's
    /// `head`).
    /// Whether all of the ring has been written through once (every page of it has
    /// been touched: a copy into it from here on meets no first-touch costs).
    pub fn lapped(&self) -> bool {
        self.tail >= RING_BYTES as u64
    }

    pub fn in_flight(&mut self) -> u64 {
        self.head_cache = self.mem.ctrl().head.load(Ordering::Acquire);
        self.tail - self.head_cache
    }

    /// The ring's claim word (`crate::pull`).
    pub fn claim(&self) -> &AtomicU64 {
        &self.mem.ctrl().claim
    }

    /// What the consumer's reads of this producer's lone messages take, per size class
    /// (`crate::lone`; ns per KiB, 0: none yet).
    pub fn reads(&self) -> [u32; crate::LONE_CLASSES] {
        let r = &self.mem.ctrl().told.lone;
        std::array::from_fn(|c| r[c].load(Ordering::Relaxed))
    }

    /// What the consumer's copies of this producer's large messages out of the ring
    /// take, per size class (`crate::lone`; ns per KiB, 0: not enough yet).
    pub fn copies(&self) -> [u32; crate::LONE_CLASSES] {
        let r = &self.mem.ctrl().told.copies;
        std::array::from_fn(|c| r[c].load(Ordering::Relaxed))
    }

    /// The consumer's word for its latest large read of this producer's memory in
    /// size class `class` of `crate::pull` (`Told::ways`).
    pub fn way(&self, class: usize) -> u32 {
        self.mem.ctrl().told.ways[class].load(Ordering::Relaxed)
    }

    /// The ring's push claim word (`crate::push`).
    pub fn push_claim(&self) -> &AtomicU64 {
        &self.mem.ctrl().push
    }

    /// Before the first record: maps the small lap's pages, where a stream of small
    /// messages stays, so that the first lap does not take a page fault every 4 KiB
    /// (~60 records). Those faults, ~0.1 ms per direction, were a first message
    /// size's whole difference from the next in a latency run: 0 B at 0.18–0.22 µs
    /// one-way against 0.16 µs for the sizes after it, and the same once populated.
    /// Mapped here, from the producer, the pages are allocated in the shared file,
    /// so the consumer's first reads only map them. Pairs that never talk cost no
    /// memory.
    #[cold]
    #[inline(never)]
    fn first_push(&mut self) {
        self.mem.populate(0, SMALL_LAP);
        self.mapped = self.mapped.max(SMALL_LAP);
    }

    /// Before an internal record of `sz` bytes (a pull's or a push's chunk, which
    /// stream through all of the ring where small records stay in the small lap):
    /// maps the pages it would land on at the tail, and [`MAP_AHEAD`] beyond, if
    /// this process has not mapped them yet (`RingMem::populate`), so that the
    /// chunks' first lap does not take a fault on each page. In steps, not all of
    /// the ring at once: mapping its 2 MiB took 0.8–1.6 ms, which the first pull of
    /// a ping-pong's 32 KiB message waited for, though its chunk lay in the small
    /// lap (`docs/performance.md`, "A pull's first chunk").
    #[inline(always)]
    fn map_ahead(&mut self, sz: usize) {
        if self.mapped < RING_BYTES {
            self.map_step(sz);
        }
    }

    #[cold]
    #[inline(never)]
    fn map_step(&mut self, sz: usize) {
        if self.lapped() {
            // every page has been written here once
            self.mapped = RING_BYTES;
            return;
        }
        let off = line_off(self.tail);
        if off + sz <= self.mapped {
            return;
        }
        let to = (off + sz + MAP_AHEAD).min(RING_BYTES);
        self.mem.populate(off.max(self.mapped), to);
        self.mapped = to;
    }

    #[inline(always)]
    fn try_push_flagged(&mut self, header: &[u8], payload: &[u8], flags: u64) -> bool {
        if self.tail == 0 {
            self.first_push();
        }
        let len = header.len() + payload.len();
        assert!(len <= MAX_CTRL, "message of {len} bytes exceeds MAX_CTRL");
        let sz = record_size(len);
        let off = line_off(self.tail);
        // A record never wraps: if it does not fit before the end, a pad fills the rest.
        // Past the tight lap, a pad takes it to the start as soon as the consumer has
        // kept up.
        let pad = if off + sz > RING_BYTES {
            RING_BYTES - off
        } else if may_lap_early(off, sz, len) {
            self.early_pad(off, sz)
        } else {
            0
        };
        let end = self.tail + (pad + sz) as u64;
        // (the line after the record must be free too: see `clear_after`)
        if end - self.head_cache > (RING_BYTES - LINE) as u64 {
            // Looks full: refresh the cached head (the only read of the consumer's line).
            self.head_cache = self.mem.ctrl().head.load(Ordering::Acquire);
            if end - self.head_cache > (RING_BYTES - LINE) as u64 {
                return false;
            }
        }
        let pos = self.tail + pad as u64;
        let roff = line_off(pos);
        if sz > UNCLEARED_ABOVE || self.stale.n != 0 {
            self.clear_after(roff, sz, line_off(end));
        }
        let parts = [header, payload];
        if len < STREAM_FROM {
            self.mem.write_all(roff + HDR, parts);
            // Publish: the header word is written last, with Release, so a consumer
            // that sees it also sees the bytes.
            self.mem
                .word(roff)
                .store(encode(pos, len, flags), Ordering::Release);
            if pad > 0 {
                self.publish_pad(off);
            }
        } else {
            self.push_streamed(pos, parts, len, (pad > 0).then_some(off), flags);
        }
        self.tail = end;
        if sz > LINE {
            self.prepare_next(sz, len);
        }
        true
    }
}

impl Producer {
    /// After a record of `sz` bytes (a `len`-byte message) of more than one line is
    /// published: asks the core for the lines a next record of the same size would
    /// take ([`Producer::next_lines`]) for writing ([`RingMem::prefetch_write`]).
    /// Their copies in the consumer's cache, from its read of the lap before, are
    /// invalidated while this rank waits for an answer or copies its next message,
    /// not while the next record's stores drain ahead of its header: in the far
    /// state, 64 B–8 KiB one-way latency in 0.56–0.94x the time (docs/performance.md,
    /// "The next record's lines asked for ahead").
    #[inline(never)]
    fn prepare_next(&mut self, sz: usize, len: usize) {
        let (from, to) = self.next_lines(sz, len);
        #[cfg(test)]
        {
            self.last_prepared = Some((from, to));
        }
        if self.prefetchw {
            self.mem.prefetch_write(from, to);
        }
    }

    /// The data offsets a next record of `sz` bytes (a `len`-byte message) is
    /// expected to take: at the ring's start if it would not fit before the end, or
    /// if it may lap early ([`may_lap_early`]) and the consumer kept up at the
    /// latest decision; else right after the tail, less the first line there, which
    /// the consumer is polling (taking it would only make the consumer's next poll
    /// fetch it back).
    fn next_lines(&self, sz: usize, len: usize) -> (usize, usize) {
        let off = line_off(self.tail);
        if off + sz > RING_BYTES || (self.kept_up && may_lap_early(off, sz, len)) {
            (0, sz)
        } else {
            (off + LINE, off + sz)
        }
    }

    /// Before a record of `sz` bytes at data offset `off` is written, for a record
    /// of more than [`UNCLEARED_ABOVE`] bytes or while some line is stale: updates
    /// the map ([`Stale::settle`]) and clears the line at `next`, where the
    /// consumer looks after the record, if it may hold an uncleared record's bytes.
    /// The store comes before the record's header is published (`Release`), so the
    /// consumer that reads the record sees it; the line is free space (a push leaves
    /// a line to spare), which the consumer has released.
    #[cold]
    #[inline(never)]
    fn clear_after(&mut self, off: usize, sz: usize, next: usize) {
        if self.stale.settle(off, sz, next) {
            self.mem.word(next).store(0, Ordering::Relaxed);
        }
    }

    /// The record starts at the beginning of the next lap: let the consumer skip the
    /// tail of this lap, from data offset `off` (stream position `self.tail`).
    fn publish_pad(&mut self, off: usize) {
        self.mem
            .word(off)
            .store(encode(self.tail, 0, PAD), Ordering::Release);
    }

    /// Writes a streamed record of `len` bytes at stream position `pos` (space checked):
    /// the first fragment, the progress word, the header word (and the pad at `pad`),
    /// then the rest fragment by fragment, each followed by the progress word.
    #[inline(never)]
    fn push_streamed(
        &mut self,
        pos: u64,
        parts: [&[u8]; 2],
        len: usize,
        pad: Option<usize>,
        flags: u64,
    ) {
        let roff = pos as usize & (RING_BYTES - 1);
        let at = pos + HDR as u64;
        let progress = |mem: &RingMem, n: usize| {
            mem.ctrl().progress.store(at + n as u64, Ordering::Release);
        };
        self.mem.write(roff + HDR, parts, 0, FRAG);
        progress(&self.mem, FRAG);
        // Publish: the header word is written after the first fragment and the
        // progress word, with Release, so a consumer that sees it also sees them.
        self.mem
            .word(roff)
            .store(encode(pos, len, STREAM | flags), Ordering::Release);
        if let Some(off) = pad {
            self.publish_pad(off);
        }
        let mut done = FRAG;
        while done < len {
            let next = (done + FRAG).min(len);
            self.mem.write(roff + HDR, parts, done, next);
            progress(&self.mem, next);
            done = next;
        }
    }
}

/// The ring's contents violate the protocol (a corrupt or foreign writer).
#[derive(Debug)]
pub struct Corrupt(pub String);

/// A record as [`Consumer::pop_record`] hands it over.
pub enum Record<'a> {
    /// All of a message.
    Whole(&'a [u8]),
    /// A streamed message, which may still be arriving.
    Streamed(&'a Stream<'a>),
}

/// A streamed record being read: its bytes are there up to the ring's progress word.
pub struct Stream<'a> {
    mem: &'a RingMem,
    /// Data offset of the message's first byte.
    off: usize,
    /// Stream position of the message's first byte.
    at: u64,
    len: usize,
}

impl Stream<'_> {
    /// Length of the whole message.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The words in which the ring's consumer tells the producer what its copies of
    /// the producer's large messages out of the ring take (`Told::copies`).
    pub fn told_copies(&self) -> &[AtomicU32; crate::LONE_CLASSES] {
        &self.mem.ctrl().told.copies
    }

    /// How many of the message's bytes (from its start) are there now.
    #[inline]
    pub fn arrived(&self) -> usize {
        let p = self.mem.ctrl().progress.load(Ordering::Acquire);
        (p.saturating_sub(self.at) as usize).min(self.len)
    }

    /// Whether all of the message is there.
    pub fn complete(&self) -> bool {
        self.arrived() == self.len
    }

    /// Bytes `from .. from + len` of the message, which must have arrived (panics if
    /// they are not yet all there).
    pub fn bytes(&self, from: usize, len: usize) -> &[u8] {
        assert!(
            from + len <= self.arrived(),
            "reading bytes not yet arrived"
        );
        self.mem.bytes(self.off + from, len)
    }
}

/// The receiving end of a ring.
pub struct Consumer {
    mem: RingMem,
    /// Stream position of the next record to read (monotonic).
    head: u64,
    /// Stream position up to which space is released (published as `head`).
    released: u64,
    /// The lines of the last multi-line record read, if not yet cleared, as a range
    /// of data offsets (`(0, 0)`: none). While there is one, the space up to `head` is
    /// not released: see [`Consumer::release`].
    dirty: (u32, u32),
}

impl Consumer {
    /// Starts consuming from a zero-filled ring (positions start at 0).
    pub fn new(mem: RingMem) -> Self {
        Self {
            mem,
            head: 0,
            released: 0,
            dirty: (0, 0),
        }
    }

    /// Moves past `sz` bytes read; releases them at once unless lines wait to be
    /// cleared, and everything once more than [`HOLD_BYTES`] are held.
    #[inline]
    fn advance(&mut self, sz: usize) {
        self.head += sz as u64;
        if !self.holds() {
            self.released = self.head;
            // Release: our read of the record happens before the producer may reuse
            // the space.
            self.mem.ctrl().head.store(self.head, Ordering::Release);
        } else if self.head - self.released > HOLD_BYTES as u64 {
            self.release();
        }
    }

    /// The ring's claim word (`crate::pull`).
    pub fn claim(&self) -> &AtomicU64 {
        &self.mem.ctrl().claim
    }

    /// The words in which this consumer tells the producer what its reads of the
    /// producer's lone messages take (`crate::lone`).
    pub fn reads(&self) -> &[AtomicU32; crate::LONE_CLASSES] {
        &self.mem.ctrl().told.lone
    }

    /// The words in which this consumer tells the producer the way of its large reads
    /// of the producer's memory, per size class of `crate::pull` (`Told::ways`).
    pub fn ways(&self) -> &[AtomicU32; crate::pull::CLASSES] {
        &self.mem.ctrl().told.ways
    }

    /// Whether all of the ring has been read through once (every page of it has been
    /// touched by both sides).
    pub fn lapped(&self) -> bool {
        self.head >= RING_BYTES as u64
    }

    /// Whether records have been read whose space is not yet released.
    #[inline]
    pub fn holds(&self) -> bool {
        // (a record's range ends past its first line)
        self.dirty.1 != 0
    }

    /// Clears the first word of every line of the multi-line record read last (its
    /// header included) and releases the space read so far to the producer. A record
    /// longer than one line is not cleared and released when it is read but later,
    /// here: when the ring is found empty, or when the next such record is read. That
    /// takes the clearing of a large record — one store per line, each taking the line
    /// back from the producer's cache — off the path between reading a message and
    /// answering it, while in a stream the producer sees its space back one record
    /// later. (Until the forty-ninth round a consumer held up to eight such records
    /// before it released them: in a window of 1 KiB messages the producer then saw
    /// its consumer more than [`WRAP_LAG`] behind and kept to the whole ring, not the
    /// small lap; `docs/performance.md`, "Space released one record later".)
    #[inline(never)]
    pub fn release(&mut self) {
        let (a, b) = std::mem::take(&mut self.dirty);
        self.mem.clear_lines(a as usize, b as usize);
        self.released = self.head;
        // Release: our reads of the records and the clearing above happen before the
        // producer may reuse the space.
        self.mem.ctrl().head.store(self.head, Ordering::Release);
    }

    /// If a message is ready, hands it to `f` (as a slice into the ring), then releases
    /// its space and returns `Some(f's result)`. Reads one cache line when empty. A
    /// streamed record is waited for (spinning) until all of it is there.
    #[cfg(test)]
    pub fn pop<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, Corrupt> {
        self.pop_record(|rec, _| match rec {
            Record::Whole(m) => f(m),
            Record::Streamed(s) => {
                while !s.complete() {
                    std::hint::spin_loop();
                }
                f(s.bytes(0, s.len()))
            }
        })
    }

    /// The kind byte of the next record (its first payload byte) if that record is
    /// there, whole and of the transport's own ([`Producer::try_push_internal`]);
    /// `None` otherwise. Reads one cache line and changes nothing.
    pub fn next_internal_kind(&self) -> Option<u8> {
        let off = line_off(self.head);
        let h = self.mem.word(off).load(Ordering::Acquire);
        let ours = h & !(LEN_MASK | PAD | STREAM | INTERNAL) == encode(self.head, 0, 0)
            && h & (PAD | STREAM | INTERNAL) == INTERNAL;
        let len = (h & LEN_MASK) as usize;
        (ours && (1..=LINE - HDR).contains(&len)).then(|| self.mem.bytes(off + HDR, 1)[0])
    }

    /// Like [`Consumer::pop`], but a streamed record is handed over as soon as its
    /// first fragment is there, and with it, for a record of the transport's own
    /// ([`Producer::try_push_internal`]), the ring's push claim word (`crate::push`;
    /// `None` for a control message). `f` must wait until all of it has arrived
    /// before it returns; if it returns earlier (it gave up: the sender died), the
    /// record is not released and comes again at the next call.
    #[inline(always)]
    pub fn pop_record<R>(
        &mut self,
        f: impl FnOnce(Record<'_>, Option<&AtomicU64>) -> R,
    ) -> Result<Option<R>, Corrupt> {
        loop {
            let off = line_off(self.head);
            let h = self.mem.word(off).load(Ordering::Acquire);
            let expect = encode(self.head, 0, 0);
            if h & !(LEN_MASK | PAD | STREAM | INTERNAL) != expect {
                // Zero or a header left from an earlier lap: nothing new yet, so a good
                // time to release what was read.
                if self.holds() {
                    self.release();
                }
                return Ok(None);
            }
            let len = (h & LEN_MASK) as usize;
            if h & PAD != 0 {
                if len != 0 {
                    return Err(Corrupt(format!("pad record with length {len}")));
                }
                // Everything up to the end of the lap is padding, never read: only the
                // pad's own header needs clearing (the lines it covers hold zeros or
                // the bytes of large records, which their producer's map knows).
                self.mem.word(off).store(0, Ordering::Relaxed);
                self.advance(RING_BYTES - off);
                continue;
            }
            let sz = record_size(len);
            if len > MAX_CTRL || off + sz > RING_BYTES {
                return Err(Corrupt(format!("record of {len} bytes at offset {off}")));
            }
            let r = if h & STREAM != 0 {
                let s = Stream {
                    mem: &self.mem,
                    off: off + HDR,
                    at: self.head + HDR as u64,
                    len,
                };
                let own = (h & INTERNAL != 0).then(|| &*self.mem.ctrl().push);
                let r = f(Record::Streamed(&s), own);
                // the producer is still writing until the last fragment: never release
                // (or clear) space it writes into; `f` gave up (its sender died)
                if !s.complete() {
                    return Ok(Some(r));
                }
                r
            } else {
                f(
                    Record::Whole(self.mem.bytes(off + HDR, len)),
                    (h & INTERNAL != 0).then(|| &*self.mem.ctrl().push),
                )
            };
            // The first word of every line must be cleared before the space is
            // released, or its producer told: in a later lap any of them may be where
            // a record starts, and payload bytes there could otherwise look like a
            // valid header. A record's own header word is cleared too: a stale header
            // matches again once the 43-bit sequence wraps, and with early laps
            // (`SMALL_LAP`) a line far into the ring may go unwritten for that long. A
            // single-line record's header is cleared now, in the line just read;
            // longer records up to UNCLEARED_ABOVE bytes are left to `release`, which
            // the next of them calls for the one before; larger ones are not cleared
            // at all: their producer keeps a map of their lines (`Stale`) and clears
            // the line after each record it writes, where this consumer looks next,
            // whenever that line is in the map.
            if sz == LINE {
                self.mem.word(off).store(0, Ordering::Relaxed);
            } else if sz <= UNCLEARED_ABOVE {
                if self.holds() {
                    self.release();
                }
                self.dirty = (off as u32, (off + sz) as u32);
            }
            self.advance(sz);
            return Ok(Some(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zero-filled, 128-aligned heap ring.
    struct HeapRing(Vec<CachePadded<[u8; 128]>>);

    impl HeapRing {
        fn new() -> Self {
            Self(
                (0..RING_STRIDE / 128)
                    .map(|_| CachePadded::new([0u8; 128]))
                    .collect(),
            )
        }
        fn pair(&mut self) -> (Producer, Consumer) {
            assert_eq!(std::mem::size_of::<CachePadded<[u8; 128]>>(), 128);
            let p = NonNull::new(self.0.as_mut_ptr() as *mut u8).unwrap();
            // SAFETY: the Vec holds RING_STRIDE zeroed bytes, 128-aligned, and outlives
            // the rings in these tests; one producer and one consumer use it.
            let (a, b) = unsafe { (RingMem::from_raw(p), RingMem::from_raw(p)) };
            (Producer::new(a), Consumer::new(b))
        }
    }

    fn rng(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn constants() {
        assert_eq!(MAX_RECORD, 1026 * 64);
        assert_eq!(CTRL_SLOTS, 28);
        assert_eq!(CTRL_BYTES, 640);
    }

    #[test]
    fn fifo_with_wraparound_and_full() {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let mut s = 0x1234_5678_9abc_def1u64;
        let (mut sent, mut got) = (0u64, 0u64);
        let mut inflight = 0usize;
        let (mut fulls, mut early_fulls) = (0, 0);
        while got < 20_000 {
            // push a burst, then drain a random amount
            for _ in 0..(rng(&mut s) % 200) {
                let len = (rng(&mut s) % (MAX_CTRL as u64 + 1)) as usize;
                let seqb = sent.to_le_bytes();
                let hl = len.min(8);
                let body = vec![(sent % 251) as u8; len - hl];
                if p.try_push(&seqb[..hl], &body) {
                    sent += 1;
                    inflight += 1;
                } else {
                    // CTRL_SLOTS messages of any size fit, unless the producer went
                    // back to the start early and the consumer has not read that pad
                    // yet: then at least the pad's offset, less the lag it allowed, is
                    // in use after the pad
                    let early = p.last_early_pad.filter(|&(at, ..)| c.head <= at);
                    if let Some((at, pad, room)) = early {
                        let after = p.tail - at - pad as u64;
                        assert!(
                            room >= TIGHT_LAP - TIGHT_LAG,
                            "an early pad left only {room} bytes"
                        );
                        assert!(
                            after as usize + MAX_RECORD >= room,
                            "Full with {after} bytes after an early pad"
                        );
                        early_fulls += 1;
                    } else {
                        assert!(
                            inflight >= CTRL_SLOTS,
                            "Full with only {inflight} in flight"
                        );
                    }
                    fulls += 1;
                    break;
                }
            }
            for _ in 0..(rng(&mut s) % 200) {
                let r = c
                    .pop(|m| {
                        let hl = m.len().min(8);
                        assert_eq!(m[..hl], got.to_le_bytes()[..hl]);
                        assert!(m[hl..].iter().all(|&b| b == (got % 251) as u8));
                    })
                    .unwrap();
                if r.is_none() {
                    assert_eq!(inflight, 0);
                    break;
                }
                got += 1;
                inflight -= 1;
            }
        }
        assert!(fulls > 0, "the test never filled the ring");
        assert!(early_fulls < fulls, "every Full came after an early pad");
    }

    /// A stream of small messages whose consumer keeps up stays within the small lap
    /// (plus one record), in order, and every line it read is cleared again.
    #[test]
    fn small_messages_keep_to_the_small_lap() {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let mut highest = 0;
        let mut laps = 0;
        for i in 0..100_000u64 {
            let off = p.tail as usize & (RING_BYTES - 1);
            assert!(p.try_push(&i.to_le_bytes(), &[7; 40]));
            let now = p.tail as usize & (RING_BYTES - 1);
            if now < off {
                laps += 1;
            }
            highest = highest.max(now);
            if i % 50 == 49 {
                // the consumer keeps up in bursts (a window at a time)
                for j in i - 49..=i {
                    let m = c.pop(|m| m.to_vec()).unwrap().expect("in order");
                    assert_eq!(m[..8], j.to_le_bytes());
                }
            }
        }
        assert!(highest <= SMALL_LAP + WRAP_LAG, "went up to {highest}");
        assert!(laps >= 40, "only {laps} laps");
        // everything read: the ring holds no header, pad or payload word that could be
        // taken for a record later (every line's first word is zero)
        assert!(c.pop(|_| ()).unwrap().is_none());
        for line in (0..RING_BYTES).step_by(LINE) {
            assert_eq!(
                c.mem.word(line).load(Ordering::Relaxed),
                0,
                "line at {line}"
            );
        }
    }

    /// A stream of 1 KiB messages whose consumer reads each a few messages after it
    /// was written (never finding the ring empty): the consumer releases the space of
    /// a record longer than a line when it reads the next, so its producer sees it
    /// within [`WRAP_LAG`] and keeps to the small lap. (Until the forty-ninth round
    /// eight such records were held before a release.)
    #[test]
    fn a_stream_of_multi_line_records_is_released_one_record_later() {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let (mut highest, mut laps) = (0, 0);
        const BEHIND: usize = 4;
        let mut ends = std::collections::VecDeque::new();
        for i in 0..20_000u64 {
            let off = p.tail as usize & (RING_BYTES - 1);
            assert!(p.try_push(&i.to_le_bytes(), &[5; 1000]));
            ends.push_back(p.tail);
            let now = p.tail as usize & (RING_BYTES - 1);
            if now < off {
                laps += 1;
            }
            highest = highest.max(now);
            if ends.len() > BEHIND {
                let m = c.pop(|m| m.to_vec()).unwrap().expect("in order");
                assert_eq!(m[..8], (i - BEHIND as u64).to_le_bytes());
                let read = ends.pop_front().expect("pushed");
                // released: everything before the record just read, which is held
                let released = c.mem.ctrl().head.load(Ordering::Relaxed);
                assert_eq!(released, read - record_size(8 + 1000) as u64, "{i}");
            }
        }
        let rec = record_size(8 + 1000);
        assert!(highest <= SMALL_LAP + 2 * rec, "went up to {highest}");
        assert!(laps >= 100, "only {laps} laps");
    }

    /// Pushes `rounds` records of an 8-byte count and `body`, each read (and checked)
    /// before the next is pushed; returns the highest data offset the producer's tail
    /// reached and how many times it went back to the start.
    fn ping_pong(p: &mut Producer, c: &mut Consumer, body: &[u8], rounds: u64) -> (usize, usize) {
        let (mut highest, mut laps) = (0, 0);
        for i in 0..rounds {
            let off = p.tail as usize & (RING_BYTES - 1);
            assert!(p.try_push(&i.to_le_bytes(), body));
            let now = p.tail as usize & (RING_BYTES - 1);
            if now < off {
                laps += 1;
            }
            highest = highest.max(now);
            let m = c.pop(|m| m.to_vec()).unwrap().expect("in order");
            assert_eq!(m[..8], i.to_le_bytes());
            assert_eq!(m[8..], *body);
            // the ring found empty: the consumer releases what it holds
            assert!(c.pop(|_| ()).unwrap().is_none());
        }
        (highest, laps)
    }

    /// A ping-pong (the consumer reads each record before the next is written) keeps
    /// to the tight lap, with records of one line and of many, and every line read is
    /// cleared again.
    #[test]
    fn a_ping_pong_keeps_to_the_tight_lap() {
        for len in [40, 1000, 4000] {
            let mut ring = HeapRing::new();
            let (mut p, mut c) = ring.pair();
            let (highest, laps) = ping_pong(&mut p, &mut c, &vec![7; len], 20_000);
            let rec = record_size(8 + len);
            assert!(highest <= TIGHT_LAP + rec, "{len} B: went up to {highest}");
            assert!(
                laps >= 20_000 * rec / (TIGHT_LAP + rec),
                "{len} B: {laps} laps"
            );
            for line in (0..RING_BYTES).step_by(LINE) {
                assert_eq!(
                    c.mem.word(line).load(Ordering::Relaxed),
                    0,
                    "line at {line}"
                );
            }
        }
    }

    /// A ping-pong of records of more than `TIGHT_RECORD` bytes that are not streamed
    /// goes past the tight lap and laps at the small one; a streamed record's laps
    /// stay tight. Fails with the tight lap taken by every record, or by none.
    #[test]
    fn a_ping_pong_of_larger_records_keeps_to_the_small_lap() {
        for (len, lap) in [
            (TIGHT_RECORD, SMALL_LAP),
            (8 * 1024, SMALL_LAP),
            (STREAM_FROM - 64, SMALL_LAP),
            (STREAM_FROM, TIGHT_LAP),
        ] {
            let mut ring = HeapRing::new();
            let (mut p, mut c) = ring.pair();
            let body: Vec<u8> = (0..len - 8).map(|k| k as u8).collect();
            let (highest, laps) = ping_pong(&mut p, &mut c, &body, 2_000);
            let rec = record_size(len);
            assert!(rec > TIGHT_RECORD);
            // (a record takes an early pad only with the lag in front of it)
            assert!(
                highest <= lap + rec + TIGHT_LAG,
                "{len} B: went up to {highest}"
            );
            if lap == SMALL_LAP {
                assert!(highest > TIGHT_LAP + rec, "{len} B: stayed below {highest}");
            }
            assert!(
                laps >= 2_000 * rec / (lap + rec + TIGHT_LAG),
                "{len} B: {laps} laps"
            );
        }
    }

    /// A record of 8 KiB followed by a one-line record, the consumer reading both
    /// only after the second is written (a 2-rank bcast: the root's message, then
    /// its barrier's): at the one-line record the consumer is one 8 KiB record
    /// behind, more than [`WRAP_LAG`]; at the next 8 KiB record it has caught up, and
    /// the producer looks and takes the small lap. Fails if a larger record is held
    /// to the one-line records' rate of looks: the producer then went round the whole
    /// ring.
    #[test]
    fn a_large_record_after_a_lagging_look_still_takes_the_small_lap() {
        for len in [TIGHT_RECORD + 64, 8 * 1024, STREAM_FROM - 64] {
            let mut ring = HeapRing::new();
            let (mut p, mut c) = ring.pair();
            let body: Vec<u8> = (0..len - 8).map(|k| k as u8).collect();
            let (mut highest, mut laps) = (0, 0);
            for i in 0..2_000u64 {
                let off = p.tail as usize & (RING_BYTES - 1);
                assert!(p.try_push(&i.to_le_bytes(), &body));
                assert!(p.try_push(&i.to_le_bytes(), &[]));
                let now = p.tail as usize & (RING_BYTES - 1);
                laps += usize::from(now < off);
                highest = highest.max(now);
                let m = c.pop(|m| m.to_vec()).unwrap().expect("the record");
                assert_eq!((&m[..8], &m[8..]), (&i.to_le_bytes()[..], &body[..]));
                let m = c.pop(|m| m.to_vec()).unwrap().expect("the one-line record");
                assert_eq!(m, i.to_le_bytes());
                assert!(c.pop(|_| ()).unwrap().is_none());
            }
            let rec = record_size(len);
            assert!(
                highest <= SMALL_LAP + 2 * rec + LINE,
                "{len} B: went up to {highest}"
            );
            assert!(
                laps >= 2_000 * rec / (SMALL_LAP + 2 * rec),
                "{len} B: {laps} laps"
            );
        }
    }

    /// The lines a producer asks for after a record are those the next record of the
    /// same size takes: in a ping-pong (laps at the tight or the small lap, and the
    /// end of the ring), and in a stream whose consumer lags (no early laps). Fails
    /// if the guess ignores early laps, or the consumer's lag.
    #[test]
    fn the_next_records_lines_are_asked_for_where_it_goes() {
        // (the record's lines, less the first when the consumer polls it)
        fn lines_of_last(p: &Producer, sz: usize) -> (usize, usize) {
            let at = line_off(p.tail - sz as u64);
            (if at == 0 { 0 } else { at + LINE }, at + sz)
        }
        for len in [100, 1000, TIGHT_RECORD, 8 * 1024, STREAM_FROM, 40_000] {
            let sz = record_size(len);
            let body = vec![3u8; len - 8];
            // a ping-pong
            let mut ring = HeapRing::new();
            let (mut p, mut c) = ring.pair();
            let (mut starts, mut rounds) = (0, 0);
            for i in 0..3_000u64 {
                let asked = p.last_prepared;
                assert!(p.try_push(&i.to_le_bytes(), &body));
                if let Some(asked) = asked {
                    assert_eq!(asked, lines_of_last(&p, sz), "{len} B, round {i}");
                    rounds += 1;
                    starts += usize::from(asked.0 == 0);
                }
                assert!(c.pop(|m| m.len() == len).unwrap().unwrap());
                assert!(c.pop(|_| ()).unwrap().is_none());
            }
            assert!(
                rounds == 2_999 && starts >= 2_999 * sz / (SMALL_LAP + 2 * sz),
                "{len} B: {starts} laps"
            );
            // a stream the consumer drains only when the ring is full: the guess
            // misses at most twice a drain (the first record to lap early after it,
            // and the first not to)
            let mut ring = HeapRing::new();
            let (mut p, mut c) = ring.pair();
            let (mut i, mut checked, mut missed, mut drains) = (0u64, 0, 0, 0);
            while checked < 20_000 {
                let asked = p.last_prepared;
                if !p.try_push(&i.to_le_bytes(), &body) {
                    while c.pop(|_| ()).unwrap().is_some() {}
                    drains += 1;
                    continue;
                }
                i += 1;
                if let Some(asked) = asked {
                    checked += 1;
                    missed += usize::from(asked != lines_of_last(&p, sz));
                }
            }
            assert!(
                drains > 0 && missed <= 2 * drains + 1,
                "{len} B, stream: {missed} missed, {drains} drains"
            );
        }
        // one-line records ask for nothing
        let mut ring = HeapRing::new();
        let (mut p, _c) = ring.pair();
        assert!(p.try_push(b"12345678", &[1; 40]));
        assert_eq!(p.last_prepared, None);
    }

    /// Payloads whose every line starts with a header valid at the same place one lap
    /// later are never taken for records: the consumer clears the first word of every
    /// line it has read before it releases the space. Fails if only the records'
    /// header words are cleared.
    #[test]
    fn payloads_that_look_like_headers_are_never_read_as_records() {
        // records the consumer clears (16 lines) and records it leaves to its
        // producer's map (80 and 142 lines)
        for len in [1000, UNCLEARED_ABOVE + 1000, 2 * UNCLEARED_ABOVE + 800] {
            forged_records_then_one_line_records(len);
        }
    }

    /// Ping-pongs of `len`-byte records (the tight lap), each line's first word forged
    /// (a header valid one lap later at that line), then one-line records over two
    /// tight laps, each alone in the ring.
    fn forged_records_then_one_line_records(len: usize) {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let mut forged = 0;
        for i in 0..200u64 {
            let pos = p.tail;
            let mut m = vec![0u8; len];
            for j in 1..record_size(len) / LINE {
                let at = j * LINE - HDR;
                if at + 8 <= len {
                    let word = encode(pos + (j * LINE + RING_BYTES) as u64, 40, 0);
                    m[at..at + 8].copy_from_slice(&word.to_le_bytes());
                }
            }
            m[..8].copy_from_slice(&i.to_le_bytes());
            assert!(p.try_push(&[], &m));
            // (one that went to the next lap had its lines forged for other places)
            forged += usize::from(p.tail == pos + record_size(len) as u64);
            assert_eq!(c.pop(|r| r.to_vec()).unwrap(), Some(m));
        }
        assert!(c.pop(|_| ()).unwrap().is_none());
        assert!(forged > 100, "{len}: {forged} records forged");
        // one-line records, one at a time, over two tight laps: the consumer's head
        // comes to every forged line while the ring is empty, and must find nothing
        for i in 0..2 * TIGHT_LAP as u64 / LINE as u64 {
            assert!(p.try_push(&i.to_le_bytes(), &[9; 32]));
            let m = c.pop(|r| r.to_vec()).unwrap().expect("the record pushed");
            assert_eq!(m[..8], i.to_le_bytes(), "record {i}");
            assert!(
                c.pop(|_| ()).unwrap().is_none(),
                "a forged record after {i}"
            );
        }
    }

    /// A consumer that falls behind keeps the producer on the whole ring: no early pad
    /// while it lags, and the usual capacity.
    #[test]
    fn a_lagging_consumer_gets_the_whole_ring() {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let mut n = 0;
        while p.try_push(&[], &[1; 1000]) {
            n += 1;
        }
        assert!(p.last_early_pad.is_none());
        assert!(
            n * record_size(1000) + MAX_RECORD > RING_BYTES,
            "only {n} fit"
        );
        while c.pop(|_| ()).unwrap().is_some() {}
    }

    #[test]
    fn large_records_are_left_uncleared_and_the_line_after_each_is_cleared() {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let len = 2 * UNCLEARED_ABOVE;
        let stale = u64::from_le_bytes([0xab; 8]);
        let word = |c: &Consumer, off: usize| c.mem.word(off).load(Ordering::Relaxed);
        // two records take the producer past the tight lap
        for _ in 0..2 {
            assert!(p.try_push(&[], &[0xab; 2 * UNCLEARED_ABOVE]));
            assert_eq!(c.pop(|m| m.len()).unwrap(), Some(len));
            // released at once, nothing cleared
            assert_eq!(c.mem.ctrl().head.load(Ordering::Relaxed), p.tail);
            assert!(!c.holds());
        }
        assert_eq!(word(&c, LINE), stale, "the first record's second line");
        assert!(line_off(p.tail) > TIGHT_LAP);
        // a one-line record goes back to the start (the consumer has caught up): the
        // line after it held the first record's bytes, and is cleared before it is
        // published
        assert!(p.try_push(b"x", b""));
        assert_eq!(line_off(p.tail), LINE);
        assert_eq!(word(&c, LINE), 0);
        assert_eq!(c.pop(|m| m.to_vec()).unwrap(), Some(b"x".to_vec()));
        assert!(c.pop(|_| ()).unwrap().is_none());
        // the third line was not the line after a record: left as it was
        assert_eq!(word(&c, 2 * LINE), stale);
        // a small multi-line record is cleared by its consumer, as before
        assert!(p.try_push(&[], &[0xcd; 1000]));
        assert_eq!(c.pop(|m| m.len()).unwrap(), Some(1000));
        assert!(c.holds());
        assert!(c.pop(|_| ()).unwrap().is_none());
        assert!(!c.holds());
        assert_eq!(word(&c, 3 * LINE), 0);
    }

    #[test]
    fn records_of_every_size_over_forged_lines_arrive_whole_and_in_order() {
        // every line's first word of every payload forged as a valid header for the
        // same line one lap later; sizes cleared by the consumer and left to the
        // producer's map mixed, in bursts, some streamed
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let sizes = [8, 56, 100, 1000, 4000, 4100, 9000, 20_000, 65_000];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut queued = std::collections::VecDeque::new();
        let mut n = 0u64;
        for _ in 0..3_000 {
            let burst = 1 + rng(&mut state) % 6;
            for _ in 0..burst {
                let len = sizes[(rng(&mut state) % sizes.len() as u64) as usize];
                let pos = p.tail;
                let mut m = vec![0u8; len];
                for at in (LINE - HDR..len.saturating_sub(7)).step_by(LINE) {
                    let line = (pos + (HDR + at) as u64) & !(LINE as u64 - 1);
                    let word = encode(line + RING_BYTES as u64, 40, 0);
                    m[at..at + 8].copy_from_slice(&word.to_le_bytes());
                }
                let k = len.min(8);
                m[..k].copy_from_slice(&n.to_le_bytes()[..k]);
                if !p.try_push(&[], &m) {
                    break;
                }
                n += 1;
                queued.push_back(m);
            }
            let take = rng(&mut state) % (queued.len() as u64 + 1);
            for _ in 0..take {
                let want = queued.pop_front().expect("queued");
                assert_eq!(c.pop(|r| r.to_vec()).unwrap(), Some(want));
            }
            if queued.is_empty() {
                assert!(c.pop(|_| ()).unwrap().is_none(), "a forged record");
            }
        }
        while let Some(want) = queued.pop_front() {
            assert_eq!(c.pop(|r| r.to_vec()).unwrap(), Some(want));
        }
        assert!(c.pop(|_| ()).unwrap().is_none(), "a forged record");
        assert!(p.tail > 8 * RING_BYTES as u64, "only {} bytes", p.tail);
    }

    #[test]
    fn stale_payload_never_looks_like_a_header() {
        // Fill records whose payload is made of words that would be valid headers for
        // the positions of a later lap; then write small records over them.
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        let mut pos = 0u64;
        let mut n = 0;
        while pos < RING_BYTES as u64 {
            let len = MAX_CTRL;
            let mut body = vec![0u8; len];
            // Fake headers for every line in the next lap, at every plausible length.
            for (i, ch) in body.chunks_exact_mut(8).enumerate() {
                let at = pos + HDR as u64 + 8 * i as u64;
                if at % LINE as u64 == 0 {
                    let fake = encode(at + RING_BYTES as u64, 8, 0);
                    ch.copy_from_slice(&fake.to_le_bytes());
                }
            }
            if !p.try_push(&[], &body) {
                break;
            }
            assert_eq!(c.pop(|m| m.len()).unwrap(), Some(len));
            pos += MAX_RECORD as u64;
            n += 1;
        }
        // a whole lap of maximum records (31 of them)
        assert!(n >= RING_BYTES / MAX_RECORD, "{n}");
        // Now the consumer must see nothing, however far the producer went.
        for _ in 0..3 * RING_BYTES / LINE {
            assert!(c.pop(|_| ()).unwrap().is_none());
            assert!(p.try_push(b"x", b""));
            assert_eq!(c.pop(|m| m.to_vec()).unwrap(), Some(b"x".to_vec()));
        }
        assert!(c.pop(|_| ()).unwrap().is_none());
    }

    /// Streamed records, read piecewise while the producer is still writing them,
    /// arrive whole and in order, mixed with whole ones.
    #[test]
    fn streamed_two_threads() {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        const N: u64 = 3_000;
        let size = |s: &mut u64| match rng(s) % 4 {
            0 => (rng(s) % 256) as usize,
            _ => STREAM_FROM - 8 + (rng(s) % (MAX_CTRL - STREAM_FROM) as u64) as usize,
        };
        let byte = |i: u64, j: usize| (i as usize * 31 + j * 7) as u8;
        let mut partial = 0;
        std::thread::scope(|sc| {
            sc.spawn(move || {
                let mut s = 7u64;
                for i in 0..N {
                    let len = size(&mut s);
                    let body: Vec<u8> = (0..len).map(|j| byte(i, j + 8)).collect();
                    while !p.try_push(&i.to_le_bytes(), &body) {
                        std::hint::spin_loop();
                    }
                }
            });
            let mut s = 7u64;
            for i in 0..N {
                let len = 8 + size(&mut s);
                loop {
                    let got = c
                        .pop_record(|rec, _| {
                            let mut out = Vec::new();
                            match rec {
                                Record::Whole(m) => out.extend_from_slice(m),
                                Record::Streamed(st) => {
                                    assert!(st.arrived() >= FRAG);
                                    if st.arrived() < st.len() {
                                        partial += 1;
                                    }
                                    while out.len() < st.len() {
                                        let a = st.arrived();
                                        out.extend_from_slice(st.bytes(out.len(), a - out.len()));
                                    }
                                }
                            }
                            out
                        })
                        .unwrap();
                    if let Some(m) = got {
                        assert_eq!(m.len(), len, "message {i}");
                        assert_eq!(m[..8], i.to_le_bytes());
                        assert!(m[8..].iter().enumerate().all(|(j, &b)| b == byte(i, j + 8)));
                        assert_eq!(len >= STREAM_FROM, m.len() >= STREAM_FROM);
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
        });
        // informational: how often the consumer really overlapped the producer
        eprintln!("{partial} of {N} records were read while still arriving");
    }

    #[test]
    fn two_threads() {
        let mut ring = HeapRing::new();
        let (mut p, mut c) = ring.pair();
        const N: u64 = 200_000;
        std::thread::scope(|sc| {
            sc.spawn(move || {
                let mut s = 99u64;
                for i in 0..N {
                    let len = (rng(&mut s) % 300) as usize;
                    let body = vec![(i % 253) as u8; len];
                    while !p.try_push(&i.to_le_bytes(), &body) {
                        std::hint::spin_loop();
                    }
                }
            });
            let mut s = 99u64;
            let mut i = 0;
            while i < N {
                let len = (rng(&mut s) % 300) as usize;
                loop {
                    let ok = c
                        .pop(|m| {
                            assert_eq!(m.len(), 8 + len);
                            assert_eq!(m[..8], i.to_le_bytes());
                            assert!(m[8..].iter().all(|&b| b == (i % 253) as u8));
                        })
                        .unwrap();
                    if ok.is_some() {
                        break;
                    }
                    std::hint::spin_loop();
                }
                i += 1;
            }
        });
    }

    /// Minor page faults of this thread so far (`/proc/thread-self/stat`, field 10).
    fn minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let rest = stat.rsplit(')').next().unwrap();
        // fields from the state (field 3) on; minflt is field 10
        rest.split_whitespace().nth(7).unwrap().parse().unwrap()
    }

    /// A fresh shared-memory ring (like the transport's segments) given to `prepare`,
    /// then the faults taken writing one byte in every page of its first `bytes`.
    fn faults_after(name: &str, bytes: usize, prepare: impl FnOnce(RingMem)) -> u64 {
        let path = format!("/dev/shm/rsmpi-ring-{name}-{}", std::process::id());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file.set_len(RING_STRIDE as u64).unwrap();
        let map = memmap2::MmapOptions::new()
            .len(RING_STRIDE)
            .map_raw(&file)
            .unwrap();
        // SAFETY: the mapping is page-aligned, RING_STRIDE bytes, zero-filled, lives
        // to the end of this function and is used by this ring alone (`prepare` may
        // make one producer of it, which it drops before the writes below).
        let ring = || unsafe { RingMem::from_raw(NonNull::new(map.as_mut_ptr()).unwrap()) };
        prepare(ring());
        let mem = ring();
        let before = minor_faults();
        for off in (0..bytes).step_by(4096) {
            // SAFETY: off < RING_BYTES, inside the data area; nothing else uses it now.
            unsafe { mem.data.as_ptr().add(off).write_volatile(1) };
        }
        minor_faults() - before
    }

    fn faults_writing_a_fresh_ring(populate: bool) -> u64 {
        faults_after(
            &format!("populate-{populate}"),
            RING_BYTES,
            |mem: RingMem| {
                if populate {
                    mem.populate(0, RING_BYTES);
                }
            },
        )
    }

    /// The first record maps the small lap (and no more): the pages a stream of
    /// small messages goes round.
    #[test]
    fn the_first_record_maps_the_small_lap() {
        let first = |mem: RingMem| {
            let mut p = Producer::new(mem);
            assert!(p.try_push(b"hello", &[]));
        };
        let pages = (SMALL_LAP / 4096) as u64;
        let lap = faults_after("first-lap", SMALL_LAP, first);
        assert!(
            lap < pages / 8,
            "{lap} faults for the small lap's {pages} pages"
        );
        let cold = faults_after("first-cold", SMALL_LAP, |_| ());
        assert!(
            cold >= pages / 2,
            "{cold} faults for {pages} pages untouched"
        );
    }

    /// A large internal record (a pull's or a push's chunk) maps the pages it lands
    /// on and [`MAP_AHEAD`] beyond, not the whole ring: mapping all of it at the
    /// first pull made a ping-pong's message wait 0.8–1.6 ms.
    #[test]
    fn internal_records_map_the_ring_in_steps() {
        let chunk = vec![7u8; 64 * 1024];
        let (mut tail_off, mut mapped) = (0, 0);
        let walk = |mem: RingMem| {
            let mut p = Producer::new(mem);
            assert!(p.try_push(b"first", &[]));
            // past the small lap, the consumer a record behind (so no early wrap)
            while line_off(p.tail) < SMALL_LAP {
                let behind = p.tail;
                assert!(p.try_push_internal(&[0u8; 16], &chunk));
                p.mem.ctrl().head.store(behind, Ordering::Release);
            }
            (tail_off, mapped) = (line_off(p.tail), p.mapped);
        };
        let pages = |r: &std::ops::Range<usize>| (r.len() / 4096) as u64;
        let ahead = faults_after("steps-ahead", RING_BYTES, walk);
        assert!(tail_off > SMALL_LAP, "{tail_off}");
        assert!(
            mapped >= tail_off + MAP_AHEAD && mapped < RING_BYTES / 2,
            "mapped {mapped} at tail {tail_off}"
        );
        // everything up to `mapped` was mapped (written or populated); the rest not
        let rest = mapped + 4096..RING_BYTES;
        assert!(
            ahead >= pages(&rest) / 2 && ahead <= pages(&rest) + 4,
            "{ahead} faults writing the ring, {} pages past {mapped}",
            pages(&rest)
        );
    }

    #[test]
    fn populate_maps_the_pages_ahead_of_use() {
        let pages = (RING_BYTES / 4096) as u64;
        let cold = faults_writing_a_fresh_ring(false);
        let populated = faults_writing_a_fresh_ring(true);
        assert!(cold >= pages / 2, "{cold} faults for {pages} pages");
        assert!(
            populated < pages / 32,
            "{populated} faults for {pages} pages after populate"
        );
    }
}

//! Lone messages: whether a message sent alone to a peer (a ping-pong's, not a
//! stream's) is cheaper read once by its receiver than carried through the ring.
//!
//! Through the ring every line of a message crosses between the two caches twice: the
//! sender's copy in takes each line from the receiver (which cleared it when it last
//! read it), the receiver's copy out takes it back. A `process_vm_readv` of the
//! sender's buffer copies once, and where that buffer has not changed since the last
//! read (a benchmark's) it copies lines the reader already holds. Which wins depends
//! on what a crossing costs, and on this machine that changes while a job runs
//! (`docs/performance.md`, "Lone messages read once, by measurement"): where the two
//! CPUs share a cache the ring carries 16-64 KiB in about half the read's time; where
//! they do not, the read takes about half the ring's.
//!
//! So the sender measures both, per peer and per size class, and answers
//! [`transport::Transport::prefers_read`] from them:
//!
//! - the ring: the time its own copy into the ring takes, for the lone messages it
//!   sends through the ring (the protocol's lone: every message before it taken by
//!   the peer; the receiver's copy out is taken to cost about the same again, which
//!   at 8 KiB on the Intel machine of issue 11's fifty-seventh round missed about
//!   half of the ring's cost), the lower median of the last [`KEEP`] per class
//!   ([`ring_estimate`]), counted only once the ring has been written through a
//!   whole lap (`Producer::lapped`: a first-lap copy of 64 KiB, into memory never
//!   written before, took 7-8 µs here against 2.5-3.5 µs later);
//! - the read: a `process_vm_readv` of its own memory, the class's largest size,
//!   timed once, at the class's first lone message, times [`REMOTE_FACTOR`] (a read of
//!   another, running process costs more: AMD Zen 3 here, 32 KiB in 6.3-7.9 µs
//!   against ~4 µs): the read's copy without the crossing of the send request and its
//!   answer, which [`READ_EXTRA_NS`] adds. Once the peer has read lone messages of
//!   this rank, what it tells of them counts instead: the least of its last [`KEEP`]
//!   real reads per class (`Told::lone`, written by the peer's transport).
//!
//! It prefers the read when the ring's two copies take longer than the read and its
//! extra. Reading, it still sends one lone message in [`PROBE_EVERY`] of the class
//! through the ring, so that a ring that has become cheaper is seen. Where a read
//! could still win, a run of [`READ_PROBE_RUN`] lone messages in [`READ_PROBE_EVERY`]
//! is read, the first run at once and [`FIRST_READ_PROBE_RUN`] long (the receiver's
//! own judge of large reads tries pulls first), each run to its end whatever the peer
//! tells meanwhile (its first told read is cold), so that the peer measures warm reads
//! (again): with no real read told yet, where the timed read alone would win (the
//! factor is a guess: on the Intel machine of issue 11's fifty-sixth round warm
//! reads of the peer were told at 1.2-2.5x the same job's timed read); after real
//! reads chose the ring, where the guess would win.
//!
//! # Streams
//!
//! A stream's messages (sent while others to the same peer are in flight: `bw`'s
//! window) are judged too, by a second judge per peer ([`Lone::streams`],
//! docs/protocol.md rule 20). In a stream the ring's two copies run at once, the
//! sender's copy in of one message beside the receiver's copy out of another, so the
//! ring carries it at the pace of the slower copy, not of their sum; and a read's
//! crossings overlap too. The stream judge therefore weighs the peer's reads against
//! the more of its own copies in (timed as a lone judge times them) and the peer's
//! copies out, which the peer times for every streamed record it delivers (from the
//! record's first bytes seen to the library's return, so a copy that waits for the
//! copy in counts it) and tells through the ring (`Told::copies`, the lower median of
//! its last [`KEEP`] per class, [`Lone::copied_out`]). Until the peer has told its
//! copies out the ring's cost is the copy in alone. Where the CPUs do not share a cache
//! the copy out is the slow one: on the Intel machine of issue 11's sixty-eighth round
//! a one-way stream of 32 KiB copied in at ~65 ns per KiB and out at ~85-95, while the
//! peer's reads took ~65-70, and reading carried `bw` 16-64 KiB at 1.13-1.26x the
//! ring's rate. Probes, runs of read probes and their counts are the lone judge's;
//! both judges hear the same told reads. `RSMPI_SHM_STREAM=auto|read|ring` forces
//! a way as `RSMPI_SHM_LONE` does.
//!
//! ```
//! use transport_shm::{Lone, LONE_CLASSES};
//!
//! let mut judge = Lone::default();
//! // nothing measured yet: the ring, which measures itself
//! assert!(!judge.prefers_read(60_000, || 4_000, [0; LONE_CLASSES]));
//! // its copies in took 5 µs (the far state), KEEP of them: two copies against a
//! // 4 µs read of its own memory, taken twice for another process's, plus 0.5 µs
//! for _ in 0..transport_shm::KEEP {
//!     judge.copied_in(60_000, 5_000);
//! }
//! assert!(judge.prefers_read(60_000, || 4_000, [0; LONE_CLASSES]));
//! // the ring's copy in now takes 1.5 µs (the near state): the ring again
//! for _ in 0..8 {
//!     judge.copied_in(60_000, 1_500);
//! }
//! assert!(!judge.prefers_read(60_000, || 4_000, [0; LONE_CLASSES]));
//! ```

/// Messages of more than this many bytes may be judged ([`transport::Caps::lone_read_above`]).
/// It was 16 KiB until issue 11's fifty-seventh round: on the AMD machine before it the
/// ring carried 8-16 KiB in 0.42-0.68 µs one-way, but on the Intel machine of that
/// round 16 KiB took 3.3-3.4 µs through the ring against 2.1-2.3 judged (forced reads
/// 1.8). Up to 8 KiB the judge does not pay: forced reads of 8 KiB took 1.5-1.9 µs
/// one-way there against the ring's 2.3-2.4, but the judge's estimate of the ring (two
/// copies in, 1.2 µs) missed about half of what the ring took and kept it, and judging
/// cost 8 KiB ~0.06 µs a message (a lone send leaves by the engine's full path); 2-4
/// KiB went as fast or faster through the ring (`docs/performance.md`, "Lone messages
/// of 8-16 KiB judged too").
pub const LONE_READ_ABOVE: u64 = 8 * 1024;
/// Messages of more than this many bytes that cross traffic of the peer's own large
/// sends are read once by their receiver ([`transport::Caps::cross_read_above`],
/// docs/protocol.md rule 19), unjudged. It was the lone messages' switch, 16 KiB,
/// until issue 11's fifty-eighth round. On the Intel machine of that round, with
/// large records no longer cleared by their consumer (`ring::UNCLEARED_ABOVE`),
/// crossing reads carried `bibw` 16 KiB at 11.4-15.7 GB/s against the ring's 7.1-8.4
/// (3 alternating rounds); in the fifty-seventh, crossing reads from 4 KiB lost 8 KiB
/// (9.0-9.7 against 10.1-10.3), so 8 KiB still goes through the ring. On the AMD
/// machine of the thirty-eighth round reads lost at 8 KiB and were about level at 16
/// KiB (5.4-7.0 against 5.4-8.9 GB/s; `docs/performance.md`, "Streams both ways read
/// once" and "Crossing reads above 8 KiB").
pub const CROSS_READ_ABOVE: u64 = 8 * 1024;
/// The size classes judged apart, by their largest message: (8, 16], (16, 32] and
/// (32, 64] KiB. A read's fixed cost (the system call, ~0.4 µs) weighs more in the
/// smaller classes, so each is measured for itself.
pub const CLASS_TOP: [usize; LONE_CLASSES] = [16 * 1024, 32 * 1024, LONE_TOP];
/// How many size classes are judged apart ([`CLASS_TOP`]).
pub const LONE_CLASSES: usize = 3;
/// The largest message judged (the default eager limit): reads up to it are single
/// copies, never pulls through the ring (`crate::pull`), which the judge found
/// dearer already.
pub const LONE_TOP: usize = 64 * 1024;
/// The most a message's protocol header adds to its payload in the ring
/// (`ring::MAX_CTRL` less the largest eager payload): a message delivered out of the
/// ring is classed by its length less this.
pub const HEADER_SLACK: usize = crate::ring::MAX_CTRL - LONE_TOP;
/// Copy-in times kept per class; their lower median is the ring's estimate
/// ([`ring_estimate`]).
pub const KEEP: usize = 8;

/// The ring's estimate from the last [`KEEP`] copy-in times: their lower median (the
/// fourth least of eight). A copy taken while the process was descheduled is long,
/// and some are short by luck of place: until issue 11's sixty-sixth round the
/// estimate was the least, and on the Intel machine of that round a 2-rank bcast of
/// 16 KiB cycled through three records whose copies took 0.45, 4.5 and 3.0 µs (the
/// first into lines asked for ahead, `ring::Producer::prepare_next`, where the
/// tight lap takes the next record to the ring's start). The least, 0.45 µs, kept
/// the ring against reads of 1.0 µs, and the bcast took 3.1-3.5 µs where the build
/// before, reading, took 1.9-2.0 (`docs/performance.md`, "Larger records look at
/// the head").
pub fn ring_estimate(copy_in: &[u32; KEEP]) -> u32 {
    let mut sorted = *copy_in;
    sorted.sort_unstable();
    sorted[KEEP / 2 - 1]
}
/// While reading, one lone message of a class in this many goes through the ring to
/// measure it again.
pub const PROBE_EVERY: u32 = 32;
/// Where the peer's real reads chose the ring against the timed read, one lone message
/// of a class in this many is read, so that the peer measures a read again (rarer than
/// [`PROBE_EVERY`]: such a probe costs a few µs where reads lose, ~1 % of the time
/// here).
pub const READ_PROBE_EVERY: u32 = 128;
/// Lone messages read back to back by each such probe: a process's first reads of
/// another's buffer are cold (7–13 µs for 32 KiB here, against ~2 warm), and from
/// [`crate::PULL_FROM`] the receiver's first reads may be pulls, whose time the
/// judge does not see, so one read would tell the peer only a cold figure.
pub const READ_PROBE_RUN: u32 = 4;
/// Lone messages read back to back by a class's first probe, where a read could
/// win: enough for the receiver's judge of large reads (`crate::pull`), which first
/// tries four pulls and four reads in runs before it settles, to settle and then
/// read warm. With [`READ_PROBE_RUN`] reads the first run was all trials, two of
/// them cold reads of 10-14 µs for 32 KiB, and the peer told only those (issue 11's
/// fifty-sixth round; `docs/performance.md`, "The lone judge's first probe").
pub const FIRST_READ_PROBE_RUN: u32 = 16;
/// What a read costs beyond the read itself: the send request's and the answer's
/// crossings and the library's work for them (ns). Measured on the Intel machine of
/// issue 11's fifty-sixth round: forced reads' one-way time at 32 KiB (3.3-4.6 µs)
/// less what the receiver's reads took (3.4-4.3 µs), 0.3-0.5 µs. It was 1.5 µs,
/// from the AMD machine: a read's one-way time at 64 KiB (5.4-6.0 µs) less a
/// `process_vm_readv` of one's own memory (3.1-4.2 µs), which counted a remote
/// read's own surplus as well, which [`REMOTE_FACTOR`] and the peer's told reads
/// already count.
pub const READ_EXTRA_NS: u64 = 500;
/// How much more a read of another, running process is taken to cost than the timed
/// read of one's own memory until the peer has told what its real reads take: on
/// this machine (AMD Zen 3) 1.5-2x (32 KiB in 6.3-7.9 µs against ~4 µs).
pub const REMOTE_FACTOR: u32 = 2;

/// How lone messages of 8-64 KiB to local peers go (`RSMPI_SHM_LONE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LoneMode {
    /// Measured per peer and size class (this module's docs, `transport-shm/src/lone.rs`).
    #[default]
    Auto,
    /// Always read by the receiver.
    Read,
    /// Always through the ring, as before lone reads.
    Ring,
}

/// The environment variable that sets [`LoneMode`]: `auto`, `read` or `ring`.
pub const ENV_LONE: &str = "RSMPI_SHM_LONE";
/// The environment variable that sets the same for a stream's messages of 8-64 KiB
/// ("Streams" in this module's docs).
pub const ENV_STREAM: &str = "RSMPI_SHM_STREAM";

impl LoneMode {
    /// The mode `RSMPI_SHM_LONE` asks for ([`LoneMode::Auto`] when unset).
    pub fn from_env() -> Result<Self, transport::TransportError> {
        Self::from_var(ENV_LONE)
    }

    /// The mode the environment variable `name` asks for ([`ENV_LONE`],
    /// [`ENV_STREAM`]; [`LoneMode::Auto`] when unset).
    pub fn from_var(name: &str) -> Result<Self, transport::TransportError> {
        Self::parse_var(name, std::env::var(name).ok().as_deref())
    }

    /// The mode a value of `RSMPI_SHM_LONE` names (`None`: unset).
    pub fn parse(v: Option<&str>) -> Result<Self, transport::TransportError> {
        Self::parse_var(ENV_LONE, v)
    }

    /// The mode a value `v` of the variable `name` names (`None`: unset).
    pub fn parse_var(name: &str, v: Option<&str>) -> Result<Self, transport::TransportError> {
        match v {
            None | Some("auto") | Some("") => Ok(LoneMode::Auto),
            Some("read") => Ok(LoneMode::Read),
            Some("ring") => Ok(LoneMode::Ring),
            Some(v) => Err(transport::TransportError::Unavailable(format!(
                "{name}={v:?}: expected auto, read or ring"
            ))),
        }
    }
}

/// One size class's measurements.
#[derive(Clone, Debug, Default)]
struct Class {
    /// The last copy-in times, ns per KiB, as a ring of [`KEEP`] (0 = none yet).
    copy_in: [u32; KEEP],
    /// Copy-in times taken.
    taken: u32,
    /// The read's time, ns per KiB of the class's largest size (0 = not timed yet).
    read: u32,
    /// This rank's last real reads of the peer's messages, ns per KiB, as a ring of
    /// [`KEEP`] (0 = none yet): their least is told to the peer.
    reads: [u32; KEEP],
    /// Real reads taken.
    reads_taken: u32,
    /// This rank's last copies of the peer's large messages out of the ring, ns per
    /// KiB, as a ring of [`KEEP`] (0 = none yet): their lower median is told to the
    /// peer's stream judge.
    copies_out: [u32; KEEP],
    /// Copies out taken.
    copies_taken: u32,
    /// Lone messages judged for a read, for the probes.
    asked: u32,
    /// The count of `asked` up to which a run of read probes under way goes on,
    /// whatever the peer tells meanwhile (0: none begun).
    probing_until: u32,
}

/// The judge of one peer (this module's docs, `transport-shm/src/lone.rs`): a pure state
/// machine; the transport times the copies and the reads. [`Lone::default`] judges
/// lone messages, [`Lone::streams`] a stream's.
#[derive(Clone, Debug, Default)]
pub struct Lone {
    classes: [Class; LONE_CLASSES],
    /// Judging a stream's messages ("Streams" in this module's docs).
    stream: bool,
}

/// ns per KiB of `ns` for `len` bytes.
fn per_kib(ns: u64, len: usize) -> u32 {
    (ns.saturating_mul(1024) / len.max(1) as u64).min(u64::from(u32::MAX)) as u32
}

impl Lone {
    /// A judge of a stream's messages: sent while others to the same peer are in
    /// flight, where the ring's two copies run at once, one on each CPU, and a read
    /// must beat one of them, not both ("Streams" in this module's docs).
    pub fn streams() -> Self {
        Lone {
            stream: true,
            ..Lone::default()
        }
    }

    /// The class of a message of `len` bytes, if it is judged.
    fn class(len: usize) -> Option<usize> {
        if len as u64 <= LONE_READ_ABOVE {
            return None;
        }
        CLASS_TOP.iter().position(|&top| len <= top)
    }

    /// The largest message of the class of `len` (the size its read is timed at).
    pub fn class_top(len: usize) -> Option<usize> {
        Self::class(len).map(|c| CLASS_TOP[c])
    }

    /// A lone message of `len` bytes took `ns` to copy into the ring.
    pub fn copied_in(&mut self, len: usize, ns: u64) {
        if let Some(c) = Self::class(len) {
            let c = &mut self.classes[c];
            c.copy_in[c.taken as usize % KEEP] = per_kib(ns, len).max(1);
            c.taken = c.taken.wrapping_add(1);
        }
    }

    /// This rank read a lone message of `len` bytes from the peer in `ns`: its class
    /// and the least of the last [`KEEP`] such reads (ns per KiB), which the transport
    /// tells the peer's judge (`Told::lone`), if the size is judged.
    pub fn read_took(&mut self, len: usize, ns: u64) -> Option<(usize, u32)> {
        let i = Self::class(len)?;
        let c = &mut self.classes[i];
        c.reads[c.reads_taken as usize % KEEP] = per_kib(ns, len).max(1);
        c.reads_taken = c.reads_taken.wrapping_add(1);
        let least = c.reads.iter().filter(|&&t| t > 0).min().copied();
        Some((i, least.unwrap_or(0)))
    }

    /// This rank took a message of `len` bytes from the peer out of the ring in `ns`
    /// (its delivery, from the record's first byte seen to the library's return): its
    /// class and the lower median of the last [`KEEP`] such (ns per KiB), which the
    /// transport tells the peer's stream judge (`Told::copies`), if the size is judged.
    pub fn copied_out(&mut self, len: usize, ns: u64) -> Option<(usize, u32)> {
        // (`len` counts the protocol's header: a message of a class's top size is
        // of that class)
        let i = Self::class(len.saturating_sub(HEADER_SLACK))?;
        let c = &mut self.classes[i];
        c.copies_out[c.copies_taken as usize % KEEP] = per_kib(ns, len).max(1);
        c.copies_taken = c.copies_taken.wrapping_add(1);
        let told = if c.copies_taken < KEEP as u32 {
            0
        } else {
            ring_estimate(&c.copies_out)
        };
        Some((i, told))
    }

    /// Whether a lone message of `len` bytes should be read by the receiver;
    /// `read_ns` times a read of the class's largest size (called once per class, at
    /// its first message);
    /// `peer_reads` are what the peer's real reads of this rank's lone messages took
    /// per class (ns per KiB, 0: none yet; [`Lone::read_took`] at the peer).
    pub fn prefers_read(
        &mut self,
        len: usize,
        read_ns: impl FnOnce() -> u64,
        peer_reads: [u32; LONE_CLASSES],
    ) -> bool {
        self.judge(len, read_ns, peer_reads, [0; LONE_CLASSES])
    }

    /// Whether a stream's message of `len` bytes should be read by the receiver (a
    /// judge made by [`Lone::streams`]): as [`Lone::prefers_read`], with the ring
    /// taken to cost the more of this rank's copies in and the peer's copies out,
    /// `peer_copies` per class (ns per KiB, 0: none yet; [`Lone::copied_out`] at the
    /// peer): in a stream the two run at once, and the slower sets the pace.
    pub fn prefers_read_in_stream(
        &mut self,
        len: usize,
        read_ns: impl FnOnce() -> u64,
        peer_reads: [u32; LONE_CLASSES],
        peer_copies: [u32; LONE_CLASSES],
    ) -> bool {
        self.judge(len, read_ns, peer_reads, peer_copies)
    }

    fn judge(
        &mut self,
        len: usize,
        read_ns: impl FnOnce() -> u64,
        peer_reads: [u32; LONE_CLASSES],
        peer_copies: [u32; LONE_CLASSES],
    ) -> bool {
        let Some(i) = Self::class(len) else {
            // above the classes the protocol sends by rendezvous anyway
            return len as u64 > LONE_READ_ABOVE;
        };
        let c = &mut self.classes[i];
        if c.read == 0 {
            // at the class's first message, which a timed loop's warm-up sends
            c.read = per_kib(read_ns(), CLASS_TOP[i]).max(1);
        }
        if c.taken < KEEP as u32 {
            // the ring first: it measures itself, KEEP times (a process's first
            // copies are slow, and while reading the ring is measured only by probes)
            return false;
        }
        let ring = ring_estimate(&c.copy_in).max(peer_copies[i]);
        let kib = |per: u32| u64::from(per) * len as u64 / 1024;
        let real = Some(peer_reads[i]).filter(|&t| t > 0);
        let guess = c.read.saturating_mul(REMOTE_FACTOR);
        // lone: the ring's two copies one after the other against the read and its
        // extra crossings; a stream's: its two copies overlap (`ring` is the slower,
        // with the peer's copies out), and so do a read's crossings
        let wins = |read: u32| match self.stream {
            false => 2 * kib(ring) > kib(read) + READ_EXTRA_NS,
            true => kib(ring) > kib(read),
        };
        c.asked = c.asked.wrapping_add(1);
        if !wins(real.unwrap_or(guess)) {
            // the ring; but where a read could still win, a run of READ_PROBE_RUN
            // in READ_PROBE_EVERY is read, the first run at once, so that the peer
            // measures what reads take (it tells the least of its last KEEP, and
            // its first reads of a buffer are cold): with no real read yet, where
            // the timed read alone would win (REMOTE_FACTOR is another machine's);
            // after real reads chose the ring, where the guess would win
            let k = c.asked.wrapping_sub(1);
            let left = c.probing_until.wrapping_sub(k);
            if left > 0 && left <= FIRST_READ_PROBE_RUN {
                // a run under way goes on to its end: the peer's first reads of a
                // buffer are cold, and what it tells of them alone would end it
                return true;
            }
            let could = wins(if real.is_some() { guess } else { c.read });
            // (the first run is longer: FIRST_READ_PROBE_RUN)
            let probe =
                could && (k < FIRST_READ_PROBE_RUN || k % READ_PROBE_EVERY < READ_PROBE_RUN);
            if probe {
                c.probing_until = if k < FIRST_READ_PROBE_RUN {
                    FIRST_READ_PROBE_RUN
                } else {
                    k - k % READ_PROBE_EVERY + READ_PROBE_RUN
                };
            }
            return probe;
        }
        c.asked % PROBE_EVERY != 0
    }
}

/// Times a `process_vm_readv` of `len` bytes of this process's own memory (pid
/// `pid`), in ns: the median of five, after two that warm the buffers. A read that
/// fails says "never" (`u64::MAX / 4`).
pub(crate) fn time_read(pid: i32, len: usize) -> u64 {
    // the two buffers at one page offset: two allocations side by side lie one
    // allocator header apart modulo 4 KiB, which on some CPUs is the kernel's slow
    // case (`cma` module), and `get` avoids that case for real reads
    let mut mem = vec![1u8; 2 * len + 8192];
    let s = (4096 - mem.as_ptr() as usize % 4096) % 4096;
    let d = s + len.div_ceil(4096) * 4096;
    let (a, b) = mem.split_at_mut(d);
    let (src, dst) = (a[s..s + len].as_ptr() as u64, &mut b[..len]);
    let mut times = [0u64; 7];
    for t in &mut times {
        let start = std::time::Instant::now();
        if crate::cma::read(pid, dst, src).is_err() {
            return u64::MAX / 4;
        }
        *t = start.elapsed().as_nanos() as u64;
    }
    let timed = &mut times[2..];
    timed.sort_unstable();
    timed[timed.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: u64 = 4_000; // a 64 KiB read, ns
    /// No read of the peer's told.
    const NONE: [u32; LONE_CLASSES] = [0; LONE_CLASSES];
    /// The 64 KiB class.
    const TOP: usize = LONE_CLASSES - 1;

    /// The peer's reads told: `per` (ns per KiB) for class `c`, none for the others.
    fn told(c: usize, per: u32) -> [u32; LONE_CLASSES] {
        let mut t = NONE;
        t[c] = per;
        t
    }

    /// A judge whose ring copies of `len` bytes took `ns`, KEEP times.
    fn measured(len: usize, ns: u64) -> Lone {
        measured_as(Lone::default(), len, ns)
    }

    /// Judge `j` after KEEP ring copies of `len` bytes that took `ns`.
    fn measured_as(mut j: Lone, len: usize, ns: u64) -> Lone {
        for _ in 0..KEEP {
            j.copied_in(len, ns);
        }
        j
    }

    /// Which of `n` lone messages of 64 KiB in a row judge `j` reads, the peer's
    /// reads told as `told` and the timed read, if asked for, from `read`.
    fn reads_of(
        j: &mut Lone,
        n: usize,
        read: fn() -> u64,
        told: [u32; LONE_CLASSES],
    ) -> Vec<usize> {
        reads_of_len(j, 65_536, n, read, told)
    }

    /// [`reads_of`] for messages of `len` bytes.
    fn reads_of_len(
        j: &mut Lone,
        len: usize,
        n: usize,
        read: fn() -> u64,
        told: [u32; LONE_CLASSES],
    ) -> Vec<usize> {
        (0..n).filter(|_| j.prefers_read(len, read, told)).collect()
    }

    #[test]
    fn modes_from_the_environment_value() {
        assert_eq!(LoneMode::parse(None).unwrap(), LoneMode::Auto);
        assert_eq!(LoneMode::parse(Some("read")).unwrap(), LoneMode::Read);
        assert_eq!(LoneMode::parse(Some("ring")).unwrap(), LoneMode::Ring);
        let e = LoneMode::parse(Some("cma")).unwrap_err().to_string();
        assert!(
            e.contains("RSMPI_SHM_LONE") && e.contains("auto, read or ring"),
            "{e}"
        );
        let e = LoneMode::parse_var(ENV_STREAM, Some("x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("RSMPI_SHM_STREAM"), "{e}");
        assert_eq!(
            LoneMode::parse_var(ENV_STREAM, Some("ring")).unwrap(),
            LoneMode::Ring
        );
    }

    #[test]
    fn ring_until_measured_and_below_the_classes() {
        let mut j = Lone::default();
        let mut timed = 0;
        assert!(!j.prefers_read(
            40_000,
            || {
                timed += 1;
                READ
            },
            NONE
        ));
        assert_eq!(timed, 1, "the read is timed at the class's first message");
        // measured fewer than KEEP times: still the ring
        for _ in 0..KEEP - 1 {
            j.copied_in(40_000, 1_000_000);
            assert!(!j.prefers_read(40_000, || READ, NONE));
        }
        j.copied_in(40_000, 1_000_000);
        assert!(j.prefers_read(40_000, || READ, NONE));
        assert!(!j.prefers_read(8 * 1024, || panic!("not judged"), NONE));
        j.copied_in(8 * 1024, 1_000_000);
        assert!(!j.prefers_read(8 * 1024, || panic!("not judged"), NONE));
        // above the classes: rendezvous whatever the judge says
        assert!(j.prefers_read(64 * 1024 + 1, || panic!("not judged"), NONE));
    }

    #[test]
    fn follows_the_cheaper_way_and_times_the_read_once() {
        let mut j = measured(65_536, 5_000);
        let mut reads = 0;
        let mut timed = || {
            reads += 1;
            READ
        };
        assert!(j.prefers_read(65_536, &mut timed, NONE));
        assert!(
            j.prefers_read(49_152, &mut timed, NONE),
            "scaled to the size"
        );
        assert_eq!(reads, 1);
        // the classes are apart: (16, 32] KiB has measured nothing, nor has (8, 16]
        assert!(!j.prefers_read(32 * 1024, || READ / 2, NONE));
        assert!(!j.prefers_read(8 * 1024 + 1, || READ / 4, NONE));
        // the lower median of the last KEEP decides: three fast copies of eight
        // leave it reading, a fourth turns it back to the ring, until KEEP slow
        // ones have followed them
        for _ in 0..KEEP / 2 - 1 {
            j.copied_in(65_536, 2_000);
            assert!(j.prefers_read(65_536, || unreachable!(), NONE));
        }
        j.copied_in(65_536, 2_000);
        assert!(!j.prefers_read(65_536, || unreachable!(), NONE));
        for _ in 0..KEEP {
            j.copied_in(65_536, 5_000);
        }
        assert!(j.prefers_read(65_536, || unreachable!(), NONE));
    }

    #[test]
    fn the_ring_is_estimated_by_the_lower_median_of_its_copies() {
        // the 16 KiB bcast of issue 11's sixty-sixth round: three records in a lap,
        // copies of 0.45, 4.5 and 3.0 µs in turn (ns per KiB here)
        let cycle = [28, 281, 187];
        let copies: [u32; KEEP] = std::array::from_fn(|k| cycle[k % 3]);
        assert_eq!(ring_estimate(&copies), 187);
        // one descheduled copy does not count, nor does one lucky one
        let mut steady = [100; KEEP];
        steady[2] = 50_000;
        steady[5] = 5;
        assert_eq!(ring_estimate(&steady), 100);
        // so reads of 1.0 µs are chosen over that ring, where the least (0.45 µs,
        // twice: 0.9 against 1.5) kept the ring
        let mut j = Lone::default();
        for &per in &copies {
            j.copied_in(16 * 1024, u64::from(per) * 16);
        }
        let told = told(0, per_kib(1_000, 16 * 1024));
        assert!(j.prefers_read(16 * 1024, || 1_000, told));
    }

    #[test]
    fn the_smallest_class_is_judged_by_its_own_figures() {
        // the Intel machine of the fifty-seventh round, 16 KiB: copies into the ring
        // of 1.2 µs against a timed read of 1.0: 2 x 1.2 <= 2 x 1.0 + 0.5 by the
        // guess, but > 1.0 + 0.5 by the timed read alone, so a first run of reads;
        // told reads of 1.15 µs: reading
        let mut j = measured(16 * 1024, 1_200);
        let first = reads_of_len(
            &mut j,
            16 * 1024,
            FIRST_READ_PROBE_RUN as usize,
            || 1_000,
            NONE,
        );
        assert_eq!(
            first,
            (0..FIRST_READ_PROBE_RUN as usize).collect::<Vec<_>>()
        );
        let warm = told(0, per_kib(1_150, 16 * 1024));
        assert!(j.prefers_read(16 * 1024, || unreachable!(), warm));
        assert!(
            j.prefers_read(12 * 1024, || unreachable!(), warm),
            "scaled to the size"
        );
        // the AMD machine's near state: copies of 0.3 µs; 2 x 0.3 <= 1.0 + 0.5 even by
        // the timed read alone, so the ring and no probe
        let mut j = measured(16 * 1024, 300);
        assert!((0..2 * READ_PROBE_EVERY).all(|_| !j.prefers_read(16 * 1024, || 1_000, NONE)));
    }

    #[test]
    fn the_margin() {
        // 2 x ring against 2 x read + extra: 2 x 4.2 = 8.4 <= 8 + 0.5; 2 x 4.3 > 8.5
        // (the peer's reads told at the guess, 8 µs, so that no probe is made)
        let told = told(TOP, per_kib(2 * READ, 65_536));
        let mut j = measured(65_536, 4_200);
        assert!(!j.prefers_read(65_536, || READ, told));
        let mut j = measured(65_536, 4_300);
        assert!(j.prefers_read(65_536, || READ, told));
    }

    #[test]
    fn the_peers_reads_count_over_the_timed_one_and_are_probed() {
        let mut j = measured(65_536, 5_000);
        // 2 x 5 > 2 x 4 + 0.5: the guess from the timed read wins
        assert!(j.prefers_read(65_536, || READ, NONE));
        // the peer's reads of this rank's messages took 10 µs: 2 x 5 <= 10 + 0.5
        let slow = told(TOP, per_kib(10_000, 65_536));
        let (n, first, run, every) = (
            2 * READ_PROBE_EVERY as usize,
            FIRST_READ_PROBE_RUN as usize,
            READ_PROBE_RUN as usize,
            READ_PROBE_EVERY as usize,
        );
        let probes = reads_of(&mut j, n, || unreachable!("timed once per class"), slow);
        // (the judgement above was the class's first: these are its 2nd to 257th)
        let expected: Vec<usize> = (0..n)
            .filter(|&k| k + 1 < first || (k + 1) % every < run)
            .collect();
        assert_eq!(
            probes, expected,
            "the rest of a first run of FIRST_READ_PROBE_RUN, then a run of \
             READ_PROBE_RUN in READ_PROBE_EVERY, for the peer to measure"
        );
        // a fast read told: reading again
        assert!(j.prefers_read(65_536, || unreachable!(), told(TOP, per_kib(2_000, 65_536))));
        // another class's figure does not count
        let mut other = told(1, per_kib(90_000, 32_768));
        other[0] = per_kib(90_000, 16_384);
        assert!(j.prefers_read(65_536, || unreachable!(), other));
    }

    #[test]
    fn with_no_real_read_a_run_is_read_where_the_timed_read_alone_wins() {
        // 2 x 3 <= 2 x 4 + 0.5 by the guess, but > 4 + 0.5 by the timed read alone
        // (REMOTE_FACTOR is another machine's): the peer gets to measure reads, a
        // long run of them at once (its own judge of large reads tries pulls
        // first), then one run in READ_PROBE_EVERY until it tells
        let mut j = measured(65_536, 3_000);
        let probes = reads_of(&mut j, 2 * READ_PROBE_EVERY as usize, || READ, NONE);
        let (first, run, every) = (
            FIRST_READ_PROBE_RUN as usize,
            READ_PROBE_RUN as usize,
            READ_PROBE_EVERY as usize,
        );
        assert_eq!(
            probes,
            (0..first).chain(every..every + run).collect::<Vec<_>>()
        );
        // the peer told warm reads of 3 µs: 2 x 3 > 3 + 0.5, reading from now on
        let warm = told(TOP, per_kib(3_000, 65_536));
        assert!(j.prefers_read(65_536, || unreachable!(), warm));
        // where the timed read alone loses too (2 x 2 <= 4 + 0.5), no probe
        let mut j = measured(65_536, 2_000);
        assert!((0..2 * READ_PROBE_EVERY).all(|_| !j.prefers_read(65_536, || READ, NONE)));
    }

    #[test]
    fn a_cold_told_read_does_not_end_the_first_run() {
        // the Intel machine of issue 11's sixty-sixth round, in 64 KiB terms: the
        // ring's copies in at 3 µs, the timed read at 4 (the guess, 8, loses; the
        // timed read alone wins): a first run of reads. The peer tells its first,
        // cold, read (14 µs) after three of them; the run still goes on to its end
        let mut j = measured(65_536, 3_000);
        let cold = told(TOP, per_kib(14_000, 65_536));
        let first = FIRST_READ_PROBE_RUN as usize;
        let mut read = reads_of(&mut j, 3, || READ, NONE);
        read.extend(
            reads_of(&mut j, first - 3, || READ, cold)
                .iter()
                .map(|k| k + 3),
        );
        assert_eq!(read, (0..first).collect::<Vec<_>>());
        // the run over, the cold figure (the peer's least) keeps the ring, and the
        // guess loses: no more probes
        assert!(reads_of(&mut j, 2 * READ_PROBE_EVERY as usize, || READ, cold).is_empty());
        // once the peer tells warm reads of 2.5 µs: 2 x 3 > 2.5 + 0.5, reading
        let warm = told(TOP, per_kib(2_500, 65_536));
        assert!(j.prefers_read(65_536, || unreachable!(), warm));
    }

    #[test]
    fn no_read_probes_where_the_timed_read_loses_too() {
        let mut j = measured(65_536, 2_000);
        let slow = told(TOP, per_kib(10_000, 65_536));
        // 2 x 2 <= 4 + 0.5 by the timed read as well: nothing to probe
        assert!((0..3 * READ_PROBE_EVERY).all(|_| !j.prefers_read(65_536, || READ, slow)));
    }

    #[test]
    fn reads_taken_are_told_as_the_least_of_the_last_keep() {
        let mut j = Lone::default();
        assert_eq!(j.read_took(8 * 1024, 1), None);
        assert_eq!(j.read_took(64 * 1024 + 1, 1), None);
        let told = |ns| Some((TOP, per_kib(ns, 65_536)));
        assert_eq!(
            j.read_took(65_536, 240_000),
            told(240_000),
            "the first, cold"
        );
        assert_eq!(j.read_took(65_536, 10_000), told(10_000));
        assert_eq!(
            j.read_took(20_000, 5_000),
            Some((1, per_kib(5_000, 20_000)))
        );
        assert_eq!(
            j.read_took(12_000, 1_300),
            Some((0, per_kib(1_300, 12_000)))
        );
        for _ in 0..KEEP - 1 {
            assert_eq!(j.read_took(65_536, 12_000), told(10_000));
        }
        // the 10 µs read has left the last KEEP
        assert_eq!(j.read_took(65_536, 12_000), told(12_000));
    }

    #[test]
    fn probes_the_ring_while_reading() {
        let mut j = measured(65_536, 10_000);
        let answers: Vec<bool> = (0..3 * PROBE_EVERY)
            .map(|_| j.prefers_read(65_536, || READ, NONE))
            .collect();
        let probes = answers.iter().filter(|&&r| !r).count();
        assert_eq!(probes, 3);
        assert!(!answers[PROBE_EVERY as usize - 1], "the 32nd is a probe");
    }

    /// Which of `n` stream messages of 32 KiB in a row judge `j` reads, the peer's
    /// reads and copies out told.
    fn stream_reads_of(
        j: &mut Lone,
        n: usize,
        reads: [u32; LONE_CLASSES],
        copies: [u32; LONE_CLASSES],
    ) -> Vec<usize> {
        (0..n)
            .filter(|_| j.prefers_read_in_stream(32 * 1024, || 1_000, reads, copies))
            .collect()
    }

    #[test]
    fn a_stream_is_read_where_the_slower_copy_of_the_ring_costs_more() {
        const MID: usize = 1; // the 32 KiB class
                              // copies in of 50 ns per KiB; the peer's reads 70: the copy in alone does not
                              // lose to the read, and a lone judge's two copies would
        let mut j = measured_as(Lone::streams(), 32 * 1024, 50 * 32);
        let reads = told(MID, 70);
        let mut lone = measured(32 * 1024, 50 * 32);
        assert!(lone.prefers_read(32 * 1024, || 1_000, reads));
        // no copy out told yet: the ring (each CPU's copy cheaper than the read)
        assert!(stream_reads_of(&mut j, 8, reads, NONE).is_empty());
        // the peer's copies out take 60: still the ring
        assert!(stream_reads_of(&mut j, 8, reads, told(MID, 60)).is_empty());
        // they take 100: the peer's copy sets the stream's pace, and the read wins;
        // one in PROBE_EVERY still goes through the ring
        let read = stream_reads_of(&mut j, 2 * PROBE_EVERY as usize, reads, told(MID, 100));
        assert_eq!(read.len(), 2 * PROBE_EVERY as usize - 2, "{read:?}");
        // another class's copies say nothing of this one's
        assert!(stream_reads_of(&mut j, 8, reads, told(TOP, 1_000)).is_empty());
        // the copies in grow to 120 (the peer's copies out unchanged): the read wins
        let mut j = measured_as(Lone::streams(), 32 * 1024, 120 * 32);
        assert!(stream_reads_of(&mut j, 8, reads, NONE).len() >= 7);
    }

    #[test]
    fn copies_out_are_told_by_their_lower_median_once_kept() {
        let mut j = Lone::default();
        // the protocol's header counts in the length: 32 KiB and its header is of
        // the 32 KiB class
        let hdr = 40;
        for (k, ns) in [900u64, 100, 800, 200, 700, 300, 600]
            .into_iter()
            .enumerate()
        {
            // ns per KiB of 32 KiB: 32 * x; nothing told before KEEP are taken
            assert_eq!(j.copied_out(32 * 1024, ns * 32), Some((1, 0)), "copy {k}");
        }
        // the eighth: the lower median of 900 800 700 600 500 300 200 100
        assert_eq!(j.copied_out(32 * 1024, 500 * 32), Some((1, 500)));
        assert_eq!(j.copied_out(32 * 1024 + hdr, 1_000).map(|c| c.0), Some(1));
        // (a message is classed by its length less the largest header: one up to
        // HEADER_SLACK bytes past a class's top may count in it)
        assert_eq!(
            j.copied_out(32 * 1024 + HEADER_SLACK + 1, 1_000)
                .map(|c| c.0),
            Some(2)
        );
        // below the classes and above them: not judged
        assert_eq!(j.copied_out(8 * 1024 + hdr, 1_000), None);
        assert_eq!(j.copied_out(LONE_TOP + HEADER_SLACK + 1, 1_000), None);
    }
}

//! What a message's hand-over between two cores costs under different line protocols,
//! with no transport around them: two threads ping-pong 8 bytes through
//!
//! * `raw`: one atomic word both write (the floor, as `ring_pingpong --raw`);
//! * `ring`: the rings' protocol — a record per 64-byte line, walked through a lap of
//!   2 048 lines, its header word holding the expected sequence number; the consumer
//!   clears the header and publishes its `head` after reading;
//! * `ring-noclear`: the same without the clear and the `head` store;
//! * `ring-clear`: with the clear, without the `head` store;
//! * `fastbox`: one line per direction with a full/empty flag (the sender waits for
//!   empty, the receiver clears it), as MPICH's and Open MPI's fast boxes;
//! * `ring16`: the rings' protocol over a lap of 16 lines.
//!
//! The variants run in turn, each for `ROUND_TRIPS` round trips (default 4 000), for
//! `ROUNDS` rounds (default 250), so that every variant sees the machine's states
//! (this VM's two CPUs are at times ~40 ns apart, at times ~200 ns). Each round is
//! classed by the `raw` figure measured just before it; the median one-way time of
//! each variant is printed per class.
//!
//! ```text
//! cargo run --release -p rsmpi-transport-shm --example handover -- [ROUND_TRIPS] [ROUNDS]
//! ```
//!
//! `docs/performance.md`, "The far state: where the time goes", has the results.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A cache line of eight words.
#[repr(C, align(64))]
#[derive(Default)]
struct Line([AtomicU64; 8]);

/// Lines of a lap.
const LAP: usize = 2048;

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Raw,
    Ring,
    RingNoClear,
    RingClear,
    Fastbox,
    Ring16,
}

const VARIANTS: [(Variant, &str); 6] = [
    (Variant::Raw, "raw"),
    (Variant::Ring, "ring"),
    (Variant::RingNoClear, "ring-noclear"),
    (Variant::RingClear, "ring-clear"),
    (Variant::Fastbox, "fastbox"),
    (Variant::Ring16, "ring16"),
];

/// One direction: its lines, the consumer's `head`, and the fast box.
struct Dir {
    lines: Vec<Line>,
    head: Line,
    fbox: Line,
}

impl Dir {
    fn new() -> Self {
        Self {
            lines: (0..LAP).map(|_| Line::default()).collect(),
            head: Line::default(),
            fbox: Line::default(),
        }
    }

    fn lap(v: Variant) -> usize {
        if v == Variant::Ring16 {
            16
        } else {
            LAP
        }
    }

    /// Sends `seq` (never 0) as message number `*pos`.
    fn send(&self, v: Variant, seq: u64, pos: &mut usize) {
        if v == Variant::Fastbox {
            let l = &self.fbox;
            while l.0[0].load(Ordering::Acquire) != 0 {
                std::hint::spin_loop();
            }
            l.0[1].store(seq, Ordering::Relaxed);
            l.0[0].store(1, Ordering::Release);
            return;
        }
        let l = &self.lines[*pos];
        l.0[1].store(seq, Ordering::Relaxed);
        l.0[0].store(seq, Ordering::Release);
        *pos = (*pos + 1) % Self::lap(v);
    }

    /// Receives message `seq`, number `*pos`.
    fn recv(&self, v: Variant, seq: u64, pos: &mut usize) -> u64 {
        if v == Variant::Fastbox {
            let l = &self.fbox;
            while l.0[0].load(Ordering::Acquire) != 1 {
                std::hint::spin_loop();
            }
            let x = l.0[1].load(Ordering::Relaxed);
            l.0[0].store(0, Ordering::Release);
            return x;
        }
        let l = &self.lines[*pos];
        while l.0[0].load(Ordering::Acquire) != seq {
            std::hint::spin_loop();
        }
        let x = l.0[1].load(Ordering::Relaxed);
        if matches!(v, Variant::Ring | Variant::RingClear | Variant::Ring16) {
            l.0[0].store(0, Ordering::Relaxed);
        }
        if matches!(v, Variant::Ring | Variant::Ring16) {
            self.head.0[0].store(seq, Ordering::Release);
        }
        *pos = (*pos + 1) % Self::lap(v);
        x
    }
}

fn main() {
    let nums: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let iters = nums.first().copied().unwrap_or(4_000);
    let rounds = nums.get(1).copied().unwrap_or(250);
    assert!(iters < 1 << 20, "ROUND_TRIPS: fewer than 2^20");
    let (ab, ba, raw) = (Dir::new(), Dir::new(), Line::default());
    // the variant and round the echoing thread is to run: variant << 32 | round
    let ctl = AtomicU64::new(0);
    // sequence numbers: round << 20 | message (never 0, never repeated)
    let seq = |round: u64, i: u64| (round << 20) + i + 1;
    let mut res: Vec<Vec<(f64, f64)>> = vec![Vec::new(); VARIANTS.len()];
    std::thread::scope(|s| {
        s.spawn(|| {
            let (mut pa, mut pb, mut r) = (0, 0, 0u64);
            let mut last = 0;
            loop {
                let c = ctl.load(Ordering::Acquire);
                if c == u64::MAX {
                    break;
                }
                if c == last {
                    std::hint::spin_loop();
                    continue;
                }
                last = c;
                let (v, round) = (VARIANTS[(c >> 32) as usize].0, c & 0xffff_ffff);
                for i in 0..iters {
                    if v == Variant::Raw {
                        while raw.0[0].load(Ordering::Acquire) != 2 * r + 1 {
                            std::hint::spin_loop();
                        }
                        raw.0[0].store(2 * r + 2, Ordering::Release);
                        r += 1;
                    } else {
                        ab.recv(v, seq(round, i), &mut pa);
                        ba.send(v, seq(round, i), &mut pb);
                    }
                }
            }
        });
        let (mut pa, mut pb, mut r, mut round) = (0, 0, 0u64, 0u64);
        for _ in 0..rounds {
            let mut floor = 0.0;
            for (k, &(v, _)) in VARIANTS.iter().enumerate() {
                round += 1;
                let t = Instant::now();
                ctl.store((k as u64) << 32 | round, Ordering::Release);
                for i in 0..iters {
                    if v == Variant::Raw {
                        raw.0[0].store(2 * r + 1, Ordering::Release);
                        while raw.0[0].load(Ordering::Acquire) != 2 * r + 2 {
                            std::hint::spin_loop();
                        }
                        r += 1;
                    } else {
                        ab.send(v, seq(round, i), &mut pa);
                        ba.recv(v, seq(round, i), &mut pb);
                    }
                }
                let one_way = t.elapsed().as_nanos() as f64 / (2 * iters) as f64;
                if v == Variant::Raw {
                    floor = one_way;
                }
                res[k].push((floor, one_way));
            }
        }
        ctl.store(u64::MAX, Ordering::Release);
    });
    for (lo, hi) in [(0.0, 30.0), (30.0, 100.0), (100.0, f64::INFINITY)] {
        if !res[0].iter().any(|(f, _)| (lo..hi).contains(f)) {
            continue;
        }
        let mut line = format!("raw {lo:.0}-{hi:.0} ns:");
        for (k, &(_, name)) in VARIANTS.iter().enumerate() {
            let mut xs: Vec<f64> = res[k]
                .iter()
                .filter(|(f, _)| (lo..hi).contains(f))
                .map(|x| x.1)
                .collect();
            if xs.is_empty() {
                continue;
            }
            xs.sort_by(f64::total_cmp);
            line += &format!("  {name} {:.1} (n={})", xs[xs.len() / 2], xs.len());
        }
        println!("{line}");
    }
}

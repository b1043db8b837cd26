//! An in-memory simulator that runs one [`Schedule`] per rank with the semantics of the
//! [crate documentation](crate), and checks them:
//!
//! - **matching**: the k-th `Send` from p to q is taken by q's k-th `Recv` from p, and
//!   the lengths must be equal; every message must be received;
//! - **completion**: a `Fence` waits for every receive posted before it (its message
//!   must have been sent) and, with [`SendCompletion::Rendezvous`] (the default), for
//!   every send posted before it (the matching receive must have been posted), so a
//!   schedule that passes cannot deadlock whether the executor buffers sends or not;
//!   when no rank can make progress before all are done, the run fails with
//!   [`ErrorKind::Deadlock`];
//! - **buffer hazards** (with [`Options::strict`], the default): no step reads or writes
//!   a range with a pending receive into it, and none writes a range with a pending send
//!   from it; `Copy`/`Reduce` ranges must not overlap each other;
//! - **shape**: ranges within their buffers, ranks in range and not the rank itself,
//!   `bufs[0]` the size of the input, nothing pending at the end.
//!
//! The order in which ranks take steps is chosen by a seeded pseudo-random generator,
//! so that different seeds explore different interleavings, deterministically.

use crate::{BufId, Schedule, Step};
use std::fmt;

/// When a `Fence` considers a send complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendCompletion {
    /// Immediately (the bytes are buffered).
    Buffered,
    /// Once the receiver has posted the matching receive (the stricter model).
    Rendezvous,
}

/// Simulation options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Seed of the interleaving.
    pub seed: u64,
    /// When sends complete.
    pub sends: SendCompletion,
    /// Check buffer hazards.
    pub strict: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 0,
            sends: SendCompletion::Rendezvous,
            strict: true,
        }
    }
}

impl Options {
    /// The default options with this seed.
    pub fn seed(seed: u64) -> Self {
        Options {
            seed,
            ..Options::default()
        }
    }
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A step or the schedule is ill-formed (range, rank, input size, end state).
    Malformed,
    /// A receive's length differs from its message's.
    LengthMismatch,
    /// No rank can make progress.
    Deadlock,
    /// A step touches a range with a pending operation.
    Hazard,
    /// A message was never received.
    Unreceived,
}

/// A failed simulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// A description, with the rank and step.
    pub message: String,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for SimError {}

fn err<T>(kind: ErrorKind, message: String) -> Result<T, SimError> {
    Err(SimError { kind, message })
}

/// Counts of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages sent.
    pub messages: usize,
    /// Bytes sent.
    pub bytes: usize,
    /// Largest number of fences of one rank.
    pub max_fences: usize,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    peer: usize,
    /// index of this operation among those between the pair in this direction
    k: usize,
    buf: usize,
    off: usize,
    len: usize,
}

struct RankState<'s> {
    sched: &'s Schedule,
    bufs: Vec<Vec<u8>>,
    pc: usize,
    sends: Vec<Pending>,
    recvs: Vec<Pending>,
    fences: usize,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn overlaps(a: (usize, usize, usize), b: &Pending) -> bool {
    a.0 == b.buf && a.2 > 0 && b.len > 0 && a.1 < b.off + b.len && b.off < a.1 + a.2
}

/// The simulated world.
struct World<'s> {
    n: usize,
    ranks: Vec<RankState<'s>>,
    /// `msgs[from * n + to]`: messages in send order (taken when delivered)
    msgs: Vec<Vec<Option<Vec<u8>>>>,
    /// `posted[from * n + to]`: lengths of the receives `to` posted from `from`
    posted: Vec<Vec<usize>>,
    opts: Options,
    stats: Stats,
    op: &'s dyn Fn(&[u8], &mut [u8]),
}

impl World<'_> {
    fn ready(&self, q: usize) -> bool {
        let st = &self.ranks[q];
        match st.sched.steps.get(st.pc) {
            None => false,
            Some(Step::Fence) => {
                st.recvs
                    .iter()
                    .all(|p| self.msgs[p.peer * self.n + q].len() > p.k)
                    && (self.opts.sends == SendCompletion::Buffered
                        || st
                            .sends
                            .iter()
                            .all(|p| self.posted[q * self.n + p.peer].len() > p.k))
            }
            Some(_) => true,
        }
    }

    fn check_range(
        &self,
        q: usize,
        (buf, off, len): (usize, usize, usize),
    ) -> Result<(), SimError> {
        let st = &self.ranks[q];
        match st.bufs.get(buf) {
            Some(b) if off.checked_add(len).is_some_and(|e| e <= b.len()) => Ok(()),
            Some(b) => err(
                ErrorKind::Malformed,
                format!(
                    "rank {q} step {}: range {off}+{len} out of buffer {buf} of {} bytes",
                    st.pc,
                    b.len()
                ),
            ),
            None => err(
                ErrorKind::Malformed,
                format!("rank {q} step {}: no buffer {buf}", st.pc),
            ),
        }
    }

    fn check_peer(&self, q: usize, p: u32) -> Result<usize, SimError> {
        let p = p as usize;
        if p >= self.n || p == q {
            return err(
                ErrorKind::Malformed,
                format!(
                    "rank {q} step {}: peer {p} invalid (size {})",
                    self.ranks[q].pc, self.n
                ),
            );
        }
        Ok(p)
    }

    /// Fails if `range` is read (`write == false`) or written while it has a pending
    /// receive, or written while it has a pending send.
    fn hazard(
        &self,
        q: usize,
        range: (usize, usize, usize),
        write: bool,
        what: &str,
    ) -> Result<(), SimError> {
        if !self.opts.strict {
            return Ok(());
        }
        let st = &self.ranks[q];
        if let Some(p) = st.recvs.iter().find(|p| overlaps(range, p)) {
            return err(
                ErrorKind::Hazard,
                format!(
                    "rank {q} step {}: {what} of buffer {} {}+{} touches a pending receive from {} into {}+{}",
                    st.pc, range.0, range.1, range.2, p.peer, p.off, p.len
                ),
            );
        }
        if write {
            if let Some(p) = st.sends.iter().find(|p| overlaps(range, p)) {
                return err(
                    ErrorKind::Hazard,
                    format!(
                        "rank {q} step {}: {what} writes buffer {} {}+{} while a send to {} from {}+{} is pending",
                        st.pc, range.0, range.1, range.2, p.peer, p.off, p.len
                    ),
                );
            }
        }
        Ok(())
    }

    fn length_check(&self, from: usize, to: usize, k: usize) -> Result<(), SimError> {
        let i = from * self.n + to;
        if let (Some(Some(m)), Some(&l)) = (self.msgs[i].get(k), self.posted[i].get(k)) {
            if m.len() != l {
                return err(
                    ErrorKind::LengthMismatch,
                    format!(
                        "message {k} from rank {from} to rank {to} has {} bytes, the receive {l}",
                        m.len()
                    ),
                );
            }
        }
        Ok(())
    }

    fn step(&mut self, q: usize) -> Result<(), SimError> {
        let n = self.n;
        let st = &self.ranks[q];
        let step = st.sched.steps[st.pc].clone();
        match step {
            Step::Send { to, buf, off, len } => {
                let to = self.check_peer(q, to)?;
                let r = (buf.0 as usize, off, len);
                self.check_range(q, r)?;
                self.hazard(q, r, false, "send")?;
                let data = self.ranks[q].bufs[r.0][off..off + len].to_vec();
                let i = q * n + to;
                let k = self.msgs[i].len();
                self.msgs[i].push(Some(data));
                self.ranks[q].sends.push(Pending {
                    peer: to,
                    k,
                    buf: r.0,
                    off,
                    len,
                });
                self.stats.messages += 1;
                self.stats.bytes += len;
                self.length_check(q, to, k)?;
            }
            Step::Recv {
                from,
                buf,
                off,
                len,
            } => {
                let from = self.check_peer(q, from)?;
                let r = (buf.0 as usize, off, len);
                self.check_range(q, r)?;
                self.hazard(q, r, true, "receive")?;
                let i = from * n + q;
                let k = self.posted[i].len();
                self.posted[i].push(len);
                self.ranks[q].recvs.push(Pending {
                    peer: from,
                    k,
                    buf: r.0,
                    off,
                    len,
                });
                self.length_check(from, q, k)?;
            }
            Step::Fence => {
                let recvs = std::mem::take(&mut self.ranks[q].recvs);
                for p in recvs {
                    self.length_check(p.peer, q, p.k)?;
                    let data = self.msgs[p.peer * n + q][p.k]
                        .take()
                        .expect("message taken twice");
                    self.ranks[q].bufs[p.buf][p.off..p.off + p.len].copy_from_slice(&data);
                }
                self.ranks[q].sends.clear();
                self.ranks[q].fences += 1;
            }
            Step::Copy {
                src,
                src_off,
                dst,
                dst_off,
                len,
            }
            | Step::Reduce {
                src,
                src_off,
                dst,
                dst_off,
                len,
            } => {
                let reduce = matches!(step, Step::Reduce { .. });
                let what = if reduce { "reduce" } else { "copy" };
                let (s, d) = (
                    (src.0 as usize, src_off, len),
                    (dst.0 as usize, dst_off, len),
                );
                self.check_range(q, s)?;
                self.check_range(q, d)?;
                let sp = Pending {
                    peer: 0,
                    k: 0,
                    buf: s.0,
                    off: s.1,
                    len,
                };
                if overlaps(d, &sp) {
                    return err(
                        ErrorKind::Malformed,
                        format!(
                            "rank {q} step {}: {what} source and destination overlap",
                            self.ranks[q].pc
                        ),
                    );
                }
                self.hazard(q, s, false, what)?;
                self.hazard(q, d, true, what)?;
                let data = self.ranks[q].bufs[s.0][s.1..s.1 + len].to_vec();
                let target = &mut self.ranks[q].bufs[d.0][d.1..d.1 + len];
                if reduce {
                    (self.op)(&data, target);
                } else {
                    target.copy_from_slice(&data);
                }
            }
        }
        self.ranks[q].pc += 1;
        Ok(())
    }
}

/// Runs `schedules[q]` on rank q with input `inputs[q]` (copied into `bufs[0]`), using
/// `op(invec, inoutvec)` for `Reduce` steps; returns each rank's result bytes.
pub fn run(
    schedules: &[Schedule],
    inputs: &[Vec<u8>],
    op: &dyn Fn(&[u8], &mut [u8]),
    opts: Options,
) -> Result<Vec<Vec<u8>>, SimError> {
    run_with_stats(schedules, inputs, op, opts).map(|(out, _)| out)
}

/// [`run`], also returning counts of the run.
pub fn run_with_stats(
    schedules: &[Schedule],
    inputs: &[Vec<u8>],
    op: &dyn Fn(&[u8], &mut [u8]),
    opts: Options,
) -> Result<(Vec<Vec<u8>>, Stats), SimError> {
    let n = schedules.len();
    assert_eq!(inputs.len(), n, "one input per schedule");
    let mut ranks = Vec::with_capacity(n);
    for (q, (s, input)) in schedules.iter().zip(inputs).enumerate() {
        if s.bufs.first() != Some(&input.len()) {
            return err(
                ErrorKind::Malformed,
                format!(
                    "rank {q}: bufs[0] is {:?} bytes, the input {}",
                    s.bufs.first(),
                    input.len()
                ),
            );
        }
        let mut bufs: Vec<Vec<u8>> = s.bufs.iter().map(|&l| vec![0; l]).collect();
        bufs[0].copy_from_slice(input);
        ranks.push(RankState {
            sched: s,
            bufs,
            pc: 0,
            sends: vec![],
            recvs: vec![],
            fences: 0,
        });
    }
    let mut w = World {
        n,
        ranks,
        msgs: vec![vec![]; n * n],
        posted: vec![vec![]; n * n],
        opts,
        stats: Stats::default(),
        op,
    };
    w.run()?;
    for (q, st) in w.ranks.iter().enumerate() {
        if !st.sends.is_empty() || !st.recvs.is_empty() {
            return err(
                ErrorKind::Malformed,
                format!("rank {q}: schedule ends with operations pending (no final Fence)"),
            );
        }
    }
    for from in 0..n {
        for to in 0..n {
            let i = from * n + to;
            if w.msgs[i].len() != w.posted[i].len() {
                return err(
                    ErrorKind::Unreceived,
                    format!(
                        "rank {from} sent {} messages to rank {to}, which received {}",
                        w.msgs[i].len(),
                        w.posted[i].len()
                    ),
                );
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut stats = w.stats.clone();
    for (q, st) in w.ranks.iter().enumerate() {
        let (BufId(b), off, len) = st.sched.result;
        w.check_range(q, (b as usize, off, len))?;
        out.push(st.bufs[b as usize][off..off + len].to_vec());
        stats.max_fences = stats.max_fences.max(st.fences);
    }
    Ok((out, stats))
}

impl World<'_> {
    fn run(&mut self) -> Result<(), SimError> {
        let n = self.n;
        let mut rng = Rng(self.opts.seed ^ 0x5eed_c011);
        let mut runnable = Vec::with_capacity(n);
        loop {
            runnable.clear();
            runnable.extend((0..n).filter(|&q| self.ready(q)));
            if runnable.is_empty() {
                break;
            }
            let q = runnable[rng.below(runnable.len())];
            // a burst of a few steps, to vary how far a rank runs ahead
            let burst = 1 + rng.below(4);
            for _ in 0..burst {
                if !self.ready(q) {
                    break;
                }
                self.step(q)?;
            }
        }
        let stuck: Vec<String> = (0..n)
            .filter(|&q| self.ranks[q].pc < self.ranks[q].sched.steps.len())
            .map(|q| {
                let st = &self.ranks[q];
                let recvs: Vec<String> = st
                    .recvs
                    .iter()
                    .filter(|p| self.msgs[p.peer * n + q].len() <= p.k)
                    .map(|p| format!("recv#{} from {}", p.k, p.peer))
                    .collect();
                let sends: Vec<String> = st
                    .sends
                    .iter()
                    .filter(|p| self.posted[q * n + p.peer].len() <= p.k)
                    .map(|p| format!("send#{} to {}", p.k, p.peer))
                    .collect();
                format!(
                    "rank {q} at step {} waits for [{}]",
                    st.pc,
                    [recvs, sends].concat().join(", ")
                )
            })
            .collect();
        if !stuck.is_empty() {
            return err(ErrorKind::Deadlock, stuck.join("; "));
        }
        Ok(())
    }
}

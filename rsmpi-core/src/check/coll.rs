//! The collectives' check (`RSMPI_CHECK=errors`): every rank of a communicator must
//! call the same collective, with the same root and reduction operation, and what
//! rank i sends rank j must match what rank j receives from rank i, in amount and in
//! type signature (MPI-3.1 §5.1: unlike a point-to-point message, a collective's data
//! must fill the receive exactly).
//!
//! ```sh
//! RSMPI_CHECK=errors rsmpirun -n 2 ./app
//! # rsmpi: error at rank 1: MPI_Bcast received 4 × f64 from rank 0 (the root), sent by MPI_Bcast at src/main.rs:9, into 4 × i64: value 0 is f64 but this rank expects i64 (src/main.rs:11)
//! ```
//!
//! Before a collective runs, its ranks exchange what each of them called
//! ([`Coll`]: the collective, root, operation, source line, and per peer the amount and
//! signature sent and received) on the communicator's internal context, and each
//! rank checks what it receives. A different collective, root or operation, or an
//! amount that differs between a sender and its receiver, is reported and ends the
//! job (the collective would otherwise hang or corrupt memory); a signature that
//! differs in type alone is reported and the collective runs, as a point-to-point
//! type mismatch does. Reductions compare every rank's contribution with the root's
//! (rank 0's without a root), so a wrong rank is reported once, by itself.
//!
//! A blocking collective waits for the exchange ([`check`]): it may synchronise, so a
//! correct program cannot rely on it not to (MPI-3.1 §5.14). An immediate one may not
//! wait at its start (a nonblocking collective does not synchronise, and waiting
//! could deadlock a correct program): its exchange starts as a nonblocking
//! collective of its own ([`start`]) and is read when its request completes, or when
//! a wait finds it pending ([`settle`]).

use std::fmt::Write;

use super::errors::{report, At};
use super::types::{self, mismatch, TypeSig};
use super::Call;
use crate::datatype::UserDatatype;
use crate::progress::{self, Done, Key};
use crate::tools;
use crate::topology::SimpleCommunicator;
use crate::trace::format::Op;

/// What a collective sends to, or receives from, one rank: `bytes` bytes of type
/// signature `ty` (`None`: bytes, which match any type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub bytes: u64,
    pub ty: Option<TypeSig>,
}

impl Block {
    /// `count` elements of `dt`.
    pub fn of(dt: &UserDatatype, count: usize) -> Block {
        Block {
            bytes: dt.size() * count as u64,
            ty: TypeSig::of(dt, count),
        }
    }
}

/// What one rank's call sends or receives, per rank of the communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Nothing,
    /// Exactly this, to (or from) every rank.
    Same(Block),
    /// Exactly block i, to (or from) rank i (a partition's blocks).
    Each(Vec<Block>),
    /// One buffer cut into as many equal parts as there are ranks: part i is rank
    /// i's (an all-to-all's or a scatter's send buffer, an in-place all-gather).
    Split(Block),
    /// Room in one buffer, which may be larger than what arrives. `by_rank` (the
    /// receive buffers of gathers and all-to-all): rank i's block lands at i times
    /// this rank's own block, and must be as long as it, as the schedules send
    /// equal blocks. Else (a scatter's root): the root's block lands at the start.
    Room {
        buf: Block,
        by_rank: bool,
    },
}

/// Bytes `off..off + len` of `b`, as a block of their own (its type unknown where a
/// cut falls inside a value).
fn part(b: &Block, off: u64, len: u64) -> Block {
    Block {
        bytes: len,
        ty: b.ty.as_ref().and_then(|t| types::slice(t, off, len)),
    }
}

impl Side {
    /// What this side sends rank `to`, of `size` ranks.
    fn to(&self, to: usize, size: usize) -> Option<Block> {
        match self {
            Side::Nothing | Side::Room { .. } => None,
            Side::Same(b) => Some(b.clone()),
            Side::Each(v) => v.get(to).cloned(),
            Side::Split(b) => {
                let n = b.bytes / size.max(1) as u64;
                Some(part(b, to as u64 * n, n))
            }
        }
    }

    /// What this side receives from rank `from`, of `size` ranks, which sends `sent`
    /// (`own`: what this rank sends itself): the block, and whether it is the room
    /// left in the buffer (`sent` is too long for it).
    fn from(
        &self,
        from: usize,
        size: usize,
        sent: &Block,
        own: Option<&Block>,
    ) -> Option<(Block, bool)> {
        match self {
            Side::Room { buf, by_rank } => {
                let (off, len) = if *by_rank {
                    let n = own?.bytes;
                    (from as u64 * n, n)
                } else {
                    (0, sent.bytes)
                };
                if off + len > buf.bytes {
                    // no room: no type to compare
                    let room = buf.bytes.saturating_sub(off);
                    return Some((
                        Block {
                            bytes: room,
                            ty: None,
                        },
                        true,
                    ));
                }
                Some((part(buf, off, len), false))
            }
            s => s.to(from, size).map(|b| (b, false)),
        }
    }
}

/// One rank's collective call, as the ranks compare them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Coll {
    pub op: Op,
    pub root: Option<u32>,
    /// The reduction operation: a predefined one's number, or [`USER_OP`].
    pub reduce: Option<u8>,
    pub send: Side,
    pub recv: Side,
}

/// A reduction with a user operation (closures cannot be compared across ranks).
pub(crate) const USER_OP: u8 = 0xfe;

impl Coll {
    /// A collective that moves data: `send` to, and `recv` from, each rank.
    pub fn moving(op: Op, root: Option<u32>, send: Side, recv: Side) -> Coll {
        Coll {
            op,
            root,
            reduce: None,
            send,
            recv,
        }
    }

    /// A reduction of `contribution` with operation `reduce`.
    pub fn reduction(op: Op, root: Option<u32>, reduce: u8, contribution: Block) -> Coll {
        Coll {
            op,
            root,
            reduce: Some(reduce),
            send: Side::Same(contribution.clone()),
            recv: Side::Same(contribution),
        }
    }

    fn is_reduction(&self) -> bool {
        self.reduce.is_some()
    }
}

/// A rank's call and where it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Called<'f> {
    coll: Coll,
    file: &'f str,
    line: u32,
}

/// What the check finds at one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Finding {
    /// This rank's call is not rank 0's (another collective, root or operation).
    Call,
    /// Rank `from` sends this rank `sent`, which is not the amount it receives
    /// (`got`; `room`: at most that much).
    Amount {
        from: usize,
        sent: Block,
        got: Block,
        room: bool,
    },
    /// Rank `from` sends this rank data whose signature differs from the receive's at
    /// value `at.0` (`at.1` sent, `at.2` expected).
    Type {
        from: usize,
        sent: Block,
        got: Block,
        at: (u64, u8, u8),
    },
}

/// The ranks whose data rank `r` of `size` receives in `c` (for a reduction: the rank
/// whose contribution it is compared with).
fn senders(c: &Coll, r: usize, size: usize) -> Vec<usize> {
    let root = c.root.map(|x| x as usize);
    if c.is_reduction() {
        let reference = root.unwrap_or(0);
        return if r == reference {
            Vec::new()
        } else {
            vec![reference]
        };
    }
    match (blocking(c.op), root) {
        (Op::Bcast, Some(root)) if r != root => vec![root],
        (Op::Scatter | Op::Scatterv, Some(root)) => vec![root],
        (Op::Gather | Op::Gatherv, Some(root)) if r == root => (0..size).collect(),
        (Op::Allgather | Op::Allgatherv | Op::Alltoall | Op::Alltoallv, _) => (0..size).collect(),
        _ => Vec::new(),
    }
}

/// The blocking collective an immediate one is the nonblocking form of.
fn blocking(op: Op) -> Op {
    match op {
        Op::Ibarrier => Op::Barrier,
        Op::Ibcast => Op::Bcast,
        Op::Ireduce => Op::Reduce,
        Op::Iallreduce => Op::Allreduce,
        Op::Igather => Op::Gather,
        Op::Igatherv => Op::Gatherv,
        Op::Iscatter => Op::Scatter,
        Op::Iscatterv => Op::Scatterv,
        Op::Iallgather => Op::Allgather,
        Op::Iallgatherv => Op::Allgatherv,
        Op::Ialltoall => Op::Alltoall,
        Op::Ialltoallv => Op::Alltoallv,
        Op::IreduceScatterBlock => Op::ReduceScatterBlock,
        Op::Iscan => Op::Scan,
        Op::Iexscan => Op::Exscan,
        op => op,
    }
}

/// Whether two ranks' calls are the same collective (a blocking collective never
/// matches a nonblocking one, MPI-3.1 §5.12).
fn same_call(a: &Coll, b: &Coll) -> bool {
    a.op == b.op && a.root == b.root && a.reduce == b.reduce
}

/// What rank `me` reports, and whether the job must end (the same answer on every
/// rank: a call or an amount that differs anywhere).
fn verdict(all: &[Called<'_>], me: usize) -> (Vec<Finding>, bool) {
    let size = all.len();
    let first = &all[0].coll;
    if all.iter().any(|c| !same_call(&c.coll, first)) {
        let mine = if same_call(&all[me].coll, first) {
            Vec::new()
        } else {
            vec![Finding::Call]
        };
        return (mine, true);
    }
    let mut fatal = false;
    let mut mine = Vec::new();
    for r in 0..size {
        let theirs = &all[r].coll;
        for from in senders(theirs, r, size) {
            let Some(sent) = all[from].coll.send.to(r, size) else {
                continue;
            };
            let own = theirs.send.to(r, size);
            let Some((got, room)) = theirs.recv.from(from, size, &sent, own.as_ref()) else {
                continue;
            };
            if sent.bytes != got.bytes {
                fatal = true;
                if r == me {
                    mine.push(Finding::Amount {
                        from,
                        sent,
                        got,
                        room,
                    });
                }
            } else if r == me {
                if let (Some(st), Some(gt)) = (&sent.ty, &got.ty) {
                    if let Some(at) = mismatch(st, gt) {
                        mine.push(Finding::Type {
                            from,
                            sent,
                            got,
                            at,
                        });
                    }
                }
            }
        }
    }
    (mine, fatal)
}

/// This rank's call of a collective on `c`, with its encoding, if the check is on
/// for it: a user's own call (not one inside communicator management or a tool's
/// traffic), on a live communicator with a root in range (else the call fails as it
/// is).
fn begin(
    c: &SimpleCommunicator,
    coll: impl FnOnce() -> Coll,
) -> Option<(Called<'static>, Call, Vec<u8>)> {
    let call = tools::with(|t| (!t.busy && t.depth == 1).then_some(t.call)).flatten()?;
    c.check_live().ok()?;
    let coll = coll();
    if coll.root.is_some_and(|r| r >= c.size as u32) {
        return None;
    }
    let (file, line) = call.site.map_or(("?", 0), |l| (l.file(), l.line()));
    let mine = Called { coll, file, line };
    let mut bytes = Vec::with_capacity(64 + file.len());
    encode(&mine, &mut bytes);
    Some((mine, call, bytes))
}

/// Every rank's call, read from the exchanged bytes (`None`: some rank's call went
/// unchecked, or did not decode).
fn read<'b>(bytes: &'b [u8], at: &[std::ops::Range<usize>]) -> Option<Vec<Called<'b>>> {
    at.iter().map(|r| decode(bytes.get(r.clone())?)).collect()
}

/// What [`judge`] decided at this rank.
struct Judged {
    /// The job must end (the same answer on every rank).
    fatal: bool,
    /// This rank reported something.
    reported: bool,
}

/// Reports what this rank finds in `all`.
fn judge(c: &SimpleCommunicator, all: &[Called<'_>], call: Call) -> Judged {
    let me = c.rank as usize;
    let (found, fatal) = verdict(all, me);
    // one report per kind: the first rank, and how many more
    for kind in 0..3 {
        let of: Vec<&Finding> = found.iter().filter(|f| f.kind() == kind).collect();
        if let Some(first) = of.first() {
            say(c, all, me, first, of.len() - 1, call.into());
        }
    }
    Judged {
        fatal,
        reported: !found.is_empty(),
    }
}

impl Finding {
    fn kind(&self) -> u8 {
        match self {
            Finding::Call => 0,
            Finding::Amount { .. } => 1,
            Finding::Type { .. } => 2,
        }
    }
}

/// Ends the job after a collective that could not run.
fn end(op: Op) {
    let what = "the ranks' calls of this collective do not match (RSMPI_CHECK=errors; \
                the reports above say how)";
    let _ = progress::try_with(|s| s.fatal(op.name(), &what));
}

/// Checks the blocking collective `coll` this rank is about to run on `c` against
/// the other ranks' calls; reports what it finds, and ends the job where the
/// collective could not run.
#[cold]
#[inline(never)]
pub(crate) fn check(c: &SimpleCommunicator, coll: impl FnOnce() -> Coll) {
    let Some((mine, call, bytes)) = begin(c, coll) else {
        return;
    };
    let Ok((theirs, at)) = crate::collective::exchange(c, bytes) else {
        return;
    };
    let Some(all) = read(&theirs, &at) else {
        return;
    };
    if judge(c, &all, call).fatal {
        // every rank ends, after every rank has reported (the first to end the job
        // would stop the others' reports)
        let _ = crate::collective::exchange(c, Vec::new());
        end(mine.coll.op);
    }
}

/// An immediate collective's check, from its start until its request completes.
pub(crate) struct Pending {
    /// The exchange of the ranks' calls, a nonblocking collective of its own.
    exchange: Key,
    comm: SimpleCommunicator,
    op: Op,
    call: Call,
}

/// Starts the check of the immediate collective `coll` this rank is about to start
/// on `c`: the exchange of the ranks' calls starts first, as a nonblocking all-gather
/// of one slot per rank (a call too long for its slot goes unchecked, on every rank),
/// and is read when the collective's request completes ([`settle`]). Waiting for the
/// other ranks here could deadlock a correct program: a nonblocking collective does
/// not synchronise.
#[cold]
#[inline(never)]
pub(crate) fn start(c: &SimpleCommunicator, coll: impl FnOnce() -> Coll) {
    let Some((mine, call, bytes)) = begin(c, coll) else {
        return;
    };
    let Ok(exchange) = crate::collective::exchange_start(c, &bytes) else {
        return;
    };
    let p = Pending {
        exchange,
        comm: *c,
        op: mine.coll.op,
        call,
    };
    tools::with(|t| {
        if let Some(e) = &mut t.errors {
            e.next_coll = Some(p);
        }
    });
}

/// The immediate collective whose check [`start`] began has the request `user`.
#[cold]
#[inline(never)]
pub(crate) fn started(user: Key) {
    tools::with(|t| {
        if let Some(e) = &mut t.errors {
            if let Some(p) = e.next_coll.take() {
                e.colls.push((user, p));
            }
        }
    });
}

/// The immediate collective with request `user` is being waited for or has
/// completed: its check reads the ranks' calls (waiting for the exchange, which
/// needs only that every rank has started its collective) and reports.
#[cold]
#[inline(never)]
pub(crate) fn settle(user: Key) {
    let Some(Some(p)) = tools::with(|t| {
        let e = t.errors.as_mut()?;
        let i = e.colls.iter().position(|(k, _)| *k == user)?;
        Some(e.colls.swap_remove(i).1)
    }) else {
        return;
    };
    let done = progress::wait(p.exchange);
    let bytes = progress::with(|s| s.owned_done.remove(&p.exchange));
    let (Done::Coll(Ok(())), Some(bytes)) = (done, bytes) else {
        return;
    };
    let at = crate::collective::slots(&bytes, p.comm.size as usize);
    let Some(all) = read(&bytes, &at) else {
        return;
    };
    let judged = judge(&p.comm, &all, p.call);
    if judged.fatal {
        // the other ranks find the same when their own requests complete, maybe much
        // later: a rank with nothing to report lets those that have one report first
        if !judged.reported {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        end(p.op);
    }
}

/// A block as a report shows it: its signature, or its bytes.
fn shown(b: &Block) -> String {
    match &b.ty {
        Some(t) => types::describe(t),
        None => format!("{} bytes", b.bytes),
    }
}

/// The name of a reduction operation.
fn op_name(code: u8) -> &'static str {
    const NAMES: [&str; 10] = [
        "max", "min", "sum", "product", "land", "lor", "lxor", "band", "bor", "bxor",
    ];
    match code {
        USER_OP => "a user operation",
        c => NAMES.get(c as usize).copied().unwrap_or("?"),
    }
}

/// A call as a report names it: `MPI_Reduce (root 1, sum)`.
fn named(c: &Coll) -> String {
    let mut s = c.op.name().to_string();
    let mut extra = Vec::new();
    if let Some(r) = c.root {
        extra.push(format!("root {r}"));
    }
    if let Some(o) = c.reduce {
        extra.push(op_name(o).to_string());
    }
    if !extra.is_empty() {
        let _ = write!(s, " ({})", extra.join(", "));
    }
    s
}

/// Reports `f`, and that `more` other ranks send this rank the same kind of error.
fn say(c: &SimpleCommunicator, all: &[Called<'_>], me: usize, f: &Finding, more: usize, at: At) {
    let also = match more {
        0 => String::new(),
        1 => "; so does 1 more rank".to_string(),
        n => format!("; so do {n} more ranks"),
    };
    use super::json_str;
    let mine = &all[me].coll;
    let name = mine.op.name();
    let ctx = c.ctx;
    let whose = |r: usize| -> String {
        if Some(r as u32) == mine.root {
            format!("rank {r} (the root)")
        } else {
            format!("rank {r}")
        }
    };
    let site = |r: usize| format!("{}:{}", all[r].file, all[r].line);
    let peer_json = |r: usize| {
        format!(
            "{{\"rank\":{r},\"call\":{},\"file\":{},\"line\":{}}}",
            json_str(all[r].coll.op.name()),
            json_str(all[r].file),
            all[r].line
        )
    };
    match *f {
        Finding::Call => report(
            "collective-mismatch",
            at,
            &format!(
                "this rank called {} where rank 0 called {} (at {}): every rank must call \
                 the same collective, with the same root and operation",
                named(mine),
                named(&all[0].coll),
                site(0)
            ),
            &format!(
                ",\"context\":{ctx},\"collective\":{},\"other\":{}",
                json_str(&named(mine)),
                peer_json(0)
            ),
        ),
        Finding::Amount {
            from,
            ref sent,
            ref got,
            room,
        } => {
            let sentence = if mine.is_reduction() {
                format!(
                    "{name}: this rank contributes {} ({} bytes) where {} contributes {} ({} \
                     bytes, at {}): every rank must contribute the same",
                    shown(got),
                    got.bytes,
                    whose(from),
                    shown(sent),
                    sent.bytes,
                    site(from)
                )
            } else if room {
                format!(
                    "{name}: {} sends this rank {} ({} bytes, at {}), more than the {} bytes \
                     left for it in this rank's buffer",
                    whose(from),
                    shown(sent),
                    sent.bytes,
                    site(from),
                    got.bytes
                )
            } else {
                format!(
                    "{name}: {} sends this rank {} ({} bytes, at {}) but this rank receives {} \
                     ({} bytes) from it: a collective's amounts must match exactly",
                    whose(from),
                    shown(sent),
                    sent.bytes,
                    site(from),
                    shown(got),
                    got.bytes
                )
            };
            report(
                "collective-mismatch",
                at,
                &(sentence + &also),
                &format!(
                    ",\"context\":{ctx},\"collective\":{},\"source\":{from},\"more\":{more},\"sent_bytes\":{},\"received_bytes\":{},\"other\":{}",
                    json_str(&named(mine)),
                    sent.bytes,
                    got.bytes,
                    peer_json(from)
                ),
            );
        }
        Finding::Type {
            from,
            ref sent,
            ref got,
            at: (i, a, b),
        } => {
            let sentence = if mine.is_reduction() {
                format!(
                    "{name}: this rank contributes {} where {} contributes {} (at {}): value \
                     {i} is {} here and {} there",
                    shown(got),
                    whose(from),
                    shown(sent),
                    site(from),
                    types::type_name(b),
                    types::type_name(a),
                )
            } else {
                format!(
                    "{name} received {} from {}, sent by {} at {}, into {}: value {i} is {} \
                     but this rank expects {}",
                    shown(sent),
                    whose(from),
                    all[from].coll.op.name(),
                    site(from),
                    shown(got),
                    types::type_name(a),
                    types::type_name(b),
                )
            };
            report(
                "type-mismatch",
                at,
                &(sentence + &also),
                &format!(
                    ",\"context\":{ctx},\"source\":{from},\"more\":{more},\"sent\":{},\"received\":{},\"at\":{i},\"send\":{}",
                    json_str(&shown(sent)),
                    json_str(&shown(got)),
                    peer_json(from)
                ),
            );
        }
    }
}

// ---- the call as the ranks exchange it ---------------------------------------------

fn encode_block(b: &Block, out: &mut Vec<u8>) {
    out.extend_from_slice(&b.bytes.to_le_bytes());
    match &b.ty {
        Some(t) => {
            out.push(1);
            t.encode(out);
        }
        None => out.push(0),
    }
}

fn encode_side(s: &Side, out: &mut Vec<u8>) {
    match s {
        Side::Nothing => out.push(0),
        Side::Same(b) => {
            out.push(1);
            encode_block(b, out);
        }
        Side::Each(v) if v.windows(2).all(|w| w[0] == w[1]) && !v.is_empty() => {
            // the same block for every rank (means the same, travels shorter)
            out.push(1);
            encode_block(&v[0], out);
        }
        Side::Each(v) => {
            out.push(2);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            for b in v {
                encode_block(b, out);
            }
        }
        Side::Split(b) => {
            out.push(3);
            encode_block(b, out);
        }
        Side::Room { buf, by_rank } => {
            out.push(if *by_rank { 4 } else { 5 });
            encode_block(buf, out);
        }
    }
}

fn encode(c: &Called<'_>, out: &mut Vec<u8>) {
    out.push(c.coll.op as u8);
    out.extend_from_slice(&c.coll.root.map_or(-1, |r| r as i64).to_le_bytes());
    out.push(c.coll.reduce.unwrap_or(u8::MAX));
    out.extend_from_slice(&c.line.to_le_bytes());
    out.extend_from_slice(&(c.file.len() as u32).to_le_bytes());
    out.extend_from_slice(c.file.as_bytes());
    encode_side(&c.coll.send, out);
    encode_side(&c.coll.recv, out);
}

/// Reads bytes at `b[*o..]`.
fn take<'b>(b: &'b [u8], o: &mut usize, n: usize) -> Option<&'b [u8]> {
    let s = b.get(*o..*o + n)?;
    *o += n;
    Some(s)
}

fn u32_at(b: &[u8], o: &mut usize) -> Option<u32> {
    Some(u32::from_le_bytes(take(b, o, 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], o: &mut usize) -> Option<u64> {
    Some(u64::from_le_bytes(take(b, o, 8)?.try_into().ok()?))
}

fn decode_block(b: &[u8], o: &mut usize) -> Option<Block> {
    let bytes = u64_at(b, o)?;
    let ty = match take(b, o, 1)?[0] {
        0 => None,
        _ => Some(TypeSig::decode(b, o)?),
    };
    Some(Block { bytes, ty })
}

fn decode_side(b: &[u8], o: &mut usize) -> Option<Side> {
    Some(match take(b, o, 1)?[0] {
        0 => Side::Nothing,
        1 => Side::Same(decode_block(b, o)?),
        3 => Side::Split(decode_block(b, o)?),
        k @ (4 | 5) => Side::Room {
            buf: decode_block(b, o)?,
            by_rank: k == 4,
        },
        _ => {
            let n = u32_at(b, o)? as usize;
            let mut v = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                v.push(decode_block(b, o)?);
            }
            Side::Each(v)
        }
    })
}

fn decode(b: &[u8]) -> Option<Called<'_>> {
    let o = &mut 0;
    let op = Op::from_u8(take(b, o, 1)?[0])?;
    let root = u64_at(b, o)? as i64;
    let reduce = take(b, o, 1)?[0];
    let line = u32_at(b, o)?;
    let flen = u32_at(b, o)? as usize;
    let file = std::str::from_utf8(take(b, o, flen)?).unwrap_or("?");
    let send = decode_side(b, o)?;
    let recv = decode_side(b, o)?;
    Some(Called {
        coll: Coll {
            op,
            root: u32::try_from(root).ok(),
            reduce: (reduce != u8::MAX).then_some(reduce),
            send,
            recv,
        },
        file,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{Equivalence, Prim, UserDatatype};

    fn blk<T: Equivalence>(n: usize) -> Block {
        Block::of(&UserDatatype::of::<T>(), n)
    }

    fn at(coll: Coll) -> Called<'static> {
        Called {
            coll,
            file: "x.rs",
            line: 3,
        }
    }

    fn bcast(root: u32, b: Block) -> Called<'static> {
        at(Coll::moving(
            Op::Bcast,
            Some(root),
            Side::Same(b.clone()),
            Side::Same(b),
        ))
    }

    /// The findings of `me`, as (kind, from) pairs.
    fn found(all: &[Called<'_>], me: usize) -> (Vec<(&'static str, usize)>, bool) {
        let (f, fatal) = verdict(all, me);
        let f = f
            .iter()
            .map(|f| match f {
                Finding::Call => ("call", 0),
                Finding::Amount { from, .. } => ("amount", *from),
                Finding::Type { from, .. } => ("type", *from),
            })
            .collect();
        (f, fatal)
    }

    #[test]
    fn a_broadcast_is_checked_against_its_root() {
        let all = [bcast(0, blk::<f64>(4)), bcast(0, blk::<i64>(4))];
        assert_eq!(found(&all, 0), (vec![], false));
        let (f, fatal) = verdict(&all, 1);
        assert!(!fatal);
        let (f64_, i64_) = (Prim::F64 as u8, Prim::I64 as u8);
        assert!(
            matches!(f[..], [Finding::Type { from: 0, at, .. }] if at == (0, f64_, i64_)),
            "{f:?}"
        );
        // the legal struct case, and bytes, which match anything of the same size
        let pair = UserDatatype::contiguous(2, &UserDatatype::of::<(i32, f64)>());
        let all = [
            bcast(1, Block::of(&pair, 1)),
            bcast(1, blk::<(i32, f64, i32, f64)>(1)),
        ];
        assert_eq!(found(&all, 0), (vec![], false));
        let all = [bcast(0, blk::<u8>(32)), bcast(0, blk::<f64>(4))];
        assert_eq!(found(&all, 1), (vec![], false));
        // another amount: the job ends, on every rank
        let all = [bcast(0, blk::<f64>(4)), bcast(0, blk::<f64>(2))];
        assert_eq!(found(&all, 0), (vec![], true));
        assert_eq!(found(&all, 1), (vec![("amount", 0)], true));
    }

    #[test]
    fn another_collective_root_or_operation_ends_the_job() {
        let b = blk::<f64>(1);
        let red = |root, op| at(Coll::reduction(Op::Reduce, root, op, b.clone()));
        let all = [red(Some(0), 2), red(Some(1), 2), red(Some(0), 2)];
        assert_eq!(found(&all, 1), (vec![("call", 0)], true));
        assert_eq!(found(&all, 2), (vec![], true));
        let all = [red(Some(0), 2), red(Some(0), 0)];
        assert_eq!(found(&all, 1), (vec![("call", 0)], true));
        let all = [red(Some(0), 2), bcast(0, b.clone())];
        assert_eq!(found(&all, 1), (vec![("call", 0)], true));
    }

    #[test]
    fn a_reduction_compares_each_contribution_with_the_roots_once() {
        let red = |b: Block| at(Coll::reduction(Op::Allreduce, None, 2, b));
        let all = [red(blk::<f64>(2)), red(blk::<f64>(2)), red(blk::<i64>(2))];
        assert_eq!(found(&all, 0), (vec![], false));
        assert_eq!(found(&all, 1), (vec![], false));
        assert_eq!(found(&all, 2), (vec![("type", 0)], false));
        let all = [red(blk::<f64>(2)), red(blk::<f64>(3))];
        assert_eq!(found(&all, 1), (vec![("amount", 0)], true));
    }

    #[test]
    fn a_gathers_root_checks_each_ranks_block_in_its_room() {
        let g =
            |send: Block, recv: Side| at(Coll::moving(Op::Gather, Some(0), Side::Same(send), recv));
        let room = |b: Block| Side::Room {
            buf: b,
            by_rank: true,
        };
        // a root buffer with room to spare; rank 1 sends i32 where the root has f32
        let all = [
            g(blk::<f32>(2), room(blk::<f32>(5))),
            g(blk::<i32>(2), Side::Nothing),
        ];
        assert_eq!(found(&all, 0), (vec![("type", 1)], false));
        assert_eq!(found(&all, 1), (vec![], false));
        // (i32, f64) blocks into a buffer of (i32, f64) elements
        let all = [
            g(blk::<(i32, f64)>(1), room(blk::<(i32, f64)>(2))),
            g(blk::<(i32, f64)>(1), Side::Nothing),
        ];
        assert_eq!(found(&all, 0), (vec![], false));
        // rank 1's block does not fit what is left
        let all = [
            g(blk::<f32>(2), room(blk::<f32>(3))),
            g(blk::<f32>(2), Side::Nothing),
        ];
        assert_eq!(found(&all, 0), (vec![("amount", 1)], true));
        // varcount: the root's partition says 3 from rank 1, rank 1 sends 2
        let gv = |send: Block, recv: Side| {
            at(Coll::moving(Op::Gatherv, Some(0), Side::Same(send), recv))
        };
        let all = [
            gv(
                blk::<f32>(1),
                Side::Each(vec![blk::<f32>(1), blk::<f32>(3)]),
            ),
            gv(blk::<f32>(2), Side::Nothing),
        ];
        assert_eq!(found(&all, 0), (vec![("amount", 1)], true));
    }

    #[test]
    fn all_to_all_cuts_the_send_buffer_by_rank() {
        // rank 1 sends (f64, i64) pairs cut in two: rank 0 gets the f64 half
        let a2a = |send: Block, recv: Block| {
            at(Coll::moving(
                Op::Alltoall,
                None,
                Side::Split(send),
                Side::Room {
                    buf: recv,
                    by_rank: true,
                },
            ))
        };
        let all = [
            a2a(blk::<f64>(2), blk::<f64>(2)),
            a2a(blk::<(f64, i64)>(1), blk::<f64>(2)),
        ];
        assert_eq!(found(&all, 0), (vec![], false));
        assert_eq!(found(&all, 1), (vec![("type", 1)], false));
        let v = |s: usize, r: usize| {
            at(Coll::moving(
                Op::Alltoallv,
                None,
                Side::Each(vec![blk::<u64>(s); 2]),
                Side::Each(vec![blk::<u64>(r); 2]),
            ))
        };
        assert_eq!(found(&[v(1, 1), v(1, 1)], 0), (vec![], false));
        assert!(found(&[v(1, 1), v(2, 1)], 0).1);
    }

    #[test]
    fn calls_travel_whole() {
        let dt = UserDatatype::structure(
            &[
                (0, &UserDatatype::of::<i32>()),
                (8, &UserDatatype::of::<f64>()),
            ],
            16,
        );
        let c = Called {
            coll: Coll {
                op: Op::Alltoallv,
                root: None,
                reduce: None,
                send: Side::Each(vec![Block::of(&dt, 3), blk::<u8>(7)]),
                recv: Side::Room {
                    buf: blk::<f64>(2),
                    by_rank: false,
                },
            },
            file: "src/main.rs",
            line: 42,
        };
        let mut b = Vec::new();
        encode(&c, &mut b);
        assert_eq!(decode(&b), Some(c));
        let r = at(Coll::reduction(Op::Reduce, Some(3), USER_OP, blk::<f32>(1)));
        let mut b = Vec::new();
        encode(&r, &mut b);
        assert_eq!(decode(&b), Some(r));
        assert_eq!(decode(&b[..b.len() - 1]), None);
    }
}

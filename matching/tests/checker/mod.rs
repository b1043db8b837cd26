//! An exhaustive explicit-state model checker over the real `matching::Engine`.
//!
//! A *program* gives every rank a list of non-blocking operations (post a receive,
//! start a send, cancel an earlier one). A *world* is the engines of all ranks, the
//! FIFO channels between them, the receive buffers, and the one-sided reads and
//! writes in flight. A step is one of: a rank performs its next operation; a rank
//! processes the head of one incoming channel; a pending read completes; the oldest
//! one-sided write in flight on a channel lands in its receive buffer ("land"); a
//! landed write's completion reaches its sender (`Engine::put_done`, "complete").
//! Every reachable world is explored breadth-first; the engines' own outputs are
//! carried out exactly as a driver would (writes are posted and land later, reads copy
//! the sender's bytes).
//!
//! The transport modelled: writes on one channel (sender -> receiver) land in the
//! order they were posted; a control message on a channel is processed only once
//! every write posted on that channel before the message was queued has landed;
//! writes may overtake earlier control messages; completions reach the sender in any
//! order and arbitrarily late.
//!
//! Properties checked (DESIGN.md §4, `shared/tools/protocol-model/README.md`):
//! * P1 exactly once: no receive completes twice, no message is received twice, a
//!   cancelled send was not received, and at the end every message was received, is
//!   still unexpected at its destination, or was cancelled; payload bytes are exactly
//!   the sender's.
//! * P2 / P3: MPI's non-overtaking rules, at each match and on the final pairing.
//! * P4: the final pairing is one that pure receiver-side matching produces.
//! * P5: a direct write lands only in a receive that is still pending (checked when
//!   it lands).
//! * PUT: no send completes (`SendDone` or `BufferFree`) before its one-sided write
//!   has completed, and `put_done` accepts every completed write.
//! * Liveness: when every outcome of pure receiver-side matching completes every
//!   receive and message, so does every outcome of the protocol; at the end every
//!   one-sided write has landed and completed, and every send whose message was
//!   received has completed.
//! * Synchronous sends complete only after their message matched.
//! * Match order (`Engine::report_matches`, on in every checked engine): numbering
//!   each receive on its channel (sender, receiver, tag) when it is reported matched
//!   (`Output::Matched`) or else when it completes, and counting a withdrawn message
//!   (`Output::Withdrawn`) as numbered, gives every receive the message with that
//!   number on its channel, in its sender's program order: what the tools' pairing
//!   of receives with sends relies on.
//! * No engine reports a protocol error.

#![allow(dead_code)]

use matching::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

pub const CAP: u64 = 8;
pub const SMALL: u64 = 2;
pub const BIG: u64 = 6;
const RECV_BASE: u64 = 0x10_0000;
const SEND_BASE: u64 = 0x20_0000;
const STRIDE: u64 = 0x100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Recv {
        src: Source,
        tag: TagSel,
    },
    Send {
        dst: Rank,
        tag: Tag,
        big: bool,
        sync: bool,
    },
    /// Cancel the n-th receive of this rank.
    CancelRecv(usize),
    /// Cancel the n-th send of this rank.
    CancelSend(usize),
}

#[derive(Clone, Debug)]
pub struct Program {
    pub ranks: Vec<Vec<Op>>,
    pub cfg: Config,
    // derived
    recv_of: Vec<Vec<Option<usize>>>, // [rank][pc] -> global recv index
    send_of: Vec<Vec<Option<usize>>>,
    recvs: Vec<(Rank, Source, TagSel)>,
    sends: Vec<(Rank, Rank, Tag, u64, bool)>, // from, to, tag, len, sync
    local_recv: Vec<Vec<usize>>,              // [rank] -> global recv indices in order
    local_send: Vec<Vec<usize>>,
    chans: Vec<(Rank, Rank, Tag)>, // the channels the sends use
    pos: Vec<u8>,                  // [send] -> its number on its channel
}

impl Program {
    pub fn new(ranks: Vec<Vec<Op>>, cfg: Config) -> Program {
        let mut p = Program {
            ranks,
            cfg,
            recv_of: vec![],
            send_of: vec![],
            recvs: vec![],
            sends: vec![],
            local_recv: vec![],
            local_send: vec![],
            chans: vec![],
            pos: vec![],
        };
        for (r, ops) in p.ranks.iter().enumerate() {
            let mut ro = vec![];
            let mut so = vec![];
            let mut lr = vec![];
            let mut ls = vec![];
            for op in ops {
                match *op {
                    Op::Recv { src, tag } => {
                        ro.push(Some(p.recvs.len()));
                        so.push(None);
                        lr.push(p.recvs.len());
                        p.recvs.push((r as Rank, src, tag));
                    }
                    Op::Send {
                        dst,
                        tag,
                        big,
                        sync,
                    } => {
                        ro.push(None);
                        so.push(Some(p.sends.len()));
                        ls.push(p.sends.len());
                        p.sends
                            .push((r as Rank, dst, tag, if big { BIG } else { SMALL }, sync));
                    }
                    _ => {
                        ro.push(None);
                        so.push(None);
                    }
                }
            }
            p.recv_of.push(ro);
            p.send_of.push(so);
            p.local_recv.push(lr);
            p.local_send.push(ls);
        }
        for g in 0..p.sends.len() {
            let (from, to, tag, _, _) = p.sends[g];
            let c = p.chan((from, to, tag)).unwrap_or_else(|| {
                p.chans.push((from, to, tag));
                p.chans.len() - 1
            });
            let n = (0..g).filter(|&g1| {
                let (f1, t1, tag1, _, _) = p.sends[g1];
                p.chan((f1, t1, tag1)) == Some(c)
            });
            p.pos.push(n.count() as u8);
        }
        p
    }

    /// The index of channel `c` (sender, receiver, tag) among the sends' channels.
    fn chan(&self, c: (Rank, Rank, Tag)) -> Option<usize> {
        self.chans.iter().position(|&x| x == c)
    }

    pub fn describe(&self) -> String {
        let mut out = vec![];
        for (r, ops) in self.ranks.iter().enumerate() {
            let s: Vec<String> = ops
                .iter()
                .map(|op| match op {
                    Op::Recv { src, tag } => format!(
                        "irecv({},{})",
                        match src {
                            Source::Any => "ANY".into(),
                            Source::Rank(x) => x.to_string(),
                        },
                        match tag {
                            TagSel::Any => "ANY".into(),
                            TagSel::Tag(t) => t.to_string(),
                        }
                    ),
                    Op::Send {
                        dst,
                        tag,
                        big,
                        sync,
                    } => format!(
                        "i{}send(->{dst},tag {tag}{})",
                        if *sync { "s" } else { "" },
                        if *big { ",rndv" } else { "" }
                    ),
                    Op::CancelRecv(n) => format!("cancel(recv#{n})"),
                    Op::CancelSend(n) => format!("cancel(send#{n})"),
                })
                .collect();
            out.push(format!("rank {r}: {}", s.join(" ")));
        }
        out.join("; ")
    }

    fn payload(&self, s: usize) -> Vec<u8> {
        (0..self.sends[s].3)
            .map(|b| (s as u8 + 1) ^ (b as u8 * 16))
            .collect()
    }

    fn has_cancel(&self) -> bool {
        self.ranks
            .iter()
            .flatten()
            .any(|op| matches!(op, Op::CancelRecv(_) | Op::CancelSend(_)))
    }

    fn n(&self) -> usize {
        self.ranks.len()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RRes {
    NotPosted,
    Pending,
    /// Matched; its payload is being read.
    Fetching(u8),
    Got(u8),
    Cancelled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SRes {
    NotStarted,
    Pending,
    Sent,
    Cancelled,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PendingGet {
    rank: Rank,
    xfer: XferId,
    from: Rank,
    src: RemoteBuf,
    len: u64,
    into: GetInto,
}

/// A one-sided write posted (`Output::Put`) and not landed yet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InFlight {
    /// Its channel (indexed like `World::chan`).
    c: u8,
    /// The send whose payload it carries.
    g: u8,
    dst: RemoteBuf,
    len: u64,
    /// Control messages queued on the channel before the write was posted and not
    /// processed yet: the message at this position (and every later one) waits for
    /// the write to land.
    ahead: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct World {
    eng: Vec<Engine>,
    chan: Vec<VecDeque<Vec<u8>>>,
    /// Writes in flight, by channel, each channel's oldest first (one list for all
    /// channels: empty, as it mostly is, it costs no allocation when the world is
    /// cloned; sorted, so that equal worlds are equal).
    writes: Vec<InFlight>,
    /// Sends whose write landed but whose completion has not reached the sender.
    landed: u32,
    pc: Vec<u8>,
    rid: Vec<Option<RecvId>>,
    sid: Vec<Option<SendId>>,
    rres: Vec<RRes>,
    sres: Vec<SRes>,
    buf: Vec<Vec<u8>>,
    gets: Vec<PendingGet>,
    /// Sends whose message matched (direct write, or a receive completed with it).
    matched: u32,
    /// Messages numbered so far on each channel (`Program::chans`), and each
    /// receive's number, given when it was reported matched (plus one; 0: none yet).
    nums: Vec<u8>,
    rnum: Vec<u8>,
    /// Numbers of withdrawn messages not yet reached (channel, number), sorted.
    skips: Vec<(u8, u8)>,
}

#[derive(Clone, Copy, Debug)]
enum Act {
    Op(Rank),
    Deliver(Rank, Rank),
    Get(usize),
    /// The oldest write in flight on this channel lands.
    Land(usize),
    /// The completion of send `g`'s landed write reaches its sender.
    Complete(usize),
}

type Viol = (&'static str, String);

struct Step<'a> {
    p: &'a Program,
    w: World,
    viol: Vec<Viol>,
    log: Option<Vec<String>>,
    /// Scenarios of interest this step reached (see `Report::cover`).
    cover: Vec<&'static str>,
}

impl Step<'_> {
    fn new(p: &Program, w: World, log: bool) -> Step<'_> {
        Step {
            p,
            w,
            viol: vec![],
            log: log.then(Vec::new),
            cover: vec![],
        }
    }

    fn v(&mut self, prop: &'static str, text: String) {
        self.viol.push((prop, text));
    }

    /// Whether send `g`'s one-sided write is posted and not yet reported complete.
    fn put_pending(&self, g: usize) -> bool {
        self.w.landed >> g & 1 == 1 || self.w.writes.iter().any(|x| x.g as usize == g)
    }

    /// A send reported completion: its write, if it made one, must have completed.
    fn check_put_completed(&mut self, g: usize, what: &str) {
        if self.put_pending(g) {
            self.v(
                "PUT",
                format!("send#{g} reported {what} before its one-sided write completed"),
            );
        }
    }

    fn recv_idx(&self, rank: Rank, id: RecvId) -> usize {
        *self.p.local_recv[rank as usize]
            .iter()
            .find(|&&g| self.w.rid[g] == Some(id))
            .expect("receive id of this rank")
    }

    fn send_idx(&self, rank: Rank, id: SendId) -> usize {
        *self.p.local_send[rank as usize]
            .iter()
            .find(|&&g| self.w.sid[g] == Some(id))
            .expect("send id of this rank")
    }

    /// Puts a control message on the channel `from` -> `to`: `header`, then the first
    /// `len` bytes of send `g`'s payload if there is one.
    fn carry(&mut self, from: Rank, to: Rank, header: &[u8], payload: Option<(usize, u64)>) {
        let mut bytes = header.to_vec();
        if let Some((g, len)) = payload {
            bytes.extend_from_slice(&self.p.payload(g)[..len as usize]);
            if let Ok((
                wire::Frame {
                    msg: wire::Ctrl::WrittenInline { .. },
                    ..
                },
                _,
            )) = wire::decode(&bytes)
            {
                // matched at the sender: the bytes travel inline
                self.w.matched |= 1 << g;
            }
        }
        let n = self.p.n();
        self.w.chan[from as usize * n + to as usize].push_back(bytes);
    }

    fn drain(&mut self, rank: Rank) {
        while let Some(o) = self.w.eng[rank as usize].poll_output() {
            if let Some(l) = &mut self.log {
                l.push(format!("    rank {rank} -> {o:?}"));
            }
            match o {
                Output::Transmit {
                    to,
                    header,
                    payload,
                } => {
                    let payload = payload.map(|(s, len)| (self.send_idx(rank, s), len));
                    self.carry(rank, to, header.as_bytes(), payload);
                }
                Output::Put { to, send, dst, len } => {
                    // posted: it lands in a later step, before any control message
                    // queued on this channel from now on is processed
                    let g = self.send_idx(rank, send);
                    if self.put_pending(g) {
                        self.v("PUT", format!("send#{g} written twice"));
                    }
                    let c = rank as usize * self.p.n() + to as usize;
                    let ahead = self.w.chan[c].len() as u32;
                    let at = self.w.writes.partition_point(|x| x.c as usize <= c);
                    self.w.writes.insert(
                        at,
                        InFlight {
                            c: c as u8,
                            g: g as u8,
                            dst,
                            len,
                            ahead,
                        },
                    );
                    self.w.matched |= 1 << g;
                }
                Output::Get {
                    xfer,
                    from,
                    src,
                    len,
                    into,
                } => {
                    if let GetInto::Recv(r) = into {
                        let r = self.recv_idx(rank, r);
                        let g = ((src.addr - SEND_BASE) / STRIDE) as u8;
                        if self.w.rres[r] != RRes::Pending {
                            self.v(
                                "P5",
                                format!("read for recv#{r}, which is {:?}", self.w.rres[r]),
                            );
                        }
                        self.w.rres[r] = RRes::Fetching(g);
                        self.w.matched |= 1 << g;
                    }
                    self.w.gets.push(PendingGet {
                        rank,
                        xfer,
                        from,
                        src,
                        len,
                        into,
                    });
                }
                Output::CopyIn { recv, data } => {
                    let r = self.recv_idx(rank, recv);
                    if data.len() as u64 > CAP {
                        self.v(
                            "P1",
                            format!("copy of {} bytes past recv#{r}'s buffer", data.len()),
                        );
                    } else {
                        self.w.buf[r][..data.len()].copy_from_slice(&data);
                    }
                }
                Output::RecvDone { recv, outcome } => {
                    let r = self.recv_idx(rank, recv);
                    self.recv_done(r, outcome);
                }
                Output::SendDone { send, outcome } => {
                    let g = self.send_idx(rank, send);
                    self.check_put_completed(g, "completion");
                    if self.w.sres[g] != SRes::Pending {
                        self.v("P1", format!("send#{g} completed twice"));
                    }
                    self.w.sres[g] = match outcome {
                        SendOutcome::Sent => SRes::Sent,
                        SendOutcome::Cancelled => SRes::Cancelled,
                        SendOutcome::Failed(_) => SRes::Failed,
                    };
                    if outcome == SendOutcome::Cancelled
                        && (self.w.matched >> g & 1 == 1
                            || self.w.rres.contains(&RRes::Got(g as u8)))
                    {
                        self.v(
                            "P1",
                            format!("send#{g} cancelled although its message was received"),
                        );
                    }
                    if outcome == SendOutcome::Sent
                        && self.p.sends[g].4
                        && self.w.matched >> g & 1 == 0
                    {
                        self.v(
                            "SYNC",
                            format!("synchronous send#{g} completed before it matched"),
                        );
                    }
                }
                Output::BufferFree { send } => {
                    let g = self.send_idx(rank, send);
                    self.check_put_completed(g, "its buffer free");
                }
                Output::Matched { recv, source, tag } => {
                    let r = self.recv_idx(rank, recv);
                    match self.number(source, rank, tag) {
                        Some(n) if self.w.rnum[r] == 0 => self.w.rnum[r] = n + 1,
                        _ => self.v(
                            "ORDER",
                            format!("recv#{r} reported matched twice, or off every channel"),
                        ),
                    }
                }
                Output::Withdrawn {
                    source, tag, ahead, ..
                } => match self.p.chan((source, rank, tag)) {
                    // the number `ahead` places after the last numbered, past the
                    // numbers already withdrawn
                    Some(c) => {
                        let (mut n, mut left) = (self.w.nums[c], ahead);
                        loop {
                            if self.w.skips.contains(&(c as u8, n)) {
                                n += 1;
                            } else if left > 0 {
                                left -= 1;
                                n += 1;
                            } else {
                                break;
                            }
                        }
                        self.w.skips.push((c as u8, n));
                        self.w.skips.sort_unstable();
                    }
                    None => self.v(
                        "ORDER",
                        format!("a message withdrawn from {source} on no channel"),
                    ),
                },
            }
        }
    }

    /// The next number on channel (`from`, `to`, `tag`), counted.
    fn number(&mut self, from: Rank, to: Rank, tag: Tag) -> Option<u8> {
        let c = self.p.chan((from, to, tag))?;
        loop {
            let n = self.w.nums[c];
            self.w.nums[c] += 1;
            match self.w.skips.iter().position(|&x| x == (c as u8, n)) {
                Some(i) => {
                    self.w.skips.remove(i);
                }
                None => return Some(n),
            }
        }
    }

    fn recv_done(&mut self, r: usize, outcome: RecvOutcome) {
        if !matches!(self.w.rres[r], RRes::Pending | RRes::Fetching(_)) {
            self.v(
                "P1",
                format!(
                    "recv#{r} completed twice ({:?} then {outcome:?})",
                    self.w.rres[r]
                ),
            );
            return;
        }
        match outcome {
            RecvOutcome::Cancelled => self.w.rres[r] = RRes::Cancelled,
            RecvOutcome::Received {
                source,
                tag,
                len,
                truncated_from,
            } => {
                let first = self.w.buf[r][0];
                let Some(g) = (first as usize)
                    .checked_sub(1)
                    .filter(|&g| g < self.p.sends.len())
                else {
                    self.v(
                        "P1",
                        format!("recv#{r} completed with garbage in its buffer"),
                    );
                    return;
                };
                let (from, to, stag, slen, _) = self.p.sends[g];
                let (rrank, rsrc, rtag) = self.p.recvs[r];
                // match order: its number (given when reported matched, else now) is
                // its message's on the channel
                let n = match self.w.rnum[r] {
                    0 => self.number(source, rrank, tag),
                    k => Some(k - 1),
                };
                if n != Some(self.p.pos[g]) {
                    self.v(
                        "ORDER",
                        format!(
                            "recv#{r} numbered {n:?} on its channel got send#{g}, number {}",
                            self.p.pos[g]
                        ),
                    );
                }
                if from != source
                    || stag != tag
                    || to != rrank
                    || !rsrc.matches_rank(from)
                    || !rtag.matches_tag(tag)
                {
                    self.v(
                        "P1",
                        format!("recv#{r} got send#{g} with a wrong envelope ({source},{tag})"),
                    );
                }
                if len != slen.min(CAP) || truncated_from.is_some() != (slen > CAP) {
                    self.v("P1", format!("recv#{r} reports length {len} for send#{g}"));
                }
                if self.w.buf[r][..len as usize] != self.p.payload(g)[..len as usize] {
                    self.v("P1", format!("recv#{r} holds corrupted bytes of send#{g}"));
                }
                if self.w.rres.contains(&RRes::Got(g as u8)) {
                    self.v("P1", format!("send#{g} received twice"));
                }
                if let RRes::Fetching(x) = self.w.rres[r] {
                    if x as usize != g {
                        self.v(
                            "P1",
                            format!("recv#{r} was reading send#{x} but holds send#{g}"),
                        );
                    }
                }
                // a cancelled send or a staged read (the get protocol's, a lone send's)
                // is invisible to the checker until later, so the on-line forms apply
                // only without them (the final forms below always apply)
                let cfg = &self.p.cfg;
                let stages = cfg.protocol == RecvProtocol::Get
                    || cfg.lone_read_above < cfg.eager_limit
                    || cfg.cross_read_above < cfg.eager_limit
                    || cfg.stream_read_above < cfg.eager_limit;
                let online = !stages && !self.p.has_cancel();
                if self.w.sres[g] == SRes::Cancelled {
                    self.v(
                        "P1",
                        format!("send#{g} received although its cancel succeeded"),
                    );
                }
                // P2 on-line: an earlier message of the same sender that matches r is unreceived
                for &g1 in &self.p.local_send[from as usize] {
                    if g1 >= g {
                        break;
                    }
                    let (_, to1, tag1, _, _) = self.p.sends[g1];
                    if online
                        && to1 == rrank
                        && rtag.matches_tag(tag1)
                        && self.w.matched >> g1 & 1 == 0
                        && self.w.sres[g1] != SRes::Cancelled
                    {
                        self.v("P2", format!("recv#{r} got send#{g} while earlier matching send#{g1} is unreceived"));
                    }
                }
                // P3 on-line: an earlier-posted receive that matches is still pending
                for &r1 in &self.p.local_recv[rrank as usize] {
                    if r1 >= r {
                        break;
                    }
                    let (_, s1, t1) = self.p.recvs[r1];
                    if online
                        && self.w.rres[r1] == RRes::Pending
                        && s1.matches_rank(from)
                        && t1.matches_tag(tag)
                    {
                        self.v(
                            "P3",
                            format!(
                                "recv#{r} got send#{g} while earlier matching recv#{r1} is pending"
                            ),
                        );
                    }
                }
                self.w.rres[r] = RRes::Got(g as u8);
                self.w.matched |= 1 << g;
            }
        }
    }

    /// Copies a delivery's payload `data` into its receive at `rank`, as the driver
    /// does, then applies the completion handed back with it.
    fn delivered(&mut self, rank: Rank, d: Deliver, data: &[u8]) {
        let r = self.recv_idx(rank, d.recv);
        if data.len() as u64 > CAP {
            self.v("P1", "eager copy past the buffer".into());
        } else {
            self.w.buf[r][..data.len()].copy_from_slice(data);
        }
        // a completion handed back with the payload, after the copy
        if let Some(outcome) = d.done {
            self.recv_done(r, outcome);
        }
    }

    fn apply(&mut self, act: Act) -> bool {
        let n = self.p.n();
        match act {
            Act::Op(rank) => {
                let ri = rank as usize;
                let pc = self.w.pc[ri] as usize;
                let Some(&op) = self.p.ranks[ri].get(pc) else {
                    return false;
                };
                self.w.pc[ri] += 1;
                if let Some(l) = &mut self.log {
                    l.push(format!("rank {rank} performs {op:?}"));
                }
                let e = &mut self.w.eng[ri];
                match op {
                    Op::Recv { src, tag } => {
                        let g = self.p.recv_of[ri][pc].unwrap();
                        let buf = RemoteBuf {
                            addr: RECV_BASE + g as u64 * STRIDE,
                            len: CAP,
                            key: 0,
                        };
                        let spec = RecvSpec {
                            source: src,
                            tag,
                            ctx: 0,
                            capacity: CAP,
                            buf: Some(buf),
                        };
                        let id = e.post_recv(spec).expect("valid receive");
                        self.w.rid[g] = Some(id);
                        self.w.rres[g] = RRes::Pending;
                    }
                    Op::Send { dst, tag, sync, .. } => {
                        let g = self.p.send_of[ri][pc].unwrap();
                        let len = self.p.sends[g].3;
                        let buf = RemoteBuf {
                            addr: SEND_BASE + g as u64 * STRIDE,
                            len,
                            key: 0,
                        };
                        let mode = if sync {
                            SendMode::Synchronous
                        } else {
                            SendMode::Standard
                        };
                        let spec = SendSpec {
                            dest: dst,
                            tag,
                            ctx: 0,
                            len,
                            mode,
                            read_advised: true,
                            buf,
                        };
                        self.w.sres[g] = SRes::Pending;
                        // as the driver does: a standard send to itself straight into
                        // a posted receive that takes it, else the fast path when the
                        // send can leave now
                        let mut header = wire::Header::EMPTY;
                        let to_self = match dst == rank {
                            true => e.send_to_self(&spec).expect("valid send"),
                            false => None,
                        };
                        if let Some(d) = to_self {
                            if let Some(l) = &mut self.log {
                                l.push(format!("    rank {rank} -> itself: {d:?}"));
                            }
                            if d.done.is_none() {
                                self.v("SELF", "no completion handed back".into());
                            }
                            let data = self.p.payload(g)[d.range.clone()].to_vec();
                            self.w.sres[g] = SRes::Sent;
                            self.delivered(rank, d, &data);
                        } else if let Some(len) =
                            e.send_now(&spec, &mut header).expect("valid send")
                        {
                            self.carry(rank, dst, header.as_bytes(), Some((g, len)));
                            self.w.sres[g] = SRes::Sent;
                        } else {
                            let id = e.start_send(spec).expect("valid send");
                            self.w.sid[g] = Some(id);
                        }
                    }
                    Op::CancelRecv(n) => {
                        let g = self.p.local_recv[ri][n];
                        if let Some(id) = self.w.rid[g] {
                            let _ = e.cancel_recv(id);
                        }
                    }
                    Op::CancelSend(n) => {
                        let g = self.p.local_send[ri][n];
                        if let Some(id) = self.w.sid[g] {
                            let _ = e.cancel_send(id);
                        }
                    }
                }
                self.drain(rank);
            }
            Act::Deliver(from, to) => {
                let c = from as usize * n + to as usize;
                if !deliverable(&self.w, c) {
                    return false;
                }
                let Some(bytes) = self.w.chan[c].pop_front() else {
                    return false;
                };
                // every write of the channel is behind the head (the oldest is, and
                // later ones were posted after it)
                for x in self.w.writes.iter_mut().filter(|x| x.c as usize == c) {
                    x.ahead = x.ahead.checked_sub(1).expect("write behind the head");
                }
                // an eager send still arriving (only its header there) is handled early
                // exactly when `handle` delivers it, and then to the same effect
                let early = match wire::decode(&bytes) {
                    Ok((
                        wire::Frame {
                            msg:
                                wire::Ctrl::SendReq {
                                    body: wire::Body::Eager,
                                    ..
                                },
                            ..
                        },
                        hl,
                    )) => {
                        let pre = self.w.eng[to as usize].clone();
                        let mut twin = pre.clone();
                        let d = twin.handle_head(from, &bytes[..hl], bytes.len());
                        Some((pre, twin, d))
                    }
                    _ => None,
                };
                let res = self.w.eng[to as usize].handle(from, &bytes);
                if let Some((pre, twin, d)) = early {
                    let same = match &d {
                        Ok(Some(_)) => {
                            res.as_ref().ok() == d.as_ref().ok() && twin == self.w.eng[to as usize]
                        }
                        Ok(None) => twin == pre && !matches!(res, Ok(Some(_))),
                        Err(_) => res.is_err(),
                    };
                    if !same {
                        self.v(
                            "HEAD",
                            format!("rank {to}: handle_head gave {d:?}, handle {res:?}"),
                        );
                    }
                }
                if let Some(l) = &mut self.log {
                    l.push(format!(
                        "rank {to} processes {:?} from {from}",
                        wire::decode(&bytes).map(|f| f.0)
                    ));
                }
                match res {
                    Err(e) => self.v("PROTO", format!("rank {to}: {e}")),
                    Ok(Some(d)) => {
                        let data = &bytes[d.range.clone()];
                        self.delivered(to, d, data);
                    }
                    Ok(None) => {}
                }
                self.drain(to);
            }
            Act::Get(ix) => {
                if ix >= self.w.gets.len() {
                    return false;
                }
                let g = self.w.gets.remove(ix);
                let s = ((g.src.addr - SEND_BASE) / STRIDE) as usize;
                let data = self.p.payload(s)[..g.len as usize].to_vec();
                let staged = match g.into {
                    GetInto::Recv(r) => {
                        let r = self.recv_idx(g.rank, r);
                        if !matches!(self.w.rres[r], RRes::Fetching(_)) {
                            self.v(
                                "P5",
                                format!("read into recv#{r}, which is {:?}", self.w.rres[r]),
                            );
                        }
                        self.w.buf[r][..data.len()].copy_from_slice(&data);
                        None
                    }
                    GetInto::Staging => Some(data),
                };
                if let Some(l) = &mut self.log {
                    l.push(format!("rank {} finishes read {:?}", g.rank, g.xfer));
                }
                self.w.eng[g.rank as usize]
                    .get_done(g.xfer, staged)
                    .expect("known transfer");
                self.drain(g.rank);
            }
            Act::Land(c) => {
                let Some(ix) = self.w.writes.iter().position(|x| x.c as usize == c) else {
                    return false;
                };
                let x = self.w.writes.remove(ix);
                let (from, to) = ((c / n) as Rank, (c % n) as Rank);
                let g = x.g as usize;
                let r = ((x.dst.addr - RECV_BASE) / STRIDE) as usize;
                if let Some(l) = &mut self.log {
                    l.push(format!(
                        "the write of send#{g} (rank {from}) lands in recv#{r} (rank {to})"
                    ));
                }
                self.w.landed |= 1 << g;
                if r >= self.p.recvs.len()
                    || self.p.recvs[r].0 != to
                    || self.w.rres[r] != RRes::Pending
                {
                    self.v(
                        "P5",
                        format!(
                            "direct write of send#{g} lands in recv#{r}, which is {:?}",
                            self.w.rres.get(r)
                        ),
                    );
                } else if x.len > x.dst.len {
                    self.v(
                        "P5",
                        format!(
                            "direct write of {} bytes into a {}-byte buffer",
                            x.len, x.dst.len
                        ),
                    );
                } else {
                    let data = self.p.payload(g);
                    self.w.buf[r][..x.len as usize].copy_from_slice(&data[..x.len as usize]);
                    let k = self.p.local_recv[to as usize]
                        .iter()
                        .position(|&x| x == r)
                        .expect("receive of this rank");
                    let pc = self.w.pc[to as usize] as usize;
                    if self.p.ranks[to as usize][..pc].contains(&Op::CancelRecv(k)) {
                        self.cover.push("write lands in a receive being cancelled");
                    }
                }
            }
            Act::Complete(g) => {
                if self.w.landed >> g & 1 == 0 {
                    return false;
                }
                self.w.landed &= !(1 << g);
                let from = self.p.sends[g].0;
                let to = self.p.sends[g].1 as usize;
                if let Some(l) = &mut self.log {
                    l.push(format!(
                        "rank {from} learns that the write of send#{g} completed"
                    ));
                }
                if self.w.rres.contains(&RRes::Got(g as u8)) {
                    self.cover
                        .push("write completes after its receive completed");
                    let done = self.w.pc[to] as usize == self.p.ranks[to].len()
                        && self.p.local_recv[to]
                            .iter()
                            .all(|&r| matches!(self.w.rres[r], RRes::Got(_) | RRes::Cancelled));
                    if done {
                        self.cover
                            .push("write completes after its receiver completed everything");
                    }
                }
                let id = self.w.sid[g].expect("a send that wrote");
                if let Err(e) = self.w.eng[from as usize].put_done(id) {
                    self.v(
                        "PUT",
                        format!("rank {from}: put_done(send#{g}) failed: {e}"),
                    );
                }
                self.drain(from);
            }
        }
        true
    }
}

/// Whether the head of channel `c` may be processed: every write posted on the
/// channel before it was queued has landed (writes land in order, so the oldest
/// decides).
fn deliverable(w: &World, c: usize) -> bool {
    !w.chan[c].is_empty()
        && w.writes
            .iter()
            .find(|x| x.c as usize == c)
            .is_none_or(|x| x.ahead > 0)
}

trait MatchExt {
    fn matches_rank(self, r: Rank) -> bool;
}
impl MatchExt for Source {
    fn matches_rank(self, r: Rank) -> bool {
        matches!(self, Source::Any) || self == Source::Rank(r)
    }
}
trait TagExt {
    fn matches_tag(self, t: Tag) -> bool;
}
impl TagExt for TagSel {
    fn matches_tag(self, t: Tag) -> bool {
        matches!(self, TagSel::Any) || self == TagSel::Tag(t)
    }
}

fn initial(p: &Program) -> World {
    let n = p.n() as u32;
    World {
        eng: (0..n)
            .map(|r| {
                let mut e = Engine::new(r, n, p.cfg);
                e.report_matches();
                e
            })
            .collect(),
        chan: vec![VecDeque::new(); (n * n) as usize],
        writes: vec![],
        landed: 0,
        pc: vec![0; n as usize],
        rid: vec![None; p.recvs.len()],
        sid: vec![None; p.sends.len()],
        rres: vec![RRes::NotPosted; p.recvs.len()],
        sres: vec![SRes::NotStarted; p.sends.len()],
        buf: vec![vec![0; CAP as usize]; p.recvs.len()],
        gets: vec![],
        matched: 0,
        nums: vec![0; p.chans.len()],
        rnum: vec![0; p.recvs.len()],
        skips: vec![],
    }
}

fn actions(p: &Program, w: &World) -> Vec<Act> {
    let n = p.n();
    let mut a = vec![];
    for r in 0..n {
        if (w.pc[r] as usize) < p.ranks[r].len() {
            a.push(Act::Op(r as Rank));
        }
        for f in 0..n {
            if deliverable(w, f * n + r) {
                a.push(Act::Deliver(f as Rank, r as Rank));
            }
        }
    }
    for i in 0..w.gets.len() {
        a.push(Act::Get(i));
    }
    for c in 0..n * n {
        if w.writes.iter().any(|x| x.c as usize == c) {
            a.push(Act::Land(c));
        }
    }
    for g in 0..p.sends.len() {
        if w.landed >> g & 1 == 1 {
            a.push(Act::Complete(g));
        }
    }
    a
}

// ------------------------------------------------------------------------------------
// The reference: pure receiver-side matching, every interleaving.
// ------------------------------------------------------------------------------------

#[derive(Clone, PartialEq, Eq, Hash)]
struct Pure {
    pc: Vec<u8>,
    rres: Vec<RRes>,
    posted: Vec<Vec<usize>>,            // per rank, posting order
    umq: Vec<Vec<usize>>,               // per rank, arrival order (send indices)
    chan: Vec<VecDeque<(bool, usize)>>, // (is_cancel, send idx)
    cancelled: u32,
}

/// Final outcome: receive results and the set of cancelled sends.
pub type Outcome = (Vec<RRes>, u32);

fn pure_outcomes(p: &Program) -> HashSet<Outcome> {
    let n = p.n();
    let init = Pure {
        pc: vec![0; n],
        rres: vec![RRes::NotPosted; p.recvs.len()],
        posted: vec![vec![]; n],
        umq: vec![vec![]; n],
        chan: vec![VecDeque::new(); n * n],
        cancelled: 0,
    };
    let mut seen = HashSet::new();
    let mut stack = vec![init.clone()];
    seen.insert(init);
    let mut outs = HashSet::new();
    let mt = |p: &Program, r: usize, g: usize| {
        let (_, src, tag) = p.recvs[r];
        let (from, _, stag, _, _) = p.sends[g];
        src.matches_rank(from) && tag.matches_tag(stag)
    };
    while let Some(st) = stack.pop() {
        let mut term = true;
        for rank in 0..n {
            let pc = st.pc[rank] as usize;
            if pc < p.ranks[rank].len() {
                term = false;
                let mut s = st.clone();
                s.pc[rank] += 1;
                match p.ranks[rank][pc] {
                    Op::Recv { .. } => {
                        let r = p.recv_of[rank][pc].unwrap();
                        if let Some(ix) = s.umq[rank].iter().position(|&g| mt(p, r, g)) {
                            let g = s.umq[rank].remove(ix);
                            s.rres[r] = RRes::Got(g as u8);
                        } else {
                            s.rres[r] = RRes::Pending;
                            s.posted[rank].push(r);
                        }
                    }
                    Op::Send { dst, .. } => {
                        let g = p.send_of[rank][pc].unwrap();
                        s.chan[rank * n + dst as usize].push_back((false, g));
                    }
                    Op::CancelRecv(k) => {
                        let r = p.local_recv[rank][k];
                        if s.rres[r] == RRes::Pending {
                            s.rres[r] = RRes::Cancelled;
                            s.posted[rank].retain(|&x| x != r);
                        }
                    }
                    Op::CancelSend(k) => {
                        // the send may already have completed locally (an eager send
                        // does as soon as it is out), and then the cancel does nothing:
                        // explore both
                        let mut s2 = s.clone();
                        if seen.insert(s2.clone()) {
                            stack.push(s2.clone());
                        }
                        let g = p.local_send[rank][k];
                        let dst = p.sends[g].1 as usize;
                        s2.chan[rank * n + dst].push_back((true, g));
                        s = s2;
                    }
                }
                if seen.insert(s.clone()) {
                    stack.push(s);
                }
            }
            for f in 0..n {
                let c = f * n + rank;
                if let Some(&(cancel, g)) = st.chan[c].front() {
                    term = false;
                    let mut s = st.clone();
                    s.chan[c].pop_front();
                    if cancel {
                        if let Some(ix) = s.umq[rank].iter().position(|&x| x == g) {
                            s.umq[rank].remove(ix);
                            s.cancelled |= 1 << g;
                        }
                    } else if let Some(ix) = s.posted[rank].iter().position(|&r| mt(p, r, g)) {
                        let r = s.posted[rank].remove(ix);
                        s.rres[r] = RRes::Got(g as u8);
                    } else {
                        s.umq[rank].push(g);
                    }
                    if seen.insert(s.clone()) {
                        stack.push(s);
                    }
                }
            }
        }
        if term {
            outs.insert((st.rres.clone(), st.cancelled));
        }
    }
    outs
}

fn complete(p: &Program, o: &Outcome) -> bool {
    let got: u32 =
        o.0.iter()
            .filter_map(|x| {
                if let RRes::Got(g) = x {
                    Some(1u32 << g)
                } else {
                    None
                }
            })
            .sum();
    o.0.iter()
        .all(|x| matches!(x, RRes::Got(_) | RRes::Cancelled))
        && (0..p.sends.len()).all(|g| (got | o.1) >> g & 1 == 1)
}

// ------------------------------------------------------------------------------------
// Exploration
// ------------------------------------------------------------------------------------

#[derive(Default, Debug)]
pub struct Report {
    pub programs: u64,
    pub states: u64,
    /// property -> (failing programs, first example)
    pub failures: HashMap<&'static str, (u64, String)>,
    /// Scenario -> how many explored steps reached it (to show that programs meant to
    /// exercise a scenario do).
    pub cover: BTreeMap<&'static str, u64>,
}

impl Report {
    pub fn merge(&mut self, o: Report) {
        self.programs += o.programs;
        self.states += o.states;
        for (k, (n, ex)) in o.failures {
            let e = self.failures.entry(k).or_insert((0, ex));
            e.0 += n;
        }
        for (k, n) in o.cover {
            *self.cover.entry(k).or_default() += n;
        }
    }
    pub fn summary(&self) -> String {
        let mut props: Vec<_> = self
            .failures
            .iter()
            .map(|(k, v)| format!("{k}: {} programs", v.0))
            .collect();
        props.sort();
        format!(
            "{} programs, {} distinct states, violations: [{}]",
            self.programs,
            self.states,
            props.join(", ")
        )
    }
}

fn fingerprint(w: &World) -> u128 {
    let mut h1 = std::collections::hash_map::DefaultHasher::new();
    w.hash(&mut h1);
    let mut h2 = rustc_hash_like(0x9e37_79b9_7f4a_7c15);
    w.hash(&mut h2);
    (h1.finish() as u128) << 64 | h2.finish() as u128
}

/// A second, independent hasher (FNV-1a) so that fingerprints are 128 bits.
struct Fnv(u64);
fn rustc_hash_like(seed: u64) -> Fnv {
    Fnv(0xcbf2_9ce4_8422_2325 ^ seed)
}
impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// What exploring one program found.
pub struct Checked {
    pub states: u64,
    /// Violations, with a trace of the first one per property.
    pub found: Vec<(&'static str, String)>,
    /// Scenario -> explored steps that reached it.
    pub cover: BTreeMap<&'static str, u64>,
}

/// Explores every interleaving of one program.
pub fn check_program(p: &Program) -> Checked {
    let pure = pure_outcomes(p);
    let pure_complete = pure.iter().all(|o| complete(p, o));
    let init = initial(p);
    let mut seen: HashMap<u128, Option<(u128, usize)>> = HashMap::new();
    let mut q = VecDeque::new();
    let f0 = fingerprint(&init);
    seen.insert(f0, None);
    q.push_back((f0, init));
    let mut found: Vec<(&'static str, String)> = vec![];
    let mut cover: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut outs: BTreeSet<String> = BTreeSet::new();
    let record = |found: &mut Vec<(&'static str, String)>, prop: &'static str, text: String| {
        if !found.iter().any(|(p, _)| *p == prop) {
            found.push((prop, text));
        }
    };
    while let Some((fp, w)) = q.pop_front() {
        let acts = actions(p, &w);
        if acts.is_empty() {
            // terminal
            let o = outcome_of(&w);
            for (prop, text) in final_checks(p, &w, &o, Some(&pure), pure_complete) {
                if outs.insert(format!("{prop}{text}")) {
                    record(
                        &mut found,
                        prop,
                        format!("{text}\n  program: {}", p.describe()),
                    );
                }
            }
            continue;
        }
        for (ai, act) in acts.iter().enumerate() {
            let mut st = Step::new(p, w.clone(), false);
            st.apply(*act);
            for c in st.cover.drain(..) {
                *cover.entry(c).or_default() += 1;
            }
            if !st.viol.is_empty() {
                let trace = replay_trace(p, &seen, fp, ai);
                for (prop, text) in st.viol {
                    record(
                        &mut found,
                        prop,
                        format!("{text}\n  program: {}\n{trace}", p.describe()),
                    );
                }
                continue;
            }
            let f = fingerprint(&st.w);
            if let std::collections::hash_map::Entry::Vacant(e) = seen.entry(f) {
                e.insert(Some((fp, ai)));
                if found.is_empty() {
                    q.push_back((f, st.w));
                }
            }
        }
        if !found.is_empty() {
            break;
        }
    }
    Checked {
        states: seen.len() as u64,
        found,
        cover,
    }
}

/// Rebuilds the shortest path to `w` and renders it with the failing step.
fn replay_trace(
    p: &Program,
    seen: &HashMap<u128, Option<(u128, usize)>>,
    fp: u128,
    last: usize,
) -> String {
    let mut path = vec![last];
    let mut cur = fp;
    while let Some(Some((prev, a))) = seen.get(&cur) {
        path.push(*a);
        cur = *prev;
    }
    path.reverse();
    render_path(p, &path)
}

/// The final pairing of a terminal world and its set of cancelled sends.
fn outcome_of(w: &World) -> Outcome {
    let cancelled = w
        .sres
        .iter()
        .enumerate()
        .filter(|(_, s)| **s == SRes::Cancelled);
    (w.rres.clone(), cancelled.map(|(g, _)| 1u32 << g).sum())
}

fn final_checks(
    p: &Program,
    w: &World,
    o: &Outcome,
    pure: Option<&HashSet<Outcome>>,
    pure_complete: bool,
) -> Vec<Viol> {
    let mut v = vec![];
    let mut recv_of = vec![None; p.sends.len()];
    for (r, x) in w.rres.iter().enumerate() {
        if let RRes::Got(g) = x {
            recv_of[*g as usize] = Some(r);
        }
    }
    // P1: every message received, cancelled, or still unexpected at its destination
    let mut unexpected = vec![0usize; p.n()];
    for g in 0..p.sends.len() {
        let cancelled = w.sres[g] == SRes::Cancelled;
        match (recv_of[g], cancelled) {
            (Some(_), true) => v.push(("P1", format!("send#{g} both received and cancelled"))),
            (None, false) => unexpected[p.sends[g].1 as usize] += 1,
            _ => {}
        }
        if w.sres[g] == SRes::Sent && p.sends[g].4 && recv_of[g].is_none() {
            v.push((
                "SYNC",
                format!("synchronous send#{g} completed but never received"),
            ));
        }
    }
    for (r, e) in w.eng.iter().enumerate() {
        if e.queue_lengths().1 != unexpected[r] {
            v.push((
                "P1",
                format!(
                    "rank {r} holds {} unexpected messages, {} expected",
                    e.queue_lengths().1,
                    unexpected[r]
                ),
            ));
        }
    }
    // liveness of one-sided writes and of sends
    for x in &w.writes {
        v.push((
            "LIVE",
            format!("the write of send#{} never landed (channel {})", x.g, x.c),
        ));
    }
    for (g, (r, sres)) in recv_of.iter().zip(&w.sres).enumerate() {
        if w.landed >> g & 1 == 1 {
            v.push((
                "LIVE",
                format!("the completion of send#{g}'s write never reached its sender"),
            ));
        }
        if r.is_some() && matches!(sres, SRes::Pending | SRes::NotStarted) {
            v.push(("LIVE", format!("send#{g} was received but never completed")));
        }
    }
    // liveness
    if pure_complete && !complete(p, o) {
        v.push((
            "LIVE",
            format!(
                "stuck although receiver-side matching always completes: {:?}",
                o.0
            ),
        ));
    }
    // P2 final: two messages of one sender that both match a receive
    for (g1, &(f1, t1, tag1, _, _)) in p.sends.iter().enumerate() {
        for (g2, &(f2, t2, _, _, _)) in p.sends.iter().enumerate().skip(g1 + 1) {
            if f1 != f2 || t1 != t2 {
                continue;
            }
            let Some(r2) = recv_of[g2] else { continue };
            let (_, s, t) = p.recvs[r2];
            if !(s.matches_rank(f1) && t.matches_tag(tag1)) || w.sres[g1] == SRes::Cancelled {
                continue;
            }
            match recv_of[g1] {
                None => v.push((
                    "P2",
                    format!("send#{g1} unreceived but later send#{g2} went to recv#{r2}"),
                )),
                Some(r1) if r1 > r2 => v.push((
                    "P2",
                    format!("send#{g1}->recv#{r1} but later send#{g2}->earlier recv#{r2}"),
                )),
                _ => {}
            }
        }
    }
    // P3 final: an earlier-posted receive that matches a message either got an earlier
    // message of that sender or a different sender's
    for (r2, x) in w.rres.iter().enumerate() {
        let RRes::Got(g) = *x else { continue };
        let (from, _, tag, _, _) = p.sends[g as usize];
        let rank = p.recvs[r2].0;
        for &r1 in &p.local_recv[rank as usize] {
            if r1 >= r2 {
                break;
            }
            let (_, s1, t1) = p.recvs[r1];
            if !(s1.matches_rank(from) && t1.matches_tag(tag)) {
                continue;
            }
            match w.rres[r1] {
                RRes::Got(g1) => {
                    if p.sends[g1 as usize].0 == from && g1 > g {
                        v.push(("P3", format!("recv#{r2} got send#{g} while earlier recv#{r1} got later send#{g1}")));
                    }
                }
                RRes::Cancelled => {}
                other => v.push((
                    "P3",
                    format!("recv#{r2} got send#{g} while earlier recv#{r1} is {other:?}"),
                )),
            }
        }
    }
    // P4
    if pure.is_some_and(|pure| !pure.contains(o)) {
        v.push((
            "P4",
            format!(
                "outcome {:?} (cancelled sends {:b}) is not one receiver-side matching produces",
                o.0, o.1
            ),
        ));
    }
    v
}

/// Random walks through the interleavings of a program too large to explore
/// exhaustively: every step and the end state are checked as in `check_program`,
/// except the comparison with pure receiver-side matching (P4, liveness), whose
/// reference explorer is exponential. Returns the first violation with its trace.
pub fn random_walks(p: &Program, walks: u32, seed: u64) -> Option<String> {
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..walks {
        let mut w = initial(p);
        let mut path = vec![];
        loop {
            let acts = actions(p, &w);
            if acts.is_empty() {
                let o = outcome_of(&w);
                if let Some((prop, text)) = final_checks(p, &w, &o, None, false).into_iter().next()
                {
                    return Some(format!("{prop}: {text}\n  program: {}", p.describe()));
                }
                break;
            }
            let ai = (next() % acts.len() as u64) as usize;
            let mut st = Step::new(p, w, false);
            st.apply(acts[ai]);
            path.push(ai);
            if let Some((prop, text)) = st.viol.first() {
                let trace = render_path(p, &path);
                return Some(format!(
                    "{prop}: {text}\n  program: {}\n{trace}",
                    p.describe()
                ));
            }
            w = st.w;
        }
    }
    None
}

/// Replays `path` from the initial world, logging every step and its violations.
fn render_path(p: &Program, path: &[usize]) -> String {
    let mut w = initial(p);
    let mut lines = vec![];
    for (n, &ai) in path.iter().enumerate() {
        let act = actions(p, &w)[ai];
        let mut st = Step::new(p, w, true);
        st.apply(act);
        lines.push(format!(
            "  {:3}. {}",
            n + 1,
            st.log.take().unwrap().join("\n")
        ));
        for (prop, t) in &st.viol {
            lines.push(format!("      *** {prop}: {t}"));
        }
        w = st.w;
    }
    lines.join("\n")
}

/// Checks many programs; collects the first trace per property.
pub fn check_all(programs: impl Iterator<Item = Program>) -> Report {
    let mut rep = Report::default();
    for p in programs {
        let Checked {
            states,
            found,
            cover,
        } = check_program(&p);
        rep.programs += 1;
        rep.states += states;
        for (prop, text) in found {
            let e = rep.failures.entry(prop).or_insert((0, text));
            e.0 += 1;
        }
        for (c, n) in cover {
            *rep.cover.entry(c).or_default() += n;
        }
    }
    rep
}

/// Runs `check_all` on two threads (the machine has two cores).
pub fn check_parallel(programs: Vec<Program>) -> Report {
    let mid = programs.len() / 2;
    let (a, b) = programs.split_at(mid);
    std::thread::scope(|s| {
        let h = s.spawn(|| check_all(a.iter().cloned()));
        let mut r = check_all(b.iter().cloned());
        r.merge(h.join().unwrap());
        r
    })
}

// ------------------------------------------------------------------------------------
// Program enumeration
// ------------------------------------------------------------------------------------

pub fn seqs<T: Clone>(alpha: &[T], lo: usize, hi: usize) -> Vec<Vec<T>> {
    let mut out = vec![];
    let mut cur: Vec<Vec<T>> = vec![vec![]];
    for n in 0..=hi {
        if n >= lo {
            out.extend(cur.iter().cloned());
        }
        let mut next = vec![];
        for c in &cur {
            for a in alpha {
                let mut d = c.clone();
                d.push(a.clone());
                next.push(d);
            }
        }
        cur = next;
    }
    out
}

/// Whether some assignment receives every message (so that liveness is interesting).
pub fn saturating(recvs: &[(Source, TagSel)], sends: &[(Rank, Tag)]) -> bool {
    fn go(
        i: usize,
        used: &mut Vec<bool>,
        recvs: &[(Source, TagSel)],
        sends: &[(Rank, Tag)],
    ) -> bool {
        if i == sends.len() {
            return true;
        }
        for r in 0..recvs.len() {
            if !used[r] && recvs[r].0.matches_rank(sends[i].0) && recvs[r].1.matches_tag(sends[i].1)
            {
                used[r] = true;
                if go(i + 1, used, recvs, sends) {
                    return true;
                }
                used[r] = false;
            }
        }
        false
    }
    sends.len() <= recvs.len() && go(0, &mut vec![false; recvs.len()], recvs, sends)
}

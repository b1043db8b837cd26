//! Deadlock detection (`RSMPI_CHECK=deadlock`), after the correctness-checking model
//! paper's wait-for chase, made distributed (edge chasing, no central analyser).
//!
//! A rank blocked in a wait (a blocking receive or send, `wait` on a request) waits
//! for one rank: the source of a receive that names it, the destination of a send.
//! Once blocked for `RSMPI_CHECK_TIMEOUT` seconds (default 1), it sends a *probe*
//! along that edge on a private communicator. A blocked rank that receives a probe
//! adds itself and forwards it along its own edge; a rank that is not in MPI does not
//! read it. A probe that comes back to the rank that sent it, still blocked in the
//! same wait, has found a cycle: after a second round confirms it (every rank of the
//! cycle still blocked), the rank reports the cycle — each rank, its call and source
//! line, the rank it waits for — as a sentence and a JSON line, and ends the job.
//!
//! A wait that has gone on for `RSMPI_CHECK_HANG` seconds (default 10x the timeout)
//! without a cycle is reported once as a hang (the rank waited for is computing, gone,
//! or waiting in a way the detector does not follow).
//!
//! `RSMPI_CHECK_SYNC=1` runs standard sends as synchronous sends, so that a program
//! that relies on MPI buffering its sends (a potential deadlock, which MPI allows to
//! hang) deadlocks for real and is reported.
//!
//! Followed: blocking point-to-point calls and `wait` (including the waits inside
//! `sendrecv`, `wait_all`), and blocking collectives, which wait for the rank whose
//! message their schedule needs next (so a rank in `MPI_Barrier` and one in
//! `MPI_Recv` from it are a cycle).
//!
//! A wildcard-source receive waits for *any* rank of its communicator: an OR, not
//! one edge. A rank blocked in one asks every rank it waits for what it waits for
//! (a *query*); each blocked rank answers with its own wait, and the asker queries
//! the ranks those waits name in turn. When every rank so reached has answered, and
//! a second round finds each in the same wait, no message can ever come: the rank
//! reports them all (a knot, after Chandy, Misra and Haas's OR model) and ends the
//! job. A rank that is computing never answers, so a slow peer stops the search.
//!
//! `wait_any` and `wait_some` wait for any of their requests, and so for any of the
//! ranks those name: an OR like a wildcard receive's, searched the same way (a set of
//! requests that all name one rank is one edge to it). A blocking probe waits like a
//! receive from its source: one edge, or an OR over the communicator for
//! `ANY_SOURCE`. A wait on a nonblocking collective's request waits, like a blocking
//! collective, for the rank whose message its schedule needs next. A wait whose
//! requests include one the detector cannot follow (a generalized request, of which
//! rsmpi has none yet) would be reported only as a hang.

use std::time::{Duration, Instant};

use matching::{RecvId, SendId, Source as Src};
use rustc_hash::FxHashMap as HashMap;

use super::Call;
use crate::point_to_point::LibTraffic;
use crate::progress::{self, Key};
use crate::tools;
use crate::topology::SimpleCommunicator;
use crate::trace::format::Op;
use crate::traits::*;

const PROBE_TAG: i32 = 1;
/// A wildcard waiter's query, and the answers to it.
const QUERY_TAG: i32 = 2;
const ANSWER_TAG: i32 = 3;

/// `Hop::waits_for` of a rank waiting for any rank.
const ANY: u32 = u32::MAX;

/// One rank's deadlock detector.
pub(crate) struct Deadlock {
    me: u32,
    tool: SimpleCommunicator,
    timeout: Duration,
    hang: Duration,
    pub sync_sends: bool,
    /// Whom each pending receive and send waits for, and the call that started it
    /// (a receive from any source: `Err(context)`).
    recvs: HashMap<RecvId, (Result<u32, u32>, Call)>,
    sends: HashMap<SendId, (u32, Call)>,
    /// The wait in progress.
    blocked: Option<Blocked>,
    blocks: u64,
    /// The cycle the first round of this rank's probe found; the second must repeat it.
    first_round: Vec<Hop>,
    /// This rank's search for a knot, while it waits for any rank.
    knot: Option<Knot>,
}

/// A wildcard waiter's search: the ranks asked, the answers (each rank's wait and
/// the ranks it waits for), and the first round's answers once it is complete.
#[derive(Debug, Default)]
struct Knot {
    block: u64,
    round: u8,
    asked: Vec<u32>,
    answers: Vec<(Hop, Vec<u32>)>,
    first: Vec<Hop>,
}

/// The ranks a rank waits for any of: each a world rank (`Ok`), or every rank of the
/// communicator of context `Err(ctx)` (a wildcard receive or probe).
type AnyOf = Vec<Result<u32, u32>>;

/// What a blocked rank waits in: one request, any of several (`wait_any`,
/// `wait_some`), or a blocking probe (on context `ctx`, from `source`, a world rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    Key(Key),
    AnyOf(Vec<Key>),
    Probe { ctx: u32, source: Src },
}

#[derive(Clone, Debug)]
struct Blocked {
    wait: Wait,
    id: u64,
    since: Instant,
    /// The one rank waited for (`None`: none known, or any of several).
    waits_for: Option<u32>,
    /// Waiting for any of several ranks.
    any_of: Option<AnyOf>,
    call: Call,
    probed: bool,
    hang_reported: bool,
}

/// One rank of a probe's path: it is blocked in wait `block`, in `call`, waiting for
/// `waits_for`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hop {
    rank: u32,
    block: u64,
    waits_for: u32,
    op: String,
    file: String,
    line: u32,
}

impl Deadlock {
    pub fn new(
        me: u32,
        tool: SimpleCommunicator,
        timeout: Duration,
        hang: Duration,
        sync_sends: bool,
    ) -> Deadlock {
        Deadlock {
            me,
            tool,
            timeout,
            hang,
            sync_sends,
            recvs: HashMap::default(),
            sends: HashMap::default(),
            blocked: None,
            blocks: 0,
            first_round: Vec::new(),
            knot: None,
        }
    }

    pub fn posted(&mut self, id: RecvId, ctx: u32, source: Src, call: Call) {
        let from = match source {
            Src::Rank(r) => Ok(r),
            Src::Any => Err(ctx),
        };
        self.recvs.insert(id, (from, call));
    }

    pub fn received(&mut self, id: RecvId) {
        self.recvs.remove(&id);
    }

    pub fn send_started(&mut self, id: SendId, dest: u32, call: Call) {
        self.sends.insert(id, (dest, call));
    }

    pub fn send_done(&mut self, id: SendId) {
        self.sends.remove(&id);
    }

    /// Whom the request `key` waits for: a world rank, or (`Err(ctx)`) any rank of
    /// a communicator; `None` if the detector cannot tell.
    fn edge(&self, key: Key) -> Option<Result<u32, u32>> {
        match key {
            // a receive matched by a probe has no source to follow (`u32::MAX`)
            Key::Recv(r) => self
                .recvs
                .get(&r)
                .map(|x| x.0)
                .filter(|e| *e != Ok(u32::MAX)),
            Key::Send(s) => self.sends.get(&s).map(|x| Ok(x.0)),
            Key::Null(_) | Key::Sent(_) | Key::Coll(_) => None,
        }
    }

    /// What a wait waits for: (the one rank, any of these, the call to name).
    fn resolve(&self, wait: &Wait, call: Call) -> (Option<u32>, Option<AnyOf>, Call) {
        let (edges, call) = match wait {
            Wait::Key(k) => {
                let call = match *k {
                    Key::Recv(r) => self.recvs.get(&r).map_or(call, |x| x.1),
                    Key::Send(s) => self.sends.get(&s).map_or(call, |x| x.1),
                    _ => call,
                };
                (self.edge(*k).map(|e| vec![e]), call)
            }
            Wait::AnyOf(keys) => (keys.iter().map(|k| self.edge(*k)).collect(), call),
            Wait::Probe { ctx, source } => (
                Some(vec![match source {
                    Src::Rank(r) => Ok(*r),
                    Src::Any => Err(*ctx),
                }]),
                call,
            ),
        };
        let Some(mut edges) = edges else {
            return (None, None, call);
        };
        edges.sort_unstable();
        edges.dedup();
        match edges[..] {
            [] => (None, None, call),
            [Ok(r)] => (Some(r), None, call),
            _ => (None, Some(edges), call),
        }
    }

    /// This rank's hop while blocked in `b` (`waits_for` [`ANY`] for a wildcard).
    fn hop(&self, b: &Blocked, waits_for: u32) -> Hop {
        let (file, line) = b.call.site.map_or(("?", 0), |l| (l.file(), l.line()));
        Hop {
            rank: self.me,
            block: b.id,
            waits_for,
            op: b.call.op.map_or("wait", Op::name).to_string(),
            file: file.to_string(),
            line,
        }
    }
}

/// A probe: (initiator, initiator's wait, round, path).
fn encode(init: u32, block: u64, round: u8, path: &[Hop]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&init.to_le_bytes());
    b.extend_from_slice(&block.to_le_bytes());
    b.push(round);
    for h in path {
        b.extend_from_slice(&h.rank.to_le_bytes());
        b.extend_from_slice(&h.block.to_le_bytes());
        b.extend_from_slice(&h.waits_for.to_le_bytes());
        b.extend_from_slice(&h.line.to_le_bytes());
        for s in [&h.op, &h.file] {
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        }
    }
    b
}

fn decode(b: &[u8]) -> Option<(u32, u64, u8, Vec<Hop>)> {
    let (init, block, round) = decode_head(b)?;
    let mut at = 13;
    let mut path = Vec::new();
    while at < b.len() {
        path.push(decode_hop(b, &mut at)?);
    }
    Some((init, block, round, path))
}

/// A probe's or query's (initiator, initiator's wait, round).
fn decode_head(b: &[u8]) -> Option<(u32, u64, u8)> {
    let init = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?);
    let block = u64::from_le_bytes(b.get(4..12)?.try_into().ok()?);
    Some((init, block, *b.get(12)?))
}

/// The hop encoded at `b[*at..]`; moves `at` past it.
fn decode_hop(b: &[u8], at: &mut usize) -> Option<Hop> {
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = b.get(*at..*at + n)?;
        *at += n;
        Some(s)
    };
    let u32_ = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4"));
    let rank = u32_(take(4)?);
    let block = u64::from_le_bytes(take(8)?.try_into().expect("8"));
    let waits_for = u32_(take(4)?);
    let line = u32_(take(4)?);
    let n = u32_(take(4)?) as usize;
    let op = String::from_utf8_lossy(take(n)?).into_owned();
    let n = u32_(take(4)?) as usize;
    let file = String::from_utf8_lossy(take(n)?).into_owned();
    Some(Hop {
        rank,
        block,
        waits_for,
        op,
        file,
        line,
    })
}

/// Called by a wait for `key` each time it finds nothing to do: notes the wait, and
/// once it has lasted the timeout, chases its edge (or, waiting for any rank, starts
/// a search for a knot) and answers other ranks' probes and queries.
#[cold]
#[inline(never)]
pub(crate) fn waiting(key: Key) {
    match key {
        // named as the wait it is in (`MPI_Wait`), not as the call that posted the
        // schedule's request
        Key::Coll(_) => waiting_in(Wait::AnyOf(vec![followed(key)])),
        k => waiting_in(Wait::Key(k)),
    }
}

/// The request a wait on `key` waits for: a nonblocking collective's stands for the
/// point-to-point request its schedule waits for next, as a blocking collective's
/// wait does.
fn followed(key: Key) -> Key {
    match key {
        Key::Coll(id) => {
            progress::with(|s| crate::collective::exec::pending_of(s, id)).unwrap_or(key)
        }
        k => k,
    }
}

/// [`waiting`] for `wait_any` / `wait_some` on the requests `keys`.
#[cold]
#[inline(never)]
pub(crate) fn waiting_any(keys: Vec<Key>) {
    waiting_in(Wait::AnyOf(keys.into_iter().map(followed).collect()));
}

/// [`waiting`] for a blocking probe on context `ctx` from world rank `source` (or
/// any).
#[cold]
#[inline(never)]
pub(crate) fn probing(ctx: u32, source: Src) {
    waiting_in(Wait::Probe { ctx, source });
}

fn waiting_in(wait: Wait) {
    let Some(Some((tool, send, search, report))) = tools::with(|t| {
        if t.busy {
            return None;
        }
        let call = t.call;
        let d = t.deadlock.as_mut()?;
        let now = Instant::now();
        if d.blocked.as_ref().is_none_or(|b| b.wait != wait) {
            let (waits_for, any_of, call) = d.resolve(&wait, call);
            d.blocks += 1;
            d.blocked = Some(Blocked {
                wait,
                id: d.blocks,
                since: now,
                waits_for,
                any_of,
                call,
                probed: false,
                hang_reported: false,
            });
            d.knot = None;
        }
        let b = d.blocked.as_mut().expect("set above");
        let waited = now - b.since;
        if waited < d.timeout {
            return None;
        }
        let first_probe = !b.probed;
        b.probed = true;
        let hang = waited >= d.hang && !b.hang_reported;
        b.hang_reported |= hang;
        let b = b.clone();
        let mut send = Vec::new();
        if let (true, Some(w)) = (first_probe, b.waits_for) {
            send.push((w, PROBE_TAG, encode(d.me, b.id, 1, &[d.hop(&b, w)])));
        }
        let search = (first_probe && b.any_of.is_some()).then_some(b.id);
        Some((d.tool, send, search, hang.then_some(b)))
    }) else {
        return;
    };
    let mut send = send;
    if let Some(block) = search {
        send.extend(start_search(block, 1));
    }
    tools::own_traffic(|| {
        for (to, tag, msg) in send {
            tool.process_at_rank(to as i32).lib_send(&msg[..], tag);
        }
        answer_probes(&tool);
        answer_queries(&tool);
    });
    if let Some(b) = report {
        report_hang(&b);
    }
}

/// The world ranks a blocked rank waits for: the one it names, or any of several
/// (for a wildcard, every rank of the communicator but itself).
fn waits_on(me: u32, b: &Blocked) -> Vec<u32> {
    match (b.waits_for, &b.any_of) {
        (Some(r), _) => vec![r],
        (None, Some(any_of)) => {
            let mut ranks: Vec<u32> = progress::with(|s| {
                let size = s.engine.size();
                let mut ranks = Vec::new();
                for e in any_of {
                    match *e {
                        Ok(r) => ranks.push(r),
                        Err(ctx) => match s.groups.get(&(ctx & !crate::topology::INTERNAL)) {
                            Some(g) => ranks.extend_from_slice(&g.world),
                            None => ranks.extend(0..size),
                        },
                    }
                }
                ranks
            });
            ranks.retain(|r| *r != me);
            ranks.sort_unstable();
            ranks.dedup();
            ranks
        }
        _ => Vec::new(),
    }
}

/// Starts round `round` of this rank's knot search from its wait `block`: the
/// queries to send (to every rank it waits for).
fn start_search(block: u64, round: u8) -> Vec<(u32, i32, Vec<u8>)> {
    let Some(Some((me, b, hop))) = tools::with(|t| {
        let d = t.deadlock.as_ref()?;
        let b = d.blocked.clone().filter(|b| b.id == block)?;
        Some((d.me, b.clone(), d.hop(&b, ANY)))
    }) else {
        return Vec::new();
    };
    let asked = waits_on(me, &b);
    let msg = encode(me, block, round, &[]);
    let send = asked.iter().map(|r| (*r, QUERY_TAG, msg.clone())).collect();
    tools::with(|t| {
        if let Some(d) = &mut t.deadlock {
            let first = d.knot.take().map(|k| k.first).unwrap_or_default();
            d.knot = Some(Knot {
                block,
                round,
                answers: vec![(hop, asked.clone())],
                asked,
                first,
            });
        }
    });
    send
}

/// Answers the queries of wildcard waiters (with this rank's wait and the ranks it
/// waits for, when blocked), and takes the answers to this rank's own.
fn answer_queries(tool: &SimpleCommunicator) {
    while let Some(st) = tool.any_process().immediate_probe_with_tag(QUERY_TAG) {
        let from = st.source_rank();
        let (bytes, _): (Vec<u8>, _) = tool.process_at_rank(from).receive_vec_with_tag(QUERY_TAG);
        let Some((init, block, round, _)) = decode(&bytes) else {
            continue;
        };
        let Some(Some((me, b))) = tools::with(|t| {
            let d = t.deadlock.as_ref()?;
            Some((d.me, d.blocked.clone()?))
        }) else {
            continue; // not blocked: no answer, and the search stops
        };
        let deps = waits_on(me, &b);
        let hop = tools::with(|t| {
            let d = t.deadlock.as_ref().expect("on");
            d.hop(&b, b.waits_for.unwrap_or(ANY))
        })
        .expect("on");
        let mut msg = encode(init, block, round, &[hop]);
        for r in deps {
            msg.extend_from_slice(&r.to_le_bytes());
        }
        tool.process_at_rank(from).lib_send(&msg[..], ANSWER_TAG);
    }
    while let Some(st) = tool.any_process().immediate_probe_with_tag(ANSWER_TAG) {
        let (bytes, _): (Vec<u8>, _) = tool
            .process_at_rank(st.source_rank())
            .receive_vec_with_tag(ANSWER_TAG);
        if let Some(send) = take_answer(&bytes) {
            for (to, tag, msg) in send {
                tool.process_at_rank(to as i32).lib_send(&msg[..], tag);
            }
        }
    }
}

/// Takes an answer to this rank's search: queries the ranks it names that nobody
/// asked yet; once every rank asked has answered, confirms with a second round or
/// reports the knot. Returns the queries to send.
fn take_answer(bytes: &[u8]) -> Option<Vec<(u32, i32, Vec<u8>)>> {
    // an answer is one hop followed by the world ranks the answering rank waits for
    let (_, block, round, hop, deps) = decode_answer(bytes)?;
    let (next_round, knot_done) = tools::with(|t| {
        let d = t.deadlock.as_mut()?;
        let me = d.me;
        let k = d
            .knot
            .as_mut()
            .filter(|k| k.block == block && k.round == round)?;
        if k.answers.iter().any(|(h, _)| h.rank == hop.rank) {
            return None;
        }
        let new: Vec<u32> = deps
            .iter()
            .copied()
            .filter(|r| *r != me && !k.asked.contains(r))
            .collect();
        k.asked.extend(&new);
        k.answers.push((hop, deps));
        let all = k
            .asked
            .iter()
            .all(|r| k.answers.iter().any(|(h, _)| h.rank == *r));
        let msg = encode(me, block, round, &[]);
        let queries: Vec<(u32, i32, Vec<u8>)> =
            new.iter().map(|r| (*r, QUERY_TAG, msg.clone())).collect();
        if !all {
            return Some((None, Err(queries)));
        }
        let mut answers = k.answers.clone();
        answers.sort_by_key(|(h, _)| h.rank);
        let hops: Vec<Hop> = answers.iter().map(|(h, _)| h.clone()).collect();
        if round == 1 {
            k.first = hops;
            Some((Some(block), Err(queries)))
        } else if k.first == hops {
            Some((None, Ok(answers)))
        } else {
            Some((None, Err(queries)))
        }
    })
    .flatten()?;
    match knot_done {
        Ok(hops) => report_knot(&hops),
        Err(mut queries) => {
            if let Some(block) = next_round {
                queries.extend(start_search(block, 2));
            }
            Some(queries)
        }
    }
}

fn decode_answer(b: &[u8]) -> Option<(u32, u64, u8, Hop, Vec<u32>)> {
    // one hop, then the world ranks the answering rank waits for
    let (init, block, round) = decode_head(b)?;
    let mut at = 13;
    let hop = decode_hop(b, &mut at)?;
    let deps = b[at..]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
        .collect();
    Some((init, block, round, hop, deps))
}

/// Reads the probes other ranks sent and forwards, confirms or reports them.
fn answer_probes(tool: &SimpleCommunicator) {
    while let Some(st) = tool.any_process().immediate_probe_with_tag(PROBE_TAG) {
        let (bytes, _): (Vec<u8>, _) = tool
            .process_at_rank(st.source_rank())
            .receive_vec_with_tag(PROBE_TAG);
        let Some((init, block, round, mut path)) = decode(&bytes) else {
            continue;
        };
        let me_blocked = tools::with(|t| {
            let d = t.deadlock.as_ref()?;
            let b = d.blocked.clone()?;
            let hop = d.hop(&b, b.waits_for?);
            Some((d.me, b, hop))
        })
        .flatten();
        let Some((me, b, hop)) = me_blocked else {
            continue; // not blocked on a rank: the chase ends here
        };
        if init == me {
            if b.id != block {
                continue; // an old wait's probe
            }
            if round == 1 {
                // confirm: every rank of the cycle must still be in the same wait
                let first = path.first().cloned().expect("the initiator's hop");
                let next = first.waits_for;
                let msg = encode(me, block, 2, &[first]);
                tool.process_at_rank(next as i32)
                    .lib_send(&msg[..], PROBE_TAG);
                tools::with(|t| {
                    if let Some(d) = &mut t.deadlock {
                        d.first_round = path;
                    }
                });
            } else if tools::with(|t| t.deadlock.as_ref().is_some_and(|d| d.first_round == path))
                == Some(true)
            {
                report_cycle(&path);
            }
            continue;
        }
        if path.iter().any(|h| h.rank == me) {
            continue; // a cycle that does not pass through the initiator: its own ranks report it
        }
        let next = hop.waits_for;
        path.push(hop);
        let msg = encode(init, block, round, &path);
        tool.process_at_rank(next as i32)
            .lib_send(&msg[..], PROBE_TAG);
    }
}

/// Reports a knot (every rank reached by a search, each blocked for good, with the
/// ranks it waits for) and ends the job.
fn report_knot(answers: &[(Hop, Vec<u32>)]) -> ! {
    let hops: Vec<Hop> = answers.iter().map(|(h, _)| h.clone()).collect();
    let of: Vec<Vec<u32>> = answers.iter().map(|(_, d)| d.clone()).collect();
    report_deadlock(
        "knot",
        "every rank these wait for is blocked too: ",
        &hops,
        &of,
    )
}

fn report_cycle(path: &[Hop]) -> ! {
    report_deadlock("cycle", "", path, &[])
}

/// Reports the ranks of a deadlock (a `cycle` or a `knot`, the JSON key), each with
/// its call, line and what it waits for (a rank waiting for any of several: the
/// ranks `of[i]`, when known), and ends the job.
fn report_deadlock(key: &str, lead: &str, hops: &[Hop], of: &[Vec<u32>]) -> ! {
    let of = |i: usize| of.get(i).filter(|d| !d.is_empty());
    let list = |d: &[u32], sep: &str| d.iter().map(u32::to_string).collect::<Vec<_>>().join(sep);
    let words: Vec<String> = hops
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let to = match (h.waits_for, of(i)) {
                (ANY, Some(d)) => format!("any of ranks {}", list(d, ", ")),
                (ANY, None) => "any rank".to_string(),
                (r, _) => format!("rank {r}"),
            };
            format!(
                "rank {} in {} at {}:{} waits for {to}",
                h.rank, h.op, h.file, h.line
            )
        })
        .collect();
    let json: Vec<String> = hops
        .iter()
        .enumerate()
        .map(|(i, h)| {
            format!(
                "{{\"rank\":{},\"call\":{},\"file\":{},\"line\":{},\"waits_for\":{}}}",
                h.rank,
                super::json_str(&h.op),
                super::json_str(&h.file),
                h.line,
                match (h.waits_for, of(i)) {
                    (ANY, Some(d)) => format!("\"any\",\"of\":[{}]", list(d, ",")),
                    (ANY, None) => "\"any\"".to_string(),
                    (r, _) => r.to_string(),
                },
            )
        })
        .collect();
    super::log_line(&format!(
        "{{\"check\":\"deadlock\",\"{key}\":[{}]}}",
        json.join(",")
    ));
    let msg = format!("deadlock: {lead}{}", words.join("; "));
    progress::with(|s| s.fatal("RSMPI_CHECK", &msg))
}

fn report_hang(b: &Blocked) {
    let (file, line) = b.call.site.map_or(("?", 0), |l| (l.file(), l.line()));
    let op = b.call.op.map_or("wait", Op::name);
    let me = tools::with(|t| t.deadlock.as_ref().map(|d| d.me))
        .flatten()
        .unwrap_or(0);
    let secs = b.since.elapsed().as_secs_f64();
    let on = b
        .waits_for
        .map_or("any rank".to_string(), |r| format!("rank {r}"));
    eprintln!(
        "rsmpi: hang? rank {me} has waited {secs:.1} s in {op} at {file}:{line} for {on}, \
         which is not waiting for it in turn"
    );
    let waits = b.waits_for.map_or("null".to_string(), |r| r.to_string());
    super::log_line(&format!(
        "{{\"check\":\"hang\",\"rank\":{me},\"call\":{},\"file\":{},\"line\":{line},\"waits_for\":{waits},\"seconds\":{secs:.1}}}",
        super::json_str(op),
        super::json_str(file)
    ));
}

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
//! `MPI_Recv` from it are a cycle). Not followed: wildcard-source receives (waiting
//! for any rank is not a cycle edge), `wait_any` / `wait_some` and probes; a
//! deadlock through those is reported as a hang.

use std::time::{Duration, Instant};

use matching::{RecvId, SendId, Source as Src};
use rustc_hash::FxHashMap as HashMap;

use super::Call;
use crate::progress::{self, Key};
use crate::tools;
use crate::topology::SimpleCommunicator;
use crate::trace::format::Op;
use crate::traits::*;

const PROBE_TAG: i32 = 1;

/// One rank's deadlock detector.
pub(crate) struct Deadlock {
    me: u32,
    tool: SimpleCommunicator,
    timeout: Duration,
    hang: Duration,
    pub sync_sends: bool,
    /// Whom each pending receive and send waits for, and the call that started it.
    recvs: HashMap<RecvId, (Option<u32>, Call)>,
    sends: HashMap<SendId, (u32, Call)>,
    /// The wait in progress.
    blocked: Option<Blocked>,
    blocks: u64,
    /// The cycle the first round of this rank's probe found; the second must repeat it.
    first_round: Vec<Hop>,
}

#[derive(Clone, Copy, Debug)]
struct Blocked {
    key: Key,
    id: u64,
    since: Instant,
    waits_for: Option<u32>,
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
        }
    }

    pub fn posted(&mut self, id: RecvId, source: Src, call: Call) {
        let from = match source {
            Src::Rank(r) if r != u32::MAX => Some(r),
            _ => None,
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
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = b.get(at..at + n)?;
        at += n;
        Some(s)
    };
    let u32_ = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4"));
    let u64_ = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8"));
    let init = u32_(take(4)?);
    let block = u64_(take(8)?);
    let round = take(1)?[0];
    let mut path = Vec::new();
    while let Some(r) = take(4) {
        let rank = u32_(r);
        let block = u64_(take(8)?);
        let waits_for = u32_(take(4)?);
        let line = u32_(take(4)?);
        let mut strs = Vec::new();
        for _ in 0..2 {
            let n = u32_(take(4)?) as usize;
            strs.push(String::from_utf8_lossy(take(n)?).into_owned());
        }
        let file = strs.pop()?;
        let op = strs.pop()?;
        path.push(Hop {
            rank,
            block,
            waits_for,
            op,
            file,
            line,
        });
    }
    Some((init, block, round, path))
}

/// Called by a wait for `key` each time it finds nothing to do: notes the wait, and
/// once it has lasted the timeout, chases its edge and answers other ranks' probes.
#[cold]
#[inline(never)]
pub(crate) fn waiting(key: Key) {
    let Some(Some((tool, send, report))) = tools::with(|t| {
        if t.busy {
            return None;
        }
        let call = t.call;
        let d = t.deadlock.as_mut()?;
        let now = Instant::now();
        if d.blocked.is_none_or(|b| b.key != key) {
            let waits_for = match key {
                Key::Recv(r) => d.recvs.get(&r).and_then(|x| x.0),
                Key::Send(s) => d.sends.get(&s).map(|x| x.0),
                _ => None,
            };
            let call = match key {
                Key::Recv(r) => d.recvs.get(&r).map_or(call, |x| x.1),
                Key::Send(s) => d.sends.get(&s).map_or(call, |x| x.1),
                _ => call,
            };
            d.blocks += 1;
            d.blocked = Some(Blocked {
                key,
                id: d.blocks,
                since: now,
                waits_for,
                call,
                probed: false,
                hang_reported: false,
            });
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
        let b = *b;
        let mut send = Vec::new();
        if let (true, Some(w)) = (first_probe, b.waits_for) {
            send.push((w, encode(d.me, b.id, 1, &[d.hop(&b, w)])));
        }
        Some((d.tool, send, hang.then_some(b)))
    }) else {
        return;
    };
    tools::own_traffic(|| {
        for (to, msg) in send {
            tool.process_at_rank(to as i32)
                .send_with_tag(&msg[..], PROBE_TAG);
        }
        answer_probes(&tool);
    });
    if let Some(b) = report {
        report_hang(&b);
    }
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
            let b = d.blocked?;
            Some((d.me, b, d.hop(&b, b.waits_for?)))
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
                    .send_with_tag(&msg[..], PROBE_TAG);
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
            .send_with_tag(&msg[..], PROBE_TAG);
    }
}

fn report_cycle(path: &[Hop]) -> ! {
    let words: Vec<String> = path
        .iter()
        .map(|h| {
            format!(
                "rank {} in {} at {}:{} waits for rank {}",
                h.rank, h.op, h.file, h.line, h.waits_for
            )
        })
        .collect();
    let json: Vec<String> = path
        .iter()
        .map(|h| {
            format!(
                "{{\"rank\":{},\"call\":{},\"file\":{},\"line\":{},\"waits_for\":{}}}",
                h.rank,
                super::json_str(&h.op),
                super::json_str(&h.file),
                h.line,
                h.waits_for
            )
        })
        .collect();
    let line = format!("{{\"check\":\"deadlock\",\"cycle\":[{}]}}", json.join(","));
    super::log_line(&line);
    let msg = format!("deadlock: {}", words.join("; "));
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

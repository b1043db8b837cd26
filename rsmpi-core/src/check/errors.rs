//! The error checks (`RSMPI_CHECK=errors`, `docs/tools.md`): misuse of MPI that the
//! library can see at run time, reported as a sentence on stderr and a JSON line
//! (`RSMPI_CHECK_LOG/rank-<r>.jsonl`) naming the class, the ranks, the call and its
//! source line.
//!
//! ```sh
//! RSMPI_CHECK=errors RSMPI_CHECK_LOG=/tmp/errs rsmpirun -n 2 ./app
//! # rsmpi: error at rank 1: 1 message from rank 0 (tag 7, sent by MPI_Send at src/main.rs:12) was never received
//! ```
//!
//! * `usage`: a call that ends the job with an error (a rank or tag out of range, a
//!   message truncated, a buffered send that does not fit the attached buffer, …):
//!   the report adds the call's source line and the error class to the message.
//! * `request-leak`: a request started by an immediate call and never completed
//!   (waited for or tested to completion): at the end of its scope, which cancels it,
//!   or at finalize for `'static` buffers.
//! * `unmatched-receive`: a receive still posted at finalize.
//! * `unmatched-send`: messages sent and never received. At finalize every rank tells
//!   each other one how many messages it sent it on each (communicator, tag), with
//!   the last send's call and line; the receiver compares with what it received.
//!
//! A message's sender and receiver are the ranks of the communicator it used.

use std::panic::Location;

use matching::{Source as Src, TagSel};
use rustc_hash::FxHashMap as HashMap;

use super::{json_str, log_line, types, Call};
use crate::point_to_point::LibTraffic;
use crate::progress::{self, Key};
use crate::tools;
use crate::topology::{SimpleCommunicator, INTERNAL};
use crate::trace::format::Op;
use crate::traits::*;

/// One rank's error checker, in the library state while `RSMPI_CHECK` has `errors`.
///
/// The receives posted and the messages received on each channel are the notes'
/// (`super::Notes`, always on with this check).
pub(crate) struct Errors {
    me: u32,
    tool: SimpleCommunicator,
    /// Messages sent on user communicators, by (destination, context, tag): how many,
    /// and the last send's call.
    sent: HashMap<(u32, u32, i32), (u64, Call)>,
    /// Requests of immediate calls, until they are found complete.
    requests: HashMap<Key, Call>,
    /// `requests` is pruned of completed requests when it reaches this size.
    prune_at: usize,
    found: u64,
    /// The checks of immediate collectives, by request, until it completes
    /// (`check/coll.rs`); the one of the collective being started.
    pub colls: Vec<(Key, super::coll::Pending)>,
    pub next_coll: Option<super::coll::Pending>,
}

impl Errors {
    pub fn new(me: u32, tool: SimpleCommunicator) -> Errors {
        Errors {
            me,
            tool,
            sent: HashMap::default(),
            requests: HashMap::default(),
            prune_at: 1024,
            found: 0,
            colls: Vec::new(),
            next_coll: None,
        }
    }

    pub fn sent(&mut self, dest: u32, ctx: u32, tag: i32, call: Call) {
        if ctx & INTERNAL == 0 {
            let e = self.sent.entry((dest, ctx, tag)).or_insert((0, call));
            e.0 += 1;
            e.1 = call;
        }
    }
}

/// Whether the request `key` is still in the library: pending, or complete and not
/// yet collected by a wait or test.
fn live(s: &progress::State, key: &Key) -> bool {
    s.is_done(key)
        || match key {
            Key::Recv(r) => s.recvs.is_pending(*r),
            Key::Send(x) => s.send_src.contains_key(x),
            Key::Null(_) | Key::Sent(_) | Key::Coll(_) => false,
        }
}

/// This rank's error checker and the user's call in progress, outside the tools' own
/// traffic.
fn errors(s: &mut progress::State) -> Option<(&mut Errors, Call)> {
    let t = s.tools.as_deref_mut().filter(|t| !t.busy)?;
    let call = t.call;
    Some((t.errors.as_mut()?, call))
}

/// An immediate call started the request `key` (from its watched twin).
#[cold]
#[inline(never)]
pub(crate) fn request_started(key: Key) {
    let _ = progress::try_with(|s| {
        let Some((e, call)) = errors(s) else {
            return;
        };
        e.requests.insert(key, call);
        if e.requests.len() < e.prune_at {
            return;
        }
        // the requests collected since: gone from the library
        let mut requests = std::mem::take(&mut e.requests);
        requests.retain(|k, _| live(s, k));
        if let Some((e, _)) = errors(s) {
            e.prune_at = (2 * requests.len()).max(1024);
            e.requests = requests;
        }
    });
}

/// A scope ends with the requests `keys` not completed, and cancels them: the calls
/// of those an immediate call started, to report (with [`report_scope_leaks`] once
/// out of the library state).
pub(crate) fn scope_cancels(s: &mut progress::State, keys: &[Key]) -> Vec<Call> {
    match s.tools.as_deref_mut().and_then(|t| t.errors.as_mut()) {
        Some(e) => keys.iter().filter_map(|k| e.requests.remove(k)).collect(),
        None => Vec::new(),
    }
}

/// Reports the requests a scope's end cancelled ([`scope_cancels`]).
#[cold]
#[inline(never)]
pub(crate) fn report_scope_leaks(calls: Vec<Call>) {
    for call in calls {
        report(
            "request-leak",
            call,
            &format!(
                "the request of {} was never completed; the end of its scope cancelled it",
                op_name(call)
            ),
            "",
        );
    }
}

/// A message from world rank `src` (tag `tag`, its sender's `note`) was received by
/// `posted`, whose type signature differs from the message's at basic value
/// `at.0` (`at.1` sent, `at.2` expected).
pub(super) fn type_mismatch(
    posted: &super::Posted,
    src: u32,
    tag: i32,
    note: &super::Note,
    at: (u64, u8, u8),
) {
    let (Some(sent), Some(recv)) = (&note.ty, &posted.ty) else {
        return;
    };
    let ctx = posted.ctx;
    let src_c = progress::with(|s| s.comm_rank(ctx, src));
    let (i, a, b) = at;
    let send_op = note.op.map_or("a send", Op::name);
    report(
        "type-mismatch",
        posted.call,
        &format!(
            "{} received {} from rank {src_c} (tag {tag}, sent by {send_op} at {}:{}) into a \
             buffer of {}: value {i} is {} but the receive expects {}",
            op_name(posted.call),
            types::describe(sent),
            note.file.as_deref().unwrap_or("?"),
            note.line,
            types::describe(recv),
            types::type_name(a),
            types::type_name(b),
        ),
        &format!(
            ",\"source\":{src_c},\"tag\":{tag},\"context\":{ctx},\"sent\":{},\"received\":{},\"at\":{i},\"send\":{{\"call\":{},\"file\":{},\"line\":{}}}",
            json_str(&types::describe(sent)),
            json_str(&types::describe(recv)),
            json_str(send_op),
            note.file.as_deref().map_or("null".into(), json_str),
            note.line,
        ),
    );
}

/// A call ends the job with the error `e`.
pub(crate) fn failed(e: &crate::Error) {
    let Some(Some(call)) = tools::with(|t| t.errors.is_some().then_some(t.call)) else {
        return;
    };
    let class = match e {
        crate::Error::InvalidRank { .. } => "invalid-rank",
        crate::Error::InvalidTag(_) => "invalid-tag",
        crate::Error::Truncated { .. } => "truncation",
        crate::Error::Count { .. } => "count",
        crate::Error::Buffer(_) => "buffered-send",
        crate::Error::NoReceivePosted => "ready-send",
        crate::Error::Comm(_) => "freed-communicator",
        crate::Error::Type(_) => "datatype",
        crate::Error::Request(_) => "request",
        _ => "other",
    };
    report(
        "usage",
        call,
        &format!("{} failed: {e}", op_name(call)),
        &format!(
            ",\"error\":{},\"message\":{}",
            json_str(class),
            json_str(&e.to_string())
        ),
    );
}

fn op_name(call: impl Into<Option<Op>>) -> &'static str {
    call.into().map_or("an MPI call", Op::name)
}

impl From<Call> for Option<Op> {
    fn from(c: Call) -> Option<Op> {
        c.op
    }
}

fn site(call: Call) -> (&'static str, u32) {
    call.site
        .map_or(("?", 0), |l: &Location| (l.file(), l.line()))
}

/// Where a report points: the call and its source line.
pub(super) struct At {
    op: Option<Op>,
    file: String,
    line: u32,
}

impl From<Call> for At {
    fn from(c: Call) -> At {
        let (file, line) = site(c);
        At {
            op: c.op,
            file: file.to_string(),
            line,
        }
    }
}

/// Prints one report (`extra`: more JSON fields, each starting with a comma).
pub(super) fn report(class: &str, at: impl Into<At>, sentence: &str, extra: &str) {
    let at = at.into();
    let me = progress::try_with(|s| s.rank() as i64).unwrap_or(-1);
    tools::with(|t| {
        if let Some(e) = &mut t.errors {
            e.found += 1;
        }
    });
    let (file, line) = (&at.file, at.line);
    eprintln!("rsmpi: error at rank {me}: {sentence} ({file}:{line})");
    log_line(&format!(
        "{{\"check\":\"error\",\"class\":{},\"rank\":{me},\"call\":{},\"file\":{},\"line\":{line}{extra}}}",
        json_str(class),
        json_str(at.op.map_or("an MPI call", Op::name)),
        json_str(file),
    ));
}

/// At finalize (every rank, before the final barrier): the requests never completed,
/// the receives never matched and the messages never received.
pub(crate) fn finish() {
    let Some(Some((tool, me, size))) = tools::with(|t| {
        t.errors
            .as_ref()
            .map(|e| (e.tool, e.me, e.tool.size() as u32))
    }) else {
        return;
    };
    // what each rank sent each other one, by (context, tag)
    let mine: Vec<Vec<u8>> = tools::with(|t| {
        let e = t.errors.as_ref().expect("on");
        let mut out = vec![Vec::new(); size as usize];
        let mut keys: Vec<_> = e.sent.keys().copied().collect();
        keys.sort_unstable();
        for k in keys {
            let (n, call) = e.sent[&k];
            let (file, line) = site(call);
            let b = &mut out[k.0 as usize];
            b.extend_from_slice(&k.1.to_le_bytes());
            b.extend_from_slice(&k.2.to_le_bytes());
            b.extend_from_slice(&n.to_le_bytes());
            b.push(call.op.map_or(u8::MAX, |o| o as u8));
            b.extend_from_slice(&line.to_le_bytes());
            b.extend_from_slice(&(file.len() as u32).to_le_bytes());
            b.extend_from_slice(file.as_bytes());
        }
        out
    })
    .expect("on");
    let theirs: Vec<Vec<u8>> = tools::own_traffic(|| {
        let mut got = vec![Vec::new(); size as usize];
        for k in 0..size {
            let (to, from) = ((me + k) % size, (me + size - k) % size);
            got[from as usize] = crate::request::scope(|sc| {
                let r = tool.process_at_rank(to as i32).lib_immediate_send(
                    sc,
                    &mine[to as usize][..],
                    0,
                );
                let (v, _): (Vec<u8>, _) = tool.process_at_rank(from as i32).receive_vec();
                r.wait();
                v
            });
        }
        got
    });
    let Some(Some(e)) = tools::with(|t| t.errors.take()) else {
        return;
    };
    // what the notes know: messages received per channel, receives still posted
    let (received, posted) = tools::with(|t| {
        let n = t
            .notes
            .as_ref()
            .expect("the notes are on with the error checks");
        (n.received.clone(), n.posted_list())
    })
    .expect("on");
    let mut reports: Vec<(&str, At, String, String)> = Vec::new();
    for (from, b) in theirs.iter().enumerate() {
        let mut o = 0;
        while let Some(entry) = decode(b, &mut o) {
            let (ctx, tag, n, call) = entry;
            let got = received.taken((from as u32, ctx, tag));
            if n > got {
                let lost = n - got;
                let src = progress::with(|s| s.comm_rank(ctx, from as u32));
                let me_c = progress::with(|s| s.comm_rank(ctx, me));
                let op = call.op;
                reports.push((
                    "unmatched-send",
                    call,
                    format!(
                        "{lost} message{} from rank {src} to rank {me_c} (tag {tag}, the last sent \
                         by {}) never received",
                        if lost == 1 { "" } else { "s" },
                        op_name(op),
                    ),
                    format!(",\"source\":{src},\"dest\":{me_c},\"tag\":{tag},\"context\":{ctx},\"count\":{lost}"),
                ));
            }
        }
    }
    let mut posted = posted;
    posted.sort_unstable_by_key(|(id, _)| id.0);
    for (id, p) in posted {
        if !progress::with(|s| s.recvs.is_pending(id)) {
            continue;
        }
        let src = match p.source {
            Src::Any => "any".to_string(),
            Src::Rank(w) => progress::with(|s| s.comm_rank(p.ctx, w)).to_string(),
        };
        let tag = match p.tag {
            TagSel::Any => "any".to_string(),
            TagSel::Tag(t) => t.to_string(),
        };
        let q = |v: &str| {
            if v == "any" {
                "\"any\"".to_string()
            } else {
                v.to_string()
            }
        };
        reports.push((
            "unmatched-receive",
            p.call.into(),
            format!(
                "{} (source {src}, tag {tag}) was never matched by a message",
                op_name(p.call)
            ),
            format!(
                ",\"source\":{},\"tag\":{},\"context\":{}",
                q(&src),
                q(&tag),
                p.ctx
            ),
        ));
    }
    let mut leaked: Vec<(Key, Call)> = e
        .requests
        .iter()
        .filter(|(k, _)| progress::with(|s| live(s, k)))
        .map(|(k, c)| (*k, *c))
        .collect();
    leaked.sort_unstable_by_key(|(k, _)| format!("{k:?}"));
    for (_, call) in leaked {
        reports.push((
            "request-leak",
            call.into(),
            format!(
                "the request of {} was never completed (waited for or tested) before finalize",
                op_name(call)
            ),
            String::new(),
        ));
    }
    let found = e.found + reports.len() as u64;
    for (class, call, sentence, extra) in reports {
        report(class, call, &sentence, &extra);
    }
    if found > 0 {
        eprintln!(
            "rsmpi: RSMPI_CHECK=errors: rank {} found {found} error{}",
            me,
            if found == 1 { "" } else { "s" }
        );
    }
}

/// One entry of a rank's finalize summary: (context, tag, count, last send).
fn decode(b: &[u8], o: &mut usize) -> Option<(u32, i32, u64, At)> {
    let at = *o;
    let u32_at = |x: usize| Some(u32::from_le_bytes(b.get(x..x + 4)?.try_into().ok()?));
    let ctx = u32_at(at)?;
    let tag = u32_at(at + 4)? as i32;
    let n = u64::from_le_bytes(b.get(at + 8..at + 16)?.try_into().ok()?);
    let op = Op::from_u8(*b.get(at + 16)?);
    let line = u32_at(at + 17)?;
    let flen = u32_at(at + 21)? as usize;
    let file = String::from_utf8_lossy(b.get(at + 25..at + 25 + flen)?).into_owned();
    *o = at + 25 + flen;
    Some((ctx, tag, n, At { op, file, line }))
}

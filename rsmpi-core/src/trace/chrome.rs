//! A trace directory to Chrome Trace Event JSON, which Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing` open: one process per rank,
//! a slice per MPI call (`B` / `E` events), an arrow per message (flow events `s` /
//! `f` from the send to the completed receive), on rank 0's clock with the flush
//! pauses taken out and no receive before its send ([`timelines`]).
//!
//! ```no_run
//! let mut out = std::io::BufWriter::new(std::fs::File::create("trace.json").unwrap());
//! let summary = rsmpi::trace::chrome::convert(
//!     std::path::Path::new("/tmp/tr"),
//!     &mut out,
//!     &mut |msg| eprintln!("{msg}"),
//! )
//! .unwrap();
//! eprintln!("{} messages, {} paired", summary.sends, summary.flows);
//! ```

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::path::Path;

use super::format::{self, Kind, Op, RankTrace, Record};

/// What a conversion found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub ranks: u32,
    pub records: u64,
    /// MPI calls (enter records).
    pub calls: u64,
    pub sends: u64,
    pub recvs: u64,
    /// Messages whose send and receive were paired (one arrow each).
    pub flows: u64,
    /// Flush epochs that wrote (on rank 0).
    pub epochs: u64,
    /// Nanoseconds of flush pauses taken out (on rank 0).
    pub paused_ns: u64,
    /// Receives moved later to follow their sends ([`timelines`]).
    pub moved: Moved,
}

/// The channel key of a message: (source, destination, context, tag, number).
type MsgKey = (u32, u32, u32, i32, u64);

/// The key of the message that `r`, a `Send` record of rank `rank`, sent.
fn sent_key(rank: u32, r: &Record) -> MsgKey {
    (rank, r.a, r.c, r.b, r.e)
}

/// The key of the message that `r`, a `Recv` record of rank `rank`, received.
fn recv_key(rank: u32, r: &Record) -> MsgKey {
    (r.a, rank, r.c, r.b, r.e)
}

/// A clock sample whose error bound is more than this many times the next sample's
/// is replaced by the next one ([`timeline`]).
pub const WORSE: u64 = 8;

/// Reconstructed time of every record of one rank, in ns on rank 0's clock with the
/// flush pauses removed: a record's time minus the pauses before it plus the clock
/// offset measured last (at or before it). A new offset can step the clock back by
/// up to its error; the timeline holds still there rather than run backwards.
///
/// A clock sample much less accurate than the next one (its error bound more than
/// [`WORSE`] times the next one's) gives way to it: the records up to the next
/// sample take the next sample's offset. The start-up sample is measured while the
/// ranks may still share a CPU, and then its round trips are long: on a 2-CPU machine
/// about one start-up in ten (4 of 38 runs) had an error bound of ~54 µs against
/// ~0.2 µs at the flushes, and one trace's receives came up to 9.4 µs before their
/// sends until its first flush.
pub fn timeline(t: &RankTrace) -> Vec<i64> {
    // (offset, error) of every clock sample, in order
    let samples: Vec<(i64, u64)> = t
        .records
        .iter()
        .filter(|r| r.kind == Kind::Clock)
        .map(|r| (r.d as i64, r.e))
        .collect();
    let mut next_sample = 0;
    let mut shift = 0i64;
    let mut offset = 0i64;
    let mut last = i64::MIN;
    let mut out = Vec::with_capacity(t.records.len());
    for r in &t.records {
        match r.kind {
            // a pause ends with its record: that record is already on the far side
            Kind::FlushEnd | Kind::Unsync => shift += r.d as i64,
            Kind::Clock => {
                let (mine, err) = samples[next_sample];
                next_sample += 1;
                offset = match samples.get(next_sample) {
                    Some(&(better, e)) if err > e.saturating_mul(WORSE) => better,
                    _ => mine,
                };
            }
            _ => {}
        }
        last = last.max(r.ts as i64 - shift + offset);
        out.push(last);
    }
    out
}

/// Receives that [`timelines`] moved later so that none ends before its send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Receives moved.
    pub recvs: u64,
    /// The largest move, in ns.
    pub max_ns: u64,
}

/// The reconstructed times of every rank's records ([`timeline`]), with the clock
/// condition enforced: no receive ends before its send, on the common clock.
///
/// Each rank's offset to rank 0's clock is measured with an error (`Clock` records,
/// `docs/tools.md`), so a message's two ends, mapped separately, can come out in the
/// wrong order: an arrow pointing back in time. Here a receive found before its send
/// is moved to the send's time, and the rest of its rank's records move with it, so
/// each rank's order and the length of every call but the one holding the receive
/// stay as they were. The move holds until the rank's next clock sample (its offset
/// measured again); a send moved this way carries its receiver along. That is the
/// forward half of the *controlled logical clock* of Rabenseifner's trace tools and
/// Scalasca. Ranks are walked in an order that takes every send before its receive;
/// a receive whose send is recorded after it on its own rank (a message to itself)
/// is left where it is.
pub fn timelines(traces: &[RankTrace]) -> (Vec<Vec<i64>>, Moved) {
    let mut times: Vec<Vec<i64>> = traces.iter().map(timeline).collect();
    let mut moved = Moved::default();
    let mut unsent: HashSet<MsgKey> = HashSet::new();
    for t in traces {
        for r in t.records.iter().filter(|r| r.kind == Kind::Send) {
            unsent.insert(sent_key(t.rank, r));
        }
    }
    let mut sent: HashMap<MsgKey, i64> = HashMap::new();
    let n = traces.len();
    let (mut at, mut delta, mut last) = (vec![0; n], vec![0i64; n], vec![i64::MIN; n]);
    // ranks to walk on, and the ranks stopped at a receive, by the send they wait for:
    // each record is visited once
    let mut ready: Vec<usize> = (0..n).rev().collect();
    let mut waiting: HashMap<MsgKey, usize> = HashMap::new();
    loop {
        while let Some(i) = ready.pop() {
            let t = &traces[i];
            while let Some(r) = t.records.get(at[i]) {
                let ts = times[i][at[i]];
                if r.kind == Kind::Clock {
                    delta[i] = 0;
                }
                let mut new = ts + delta[i];
                if r.kind == Kind::Recv {
                    let key = recv_key(t.rank, r);
                    if r.a != t.rank && unsent.contains(&key) {
                        // its send lies ahead on another rank's walk: come back then
                        waiting.insert(key, i);
                        break;
                    }
                    match sent.remove(&key) {
                        Some(at_send) if new < at_send => {
                            moved.recvs += 1;
                            moved.max_ns = moved.max_ns.max((at_send - new) as u64);
                            delta[i] = at_send - ts;
                            new = at_send;
                        }
                        _ => {}
                    }
                }
                new = new.max(last[i]);
                last[i] = new;
                times[i][at[i]] = new;
                if r.kind == Kind::Send {
                    let key = sent_key(t.rank, r);
                    unsent.remove(&key);
                    sent.insert(key, new);
                    if let Some(j) = waiting.remove(&key) {
                        ready.push(j);
                    }
                }
                at[i] += 1;
            }
        }
        // every rank is at its end, or waits for a send another rank records after
        // its own wait: a cycle no real run makes; let one waiting receive go where it is
        let Some(key) = waiting.keys().next().copied() else {
            return (times, moved);
        };
        let i = waiting.remove(&key).expect("a waiting rank");
        unsent.remove(&key);
        ready.push(i);
    }
}

/// Converts the trace in `dir` to JSON on `out`; `progress` gets a line now and then.
pub fn convert(
    dir: &Path,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Summary> {
    let traces = format::read_dir(dir, &mut |done, total| progress(&read_line(done, total)))?;
    write_json(&traces, out, progress)
}

/// The progress line for `done` of `total` bytes of a trace's files read: in MiB with
/// one decimal, or in KiB for a trace under 1 MiB (which reads "21 of 63 KiB", not
/// "0 of 1 MiB").
pub fn read_line(done: u64, total: u64) -> String {
    if total < 1 << 20 {
        return format!(
            "read {} of {} KiB",
            done.div_ceil(1024),
            total.div_ceil(1024)
        );
    }
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    format!("read {:.1} of {:.1} MiB", mib(done), mib(total))
}

/// Converts traces already read.
pub fn write_json(
    traces: &[RankTrace],
    out: &mut dyn Write,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Summary> {
    let mut s = Summary {
        ranks: traces.len() as u32,
        ..Summary::default()
    };
    // the arrows: every send gets an id, the receive with the same key takes it
    let mut ids: HashMap<MsgKey, u64> = HashMap::new();
    for t in traces {
        for r in t.records.iter().filter(|r| r.kind == Kind::Send) {
            let id = ids.len() as u64;
            ids.insert(sent_key(t.rank, r), id);
        }
    }
    let mut received: HashSet<u64> = HashSet::new();
    for t in traces {
        for r in t.records.iter().filter(|r| r.kind == Kind::Recv) {
            if let Some(id) = ids.get(&recv_key(t.rank, r)) {
                received.insert(*id);
            }
        }
    }
    let total: u64 = traces.iter().map(|t| t.records.len() as u64).sum();
    let (times, moved) = timelines(traces);
    s.moved = moved;
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
    let mut first = true;
    let mut ev = |out: &mut dyn Write, line: String| -> io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        out.write_all(line.as_bytes())
    };
    for (t, times) in traces.iter().zip(&times) {
        let pid = t.rank;
        ev(
            out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":\"rank {pid}\"}}}}"
            ),
        )?;
        ev(
            out,
            format!("{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{pid},\"args\":{{\"sort_index\":{pid}}}}}"),
        )?;
        for (r, &ns) in t.records.iter().zip(times) {
            s.records += 1;
            if s.records.is_multiple_of(1 << 20) {
                progress(&format!("converted {} of {} records", s.records, total));
            }
            let ts = us(ns);
            let line = match r.kind {
                Kind::Enter | Kind::Leave => {
                    if r.kind == Kind::Enter {
                        s.calls += 1;
                    }
                    let name = r.call().map_or("?", |o| o.name());
                    let ph = if r.kind == Kind::Enter { 'B' } else { 'E' };
                    format!("{{\"ph\":\"{ph}\",\"name\":\"{name}\",\"cat\":\"mpi\",\"pid\":{pid},\"tid\":0,\"ts\":{ts}}}")
                }
                Kind::Send | Kind::Recv => {
                    let send = r.kind == Kind::Send;
                    let key = if send {
                        (pid, r.a, r.c, r.b, r.e)
                    } else {
                        (r.a, pid, r.c, r.b, r.e)
                    };
                    let (what, peer) = if send {
                        ("send", "to")
                    } else {
                        ("recv", "from")
                    };
                    if send {
                        s.sends += 1;
                    } else {
                        s.recvs += 1;
                    }
                    let args = format!(
                        "{{\"{peer}\":{},\"tag\":{},\"context\":{},\"bytes\":{},\"seq\":{}}}",
                        r.a, r.b, r.c, r.d, r.e
                    );
                    ev(
                        out,
                        format!("{{\"ph\":\"i\",\"s\":\"t\",\"name\":\"{what}\",\"cat\":\"message\",\"pid\":{pid},\"tid\":0,\"ts\":{ts},\"args\":{args}}}"),
                    )?;
                    match ids.get(&key) {
                        Some(id) if received.contains(id) => {
                            if send {
                                format!("{{\"ph\":\"s\",\"id\":{id},\"name\":\"message\",\"cat\":\"message\",\"pid\":{pid},\"tid\":0,\"ts\":{ts}}}")
                            } else {
                                s.flows += 1;
                                format!("{{\"ph\":\"f\",\"bp\":\"e\",\"id\":{id},\"name\":\"message\",\"cat\":\"message\",\"pid\":{pid},\"tid\":0,\"ts\":{ts}}}")
                            }
                        }
                        _ => continue,
                    }
                }
                Kind::FlushEnd => {
                    if pid == 0 {
                        s.epochs += 1;
                        s.paused_ns += r.d;
                    }
                    format!("{{\"ph\":\"i\",\"s\":\"p\",\"name\":\"trace flush {} (pause of {} us removed)\",\"cat\":\"trace\",\"pid\":{pid},\"tid\":0,\"ts\":{ts}}}", r.a, us(r.d as i64))
                }
                Kind::Unsync => {
                    format!("{{\"ph\":\"i\",\"s\":\"p\",\"name\":\"local trace write at the hard cap ({} us removed; timing unsynchronised)\",\"cat\":\"trace\",\"pid\":{pid},\"tid\":0,\"ts\":{ts}}}", us(r.d as i64))
                }
                // `read_dir` has turned every call record into its enter and leave
                Kind::FlushBegin | Kind::Clock | Kind::Finish | Kind::Call => continue,
            };
            ev(out, line)?;
        }
    }
    out.write_all(b"\n]}\n")?;
    out.flush()?;
    progress(&format!(
        "{} ranks, {} records, {} calls, {} messages sent, {} received, {} paired",
        s.ranks, s.records, s.calls, s.sends, s.recvs, s.flows
    ));
    for r in unfinished(traces) {
        progress(&format!("warning: rank {r}: {UNFINISHED}"));
    }
    if s.moved.recvs > 0 {
        progress(&format!(
            "{} receives moved later, by at most {} us, so that none ends before its send \
             (the error of the clock offsets)",
            s.moved.recvs,
            us(s.moved.max_ns as i64)
        ));
    }
    Ok(s)
}

/// Nanoseconds as the microseconds the format wants, exactly (three decimals).
fn us(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

/// Every record of a trace that fails the tracer's invariants, as messages (empty:
/// the trace is sound): every enter has its leave on the same rank, properly nested;
/// every receive pairs with one send of the same size; every rank records the same
/// flush epochs with the same pause.
pub fn check(traces: &[RankTrace]) -> Vec<String> {
    // first, as it explains much of what may follow
    let mut bad: Vec<String> = unfinished(traces)
        .into_iter()
        .map(|r| format!("rank {r}: {UNFINISHED}"))
        .collect();
    let mut sends: HashMap<MsgKey, u64> = HashMap::new();
    for t in traces {
        let mut stack = Vec::new();
        for r in &t.records {
            match r.kind {
                Kind::Enter => stack.push(r.op),
                Kind::Leave if stack.pop() != Some(r.op) => {
                    bad.push(format!(
                        "rank {}: leave of {:?} without its enter",
                        t.rank,
                        r.call()
                    ));
                }
                Kind::Send if sends.insert(sent_key(t.rank, r), r.d).is_some() => {
                    bad.push(format!("rank {}: send {:?} recorded twice", t.rank, r));
                }
                _ => {}
            }
        }
        if !stack.is_empty() {
            // outermost first: a rank stopped in a call (a hang) names where it waited
            let names: Vec<&str> = stack
                .iter()
                .map(|op| Op::from_u8(*op).map_or("an unknown call", Op::name))
                .collect();
            bad.push(format!("rank {}: never left {}", t.rank, names.join(" > ")));
        }
    }
    for t in traces {
        for r in t.records.iter().filter(|r| r.kind == Kind::Recv) {
            match sends.remove(&recv_key(t.rank, r)) {
                Some(len) if len == r.d => {}
                Some(len) => bad.push(format!(
                    "rank {}: receive of {} bytes paired with a send of {len}",
                    t.rank, r.d
                )),
                None => bad.push(format!(
                    "rank {}: a receive from rank {} (tag {}, context {}, {} bytes, number {} \
                     on its channel) has no send in the trace",
                    t.rank, r.a, r.b, r.c, r.d, r.e
                )),
            }
        }
    }
    // messages sent and never received are legal (the program may not receive them),
    // but not in the tests; report them separately through `unreceived`
    let epochs = |t: &RankTrace| -> Vec<(u32, u64)> {
        t.records
            .iter()
            .filter(|r| r.kind == Kind::FlushEnd)
            .map(|r| (r.a, r.d))
            .collect()
    };
    if let Some(t0) = traces.first() {
        let e0 = epochs(t0);
        for t in &traces[1..] {
            if epochs(t) != e0 {
                bad.push(format!(
                    "rank {} flushed at epochs {:?}, rank 0 at {:?}",
                    t.rank,
                    epochs(t),
                    e0
                ));
            }
        }
    }
    bad
}

/// Sends no receive paired with, as (source, destination, context, tag, number).
pub fn unreceived(traces: &[RankTrace]) -> Vec<MsgKey> {
    let mut sends: HashSet<MsgKey> = HashSet::new();
    for t in traces {
        for r in t.records.iter().filter(|r| r.kind == Kind::Send) {
            sends.insert(sent_key(t.rank, r));
        }
    }
    for t in traces {
        for r in t.records.iter().filter(|r| r.kind == Kind::Recv) {
            sends.remove(&recv_key(t.rank, r));
        }
    }
    let mut v: Vec<MsgKey> = sends.into_iter().collect();
    v.sort_unstable();
    v
}

/// What a trace without its `Finish` record means ([`unfinished`]).
pub const UNFINISHED: &str = "the trace ends without its Finish record: the rank \
    stopped before finalize (an abort, a time limit, a kill; its last call, if any, \
    never left) or its file was cut short; a rank killed outright lacks its last events";

/// The ranks whose trace has no `Finish` record: each rank writes one at finalize, so
/// a rank that died, or a file cut short, lacks it.
pub fn unfinished(traces: &[RankTrace]) -> Vec<u32> {
    traces
        .iter()
        .filter(|t| finish(t).is_none())
        .map(|t| t.rank)
        .collect()
}

/// The last record of a rank's trace, which says how much memory the buffer held at
/// most (`Finish`).
pub fn finish(t: &RankTrace) -> Option<&Record> {
    t.records.iter().rev().find(|r| r.kind == Kind::Finish)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts: u64, kind: Kind, op: u8, a: u32, d: u64, e: u64) -> Record {
        Record {
            ts,
            kind,
            op,
            a,
            b: 5,
            c: 0,
            d,
            e,
        }
    }

    #[test]
    fn progress_reads_in_kib_or_tenths_of_a_mib() {
        assert_eq!(read_line(21 << 10, 63 << 10), "read 21 of 63 KiB");
        assert_eq!(read_line(0, 100), "read 0 of 1 KiB");
        assert_eq!(read_line(421 << 10, 1536 << 10), "read 0.4 of 1.5 MiB");
        assert_eq!(read_line(3 << 20, 150 << 20), "read 3.0 of 150.0 MiB");
    }

    #[test]
    fn pauses_come_out_and_offsets_go_in() {
        let t = RankTrace {
            rank: 1,
            size: 2,
            records: vec![
                rec(0, Kind::Clock, 0, 0, 100, 0),
                rec(10, Kind::Enter, Op::Send as u8, 0, 0, 0),
                rec(20, Kind::FlushBegin, 0, 1, 0, 0),
                rec(1020, Kind::FlushEnd, 0, 1, 1000, 1),
                rec(1020, Kind::Clock, 0, 1, 90, 0),
                rec(1030, Kind::Leave, Op::Send as u8, 0, 0, 0),
            ],
            written: 6,
        };
        assert_eq!(timeline(&t), vec![100, 110, 120, 120, 120, 120]);
    }

    #[test]
    fn a_clock_sample_far_less_accurate_than_the_next_gives_way() {
        let t = |first_err: u64| RankTrace {
            rank: 1,
            size: 2,
            records: vec![
                // at start-up: offset 100, error `first_err`
                rec(0, Kind::Clock, 0, 0, 100, first_err),
                rec(10, Kind::Enter, Op::Send as u8, 0, 0, 0),
                rec(20, Kind::Leave, Op::Send as u8, 0, 0, 0),
                // at a flush: offset 90, error 200
                rec(30, Kind::Clock, 0, 1, 90, 200),
                rec(40, Kind::Enter, Op::Send as u8, 0, 0, 0),
            ],
            written: 5,
        };
        // as accurate, or less accurate within `WORSE` times: its own offset
        assert_eq!(timeline(&t(200)), vec![100, 110, 120, 120, 130]);
        assert_eq!(timeline(&t(200 * WORSE)), vec![100, 110, 120, 120, 130]);
        // far less accurate: the flush's offset from the start
        assert_eq!(timeline(&t(200 * WORSE + 1)), vec![90, 100, 110, 120, 130]);
    }

    #[test]
    fn no_receive_ends_before_its_send() {
        let (send, recv) = (Op::Send as u8, Op::Recv as u8);
        let rank = |rank, records: Vec<Record>| RankTrace {
            rank,
            size: 2,
            written: records.len() as u64,
            records,
        };
        let traces = vec![
            rank(
                0,
                vec![
                    // a message to itself, received before its send is recorded
                    rec(50, Kind::Recv, 0, 0, 8, 0),
                    rec(60, Kind::Send, 0, 0, 8, 0),
                    rec(100, Kind::Send, 0, 1, 8, 0),
                    // the answer: 2 ns after rank 1's send on its own clock, which
                    // moves by 10 ns below; rank 0 is walked first and waits here
                    rec(112, Kind::Recv, 0, 1, 8, 0),
                    rec(115, Kind::Leave, recv, 0, 0, 0),
                ],
            ),
            rank(
                1,
                vec![
                    rec(80, Kind::Enter, recv, 0, 0, 0),
                    // 10 ns before its send on the common clock
                    rec(90, Kind::Recv, 0, 0, 8, 0),
                    rec(95, Kind::Leave, recv, 0, 0, 0),
                    rec(110, Kind::Send, 0, 0, 8, 0),
                    rec(120, Kind::Enter, send, 0, 0, 0),
                    // the offset measured again: the move ends, and the time holds
                    // still rather than run back
                    rec(125, Kind::Clock, 0, 0, 0, 0),
                    rec(140, Kind::Leave, send, 0, 0, 0),
                ],
            ),
        ];
        let (times, moved) = timelines(&traces);
        assert_eq!(times[0], vec![50, 60, 100, 120, 123]);
        assert_eq!(times[1], vec![80, 100, 105, 120, 130, 130, 140]);
        assert_eq!(
            moved,
            Moved {
                recvs: 2,
                max_ns: 10
            }
        );
        // a trace already in order is left alone
        let fine = vec![traces[1].clone()];
        assert_eq!(timelines(&fine).0[0], timeline(&fine[0]));
        // each rank receiving the other's message before sending its own (no real run
        // does): the walk still ends; one receive stays where it is, and the other,
        // whose send is then known, follows it
        let cycle = vec![
            rank(
                0,
                vec![
                    rec(10, Kind::Recv, 0, 1, 8, 0),
                    rec(20, Kind::Send, 0, 1, 8, 0),
                ],
            ),
            rank(
                1,
                vec![
                    rec(10, Kind::Recv, 0, 0, 8, 0),
                    rec(20, Kind::Send, 0, 0, 8, 0),
                ],
            ),
        ];
        let (times, _) = timelines(&cycle);
        let (a, b) = (vec![10, 20], vec![20, 30]);
        assert!(
            times == [a.clone(), b.clone()] || times == [b, a],
            "{times:?}"
        );
        // the JSON carries the moved times
        let mut out = Vec::new();
        let s = write_json(&traces, &mut out, &mut |_| {}).expect("convert");
        assert_eq!(s.moved, moved);
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains(r#""ph":"f","bp":"e","id":1,"name":"message","cat":"message","pid":1,"tid":0,"ts":0.100"#));
    }

    #[test]
    fn json_pairs_each_message_once() {
        let send = Op::Send as u8;
        let recv = Op::Recv as u8;
        let traces = vec![
            RankTrace {
                rank: 0,
                size: 2,
                records: vec![
                    rec(1, Kind::Enter, send, 0, 0, 0),
                    rec(2, Kind::Send, 0, 1, 8, 0),
                    rec(3, Kind::Leave, send, 0, 0, 0),
                    rec(6, Kind::Finish, 0, 0, 4096, 4),
                ],
                written: 4,
            },
            RankTrace {
                rank: 1,
                size: 2,
                records: vec![
                    rec(1, Kind::Enter, recv, 0, 0, 0),
                    rec(4, Kind::Recv, 0, 0, 8, 0),
                    rec(5, Kind::Leave, recv, 0, 0, 0),
                    rec(6, Kind::Finish, 0, 0, 4096, 4),
                ],
                written: 4,
            },
        ];
        assert!(check(&traces).is_empty(), "{:?}", check(&traces));
        assert!(unreceived(&traces).is_empty());
        let mut out = Vec::new();
        let s = write_json(&traces, &mut out, &mut |_| {}).unwrap();
        assert_eq!((s.calls, s.sends, s.recvs, s.flows), (2, 1, 1, 1));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("\"ph\":\"s\"").count(), 1);
        assert_eq!(text.matches("\"ph\":\"f\"").count(), 1);
        assert!(text.contains("\"name\":\"MPI_Recv\""));
        // a receive without its send is reported
        let mut broken = traces.clone();
        broken[0].records.remove(1);
        assert_eq!(
            check(&broken),
            [
                "rank 1: a receive from rank 0 (tag 5, context 0, 8 bytes, number 0 on its \
              channel) has no send in the trace"
            ]
        );
        assert!(text.contains("\"ts\":0.004"));
        // a rank that died before finalize: said first by the check, and as a warning
        // by the conversion, which still converts
        let mut died = traces.clone();
        died[1].records.pop();
        assert_eq!(unfinished(&died), [1]);
        assert_eq!(check(&died), [format!("rank 1: {UNFINISHED}")]);
        let mut said = Vec::new();
        let s = write_json(&died, &mut Vec::new(), &mut |m| said.push(m.to_owned())).unwrap();
        assert_eq!(s.flows, 1);
        assert!(
            said.contains(&format!("warning: rank 1: {UNFINISHED}")),
            "{said:?}"
        );
    }
}

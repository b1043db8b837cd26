//! The tracer (`RSMPI_TRACE`, `rsmpi::trace`) on real multi-rank jobs of
//! `src/bin/traced.rs`: the trace is complete (every call left, every message paired
//! with its receive, across flushes), its memory stays bounded, every rank flushes at
//! the same epochs with the same pause, collectives appear under their MPI names, and
//! the Perfetto JSON parses with matched flows.

use rsmpi::trace::{chrome, format, CHUNK};
use std::collections::HashMap;
use std::path::Path;

const EXE: &str = env!("CARGO_BIN_EXE_traced");

/// Runs `traced args` on `ranks` ranks with `env`; the job's exit status.
fn job(ranks: u32, args: &[&str], env: &[(&str, &str)]) -> i32 {
    let j = conformance::tool_job(Path::new(EXE), ranks, args, env, 240);
    launcher::run(&j).expect("launch")
}

fn traced(
    name: &str,
    ranks: u32,
    args: &[&str],
    soft: &str,
) -> (std::path::PathBuf, Vec<format::RankTrace>) {
    let dir = conformance::scratch(name);
    let d = dir.to_str().expect("utf-8 path");
    assert_eq!(
        job(
            ranks,
            args,
            &[("RSMPI_TRACE", d), ("RSMPI_TRACE_SOFT", soft)]
        ),
        0
    );
    let traces = format::read_dir(&dir, &mut |_, _| {}).expect("read the trace");
    assert_eq!(traces.len(), ranks as usize);
    (dir, traces)
}

/// A job that dies (rank 1 calls `MPI_Abort` after 40 iterations, with no flush
/// point in them) still leaves rank 1's events: it writes its buffer before it ends
/// the job, without the record of finalize, so the reader knows it stopped early.
#[test]
fn an_aborting_rank_writes_its_last_events() {
    let dir = conformance::scratch("trace-abort");
    let d = dir.to_str().expect("utf-8 path");
    // no barrier in the loop (every 1000): no flush before the abort
    assert_eq!(
        job(3, &["40", "1000", "big", "abort"], &[("RSMPI_TRACE", d)]),
        7
    );
    let traces = format::read_dir(&dir, &mut |_, _| {}).expect("read the trace");
    let t1 = traces.iter().find(|t| t.rank == 1).expect("rank 1's file");
    // its 40 ring messages to rank 2, and their calls
    let sends = t1
        .records
        .iter()
        .filter(|r| r.kind == format::Kind::Send && r.a == 2 && r.b == 1 && r.c == 0)
        .count();
    assert_eq!(sends, 40);
    assert_eq!(count(t1, format::Kind::Finish), 0);
    // the ranks the launcher then stopped (SIGTERM) wrote theirs too, ending in the
    // call each was waiting in: rank 2 in a receive from rank 1, rank 0 in the
    // reduction
    for (r, op) in [(0, format::Op::Allreduce), (2, format::Op::Recv)] {
        let t = traces.iter().find(|t| t.rank == r).expect("rank file");
        assert_eq!(ring_sends(t), 40, "rank {r}'s ring messages");
        assert_eq!(count(t, format::Kind::Finish), 0);
        assert_eq!(
            last_call(t),
            (format::Kind::Enter, op as u8),
            "rank {r} stopped in {}",
            op.name()
        );
    }
    assert_eq!(chrome::unfinished(&traces), [0, 1, 2]);
    assert!(chrome::check(&traces)[0].starts_with("rank "));
    // it converts, and says which ranks stopped early
    let mut said = Vec::new();
    let s = chrome::write_json(&traces, &mut std::io::sink(), &mut |m| {
        said.push(m.to_owned())
    })
    .expect("convert");
    assert!(s.sends >= 40);
    assert!(
        said.iter()
            .any(|m| m == &format!("warning: rank 1: {}", chrome::UNFINISHED)),
        "{said:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A job that hangs (every rank waits for a message never sent, after 40 iterations
/// with no flush point) until its time limit: the launcher stops every rank with
/// SIGTERM, and each writes its events first, ending in the receive it waits in.
#[test]
fn ranks_stopped_by_the_time_limit_write_their_last_events() {
    let dir = conformance::scratch("trace-hang");
    let d = dir.to_str().expect("utf-8 path");
    let j = conformance::tool_job(
        Path::new(EXE),
        3,
        &["40", "1000", "big", "hang"],
        &[("RSMPI_TRACE", d)],
        3,
    );
    assert_eq!(launcher::run(&j).expect("launch"), launcher::TIMEOUT_STATUS);
    let traces = format::read_dir(&dir, &mut |_, _| {}).expect("read the trace");
    assert_eq!(traces.len(), 3);
    for t in &traces {
        assert_eq!(ring_sends(t), 40, "rank {}'s ring messages", t.rank);
        assert_eq!(
            last_call(t),
            (format::Kind::Enter, format::Op::Recv as u8),
            "rank {} stopped in its receive",
            t.rank
        );
    }
    assert_eq!(chrome::unfinished(&traces), [0, 1, 2]);
    let said = chrome::check(&traces);
    for r in 0..3 {
        assert!(
            said.contains(&format!("rank {r}: never left MPI_Recv")),
            "{said:?}"
        );
    }
    // every ring message is paired across the ranks: nothing was lost
    assert!(chrome::unreceived(&traces).is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

/// The messages `t` sent around the ring of `traced` (tag 1, the world's context).
fn ring_sends(t: &format::RankTrace) -> usize {
    t.records
        .iter()
        .filter(|x| x.kind == format::Kind::Send && x.b == 1 && x.c == 0)
        .count()
}

/// The kind and op of `t`'s last enter or leave.
fn last_call(t: &format::RankTrace) -> (format::Kind, u8) {
    let r = t
        .records
        .iter()
        .rev()
        .find(|x| matches!(x.kind, format::Kind::Enter | format::Kind::Leave))
        .expect("calls");
    (r.kind, r.op)
}

fn count(t: &format::RankTrace, k: format::Kind) -> usize {
    t.records.iter().filter(|r| r.kind == k).count()
}

#[test]
fn trace_is_complete_paired_and_converts_to_perfetto_json() {
    let (dir, traces) = traced("trace-complete", 3, &["600", "25"], "64K");
    let bad = chrome::check(&traces);
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(
        chrome::unreceived(&traces).is_empty(),
        "{:?}",
        chrome::unreceived(&traces)
    );
    for t in &traces {
        // 600 sendrecvs, 75 rounds of Irecv/Isend/Waitall/Send/Probe/Recv, barriers
        assert!(
            count(t, format::Kind::Enter) >= 600 + 75 * 6,
            "rank {}",
            t.rank
        );
        // 600 ring messages + 75 large + 75 probed + 75 into a strided view, plus
        // the collectives' own
        assert!(count(t, format::Kind::Send) >= 825);
        assert!(count(t, format::Kind::Recv) >= 825);
        // the strided view's (received into the library's buffer, then unpacked)
        assert_eq!(
            t.records
                .iter()
                .filter(|r| r.kind == format::Kind::Recv && r.b == 4 && r.c == 0)
                .count(),
            75,
            "rank {}",
            t.rank
        );
        // collectives by name: the barrier before the loop and 24 in it, one
        // reduction at the end
        let calls = |op| {
            t.records
                .iter()
                .filter(|r| r.kind == format::Kind::Enter && r.call() == Some(op))
                .count()
        };
        assert_eq!(calls(format::Op::Barrier), 25, "rank {}", t.rank);
        assert_eq!(calls(format::Op::Allreduce), 1, "rank {}", t.rank);
        assert_eq!(format::Op::Allreduce.name(), "MPI_Allreduce");
        // the 64 KiB soft threshold is crossed several times: flushes that wrote
        assert!(count(t, format::Kind::FlushEnd) >= 3, "rank {}", t.rank);
        assert_eq!(count(t, format::Kind::Unsync), 0);
        let fin = chrome::finish(t).expect("a Finish record");
        assert!(fin.d as usize <= (64 << 10) + CHUNK, "peak {} bytes", fin.d);
        assert_eq!(fin.e, t.written, "records written = records read");
        // the point-to-point calls were written as one record each, read as two
        assert!(t.records.len() as u64 > t.written + 600);
        // the sequence numbers of each channel run 0, 1, 2, ... across flushes
        let mut next: HashMap<(u32, u32, i32), u64> = HashMap::new();
        for r in t.records.iter().filter(|r| r.kind == format::Kind::Send) {
            let n = next.entry((r.a, r.c, r.b)).or_insert(0);
            assert_eq!(r.e, *n);
            *n += 1;
        }
        // the reconstructed timeline never runs backwards
        let tl = chrome::timeline(t);
        if let Some(i) = (1..tl.len()).find(|&i| tl[i - 1] > tl[i]) {
            panic!(
                "rank {}: time runs backwards at record {i}: {:?} at {} after {:?} at {}",
                t.rank,
                t.records[i],
                tl[i],
                t.records[i - 1],
                tl[i - 1]
            );
        }
    }
    // the JSON: parses, every flow's start has its end, calls balance on each rank
    let mut out = Vec::new();
    let s = chrome::write_json(&traces, &mut out, &mut |_| {}).expect("convert");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
    let evs = v["traceEvents"].as_array().expect("traceEvents");
    let mut starts = HashMap::new();
    let mut ends = HashMap::new();
    let mut depth: HashMap<u64, i64> = HashMap::new();
    let ts = |e: &serde_json::Value| e["ts"].as_f64().expect("ts");
    for e in evs {
        let pid = e["pid"].as_u64().expect("pid");
        match e["ph"].as_str().expect("ph") {
            "s" => assert!(starts.insert(e["id"].as_u64().unwrap(), ts(e)).is_none()),
            "f" => assert!(ends.insert(e["id"].as_u64().unwrap(), ts(e)).is_none()),
            "B" => *depth.entry(pid).or_default() += 1,
            "E" => {
                let d = depth.entry(pid).or_default();
                *d -= 1;
                assert!(*d >= 0, "an end before its begin on rank {pid}");
            }
            _ => {}
        }
    }
    assert!(depth.values().all(|d| *d == 0), "{depth:?}");
    assert_eq!(starts.len(), ends.len());
    assert_eq!(starts.len() as u64, s.flows);
    assert_eq!(s.flows, s.sends);
    assert!(starts.keys().all(|id| ends.contains_key(id)));
    // no arrow points back in time: a receive whose rank's clock offset put it before
    // its send was moved to the send (`chrome::timelines`)
    for (id, sent) in &starts {
        assert!(
            ends[id] >= *sent,
            "message {id} received at {} before it was sent at {sent}",
            ends[id]
        );
    }
    assert!(s.epochs >= 3 && s.paused_ns > 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// A rendezvous message whose receive completes after a later eager one on its
/// channel (received normally, or taken first by a matched probe), and a message sent
/// after a cancelled one on its channel (the programs
/// of `src/bin/errors.rs`, clean twins): every receive is paired with its own send,
/// because the tracer numbers a channel's messages in the order MPI matches them.
/// The cancelled message is the one send never received.
#[test]
fn receives_pair_with_their_own_sends_in_match_order() {
    for (case, unreceived) in [("order", 0), ("probe-order", 0), ("cancel", 1)] {
        let dir = conformance::scratch(&format!("trace-{case}"));
        let d = dir.to_str().expect("utf-8 path");
        let j = conformance::tool_job(
            Path::new(env!("CARGO_BIN_EXE_errors")),
            2,
            &[case, "ok"],
            &[("RSMPI_TRACE", d)],
            120,
        );
        assert_eq!(launcher::run(&j).expect("launch"), 0, "{case}");
        let traces = format::read_dir(&dir, &mut |_, _| {}).expect("read the trace");
        let bad = chrome::check(&traces);
        assert!(bad.is_empty(), "{case}: {bad:#?}");
        let left = chrome::unreceived(&traces);
        assert_eq!(left.len(), unreceived, "{case}: {left:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A receive posted while recording that completes during a flush, while the
/// tracer's own traffic runs and nothing else is recorded (`traced ... straddle`:
/// 1 MiB messages received across barriers, each a flush point), keeps its
/// `Recv` record: its sender recorded the `Send`. Before, the record was dropped in
/// 1–6 of 300 messages.
#[test]
fn a_receive_completed_in_a_flush_keeps_its_record() {
    let (dir, traces) = traced("trace-straddle", 2, &["300", "1", "straddle"], "4K");
    let bad = chrome::check(&traces);
    assert!(bad.is_empty(), "{bad:#?}");
    let left = chrome::unreceived(&traces);
    assert!(left.is_empty(), "{} sends unreceived: {left:?}", left.len());
    let t0 = traces.iter().find(|t| t.rank == 0).expect("rank 0's file");
    let recvs = t0
        .records
        .iter()
        .filter(|r| r.kind == format::Kind::Recv && r.a == 1 && r.b == 5 && r.c == 0)
        .count();
    assert_eq!(recvs, 300);
    assert!(count(t0, format::Kind::FlushEnd) >= 5);
    let _ = std::fs::remove_dir_all(dir);
}

/// Every wait is recorded, a send's that completed as it started too: that request
/// is the one a wait with no tool on finishes without a visit to the library state,
/// so a wait that did not ask whether a tool is on first would skip its record
/// (`traced ... waits`: 200 rounds of an immediate send and receive of 8 bytes,
/// each waited for alone; `docs/performance.md`, "The tools' switch found by the
/// state's own test").
#[test]
fn every_wait_is_recorded() {
    let (dir, traces) = traced("trace-waits", 2, &["200", "1000", "waits"], "1M");
    assert!(chrome::check(&traces).is_empty());
    for t in &traces {
        let waits = t
            .records
            .iter()
            .filter(|r| r.kind == format::Kind::Enter && r.call() == Some(format::Op::Wait))
            .count();
        assert_eq!(waits, 2 * 200, "rank {}", t.rank);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Every test is recorded, those that find the receive unfinished and the one that
/// completes it: with the tools on, a test's two halves run out of line around the
/// library's visit, the completing test's end after its request is finished
/// (`traced ... tests`: 200 receives, each tested three times before its message is
/// sent and then until it completes; each rank writes how many tests it made).
#[test]
fn every_test_is_recorded() {
    let made = conformance::scratch("trace-tests-made").join("made");
    let out = format!("out={}", made.display());
    let (dir, traces) = traced("trace-tests", 2, &["200", "1000", "tests", &out], "1M");
    assert!(chrome::check(&traces).is_empty());
    for t in &traces {
        let file = format!("{}.{}", made.display(), t.rank);
        let n: usize = std::fs::read_to_string(&file)
            .expect("the rank's count of tests")
            .trim()
            .parse()
            .expect("a number");
        assert!(n >= 4 * 200, "rank {}: {n} tests", t.rank);
        let tests = t
            .records
            .iter()
            .filter(|r| r.kind == format::Kind::Enter && r.call() == Some(format::Op::Test))
            .count();
        assert_eq!(tests, n, "rank {}", t.rank);
    }
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(made.parent().expect("scratch"));
}

#[test]
fn trace_memory_stays_under_the_soft_threshold_plus_one_chunk() {
    // 2 ranks x 210 000 sendrecvs (a send, a receive and the call's one record each)
    // and 2 100 barriers: over 100 MiB of events through a 1 MiB soft threshold
    let (dir, traces) = traced("trace-bounded", 2, &["210000", "100", "big"], "1M");
    let bytes: u64 = (0..2)
        .map(|r| std::fs::metadata(format::rank_file(&dir, r)).unwrap().len())
        .sum();
    assert!(bytes >= 100 << 20, "only {} MiB of events", bytes >> 20);
    assert!(chrome::check(&traces).is_empty());
    for t in &traces {
        let fin = chrome::finish(t).expect("a Finish record");
        assert!(
            fin.d as usize <= (1 << 20) + CHUNK,
            "rank {}: peak {} bytes",
            t.rank,
            fin.d
        );
        assert!(count(t, format::Kind::FlushEnd) >= 40);
        assert_eq!(count(t, format::Kind::Unsync), 0);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sync_point_flushes_a_point_to_point_program() {
    let (dir, traces) = traced("trace-sync", 2, &["400", "20", "sync"], "16K");
    assert!(
        chrome::check(&traces).is_empty(),
        "{:?}",
        chrome::check(&traces)
    );
    for t in &traces {
        assert!(count(t, format::Kind::FlushEnd) >= 2);
        let syncs = t
            .records
            .iter()
            .filter(|r| r.kind == format::Kind::Enter && r.call() == Some(format::Op::SyncPoint))
            .count();
        assert_eq!(syncs, 20);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `traced ITERS 1000000` (no collective) on two ranks with the soft threshold
/// and hard cap given; checks that the trace is sound and that each rank held at most
/// `cap` bytes plus one chunk; the traces.
fn capped(name: &str, iters: &str, soft: &str, hard: &str, cap: usize) -> Vec<format::RankTrace> {
    let dir = conformance::scratch(name);
    let d = dir.to_str().unwrap();
    let env = [
        ("RSMPI_TRACE", d),
        ("RSMPI_TRACE_SOFT", soft),
        ("RSMPI_TRACE_HARD", hard),
    ];
    assert_eq!(job(2, &[iters, "1000000"], &env), 0);
    let traces = format::read_dir(&dir, &mut |_, _| {}).unwrap();
    assert!(chrome::check(&traces).is_empty());
    for t in &traces {
        assert!(chrome::finish(t).unwrap().d as usize <= cap + CHUNK);
    }
    let _ = std::fs::remove_dir_all(dir);
    traces
}

#[test]
fn hard_cap_writes_alone_and_says_so() {
    // no collective for 400 iterations, a hard cap of 32 KiB: local writes
    for t in capped("trace-hard", "400", "8K", "32K", 32 * 1024) {
        assert!(count(&t, format::Kind::Unsync) >= 2, "rank {}", t.rank);
    }
}

#[test]
fn a_buffer_of_a_few_bytes_is_taken_as_a_page() {
    // a hard cap smaller than a record: the buffer is written alone every ~4 KiB
    // (the smallest size), not for every record, and the trace stays sound
    for t in capped("trace-tiny", "50", "1", "8", 4096) {
        let (unsync, records) = (count(&t, format::Kind::Unsync), t.records.len());
        assert!(unsync >= 1, "rank {}", t.rank);
        assert!(
            unsync * 50 < records,
            "rank {}: {unsync} of {records}",
            t.rank
        );
    }
}

#[test]
fn bad_trace_settings_end_the_job_with_an_error() {
    let dir = conformance::scratch("trace-bad");
    let d = dir.to_str().unwrap();
    assert_ne!(
        job(
            2,
            &["10", "5"],
            &[("RSMPI_TRACE", d), ("RSMPI_TRACE_SOFT", "lots")]
        ),
        0
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_race_checkers_own_messages_stay_out_of_the_trace() {
    let sends = |races: bool| -> Vec<usize> {
        let dir = conformance::scratch("trace-with-races");
        let d = dir.to_str().unwrap();
        let mut env = vec![("RSMPI_TRACE", d), ("RSMPI_TRACE_SOFT", "32K")];
        if races {
            env.push(("RSMPI_CHECK", "races"));
        }
        assert_eq!(job(3, &["200", "20"], &env), 0);
        let traces = format::read_dir(&dir, &mut |_, _| {}).unwrap();
        assert!(chrome::check(&traces).is_empty());
        assert!(chrome::unreceived(&traces).is_empty());
        let _ = std::fs::remove_dir_all(dir);
        traces
            .iter()
            .map(|t| count(t, format::Kind::Send))
            .collect()
    };
    // the checker sends a note ahead of every message: none of them is recorded
    assert_eq!(sends(true), sends(false));
}

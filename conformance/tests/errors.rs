//! The error checks (`RSMPI_CHECK=errors`) on the programs of `src/bin/errors.rs`,
//! each a real two-rank job: one program per error class with its expected JSON
//! report (class, rank, call, file and line), and a clean twin of each that reports
//! nothing.

use std::path::Path;

const EXE: &str = env!("CARGO_BIN_EXE_errors");
const SRC: &str = include_str!("../src/bin/errors.rs");
const FILE: &str = "conformance/src/bin/errors.rs";

/// The line of the program that carries the marker `// @case`.
fn line_of(case: &str) -> u64 {
    let marker = format!("// @{case}");
    let hits: Vec<usize> = SRC
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with(&marker))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(hits.len(), 1, "one line marked {marker}");
    hits[0] as u64
}

/// Runs `errors case [ok]`; (exit status, every JSON line of every rank, stderr).
fn run(case: &str, ok: bool) -> (i32, Vec<serde_json::Value>) {
    let dir = conformance::scratch(&format!("errors-{case}-{ok}"));
    let log = dir.to_str().expect("utf-8 path");
    let env = [("RSMPI_CHECK", "errors"), ("RSMPI_CHECK_LOG", log)];
    let args: Vec<&str> = if ok { vec![case, "ok"] } else { vec![case] };
    let j = conformance::tool_job(Path::new(EXE), 2, &args, &env, 60);
    let code = launcher::run(&j).expect("launch");
    let mut lines = Vec::new();
    for r in 0..2 {
        if let Ok(text) = std::fs::read_to_string(dir.join(format!("rank-{r}.jsonl"))) {
            lines.extend(
                text.lines()
                    .map(|l| serde_json::from_str(l).expect("a JSON line")),
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    (code, lines)
}

/// Runs the case and its clean twin: the case gives exactly one report, of `class`
/// at `rank` in `call` on the marked line, and ends with status `fatal` (nonzero or
/// zero); the twin gives none and succeeds. Returns the report.
fn check(case: &str, class: &str, rank: u64, call: &str, fatal: bool) -> serde_json::Value {
    let (code, lines) = run(case, false);
    assert_eq!(code != 0, fatal, "{case}: exit status {code}");
    assert_eq!(lines.len(), 1, "{case}: one report, got {lines:?}");
    let v = lines.into_iter().next().unwrap();
    assert_eq!(v["check"], "error", "{v}");
    assert_eq!(v["class"], class, "{v}");
    assert_eq!(v["rank"], rank, "{v}");
    assert_eq!(v["call"], call, "{v}");
    assert_eq!(v["file"], FILE, "{v}");
    assert_eq!(v["line"], line_of(case), "{v}");
    let (code, lines) = run(case, true);
    assert_eq!(code, 0, "{case} ok: exit status");
    assert!(lines.is_empty(), "{case} ok: {lines:?}");
    v
}

#[test]
fn a_request_never_completed_is_reported_at_finalize() {
    check("leak-static", "request-leak", 0, "MPI_Isend", false);
}

#[test]
fn a_request_left_to_its_scope_is_reported_when_the_scope_cancels_it() {
    check("leak-scope", "request-leak", 1, "MPI_Irecv", false);
}

#[test]
fn a_message_never_received_is_reported_by_its_receiver_with_the_send_line() {
    let v = check("unmatched-send", "unmatched-send", 1, "MPI_Send", false);
    assert_eq!(
        (&v["source"], &v["dest"], &v["tag"], &v["count"]),
        (&0.into(), &1.into(), &7.into(), &1.into()),
        "{v}"
    );
}

#[test]
fn a_receive_never_matched_is_reported_at_finalize() {
    // the receive is also a request never completed: two reports, on the same line
    let (code, lines) = run("unmatched-receive", false);
    assert_eq!(code, 0);
    let mut classes: Vec<&str> = lines.iter().map(|v| v["class"].as_str().unwrap()).collect();
    classes.sort_unstable();
    assert_eq!(classes, ["request-leak", "unmatched-receive"], "{lines:?}");
    for v in &lines {
        assert_eq!((&v["rank"], &v["call"]), (&1.into(), &"MPI_Irecv".into()));
        assert_eq!(
            (&v["file"], &v["line"]),
            (&FILE.into(), &line_of("unmatched-receive").into())
        );
    }
    let r = lines
        .iter()
        .find(|v| v["class"] == "unmatched-receive")
        .unwrap();
    assert_eq!((&r["source"], &r["tag"]), (&0.into(), &9.into()), "{r}");
    let (code, lines) = run("unmatched-receive", true);
    assert_eq!((code, lines.len()), (0, 0), "{lines:?}");
}

#[test]
fn a_type_signature_mismatch_is_reported_with_both_signatures() {
    let v = check("type-mismatch", "type-mismatch", 1, "MPI_Recv", false);
    assert_eq!(
        (&v["sent"], &v["received"], &v["at"]),
        (&"4 × f64".into(), &"4 × i64".into(), &0.into()),
        "{v}"
    );
    assert_eq!(
        (&v["source"], &v["send"]["call"]),
        (&0.into(), &"MPI_Send".into()),
        "{v}"
    );
    assert_eq!(v["send"]["file"], FILE);
}

#[test]
fn struct_int_double_twice_matches_int_double_int_double_and_nothing_else() {
    // the twin is MPI's legal case: (i32, f64) × 2 received as (i32, f64, i32, f64),
    // by a message and by a broadcast
    for (case, call) in [("type-struct", "MPI_Irecv"), ("coll-struct", "MPI_Bcast")] {
        let v = check(case, "type-mismatch", 1, call, false);
        assert_eq!(
            (&v["sent"], &v["received"], &v["at"]),
            (
                &"2 × (i32, f64)".into(),
                &"1 × (i32, 2 f64, i32)".into(),
                &2.into()
            ),
            "{v}"
        );
    }
}

#[test]
fn a_message_completed_after_a_later_one_keeps_its_own_send() {
    // a rendezvous message and an eager one on one channel, the eager one's receive
    // completed first: it is paired with its own send (numbered when matched, not
    // when completed), and the twin, whose types agree, reports nothing (it reported
    // two mismatches when receives were numbered as they completed)
    let v = check("order", "type-mismatch", 1, "MPI_Irecv", false);
    assert_eq!(v["sent"], "1 × f64", "{v}");
    assert_eq!(v["send"]["line"], line_of("order-send"), "{v}");
    // the first message taken by a matched probe (its match) and received last
    let v = check("probe-order", "type-mismatch", 1, "MPI_Recv", false);
    assert_eq!(v["sent"], "1 × f64", "{v}");
    assert_eq!(v["send"]["line"], line_of("probe-order-send"), "{v}");
}

#[test]
fn a_cancelled_send_uses_up_its_number_and_is_not_unmatched() {
    // the message after a cancelled one on its channel is paired with its own send,
    // and the cancelled one is not reported as sent and never received
    let v = check("cancel", "type-mismatch", 1, "MPI_Recv", false);
    assert_eq!(v["sent"], "1 × i32", "{v}");
    assert_eq!(v["send"]["line"], line_of("cancel-send"), "{v}");
}

#[test]
fn calls_that_end_the_job_are_reported_with_their_error_class() {
    for (case, error, rank, call) in [
        ("bad-rank", "invalid-rank", 0, "MPI_Send"),
        ("truncation", "truncation", 1, "MPI_Recv"),
        ("bsend-overflow", "buffered-send", 0, "MPI_Bsend"),
    ] {
        let v = check(case, "usage", rank, call, true);
        assert_eq!(v["error"], error, "{v}");
        assert!(!v["message"].as_str().unwrap().is_empty());
    }
}

#[test]
fn a_collective_type_mismatch_is_reported_by_the_receiving_rank() {
    let v = check("coll-type", "type-mismatch", 1, "MPI_Bcast", false);
    assert_eq!(
        (&v["sent"], &v["received"], &v["at"], &v["source"]),
        (&"4 × f64".into(), &"4 × i64".into(), &0.into(), &0.into()),
        "{v}"
    );
    assert_eq!(
        (&v["send"]["call"], &v["send"]["file"], &v["send"]["rank"]),
        (&"MPI_Bcast".into(), &FILE.into(), &0.into()),
        "{v}"
    );
}

#[test]
fn a_reduction_reports_the_contribution_that_differs_from_the_roots() {
    let v = check("coll-reduce", "type-mismatch", 1, "MPI_Allreduce", false);
    assert_eq!(
        (&v["sent"], &v["received"], &v["source"]),
        (&"2 × f64".into(), &"2 × i64".into(), &0.into()),
        "{v}"
    );
}

#[test]
fn collectives_that_cannot_run_end_the_job_with_their_report() {
    let v = check("coll-amount", "collective-mismatch", 0, "MPI_Gather", true);
    assert_eq!(
        (&v["source"], &v["sent_bytes"], &v["received_bytes"]),
        (&1.into(), &24.into(), &16.into()),
        "{v}"
    );
    let v = check("coll-call", "collective-mismatch", 1, "MPI_Reduce", true);
    assert_eq!(
        (&v["collective"], &v["other"]["call"], &v["other"]["rank"]),
        (
            &"MPI_Reduce (root 0, sum)".into(),
            &"MPI_Bcast".into(),
            &0.into()
        ),
        "{v}"
    );
    let v = check("coll-root", "collective-mismatch", 1, "MPI_Bcast", true);
    assert_eq!(v["collective"], "MPI_Bcast (root 1)", "{v}");
    assert_eq!(v["other"]["line"], line_of("coll-root"), "{v}");
}

#[test]
fn an_immediate_collective_is_checked_when_its_request_completes() {
    // rank 1 receives u32 from both ranks into f32: one report, naming the first
    let v = check("icoll-type", "type-mismatch", 1, "MPI_Iallgather", false);
    assert_eq!(
        (&v["sent"], &v["received"], &v["source"], &v["more"]),
        (&"2 × u32".into(), &"2 × f32".into(), &0.into(), &1.into()),
        "{v}"
    );
    // a blocking collective never matches a nonblocking one
    let v = check("icoll-mixed", "collective-mismatch", 1, "MPI_Ibcast", true);
    assert_eq!(
        (&v["collective"], &v["other"]["call"]),
        (&"MPI_Ibcast (root 0)".into(), &"MPI_Bcast".into()),
        "{v}"
    );
}

#[test]
fn the_suites_cancelled_sends_give_no_report() {
    // 30 sends cancelled while their receiver races to take them (some cancels win,
    // some lose), then a message on a channel of its own: no message is reported as
    // sent and never received (before the receivers passed over withdrawn messages'
    // numbers, 1-4 of the cancelled sends were, run by run)
    suite_gives_no_report(&["cancel_send_exactly_one_outcome"]);
}

#[test]
fn the_suites_collectives_give_no_report() {
    // every collective and root, blocking and immediate (derived datatypes, in-place
    // forms, a gather root with room to spare), user operations, communicators split
    // and duplicated, immediate collectives completed in different orders on
    // different ranks: no false positive, and the results are still right (the suite
    // checks them)
    suite_gives_no_report(&[
        "coll_every_collective_and_root_3_ranks",
        "coll_in_place_with_user_operations_4_ranks",
        "coll_split_dup_cartesian_with_user_traffic_6_ranks",
        "coll_immediate_outstanding_reordered_and_progress_4_ranks",
        "coll_immediate_user_ops_completed_in_different_orders_4_ranks",
    ]);
}

/// Runs each case of the conformance suite under `RSMPI_CHECK=errors`: it passes (the
/// suite checks its results) and the check reports nothing.
fn suite_gives_no_report(cases: &[&str]) {
    for &case in cases {
        let dir = conformance::scratch(&format!("errors-suite-{case}"));
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_conformance"))
            .arg(case)
            .env("RSMPI_CHECK", "errors")
            .env("RSMPI_CHECK_LOG", &dir)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run the suite");
        assert!(status.success(), "{case}: {status}");
        let logs: Vec<_> = std::fs::read_dir(&dir)
            .expect("the log directory")
            .map(|e| e.expect("entry").path())
            .collect();
        assert!(!logs.is_empty(), "{case}: the check wrote no log");
        for l in logs {
            let text = std::fs::read_to_string(&l).expect("a log");
            assert!(text.is_empty(), "{case}: {}: {text}", l.display());
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_bad_setting_ends_the_job() {
    let j = conformance::tool_job(
        Path::new(EXE),
        2,
        &["leak-static", "ok"],
        &[("RSMPI_CHECK", "errors,typo")],
        60,
    );
    assert_ne!(launcher::run(&j).expect("launch"), 0);
}

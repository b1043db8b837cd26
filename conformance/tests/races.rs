//! The message-race checker (`RSMPI_CHECK=races`) on the programs of
//! `src/bin/races.rs`, each a real multi-rank job: MPIRace-Check's Fig. 2 cases (a race
//! only in (d)) and its five-rank Fig. 1 scenario; twenty programs pairing the four
//! receive calls two at a time, each with exactly one race, and a race-free twin of
//! each with none (next to the "flag every ANY_SOURCE receive" baseline); every racy
//! program run twice with the arrival order flipped by a delay, with the same report.

use std::collections::BTreeSet;
use std::path::Path;

const EXE: &str = env!("CARGO_BIN_EXE_races");

/// One race report: (rank, receive file:line, receive tag, the two messages' sources,
/// the receive's call).
type Report = (u64, String, String, BTreeSet<u64>, String);

/// The source of the message each report's receive took (which depends on timing).
type Took = Vec<u64>;

/// Runs `races case` on `ranks` ranks under the checker; its reports, sorted.
fn reports(case: &str, ranks: u32, delay: Option<u32>) -> Vec<Report> {
    reports_took(case, ranks, delay).0
}

fn reports_took(case: &str, ranks: u32, delay: Option<u32>) -> (Vec<Report>, Took) {
    let dir = conformance::scratch(&format!("races-{case}"));
    let log = dir.to_str().expect("utf-8 path");
    let delay = delay.map(|d| d.to_string());
    let mut env = vec![("RSMPI_CHECK", "races"), ("RSMPI_CHECK_LOG", log)];
    if let Some(d) = &delay {
        env.push(("RACE_DELAY", d));
    }
    let j = conformance::tool_job(Path::new(EXE), ranks, &[case], &env, 60);
    assert_eq!(launcher::run(&j).expect("launch"), 0, "{case}");
    let mut out = Vec::new();
    for r in 0..ranks {
        let text = std::fs::read_to_string(dir.join(format!("rank-{r}.jsonl"))).expect("log");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            assert_eq!(v["check"], "race");
            assert_eq!(v["rank"].as_u64(), Some(r as u64));
            let rcv = &v["receive"];
            let at = format!("{}:{}", rcv["file"].as_str().unwrap(), rcv["line"]);
            assert!(at.starts_with("conformance/src/bin/races.rs:"), "{at}");
            let msgs = v["messages"].as_array().expect("messages");
            assert_eq!(msgs.len(), 2);
            for (i, m) in msgs.iter().enumerate() {
                // a probe saw the message it took, but not the message's note
                if i == 0 && rcv["call"] == "MPI_Probe" {
                    assert!(m["file"].is_null(), "{m}");
                    continue;
                }
                assert!(m["file"].as_str().unwrap().ends_with("races.rs"), "{m}");
                assert!(m["line"].as_u64().unwrap() > 0);
            }
            let srcs = msgs.iter().map(|m| m["source"].as_u64().unwrap()).collect();
            let call = rcv["call"].as_str().unwrap().to_string();
            out.push((
                (r as u64, at, rcv["tag"].to_string(), srcs, call),
                msgs[0]["source"].as_u64().unwrap(),
            ));
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    out.sort();
    out.into_iter().unzip()
}

fn set(v: &[u64]) -> BTreeSet<u64> {
    v.iter().copied().collect()
}

#[test]
fn fig2_only_case_d_races() {
    for c in ["a", "b", "c"] {
        assert_eq!(reports(&format!("fig2-{c}"), 3, None), vec![], "case ({c})");
    }
    let (first, took1) = reports_took("fig2-d", 3, Some(1));
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!((first[0].0, &first[0].3), (0, &set(&[1, 2])));
    // the other arrival order: the same receive, the same two messages
    let (second, took2) = reports_took("fig2-d", 3, Some(2));
    assert_eq!(second, first);
    assert_eq!(
        (took1, took2),
        (vec![2], vec![1]),
        "the delays flip the order"
    );
}

#[test]
fn fig1_race_is_at_j_between_the_messages_of_p3_and_p4() {
    let one = reports("fig1", 5, Some(3));
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(
        (one[0].0, one[0].2.as_str(), &one[0].3),
        (1, "1", &set(&[2, 3]))
    );
    assert_eq!(one[0].4, "MPI_Recv");
    assert_eq!(reports("fig1", 5, Some(2)), one);
    // with `d` on tag 1 too, `k` also races with the message `d` took: a race the
    // paper's check, which looks at the previous receive only, cannot see
    let two = reports("fig1-all-tag-1", 5, Some(3));
    assert_eq!(two.len(), 2, "{two:?}");
    assert!(two.contains(&one[0]));
    assert!(two.iter().any(|r| r.3 == set(&[0, 3])));
}

#[test]
fn wildcard_receives_through_wait_any_and_probes_count_too() {
    for (case, call) in [("waitany", "MPI_Irecv"), ("probe", "MPI_Probe")] {
        let (a, took_a) = reports_took(case, 3, Some(1));
        assert_eq!(a.len(), 1, "{case}: {a:?}");
        assert_eq!((a[0].0, &a[0].3, a[0].4.as_str()), (0, &set(&[1, 2]), call));
        let (b, took_b) = reports_took(case, 3, Some(2));
        assert_eq!(b, a, "{case}");
        assert_ne!(took_a, took_b, "{case}: the delays flip the order");
    }
}

const KINDS: [&str; 4] = ["recv", "sendrecv", "replace", "irecv"];

fn pairs() -> Vec<(&'static str, &'static str)> {
    let mut v = Vec::new();
    for (i, x) in KINDS.iter().enumerate() {
        for y in &KINDS[i..] {
            v.push((*x, *y));
        }
    }
    v
}

#[test]
fn twenty_receive_pairings_each_race_once_in_either_order() {
    let mut programs = 0;
    for (x, y) in pairs() {
        for variant in ["race", "anytag"] {
            let case = format!("{x}-{y}-{variant}");
            let (a, took_a) = reports_took(&case, 3, Some(1));
            assert_eq!(a.len(), 1, "{case}: {a:?}");
            assert_eq!((a[0].0, &a[0].3), (0, &set(&[1, 2])), "{case}");
            let call = match x {
                "recv" => "MPI_Recv",
                "sendrecv" => "MPI_Sendrecv",
                "replace" => "MPI_Sendrecv_replace",
                _ => "MPI_Irecv",
            };
            assert_eq!(a[0].4, call, "{case}: the race is at the first receive");
            let (b, took_b) = reports_took(&case, 3, Some(2));
            assert_eq!(b, a, "{case}: the report depends on order");
            assert_ne!(took_a, took_b, "{case}: the delays flip the order");
            programs += 1;
        }
    }
    assert_eq!(programs, 20);
}

#[test]
fn race_free_twins_report_nothing_where_the_baseline_flags_all() {
    let (mut ours, mut baseline, mut programs) = (0, 0, 0);
    for (x, y) in pairs() {
        for variant in ["source", "tags"] {
            let case = format!("{x}-{y}-{variant}");
            ours += reports(&case, 3, Some(1)).len();
            // the baseline flags every ANY_SOURCE receive: each twin has at least one
            baseline += 1;
            programs += 1;
        }
    }
    eprintln!(
        "race-free twins: {programs} programs; rsmpi flagged {ours}, the \
         flag-every-ANY_SOURCE baseline {baseline}"
    );
    assert_eq!(programs, 20);
    assert_eq!(ours, 0);
}

#[test]
fn unknown_checks_end_the_job_with_an_error() {
    let env = [("RSMPI_CHECK", "races,nosuchcheck")];
    let j = conformance::tool_job(Path::new(EXE), 3, &["fig2-a"], &env, 60);
    assert_ne!(launcher::run(&j).expect("launch"), 0);
}

#[test]
fn notes_held_back_across_sends_reach_a_receiver_while_the_sender_polls() {
    // the job must end (no hang) and report nothing
    assert!(reports("poll", 2, None).is_empty());
}

#[test]
fn a_wildcard_receive_that_takes_its_own_ranks_message_is_checked() {
    // a send to itself with the race check alone on goes through the checker, as
    // the general copy's does (`blocking_send_checked`)
    let r = reports("self", 2, None);
    assert_eq!(r.len(), 1, "{r:?}");
    let (rank, _, tag, srcs, call) = &r[0];
    assert_eq!((*rank, tag.as_str(), call.as_str()), (0, "1", "MPI_Irecv"));
    assert_eq!(*srcs, set(&[0, 1]));
}

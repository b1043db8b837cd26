//! The deadlock detector (`RSMPI_CHECK=deadlock`) on the programs of
//! `src/bin/deadlocks.rs`, each a real multi-rank job: the `Recv`/`Recv` deadlock is
//! reported as the cycle 0 → 1 → 0 and a three-rank ring as its three edges, within a
//! few seconds, and the job then ends with an error; a potential deadlock (sends
//! that rely on buffering) is found when sends run synchronous; correct programs
//! report nothing; a long wait without a cycle is reported as a hang.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

const EXE: &str = env!("CARGO_BIN_EXE_deadlocks");

/// Runs `deadlocks case`; (exit status, seconds, every JSON line of every rank).
fn run(case: &str, ranks: u32, env: &[(&str, &str)]) -> (i32, f64, Vec<serde_json::Value>) {
    let dir = conformance::scratch(&format!("deadlock-{case}"));
    let log = dir.to_str().expect("utf-8 path");
    let mut all = vec![
        ("RSMPI_CHECK", "deadlock"),
        ("RSMPI_CHECK_TIMEOUT", "0.5"),
        ("RSMPI_CHECK_LOG", log),
    ];
    all.extend_from_slice(env);
    let j = conformance::tool_job(Path::new(EXE), ranks, &[case], &all, 60);
    let t = Instant::now();
    let code = launcher::run(&j).expect("launch");
    let secs = t.elapsed().as_secs_f64();
    let mut lines = Vec::new();
    for r in 0..ranks {
        if let Ok(text) = std::fs::read_to_string(dir.join(format!("rank-{r}.jsonl"))) {
            lines.extend(
                text.lines()
                    .map(|l| serde_json::from_str(l).expect("a JSON line")),
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    (code, secs, lines)
}

/// The edges (rank, waits for) and calls of a deadlock report.
fn cycle(v: &serde_json::Value) -> (BTreeSet<(u64, u64)>, BTreeSet<String>) {
    assert_eq!(v["check"], "deadlock", "{v}");
    let hops = v["cycle"].as_array().expect("cycle");
    for h in hops {
        assert_eq!(h["file"], "conformance/src/bin/deadlocks.rs", "{h}");
        assert!(h["line"].as_u64().unwrap() > 0);
    }
    (
        hops.iter()
            .map(|h| {
                (
                    h["rank"].as_u64().unwrap(),
                    h["waits_for"].as_u64().unwrap(),
                )
            })
            .collect(),
        hops.iter()
            .map(|h| h["call"].as_str().unwrap().to_string())
            .collect(),
    )
}

fn set<T: Ord + Clone>(v: &[T]) -> BTreeSet<T> {
    v.iter().cloned().collect()
}

/// Runs a case that deadlocks: the job must end with an error within 15 s and
/// report; every JSON line of every rank.
fn run_deadlocked(case: &str, ranks: u32, env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let (code, secs, lines) = run(case, ranks, env);
    assert_ne!(code, 0, "{case}: the job must end with an error");
    assert!(secs < 15.0, "{case}: reported after {secs:.1} s");
    assert!(!lines.is_empty(), "{case}: no report");
    lines
}

/// Runs a case that does not deadlock: the job must succeed and report nothing.
fn run_clean(case: &str, ranks: u32) {
    let (code, _, lines) = run(case, ranks, &[]);
    assert_eq!(code, 0, "{case}");
    assert!(lines.is_empty(), "{case}: {lines:?}");
}

#[test]
fn recv_recv_is_the_cycle_0_1_0_and_ends_the_job() {
    let lines = run_deadlocked("recv-recv", 2, &[]);
    for l in &lines {
        assert_eq!(
            cycle(l),
            (set(&[(0, 1), (1, 0)]), set(&["MPI_Recv".to_string()]))
        );
    }
}

#[test]
fn a_three_rank_ring_reports_its_three_edges() {
    let lines = run_deadlocked("ring", 3, &[]);
    for l in &lines {
        assert_eq!(cycle(l).0, set(&[(0, 2), (1, 0), (2, 1)]));
    }
}

#[test]
fn a_collective_against_a_receive_is_a_cycle_through_the_collective() {
    let lines = run_deadlocked("barrier-recv", 2, &[]);
    for l in &lines {
        assert_eq!(
            cycle(l),
            (
                set(&[(0, 1), (1, 0)]),
                set(&["MPI_Barrier".to_string(), "MPI_Recv".to_string()])
            )
        );
    }
}

/// The ranks and what each waits for (`None`: any rank) of a knot report of ranks
/// all in `MPI_Recv`.
fn knot(v: &serde_json::Value) -> BTreeSet<(u64, Option<u64>)> {
    knot_hops(v)
        .into_iter()
        .map(|(rank, waits_for, call, _)| {
            assert_eq!(call, "MPI_Recv", "{v}");
            (rank, waits_for)
        })
        .collect()
}

#[test]
fn wildcard_receives_that_can_never_match_are_reported_as_a_knot() {
    let lines = run_deadlocked("any-all", 3, &[]);
    for l in &lines {
        assert_eq!(knot(l), set(&[(0, None), (1, None), (2, None)]));
    }
    let lines = run_deadlocked("any-mixed", 3, &[]);
    for l in &lines {
        assert_eq!(knot(l), set(&[(0, None), (1, Some(0)), (2, Some(0))]));
    }
}

#[test]
fn a_wildcard_receive_waiting_for_computing_ranks_is_no_deadlock() {
    run_clean("any-late", 3);
}

#[test]
fn buffered_sends_are_a_potential_deadlock_found_by_synchronous_sends() {
    // MPI may buffer the small sends: the program runs, and nothing is reported
    run_clean("send-send", 2);
    // run synchronous, it deadlocks, and the cycle is reported
    let lines = run_deadlocked("send-send", 2, &[("RSMPI_CHECK_SYNC", "1")]);
    for l in &lines {
        assert_eq!(
            cycle(l),
            (set(&[(0, 1), (1, 0)]), set(&["MPI_Send".to_string()]))
        );
    }
}

#[test]
fn correct_programs_report_nothing() {
    for case in ["ordered", "send-send"] {
        run_clean(case, 2);
    }
}

#[test]
fn a_long_wait_without_a_cycle_is_a_hang_not_a_deadlock() {
    let (code, _, lines) = run("late", 2, &[("RSMPI_CHECK_HANG", "1")]);
    assert_eq!(code, 0, "a hang report does not end the job");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let h = &lines[0];
    assert_eq!(h["check"], "hang");
    assert_eq!(
        (h["rank"].as_u64(), h["waits_for"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(h["call"], "MPI_Recv");
}

/// The ranks of a knot report, each with what it waits for (`None`: any of
/// several), its call and the ranks it waits for (`of`, for any of several).
fn knot_hops(v: &serde_json::Value) -> BTreeSet<(u64, Option<u64>, String, Vec<u64>)> {
    assert_eq!(v["check"], "deadlock", "{v}");
    let hops = v["knot"].as_array().expect("knot");
    for h in hops {
        assert_eq!(h["file"], "conformance/src/bin/deadlocks.rs", "{h}");
        assert!(h["line"].as_u64().unwrap() > 0);
    }
    hops.iter()
        .map(|h| {
            let of = h["of"].as_array().map_or(Vec::new(), |a| {
                a.iter().map(|r| r.as_u64().unwrap()).collect()
            });
            (
                h["rank"].as_u64().unwrap(),
                h["waits_for"].as_u64(),
                h["call"].as_str().unwrap().to_string(),
                of,
            )
        })
        .collect()
}

#[test]
fn wait_any_and_wait_some_that_can_never_complete_are_a_knot() {
    let lines = run_deadlocked("waitany", 3, &[]);
    for l in &lines {
        assert_eq!(
            knot_hops(l),
            set(&[
                (0, None, "MPI_Waitany".to_string(), vec![1, 2]),
                (1, Some(0), "MPI_Recv".to_string(), vec![]),
                (2, None, "MPI_Waitsome".to_string(), vec![0, 1]),
            ])
        );
    }
}

#[test]
fn a_wait_any_for_computing_ranks_is_no_deadlock() {
    run_clean("waitany-late", 3);
}

#[test]
fn blocking_probes_are_followed_like_receives() {
    let lines = run_deadlocked("probe-probe", 2, &[]);
    for l in &lines {
        assert_eq!(
            cycle(l),
            (set(&[(0, 1), (1, 0)]), set(&["MPI_Probe".to_string()]))
        );
    }
    let lines = run_deadlocked("probe-any", 2, &[]);
    for l in &lines {
        assert_eq!(
            knot_hops(l),
            set(&[
                (0, None, "MPI_Probe".to_string(), vec![1]),
                (1, Some(0), "MPI_Recv".to_string(), vec![]),
            ])
        );
    }
}

#[test]
fn a_wait_on_a_nonblocking_collective_follows_its_schedule() {
    // rank 0 in MPI_Wait on a nonblocking barrier, rank 1 receiving from rank 0
    let lines = run_deadlocked("ibarrier-recv", 2, &[]);
    for l in &lines {
        assert_eq!(
            cycle(l),
            (
                set(&[(0, 1), (1, 0)]),
                set(&["MPI_Wait".to_string(), "MPI_Recv".to_string()])
            )
        );
    }
    // rank 0 in wait_any on two nonblocking allreduces, ranks 1 and 2 receiving from
    // it: whichever ranks the two schedules wait for, rank 0 is in the report, in
    // MPI_Waitany, and each other rank in it waits for rank 0
    let lines = run_deadlocked("iallreduce-any", 3, &[]);
    for l in &lines {
        let hops: Vec<(u64, Option<u64>, String)> = if l.get("cycle").is_some() {
            let hops = l["cycle"].as_array().expect("cycle");
            hops.iter()
                .map(|h| {
                    let r = h["rank"].as_u64().unwrap();
                    let call = h["call"].as_str().unwrap().to_string();
                    (r, h["waits_for"].as_u64(), call)
                })
                .collect()
        } else {
            knot_hops(l)
                .into_iter()
                .map(|(r, w, c, _)| (r, w, c))
                .collect()
        };
        assert!(hops.len() >= 2, "{l}");
        for (rank, waits_for, call) in hops {
            if rank == 0 {
                assert_eq!(call, "MPI_Waitany", "{l}");
            } else {
                assert_eq!((waits_for, call.as_str()), (Some(0), "MPI_Recv"), "{l}");
            }
        }
    }
}

//! `races CASE`: programs for the race checker's tests (`tests/races.rs`), run under
//! `RSMPI_CHECK=races`. `RACE_DELAY=<rank>` makes that rank wait 150 ms before it
//! sends, so that a test can flip the order in which racing messages arrive.
//!
//! * `fig2-a` .. `fig2-d` (3 ranks): the four cases of MPIRace-Check's Fig. 2; rank 0
//!   receives twice, ranks 1 and 2 send. Only (d) races.
//! * `fig1` (5 ranks): the scenario of the paper's Fig. 1 and 4; the race is at rank
//!   1's second wildcard receive (`j`), between the messages of ranks 2 and 3.
//!   `fig1-all-tag-1`: the same with the first receive (`d`) on tag 1 as well, which adds
//!   the race at `d` that the paper's check (the previous receive only) misses.
//! * `X-Y-VARIANT` (3 ranks), X and Y each one of `recv`, `sendrecv`, `replace`
//!   (`sendrecv_replace`) and `irecv`: rank 0 receives with X, then with Y; ranks 1 and
//!   2 send one message each. `race`: both receives `ANY_SOURCE`, tag 1, both senders
//!   tag 1. `anytag`: both `ANY_SOURCE` and `ANY_TAG`, senders tags 1 and 2. The
//!   race-free twins: `source` (the first receive names rank 1) and `tags` (tags 1
//!   and 2, each sender its own).
//! * `table2-N`: the paper's overhead workload (every rank sends rank 0 N messages,
//!   received with `ANY_SOURCE`); rank 0 prints the time. Not a test: run it by hand
//!   with and without `RSMPI_CHECK=races` (`docs/tools.md`);
//!   `benches/races-callgrind.sh` counts its instructions per message.
//! * `waitany`, `probe` (3 ranks): wildcard receives completed through `wait_any`, and
//!   wildcard probes; one race each.
//! * `self` (2 ranks): a wildcard receive takes its own rank's message, sent to
//!   itself, and races with a later message from rank 1.
//! * `poll` (2 ranks): rank 1 sends three messages, computes for 300 ms, then polls
//!   with `test` for rank 0's reply; rank 0 receives them with `ANY_SOURCE` and
//!   replies. The checker holds notes back across consecutive sends: this must
//!   neither hang nor report.
//!
//! The helpers are `#[track_caller]`, so that reports name the lines of the cases.
#![forbid(unsafe_code)]

use rsmpi::point_to_point as p2p;
use rsmpi::request;
use rsmpi::traits::*;
use rsmpi::{Rank, Tag, PROC_NULL};
use std::time::Duration;

fn delay(me: Rank) {
    let d = std::env::var("RACE_DELAY")
        .ok()
        .and_then(|v| v.parse::<Rank>().ok());
    if d == Some(me) {
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// Receives one u64 with receive kind `kind` from `src` (`None`: any) with `tag`
/// (`None`: any); returns (value, source).
#[track_caller]
fn recv_one<C: Communicator>(
    c: &C,
    kind: &str,
    src: Option<Rank>,
    tag: Option<Tag>,
) -> (u64, Rank) {
    match src {
        Some(s) => recv_from(c, &c.process_at_rank(s), kind, tag),
        None => recv_from(c, &c.any_process(), kind, tag),
    }
}

#[track_caller]
fn recv_from<C: Communicator, S: Source>(
    c: &C,
    s: &S,
    kind: &str,
    tag: Option<Tag>,
) -> (u64, Rank) {
    let nowhere = c.process_at_rank(PROC_NULL);
    let mut v = 0u64;
    let st = match (kind, tag) {
        ("recv", Some(t)) => s.receive_into_with_tag(&mut v, t),
        ("recv", None) => s.receive_into(&mut v),
        ("irecv", t) => request::scope(|sc| {
            let r = match t {
                Some(t) => s.immediate_receive_into_with_tag(sc, &mut v, t),
                None => s.immediate_receive_into(sc, &mut v),
            };
            r.wait()
        }),
        ("sendrecv", Some(t)) => p2p::send_receive_into_with_tags(&0u64, &nowhere, 5, &mut v, s, t),
        ("sendrecv", None) => p2p::send_receive_into(&0u64, &nowhere, &mut v, s),
        ("replace", Some(t)) => p2p::send_receive_replace_into_with_tags(&mut v, &nowhere, 5, s, t),
        ("replace", None) => p2p::send_receive_replace_into(&mut v, &nowhere, s),
        _ => panic!("unknown receive kind {kind}"),
    };
    (v, st.source_rank())
}

#[track_caller]
fn send(c: &impl Communicator, to: Rank, tag: Tag) {
    c.process_at_rank(to)
        .send_with_tag(&(c.rank() as u64 * 100 + tag as u64), tag);
}

fn fig2(w: &impl Communicator, case: &str) {
    let me = w.rank();
    match (case, me) {
        ("a", 0) => {
            recv_one(w, "recv", None, Some(1));
            recv_one(w, "recv", None, Some(2));
        }
        ("b", 0) => {
            recv_one(w, "recv", Some(1), Some(1));
            recv_one(w, "recv", None, Some(1));
        }
        ("c", 0) => {
            recv_one(w, "recv", None, None);
            recv_one(w, "recv", None, None);
        }
        ("d", 0) => {
            recv_one(w, "recv", None, Some(1));
            recv_one(w, "recv", None, Some(1));
        }
        ("a", r) => {
            delay(r);
            send(w, 0, r);
        }
        ("c", 1) => {
            send(w, 0, 1);
            send(w, 0, 1);
        }
        ("c", _) => {}
        (_, r) => {
            delay(r);
            send(w, 0, 1);
        }
    }
}

/// Fig. 1: P1..P5 are ranks 0..4; rank 1 (P2) receives `d`, `j` and `l`.
fn fig1(w: &impl Communicator, d_tag: Tag) {
    match w.rank() {
        0 => send(w, 1, d_tag), // the message `d` takes
        1 => {
            send(w, 3, 5); // `a`, to P4
            recv_one(w, "recv", None, Some(d_tag)); // `d`
            send(w, 2, 7);
            send(w, 2, 7); // P3 learns of `d`
            recv_one(w, "recv", None, Some(1)); // `j`
            recv_one(w, "recv", None, Some(1)); // `l`
        }
        2 => {
            recv_one(w, "recv", Some(1), Some(7));
            recv_one(w, "recv", Some(1), Some(7));
            delay(2);
            send(w, 1, 1); // `i`: knows of `d`
        }
        3 => {
            recv_one(w, "recv", Some(1), Some(5)); // `a`
            delay(3);
            send(w, 1, 1); // `k`: knows only of `a`
        }
        _ => {}
    }
}

fn pair(w: &impl Communicator, x: &str, y: &str, variant: &str) {
    let me = w.rank();
    let (sx, tx, sy, ty, tags) = match variant {
        "race" => (None, Some(1), None, Some(1), [1, 1]),
        "anytag" => (None, None, None, None, [1, 2]),
        "source" => (Some(1), Some(1), None, Some(1), [1, 1]),
        "tags" => (None, Some(1), None, Some(2), [1, 2]),
        v => panic!("unknown variant {v}"),
    };
    if me == 0 {
        let (a, from_a) = recv_one(w, x, sx, tx);
        let (b, from_b) = recv_one(w, y, sy, ty);
        let mut got = [(from_a, a), (from_b, b)];
        got.sort();
        assert_eq!(
            got,
            [(1, 100 + tags[0] as u64), (2, 200 + tags[1] as u64)],
            "payloads"
        );
    } else if me <= 2 {
        delay(me);
        send(w, 0, tags[me as usize - 1]);
    }
}

/// Rank 0 takes ranks 1's and 2's messages with two wildcard receives completed by
/// `wait_any` (`waitany`), or by two wildcard probes each followed by a receive from
/// the probed source (`probe`): the race is at the first receive, or the first probe.
fn any_of(w: &impl Communicator, how: &str) {
    let me = w.rank();
    if me == 0 {
        let mut got = Vec::new();
        if how == "waitany" {
            let (mut a, mut b) = (0u64, 0u64);
            request::scope(|sc| {
                let any = w.any_process();
                let mut reqs = vec![
                    any.immediate_receive_into_with_tag(sc, &mut a, 1),
                    any.immediate_receive_into_with_tag(sc, &mut b, 1),
                ];
                while let Some((_, st)) = request::wait_any(&mut reqs) {
                    got.push(st.source_rank());
                }
            });
        } else {
            for _ in 0..2 {
                let st = w.any_process().probe_with_tag(1);
                recv_one(w, "recv", Some(st.source_rank()), Some(1));
                got.push(st.source_rank());
            }
        }
        got.sort();
        assert_eq!(got, [1, 2]);
    } else if me <= 2 {
        delay(me);
        send(w, 0, 1);
    }
}

/// MPIRace-Check's Table 2 workload: every rank but 0 sends rank 0 `n` 8-byte
/// messages, which rank 0 receives with `ANY_SOURCE`; rank 0 prints the time.
/// Kept out of line, so that callgrind can collect in it alone
/// (`benches/races-callgrind.sh`).
#[inline(never)]
fn table2(w: &impl Communicator, n: u64) {
    w.barrier();
    let t = std::time::Instant::now();
    if w.rank() == 0 {
        let any = w.any_process();
        let mut v = 0u64;
        for _ in 0..n * (w.size() as u64 - 1) {
            any.receive_into_with_tag(&mut v, 1);
        }
        println!(
            "table2: {} messages in {:.3} s",
            n * (w.size() as u64 - 1),
            t.elapsed().as_secs_f64()
        );
    } else {
        let zero = w.process_at_rank(0);
        for i in 0..n {
            zero.send_with_tag(&i, 1);
        }
    }
}

/// The `self` case (2 ranks): rank 0 posts a wildcard receive and sends to itself,
/// which that receive takes; rank 1 sends rank 0 a message of the same tag 150 ms
/// later, which a second wildcard receive takes. One race, at the first receive: it
/// took rank 0's own message, and rank 1's could have been taken instead. A send to
/// itself that went straight into its receive past the checker would leave that
/// receive unrecorded, and the race unreported.
fn to_self(w: &impl Communicator) {
    if w.rank() == 1 {
        std::thread::sleep(Duration::from_millis(150));
        send(w, 0, 1);
        return;
    }
    let any = w.any_process();
    let (mut first, mut second) = (0u64, 0u64);
    let took = request::scope(|sc| {
        let r = any.immediate_receive_into_with_tag(sc, &mut first, 1);
        send(w, 0, 1);
        r.wait()
    });
    assert_eq!((first, took.source_rank()), (1, 0));
    let st = any.receive_into_with_tag(&mut second, 1);
    assert_eq!((second, st.source_rank()), (101, 1));
}

/// The `poll` case.
fn poll(w: &impl Communicator) {
    let peer = w.process_at_rank(1 - w.rank());
    if w.rank() == 1 {
        for i in 0..3u64 {
            peer.send_with_tag(&i, 1);
        }
        std::thread::sleep(Duration::from_millis(300));
        let mut reply = 0u64;
        request::scope(|sc| {
            let mut r = peer.immediate_receive_into_with_tag(sc, &mut reply, 2);
            loop {
                match r.test() {
                    Ok(_) => break,
                    Err(again) => r = again,
                }
            }
        });
        assert_eq!(reply, 3);
    } else {
        let sum: u64 = (0..3).map(|_| recv_one(w, "recv", None, Some(1)).0).sum();
        peer.send_with_tag(&sum, 2);
    }
}

fn main() {
    let case = std::env::args().nth(1).expect("CASE");
    let universe = rsmpi::initialize().expect("init");
    let w = universe.world();
    match case.split('-').collect::<Vec<_>>()[..] {
        ["fig2", c] => fig2(&w, c),
        ["fig1"] => fig1(&w, 2),
        ["waitany"] => any_of(&w, "waitany"),
        ["table2", n] => table2(&w, n.parse().expect("N")),
        ["probe"] => any_of(&w, "probe"),
        ["poll"] => poll(&w),
        ["self"] => to_self(&w),
        ["fig1", "all", "tag", "1"] => fig1(&w, 1),
        [x, y, v] => pair(&w, x, y, v),
        _ => panic!("unknown case {case}"),
    }
    w.barrier();
}

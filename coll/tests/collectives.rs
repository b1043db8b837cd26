//! Every collective and every algorithm, simulated on sizes 1..=9 and 16, several roots,
//! lengths 0, one element, odd counts and both sides of every threshold, against a
//! sequential computation. Reductions use a commutative op (u64 addition) and a
//! non-commutative one (affine-map composition) whose result must be the rank-order
//! reduction exactly.

mod common;

use common::*;
use rsmpi_coll::{algo, tuning, Schedule};

fn seed(n: u32, q: u32, len: usize, salt: u64) -> u64 {
    (n as u64) << 40 ^ (q as u64) << 32 ^ len as u64 ^ salt << 50
}

// ------------------------------------------------------------------------------------
// barrier

#[test]
fn barrier() {
    for n in SIZES {
        let out = simulate(
            n,
            |r| rsmpi_coll::barrier(r, n),
            &vec![vec![]; n as usize],
            None,
            None,
            false,
        );
        assert!(out.iter().all(|o| o.is_empty()));
        // dissemination: ceil(log2 n) rounds
        let rounds = (n as f64).log2().ceil() as usize;
        assert_eq!(rsmpi_coll::barrier(0, n).sends(), rounds);
    }
}

/// A barrier synchronises: with a rendezvous-free (buffered) executor, no rank can
/// finish the barrier before every rank has started it. Check by removing one rank's
/// schedule content: everyone else must then deadlock.
#[test]
fn barrier_waits_for_everyone() {
    use rsmpi_coll::sim::{run, ErrorKind, Options, SendCompletion};
    for n in [2u32, 3, 5, 8, 9] {
        for absent in 0..n {
            let scheds: Vec<Schedule> = (0..n)
                .map(|r| {
                    if r == absent {
                        Schedule {
                            bufs: vec![0],
                            ..Schedule::default()
                        }
                    } else {
                        rsmpi_coll::barrier(r, n)
                    }
                })
                .collect();
            let opts = Options {
                seed: 5,
                sends: SendCompletion::Buffered,
                strict: true,
            };
            let e = run(&scheds, &vec![vec![]; n as usize], &|_, _| {}, opts).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Deadlock, "{e}");
            // every present rank is stuck, not only some
            assert_eq!(
                e.message.matches("waits for").count(),
                n as usize - 1,
                "{e}"
            );
        }
    }
}

// ------------------------------------------------------------------------------------
// bcast

fn check_bcast(n: u32, root: u32, len: usize, make: impl Fn(u32) -> Schedule) {
    let data = bytes(seed(n, root, len, 1), len);
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|q| {
            if q == root {
                data.clone()
            } else {
                bytes(seed(n, q, len, 99), len)
            }
        })
        .collect();
    let out = simulate(n, make, &inputs, None, None, true);
    for (q, o) in out.iter().enumerate() {
        assert_eq!(o, &data, "bcast size {n} root {root} len {len}: rank {q}");
    }
}

#[test]
fn bcast() {
    let t = tuning::BCAST_SHORT_MSG;
    for n in SIZES {
        for root in roots(n) {
            for len in [0, 8, 24, 1000, t - 8, t, t + 8 * 7] {
                check_bcast(n, root, len, |r| rsmpi_coll::bcast(r, n, root, len, 8));
                let large = len >= t && n as usize >= tuning::BCAST_MIN_PROCS;
                let expect = if large {
                    algo::bcast_scatter_ring(0, n, root, len, 8)
                } else {
                    algo::bcast_binomial(0, n, root, len)
                };
                assert_eq!(rsmpi_coll::bcast(0, n, root, len, 8), expect);
            }
        }
    }
}

#[test]
fn bcast_algorithms() {
    for n in SIZES {
        for root in roots(n) {
            for (len, elem) in [
                (0, 1),
                (1, 1),
                (13, 1),
                (8, 8),
                (8 * 5, 8),
                (8 * 13, 8),
                (16 * 40, 16),
            ] {
                check_bcast(n, root, len, |r| algo::bcast_binomial(r, n, root, len));
                check_bcast(n, root, len, |r| {
                    algo::bcast_scatter_ring(r, n, root, len, elem)
                });
            }
        }
    }
}

// ------------------------------------------------------------------------------------
// reduce / allreduce

fn red_inputs(red: &Red, n: u32, len: usize, salt: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|q| (red.input)(seed(n, q, len, salt), len))
        .collect()
}

fn check_reduce(red: &Red, n: u32, root: u32, len: usize, make: impl Fn(u32) -> Schedule) {
    let inputs = red_inputs(red, n, len, 2);
    let want = red.fold(inputs.iter().map(|v| &v[..]));
    let out = simulate(n, make, &inputs, Some(red.op), Some(red.elem), false);
    for (q, o) in out.iter().enumerate() {
        if q as u32 == root {
            assert_eq!(
                o, &want,
                "{} reduce size {n} root {root} len {len}",
                red.name
            );
        } else {
            assert!(o.is_empty(), "non-root {q} has a result");
        }
    }
}

#[test]
fn reduce() {
    let t = tuning::REDUCE_SHORT_MSG;
    for red in &REDS {
        let e = red.elem;
        for n in SIZES {
            for root in roots(n) {
                for len in [0, e, 7 * e, t, t + e, 3 * t + 5 * e] {
                    check_reduce(red, n, root, len, |r| {
                        rsmpi_coll::reduce(r, n, root, len, e, red.commutative)
                    });
                    let pof2 = 1 << (31 - n.leading_zeros());
                    // on two ranks, always the binomial tree (one message)
                    let rab = red.commutative && len > t && len / e >= pof2 && n != 2;
                    let expect = if rab {
                        algo::reduce_rabenseifner(0, n, root, len, e)
                    } else {
                        algo::reduce_binomial(0, n, root, len, e, red.commutative)
                    };
                    assert_eq!(
                        rsmpi_coll::reduce(0, n, root, len, e, red.commutative),
                        expect
                    );
                }
            }
        }
    }
}

#[test]
fn reduce_algorithms() {
    for red in &REDS {
        let e = red.elem;
        for n in SIZES {
            for root in roots(n) {
                for len in [0, e, 3 * e, 17 * e] {
                    check_reduce(red, n, root, len, |r| {
                        algo::reduce_binomial(r, n, root, len, e, red.commutative)
                    });
                    if red.commutative {
                        check_reduce(red, n, root, len, |r| {
                            algo::reduce_rabenseifner(r, n, root, len, e)
                        });
                    }
                }
            }
        }
    }
}

fn check_allreduce(red: &Red, n: u32, len: usize, make: impl Fn(u32) -> Schedule) {
    let inputs = red_inputs(red, n, len, 3);
    let want = red.fold(inputs.iter().map(|v| &v[..]));
    let out = simulate(n, make, &inputs, Some(red.op), Some(red.elem), false);
    for (q, o) in out.iter().enumerate() {
        assert_eq!(
            o, &want,
            "{} allreduce size {n} len {len} rank {q}",
            red.name
        );
    }
}

#[test]
fn allreduce() {
    let t = tuning::ALLREDUCE_SHORT_MSG;
    for red in &REDS {
        let e = red.elem;
        for n in SIZES {
            for len in [0, e, 7 * e, t, t + e, 3 * t + 5 * e] {
                check_allreduce(red, n, len, |r| {
                    rsmpi_coll::allreduce(r, n, len, e, red.commutative)
                });
                let pof2 = 1 << (31 - n.leading_zeros());
                let short = if n == 2 {
                    tuning::ALLREDUCE_SHORT_MSG_TWO_RANKS
                } else {
                    t
                };
                let rab = red.commutative && len > short && len / e >= pof2;
                let expect = if rab {
                    algo::allreduce_rabenseifner(0, n, len, e)
                } else {
                    algo::allreduce_recursive_doubling(0, n, len, e, red.commutative)
                };
                assert_eq!(rsmpi_coll::allreduce(0, n, len, e, red.commutative), expect);
            }
        }
    }
}

/// Two ranks choose by their own thresholds: a reduce is always one message (the
/// binomial tree), and an all-reduce is recursive doubling up to
/// `ALLREDUCE_SHORT_MSG_TWO_RANKS` and Rabenseifner above it; on both sides of that
/// boundary the result is right.
#[test]
fn two_ranks_thresholds() {
    let red = &REDS[0];
    assert!(red.commutative);
    let e = red.elem;
    // 64 KiB: Rabenseifner's by MPICH's threshold, recursive doubling on two ranks
    let mid = 64 * 1024;
    assert!(mid > tuning::ALLREDUCE_SHORT_MSG);
    assert_eq!(
        rsmpi_coll::allreduce(0, 2, mid, e, true),
        algo::allreduce_recursive_doubling(0, 2, mid, e, true)
    );
    let t = tuning::ALLREDUCE_SHORT_MSG_TWO_RANKS;
    let at = t / e * e;
    for len in [at, at + e] {
        check_allreduce(red, 2, len, |r| rsmpi_coll::allreduce(r, 2, len, e, true));
        let expect = if len > t {
            algo::allreduce_rabenseifner(1, 2, len, e)
        } else {
            algo::allreduce_recursive_doubling(1, 2, len, e, true)
        };
        assert_eq!(rsmpi_coll::allreduce(1, 2, len, e, true), expect);
        // the same length on four ranks is Rabenseifner's
        assert_eq!(
            rsmpi_coll::allreduce(1, 4, len, e, true),
            algo::allreduce_rabenseifner(1, 4, len, e)
        );
        check_reduce(red, 2, 1, len, |r| {
            rsmpi_coll::reduce(r, 2, 1, len, e, true)
        });
        assert_eq!(
            rsmpi_coll::reduce(0, 2, 1, len, e, true),
            algo::reduce_binomial(0, 2, 1, len, e, true)
        );
    }
}

#[test]
fn allreduce_algorithms() {
    for red in &REDS {
        let e = red.elem;
        for n in SIZES {
            for len in [0, e, 3 * e, 17 * e] {
                check_allreduce(red, n, len, |r| {
                    algo::allreduce_recursive_doubling(r, n, len, e, red.commutative)
                });
                if red.commutative {
                    check_allreduce(red, n, len, |r| algo::allreduce_rabenseifner(r, n, len, e));
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------
// gather / scatter

fn blocks(n: u32, counts: &[usize], salt: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|q| bytes(seed(n, q, counts[q as usize], salt), counts[q as usize]))
        .collect()
}

fn vcounts(n: u32, k: usize) -> Vec<usize> {
    (0..n as usize).map(|i| (i * 7 + k) % 5 * (k + 1)).collect()
}

#[test]
fn gather_and_gatherv() {
    for n in SIZES {
        for root in roots(n) {
            for len in [0, 1, 3, 17, 100] {
                let counts = vec![len; n as usize];
                let inputs = blocks(n, &counts, 4);
                let want = inputs.concat();
                let out = simulate(
                    n,
                    |r| rsmpi_coll::gather(r, n, root, len),
                    &inputs,
                    None,
                    None,
                    false,
                );
                let outv = simulate(
                    n,
                    |r| rsmpi_coll::gatherv(r, n, root, &counts),
                    &inputs,
                    None,
                    None,
                    false,
                );
                for (q, (o, ov)) in out.iter().zip(&outv).enumerate() {
                    let w: &[u8] = if q as u32 == root { &want } else { &[] };
                    assert_eq!(o, w, "gather size {n} root {root} len {len} rank {q}");
                    assert_eq!(ov, w, "gatherv size {n} root {root} len {len} rank {q}");
                }
            }
            for k in 0..3 {
                let counts = vcounts(n, k);
                let inputs = blocks(n, &counts, 5);
                let want = inputs.concat();
                let out = simulate(
                    n,
                    |r| rsmpi_coll::gatherv(r, n, root, &counts),
                    &inputs,
                    None,
                    None,
                    false,
                );
                assert_eq!(out[root as usize], want);
            }
        }
    }
}

#[test]
fn scatter_and_scatterv() {
    for n in SIZES {
        for root in roots(n) {
            for len in [0, 1, 3, 17, 100] {
                let counts = vec![len; n as usize];
                let parts = blocks(n, &counts, 6);
                let inputs: Vec<Vec<u8>> = (0..n)
                    .map(|q| if q == root { parts.concat() } else { vec![] })
                    .collect();
                let out = simulate(
                    n,
                    |r| rsmpi_coll::scatter(r, n, root, len),
                    &inputs,
                    None,
                    None,
                    false,
                );
                let outv = simulate(
                    n,
                    |r| rsmpi_coll::scatterv(r, n, root, &counts),
                    &inputs,
                    None,
                    None,
                    false,
                );
                assert_eq!(out, parts, "scatter size {n} root {root} len {len}");
                assert_eq!(outv, parts, "scatterv size {n} root {root} len {len}");
            }
            for k in 0..3 {
                let counts = vcounts(n, k);
                let parts = blocks(n, &counts, 7);
                let inputs: Vec<Vec<u8>> = (0..n)
                    .map(|q| if q == root { parts.concat() } else { vec![] })
                    .collect();
                let out = simulate(
                    n,
                    |r| rsmpi_coll::scatterv(r, n, root, &counts),
                    &inputs,
                    None,
                    None,
                    false,
                );
                assert_eq!(out, parts);
            }
        }
    }
}

// ------------------------------------------------------------------------------------
// allgather

fn check_allgather(n: u32, len: usize, make: impl Fn(u32) -> Schedule) {
    let inputs = blocks(n, &vec![len; n as usize], 8);
    let want = inputs.concat();
    let out = simulate(n, make, &inputs, None, None, false);
    for (q, o) in out.iter().enumerate() {
        assert_eq!(o, &want, "allgather size {n} len {len} rank {q}");
    }
}

#[test]
fn allgather() {
    for n in SIZES {
        let nn = n as usize;
        let (short, long) = (tuning::ALLGATHER_SHORT_MSG, tuning::ALLGATHER_LONG_MSG);
        let mut lens = vec![0, 1, 5, 100, (short - 1) / nn, short.div_ceil(nn)];
        if n.is_power_of_two() && n > 1 {
            lens.extend([(long - 1) / nn, long.div_ceil(nn)]);
        }
        for len in lens {
            check_allgather(n, len, |r| rsmpi_coll::allgather(r, n, len));
            let total = nn * len;
            let expect = if n.is_power_of_two() && total < long {
                algo::allgather_recursive_doubling(0, n, len)
            } else if !n.is_power_of_two() && total < short {
                algo::allgather_bruck(0, n, len)
            } else {
                algo::allgather_ring(0, n, len)
            };
            assert_eq!(rsmpi_coll::allgather(0, n, len), expect);
        }
    }
}

/// An all-gather's first message, the rank's own block, leaves from the input
/// (`bufs[0]`), which the caller has not just written, not from the result after a
/// copy there; the copy comes after that first send.
#[test]
fn allgather_first_send_from_the_input() {
    use rsmpi_coll::{BufId, Step};
    let len = 96;
    for n in [2u32, 3, 4, 5, 8] {
        for r in 0..n {
            let mut scheds = vec![("ring", algo::allgather_ring(r, n, len))];
            scheds.push(("bruck", algo::allgather_bruck(r, n, len)));
            if n.is_power_of_two() {
                scheds.push(("doubling", algo::allgather_recursive_doubling(r, n, len)));
            }
            for (name, s) in scheds {
                let first = s
                    .steps
                    .iter()
                    .position(|st| matches!(st, Step::Send { .. }));
                let copy = s
                    .steps
                    .iter()
                    .position(|st| matches!(st, Step::Copy { .. }));
                let (first, copy) = (first.expect("a send"), copy.expect("a copy"));
                assert!(
                    matches!(s.steps[first], Step::Send { buf: BufId(0), off: 0, len: l, .. } if l == len),
                    "{name} size {n} rank {r}: first send {:?}",
                    s.steps[first]
                );
                assert!(
                    first < copy,
                    "{name} size {n} rank {r}: copy before the first send"
                );
            }
        }
    }
}

#[test]
fn allgather_algorithms() {
    for n in SIZES {
        for len in [0, 1, 3, 17] {
            if n.is_power_of_two() {
                check_allgather(n, len, |r| algo::allgather_recursive_doubling(r, n, len));
            }
            check_allgather(n, len, |r| algo::allgather_bruck(r, n, len));
            check_allgather(n, len, |r| algo::allgather_ring(r, n, len));
        }
    }
}

#[test]
fn allgatherv() {
    for n in SIZES {
        for k in 0..4 {
            let counts = vcounts(n, k);
            let inputs = blocks(n, &counts, 9);
            let want = inputs.concat();
            let out = simulate(
                n,
                |r| rsmpi_coll::allgatherv(r, n, &counts),
                &inputs,
                None,
                None,
                false,
            );
            assert!(
                out.iter().all(|o| o == &want),
                "allgatherv size {n} counts {counts:?}"
            );
        }
    }
}

// ------------------------------------------------------------------------------------
// alltoall

/// send_counts[src][dst]
fn check_alltoallv(n: u32, counts: &[Vec<usize>], make: impl Fn(u32) -> Schedule) {
    let nn = n as usize;
    let piece =
        |s: usize, d: usize| bytes(seed(n, s as u32, d * 1000 + counts[s][d], 10), counts[s][d]);
    let inputs: Vec<Vec<u8>> = (0..nn)
        .map(|s| (0..nn).flat_map(|d| piece(s, d)).collect())
        .collect();
    let out = simulate(n, make, &inputs, None, None, false);
    for (d, o) in out.iter().enumerate() {
        let want: Vec<u8> = (0..nn).flat_map(|s| piece(s, d)).collect();
        assert_eq!(o, &want, "alltoall size {n} rank {d}");
    }
}

#[test]
fn alltoall() {
    for n in SIZES {
        let nn = n as usize;
        for len in [
            0,
            1,
            3,
            100,
            tuning::ALLTOALL_SHORT_MSG,
            tuning::ALLTOALL_SHORT_MSG + 1,
        ] {
            let counts = vec![vec![len; nn]; nn];
            check_alltoallv(n, &counts, |r| rsmpi_coll::alltoall(r, n, len));
            let expect = if len <= tuning::ALLTOALL_SHORT_MSG && nn >= tuning::ALLTOALL_MIN_PROCS {
                algo::alltoall_bruck(0, n, len)
            } else {
                algo::alltoall_pairwise(0, n, len)
            };
            assert_eq!(rsmpi_coll::alltoall(0, n, len), expect);
        }
    }
}

#[test]
fn alltoall_algorithms() {
    for n in SIZES {
        let nn = n as usize;
        for len in [0, 1, 3, 17] {
            let counts = vec![vec![len; nn]; nn];
            check_alltoallv(n, &counts, |r| algo::alltoall_bruck(r, n, len));
            check_alltoallv(n, &counts, |r| algo::alltoall_pairwise(r, n, len));
        }
    }
}

#[test]
fn alltoallv() {
    for n in SIZES {
        let nn = n as usize;
        for k in 0..3 {
            let counts: Vec<Vec<usize>> = (0..nn)
                .map(|s| (0..nn).map(|d| (s * 3 + d * 5 + k) % 7).collect())
                .collect();
            check_alltoallv(n, &counts, |r| {
                let r_ = r as usize;
                let send = counts[r_].clone();
                let recv: Vec<usize> = (0..nn).map(|s| counts[s][r_]).collect();
                rsmpi_coll::alltoallv(r, n, &send, &recv)
            });
        }
    }
}

// ------------------------------------------------------------------------------------
// reduce_scatter

fn check_reduce_scatter(red: &Red, n: u32, counts: &[usize], make: impl Fn(u32) -> Schedule) {
    let total: usize = counts.iter().sum();
    let inputs = red_inputs(red, n, total, 11);
    let want = red.fold(inputs.iter().map(|v| &v[..]));
    let out = simulate(n, make, &inputs, Some(red.op), Some(red.elem), false);
    let mut at = 0;
    for (q, o) in out.iter().enumerate() {
        assert_eq!(
            o,
            &want[at..at + counts[q]],
            "{} reduce_scatter size {n} counts {counts:?} rank {q}",
            red.name
        );
        at += counts[q];
    }
}

#[test]
fn reduce_scatter() {
    for red in &REDS {
        let e = red.elem;
        for n in SIZES {
            let nn = n as usize;
            for k in 0..4 {
                let counts: Vec<usize> = vcounts(n, k).iter().map(|c| c * e).collect();
                check_reduce_scatter(red, n, &counts, |r| {
                    rsmpi_coll::reduce_scatter(r, n, &counts, e, red.commutative)
                });
                if red.commutative && n.is_power_of_two() {
                    check_reduce_scatter(red, n, &counts, |r| {
                        algo::reduce_scatter_halving(r, n, &counts, e)
                    });
                    assert_eq!(
                        rsmpi_coll::reduce_scatter(0, n, &counts, e, true),
                        algo::reduce_scatter_halving(0, n, &counts, e)
                    );
                }
                check_reduce_scatter(red, n, &counts, |r| {
                    algo::reduce_scatter_reduce_scatterv(r, n, &counts, e)
                });
            }
            for len in [0, e, 3 * e, 33 * e] {
                let counts = vec![len; nn];
                check_reduce_scatter(red, n, &counts, |r| {
                    rsmpi_coll::reduce_scatter_block(r, n, len, e, red.commutative)
                });
            }
        }
    }
}

// ------------------------------------------------------------------------------------
// scan / exscan

#[test]
fn scan_and_exscan() {
    for red in &REDS {
        let e = red.elem;
        for n in SIZES {
            for len in [0, e, 5 * e, 64 * e] {
                let inputs = red_inputs(red, n, len, 12);
                let out = simulate(
                    n,
                    |r| rsmpi_coll::scan(r, n, len),
                    &inputs,
                    Some(red.op),
                    Some(e),
                    false,
                );
                let ex = simulate(
                    n,
                    |r| rsmpi_coll::exscan(r, n, len),
                    &inputs,
                    Some(red.op),
                    Some(e),
                    false,
                );
                for q in 0..n as usize {
                    let incl = red.fold(inputs[..=q].iter().map(|v| &v[..]));
                    assert_eq!(
                        out[q], incl,
                        "{} scan size {n} len {len} rank {q}",
                        red.name
                    );
                    if q == 0 {
                        assert!(ex[0].is_empty());
                    } else {
                        let excl = red.fold(inputs[..q].iter().map(|v| &v[..]));
                        assert_eq!(
                            ex[q], excl,
                            "{} exscan size {n} len {len} rank {q}",
                            red.name
                        );
                    }
                }
            }
        }
    }
}

//! MPI-1 collectives (MPI-3.1 chapter 5, with the nonblocking forms of §5.12), as real
//! multi-process jobs. Every result is compared with a sequential computation done
//! locally on every rank from deterministic per-rank inputs ([`val`]): every
//! collective, blocking and immediate, with every root, on 1, 2, 3, 4, 5, 7 and 8
//! ranks; every predefined operation on every type it applies to (and an error on the
//! others); derived datatypes; the in-place forms; commutative and non-commutative
//! user operations (results bit-identical to the rank-order reduction); messages
//! across the algorithm thresholds of `rsmpi-coll`; split, duplicated and Cartesian
//! communicators with user point-to-point traffic on the same tags; several immediate
//! collectives outstanding at once, and their progress while a rank blocks elsewhere.

use crate::{launch, pattern, Case, Ctx};
use rsmpi::collective::{try_reduce_local_into, SystemOperation, UserOperation};
use rsmpi::datatype::{Partition, PartitionMut, UserDatatype};
use rsmpi::request::Request;
use rsmpi::topology::Color;
#[allow(unused_imports)]
use rsmpi::traits::*;
use rsmpi::{request, Error, ErrorClass, MutView, SimpleCommunicator, Universe, View};
use std::fmt::Debug;
use std::time::Duration;

pub fn cases() -> Vec<Case> {
    vec![
        Case::job("coll_every_collective_and_root_1_rank", 1, every_collective),
        Case::job(
            "coll_every_collective_and_root_2_ranks",
            2,
            every_collective,
        ),
        Case::job(
            "coll_every_collective_and_root_3_ranks",
            3,
            every_collective,
        ),
        Case::job(
            "coll_every_collective_and_root_4_ranks",
            4,
            every_collective,
        ),
        Case::job(
            "coll_every_collective_and_root_5_ranks",
            5,
            every_collective,
        ),
        Case::job(
            "coll_every_collective_and_root_7_ranks",
            7,
            every_collective,
        ),
        Case::job(
            "coll_every_collective_and_root_8_ranks",
            8,
            every_collective,
        ),
        Case::job("coll_user_operations_1_rank", 1, user_operations),
        Case::job("coll_user_operations_2_ranks", 2, user_operations),
        Case::job("coll_user_operations_3_ranks", 3, user_operations),
        Case::job("coll_user_operations_4_ranks", 4, user_operations),
        Case::job("coll_user_operations_5_ranks", 5, user_operations),
        Case::job("coll_user_operations_7_ranks", 7, user_operations),
        Case::job("coll_user_operations_8_ranks", 8, user_operations),
        Case::job("coll_predefined_ops_every_type_3_ranks", 3, predefined_ops),
        Case::host(
            "coll_predefined_op_on_a_wrong_type_aborts_naming_the_call",
            wrong_type_aborts,
        ),
        Case::helper(
            "coll_helper_all_reduce_bitwise_and_f64",
            helper_bitwise_and_f64,
        ),
        Case::helper("coll_helper_ireduce_sum_bool", helper_ireduce_sum_bool),
        Case::host(
            "coll_job_fails_when_every_rank_aborts_at_once",
            every_rank_aborts_at_once,
        ),
        Case::helper(
            "coll_helper_every_rank_fails_at_once",
            helper_every_rank_at_once,
        ),
        Case::job("coll_large_messages_2_ranks", 2, large_messages),
        Case::job("coll_large_messages_5_ranks", 5, large_messages),
        Case::job("coll_large_messages_8_ranks", 8, large_messages),
        Case::job(
            "coll_split_dup_cartesian_with_user_traffic_6_ranks",
            6,
            communicators,
        ),
        Case::job(
            "coll_immediate_outstanding_reordered_and_progress_4_ranks",
            4,
            immediate_outstanding,
        ),
        Case::job(
            "coll_in_place_with_user_operations_4_ranks",
            4,
            in_place_user_ops,
        ),
        // a healthy run takes well under a second: a hang is a deadlock
        Case {
            timeout: Duration::from_secs(10),
            ..Case::job(
                "coll_immediate_user_ops_completed_in_different_orders_4_ranks",
                4,
                user_ops_completion_order,
            )
        },
    ]
}

// ---- deterministic inputs --------------------------------------------------------

/// A splitmix64 step.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The deterministic value `i` of rank (or block) `r` in the data set `salt`.
fn val(r: usize, i: usize, salt: u64) -> u64 {
    mix(mix(salt.wrapping_mul(0x1_0000_0001) ^ r as u64).wrapping_add(i as u64))
}

/// `len` small signed values (-1000..=1000) of rank `r` in data set `salt`.
fn data(r: usize, len: usize, salt: u64) -> Vec<i64> {
    (0..len)
        .map(|i| (val(r, i, salt) % 2001) as i64 - 1000)
        .collect()
}

/// A value no computation here produces: what untouched receive slots hold.
const SENT: i64 = i64::MIN + 12345;

/// Element-wise reduction of `parts` in rank order: `parts[0] op parts[1] op …`.
fn fold<T: Copy>(parts: &[Vec<T>], op: impl Fn(T, T) -> T) -> Vec<T> {
    let mut acc = parts[0].clone();
    for p in &parts[1..] {
        for (a, &x) in acc.iter_mut().zip(p) {
            *a = op(*a, x);
        }
    }
    acc
}

/// Displacements of blocks of `counts` laid out in reverse rank order with a one-slot
/// gap after each block; and the buffer length.
fn gapped_reverse(counts: &[i32]) -> (Vec<i32>, usize) {
    let mut d = vec![0; counts.len()];
    let mut at = 0;
    for r in (0..counts.len()).rev() {
        d[r] = at;
        at += counts[r] + 1;
    }
    (d, at as usize)
}

/// Displacements of blocks of `counts` in rank order with a two-slot gap before each.
fn gapped_forward(counts: &[i32]) -> (Vec<i32>, usize) {
    let mut d = vec![0; counts.len()];
    let mut at = 0;
    for r in 0..counts.len() {
        at += 2;
        d[r] = at;
        at += counts[r];
    }
    (d, at as usize)
}

/// `buf` filled with `SENT` except the blocks of `blocks[r]` at `displs[r]`.
fn placed(len: usize, displs: &[i32], blocks: &[Vec<i64>]) -> Vec<i64> {
    let mut v = vec![SENT; len];
    for (d, b) in displs.iter().zip(blocks) {
        v[*d as usize..*d as usize + b.len()].copy_from_slice(b);
    }
    v
}

type I64Op = (SystemOperation, fn(i64, i64) -> i64, &'static str);

fn i64_ops() -> [I64Op; 4] {
    [
        (SystemOperation::sum(), |a, b| a.wrapping_add(b), "sum"),
        (SystemOperation::max(), |a, b| a.max(b), "max"),
        (SystemOperation::min(), |a, b| a.min(b), "min"),
        (SystemOperation::bitwise_xor(), |a, b| a ^ b, "bitwise_xor"),
    ]
}

// ---- every collective, every root --------------------------------------------------

/// Every collective, blocking and immediate, with every root, the in-place forms and
/// derived datatypes, on the job's ranks.
fn every_collective(u: Universe) {
    let w = u.world();
    barrier_synchronizes(&w);
    for root in 0..w.size() as usize {
        rooted(&w, root);
    }
    unrooted(&w);
    in_place(&w);
    derived(&w);
    w.barrier();
}

/// A rank leaving a barrier (blocking or immediate) finds that every rank entered it:
/// each rank creates a marker file just before entering; one late rank per round
/// sleeps first. A rank testing its immediate barrier before the late rank has entered
/// must see it incomplete.
fn barrier_synchronizes(w: &SimpleCommunicator) {
    let n = w.size() as usize;
    let me = w.rank() as usize;
    // a directory of this job's (named after rank 0's pid, whatever the launcher), which
    // exists before anyone writes into it (point-to-point only: the barrier is what is
    // under test)
    let job = if me == 0 {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("conformance-coll-barrier-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("marker directory");
        for r in 1..n {
            w.process_at_rank(r as i32).send_with_tag(&pid, 900);
        }
        pid
    } else {
        w.process_at_rank(0).receive_with_tag::<u32>(900).0
    };
    let dir = std::env::temp_dir().join(format!("conformance-coll-barrier-{job}"));
    let marker = |round: usize, r: usize| dir.join(format!("{round}.{r}"));
    let rounds = 2 * n.min(3);
    for round in 0..rounds {
        let late = (round * 5 + 1) % n;
        let immediate = round % 2 == 1;
        if me == late {
            std::thread::sleep(Duration::from_millis(150));
        }
        std::fs::write(marker(round, me), b"").expect("marker");
        if immediate {
            let req = w.immediate_barrier();
            if me != late && n > 1 {
                // the late rank may still be asleep: if it has not even written its
                // marker, the barrier cannot be complete
                if let Err(req) = req.test() {
                    req.wait();
                } else {
                    assert!(
                        marker(round, late).exists(),
                        "round {round}: ibarrier complete before rank {late} entered"
                    );
                }
            } else {
                req.wait();
            }
        } else {
            w.barrier();
        }
        for r in 0..n {
            assert!(
                marker(round, r).exists(),
                "round {round} (immediate {immediate}): rank {me} left the barrier before rank {r} entered it"
            );
        }
    }
    w.barrier();
    if me == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The rooted collectives with root `root`, blocking and immediate.
fn rooted(w: &SimpleCommunicator, root: usize) {
    const K: usize = 3;
    let n = w.size() as usize;
    let me = w.rank() as usize;
    let rp = w.process_at_rank(root as i32);
    let is_root = me == root;
    let s = root as u64 * 100;
    for imm in [false, true] {
        let what = |c: &str| format!("{c} root {root} immediate {imm} on {n} ranks");
        // broadcast: a vector and a single value
        let want = data(root, 5, s + 1);
        let mut b = if is_root { want.clone() } else { vec![SENT; 5] };
        let mut one = if is_root { want[0] } else { SENT };
        if imm {
            request::scope(|sc| {
                let r1 = rp.immediate_broadcast_into(sc, &mut b[..]);
                let r2 = rp.immediate_broadcast_into(sc, &mut one);
                r2.wait();
                r1.wait();
            });
        } else {
            rp.broadcast_into(&mut b[..]);
            rp.broadcast_into(&mut one);
        }
        assert_eq!(b, want, "{}", what("broadcast"));
        assert_eq!(one, want[0], "{}", what("broadcast of one value"));

        // gather (one slot more than needed at the root: left alone)
        let mine = data(me, K, s + 2);
        if is_root {
            let mut got = vec![SENT; n * K + 1];
            if imm {
                request::scope(|sc| {
                    rp.immediate_gather_into_root(sc, &mine[..], &mut got[..])
                        .wait();
                });
            } else {
                rp.gather_into_root(&mine[..], &mut got[..]);
            }
            let mut want: Vec<i64> = (0..n).flat_map(|r| data(r, K, s + 2)).collect();
            want.push(SENT);
            assert_eq!(got, want, "{}", what("gather"));
        } else if imm {
            request::scope(|sc| {
                rp.immediate_gather_into(sc, &mine[..]).wait();
            });
        } else {
            rp.gather_into(&mine[..]);
        }

        // gather_varcount: counts 0..=2, blocks in reverse rank order with gaps
        let counts: Vec<i32> = (0..n).map(|r| ((r + root) % 3) as i32).collect();
        let (displs, total) = gapped_reverse(&counts);
        let mine = data(me, counts[me] as usize, s + 3);
        if is_root {
            let mut got = vec![SENT; total];
            {
                let mut part = PartitionMut::new(&mut got[..], counts.clone(), &displs[..]);
                if imm {
                    request::scope(|sc| {
                        rp.immediate_gather_varcount_into_root(sc, &mine[..], &mut part)
                            .wait();
                    });
                } else {
                    rp.gather_varcount_into_root(&mine[..], &mut part);
                }
            }
            let blocks: Vec<Vec<i64>> =
                (0..n).map(|r| data(r, counts[r] as usize, s + 3)).collect();
            assert_eq!(
                got,
                placed(total, &displs, &blocks),
                "{}",
                what("gather_varcount")
            );
        } else if imm {
            request::scope(|sc| {
                rp.immediate_gather_varcount_into(sc, &mine[..]).wait();
            });
        } else {
            rp.gather_varcount_into(&mine[..]);
        }

        // scatter
        let all: Vec<i64> = (0..n).flat_map(|r| data(r, K, s + 4)).collect();
        let mut got = vec![SENT; K];
        if imm {
            request::scope(|sc| {
                let r = if is_root {
                    rp.immediate_scatter_into_root(sc, &all[..], &mut got[..])
                } else {
                    rp.immediate_scatter_into(sc, &mut got[..])
                };
                r.wait();
            });
        } else if is_root {
            rp.scatter_into_root(&all[..], &mut got[..]);
        } else {
            rp.scatter_into(&mut got[..]);
        }
        assert_eq!(got, data(me, K, s + 4), "{}", what("scatter"));

        // scatter_varcount: the root's blocks lie in reverse order with gaps
        let counts: Vec<i32> = (0..n).map(|r| ((r + 2 * root + 1) % 3) as i32).collect();
        let (displs, total) = gapped_reverse(&counts);
        let blocks: Vec<Vec<i64>> = (0..n).map(|r| data(r, counts[r] as usize, s + 5)).collect();
        let src = placed(total, &displs, &blocks);
        let mut got = vec![SENT; counts[me] as usize];
        let part = Partition::new(&src[..], counts.clone(), displs.clone());
        if imm {
            request::scope(|sc| {
                let r = if is_root {
                    rp.immediate_scatter_varcount_into_root(sc, &part, &mut got[..])
                } else {
                    rp.immediate_scatter_varcount_into(sc, &mut got[..])
                };
                r.wait();
            });
        } else if is_root {
            rp.scatter_varcount_into_root(&part, &mut got[..]);
        } else {
            rp.scatter_varcount_into(&mut got[..]);
        }
        assert_eq!(got, blocks[me], "{}", what("scatter_varcount"));

        // reduce with several predefined operations
        for (k, (op, f, name)) in i64_ops().into_iter().enumerate() {
            let salt = s + 10 + k as u64;
            let mine = data(me, K, salt);
            if is_root {
                let mut got = vec![SENT; K + 1];
                if imm {
                    request::scope(|sc| {
                        rp.immediate_reduce_into_root(sc, &mine[..], &mut got[..K], op)
                            .wait();
                    });
                } else {
                    rp.reduce_into_root(&mine[..], &mut got[..K], op);
                }
                let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, K, salt)).collect();
                let mut want = fold(&parts, f);
                want.push(SENT);
                assert_eq!(got, want, "{}", what(&format!("reduce {name}")));
            } else if imm {
                request::scope(|sc| {
                    rp.immediate_reduce_into(sc, &mine[..], op).wait();
                });
            } else {
                rp.reduce_into(&mine[..], op);
            }
        }
    }
}

/// The collectives without a root, blocking and immediate.
fn unrooted(w: &SimpleCommunicator) {
    const K: usize = 3;
    let n = w.size() as usize;
    let me = w.rank() as usize;
    for imm in [false, true] {
        let what = |c: &str| format!("{c} immediate {imm} on {n} ranks");
        let s = 7000 + imm as u64 * 100;

        // all_gather
        let mine = data(me, K, s + 1);
        let mut got = vec![SENT; n * K];
        if imm {
            request::scope(|sc| {
                w.immediate_all_gather_into(sc, &mine[..], &mut got[..])
                    .wait();
            });
        } else {
            w.all_gather_into(&mine[..], &mut got[..]);
        }
        let want: Vec<i64> = (0..n).flat_map(|r| data(r, K, s + 1)).collect();
        assert_eq!(got, want, "{}", what("all_gather"));

        // all_gather_varcount: counts 0..=2, reverse order with gaps
        let counts: Vec<i32> = (0..n).map(|r| (r % 3) as i32).collect();
        let (displs, total) = gapped_reverse(&counts);
        let mine = data(me, counts[me] as usize, s + 2);
        let mut got = vec![SENT; total];
        {
            let mut part = PartitionMut::new(&mut got[..], &counts[..], &displs[..]);
            if imm {
                request::scope(|sc| {
                    w.immediate_all_gather_varcount_into(sc, &mine[..], &mut part)
                        .wait();
                });
            } else {
                w.all_gather_varcount_into(&mine[..], &mut part);
            }
        }
        let blocks: Vec<Vec<i64>> = (0..n).map(|r| data(r, counts[r] as usize, s + 2)).collect();
        assert_eq!(
            got,
            placed(total, &displs, &blocks),
            "{}",
            what("all_gather_varcount")
        );

        // all_to_all: block j of rank i is data set (i, j)
        let send: Vec<i64> = (0..n).flat_map(|j| data(me * n + j, K, s + 3)).collect();
        let mut got = vec![SENT; n * K];
        if imm {
            request::scope(|sc| {
                w.immediate_all_to_all_into(sc, &send[..], &mut got[..])
                    .wait();
            });
        } else {
            w.all_to_all_into(&send[..], &mut got[..]);
        }
        let want: Vec<i64> = (0..n).flat_map(|i| data(i * n + me, K, s + 3)).collect();
        assert_eq!(got, want, "{}", what("all_to_all"));

        // all_to_all_varcount: rank i sends (i + 2j) % 3 elements to rank j
        let cnt = |i: usize, j: usize| ((i + 2 * j) % 3) as i32;
        let sc_: Vec<i32> = (0..n).map(|j| cnt(me, j)).collect();
        let rc: Vec<i32> = (0..n).map(|i| cnt(i, me)).collect();
        let (sd, stotal) = gapped_forward(&sc_);
        let (rd, rtotal) = gapped_reverse(&rc);
        let sblocks: Vec<Vec<i64>> = (0..n)
            .map(|j| data(me * n + j, sc_[j] as usize, s + 4))
            .collect();
        let src = placed(stotal, &sd, &sblocks);
        let mut got = vec![SENT; rtotal];
        {
            let sp = Partition::new(&src[..], &sc_[..], &sd[..]);
            let mut rp = PartitionMut::new(&mut got[..], &rc[..], &rd[..]);
            if imm {
                request::scope(|sc| {
                    w.immediate_all_to_all_varcount_into(sc, &sp, &mut rp)
                        .wait();
                });
            } else {
                w.all_to_all_varcount_into(&sp, &mut rp);
            }
        }
        let rblocks: Vec<Vec<i64>> = (0..n)
            .map(|i| data(i * n + me, rc[i] as usize, s + 4))
            .collect();
        assert_eq!(
            got,
            placed(rtotal, &rd, &rblocks),
            "{}",
            what("all_to_all_varcount")
        );

        for (k, (op, f, name)) in i64_ops().into_iter().enumerate() {
            let s = s + 10 * (k as u64 + 1);
            // all_reduce
            let mine = data(me, K, s);
            let mut got = vec![SENT; K];
            if imm {
                request::scope(|sc| {
                    w.immediate_all_reduce_into(sc, &mine[..], &mut got[..], op)
                        .wait();
                });
            } else {
                w.all_reduce_into(&mine[..], &mut got[..], op);
            }
            let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, K, s)).collect();
            assert_eq!(
                got,
                fold(&parts, f),
                "{}",
                what(&format!("all_reduce {name}"))
            );

            // reduce_scatter_block
            let mine = data(me, n * K, s + 1);
            let mut got = vec![SENT; K];
            if imm {
                request::scope(|sc| {
                    w.immediate_reduce_scatter_block_into(sc, &mine[..], &mut got[..], op)
                        .wait();
                });
            } else {
                w.reduce_scatter_block_into(&mine[..], &mut got[..], op);
            }
            let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, n * K, s + 1)).collect();
            let all = fold(&parts, f);
            assert_eq!(
                got,
                all[me * K..(me + 1) * K],
                "{}",
                what(&format!("reduce_scatter_block {name}"))
            );

            // reduce_scatter with counts 0..=3 (one more slot than needed: left alone)
            if !imm {
                let counts: Vec<i32> = (0..n).map(|r| ((r * 7 + k) % 4) as i32).collect();
                let len: usize = counts.iter().map(|&c| c as usize).sum();
                let mine = data(me, len, s + 2);
                let mut got = vec![SENT; counts[me] as usize + 1];
                w.reduce_scatter_into(&mine[..], &mut got[..], &counts, op);
                let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, len, s + 2)).collect();
                let all = fold(&parts, f);
                let at: usize = counts[..me].iter().map(|&c| c as usize).sum();
                let mut want = all[at..at + counts[me] as usize].to_vec();
                want.push(SENT);
                assert_eq!(got, want, "{}", what(&format!("reduce_scatter {name}")));
            }

            // scan and exclusive_scan
            let mine = data(me, K, s + 3);
            let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, K, s + 3)).collect();
            let mut inc = vec![SENT; K];
            let mut exc = vec![SENT; K];
            if imm {
                request::scope(|sc| {
                    let a = w.immediate_scan_into(sc, &mine[..], &mut inc[..], op);
                    let b = w.immediate_exclusive_scan_into(sc, &mine[..], &mut exc[..], op);
                    b.wait();
                    a.wait();
                });
            } else {
                w.scan_into(&mine[..], &mut inc[..], op);
                w.exclusive_scan_into(&mine[..], &mut exc[..], op);
            }
            assert_eq!(
                inc,
                fold(&parts[..=me], f),
                "{}",
                what(&format!("scan {name}"))
            );
            let want = if me == 0 {
                vec![SENT; K] // MPI leaves it undefined; rsmpi leaves it untouched
            } else {
                fold(&parts[..me], f)
            };
            assert_eq!(exc, want, "{}", what(&format!("exclusive_scan {name}")));
        }
    }
}

/// The in-place forms: all_reduce, scan, all_gather, and reduce at every root.
fn in_place(w: &SimpleCommunicator) {
    const K: usize = 4;
    let n = w.size() as usize;
    let me = w.rank() as usize;
    for (k, (op, f, name)) in i64_ops().into_iter().enumerate() {
        let s = 9000 + 10 * k as u64;
        let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, K, s)).collect();
        let mut b = parts[me].clone();
        w.all_reduce_in_place(&mut b[..], op);
        assert_eq!(b, fold(&parts, f), "all_reduce_in_place {name}");
        let mut b = parts[me].clone();
        w.scan_in_place(&mut b[..], op);
        assert_eq!(b, fold(&parts[..=me], f), "scan_in_place {name}");
        for root in 0..n {
            let rp = w.process_at_rank(root as i32);
            if me == root {
                let mut b = parts[me].clone();
                rp.reduce_into_root_in_place(&mut b[..], op);
                assert_eq!(
                    b,
                    fold(&parts, f),
                    "reduce_into_root_in_place {name} root {root}"
                );
            } else {
                rp.reduce_into(&parts[me][..], op);
            }
        }
    }
    let mut b = vec![SENT; n * K];
    b[me * K..(me + 1) * K].copy_from_slice(&data(me, K, 9100));
    w.all_gather_in_place(&mut b[..]);
    let want: Vec<i64> = (0..n).flat_map(|r| data(r, K, 9100)).collect();
    assert_eq!(b, want, "all_gather_in_place");
}

/// A struct with padding, a nested struct and nested arrays.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Inner {
    code: u16,
    w: [[i8; 3]; 2],
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Rec {
    tag: u8,
    pos: [f64; 3],
    inner: Inner,
    grid: [[u32; 2]; 3],
    flag: bool,
}

fn rec(r: usize, i: usize, salt: u64) -> Rec {
    let v = |k: usize| val(r, i * 64 + k, salt);
    Rec {
        tag: v(0) as u8,
        pos: [0, 1, 2].map(|k| (v(1 + k) % 10_000) as f64 / 8.0 - 600.0),
        inner: Inner {
            code: v(4) as u16,
            w: [
                [v(5) as i8, v(6) as i8, v(7) as i8],
                [v(8) as i8, v(9) as i8, v(10) as i8],
            ],
        },
        grid: [
            [v(11) as u32, v(12) as u32],
            [v(13) as u32, v(14) as u32],
            [v(15) as u32, v(16) as u32],
        ],
        flag: v(17) & 1 == 1,
    }
}

const REC0: Rec = Rec {
    tag: 0xee,
    pos: [-1.5; 3],
    inner: Inner {
        code: 0xeeee,
        w: [[-7; 3]; 2],
    },
    grid: [[0xeeee_eeee; 2]; 3],
    flag: true,
};

/// Derived datatypes: the struct through broadcast, gather and all_to_all; a vector
/// datatype over `View` / `MutView` through broadcast and gather.
fn derived(w: &SimpleCommunicator) {
    let n = w.size() as usize;
    let me = w.rank() as usize;
    let dt = Rec::equivalent_datatype();
    assert!(
        (dt.size() as usize) < std::mem::size_of::<Rec>(),
        "the test struct has padding"
    );
    assert_eq!(dt.size(), 1 + 24 + 2 + 6 + 24 + 1, "struct type signature");
    for imm in [false, true] {
        for root in [0, n - 1, n / 2] {
            let rp = w.process_at_rank(root as i32);
            // broadcast
            let want: Vec<Rec> = (0..3).map(|i| rec(root, i, 1)).collect();
            let mut b = if me == root {
                want.clone()
            } else {
                vec![REC0; 3]
            };
            if imm {
                request::scope(|sc| {
                    rp.immediate_broadcast_into(sc, &mut b[..]).wait();
                });
            } else {
                rp.broadcast_into(&mut b[..]);
            }
            assert_eq!(b, want, "struct broadcast root {root} immediate {imm}");
            // gather
            let mine = [rec(me, 0, 2 + root as u64), rec(me, 1, 2 + root as u64)];
            if me == root {
                let mut got = vec![REC0; 2 * n];
                if imm {
                    request::scope(|sc| {
                        rp.immediate_gather_into_root(sc, &mine[..], &mut got[..])
                            .wait();
                    });
                } else {
                    rp.gather_into_root(&mine[..], &mut got[..]);
                }
                let want: Vec<Rec> = (0..n)
                    .flat_map(|r| [rec(r, 0, 2 + root as u64), rec(r, 1, 2 + root as u64)])
                    .collect();
                assert_eq!(got, want, "struct gather root {root} immediate {imm}");
            } else if imm {
                request::scope(|sc| {
                    rp.immediate_gather_into(sc, &mine[..]).wait();
                });
            } else {
                rp.gather_into(&mine[..]);
            }
        }
        // all_to_all: two records per pair
        let send: Vec<Rec> = (0..2 * n).map(|k| rec(me * n + k / 2, k % 2, 20)).collect();
        let mut got = vec![REC0; 2 * n];
        if imm {
            request::scope(|sc| {
                w.immediate_all_to_all_into(sc, &send[..], &mut got[..])
                    .wait();
            });
        } else {
            w.all_to_all_into(&send[..], &mut got[..]);
        }
        let want: Vec<Rec> = (0..2 * n)
            .map(|k| rec((k / 2) * n + me, k % 2, 20))
            .collect();
        assert_eq!(got, want, "struct all_to_all immediate {imm}");

        // a vector datatype: elements 0, 3, 6, 9 of a 12-element buffer
        let vt = UserDatatype::vector(4, 1, 3, &i32::equivalent_datatype());
        let src = |r: usize| -> Vec<i32> { (0..12).map(|i| (r * 1000 + i) as i32).collect() };
        const S32: i32 = -77;
        for root in [0, n - 1] {
            let rp = w.process_at_rank(root as i32);
            let mut b = if me == root { src(root) } else { vec![S32; 12] };
            {
                let mut v = MutView::new(&mut b[..], 1, &vt);
                if imm {
                    request::scope(|sc| {
                        rp.immediate_broadcast_into(sc, &mut v).wait();
                    });
                } else {
                    rp.broadcast_into(&mut v);
                }
            }
            let want: Vec<i32> = if me == root {
                src(root)
            } else {
                (0..12)
                    .map(|i| if i % 3 == 0 { src(root)[i] } else { S32 })
                    .collect()
            };
            assert_eq!(b, want, "vector-type broadcast root {root} immediate {imm}");
            // gather: 4 strided values per rank into every other slot at the root
            let mine = src(me);
            let sv = View::new(&mine[..], 1, &vt);
            if me == root {
                let every_other =
                    UserDatatype::vector(4 * n as i32, 1, 2, &i32::equivalent_datatype());
                let mut got = vec![S32; 8 * n];
                {
                    let mut rv = MutView::new(&mut got[..], 1, &every_other);
                    if imm {
                        request::scope(|sc| {
                            rp.immediate_gather_into_root(sc, &sv, &mut rv).wait();
                        });
                    } else {
                        rp.gather_into_root(&sv, &mut rv);
                    }
                }
                let want: Vec<i32> = (0..8 * n)
                    .map(|k| {
                        if k % 2 == 0 {
                            src((k / 2) / 4)[((k / 2) % 4) * 3]
                        } else {
                            S32
                        }
                    })
                    .collect();
                assert_eq!(got, want, "vector-type gather root {root} immediate {imm}");
            } else if imm {
                request::scope(|sc| {
                    rp.immediate_gather_into(sc, &sv).wait();
                });
            } else {
                rp.gather_into(&sv);
            }
        }
    }
}

// ---- user operations ------------------------------------------------------------

/// The prime of the modular arithmetic below.
const P: u64 = 1_000_003;

/// A 2x2 matrix mod `P` (row-major): products are associative, not commutative.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Mat {
    m: [u64; 4],
}

fn mat_mul(a: Mat, b: Mat) -> Mat {
    let (a, b) = (a.m, b.m);
    Mat {
        m: [
            (a[0] * b[0] + a[1] * b[2]) % P,
            (a[0] * b[1] + a[1] * b[3]) % P,
            (a[2] * b[0] + a[3] * b[2]) % P,
            (a[2] * b[1] + a[3] * b[3]) % P,
        ],
    }
}

fn mat(r: usize, i: usize, salt: u64) -> Mat {
    Mat {
        m: [0, 1, 2, 3].map(|k| val(r, 4 * i + k, salt) % P),
    }
}

/// An affine map x -> mul·x + add (mod `P`) with a byte beside it (padding): the
/// operation "apply the first, then the second" is associative, not commutative.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Affine {
    mul: u32,
    kind: u8,
    add: u64,
}

fn affine_then(f: Affine, g: Affine) -> Affine {
    Affine {
        mul: ((f.mul as u64 * g.mul as u64) % P) as u32,
        kind: f.kind ^ g.kind,
        add: (g.mul as u64 * f.add + g.add) % P,
    }
}

fn affine(r: usize, i: usize, salt: u64) -> Affine {
    Affine {
        mul: (val(r, 3 * i, salt) % P) as u32,
        kind: val(r, 3 * i + 1, salt) as u8,
        add: val(r, 3 * i + 2, salt) % P,
    }
}

/// The three user operations under test, with their sequential forms (`a op b`).
struct UserOps {
    mat: UserOperation<'static>,
    aff: UserOperation<'static>,
    absmax: UserOperation<'static>,
}

fn user_ops() -> UserOps {
    UserOps {
        // non-commutative: inout = in · inout
        mat: UserOperation::associative(|x, y| {
            let x = x.downcast::<Mat>().expect("user op: elements are not Mat");
            let y = y.downcast::<Mat>().expect("user op: elements are not Mat");
            assert_eq!(x.len(), y.len());
            for (a, b) in x.iter().zip(y.iter_mut()) {
                *b = mat_mul(*a, *b);
            }
        }),
        // non-commutative, on a struct with padding
        aff: UserOperation::associative(|x, y| {
            let x = x
                .downcast::<Affine>()
                .expect("user op: elements are not Affine");
            let y = y
                .downcast::<Affine>()
                .expect("user op: elements are not Affine");
            for (a, b) in x.iter().zip(y.iter_mut()) {
                *b = affine_op(*a, *b);
            }
        }),
        // commutative: the value of largest magnitude (ties: the larger value)
        absmax: UserOperation::commutative(|x, y| {
            let x = x.downcast::<i32>().expect("user op: elements are not i32");
            let y = y.downcast::<i32>().expect("user op: elements are not i32");
            for (a, b) in x.iter().zip(y.iter_mut()) {
                *b = absmax(*a, *b);
            }
        }),
    }
}

fn affine_op(f: Affine, g: Affine) -> Affine {
    affine_then(f, g)
}

fn absmax(a: i32, b: i32) -> i32 {
    (a.unsigned_abs(), a).max((b.unsigned_abs(), b)).1
}

fn absval(r: usize, i: usize, salt: u64) -> i32 {
    (val(r, i, salt) % 2001) as i32 - 1000
}

/// A user operation on elements of type T: every reduction collective, blocking and
/// immediate, every root, against the sequential rank-order reduction.
fn check_user_op<T: Equivalence + Copy + PartialEq + Debug + 'static>(
    w: &SimpleCommunicator,
    name: &str,
    op: &UserOperation<'_>,
    f: fn(T, T) -> T,
    gen: fn(usize, usize, u64) -> T,
    zero: T,
) {
    const K: usize = 3;
    let n = w.size() as usize;
    let me = w.rank() as usize;
    let set = |len: usize, salt: u64| -> Vec<Vec<T>> {
        (0..n)
            .map(|r| (0..len).map(|i| gen(r, i, salt)).collect())
            .collect()
    };
    for imm in [false, true] {
        let what = |c: &str| format!("{c} with {name}, immediate {imm}, on {n} ranks");
        let s = 500 + imm as u64 * 50;
        // reduce at every root
        for root in 0..n {
            let parts = set(K, s + root as u64);
            let rp = w.process_at_rank(root as i32);
            if me == root {
                let mut got = vec![zero; K];
                if imm {
                    request::scope(|sc| {
                        rp.immediate_reduce_into_root(sc, &parts[me][..], &mut got[..], op)
                            .wait();
                    });
                } else {
                    rp.reduce_into_root(&parts[me][..], &mut got[..], op);
                }
                assert_eq!(
                    got,
                    fold(&parts, f),
                    "{}",
                    what(&format!("reduce root {root}"))
                );
            } else if imm {
                request::scope(|sc| {
                    rp.immediate_reduce_into(sc, &parts[me][..], op).wait();
                });
            } else {
                rp.reduce_into(&parts[me][..], op);
            }
        }
        // all_reduce
        let parts = set(K, s + 20);
        let mut got = vec![zero; K];
        if imm {
            request::scope(|sc| {
                w.immediate_all_reduce_into(sc, &parts[me][..], &mut got[..], op)
                    .wait();
            });
        } else {
            w.all_reduce_into(&parts[me][..], &mut got[..], op);
        }
        assert_eq!(got, fold(&parts, f), "{}", what("all_reduce"));
        // scan and exclusive_scan
        let parts = set(K, s + 21);
        let mut inc = vec![zero; K];
        let mut exc = vec![zero; K];
        if imm {
            request::scope(|sc| {
                let a = w.immediate_scan_into(sc, &parts[me][..], &mut inc[..], op);
                let b = w.immediate_exclusive_scan_into(sc, &parts[me][..], &mut exc[..], op);
                a.wait();
                b.wait();
            });
        } else {
            w.scan_into(&parts[me][..], &mut inc[..], op);
            w.exclusive_scan_into(&parts[me][..], &mut exc[..], op);
        }
        assert_eq!(inc, fold(&parts[..=me], f), "{}", what("scan"));
        if me > 0 {
            assert_eq!(exc, fold(&parts[..me], f), "{}", what("exclusive_scan"));
        } else {
            assert_eq!(
                exc,
                vec![zero; K],
                "{}",
                what("exclusive_scan on rank 0 (untouched)")
            );
        }
        // reduce_scatter_block: two elements per rank
        let parts = set(2 * n, s + 22);
        let mut got = vec![zero; 2];
        if imm {
            request::scope(|sc| {
                w.immediate_reduce_scatter_block_into(sc, &parts[me][..], &mut got[..], op)
                    .wait();
            });
        } else {
            w.reduce_scatter_block_into(&parts[me][..], &mut got[..], op);
        }
        assert_eq!(
            got,
            fold(&parts, f)[2 * me..2 * me + 2],
            "{}",
            what("reduce_scatter_block")
        );
        // reduce_scatter with counts 0..=2
        if !imm {
            let counts: Vec<i32> = (0..n).map(|r| ((r + 1) % 3) as i32).collect();
            let len: usize = counts.iter().map(|&c| c as usize).sum();
            let parts = set(len, s + 23);
            let mut got = vec![zero; counts[me] as usize];
            w.reduce_scatter_into(&parts[me][..], &mut got[..], &counts, op);
            let at: usize = counts[..me].iter().map(|&c| c as usize).sum();
            assert_eq!(
                got,
                fold(&parts, f)[at..at + counts[me] as usize],
                "{}",
                what("reduce_scatter")
            );
        }
    }
}

/// Commutative and non-commutative user operations (also on a struct with padding)
/// through every reduction collective.
fn user_operations(u: Universe) {
    let w = u.world();
    // the sequential forms are themselves associative and (for two) not commutative
    let (a, b, c) = (mat(0, 0, 1), mat(1, 0, 1), mat(2, 0, 1));
    assert_eq!(mat_mul(mat_mul(a, b), c), mat_mul(a, mat_mul(b, c)));
    assert_ne!(
        mat_mul(a, b),
        mat_mul(b, a),
        "the matrix product must not commute"
    );
    let (x, y, z) = (affine(0, 0, 1), affine(1, 0, 1), affine(2, 0, 1));
    assert_eq!(affine_op(affine_op(x, y), z), affine_op(x, affine_op(y, z)));
    assert_ne!(
        affine_op(x, y),
        affine_op(y, x),
        "the affine composition must not commute"
    );
    let ops = user_ops();
    assert!(
        !(&ops.mat).is_commutative()
            && !(&ops.aff).is_commutative()
            && (&ops.absmax).is_commutative()
    );
    let z = Mat { m: [0; 4] };
    check_user_op(&w, "2x2 matrix product", &ops.mat, mat_mul, mat, z);
    let z = Affine {
        mul: 0,
        kind: 0,
        add: 0,
    };
    check_user_op(
        &w,
        "affine composition (struct)",
        &ops.aff,
        affine_op,
        affine,
        z,
    );
    check_user_op(&w, "abs-max (commutative)", &ops.absmax, absmax, absval, 0);
    // reduce_local_into with a user operation: inout = in op inout
    let (p, q) = ([a, b], [c, a]);
    let mut io = q;
    rsmpi::collective::reduce_local_into(&p[..], &mut io[..], &ops.mat);
    assert_eq!(io, [mat_mul(a, c), mat_mul(b, a)], "reduce_local_into");
    w.barrier();
}

/// The in-place forms with user operations: all_reduce_in_place, scan_in_place and
/// reduce_into_root_in_place (the closure must see the user's element type).
/// (Found a bug: the in-place forms once handed the closure the buffer's bytes as
/// `u8` elements, so `downcast::<Mat>()` failed.)
fn in_place_user_ops(u: Universe) {
    let w = u.world();
    let n = w.size() as usize;
    let me = w.rank() as usize;
    let ops = user_ops();
    let parts: Vec<Vec<Mat>> = (0..n)
        .map(|r| (0..3).map(|i| mat(r, i, 77)).collect())
        .collect();
    let mut b = parts[me].clone();
    w.all_reduce_in_place(&mut b[..], &ops.mat);
    assert_eq!(
        b,
        fold(&parts, mat_mul),
        "all_reduce_in_place with a user op"
    );
    let mut b = parts[me].clone();
    w.scan_in_place(&mut b[..], &ops.mat);
    assert_eq!(
        b,
        fold(&parts[..=me], mat_mul),
        "scan_in_place with a user op"
    );
    for root in 0..n {
        let rp = w.process_at_rank(root as i32);
        if me == root {
            let mut b = parts[me].clone();
            rp.reduce_into_root_in_place(&mut b[..], &ops.mat);
            assert_eq!(
                b,
                fold(&parts, mat_mul),
                "reduce_into_root_in_place root {root}"
            );
        } else {
            rp.reduce_into(&parts[me][..], &ops.mat);
        }
    }
    let parts: Vec<Vec<i32>> = (0..n)
        .map(|r| (0..5).map(|i| absval(r, i, 78)).collect())
        .collect();
    let mut b = parts[me].clone();
    w.all_reduce_in_place(&mut b[..], &ops.absmax);
    assert_eq!(
        b,
        fold(&parts, absmax),
        "all_reduce_in_place with a commutative user op"
    );
    w.barrier();
}

// ---- predefined operations on every type ----------------------------------------

/// Runs `ops` on values of type T from `gen` through all_reduce, reduce (root varies),
/// scan, exclusive_scan, reduce_scatter_block and immediate all_reduce; and checks
/// reduce_local_into against the same sequential forms.
/// A predefined operation, the sequential function it must equal, and its name.
type OpCase<T> = (SystemOperation, fn(T, T) -> T, &'static str);

fn check_sys<T: Equivalence + Copy + PartialEq + Debug + 'static>(
    w: &SimpleCommunicator,
    ty: &str,
    ops: &[OpCase<T>],
    gen: impl Fn(usize, usize) -> T,
    zero: T,
) {
    let n = w.size() as usize;
    let me = w.rank() as usize;
    const K: usize = 4;
    for (k, &(op, f, name)) in ops.iter().enumerate() {
        let what = |c: &str| format!("{c} {name} on {ty}");
        let parts: Vec<Vec<T>> = (0..n)
            .map(|r| (0..n * K).map(|i| gen(r, i + 97 * k)).collect())
            .collect();
        let all = fold(&parts, f);
        let mine = &parts[me][..];
        // reduce_local_into is the local form of the same operation
        if n >= 2 {
            let mut io = parts[1].clone();
            rsmpi::collective::reduce_local_into(&parts[0][..], &mut io[..], op);
            assert_eq!(io, fold(&parts[..2], f), "{}", what("reduce_local_into"));
        }
        let mut got = vec![zero; n * K];
        w.all_reduce_into(mine, &mut got[..], op);
        assert_eq!(got, all, "{}", what("all_reduce"));
        let mut got = vec![zero; n * K];
        request::scope(|sc| {
            w.immediate_all_reduce_into(sc, mine, &mut got[..], op)
                .wait();
        });
        assert_eq!(got, all, "{}", what("immediate all_reduce"));
        let root = k % n;
        let rp = w.process_at_rank(root as i32);
        if me == root {
            let mut got = vec![zero; n * K];
            rp.reduce_into_root(mine, &mut got[..], op);
            assert_eq!(got, all, "{}", what(&format!("reduce root {root}")));
        } else {
            rp.reduce_into(mine, op);
        }
        let mut got = vec![zero; n * K];
        w.scan_into(mine, &mut got[..], op);
        assert_eq!(got, fold(&parts[..=me], f), "{}", what("scan"));
        if n > 1 {
            let mut got = vec![zero; n * K];
            w.exclusive_scan_into(mine, &mut got[..], op);
            if me > 0 {
                assert_eq!(got, fold(&parts[..me], f), "{}", what("exclusive_scan"));
            }
        }
        let mut got = vec![zero; K];
        w.reduce_scatter_block_into(mine, &mut got[..], op);
        assert_eq!(
            got,
            all[me * K..(me + 1) * K],
            "{}",
            what("reduce_scatter_block")
        );
    }
}

macro_rules! int_type {
    ($w:expr, $t:ty) => {{
        let ops: [(SystemOperation, fn($t, $t) -> $t, &str); 10] = [
            (SystemOperation::sum(), |a, b| a.wrapping_add(b), "sum"),
            (
                SystemOperation::product(),
                |a, b| a.wrapping_mul(b),
                "product",
            ),
            (SystemOperation::max(), |a, b| a.max(b), "max"),
            (SystemOperation::min(), |a, b| a.min(b), "min"),
            (
                SystemOperation::logical_and(),
                |a, b| ((a != 0) && (b != 0)) as $t,
                "logical_and",
            ),
            (
                SystemOperation::logical_or(),
                |a, b| ((a != 0) || (b != 0)) as $t,
                "logical_or",
            ),
            (
                SystemOperation::logical_xor(),
                |a, b| ((a != 0) != (b != 0)) as $t,
                "logical_xor",
            ),
            (SystemOperation::bitwise_and(), |a, b| a & b, "bitwise_and"),
            (SystemOperation::bitwise_or(), |a, b| a | b, "bitwise_or"),
            (SystemOperation::bitwise_xor(), |a, b| a ^ b, "bitwise_xor"),
        ];
        let gen = |r: usize, i: usize| -> $t {
            let wide = ((val(r, i, 31) as u128) << 64) | val(r, i, 32) as u128;
            match (r + i) % 7 {
                0 => 0 as $t,
                1 => <$t>::MAX,
                2 => <$t>::MIN,
                3 => (wide % 5) as $t, // small: products stay small, some zeros
                _ => wide as $t,       // anything, negative or huge
            }
        };
        check_sys::<$t>($w, stringify!($t), &ops, gen, 0 as $t);
    }};
}

macro_rules! float_type {
    ($w:expr, $t:ty) => {{
        let ops: [(SystemOperation, fn($t, $t) -> $t, &str); 4] = [
            (SystemOperation::sum(), |a, b| a + b, "sum"),
            (SystemOperation::product(), |a, b| a * b, "product"),
            (SystemOperation::max(), |a, b| a.max(b), "max"),
            (SystemOperation::min(), |a, b| a.min(b), "min"),
        ];
        // quarters in -20..20: sums and products of a few are exact
        let gen = |r: usize, i: usize| -> $t { ((val(r, i, 33) % 161) as $t - 80.0) / 4.0 };
        check_sys::<$t>($w, stringify!($t), &ops, gen, 0.0);
    }};
}

/// Every predefined operation on every type it applies to (all integer widths,
/// signed and unsigned, `usize`/`isize`, f32/f64 arithmetic only, bool logical and
/// bitwise), through the reduction collectives; a predefined operation on a type it
/// does not apply to is an `MPI_ERR_TYPE`-class error.
fn predefined_ops(u: Universe) {
    let w = u.world();
    int_type!(&w, u8);
    int_type!(&w, i8);
    int_type!(&w, u16);
    int_type!(&w, i16);
    int_type!(&w, u32);
    int_type!(&w, i32);
    int_type!(&w, u64);
    int_type!(&w, i64);
    int_type!(&w, u128);
    int_type!(&w, i128);
    int_type!(&w, usize);
    int_type!(&w, isize);
    float_type!(&w, f32);
    float_type!(&w, f64);
    let bool_ops: [OpCase<bool>; 6] = [
        (SystemOperation::logical_and(), |a, b| a && b, "logical_and"),
        (SystemOperation::logical_or(), |a, b| a || b, "logical_or"),
        (SystemOperation::logical_xor(), |a, b| a != b, "logical_xor"),
        (SystemOperation::bitwise_and(), |a, b| a & b, "bitwise_and"),
        (SystemOperation::bitwise_or(), |a, b| a | b, "bitwise_or"),
        (SystemOperation::bitwise_xor(), |a, b| a ^ b, "bitwise_xor"),
    ];
    // mostly true, so that "and" is not always false
    check_sys::<bool>(
        &w,
        "bool",
        &bool_ops,
        |r, i| !val(r, i, 34).is_multiple_of(4),
        false,
    );

    // a predefined operation on a type it does not apply to
    let not_for_floats = [
        SystemOperation::logical_and(),
        SystemOperation::logical_or(),
        SystemOperation::logical_xor(),
        SystemOperation::bitwise_and(),
        SystemOperation::bitwise_or(),
        SystemOperation::bitwise_xor(),
    ];
    for op in not_for_floats {
        let mut b = [1.0f64, 2.0];
        let e = try_reduce_local_into(&[3.0f64, 4.0][..], &mut b[..], op).unwrap_err();
        assert!(matches!(e, Error::Type(_)), "{op:?} on f64: {e:?}");
        assert_eq!(e.class(), ErrorClass::Type, "{op:?} on f64");
        assert_eq!(b, [1.0, 2.0], "{op:?} on f64 changed the buffer");
        let mut b = [1.0f32];
        let e = try_reduce_local_into(&[3.0f32][..], &mut b[..], op).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Type, "{op:?} on f32: {e}");
    }
    for op in [
        SystemOperation::sum(),
        SystemOperation::product(),
        SystemOperation::max(),
        SystemOperation::min(),
    ] {
        let mut b = [true, false];
        let e = try_reduce_local_into(&[true, true][..], &mut b[..], op).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Type, "{op:?} on bool: {e}");
        assert_eq!(b, [true, false], "{op:?} on bool changed the buffer");
    }
    // a struct of several basic types takes no predefined operation
    let mut b = [REC0];
    let e = try_reduce_local_into(&[REC0][..], &mut b[..], SystemOperation::sum()).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Type, "sum on a struct: {e}");
    // and the valid combinations are accepted locally
    let mut b = [5i8];
    try_reduce_local_into(&[-7i8][..], &mut b[..], SystemOperation::min()).expect("min on i8");
    assert_eq!(b, [-7]);
    w.barrier();
}

/// Rank bodies that call a collective with a predefined operation on a type it does
/// not apply to: the job must abort naming the call. Rank 0 calls it first; the other
/// ranks a second later (the job should be over by then).
fn helper_bitwise_and_f64(u: Universe) {
    let w = u.world();
    if w.rank() != 0 {
        std::thread::sleep(Duration::from_secs(2));
    }
    let mut out = [0.0f64; 2];
    w.all_reduce_into(
        &[1.0f64, 2.0][..],
        &mut out[..],
        SystemOperation::bitwise_and(),
    );
    println!(
        "rank {}: all_reduce of f64 with bitwise_and returned",
        w.rank()
    );
}

fn helper_ireduce_sum_bool(u: Universe) {
    let w = u.world();
    if w.rank() != 0 {
        std::thread::sleep(Duration::from_secs(2));
    }
    let rp = w.process_at_rank(0);
    let mut out = [false; 2];
    request::scope(|sc| {
        if w.rank() == 0 {
            rp.immediate_reduce_into_root(
                sc,
                &[true, false][..],
                &mut out[..],
                SystemOperation::sum(),
            )
            .wait();
        } else {
            rp.immediate_reduce_into(sc, &[true, false][..], SystemOperation::sum())
                .wait();
        }
    });
    println!("rank {}: reduce of bool with sum returned", w.rank());
}

/// Every rank makes the same erroneous call at once (as a correct MPI program would
/// call a collective): the job must still fail.
fn helper_every_rank_at_once(u: Universe) {
    let w = u.world();
    let mut out = [0.0f64; 2];
    w.all_reduce_into(
        &[1.0f64, 2.0][..],
        &mut out[..],
        SystemOperation::bitwise_and(),
    );
    println!(
        "rank {}: all_reduce of f64 with bitwise_and returned",
        w.rank()
    );
}

/// Runs `helper` on `ranks` ranks, expecting the job to fail with a message naming
/// `call` and the type error, and no rank returning from the call.
fn expect_type_abort(ctx: &Ctx, helper: &str, call: &str, ranks: u32) -> Result<(), String> {
    let out = launch(
        ctx,
        helper,
        ranks,
        Duration::from_secs(30),
        &[],
        Duration::from_secs(40),
    );
    let named = out
        .stderr
        .lines()
        .any(|l| l.contains(&format!("{call}:")) && l.contains("does not apply"));
    if !named {
        return Err(format!(
            "{helper}: no message naming {call} and the type error:\n{}",
            out.stderr
        ));
    }
    if out.stdout.contains("returned") {
        return Err(format!(
            "{helper}: the erroneous call returned:\n{}",
            out.stdout
        ));
    }
    match out.code {
        None => Err(format!("{helper}: the job did not end (hang)")),
        Some(0) => Err(format!(
            "{helper}: the job exited with status 0 although its ranks aborted:\n{}",
            out.stderr
        )),
        Some(_) => Ok(()),
    }
}

fn wrong_type_aborts(ctx: &Ctx) -> Result<(), String> {
    expect_type_abort(
        ctx,
        "coll_helper_all_reduce_bitwise_and_f64",
        "all_reduce",
        2,
    )?;
    expect_type_abort(ctx, "coll_helper_ireduce_sum_bool", "ireduce", 2)
}

/// Every rank aborting at the same moment still fails the job. (Found a launcher bug:
/// when every rank aborted within `ABORT_SETTLE` and exited, `supervise` ended with no
/// status recorded and the job exited with 0.)
fn every_rank_aborts_at_once(ctx: &Ctx) -> Result<(), String> {
    expect_type_abort(ctx, "coll_helper_every_rank_fails_at_once", "all_reduce", 3)
}

// ---- large messages -------------------------------------------------------------

/// Sizes across the thresholds of `rsmpi-coll` (binomial / scatter-ring broadcast,
/// recursive doubling / Rabenseifner reduce and allreduce, recursive doubling / Bruck /
/// ring allgather, Bruck / pairwise alltoall), blocking and immediate.
fn large_messages(u: Universe) {
    let w = u.world();
    let n = w.size() as usize;
    let me = w.rank() as usize;
    let f = |v: &[i64]| -> Vec<f64> { v.iter().map(|&x| x as f64).collect() };
    // all_reduce / reduce of f64 sums (exact: small integers): below, at and above the
    // 2048-byte threshold, an element count not divisible by the size, and 128 KiB; on
    // two ranks also at and above 512 KiB, where their all-reduce goes from recursive
    // doubling to Rabenseifner (`rsmpi_coll::tuning::ALLREDUCE_SHORT_MSG_TWO_RANKS`)
    let two = if n == 2 {
        &[65_536usize, 65_537][..]
    } else {
        &[]
    };
    for &len in [255usize, 256, 257, 1001, 16_384].iter().chain(two) {
        let parts: Vec<Vec<f64>> = (0..n).map(|r| f(&data(r, len, len as u64))).collect();
        let want = fold(&parts, |a, b| a + b);
        let mut got = vec![0.0f64; len];
        w.all_reduce_into(&parts[me][..], &mut got[..], SystemOperation::sum());
        assert!(got == want, "all_reduce of {len} f64");
        let mut got = vec![0.0f64; len];
        request::scope(|sc| {
            w.immediate_all_reduce_into(sc, &parts[me][..], &mut got[..], SystemOperation::sum())
                .wait();
        });
        assert!(got == want, "immediate all_reduce of {len} f64");
        for root in [0, n - 1] {
            let rp = w.process_at_rank(root as i32);
            if me == root {
                let mut got = vec![0.0f64; len];
                rp.reduce_into_root(&parts[me][..], &mut got[..], SystemOperation::sum());
                assert!(got == want, "reduce of {len} f64 to {root}");
            } else {
                rp.reduce_into(&parts[me][..], SystemOperation::sum());
            }
        }
    }
    // max of i32 through Rabenseifner, and reduce_scatter_block / scan of 64 KiB
    let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, 8192 * n, 41)).collect();
    let mut got = vec![0i64; 8192];
    w.reduce_scatter_block_into(&parts[me][..], &mut got[..], SystemOperation::max());
    assert_eq!(
        got,
        fold(&parts, |a, b| a.max(b))[me * 8192..(me + 1) * 8192],
        "reduce_scatter_block 64 KiB"
    );
    let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, 8192, 42)).collect();
    let mut got = vec![0i64; 8192];
    w.scan_into(&parts[me][..], &mut got[..], SystemOperation::sum());
    assert_eq!(got, fold(&parts[..=me], |a, b| a + b), "scan 64 KiB");
    // a non-commutative user operation on 64 KiB (rank order kept)
    let ops = user_ops();
    let parts: Vec<Vec<Mat>> = (0..n)
        .map(|r| (0..2048).map(|i| mat(r, i, 43)).collect())
        .collect();
    let want = fold(&parts, mat_mul);
    let z = Mat { m: [0; 4] };
    let mut got = vec![z; 2048];
    w.all_reduce_into(&parts[me][..], &mut got[..], &ops.mat);
    assert!(
        got == want,
        "all_reduce of 64 KiB with a non-commutative user op"
    );
    let rp = w.process_at_rank(n as i32 - 1);
    if me == n - 1 {
        let mut got = vec![z; 2048];
        rp.reduce_into_root(&parts[me][..], &mut got[..], &ops.mat);
        assert!(
            got == want,
            "reduce of 64 KiB with a non-commutative user op"
        );
    } else {
        rp.reduce_into(&parts[me][..], &ops.mat);
    }

    // broadcast: 12287 / 12288 bytes (the threshold), 12292 bytes of u32, 256 KiB
    for (len, root) in [
        (12_287usize, 0usize),
        (12_288, n - 1),
        (256 * 1024, 0),
        (256 * 1024, n / 2),
    ] {
        let want = pattern(len, root as u8 + 3);
        let mut b = if me == root {
            want.clone()
        } else {
            vec![0u8; len]
        };
        w.process_at_rank(root as i32).broadcast_into(&mut b[..]);
        assert!(b == want, "broadcast of {len} bytes from {root}");
        let mut b = if me == root {
            want.clone()
        } else {
            vec![0u8; len]
        };
        request::scope(|sc| {
            w.process_at_rank(root as i32)
                .immediate_broadcast_into(sc, &mut b[..])
                .wait();
        });
        assert!(b == want, "immediate broadcast of {len} bytes from {root}");
    }
    let want: Vec<u32> = (0..3073).map(|i| val(1, i, 44) as u32).collect();
    let mut b = if me == 1 % n {
        want.clone()
    } else {
        vec![0u32; 3073]
    };
    w.process_at_rank((1 % n) as i32).broadcast_into(&mut b[..]);
    assert!(b == want, "broadcast of 3073 u32");

    // all_gather: total just under and at 81920 bytes (Bruck / ring on non powers of
    // two), 20 KiB and 64 KiB per rank
    let per = [81_919 / n, 81_920usize.div_ceil(n), 20 * 1024, 64 * 1024];
    for (k, len) in per.into_iter().enumerate() {
        let mine = pattern(len, (me * 7 + k) as u8);
        let want: Vec<u8> = (0..n)
            .flat_map(|r| pattern(len, (r * 7 + k) as u8))
            .collect();
        let mut got = vec![0u8; n * len];
        if k % 2 == 0 {
            w.all_gather_into(&mine[..], &mut got[..]);
        } else {
            request::scope(|sc| {
                w.immediate_all_gather_into(sc, &mine[..], &mut got[..])
                    .wait();
            });
        }
        assert!(got == want, "all_gather of {len} bytes per rank");
    }
    // all_to_all: 256 and 257 bytes per pair (Bruck / pairwise on 8 ranks), 8 KiB
    for (k, len) in [256usize, 257, 8 * 1024].into_iter().enumerate() {
        let send: Vec<u8> = (0..n)
            .flat_map(|j| pattern(len, (me * n + j + k) as u8))
            .collect();
        let want: Vec<u8> = (0..n)
            .flat_map(|i| pattern(len, (i * n + me + k) as u8))
            .collect();
        let mut got = vec![0u8; n * len];
        w.all_to_all_into(&send[..], &mut got[..]);
        assert!(got == want, "all_to_all of {len} bytes per pair");
        let mut got = vec![0u8; n * len];
        request::scope(|sc| {
            w.immediate_all_to_all_into(sc, &send[..], &mut got[..])
                .wait();
        });
        assert!(got == want, "immediate all_to_all of {len} bytes per pair");
    }
    // gather / scatter of 32 KiB per rank
    let root = n / 2;
    let rp = w.process_at_rank(root as i32);
    let mine = pattern(32 * 1024, me as u8);
    let all: Vec<u8> = (0..n).flat_map(|r| pattern(32 * 1024, r as u8)).collect();
    if me == root {
        let mut got = vec![0u8; n * 32 * 1024];
        rp.gather_into_root(&mine[..], &mut got[..]);
        assert!(got == all, "gather of 32 KiB per rank");
    } else {
        rp.gather_into(&mine[..]);
    }
    let mut got = vec![0u8; 32 * 1024];
    if me == root {
        rp.scatter_into_root(&all[..], &mut got[..]);
    } else {
        rp.scatter_into(&mut got[..]);
    }
    assert!(got == mine, "scatter of 32 KiB per rank");
    w.barrier();
}

// ---- communicators and user traffic ---------------------------------------------

/// A few collectives on `c` (which must all complete, with the right results).
fn small_suite(c: &SimpleCommunicator, salt: u64) {
    let n = c.size() as usize;
    let me = c.rank() as usize;
    for root in 0..n {
        let want = data(root, 3, salt + root as u64);
        let mut b = if me == root {
            want.clone()
        } else {
            vec![SENT; 3]
        };
        c.process_at_rank(root as i32).broadcast_into(&mut b[..]);
        assert_eq!(b, want, "broadcast");
    }
    let parts: Vec<Vec<i64>> = (0..n).map(|r| data(r, 4, salt + 50)).collect();
    let mut got = vec![SENT; 4];
    c.all_reduce_into(&parts[me][..], &mut got[..], SystemOperation::sum());
    assert_eq!(got, fold(&parts, |a, b| a + b), "all_reduce");
    let mut got = vec![SENT; 4 * n];
    c.all_gather_into(&parts[me][..], &mut got[..]);
    assert_eq!(got, parts.concat(), "all_gather");
    let send: Vec<i64> = (0..n)
        .flat_map(|j| data(me * n + j, 2, salt + 51))
        .collect();
    let mut got = vec![SENT; 2 * n];
    c.all_to_all_into(&send[..], &mut got[..]);
    let want: Vec<i64> = (0..n)
        .flat_map(|i| data(i * n + me, 2, salt + 51))
        .collect();
    assert_eq!(got, want, "all_to_all");
    let mut got = vec![SENT; 4];
    c.scan_into(&parts[me][..], &mut got[..], SystemOperation::max());
    assert_eq!(got, fold(&parts[..=me], |a, b| a.max(b)), "scan");
    c.barrier();
    c.immediate_barrier().wait();
    let mut got = vec![SENT; 4];
    request::scope(|sc| {
        c.immediate_all_reduce_into(sc, &parts[me][..], &mut got[..], SystemOperation::min())
            .wait();
    });
    assert_eq!(got, fold(&parts, |a, b| a.min(b)), "immediate all_reduce");
}

/// On `c`: its members (world ranks, in rank order) are `members`; collective traffic
/// never matches a user receive (an any-source any-tag receive posted before the
/// collectives gets exactly the one user message sent after them); user messages on
/// the tags the collectives use internally, in flight across the collectives, arrive
/// intact and in order.
fn isolation(name: &str, c: &SimpleCommunicator, members: &[i32], world_rank: i32) {
    let n = c.size() as usize;
    let me = c.rank() as usize;
    assert_eq!(n, members.len(), "{name}: size");
    assert_eq!(
        members[me], world_rank,
        "{name}: rank {me} is world rank {}",
        members[me]
    );
    let mut got = vec![-1i32; n];
    c.all_gather_into(&world_rank, &mut got[..]);
    assert_eq!(got, members, "{name}: members in rank order");
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;

    // 1. a wildcard receive posted before the collectives
    let out = [0x5eed_i64, world_rank as i64, me as i64];
    let mut slot = [0i64; 3];
    request::scope(|sc| {
        let r = c.any_process().immediate_receive_into(sc, &mut slot[..]);
        small_suite(c, 100);
        // nobody has sent a user message on `c` yet
        let r = match r.test() {
            Ok(st) => panic!(
                "{name}: collective traffic matched a user wildcard receive (source {}, tag {})",
                st.source_rank(),
                st.tag()
            ),
            Err(r) => r,
        };
        c.barrier(); // every rank has tested before anyone sends
                     // tag 1: a tag the collectives above used on the internal context
        c.process_at_rank(right as i32).send_with_tag(&out[..], 1);
        let st = r.wait();
        assert_eq!(
            (st.source_rank(), st.tag()),
            (left as i32, 1),
            "{name}: wildcard receive"
        );
    });
    assert_eq!(
        slot,
        [0x5eed, members[left] as i64, left as i64],
        "{name}: wildcard payload"
    );

    // 2. user messages on tags 0..6 in flight across collectives; two receives
    // pre-posted, the others late and in reverse tag order
    let outs: Vec<[i64; 2]> = (0..6).map(|t| [world_rank as i64 * 100 + t, t]).collect();
    let mut ins = vec![[0i64; 2]; 6];
    request::scope(|sc| {
        let (early, late) = ins.split_at_mut(2);
        let lp = c.process_at_rank(left as i32);
        let pre: Vec<_> = early
            .iter_mut()
            .enumerate()
            .map(|(t, b)| lp.immediate_receive_into_with_tag(sc, &mut b[..], t as i32))
            .collect();
        let sends: Vec<_> = outs
            .iter()
            .enumerate()
            .map(|(t, o)| {
                c.process_at_rank(right as i32)
                    .immediate_send_with_tag(sc, &o[..], t as i32)
            })
            .collect();
        small_suite(c, 200);
        for (i, b) in late.iter_mut().enumerate().rev() {
            let t = i as i32 + 2;
            let st = lp.receive_into_with_tag(&mut b[..], t);
            assert_eq!(
                (st.source_rank(), st.tag()),
                (left as i32, t),
                "{name}: user message"
            );
        }
        for r in pre {
            r.wait();
        }
        for s in sends {
            s.wait();
        }
    });
    let want: Vec<[i64; 2]> = (0..6)
        .map(|t| [members[left] as i64 * 100 + t, t])
        .collect();
    assert_eq!(ins, want, "{name}: user messages across the collectives");
    assert!(
        c.any_process().immediate_probe().is_none(),
        "{name}: a stray message is left"
    );
}

/// Collectives on a duplicate, a split (keys reversing the order), a Cartesian grid
/// and its row and column sub-communicators, each with user traffic on the same tags;
/// immediate collectives outstanding on several communicators at once.
fn communicators(u: Universe) {
    let w = u.world();
    let n = w.size();
    let me = w.rank();
    assert_eq!(n, 6, "a 2x3 grid");
    let dup = w.duplicate();
    let half = w
        .split_by_color_with_key(Color::with_value(me % 2), -me)
        .expect("a color");
    let cart = w
        .create_cartesian_communicator(&[2, 3], &[false, true], false)
        .expect("in the grid");
    let (row, col) = (me / 3, me % 3);
    assert_eq!(cart.rank_to_coordinates(cart.rank()), vec![row, col]);
    let rows = cart.subgroup(&[false, true]);
    let cols = cart.subgroup(&[true, false]);
    let all: Vec<i32> = (0..n).collect();
    let half_members: Vec<i32> = (0..n).filter(|r| r % 2 == me % 2).rev().collect();
    let row_members: Vec<i32> = (0..3).map(|c| row * 3 + c).collect();
    let col_members: Vec<i32> = (0..2).map(|r| r * 3 + col).collect();
    let comms: [(&str, SimpleCommunicator, &[i32]); 6] = [
        ("world", w, &all),
        ("dup", dup, &all),
        ("split", half, &half_members),
        ("cart", cart.as_simple(), &all),
        ("cart row", rows.as_simple(), &row_members),
        ("cart column", cols.as_simple(), &col_members),
    ];
    for (name, c, members) in &comms {
        isolation(name, c, members, me);
    }
    // a collective through the Cartesian communicator itself
    let mut s = 0i32;
    rows.all_reduce_into(&me, &mut s, SystemOperation::sum());
    assert_eq!(
        s,
        row_members.iter().sum::<i32>(),
        "all_reduce over a cart row"
    );

    // immediate collectives on world, dup, split and row at once, completed in reverse
    let mut a = [0i64; 2];
    let mut b = [0i64; 2];
    let mut c = [0i64; 2];
    let mut d = vec![SENT; 3];
    let x = [me as i64, 1];
    let me64 = me as i64;
    request::scope(|sc| {
        let ra = w.immediate_all_reduce_into(sc, &x, &mut a, SystemOperation::sum());
        let rb = dup.immediate_all_reduce_into(sc, &x, &mut b, SystemOperation::max());
        let rc = half.immediate_all_reduce_into(sc, &x, &mut c, SystemOperation::sum());
        let rd = rows.immediate_all_gather_into(sc, &me64, &mut d[..]);
        // blocking collectives on the same communicators meanwhile
        small_suite(&half, 300);
        small_suite(&w, 400);
        rd.wait();
        rc.wait();
        rb.wait();
        ra.wait();
    });
    assert_eq!(a, [15, 6], "world");
    assert_eq!(b, [5, 1], "dup");
    assert_eq!(
        c,
        [half_members.iter().map(|&r| r as i64).sum(), 3],
        "split"
    );
    assert_eq!(
        d,
        row_members.iter().map(|&r| r as i64).collect::<Vec<_>>(),
        "row"
    );
    w.barrier();
}

// ---- several immediate collectives, progress --------------------------------------

/// Several immediate collectives outstanding at once on one communicator, completed in
/// an order that differs from the start order and between ranks; an immediate barrier
/// and an immediate all_to_all progressing while their rank blocks in a receive.
// one request per statement below reads better than one long `vec![…]`
#[allow(clippy::vec_init_then_push)]
fn immediate_outstanding(u: Universe) {
    let w = u.world();
    let n = w.size() as usize;
    let me = w.rank() as usize;
    assert!(n >= 3, "needs a collective of more than one round");
    const K: usize = 3;
    for round in 0..3usize {
        let s = 1000 * round as u64;
        let bsrc = data(1, K, s + 1);
        let mut bcast = if me == 1 { bsrc.clone() } else { vec![SENT; K] };
        let ar: Vec<Vec<i64>> = (0..n).map(|r| data(r, K, s + 2)).collect();
        let mut arout = vec![SENT; K];
        let mut agout = vec![SENT; n * K];
        let a2a: Vec<i64> = (0..n).flat_map(|j| data(me * n + j, K, s + 3)).collect();
        let mut a2aout = vec![SENT; n * K];
        let mut gout = vec![SENT; n * K];
        let sall: Vec<i64> = (0..n).flat_map(|r| data(r, K, s + 4)).collect();
        let mut sout = vec![SENT; K];
        let mut scan = vec![SENT; K];
        let mut exscan = vec![SENT; K];
        let mut rout = vec![SENT; K];
        let mut rsb = vec![SENT; 1];
        let rsbin = data(me, n, s + 5);
        request::scope(|sc| {
            let sum = SystemOperation::sum();
            // started in the same order on every rank
            let mut reqs = Vec::new();
            reqs.push(Some((
                "ibcast",
                w.process_at_rank(1)
                    .immediate_broadcast_into(sc, &mut bcast[..])
                    .into_unit(),
            )));
            reqs.push(Some((
                "iallreduce",
                w.immediate_all_reduce_into(sc, &ar[me][..], &mut arout[..], sum)
                    .into_unit(),
            )));
            reqs.push(Some((
                "iallgather",
                w.immediate_all_gather_into(sc, &ar[me][..], &mut agout[..])
                    .into_unit(),
            )));
            reqs.push(Some(("ibarrier", w.immediate_barrier().into_unit())));
            reqs.push(Some((
                "ialltoall",
                w.immediate_all_to_all_into(sc, &a2a[..], &mut a2aout[..])
                    .into_unit(),
            )));
            let gp = w.process_at_rank(2);
            reqs.push(Some((
                "igather",
                if me == 2 {
                    gp.immediate_gather_into_root(sc, &ar[me][..], &mut gout[..])
                        .into_unit()
                } else {
                    gp.immediate_gather_into(sc, &ar[me][..]).into_unit()
                },
            )));
            let sp = w.process_at_rank(0);
            reqs.push(Some((
                "iscatter",
                if me == 0 {
                    sp.immediate_scatter_into_root(sc, &sall[..], &mut sout[..])
                        .into_unit()
                } else {
                    sp.immediate_scatter_into(sc, &mut sout[..]).into_unit()
                },
            )));
            reqs.push(Some((
                "iscan",
                w.immediate_scan_into(sc, &ar[me][..], &mut scan[..], sum)
                    .into_unit(),
            )));
            reqs.push(Some((
                "iexscan",
                w.immediate_exclusive_scan_into(sc, &ar[me][..], &mut exscan[..], sum)
                    .into_unit(),
            )));
            let rp = w.process_at_rank(n as i32 - 1);
            reqs.push(Some((
                "ireduce",
                if me == n - 1 {
                    rp.immediate_reduce_into_root(sc, &ar[me][..], &mut rout[..], sum)
                        .into_unit()
                } else {
                    rp.immediate_reduce_into(sc, &ar[me][..], sum).into_unit()
                },
            )));
            reqs.push(Some((
                "ireduce_scatter_block",
                w.immediate_reduce_scatter_block_into(sc, &rsbin[..], &mut rsb[..], sum)
                    .into_unit(),
            )));
            // completed in a rank- and round-dependent order: reversed, rotated, or
            // by testing all of them round robin
            let m = reqs.len();
            let order: Vec<usize> = match (me + round) % 3 {
                0 => (0..m).rev().collect(),
                1 => (0..m).map(|i| (i * 5 + me) % m).collect(),
                _ => Vec::new(),
            };
            if order.is_empty() {
                let mut left = m;
                while left > 0 {
                    for slot in reqs.iter_mut().rev() {
                        if let Some((name, r)) = slot.take() {
                            match r.test_box() {
                                None => left -= 1,
                                Some(r) => *slot = Some((name, r)),
                            }
                        }
                    }
                }
            } else {
                let mut seen = vec![false; m];
                for i in order {
                    assert!(!seen[i]);
                    seen[i] = true;
                    let (_, r) = reqs[i].take().expect("once");
                    r.wait_box();
                }
            }
        });
        assert_eq!(bcast, bsrc, "ibcast round {round}");
        assert_eq!(arout, fold(&ar, |a, b| a + b), "iallreduce round {round}");
        assert_eq!(agout, ar.concat(), "iallgather round {round}");
        let want: Vec<i64> = (0..n).flat_map(|i| data(i * n + me, K, s + 3)).collect();
        assert_eq!(a2aout, want, "ialltoall round {round}");
        if me == 2 {
            assert_eq!(gout, ar.concat(), "igather round {round}");
        }
        assert_eq!(sout, data(me, K, s + 4), "iscatter round {round}");
        assert_eq!(scan, fold(&ar[..=me], |a, b| a + b), "iscan round {round}");
        if me > 0 {
            assert_eq!(
                exscan,
                fold(&ar[..me], |a, b| a + b),
                "iexscan round {round}"
            );
        }
        if me == n - 1 {
            assert_eq!(rout, fold(&ar, |a, b| a + b), "ireduce round {round}");
        }
        let rsball: Vec<Vec<i64>> = (0..n).map(|r| data(r, n, s + 5)).collect();
        assert_eq!(
            rsb,
            fold(&rsball, |a, b| a + b)[me..me + 1],
            "ireduce_scatter_block round {round}"
        );
    }

    // progress: rank 0 starts an immediate barrier, then blocks receiving one message
    // from every other rank; each other rank sends its message only once its own
    // barrier has completed. The other ranks' barriers need rank 0's messages of the
    // later rounds, which it sends only if its barrier moves on while it blocks in
    // the receive: without that, this deadlocks.
    let req = w.immediate_barrier();
    if me == 0 {
        for r in 1..n {
            let (v, st) = w.process_at_rank(r as i32).receive_with_tag::<u64>(77);
            assert_eq!((v, st.source_rank()), (r as u64, r as i32));
        }
        req.wait();
    } else {
        req.wait();
        w.process_at_rank(0).send_with_tag(&(me as u64), 77);
    }
    // the same with an immediate all_to_all (pairwise: each step needs the last)
    let send: Vec<i64> = (0..n).flat_map(|j| data(me * n + j, 300, 5)).collect();
    let mut got = vec![SENT; n * 300];
    request::scope(|sc| {
        let req = w.immediate_all_to_all_into(sc, &send[..], &mut got[..]);
        if me == 0 {
            for r in 1..n {
                let (v, _) = w.process_at_rank(r as i32).receive_with_tag::<u64>(78);
                assert_eq!(v, r as u64);
            }
            req.wait();
        } else {
            req.wait();
            w.process_at_rank(0).send_with_tag(&(me as u64), 78);
        }
    });
    let want: Vec<i64> = (0..n).flat_map(|i| data(i * n + me, 300, 5)).collect();
    assert_eq!(got, want, "ialltoall progressed during a blocking receive");
    w.barrier();
}

/// Two immediate all_reduces with a non-commutative user operation, started in the
/// same order everywhere and completed in different orders on different ranks (legal:
/// MPI-3.1 §5.12; a rank blocked in a wait must let every pending operation progress).
/// Ranks 0 and 3 wait on the first, ranks 1 and 2 on the second; with recursive
/// doubling each needs a partner's reduction step of the request that partner is not
/// waiting on.
///
/// (Found a deadlock: a reduction step with a user operation once ran only inside the
/// wait or test of its own request, so rank 0 (in wait(A)) needed rank 2's step-1
/// reduction of A while rank 2 (in wait(B)) needed rank 0's of B. Immediate
/// collectives with user operations now gather and reduce at completion.)
fn user_ops_completion_order(u: Universe) {
    let w = u.world();
    let n = w.size() as usize;
    let me = w.rank() as usize;
    let ops = user_ops();
    let pa: Vec<Vec<Mat>> = (0..n)
        .map(|r| (0..2).map(|i| mat(r, i, 61)).collect())
        .collect();
    let pb: Vec<Vec<Mat>> = (0..n)
        .map(|r| (0..2).map(|i| mat(r, i, 62)).collect())
        .collect();
    let z = Mat { m: [0; 4] };
    let mut ga = vec![z; 2];
    let mut gb = vec![z; 2];
    request::scope(|sc| {
        let ra = w.immediate_all_reduce_into(sc, &pa[me][..], &mut ga[..], &ops.mat);
        let rb = w.immediate_all_reduce_into(sc, &pb[me][..], &mut gb[..], &ops.mat);
        if me == 0 || me == 3 {
            ra.wait();
            rb.wait();
        } else {
            rb.wait();
            ra.wait();
        }
    });
    assert_eq!(ga, fold(&pa, mat_mul), "first all_reduce");
    assert_eq!(gb, fold(&pb, mat_mul), "second all_reduce");
    w.barrier();
}

/// An immediate request of any buffer type, to keep several in one list.
trait AnyReq<'a> {
    /// `None` once complete, else the request back.
    fn test_box(self: Box<Self>) -> Option<Box<dyn AnyReq<'a> + 'a>>;
    fn wait_box(self: Box<Self>);
}

impl<'a, 'b: 'a, D: ?Sized + 'b, S: 'b> AnyReq<'a> for Request<'b, D, S> {
    fn test_box(self: Box<Self>) -> Option<Box<dyn AnyReq<'a> + 'a>> {
        match (*self).test() {
            Ok(_) => None,
            Err(r) => Some(Box::new(r)),
        }
    }
    fn wait_box(self: Box<Self>) {
        (*self).wait();
    }
}

trait IntoUnit<'a> {
    fn into_unit(self) -> Box<dyn AnyReq<'a> + 'a>;
}

impl<'a, T: AnyReq<'a> + 'a> IntoUnit<'a> for T {
    fn into_unit(self) -> Box<dyn AnyReq<'a> + 'a> {
        Box::new(self)
    }
}

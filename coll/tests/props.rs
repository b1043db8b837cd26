//! Random sizes (up to 24 ranks), roots, lengths and interleavings for the collectives
//! whose correctness depends most on the combination of all of them.

mod common;

use common::*;
use proptest::prelude::*;
use rsmpi_coll::sim::{self, Options, SendCompletion};
use rsmpi_coll::Schedule;

fn run(
    n: u32,
    make: impl Fn(u32) -> Schedule,
    inputs: &[Vec<u8>],
    red: &Red,
    seed: u64,
    buffered: bool,
) -> Vec<Vec<u8>> {
    let scheds: Vec<Schedule> = (0..n).map(make).collect();
    for s in &scheds {
        check_static(s, Some(red.elem), false);
    }
    let opts = Options {
        seed,
        sends: if buffered {
            SendCompletion::Buffered
        } else {
            SendCompletion::Rendezvous
        },
        strict: true,
    };
    sim::run(&scheds, inputs, &|a, b| (red.op)(a, b), opts)
        .unwrap_or_else(|e| panic!("size {n}: {e}"))
}

fn inputs(red: &Red, n: u32, len: usize, salt: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|q| (red.input)(salt ^ (q as u64) << 20, len))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn reductions(n in 1u32..=24, root_pick in any::<u32>(), count in 0usize..300, noncomm in any::<bool>(),
                  seed in any::<u64>(), buffered in any::<bool>()) {
        let red = &REDS[usize::from(noncomm)];
        let (e, len, root) = (red.elem, count * red.elem, root_pick % n);
        let xs = inputs(red, n, len, seed);
        let want = red.fold(xs.iter().map(|v| &v[..]));
        let out = run(n, |r| rsmpi_coll::reduce(r, n, root, len, e, red.commutative), &xs, red, seed, buffered);
        prop_assert_eq!(&out[root as usize], &want);
        let out = run(n, |r| rsmpi_coll::allreduce(r, n, len, e, red.commutative), &xs, red, seed, buffered);
        prop_assert!(out.iter().all(|o| o == &want));
        let out = run(n, |r| rsmpi_coll::scan(r, n, len), &xs, red, seed, buffered);
        for (q, o) in out.iter().enumerate() {
            prop_assert_eq!(o, &red.fold(xs[..=q].iter().map(|v| &v[..])));
        }
        if red.commutative {
            let out = run(n, |r| rsmpi_coll::algo::reduce_rabenseifner(r, n, root, len, e), &xs, red, seed, buffered);
            prop_assert_eq!(&out[root as usize], &want);
            let out = run(n, |r| rsmpi_coll::algo::allreduce_rabenseifner(r, n, len, e), &xs, red, seed, buffered);
            prop_assert!(out.iter().all(|o| o == &want));
        }
    }

    #[test]
    fn reduce_scatter(n in 1u32..=24, counts in proptest::collection::vec(0usize..9, 24), noncomm in any::<bool>(),
                      seed in any::<u64>(), buffered in any::<bool>()) {
        let red = &REDS[usize::from(noncomm)];
        let counts: Vec<usize> = counts[..n as usize].iter().map(|c| c * red.elem).collect();
        let total: usize = counts.iter().sum();
        let xs = inputs(red, n, total, seed);
        let want = red.fold(xs.iter().map(|v| &v[..]));
        let out = run(n, |r| rsmpi_coll::reduce_scatter(r, n, &counts, red.elem, red.commutative), &xs, red, seed, buffered);
        let mut at = 0;
        for (q, o) in out.iter().enumerate() {
            prop_assert_eq!(o, &want[at..at + counts[q]].to_vec());
            at += counts[q];
        }
    }

    #[test]
    fn data_movement(n in 1u32..=24, root_pick in any::<u32>(), len in 0usize..200, seed in any::<u64>()) {
        let root = root_pick % n;
        let nn = n as usize;
        let blocks: Vec<Vec<u8>> = (0..n).map(|q| bytes(seed ^ q as u64, len)).collect();
        let all = blocks.concat();
        let opts = Options::seed(seed);
        let no = |_: &[u8], _: &mut [u8]| panic!("no reduction here");
        let go = |make: &dyn Fn(u32) -> Schedule, ins: &[Vec<u8>]| {
            let scheds: Vec<Schedule> = (0..n).map(make).collect();
            sim::run(&scheds, ins, &no, opts).unwrap_or_else(|e| panic!("size {n}: {e}"))
        };
        // bcast (with elem 1, so the scatter-ring split is by bytes)
        let ins: Vec<Vec<u8>> = (0..n).map(|q| if q == root { blocks[0].clone() } else { vec![7; len] }).collect();
        let out = go(&|r| rsmpi_coll::algo::bcast_scatter_ring(r, n, root, len, 1), &ins);
        prop_assert!(out.iter().all(|o| o == &blocks[0]));
        // gather, allgather (every algorithm that fits), scatter
        let out = go(&|r| rsmpi_coll::gather(r, n, root, len), &blocks);
        prop_assert_eq!(&out[root as usize], &all);
        for make in [rsmpi_coll::algo::allgather_bruck, rsmpi_coll::algo::allgather_ring, rsmpi_coll::allgather] {
            let out = go(&|r| make(r, n, len), &blocks);
            prop_assert!(out.iter().all(|o| o == &all));
        }
        let ins: Vec<Vec<u8>> = (0..n).map(|q| if q == root { all.clone() } else { vec![] }).collect();
        let out = go(&|r| rsmpi_coll::scatter(r, n, root, len), &ins);
        prop_assert_eq!(&out, &blocks);
        // alltoall: block for d from s is bytes(s, d)
        let piece = |s: usize, d: usize| bytes(seed ^ (s * 64 + d) as u64, len);
        let ins: Vec<Vec<u8>> = (0..nn).map(|s| (0..nn).flat_map(|d| piece(s, d)).collect()).collect();
        for make in [rsmpi_coll::algo::alltoall_bruck, rsmpi_coll::algo::alltoall_pairwise] {
            let out = go(&|r| make(r, n, len), &ins);
            for (d, o) in out.iter().enumerate() {
                let want: Vec<u8> = (0..nn).flat_map(|s| piece(s, d)).collect();
                prop_assert_eq!(o, &want);
            }
        }
    }
}

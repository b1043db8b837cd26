//! Variable-count collectives with `Partition` / `PartitionMut`: gather_varcount_into(_root),
//! scatter_varcount_into(_root), all_gather_varcount_into, all_to_all_varcount_into;
//! uneven counts, zero counts and displacements with gaps.

use mpi::datatype::{Partition, PartitionMut};
use mpi::traits::*;
use mpi::Count;

fn value(src: i32, dst: i32, k: i32) -> i32 {
    src * 10_000 + dst * 100 + k
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let n = size as usize;
    const GAP: i32 = -7;

    // rank r contributes r + 1 values; the root leaves one unused slot after each block
    let counts: Vec<Count> = (0..size).map(|r| r + 1).collect();
    let displs: Vec<Count> = counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c + 1;
            Some(d)
        })
        .collect();
    let total = (displs[n - 1] + counts[n - 1] + 1) as usize;
    let mine: Vec<i32> = (0..=rank).map(|k| value(rank, -1, k)).collect();

    for root_rank in [0, size - 1] {
        let root = world.process_at_rank(root_rank);
        if rank == root_rank {
            let mut buf = vec![GAP; total];
            {
                let mut part = PartitionMut::new(&mut buf[..], counts.clone(), &displs[..]);
                root.gather_varcount_into_root(&mine[..], &mut part);
            }
            for r in 0..size {
                let d = displs[r as usize] as usize;
                let c = counts[r as usize] as usize;
                let want: Vec<i32> = (0..=r).map(|k| value(r, -1, k)).collect();
                assert_eq!(&buf[d..d + c], &want[..]);
                assert_eq!(buf[d + c], GAP, "the gap after block {r} was written");
            }
        } else {
            root.gather_varcount_into(&mine[..]);
        }

        // scatter back: rank r gets r + 1 values from the root's blocks
        let mut back = vec![0i32; rank as usize + 1];
        if rank == root_rank {
            let mut src = vec![GAP; total];
            for r in 0..size {
                let d = displs[r as usize] as usize;
                for k in 0..=r {
                    src[d + k as usize] = value(root_rank, r, k);
                }
            }
            let part = Partition::new(&src[..], &counts[..], displs.clone());
            root.scatter_varcount_into_root(&part, &mut back[..]);
        } else {
            root.scatter_varcount_into(&mut back[..]);
        }
        assert_eq!(
            back,
            (0..=rank)
                .map(|k| value(root_rank, rank, k))
                .collect::<Vec<_>>()
        );
    }

    // all-gather with varying counts (contiguous, no gaps), including a zero count
    let counts2: Vec<Count> = (0..size).map(|r| r % 3).collect();
    let displs2: Vec<Count> = counts2
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect();
    let mine2: Vec<f64> = (0..rank % 3)
        .map(|k| rank as f64 + k as f64 / 10.0)
        .collect();
    let sum2: Count = counts2.iter().sum();
    let mut all2 = vec![0.0f64; sum2 as usize];
    {
        let mut part = PartitionMut::new(&mut all2[..], &counts2[..], &displs2[..]);
        world.all_gather_varcount_into(&mine2[..], &mut part);
    }
    let expect2: Vec<f64> = (0..size)
        .flat_map(|r| (0..r % 3).map(move |k| r as f64 + k as f64 / 10.0))
        .collect();
    assert_eq!(all2, expect2);

    // all-to-all with varying counts: rank s sends (s + d) % 3 values to rank d
    let cnt = |s: i32, d: i32| (s + d) % 3;
    let scounts: Vec<Count> = (0..size).map(|d| cnt(rank, d)).collect();
    let sdispls: Vec<Count> = (0..size).map(|d| d * 3).collect(); // fixed stride, gaps
    let mut sbuf = vec![GAP; 3 * n];
    for d in 0..size {
        for k in 0..cnt(rank, d) {
            sbuf[(d * 3 + k) as usize] = value(rank, d, k);
        }
    }
    let rcounts: Vec<Count> = (0..size).map(|s| cnt(s, rank)).collect();
    let rdispls: Vec<Count> = rcounts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect();
    let rtotal: Count = rcounts.iter().sum();
    let mut rbuf = vec![0i32; rtotal as usize];
    {
        let spart = Partition::new(&sbuf[..], scounts, sdispls);
        let mut rpart = PartitionMut::new(&mut rbuf[..], &rcounts[..], rdispls.clone());
        world.all_to_all_varcount_into(&spart, &mut rpart);
    }
    let expect: Vec<i32> = (0..size)
        .flat_map(|s| (0..cnt(s, rank)).map(move |k| value(s, rank, k)))
        .collect();
    assert_eq!(rbuf, expect);

    world.barrier();
    if rank == 0 {
        println!("coll_varcount ok");
    }
}

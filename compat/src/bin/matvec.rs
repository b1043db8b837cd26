//! Another typical code: a row-block distributed dense matrix-vector product (power
//! iteration on integers modulo a prime). The root scatters uneven row blocks with
//! `scatter_varcount_into_root`, broadcasts the start vector, every iteration
//! all-gathers the partial results with `all_gather_varcount_into`, and a dot product is
//! reduced with `all_reduce_into`; everything is checked against a serial computation.

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::traits::*;
use mpi::Count;

const M: usize = 37;
const Q: i64 = 1_000_007;
const ITERS: usize = 5;

fn a(i: usize, j: usize) -> i64 {
    ((i * 7 + j * 3) % 11) as i64 - 5
}

fn rows(rank: usize, size: usize) -> (usize, usize) {
    let (q, r) = (M / size, M % size);
    // the remainder goes to the *last* ranks, so the root may get fewer rows
    let extra = |k: usize| usize::from(k >= size - r);
    let start = (0..rank).map(|k| q + extra(k)).sum();
    (start, q + extra(rank))
}

fn matvec_rows(block: &[i64], x: &[i64]) -> Vec<i64> {
    block
        .chunks(M)
        .map(|row| {
            row.iter()
                .zip(x)
                .map(|(a, b)| a * b)
                .sum::<i64>()
                .rem_euclid(Q)
        })
        .collect()
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank() as usize;
    let size = world.size() as usize;
    assert!(size >= 2);
    let root = world.process_at_rank(0);

    let (start, nrows) = rows(rank, size);
    let row_counts: Vec<Count> = (0..size).map(|r| rows(r, size).1 as Count).collect();
    let row_displs: Vec<Count> = (0..size).map(|r| rows(r, size).0 as Count).collect();

    // distribute the matrix by row blocks
    let mut block = vec![0i64; nrows * M];
    if rank == 0 {
        let full: Vec<i64> = (0..M * M).map(|k| a(k / M, k % M)).collect();
        let counts: Vec<Count> = row_counts.iter().map(|&c| c * M as Count).collect();
        let displs: Vec<Count> = row_displs.iter().map(|&d| d * M as Count).collect();
        let part = Partition::new(&full[..], counts, displs);
        root.scatter_varcount_into_root(&part, &mut block[..]);
    } else {
        root.scatter_varcount_into(&mut block[..]);
    }
    for (k, v) in block.iter().enumerate() {
        assert_eq!(*v, a(start + k / M, k % M));
    }

    // the start vector comes from the root
    let mut x = vec![0i64; M];
    if rank == 0 {
        x = (0..M as i64).map(|i| i % 4 + 1).collect();
    }
    root.broadcast_into(&mut x[..]);

    let mut serial = x.clone();
    for _ in 0..ITERS {
        let mine = matvec_rows(&block, &x);
        let mut y = vec![0i64; M];
        {
            let mut part = PartitionMut::new(&mut y[..], &row_counts[..], &row_displs[..]);
            world.all_gather_varcount_into(&mine[..], &mut part);
        }
        // dot(x, y) from the local parts
        let local_dot: i64 = mine
            .iter()
            .zip(&x[start..start + nrows])
            .map(|(a, b)| a * b % Q)
            .sum();
        let mut dot = 0i64;
        world.all_reduce_into(&local_dot, &mut dot, SystemOperation::sum());

        let full: Vec<i64> = (0..M * M).map(|k| a(k / M, k % M)).collect();
        let expected = matvec_rows(&full, &serial);
        assert_eq!(y, expected);
        let expected_dot: i64 = expected.iter().zip(&serial).map(|(a, b)| a * b % Q).sum();
        assert_eq!(dot, expected_dot);
        serial = expected;
        x = y;
    }

    world.barrier();
    if rank == 0 {
        println!("matvec ok");
    }
}

//! Reductions with every `SystemOperation` constructor on integer, floating-point and bool
//! data (where MPI allows the pair): reduce_into(_root), all_reduce_into,
//! reduce_scatter_block_into, scan_into, exclusive_scan_into and reduce_local_into.

use mpi::collective::{self, SystemOperation};
use mpi::topology::Rank;
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let ranks = || 0..size;

    // ---- all_reduce, scalar, every operation ----
    macro_rules! all {
        ($t:ty, $x:expr, $op:expr) => {{
            let x: $t = $x;
            let mut y: $t = Default::default();
            world.all_reduce_into(&x, &mut y, $op);
            y
        }};
    }
    let r = rank;
    // integers: arithmetic
    assert_eq!(
        all!(i32, r + 1, SystemOperation::sum()),
        ranks().map(|q| q + 1).sum::<i32>()
    );
    assert_eq!(
        all!(i64, (r % 3 + 1) as i64, SystemOperation::product()),
        ranks().map(|q| (q % 3 + 1) as i64).product::<i64>()
    );
    assert_eq!(
        all!(i16, (r * 7 % 5) as i16 - 2, SystemOperation::max()),
        ranks().map(|q| (q * 7 % 5) as i16 - 2).max().unwrap()
    );
    assert_eq!(
        all!(i8, -(r as i8), SystemOperation::min()),
        -((size - 1) as i8)
    );
    assert_eq!(
        all!(u64, 1u64 << r, SystemOperation::sum()),
        (1u64 << size) - 1
    );
    assert_eq!(
        all!(usize, r as usize, SystemOperation::max()),
        size as usize - 1
    );
    // integers: bitwise
    assert_eq!(
        all!(u8, 1u8 << (r % 8), SystemOperation::bitwise_or()),
        ranks().fold(0u8, |a, q| a | 1 << (q % 8))
    );
    assert_eq!(
        all!(u32, !(1u32 << r), SystemOperation::bitwise_and()),
        ranks().fold(u32::MAX, |a, q| a & !(1u32 << q))
    );
    assert_eq!(
        all!(i32, r * 0x55, SystemOperation::bitwise_xor()),
        ranks().fold(0, |a, q| a ^ (q * 0x55))
    );
    assert_eq!(all!(u16, 0xF0F0, SystemOperation::bitwise_and()), 0xF0F0);
    // integers: logical (non-zero is true)
    assert_eq!(all!(i32, r, SystemOperation::logical_and()), 0); // rank 0 contributes 0
    assert_eq!(all!(i32, r, SystemOperation::logical_or()), 1);
    assert_eq!(all!(i32, (r < 1) as i32, SystemOperation::logical_xor()), 1);
    // floating point
    assert_eq!(
        all!(f64, r as f64 * 0.5, SystemOperation::sum()),
        ranks().map(|q| q as f64 * 0.5).sum::<f64>()
    );
    assert_eq!(
        all!(
            f32,
            if r % 2 == 0 { 2.0 } else { 0.5 },
            SystemOperation::product()
        ),
        ranks()
            .map(|q| if q % 2 == 0 { 2.0f32 } else { 0.5 })
            .product::<f32>()
    );
    assert_eq!(
        all!(f64, -(r as f64) / 3.0, SystemOperation::min()),
        -((size - 1) as f64) / 3.0
    );
    assert_eq!(
        all!(f32, (r as f32).sqrt(), SystemOperation::max()),
        ((size - 1) as f32).sqrt()
    );
    // bool: logical operations
    assert!(all!(bool, true, SystemOperation::logical_and()));
    assert!(!all!(bool, r != 0, SystemOperation::logical_and()));
    assert!(all!(bool, r == size - 1, SystemOperation::logical_or()));
    assert!(!all!(bool, false, SystemOperation::logical_or()));
    assert_eq!(
        all!(bool, true, SystemOperation::logical_xor()),
        size % 2 == 1
    );
    assert_eq!(
        all!(bool, r % 2 == 0, SystemOperation::logical_xor()),
        ranks().filter(|q| q % 2 == 0).count() % 2 == 1
    );

    // ---- all_reduce on vectors, element-wise ----
    let v: Vec<f64> = (0..100).map(|i| (rank * 100 + i) as f64).collect();
    let mut w = vec![0.0f64; 100];
    world.all_reduce_into(&v[..], &mut w[..], SystemOperation::sum());
    for (i, x) in w.iter().enumerate() {
        assert_eq!(
            *x,
            ranks().map(|q| (q * 100 + i as i32) as f64).sum::<f64>()
        );
    }
    world.all_reduce_into(&v[..], &mut w[..], SystemOperation::max());
    assert_eq!(w[3], ((size - 1) * 100 + 3) as f64);
    let bits = [rank as u64, 1 << (rank + 8), u64::MAX];
    let mut ored = [0u64; 3];
    world.all_reduce_into(&bits, &mut ored, SystemOperation::bitwise_or());
    assert_eq!(ored[1], ranks().fold(0u64, |a, q| a | 1 << (q + 8)));
    assert_eq!(ored[2], u64::MAX);

    // ---- reduce to every root ----
    for root_rank in 0..size {
        let root = world.process_at_rank(root_rank);
        let x = [rank as i64 + 1, -(rank as i64), 1];
        if rank == root_rank {
            let mut s = [0i64; 3];
            root.reduce_into_root(&x, &mut s, SystemOperation::sum());
            let n = size as i64;
            assert_eq!(s, [n * (n + 1) / 2, -(n * (n - 1) / 2), n]);
            let mut p = 0.0f64;
            root.reduce_into_root(&(rank as f64 + 1.0), &mut p, SystemOperation::product());
            assert_eq!(p, (1..=size).map(|q| q as f64).product::<f64>());
            let mut b = false;
            root.reduce_into_root(&(rank == root_rank), &mut b, SystemOperation::logical_or());
            assert!(b);
            let mut m = 0u8;
            root.reduce_into_root(&(rank as u8), &mut m, SystemOperation::min());
            assert_eq!(m, 0);
        } else {
            root.reduce_into(&x, SystemOperation::sum());
            root.reduce_into(&(rank as f64 + 1.0), SystemOperation::product());
            root.reduce_into(&(rank == root_rank), SystemOperation::logical_or());
            root.reduce_into(&(rank as u8), SystemOperation::min());
        }
    }

    // ---- reduce_scatter_block: 3 values per rank ----
    let contrib: Vec<i32> = (0..3 * size).map(|i| i * (rank + 1)).collect();
    let mut block = [0i32; 3];
    world.reduce_scatter_block_into(&contrib[..], &mut block[..], SystemOperation::sum());
    let factor: i32 = ranks().map(|q| q + 1).sum();
    for (k, b) in block.iter().enumerate() {
        assert_eq!(*b, (3 * rank + k as i32) * factor);
    }

    // ---- scans ----
    let mut inc: Rank = 0;
    world.scan_into(&(rank + 1), &mut inc, SystemOperation::sum());
    assert_eq!(inc, (rank + 1) * (rank + 2) / 2);
    let mut exc: Rank = -99;
    world.exclusive_scan_into(&(rank + 1), &mut exc, SystemOperation::sum());
    if rank > 0 {
        // undefined on rank 0
        assert_eq!(exc, rank * (rank + 1) / 2);
    }
    let mut pmax = [0.0f64; 2];
    let val = [((rank * 5) % 3) as f64, -(rank as f64)];
    world.scan_into(&val, &mut pmax, SystemOperation::max());
    assert_eq!(
        pmax[0],
        (0..=rank)
            .map(|q| ((q * 5) % 3) as f64)
            .fold(f64::MIN, f64::max)
    );
    assert_eq!(pmax[1], 0.0);
    let mut pand = true;
    world.scan_into(&(rank < 2), &mut pand, SystemOperation::logical_and());
    assert_eq!(pand, rank < 2);
    let mut pxor = 0u32;
    world.exclusive_scan_into(&(1u32 << rank), &mut pxor, SystemOperation::bitwise_xor());
    if rank > 0 {
        assert_eq!(pxor, (1u32 << rank) - 1);
    }
    let mut pprod = 0i64;
    world.exclusive_scan_into(&2i64, &mut pprod, SystemOperation::product());
    if rank > 0 {
        assert_eq!(pprod, 1i64 << rank);
    }

    // ---- local reduction, no communication ----
    let a = [1i32, 2, 3, 4];
    let mut b = [10i32, 20, 30, 40];
    collective::reduce_local_into(&a, &mut b, SystemOperation::sum());
    assert_eq!(b, [11, 22, 33, 44]);
    let fa = [1.5f64, -2.0];
    let mut fb = [1.0f64, 3.0];
    collective::reduce_local_into(&fa[..], &mut fb[..], SystemOperation::min());
    assert_eq!(fb, [1.0, -2.0]);
    let mut bb = [true, false];
    mpi::collective::reduce_local_into(&[false, false], &mut bb, SystemOperation::logical_xor());
    assert_eq!(bb, [true, false]);

    world.barrier();
    if rank == 0 {
        println!("coll_reduce ok");
    }
}

#![deny(warnings)]
//! Blocking data-movement collectives on the world and on a split communicator:
//! barrier, broadcast_into, gather_into(_root), scatter_into(_root), all_gather_into,
//! all_to_all_into, from every root.

use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let n = size as usize;

    world.barrier();

    for root_rank in 0..size {
        let root = world.process_at_rank(root_rank);
        let is_root = rank == root_rank;

        // broadcast: a scalar, a vector, an array, a bool
        let mut x: i64 = if is_root { 1234 + root_rank as i64 } else { 0 };
        root.broadcast_into(&mut x);
        assert_eq!(x, 1234 + root_rank as i64);
        let mut v = if is_root {
            (0..1000).map(|i| i as f64 * root_rank as f64).collect()
        } else {
            vec![0.0f64; 1000]
        };
        root.broadcast_into(&mut v[..]);
        assert!(v
            .iter()
            .enumerate()
            .all(|(i, &y)| y == i as f64 * root_rank as f64));
        let mut a = [0u8; 16];
        if is_root {
            a = [root_rank as u8 + 1; 16];
        }
        root.broadcast_into(&mut a);
        assert_eq!(a, [root_rank as u8 + 1; 16]);
        let mut flag = is_root;
        root.broadcast_into(&mut flag);
        assert!(flag);

        // gather: three values per rank
        let mine = [rank, rank * 10, rank * 100];
        if is_root {
            let mut all = vec![-1i32; 3 * n];
            root.gather_into_root(&mine[..], &mut all[..]);
            for r in 0..size {
                let k = r as usize * 3;
                assert_eq!(&all[k..k + 3], &[r, r * 10, r * 100]);
            }
        } else {
            root.gather_into(&mine[..]);
        }

        // scatter: two values per rank
        let mut got = [0u64; 2];
        if is_root {
            let all: Vec<u64> = (0..2 * n as u64)
                .map(|i| i * 3 + root_rank as u64)
                .collect();
            root.scatter_into_root(&all[..], &mut got);
        } else {
            root.scatter_into(&mut got);
        }
        let r = rank as u64;
        assert_eq!(
            got,
            [
                2 * r * 3 + root_rank as u64,
                (2 * r + 1) * 3 + root_rank as u64
            ]
        );

        // scalar gather/scatter
        if is_root {
            let mut all = vec![0f32; n];
            root.gather_into_root(&(rank as f32 * 0.5), &mut all[..]);
            assert_eq!(all, (0..n).map(|r| r as f32 * 0.5).collect::<Vec<_>>());
            let parts: Vec<i16> = (0..n as i16).map(|r| -r).collect();
            let mut one = 0i16;
            root.scatter_into_root(&parts[..], &mut one);
            assert_eq!(one, -(rank as i16));
        } else {
            root.gather_into(&(rank as f32 * 0.5));
            let mut one = 0i16;
            root.scatter_into(&mut one);
            assert_eq!(one, -(rank as i16));
        }
    }

    // all-gather
    let mut all = vec![0i32; 2 * n];
    world.all_gather_into(&[rank, rank * rank][..], &mut all[..]);
    for r in 0..size {
        assert_eq!(all[2 * r as usize], r);
        assert_eq!(all[2 * r as usize + 1], r * r);
    }
    let mut names = vec![0u8; n];
    world.all_gather_into(&(b'a' + rank as u8), &mut names[..]);
    assert_eq!(names, (0..n as u8).map(|r| b'a' + r).collect::<Vec<_>>());

    // all-to-all: element i goes to rank i
    let out: Vec<i32> = (0..size).map(|i| rank * 100 + i).collect();
    let mut inb = vec![0i32; n];
    world.all_to_all_into(&out[..], &mut inb[..]);
    assert_eq!(inb, (0..size).map(|i| i * 100 + rank).collect::<Vec<_>>());
    // two elements per destination
    let out: Vec<u16> = (0..2 * n)
        .map(|i| (rank as usize * 1000 + i) as u16)
        .collect();
    let mut inb = vec![0u16; 2 * n];
    world.all_to_all_into(&out[..], &mut inb[..]);
    for src in 0..n {
        let base = src * 1000 + 2 * rank as usize;
        assert_eq!(&inb[2 * src..2 * src + 2], &[base as u16, base as u16 + 1]);
    }

    // the same on a split communicator (halves), with a root that is not 0
    let half = world
        .split_by_color(mpi::topology::Color::with_value((rank >= size / 2) as i32))
        .unwrap();
    let hn = half.size();
    let hroot = half.process_at_rank(hn - 1);
    let mut token = if half.rank() == hn - 1 { rank } else { -1 };
    hroot.broadcast_into(&mut token);
    let expected_root_world = if rank >= size / 2 {
        size - 1
    } else {
        size / 2 - 1
    };
    assert_eq!(token, expected_root_world);
    if half.rank() == hn - 1 {
        let mut ranks = vec![0i32; hn as usize];
        hroot.gather_into_root(&rank, &mut ranks[..]);
        let first = if rank >= size / 2 { size / 2 } else { 0 };
        assert_eq!(ranks, (first..first + hn).collect::<Vec<_>>());
    } else {
        hroot.gather_into(&rank);
    }
    let mut members = vec![0i32; hn as usize];
    half.all_gather_into(&rank, &mut members[..]);
    let mut swapped = vec![0i32; hn as usize];
    half.all_to_all_into(&members[..], &mut swapped[..]);
    assert_eq!(swapped, vec![rank; hn as usize]);
    half.barrier();

    world.barrier();
    if rank == 0 {
        println!("coll_basic ok");
    }
}

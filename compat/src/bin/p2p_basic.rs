#![deny(warnings)]
//! Blocking point-to-point the way most MPI-1 codes use it: scalars, slices, vectors and
//! arrays; explicit and wildcard sources; default and explicit tags; `Status` queries.

use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2, "p2p_basic needs at least 2 ranks");
    assert!((0..size).contains(&rank));
    assert_eq!(world.this_process().rank(), rank);
    assert!(world.this_process().is_self());
    assert!(!world.process_at_rank((rank + 1) % size).is_self());

    // 1. Fan-in of scalars: every rank sends one value to rank 0 with its rank as the tag;
    //    rank 0 takes them in arrival order from any process.
    if rank == 0 {
        let mut seen = vec![false; size as usize];
        for _ in 1..size {
            let (v, status) = world.any_process().receive::<i64>();
            let src = status.source_rank();
            assert!(src > 0 && src < size, "bad source {src}");
            assert!(!seen[src as usize], "two messages from {src}");
            seen[src as usize] = true;
            assert_eq!(status.tag(), src);
            assert_eq!(v, 1000 + src as i64);
            assert_eq!(status.count(i64::equivalent_datatype()), 1);
        }
    } else {
        world
            .process_at_rank(0)
            .send_with_tag(&(1000 + rank as i64), rank);
    }

    // 2. A ring of vectors of different lengths: rank 0 sends first, every other rank
    //    receives first, so the ring cannot deadlock whatever the protocol.
    let next = world.process_at_rank((rank + 1) % size);
    let prev_rank = (rank + size - 1) % size;
    let prev = world.process_at_rank(prev_rank);
    let mine: Vec<f64> = (0..10 * (rank as usize + 1))
        .map(|i| rank as f64 * 0.5 + i as f64)
        .collect();
    let (theirs, status) = if rank == 0 {
        next.send(&mine);
        prev.receive_vec::<f64>()
    } else {
        let got = prev.receive_vec::<f64>();
        next.send(&mine[..]);
        got
    };
    assert_eq!(status.source_rank(), prev_rank);
    assert_eq!(status.tag(), 0, "send uses the default tag 0");
    assert_eq!(theirs.len(), 10 * (prev_rank as usize + 1));
    assert_eq!(
        status.count(f64::equivalent_datatype()) as usize,
        theirs.len()
    );
    for (i, x) in theirs.iter().enumerate() {
        assert_eq!(*x, prev_rank as f64 * 0.5 + i as f64);
    }

    // 3. Rank 0 sends each other rank a fixed-size array, a bool and a byte, with tags;
    //    the receivers name source and tag and receive into existing storage.
    if rank == 0 {
        for r in 1..size {
            let p = world.process_at_rank(r);
            let arr: [u16; 5] = [r as u16, 1, 2, 3, 4];
            p.send_with_tag(&arr, 7);
            p.send_with_tag(&(r % 2 == 0), 8);
            p.send_with_tag(&(r as u8 + 100), 9);
            let flags: Vec<bool> = (0..r).map(|i| i % 2 == 1).collect();
            p.send_with_tag(&flags[..], 10);
        }
    } else {
        let root = world.process_at_rank(0);
        let mut arr = [0u16; 5];
        let st = root.receive_into_with_tag(&mut arr, 7);
        assert_eq!((st.source_rank(), st.tag()), (0, 7));
        assert_eq!(arr, [rank as u16, 1, 2, 3, 4]);
        let (even, st) = root.receive_with_tag::<bool>(8);
        assert_eq!((even, st.tag()), (rank % 2 == 0, 8));
        let (b, _) = root.receive_with_tag::<u8>(9);
        assert_eq!(b, rank as u8 + 100);
        let (flags, st) = root.receive_vec_with_tag::<bool>(10);
        assert_eq!(st.count(bool::equivalent_datatype()), rank);
        assert_eq!(flags, (0..rank).map(|i| i % 2 == 1).collect::<Vec<_>>());
    }

    // 4. A large message (4 MiB) from the last rank to rank 0, received in place; and a
    //    zero-length one the other way.
    let last = size - 1;
    const BIG: usize = 1 << 20;
    if rank == last {
        let big: Vec<u32> = (0..BIG as u32)
            .map(|i| i.wrapping_mul(2654435761))
            .collect();
        world.process_at_rank(0).send_with_tag(&big[..], 3);
        let mut nothing: [i32; 0] = [];
        let st = world.process_at_rank(0).receive_into(&mut nothing);
        assert_eq!(st.count(i32::equivalent_datatype()), 0);
        assert_eq!(st.tag(), 4);
    } else if rank == 0 {
        let mut big = vec![0u32; BIG];
        let st = world.process_at_rank(last).receive_into(&mut big[..]);
        assert_eq!(st.source_rank(), last);
        assert_eq!(st.tag(), 3);
        assert_eq!(st.count(u32::equivalent_datatype()) as usize, BIG);
        assert!(big
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i as u32).wrapping_mul(2654435761)));
        let empty: Vec<i32> = Vec::new();
        world.process_at_rank(last).send_with_tag(&empty[..], 4);
    }

    // 5. Other element types a user sends without thinking: usize, isize, i8, u64, f32.
    if rank == 1 {
        let p = world.process_at_rank(0);
        p.send(&(usize::MAX - 1));
        p.send(&(-5isize));
        p.send(&[-128i8, 0, 127][..]);
        p.send(&vec![u64::MAX, 0, 42]);
        p.send(&1.5f32);
    } else if rank == 0 {
        let p = world.process_at_rank(1);
        assert_eq!(p.receive::<usize>().0, usize::MAX - 1);
        assert_eq!(p.receive::<isize>().0, -5);
        assert_eq!(p.receive_vec::<i8>().0, vec![-128, 0, 127]);
        assert_eq!(p.receive_vec::<u64>().0, vec![u64::MAX, 0, 42]);
        assert_eq!(p.receive::<f32>().0, 1.5);
    }

    world.barrier();
    if rank == 0 {
        println!("p2p_basic ok");
    }
}

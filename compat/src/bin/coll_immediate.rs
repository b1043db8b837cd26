//! Non-blocking collectives: immediate_barrier, immediate_broadcast_into,
//! immediate_gather_into(_root), immediate_gather_varcount_into(_root),
//! immediate_scatter_into(_root), immediate_scatter_varcount_into(_root),
//! immediate_all_gather_into, immediate_all_gather_varcount_into,
//! immediate_all_to_all_into, immediate_all_to_all_varcount_into,
//! immediate_reduce_into(_root), immediate_all_reduce_into,
//! immediate_reduce_scatter_block_into, immediate_scan_into,
//! immediate_exclusive_scan_into; several outstanding at once; completion by test().

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::request::{self, WaitGuard};
use mpi::traits::*;
use mpi::Count;

fn prefix(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect()
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let n = size as usize;
    let root_rank = size - 1;
    let root = world.process_at_rank(root_rank);
    let is_root = rank == root_rank;

    // barrier, waited and polled
    world.immediate_barrier().wait();
    let mut b = world.immediate_barrier();
    loop {
        match b.test() {
            Ok(_) => break,
            Err(again) => b = again,
        }
    }

    // broadcast
    let mut data = if is_root {
        vec![3.5f64; 64]
    } else {
        vec![0.0; 64]
    };
    request::scope(|sc| {
        root.immediate_broadcast_into(sc, &mut data[..]).wait();
    });
    assert_eq!(data, vec![3.5; 64]);

    // gather (fixed and varying counts)
    let mine = [rank, -rank];
    let mut all = vec![0i32; 2 * n];
    let vmine: Vec<u8> = vec![rank as u8; rank as usize + 1];
    let vcounts: Vec<Count> = (1..=size).collect();
    let vdispls = prefix(&vcounts);
    let mut vall = vec![0u8; vcounts.iter().sum::<Count>() as usize];
    {
        // a partition is borrowed by the request, so it lives outside the scope
        let mut vpart = PartitionMut::new(&mut vall[..], &vcounts[..], &vdispls[..]);
        request::scope(|sc| {
            if is_root {
                let r1 = root.immediate_gather_into_root(sc, &mine[..], &mut all[..]);
                let r2 = root.immediate_gather_varcount_into_root(sc, &vmine[..], &mut vpart);
                r2.wait();
                r1.wait();
            } else {
                let r1 = root.immediate_gather_into(sc, &mine[..]);
                let r2 = root.immediate_gather_varcount_into(sc, &vmine[..]);
                r1.wait();
                r2.wait();
            }
        });
    }
    if is_root {
        for r in 0..size {
            assert_eq!(&all[2 * r as usize..2 * r as usize + 2], &[r, -r]);
            let d = vdispls[r as usize] as usize;
            assert!(vall[d..d + r as usize + 1].iter().all(|&x| x == r as u8));
        }
    }

    // scatter (fixed and varying counts)
    let src: Vec<i64> = (0..3 * n as i64).collect();
    let mut three = [0i64; 3];
    let scounts: Vec<Count> = (0..size).map(|r| r % 2 + 1).collect();
    let sdispls = prefix(&scounts);
    let vsrc: Vec<i64> = (0..scounts.iter().sum::<Count>() as i64)
        .map(|i| i * 11)
        .collect();
    let mut vgot = vec![0i64; (rank % 2 + 1) as usize];
    let vpart = Partition::new(&vsrc[..], &scounts[..], &sdispls[..]);
    request::scope(|sc| {
        let (r1, r2) = if is_root {
            (
                root.immediate_scatter_into_root(sc, &src[..], &mut three[..]),
                root.immediate_scatter_varcount_into_root(sc, &vpart, &mut vgot[..]),
            )
        } else {
            (
                root.immediate_scatter_into(sc, &mut three[..]),
                root.immediate_scatter_varcount_into(sc, &mut vgot[..]),
            )
        };
        r1.wait();
        r2.wait();
    });
    let r = rank as i64;
    assert_eq!(three, [3 * r, 3 * r + 1, 3 * r + 2]);
    let d = sdispls[rank as usize] as i64;
    assert_eq!(
        vgot,
        (d..d + (rank % 2 + 1) as i64)
            .map(|i| i * 11)
            .collect::<Vec<_>>()
    );

    // all-gather and all-to-all, fixed and varying, all four outstanding together
    let ag_send = [rank as u32 * 2];
    let mut ag_recv = vec![0u32; n];
    let agv_send: Vec<i16> = vec![rank as i16; (rank % 3) as usize];
    let agv_counts: Vec<Count> = (0..size).map(|r| r % 3).collect();
    let agv_displs = prefix(&agv_counts);
    let mut agv_recv = vec![-1i16; agv_counts.iter().sum::<Count>() as usize];
    let a2a_send: Vec<i32> = (0..size).map(|d| rank * 1000 + d).collect();
    let mut a2a_recv = vec![0i32; n];
    let a2av_scounts: Vec<Count> = (0..size).map(|d| (rank + d) % 2).collect();
    let a2av_sdispls = prefix(&a2av_scounts);
    let a2av_send: Vec<i32> = (0..size)
        .filter(|d| (rank + d) % 2 == 1)
        .map(|d| rank * 1000 + d)
        .collect();
    let a2av_rcounts: Vec<Count> = (0..size).map(|s| (s + rank) % 2).collect();
    let a2av_rdispls = prefix(&a2av_rcounts);
    let mut a2av_recv = vec![0i32; a2av_rcounts.iter().sum::<Count>() as usize];
    {
        let mut agv_part = PartitionMut::new(&mut agv_recv[..], &agv_counts[..], &agv_displs[..]);
        let a2av_spart = Partition::new(&a2av_send[..], &a2av_scounts[..], &a2av_sdispls[..]);
        let mut a2av_rpart =
            PartitionMut::new(&mut a2av_recv[..], &a2av_rcounts[..], &a2av_rdispls[..]);
        request::scope(|sc| {
            let g1 =
                WaitGuard::from(world.immediate_all_gather_into(sc, &ag_send, &mut ag_recv[..]));
            let g2 = WaitGuard::from(world.immediate_all_gather_varcount_into(
                sc,
                &agv_send[..],
                &mut agv_part,
            ));
            let g3 = WaitGuard::from(world.immediate_all_to_all_into(
                sc,
                &a2a_send[..],
                &mut a2a_recv[..],
            ));
            let g4 = WaitGuard::from(world.immediate_all_to_all_varcount_into(
                sc,
                &a2av_spart,
                &mut a2av_rpart,
            ));
            drop(g4);
            drop(g1);
            drop(g3);
            drop(g2);
        });
    }
    assert_eq!(ag_recv, (0..size as u32).map(|r| r * 2).collect::<Vec<_>>());
    let want: Vec<i16> = (0..size)
        .flat_map(|r| (0..r % 3).map(move |_| r as i16))
        .collect();
    assert_eq!(agv_recv, want);
    assert_eq!(
        a2a_recv,
        (0..size).map(|s| s * 1000 + rank).collect::<Vec<_>>()
    );
    let want: Vec<i32> = (0..size)
        .filter(|s| (s + rank) % 2 == 1)
        .map(|s| s * 1000 + rank)
        .collect();
    assert_eq!(a2av_recv, want);

    // reductions
    let x = [rank as f64, 1.0];
    let mut red = [0.0f64; 2];
    let mut allred = [0.0f64; 2];
    let rs_send: Vec<i32> = (0..2 * size).collect();
    let mut rs_recv = [0i32; 2];
    let mut sc_recv = 0i64;
    let mut ex_recv = 0i64;
    let one = 1i64 + rank as i64;
    request::scope(|sc| {
        let r_red = if is_root {
            root.immediate_reduce_into_root(sc, &x, &mut red, SystemOperation::sum())
        } else {
            root.immediate_reduce_into(sc, &x, SystemOperation::sum())
        };
        let r_all = world.immediate_all_reduce_into(sc, &x, &mut allred, SystemOperation::max());
        let r_rs = world.immediate_reduce_scatter_block_into(
            sc,
            &rs_send[..],
            &mut rs_recv[..],
            SystemOperation::sum(),
        );
        let r_sc = world.immediate_scan_into(sc, &one, &mut sc_recv, SystemOperation::sum());
        let r_ex =
            world.immediate_exclusive_scan_into(sc, &one, &mut ex_recv, SystemOperation::product());
        r_ex.wait();
        r_sc.wait();
        r_rs.wait();
        r_all.wait();
        r_red.wait();
    });
    let nf = size as f64;
    if is_root {
        assert_eq!(red, [nf * (nf - 1.0) / 2.0, nf]);
    } else {
        assert_eq!(
            red,
            [0.0, 0.0],
            "a non-root's receive buffer is not touched"
        );
    }
    assert_eq!(allred, [nf - 1.0, 1.0]);
    assert_eq!(rs_recv, [2 * rank * size, (2 * rank + 1) * size]);
    let k = rank as i64 + 1;
    assert_eq!(sc_recv, k * (k + 1) / 2);
    if rank > 0 {
        assert_eq!(ex_recv, (1..=rank as i64).product::<i64>());
    }

    world.barrier();
    if rank == 0 {
        println!("coll_immediate ok");
    }
}

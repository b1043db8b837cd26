//! Communicators: `duplicate`, `compare`, `split_by_color`, `split_by_color_with_key`,
//! `Color::undefined`, names, isolation between communicators, and collectives and
//! point-to-point on split communicators (and on a split of a split).

use mpi::collective::SystemOperation;
use mpi::request;
use mpi::topology::{Color, CommunicatorRelation, Rank, SimpleCommunicator};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world: SimpleCommunicator = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);

    // duplicate and compare
    let dup = world.duplicate();
    assert_eq!(dup.size(), size);
    assert_eq!(dup.rank(), rank);
    assert_eq!(world.compare(&world), CommunicatorRelation::Identical);
    assert_eq!(world.compare(&dup), CommunicatorRelation::Congruent);
    assert_eq!(dup.compare(&world), CommunicatorRelation::Congruent);
    assert!(!world.test_inter());

    // names
    assert_eq!(world.get_name(), "MPI_COMM_WORLD");
    dup.set_name("solver-comm");
    assert_eq!(dup.get_name(), "solver-comm");
    assert_eq!(world.get_name(), "MPI_COMM_WORLD");

    // isolation: same tag, same peers, different communicators; received in the other order
    if rank == 0 {
        request::scope(|sc| {
            let a = world
                .process_at_rank(1)
                .immediate_send_with_tag(sc, &1i32, 5);
            let b = dup.process_at_rank(1).immediate_send_with_tag(sc, &2i32, 5);
            a.wait();
            b.wait();
        });
    } else if rank == 1 {
        let (x, _) = dup.process_at_rank(0).receive_with_tag::<i32>(5);
        let (y, _) = world.any_process().receive_with_tag::<i32>(5);
        assert_eq!((x, y), (2, 1));
    }

    // split by parity; key 0 keeps the world order
    let parity = world
        .split_by_color(Color::with_value(rank % 2))
        .expect("every rank has a colour");
    let same = (0..size).filter(|r| r % 2 == rank % 2).count() as Rank;
    assert_eq!(parity.size(), same);
    assert_eq!(parity.rank(), rank / 2);
    assert_eq!(world.compare(&parity), CommunicatorRelation::Unequal);
    // collectives on it
    let mut sum = 0;
    parity.all_reduce_into(&rank, &mut sum, SystemOperation::sum());
    assert_eq!(sum, (0..size).filter(|r| r % 2 == rank % 2).sum::<Rank>());
    let mut from_root = if parity.rank() == 0 { rank * 10 } else { -1 };
    parity.process_at_rank(0).broadcast_into(&mut from_root);
    assert_eq!(from_root, (rank % 2) * 10);
    let mut all = vec![0; parity.size() as usize];
    parity.all_gather_into(&rank, &mut all[..]);
    assert_eq!(
        all,
        (0..size).filter(|r| r % 2 == rank % 2).collect::<Vec<_>>()
    );
    parity.barrier();
    // point-to-point on it: ring inside the parity group
    if parity.size() > 1 {
        let n = parity.size();
        let me = parity.rank();
        let next = parity.process_at_rank((me + 1) % n);
        let prev = parity.process_at_rank((me + n - 1) % n);
        let (got, st): (Rank, _) = mpi::point_to_point::send_receive(&rank, &next, &prev);
        assert_eq!(
            st.source_rank(),
            (me + n - 1) % n,
            "ranks in the new communicator"
        );
        assert_eq!(
            got,
            ((me + n - 1) % n) * 2 + rank % 2,
            "world rank of that member"
        );
    }

    // one colour, reversed key: same group in the opposite order
    let reversed = world
        .split_by_color_with_key(Color::with_value(7), size - rank)
        .unwrap();
    assert_eq!(reversed.size(), size);
    assert_eq!(reversed.rank(), size - 1 - rank);
    assert_eq!(world.compare(&reversed), CommunicatorRelation::Similar);
    let same_order = world.split_by_color(Color::with_value(0)).unwrap();
    assert_eq!(world.compare(&same_order), CommunicatorRelation::Congruent);
    let mut scanned = 0;
    reversed.scan_into(&1i32, &mut scanned, SystemOperation::sum());
    assert_eq!(scanned, size - rank);

    // undefined colour: ranks outside get no communicator
    let firsts = world.split_by_color(if rank < 2 {
        Color::with_value(1)
    } else {
        Color::undefined()
    });
    match firsts {
        Some(c) => {
            assert!(rank < 2);
            assert_eq!(c.size(), 2);
            let mut m = 0;
            c.all_reduce_into(&(rank + 5), &mut m, SystemOperation::max());
            assert_eq!(m, 6);
        }
        None => assert!(rank >= 2),
    }

    // a split of a split: halves of the parity groups
    let sub = parity
        .split_by_color(Color::with_value(parity.rank() % 2))
        .unwrap();
    let mut members = 0;
    sub.all_reduce_into(&1i32, &mut members, SystemOperation::sum());
    assert_eq!(members, sub.size());
    let dup2 = sub.duplicate();
    assert_eq!(sub.compare(&dup2), CommunicatorRelation::Congruent);
    dup2.barrier();

    // the self communicator
    let me = SimpleCommunicator::self_comm();
    assert_eq!((me.size(), me.rank()), (1, 0));
    let mut x = 0;
    me.all_reduce_into(&rank, &mut x, SystemOperation::sum());
    assert_eq!(x, rank);

    world.barrier();
    if rank == 0 {
        println!("comm_split ok");
    }
}

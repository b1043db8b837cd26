//! Groups: `Communicator::group`, `Group::{include, exclude, union, intersection,
//! difference, size, rank, translate_rank, translate_ranks, compare}`, `SystemGroup::empty`,
//! and communicators made from groups with `split_by_subgroup_collective`.

use mpi::collective::SystemOperation;
use mpi::topology::{GroupRelation, Rank, SystemGroup, UserGroup};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);

    let all: UserGroup = world.group();
    assert_eq!(all.size(), size);
    assert_eq!(all.rank(), Some(rank));
    assert_eq!(all.compare(&world.group()), GroupRelation::Identical);

    let evens: Vec<Rank> = (0..size).filter(|r| r % 2 == 0).collect();
    let odds: Vec<Rank> = (0..size).filter(|r| r % 2 == 1).collect();
    let even_g = all.include(&evens);
    let odd_g = all.exclude(&evens);
    assert_eq!(even_g.size() as usize, evens.len());
    assert_eq!(odd_g.size() as usize, odds.len());
    if rank % 2 == 0 {
        assert_eq!(even_g.rank(), Some(rank / 2));
        assert_eq!(odd_g.rank(), None);
    } else {
        assert_eq!(even_g.rank(), None);
        assert_eq!(odd_g.rank(), Some(rank / 2));
    }
    assert_eq!(even_g.compare(&odd_g), GroupRelation::Unequal);
    assert_eq!(odd_g.compare(&all.include(&odds)), GroupRelation::Identical);

    // set operations
    let u = even_g.union(&odd_g); // evens first, then odds
    assert_eq!(u.size(), size);
    let expect_union = if size <= 2 {
        GroupRelation::Identical
    } else {
        GroupRelation::Similar
    };
    assert_eq!(u.compare(&all), expect_union);
    assert_eq!(u.translate_rank(0, &all), Some(0));
    assert_eq!(u.translate_rank(evens.len() as Rank, &all), Some(1));
    let i = all.intersection(&even_g);
    assert_eq!(i.compare(&even_g), GroupRelation::Identical);
    let d = all.difference(&even_g);
    assert_eq!(d.compare(&odd_g), GroupRelation::Identical);
    let nothing = even_g.intersection(&odd_g);
    assert_eq!(nothing.size(), 0);
    assert_eq!(nothing.rank(), None);
    assert_eq!(
        nothing.compare(&SystemGroup::empty()),
        GroupRelation::Identical
    );
    assert_eq!(SystemGroup::empty().size(), 0);

    // translating ranks between groups
    for (k, &w) in evens.iter().enumerate() {
        assert_eq!(even_g.translate_rank(k as Rank, &all), Some(w));
    }
    assert_eq!(all.translate_rank(1, &even_g), None);
    let back = all.translate_ranks(&(0..size).collect::<Vec<_>>(), &odd_g);
    for (r, t) in back.iter().enumerate() {
        let r = r as Rank;
        assert_eq!(*t, if r % 2 == 1 { Some(r / 2) } else { None });
    }

    // a reversed group is similar, not identical
    let rev: Vec<Rank> = (0..size).rev().collect();
    let rev_g = all.include(&rev);
    assert_eq!(rev_g.compare(&all), GroupRelation::Similar);
    assert_eq!(rev_g.rank(), Some(size - 1 - rank));

    // communicators from groups (collective over world)
    let even_c = world.split_by_subgroup_collective(&even_g);
    let odd_c = world.split_by_subgroup_collective(&odd_g);
    let rev_c = world
        .split_by_subgroup_collective(&rev_g)
        .expect("everyone is in the reversed group");
    assert_eq!(rev_c.rank(), size - 1 - rank);
    match (rank % 2, &even_c, &odd_c) {
        (0, Some(c), None) | (1, None, Some(c)) => {
            assert_eq!(c.rank(), rank / 2);
            let g = c.group();
            assert_eq!(
                g.compare(if rank % 2 == 0 { &even_g } else { &odd_g }),
                GroupRelation::Identical
            );
            let mut total: Rank = 0;
            c.all_reduce_into(&rank, &mut total, SystemOperation::sum());
            let members = if rank % 2 == 0 { &evens } else { &odds };
            assert_eq!(total, members.iter().sum::<Rank>());
            // the group of a communicator translates back to world ranks
            assert_eq!(g.translate_rank(c.rank(), &all), Some(rank));
        }
        _ => panic!("rank {rank}: wrong membership"),
    }
    // the first rank of the odd communicator sends to the first of the even one via world
    if let Some(c) = &odd_c {
        if c.rank() == 0 {
            let w = c.group().translate_rank(0, &all).unwrap();
            world.process_at_rank(0).send(&w);
        }
    }
    if rank == 0 {
        let (w, st) = world.process_at_rank(1).receive::<Rank>();
        assert_eq!((w, st.source_rank()), (1, 1));
    }

    world.barrier();
    if rank == 0 {
        println!("groups ok");
    }
}

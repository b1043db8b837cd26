#![deny(warnings)]
//! The environment: `initialize_with_threading(Threading::Funneled)`, a second
//! initialisation failing, `threading_support`, `version`, `library_version`,
//! `processor_name`, `time`, `time_resolution`, `Universe::size`, the world and self
//! communicators.

use std::thread;
use std::time::Duration;

use mpi::environment::{self, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

fn report(universe: &Universe) -> (i32, i32) {
    let world = universe.world();
    (world.rank(), world.size())
}

fn main() {
    let (universe, provided) =
        mpi::initialize_with_threading(Threading::Funneled).expect("first initialisation");
    assert!(
        mpi::initialize().is_none(),
        "MPI can be initialised only once"
    );
    assert!(provided >= Threading::Funneled, "provided {provided:?}");
    assert_eq!(environment::threading_support(), provided);
    assert!(Threading::Single < Threading::Funneled);
    assert!(Threading::Funneled < Threading::Serialized);
    assert!(Threading::Serialized < Threading::Multiple);

    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    assert_eq!(report(&universe), (rank, size));
    if let Some(n) = universe.size() {
        assert!(n >= size as usize, "universe size {n} < world size {size}");
    }

    let (major, minor) = environment::version();
    assert!(major >= 1 && minor >= 0, "MPI version {major}.{minor}");
    let lib = environment::library_version().expect("library version is UTF-8");
    assert!(!lib.trim().is_empty());
    let host = environment::processor_name().expect("processor name is UTF-8");
    assert!(!host.is_empty());

    // all ranks run on this node (the launcher is single-node): same processor name
    let root = world.process_at_rank(0);
    let mut len = host.len() as u64;
    root.broadcast_into(&mut len);
    let mut root_host = if rank == 0 {
        host.clone().into_bytes()
    } else {
        vec![0u8; len as usize]
    };
    root.broadcast_into(&mut root_host[..]);
    assert_eq!(String::from_utf8(root_host).unwrap(), host);

    // wall-clock time
    let tick = environment::time_resolution();
    assert!(tick > 0.0 && tick < 1.0, "time resolution {tick}");
    assert_eq!(mpi::time_resolution(), tick);
    let t0 = mpi::time();
    thread::sleep(Duration::from_millis(20));
    let t1 = environment::time();
    assert!(t1 - t0 >= 0.015, "20 ms sleep measured as {} s", t1 - t0);
    assert!(t1 - t0 < 60.0);

    // the self communicator and a fresh handle to the world
    let me = SimpleCommunicator::self_comm();
    assert_eq!((me.rank(), me.size()), (0, 1));
    let again = SimpleCommunicator::world();
    assert_eq!(again.rank(), rank);
    assert_eq!(
        world.compare(&again),
        mpi::topology::CommunicatorRelation::Identical
    );

    // Funneled: another thread may exist as long as only this one calls MPI
    let worker = thread::spawn(move || (0..1000u64).sum::<u64>());
    let s = worker.join().unwrap();
    let mut total = 0u64;
    world.all_reduce_into(&s, &mut total, mpi::collective::SystemOperation::sum());
    assert_eq!(total, 499_500 * size as u64);

    world.barrier();
    if rank == 0 {
        println!("environment ok");
    }
}

#![deny(warnings)]
//! Library-style generic code: functions generic over `C: Communicator`, `S: Source`,
//! `D: Destination`, `R: Root`, `B: Buffer`/`BufferMut`, `T: Equivalence`, and over trait
//! objects (`&dyn Communicator`, `Box<dyn Communicator>`), applied to the world, a
//! duplicate, a split communicator and a Cartesian communicator.

use std::fmt::Debug;

use mpi::collective::SystemOperation;
use mpi::point_to_point::Status;
use mpi::topology::{CartesianCommunicator, Color, Rank, SimpleCommunicator};
use mpi::traits::*;
use mpi::Tag;

/// Sends any buffer to any destination.
fn post<D: Destination, B: Buffer + ?Sized>(dest: &D, buf: &B, tag: Tag) {
    dest.send_with_tag(buf, tag);
}

/// Receives a vector of any element type from any source and checks its length.
fn fetch<S: Source, T: Equivalence>(src: &S, tag: Tag, len: usize) -> (Vec<T>, Status) {
    let (v, st) = src.receive_vec_with_tag::<T>(tag);
    assert_eq!(v.len(), len);
    (v, st)
}

/// Receives into any buffer.
fn fetch_into<S: Source, B: BufferMut + ?Sized>(src: &S, buf: &mut B) -> Status {
    src.receive_into(buf)
}

/// Broadcasts any buffer from any root.
fn share<R: Root, B: BufferMut + ?Sized>(root: &R, buf: &mut B) {
    root.broadcast_into(buf);
}

/// Ring exchange of one value of any type on any communicator.
fn ring<C: Communicator, T: Equivalence + Copy + PartialEq + Debug>(comm: &C, mine: T) -> T {
    let (rank, size) = (comm.rank(), comm.size());
    let next = comm.process_at_rank((rank + 1) % size);
    let prev = comm.process_at_rank((rank + size - 1) % size);
    let (got, st): (T, Status) = mpi::point_to_point::send_receive(&mine, &next, &prev);
    assert_eq!(st.source_rank(), prev.rank());
    got
}

/// Sum of any summable equivalent type over a trait object.
fn total<T: Equivalence + Copy + Default>(comm: &dyn Communicator, x: T) -> T {
    let mut out = T::default();
    comm.all_reduce_into(&x, &mut out, SystemOperation::sum());
    out
}

/// Everything a generic solver needs, on a trait object.
fn exercise(comm: &dyn Communicator, label: &str) {
    let rank = comm.rank();
    let size = comm.size();
    assert!(rank >= 0 && rank < size, "{label}");
    comm.barrier();

    // collectives through the trait object
    assert_eq!(total(comm, 1i32), size, "{label}");
    assert_eq!(
        total(comm, rank as f64),
        (size * (size - 1) / 2) as f64,
        "{label}"
    );
    let mut all = vec![0 as Rank; size as usize];
    comm.all_gather_into(&rank, &mut all[..]);
    assert_eq!(all, (0..size).collect::<Vec<_>>(), "{label}");

    // point-to-point through generic helpers
    if size > 1 {
        let next = comm.process_at_rank((rank + 1) % size);
        let prev = comm.process_at_rank((rank + size - 1) % size);
        let out: Vec<u32> = (0..rank as u32 + 1).collect();
        if rank == 0 {
            post(&next, &out[..], 9);
            let (v, _) = fetch::<_, u32>(&prev, 9, size as usize);
            assert_eq!(v, (0..size as u32).collect::<Vec<_>>());
        } else {
            let (v, st) = fetch::<_, u32>(&comm.any_process(), 9, rank as usize);
            assert_eq!(st.source_rank(), prev.rank());
            assert_eq!(v, (0..rank as u32).collect::<Vec<_>>());
            post(&next, &out, 9);
        }
    }

    // broadcast through a generic root
    let mut token = [0i16; 2];
    if rank == size - 1 {
        token = [size as i16, -1];
    }
    share(&comm.process_at_rank(size - 1), &mut token);
    assert_eq!(token, [size as i16, -1], "{label}");
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);

    // generic over C: Communicator with concrete communicator types
    assert_eq!(ring(&world, rank), (rank + size - 1) % size);
    assert_eq!(
        ring(&world, rank as f32 * 2.0),
        ((rank + size - 1) % size) as f32 * 2.0
    );
    let dup: SimpleCommunicator = world.duplicate();
    assert_eq!(ring(&dup, rank as u8), ((rank + size - 1) % size) as u8);
    let cart: CartesianCommunicator = world
        .create_cartesian_communicator(&[size], &[true], false)
        .unwrap();
    assert_eq!(ring(&cart, rank as i64), ((rank + size - 1) % size) as i64);
    let half = world.split_by_color(Color::with_value(rank % 2)).unwrap();

    // generic receive into a buffer of any kind
    if rank == 0 {
        post(&world.process_at_rank(1), &[1.0f64, 2.0, 3.0], 0);
        post(&world.process_at_rank(1), &5u16, 0);
    } else if rank == 1 {
        let mut three = [0.0f64; 3];
        let st = fetch_into(&world.process_at_rank(0), &mut three);
        assert_eq!(st.count(f64::equivalent_datatype()), 3);
        let mut one = 0u16;
        let st = fetch_into(&world.any_process(), &mut one);
        assert_eq!(st.source_rank(), 0);
        assert_eq!((three, one), ([1.0, 2.0, 3.0], 5));
    }

    // the same checks on every kind of communicator, through trait objects
    exercise(&world, "world");
    exercise(&dup, "duplicate");
    exercise(&half, "split");
    exercise(&cart, "cartesian");
    let comms: Vec<(Box<dyn Communicator>, &str)> = vec![
        (Box::new(world.duplicate()), "boxed duplicate"),
        (Box::new(half.duplicate()), "boxed split"),
        (
            Box::new(
                world
                    .create_cartesian_communicator(&[size], &[false], false)
                    .unwrap(),
            ),
            "boxed cartesian",
        ),
    ];
    for (c, label) in &comms {
        exercise(c.as_ref(), label);
    }

    world.barrier();
    if rank == 0 {
        println!("generic_comm ok");
    }
}

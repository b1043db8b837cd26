//! Cartesian topologies: `create_cartesian_communicator`, `num_dimensions`, `get_layout`,
//! `get_layout_into`, `rank_to_coordinates`, `coordinates_to_rank`, `shift`, `subgroup`,
//! `cartesian_map`, and a halo exchange on the grid.
//!
//! mpi 0.8's `coordinates_to_rank` rejects coordinate 0 in a non-periodic dimension, so
//! (like a user of that crate would) it is only called on the periodic grid here.

use mpi::collective::SystemOperation;
use mpi::request;
use mpi::topology::{CartesianCommunicator, Rank};
use mpi::traits::*;
use mpi::Count;

/// A 2-D factorisation of n (what MPI_Dims_create would return).
fn dims_for(n: Count) -> [Count; 2] {
    let mut a = (n as f64).sqrt() as Count;
    while n % a != 0 {
        a -= 1;
    }
    [n / a, a]
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let dims = dims_for(size);

    // a fully periodic (torus) grid without reordering
    let torus: CartesianCommunicator = world
        .create_cartesian_communicator(&dims, &[true, true], false)
        .expect("every rank is in the grid");
    assert_eq!(torus.size(), size);
    assert_eq!(torus.rank(), rank, "no reordering requested");
    assert_eq!(torus.num_dimensions(), 2);
    let layout = torus.get_layout();
    assert_eq!(layout.dims, dims.to_vec());
    assert_eq!(layout.periods, vec![true, true]);
    let (r0, r1) = (rank / dims[1], rank % dims[1]); // row-major
    assert_eq!(layout.coords, vec![r0, r1]);
    assert_eq!(torus.rank_to_coordinates(rank), vec![r0, r1]);
    let mut d = [0; 2];
    let mut p = [false; 2];
    let mut c = [0; 2];
    torus.get_layout_into(&mut d, &mut p, &mut c);
    assert_eq!((d, p, c), (dims, [true, true], [r0, r1]));
    for q in 0..size {
        let qc = torus.rank_to_coordinates(q);
        assert_eq!(torus.coordinates_to_rank(&qc), q);
    }
    // periodic coordinates wrap
    assert_eq!(
        torus.coordinates_to_rank(&[r0 + dims[0], r1 - dims[1]]),
        rank
    );

    // shifts on the torus always have both neighbours
    for dim in 0..2 {
        let (src, dst) = torus.shift(dim, 1);
        let (src, dst) = (src.unwrap(), dst.unwrap());
        let mut sc = [r0, r1];
        sc[dim as usize] -= 1;
        let mut dc = [r0, r1];
        dc[dim as usize] += 1;
        assert_eq!(src, torus.coordinates_to_rank(&sc));
        assert_eq!(dst, torus.coordinates_to_rank(&dc));
        // pass our rank along the dimension
        let (got, _): (Rank, _) = mpi::point_to_point::send_receive(
            &rank,
            &torus.process_at_rank(dst),
            &torus.process_at_rank(src),
        );
        assert_eq!(got, src);
    }

    // rows and columns
    let row = torus.subgroup(&[false, true]);
    let col = torus.subgroup(&[true, false]);
    assert_eq!((row.size(), row.rank()), (dims[1], r1));
    assert_eq!((col.size(), col.rank()), (dims[0], r0));
    assert_eq!(row.num_dimensions(), 1);
    let mut row_sum: Rank = 0;
    row.all_reduce_into(&rank, &mut row_sum, SystemOperation::sum());
    assert_eq!(
        row_sum,
        (0..dims[1]).map(|j| r0 * dims[1] + j).sum::<Rank>()
    );
    let mut col_max: Rank = 0;
    col.all_reduce_into(&rank, &mut col_max, SystemOperation::max());
    assert_eq!(col_max, (dims[0] - 1) * dims[1] + r1);

    // a non-periodic grid: halo exchange where edges have no neighbour
    let grid = world
        .create_cartesian_communicator(&dims, &[false, false], false)
        .unwrap();
    assert_eq!(grid.get_layout().periods, vec![false, false]);
    let (up, down) = grid.shift(0, 1);
    assert_eq!(up.is_none(), r0 == 0);
    assert_eq!(down.is_none(), r0 == dims[0] - 1);
    let (left, right) = grid.shift(1, 1);
    assert_eq!(left.is_none(), r1 == 0);
    assert_eq!(right.is_none(), r1 == dims[1] - 1);
    let halo_out = [rank as f64; 3];
    let mut halo_in = [[-1.0f64; 3]; 4];
    let neighbours = [up, down, left, right];
    request::scope(|sc| {
        let mut reqs = Vec::new();
        for (slot, n) in halo_in.iter_mut().zip(neighbours.iter()) {
            if let Some(n) = n {
                reqs.push(grid.process_at_rank(*n).immediate_receive_into(sc, slot));
            }
        }
        let mut sends = Vec::new();
        for n in neighbours.iter().flatten() {
            sends.push(grid.process_at_rank(*n).immediate_send(sc, &halo_out));
        }
        for r in reqs {
            r.wait();
        }
        for s in sends {
            s.wait();
        }
    });
    for (slot, n) in halo_in.iter().zip(neighbours.iter()) {
        let want = n.map_or(-1.0, |n| n as f64);
        assert_eq!(*slot, [want; 3]);
    }

    // a grid smaller than the world leaves the last rank out
    let line = world.create_cartesian_communicator(&[size - 1], &[true], false);
    assert_eq!(line.is_none(), rank == size - 1);
    if let Some(line) = &line {
        let (s, d) = line.shift(0, -1);
        assert_eq!(s.unwrap(), (rank + 1) % (size - 1));
        assert_eq!(d.unwrap(), (rank + size - 2) % (size - 1));
        line.barrier();
    }

    // cartesian_map: exactly `grid size` ranks get a place, each a distinct one
    let small = [size - 1];
    let placed = world.cartesian_map(&small, &[false]);
    if let Some(p) = placed {
        assert!((0..size - 1).contains(&p));
    }
    let mut count = 0;
    world.all_reduce_into(
        &(placed.is_some() as i32),
        &mut count,
        SystemOperation::sum(),
    );
    assert_eq!(count, size - 1);
    let mut sum = 0;
    world.all_reduce_into(&placed.unwrap_or(0), &mut sum, SystemOperation::sum());
    assert_eq!(sum, (0..size - 1).sum::<Rank>());
    let full = world.cartesian_map(&dims, &[true, false]);
    assert!(full.is_some_and(|p| (0..size).contains(&p)));

    world.barrier();
    if rank == 0 {
        println!("cartesian ok");
    }
}

#![deny(warnings)]
//! A typical small HPC code: explicit 1-D heat diffusion on a block-distributed rod
//! (uneven blocks), halo exchange with non-blocking point-to-point in a `request::scope`,
//! a global convergence measure with `all_reduce_into`, and the result gathered with
//! `gather_varcount_into_root` and compared bit-for-bit with a serial run.

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::request;
use mpi::traits::*;
use mpi::Count;

const N: usize = 1001; // interior points
const STEPS: usize = 300;
const ALPHA: f64 = 0.25;

fn initial(i: usize) -> f64 {
    ((i * 37) % 101) as f64 / 10.0
}

/// Block distribution with the remainder spread over the first ranks.
fn block(rank: usize, size: usize) -> (usize, usize) {
    let (q, r) = (N / size, N % size);
    let len = q + usize::from(rank < r);
    let start = rank * q + rank.min(r);
    (start, len)
}

fn step(u: &[f64], left: f64, right: f64, out: &mut [f64]) {
    let n = u.len();
    for i in 0..n {
        let l = if i == 0 { left } else { u[i - 1] };
        let r = if i + 1 == n { right } else { u[i + 1] };
        out[i] = u[i] + ALPHA * (l - 2.0 * u[i] + r);
    }
}

/// Exchanges the end values with the neighbours; the rod's ends stay at 0.
fn halo<C: Communicator>(comm: &C, u: &[f64]) -> (f64, f64) {
    let (rank, size) = (comm.rank(), comm.size());
    let first = u[0];
    let last = u[u.len() - 1];
    let mut ghost_left = 0.0f64;
    let mut ghost_right = 0.0f64;
    request::scope(|sc| {
        let mut reqs = Vec::new();
        if rank > 0 {
            let p = comm.process_at_rank(rank - 1);
            reqs.push(p.immediate_receive_into_with_tag(sc, &mut ghost_left, 1));
            reqs.push(p.immediate_send_with_tag(sc, &first, 2));
        }
        if rank + 1 < size {
            let p = comm.process_at_rank(rank + 1);
            reqs.push(p.immediate_receive_into_with_tag(sc, &mut ghost_right, 2));
            reqs.push(p.immediate_send_with_tag(sc, &last, 1));
        }
        for r in reqs {
            r.wait();
        }
    });
    (ghost_left, ghost_right)
}

fn solve<C: Communicator>(comm: &C) -> (Vec<f64>, Vec<f64>) {
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let (start, len) = block(rank, size);
    let mut u: Vec<f64> = (start..start + len).map(initial).collect();
    let mut next = vec![0.0; len];
    let mut history = Vec::new();
    for s in 0..STEPS {
        let (l, r) = halo(comm, &u);
        step(&u, l, r, &mut next);
        if s % 50 == 0 {
            let local = u
                .iter()
                .zip(&next)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            let mut global = 0.0f64;
            comm.all_reduce_into(&local, &mut global, SystemOperation::max());
            history.push(global);
        }
        std::mem::swap(&mut u, &mut next);
    }
    (u, history)
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);

    let (mine, history) = solve(&world);
    assert_eq!(history.len(), STEPS.div_ceil(50));
    assert!(history.iter().all(|h| h.is_finite() && *h > 0.0));
    assert!(history.last().unwrap() < history.first().unwrap());

    // total heat, summed in parallel
    let mut heat = 0.0f64;
    world.all_reduce_into(&mine.iter().sum::<f64>(), &mut heat, SystemOperation::sum());

    let root = world.process_at_rank(0);
    if rank == 0 {
        let counts: Vec<Count> = (0..size as usize)
            .map(|r| block(r, size as usize).1 as Count)
            .collect();
        let displs: Vec<Count> = (0..size as usize)
            .map(|r| block(r, size as usize).0 as Count)
            .collect();
        let mut full = vec![0.0f64; N];
        {
            let mut part = PartitionMut::new(&mut full[..], counts, displs);
            root.gather_varcount_into_root(&mine[..], &mut part);
        }
        // the serial reference
        let mut u: Vec<f64> = (0..N).map(initial).collect();
        let mut next = vec![0.0; N];
        for _ in 0..STEPS {
            step(&u, 0.0, 0.0, &mut next);
            std::mem::swap(&mut u, &mut next);
        }
        assert_eq!(full, u, "parallel result differs from the serial one");
        let serial_heat: f64 = u.iter().sum();
        assert!((heat - serial_heat).abs() <= 1e-9 * serial_heat.abs());
    } else {
        root.gather_varcount_into(&mine[..]);
    }

    world.barrier();
    if rank == 0 {
        println!("heat_1d ok");
    }
}

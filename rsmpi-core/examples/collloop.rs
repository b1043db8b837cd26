//! The software cost of a small collective, for instruction counts and profiles:
//! `collloop N [barrier|allgatherBYTES]` all-reduces one f64 (or runs a barrier, or
//! an all-gather of BYTES per rank) N times (default 1000), in the function `rounds`
//! (`benches/callgrind.sh` counts inside it; its C twin is
//! `benches/reference/collloop.c`). As a singleton it is the library's own path
//! (planning, schedule, executor) with no peer to wait for; under `rsmpirun -n 2` it
//! is the 2-rank collective.
use rsmpi::collective::SystemOperation;
use rsmpi::traits::*;

/// What each round runs.
#[derive(Clone, Copy)]
enum What {
    Allreduce,
    Barrier,
    Allgather(usize),
}

#[inline(never)]
fn rounds(world: &rsmpi::topology::SimpleCommunicator, n: usize, what: What) -> f64 {
    let mut x = 0.0f64;
    let big = match what {
        What::Allgather(b) => b,
        _ => 0,
    };
    let mine = vec![1u8; big];
    let mut all = vec![0u8; big * world.size() as usize];
    for i in 0..n {
        match what {
            What::Allgather(_) => world.all_gather_into(&mine[..], &mut all[..]),
            What::Barrier => world.barrier(),
            What::Allreduce => world.all_reduce_into(&(i as f64), &mut x, SystemOperation::sum()),
        }
    }
    x
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let arg = args.next().unwrap_or_default();
    let what = match arg.strip_prefix("allgather").and_then(|n| n.parse().ok()) {
        Some(b) => What::Allgather(b),
        None if arg == "barrier" => What::Barrier,
        None => What::Allreduce,
    };
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    let t = rsmpi::time();
    let x = rounds(&world, n, what);
    let dt = rsmpi::time() - t;
    if let What::Allreduce = what {
        assert_eq!(x, (n.saturating_sub(1) * world.size() as usize) as f64);
    }
    if world.rank() == 0 && std::env::var_os("COLLLOOP_PRINT").is_some() {
        println!("{:.3} us per call", dt / n as f64 * 1e6);
    }
}

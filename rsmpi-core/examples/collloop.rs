//! The software cost of a small collective, for instruction counts and profiles:
//! `collloop N [barrier|allgatherBYTES]` all-reduces one f64 (or runs a barrier, or
//! an all-gather of BYTES per rank) N times (default 1000). As a singleton it is the library's own path (planning, schedule, executor)
//! with no peer to wait for; under `rsmpirun -n 2` it is the 2-rank collective.
use rsmpi::collective::SystemOperation;
use rsmpi::traits::*;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let what = args.next().unwrap_or_default();
    let barrier = what == "barrier";
    let big: usize = what
        .strip_prefix("allgather")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    let mut x = 0.0f64;
    let t = rsmpi::time();
    let mine = vec![1u8; big];
    let mut all = vec![0u8; big * world.size() as usize];
    for i in 0..n {
        if big > 0 {
            world.all_gather_into(&mine[..], &mut all[..]);
        } else if barrier {
            world.barrier();
        } else {
            world.all_reduce_into(&(i as f64), &mut x, SystemOperation::sum());
        }
    }
    let dt = rsmpi::time() - t;
    if !barrier && big == 0 {
        assert_eq!(x, ((n - 1) * world.size() as usize) as f64);
    }
    if world.rank() == 0 && std::env::var_os("COLLLOOP_PRINT").is_some() {
        println!("{:.3} us per call", dt / n as f64 * 1e6);
    }
}

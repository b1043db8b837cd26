//! The software cost of a small collective, for instruction counts and profiles:
//! `collloop N [barrier]` all-reduces one f64 (or runs a barrier) N times (default
//! 1000). As a singleton it is the library's own path (planning, schedule, executor)
//! with no peer to wait for; under `rsmpirun -n 2` it is the 2-rank collective.
use rsmpi::collective::SystemOperation;
use rsmpi::traits::*;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let barrier = args.next().as_deref() == Some("barrier");
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    let mut x = 0.0f64;
    let t = rsmpi::time();
    for i in 0..n {
        if barrier {
            world.barrier();
        } else {
            world.all_reduce_into(&(i as f64), &mut x, SystemOperation::sum());
        }
    }
    let dt = rsmpi::time() - t;
    if !barrier {
        assert_eq!(x, ((n - 1) * world.size() as usize) as f64);
    }
    if world.rank() == 0 && std::env::var_os("COLLLOOP_PRINT").is_some() {
        println!("{:.3} us per call", dt / n as f64 * 1e6);
    }
}

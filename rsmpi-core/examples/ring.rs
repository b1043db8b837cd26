//! The README's example: a ring exchange with a pre-posted receive, then an all-reduce.
use rsmpi::collective::SystemOperation;
use rsmpi::request;
use rsmpi::traits::*;

fn main() {
    let universe = rsmpi::initialize().expect("MPI init");
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let next = world.process_at_rank((me + 1) % n);
    let prev = world.process_at_rank((me + n - 1) % n);

    let out = vec![me as f64; 1024];
    let mut got = vec![0.0f64; 1024];
    request::scope(|scope| {
        // posted before the neighbour sends: its send becomes a direct write
        let r = prev.immediate_receive_into_with_tag(scope, &mut got[..], 7);
        next.send_with_tag(&out[..], 7);
        let status = r.wait();
        assert_eq!(status.source_rank(), (me + n - 1) % n);
    });
    let mut sum = 0.0;
    world.all_reduce_into(&got[0], &mut sum, SystemOperation::sum());
    assert_eq!(sum, (0..n).map(f64::from).sum::<f64>());
    println!(
        "rank {me}: got {} from my left; paths: {}",
        got[0],
        universe.stats()
    );
}

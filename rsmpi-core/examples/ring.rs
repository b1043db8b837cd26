use rsmpi::request;

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
    println!(
        "rank {me}: got {} from my left; paths: {}",
        got[0],
        universe.stats()
    );
}

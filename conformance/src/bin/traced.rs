//! `traced ITERS EVERY [sync] [big] [abort|hang] [spin=US] [out=FILE]`: a program for the tracer's tests
//! (`tests/trace.rs`), run under `RSMPI_TRACE`. Every iteration shifts a value around
//! the ring with `sendrecv`; every 8th also sends a 64 KiB message (rendezvous
//! above the eager limit) to the right and receives one from any source with
//! `immediate_receive` and `wait_all`, probes, and receives three values into every
//! other slot of a strided view; every `EVERY` iterations the ranks
//! meet in a barrier, or, with `sync`, at `rsmpi::trace::sync_point` (a
//! point-to-point-only program). `big` leaves out the large messages and probes
//! (the memory test wants many small events). `waits` runs only a loop of small
//! immediate sends and receives, each request waited for alone; `tests` a loop of
//! immediate receives, each tested until it completes (three times before its
//! message is sent), with `out=FILE` each rank writing how many tests it made to
//! `FILE.RANK`. `spin=US` computes
//! for `US` microseconds (a busy wait on the clock) at the start of every iteration, and
//! `out=FILE` has rank 0 write the loop's wall time there, in seconds: the
//! reconstruction test (`tests/trace_accuracy.rs`) compares runs with and without
//! tracing. With `abort`, rank 1 ends the job with `MPI_Abort` (code 7) after the
//! loop, before the reduction, while rank 2 waits in a receive from rank 1 and the
//! others in the reduction, until the launcher stops them (a job that dies:
//! `tests/trace.rs`). With `hang`, every rank then waits for a message from its left
//! neighbour that never comes (a job that hangs until its time limit). With
//! `straddle`, the loop is instead: rank 0 posts a receive of 1 MiB from rank 1, rank
//! 1 starts its send, and every rank meets in a barrier before the two wait, so
//! that the message often completes during the barrier's flush, while the tracer's
//! own traffic runs. Every payload is checked.
#![forbid(unsafe_code)]

use rsmpi::datatype::UserDatatype;
use rsmpi::request;
use rsmpi::traits::*;
use rsmpi::MutView;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters: u64 = args.first().and_then(|a| a.parse().ok()).expect("ITERS");
    let every: u64 = args.get(1).and_then(|a| a.parse().ok()).expect("EVERY");
    let sync = args.iter().any(|a| a == "sync");
    let big = args.iter().any(|a| a == "big");
    let abort = args.iter().any(|a| a == "abort");
    let hang = args.iter().any(|a| a == "hang");
    let opt = |k: &str| args.iter().find_map(|a| a.strip_prefix(k));
    let spin = std::time::Duration::from_micros(opt("spin=").map_or(0, |v| v.parse().expect("US")));
    let out = opt("out=");
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let right = world.process_at_rank((me + 1) % n);
    let left = world.process_at_rank((me + n - 1) % n);
    if args.iter().any(|a| a == "straddle") {
        straddle(&world, iters);
        return;
    }
    if args.iter().any(|a| a == "waits") {
        waits(&left, &right, iters);
        return;
    }
    if args.iter().any(|a| a == "tests") {
        let made = tests(&world, &left, &right, iters);
        if let Some(f) = out {
            std::fs::write(format!("{f}.{me}"), format!("{made}\n")).expect("write out=FILE");
        }
        return;
    }
    let mut large_in = vec![0u8; 64 << 10];
    world.barrier();
    let start = std::time::Instant::now();
    for i in 0..iters {
        let t = std::time::Instant::now();
        while t.elapsed() < spin {
            std::hint::spin_loop();
        }
        let (got, st): (u64, _) = rsmpi::point_to_point::send_receive_with_tags(
            &(i * 1000 + me as u64),
            &right,
            1,
            &left,
            1,
        );
        assert_eq!(got, i * 1000 + left.rank() as u64);
        assert_eq!(st.source_rank(), left.rank());
        if !big && i % 8 == 0 {
            let large_out = vec![(i as u8).wrapping_add(me as u8); 64 << 10];
            request::multiple_scope(2, |sc, coll| {
                coll.add(world.any_process().immediate_receive_into_with_tag(
                    sc,
                    &mut large_in[..],
                    2,
                ));
                coll.add(right.immediate_send_with_tag(sc, &large_out[..], 2));
                let mut out = Vec::new();
                coll.wait_all(&mut out);
            });
            let from = (me + n - 1) % n;
            assert!(large_in
                .iter()
                .all(|b| *b == (i as u8).wrapping_add(from as u8)));
            right.send_with_tag(&i, 3);
            let st = left.probe_with_tag(3);
            assert_eq!(st.tag(), 3);
            let (v, _): (u64, _) = left.receive_with_tag(3);
            assert_eq!(v, i);
            // a blocking receive into a strided view (every other slot): received
            // into the library's buffer and unpacked, not into the user's bytes
            right.send_with_tag(&[i as f64; 3][..], 4);
            let mut dst = [-1.0f64; 6];
            let every_other = UserDatatype::vector(3, 1, 2, &f64::equivalent_datatype());
            left.receive_into_with_tag(&mut MutView::new(&mut dst[..], 1, &every_other), 4);
            assert_eq!(dst, [i as f64, -1.0, i as f64, -1.0, i as f64, -1.0]);
        }
        if (i + 1) % every == 0 {
            if sync {
                rsmpi::trace::sync_point();
            } else {
                world.barrier();
            }
        }
    }
    let took = start.elapsed().as_secs_f64();
    if abort && me == 1 {
        world.abort(7);
    }
    if abort && me == 2 || hang {
        // a message that is never sent
        let _: (u64, _) = left.receive_with_tag(4);
    }
    let mut sum = 0u64;
    world.all_reduce_into(
        &(me as u64),
        &mut sum,
        rsmpi::collective::SystemOperation::sum(),
    );
    assert_eq!(sum, (0..n as u64).sum::<u64>());
    if me == 0 {
        // for comparing a traced run's reconstructed time with an untraced run's
        println!("traced: loop took {:.6} s", took);
        if let Some(f) = out {
            std::fs::write(f, format!("{took:.9}\n")).expect("write out=FILE");
        }
    }
}

/// The `straddle` loop: `iters` messages of 1 MiB from rank 1 to rank 0, each
/// received across a barrier.
fn straddle(world: &rsmpi::topology::SimpleCommunicator, iters: u64) {
    let me = world.rank();
    let mut rbuf = vec![0u8; 1 << 20];
    for i in 0..iters {
        let sbuf = vec![i as u8; 1 << 20];
        request::scope(|sc| match me {
            0 => {
                let r =
                    world
                        .process_at_rank(1)
                        .immediate_receive_into_with_tag(sc, &mut rbuf[..], 5);
                world.barrier();
                r.wait();
            }
            1 => {
                let r = world
                    .process_at_rank(0)
                    .immediate_send_with_tag(sc, &sbuf[..], 5);
                world.barrier();
                r.wait();
            }
            _ => world.barrier(),
        });
        if me == 0 {
            assert!(rbuf.iter().all(|b| *b == i as u8), "message {i}");
        }
    }
}

/// The `waits` loop: `iters` rounds of a small immediate send to the right, which
/// completes as it starts, and an immediate receive from the left, each request
/// waited for alone.
fn waits(left: &rsmpi::topology::Process<'_>, right: &rsmpi::topology::Process<'_>, iters: u64) {
    for i in 0..iters {
        let mut got = 0u64;
        request::scope(|sc| {
            let r = left.immediate_receive_into_with_tag(sc, &mut got, 3);
            let s = right.immediate_send_with_tag(sc, &i, 3);
            s.wait();
            r.wait();
        });
        assert_eq!(got, i);
    }
}

/// The `tests` loop: `iters` receives of 8 bytes from the left neighbour, each tested
/// three times before the neighbour sends (they must find it unfinished) and then
/// until it completes; returns the number of tests made.
fn tests(
    world: &rsmpi::topology::SimpleCommunicator,
    left: &rsmpi::topology::Process<'_>,
    right: &rsmpi::topology::Process<'_>,
    iters: u64,
) -> u64 {
    let mut made = 0u64;
    for i in 0..iters {
        let mut got = 0u64;
        request::scope(|sc| {
            let mut r = left.immediate_receive_into_with_tag(sc, &mut got, 4);
            for _ in 0..3 {
                made += 1;
                r = match r.test() {
                    Ok(_) => panic!("round {i}: a receive completed before its send"),
                    Err(r) => r,
                };
            }
            world.barrier();
            let s = right.immediate_send_with_tag(sc, &i, 4);
            loop {
                made += 1;
                match r.test() {
                    Ok(st) => {
                        assert_eq!(st.source_rank(), left.rank());
                        break;
                    }
                    Err(again) => r = again,
                }
            }
            s.wait();
        });
        assert_eq!(got, i);
    }
    made
}

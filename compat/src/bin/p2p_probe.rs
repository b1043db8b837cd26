//! Receiving messages of unknown size: `probe`, `probe_with_tag`, `immediate_probe`,
//! `matched_probe` + `matched_receive_into` / `matched_receive_vec` / `matched_receive`,
//! `immediate_matched_probe`, and `Status::count`.

use mpi::traits::*;

fn message(from: i32, round: i32) -> Vec<u32> {
    (0..(3 * from + round + 1) as u32)
        .map(|i| i * 7 + from as u32 * 100 + round as u32)
        .collect()
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let others = (size - 1) as usize;

    // Nothing with tag 77 exists yet anywhere: an immediate probe must say so.
    if rank == 0 {
        assert!(world.any_process().immediate_probe_with_tag(77).is_none());
        assert!(world
            .any_process()
            .immediate_matched_probe_with_tag(77)
            .is_none());
    }
    world.barrier();

    if rank != 0 {
        let root = world.process_at_rank(0);
        for round in 0..4 {
            root.send_with_tag(&message(rank, round)[..], 10 + round);
        }
        root.send_with_tag(&(rank as f64 * 1.5), 20);
        root.send_with_tag(&message(rank, 9)[..], 77);
        root.send_with_tag(&message(rank, 8)[..], 78);
    } else {
        // round 0: probe any source and tag, then receive exactly that message
        for _ in 0..others {
            let st = world.any_process().probe_with_tag(10);
            let n = st.count(u32::equivalent_datatype()) as usize;
            let mut buf = vec![0u32; n];
            let src = st.source_rank();
            let st2 = world
                .process_at_rank(src)
                .receive_into_with_tag(&mut buf[..], st.tag());
            assert_eq!(st2.source_rank(), src);
            assert_eq!(buf, message(src, 0));
        }
        // round 1: probe one named source (default: any tag), in rank order
        for src in 1..size {
            let st = world.process_at_rank(src).probe();
            assert_eq!(st.source_rank(), src);
            assert_eq!(st.tag(), 11, "first pending message from {src} is round 1");
            let (v, _) = world.process_at_rank(src).receive_vec_with_tag::<u32>(11);
            assert_eq!(v.len(), st.count(u32::equivalent_datatype()) as usize);
            assert_eq!(v, message(src, 1));
        }
        // round 2: matched probe + matched_receive_into
        for _ in 0..others {
            let (msg, st) = world.any_process().matched_probe_with_tag(12);
            let mut buf = vec![0u32; st.count(u32::equivalent_datatype()) as usize];
            let st2 = msg.matched_receive_into(&mut buf[..]);
            assert_eq!(st2.source_rank(), st.source_rank());
            assert_eq!(st2.tag(), 12);
            assert_eq!(buf, message(st.source_rank(), 2));
        }
        // round 3: matched probe on a named source + matched_receive_vec
        for src in (1..size).rev() {
            let (v, st) = world
                .process_at_rank(src)
                .matched_probe_with_tag(13)
                .matched_receive_vec::<u32>();
            assert_eq!((st.source_rank(), st.tag()), (src, 13));
            assert_eq!(v, message(src, 3));
        }
        // a scalar through matched_probe + Message::matched_receive (with its tag: with
        // any source and any tag, a later message of a rank already taken may come
        // first)
        for _ in 0..others {
            let (msg, st) = world.any_process().matched_probe_with_tag(20);
            assert_eq!(st.tag(), 20);
            let (x, st2) = msg.matched_receive::<f64>();
            assert_eq!(x, st2.source_rank() as f64 * 1.5);
        }
        // tag 77: poll with immediate_probe until each one is there
        let mut got = 0;
        while got < others {
            if let Some(st) = world.any_process().immediate_probe_with_tag(77) {
                let src = st.source_rank();
                let (v, _) = world.process_at_rank(src).receive_vec_with_tag::<u32>(77);
                assert_eq!(v, message(src, 9));
                got += 1;
            }
        }
        // tag 78: poll with immediate_matched_probe (and immediate_probe without a tag)
        let mut got = 0;
        while got < others {
            if let Some(st) = world.any_process().immediate_probe() {
                assert_eq!(st.tag(), 78);
            }
            if let Some((msg, st)) = world.any_process().immediate_matched_probe() {
                let mut buf = vec![0u32; st.count(u32::equivalent_datatype()) as usize];
                msg.matched_receive_into(&mut buf[..]);
                assert_eq!(buf, message(st.source_rank(), 8));
                got += 1;
            }
        }
        assert!(world.any_process().immediate_probe().is_none());
    }

    world.barrier();
    if rank == 0 {
        println!("p2p_probe ok");
    }
}

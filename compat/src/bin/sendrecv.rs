//! Combined send-receive: `send_receive`, `send_receive_with_tags`, `send_receive_into`,
//! `send_receive_into_with_tags`, `send_receive_replace_into`,
//! `send_receive_replace_into_with_tags`, with named and wildcard sources.

use mpi::point_to_point::{
    send_receive, send_receive_into, send_receive_into_with_tags, send_receive_replace_into,
    send_receive_replace_into_with_tags, send_receive_with_tags, Status,
};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let next = world.process_at_rank(right);
    let prev = world.process_at_rank(left);

    // scalar shift to the right
    let (got, st): (i32, Status) = send_receive(&rank, &next, &prev);
    assert_eq!(got, left);
    assert_eq!(st.source_rank(), left);

    // scalar shift to the left with tags, different types both ways
    let (got, st): (u64, Status) = send_receive_with_tags(&(rank as u64 * 3), &prev, 41, &next, 41);
    assert_eq!((got, st.tag()), (right as u64 * 3, 41));

    // buffers, into existing storage
    let out: Vec<f64> = (0..500).map(|i| rank as f64 + i as f64 * 0.25).collect();
    let mut inb = vec![0.0f64; 500];
    let st = send_receive_into(&out[..], &next, &mut inb[..], &prev);
    assert_eq!(st.count(f64::equivalent_datatype()), 500);
    assert_eq!(inb[499], left as f64 + 499.0 * 0.25);

    // with tags, and a wildcard source
    let out = [rank as i16; 8];
    let mut inb = [0i16; 8];
    let st = send_receive_into_with_tags(&out, &prev, 5, &mut inb, &world.any_process(), 5);
    assert_eq!(st.source_rank(), right);
    assert_eq!(inb, [right as i16; 8]);

    // replace: pass a token all the way round the ring; it comes back unchanged
    let mut token: Vec<i32> = vec![rank, rank * 2, rank * 3];
    for step in 1..=size {
        let st = send_receive_replace_into(&mut token[..], &next, &prev);
        let from = (rank - step).rem_euclid(size);
        assert_eq!(token, vec![from, from * 2, from * 3]);
        assert_eq!(st.source_rank(), left);
    }
    assert_eq!(token, vec![rank, rank * 2, rank * 3]);

    let mut x = [rank as u8, 0xAA];
    let st = send_receive_replace_into_with_tags(&mut x, &prev, 9, &next, 9);
    assert_eq!((x, st.tag()), ([right as u8, 0xAA], 9));

    // sending to oneself
    let (me, _): (f32, Status) =
        send_receive(&(rank as f32), &world.this_process(), &world.this_process());
    assert_eq!(me, rank as f32);

    world.barrier();
    if rank == 0 {
        println!("sendrecv ok");
    }
}

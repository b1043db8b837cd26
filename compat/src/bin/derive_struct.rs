#![deny(warnings)]
//! `#[derive(Equivalence)]` on user structs: mixed field types with padding between
//! them, array and nested-array fields, a field that is itself a derived struct, a tuple
//! field and a tuple struct; sent point-to-point, as vectors, and through collectives.

use mpi::traits::*;

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Vec3 {
    x: f64,
    y: f64,
    z: f64,
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Particle {
    id: u8,    // followed by padding
    pos: Vec3, // a derived struct
    charge: f32,
    flags: [u16; 3], // an array
    alive: bool,
    stencil: [[i32; 2]; 3], // an array of arrays
    span: (i16, f64),       // a tuple
    serial: i64,
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Pair(i32, f64);

fn particle(owner: i32, k: usize) -> Particle {
    let o = owner as f64;
    let k_i = k as i32;
    Particle {
        id: (owner as u8).wrapping_mul(17).wrapping_add(k as u8),
        pos: Vec3 {
            x: o + 0.5,
            y: -o * k as f64,
            z: 1.0 / (k as f64 + 1.0),
        },
        charge: [-1.0, 2.5][k % 2],
        flags: [owner as u16, k as u16, 0xBEEF],
        alive: (owner + k_i) % 3 != 0,
        stencil: [[owner, k_i], [-owner, -k_i], [owner * k_i, 7]],
        span: (-(k as i16), o * 1e-3),
        serial: (owner as i64) << 40 | k as i64,
    }
}

/// Reads every field (so the check does not rely on the derived PartialEq alone).
fn check(p: &Particle, owner: i32, k: usize) {
    let e = particle(owner, k);
    assert_eq!(p.id, e.id);
    assert_eq!((p.pos.x, p.pos.y, p.pos.z), (e.pos.x, e.pos.y, e.pos.z));
    assert_eq!(p.charge, e.charge);
    assert_eq!(p.flags, e.flags);
    assert_eq!(p.alive, e.alive);
    assert_eq!(p.stencil, e.stencil);
    assert_eq!(p.span, e.span);
    assert_eq!(p.serial, e.serial);
    assert_eq!(*p, e);
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let next = world.process_at_rank((rank + 1) % size);
    let left = (rank + size - 1) % size;
    let prev = world.process_at_rank(left);

    // one struct, rank 0 -> rank 1 and back (receive by value)
    if rank == 0 {
        world.process_at_rank(1).send(&particle(0, 0));
        let (p, st) = world.process_at_rank(1).receive::<Particle>();
        check(&p, 1, 0);
        assert_eq!(st.count(Particle::equivalent_datatype()), 1);
    } else if rank == 1 {
        let (p, _) = world.process_at_rank(0).receive::<Particle>();
        check(&p, 0, 0);
        world.process_at_rank(0).send(&particle(1, 0));
    }

    // a vector of structs around the ring: lengths differ per rank
    let mine: Vec<Particle> = (0..(rank as usize + 2))
        .map(|k| particle(rank, k))
        .collect();
    let (theirs, st) = if rank == 0 {
        next.send(&mine[..]);
        prev.receive_vec::<Particle>()
    } else {
        let r = prev.receive_vec::<Particle>();
        next.send(&mine);
        r
    };
    assert_eq!(theirs.len(), left as usize + 2);
    assert_eq!(
        st.count(Particle::equivalent_datatype()) as usize,
        theirs.len()
    );
    for (k, p) in theirs.iter().enumerate() {
        check(p, left, k);
    }

    // into an existing buffer (the padding of the receiver is left alone; only fields count)
    let mut buf = [Particle::default(); 3];
    if rank == 0 {
        let out = [particle(0, 5), particle(0, 6), particle(0, 7)];
        for r in 1..size {
            world.process_at_rank(r).send_with_tag(&out, 3);
        }
    } else {
        world.process_at_rank(0).receive_into_with_tag(&mut buf, 3);
        for (i, p) in buf.iter().enumerate() {
            check(p, 0, i + 5);
        }
    }

    // broadcast, gather and all-gather of derived structs
    let root = world.process_at_rank(size - 1);
    let mut b = if rank == size - 1 {
        particle(99, 1)
    } else {
        Particle::default()
    };
    root.broadcast_into(&mut b);
    check(&b, 99, 1);

    let two = [particle(rank, 0), particle(rank, 1)];
    if rank == size - 1 {
        let mut all = vec![Particle::default(); 2 * size as usize];
        root.gather_into_root(&two[..], &mut all[..]);
        for (i, p) in all.iter().enumerate() {
            check(p, i as i32 / 2, i % 2);
        }
    } else {
        root.gather_into(&two[..]);
    }

    let mut pairs = vec![Pair::default(); size as usize];
    world.all_gather_into(&Pair(rank, rank as f64 / 4.0), &mut pairs[..]);
    for (i, p) in pairs.iter().enumerate() {
        assert_eq!((p.0, p.1), (i as i32, i as f64 / 4.0));
    }

    // a nested struct on its own
    let (v, _) = mpi::point_to_point::send_receive::<Vec3, _, _, _>(
        &Vec3 {
            x: rank as f64,
            y: 1.0,
            z: 2.0,
        },
        &next,
        &prev,
    );
    assert_eq!(
        v,
        Vec3 {
            x: left as f64,
            y: 1.0,
            z: 2.0
        }
    );

    world.barrier();
    if rank == 0 {
        println!("derive_struct ok");
    }
}

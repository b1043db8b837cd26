//! Packing: `pack`, `pack_size`, `pack_into`, `unpack_into` (unsafe in mpi 0.8), a packed
//! message of mixed contents sent as bytes, packing through a `View`; initialised with
//! `initialize_with_threading(Threading::Single)`.

use mpi::datatype::{UserDatatype, View};
use mpi::environment::Threading;
use mpi::traits::*;
use mpi::Count;

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Header {
    kind: u8,
    len: i32,
    scale: f64,
}

fn main() {
    let (universe, provided) = mpi::initialize_with_threading(Threading::Single).unwrap();
    assert!(provided >= Threading::Single);
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);

    // pack / unpack locally
    let values: Vec<f64> = (0..10).map(|i| rank as f64 + i as f64 / 4.0).collect();
    let packed = world.pack(&values[..]);
    let f64_t = f64::equivalent_datatype();
    assert!(packed.len() >= 80);
    assert!(packed.len() <= world.pack_size(10, &f64_t) as usize);
    let mut back = vec![0.0f64; 10];
    let pos = unsafe { world.unpack_into(&packed, &mut back[..], 0) };
    assert_eq!(pos as usize, packed.len());
    assert_eq!(back, values);

    // a message of mixed contents: header, then `len` i32s, then a flag
    let body: Vec<i32> = (0..rank * 3 + 1).map(|i| i * rank).collect();
    let header = Header {
        kind: 7,
        len: body.len() as i32,
        scale: 0.5 * rank as f64,
    };
    let cap = world.pack_size(1, &Header::equivalent_datatype())
        + world.pack_size(body.len() as Count, &i32::equivalent_datatype())
        + world.pack_size(1, &bool::equivalent_datatype());
    let mut buf = vec![0u8; cap as usize];
    let mut pos = world.pack_into(&header, &mut buf[..], 0);
    pos = world.pack_into(&body[..], &mut buf[..], pos);
    pos = world.pack_into(&(rank % 2 == 1), &mut buf[..], pos);
    assert!(pos <= cap);
    buf.truncate(pos as usize);

    if rank == 0 {
        for _ in 1..size {
            let (bytes, st) = world.any_process().receive_vec::<u8>();
            let src = st.source_rank();
            let mut h = Header::default();
            let mut at = unsafe { world.unpack_into(&bytes[..], &mut h, 0) };
            assert_eq!((h.kind, h.len, h.scale), (7, src * 3 + 1, 0.5 * src as f64));
            let mut b = vec![0i32; h.len as usize];
            at = unsafe { world.unpack_into(&bytes[..], &mut b[..], at) };
            assert_eq!(b, (0..src * 3 + 1).map(|i| i * src).collect::<Vec<_>>());
            let mut odd = false;
            at = unsafe { world.unpack_into(&bytes[..], &mut odd, at) };
            assert_eq!(odd, src % 2 == 1);
            assert_eq!(at as usize, bytes.len());
        }
    } else {
        world.process_at_rank(0).send(&buf[..]);
    }

    // pack a strided view (every other element) and unpack it contiguously
    let every_other = UserDatatype::vector(5, 1, 2, &f64_t);
    let view = unsafe { View::with_count_and_datatype(&values[..], 1, &every_other) };
    let packed = world.pack(&view);
    assert!(packed.len() <= world.pack_size(1, &every_other) as usize);
    let mut five = [0.0f64; 5];
    unsafe {
        world.unpack_into(&packed, &mut five, 0);
    }
    assert_eq!(
        five,
        [values[0], values[2], values[4], values[6], values[8]]
    );

    // packed bytes travel through a collective, too
    let mut from_root = if rank == 0 {
        world.pack(&[1u16, 2, 3][..])
    } else {
        Vec::new()
    };
    let mut n = from_root.len() as u64;
    world.process_at_rank(0).broadcast_into(&mut n);
    from_root.resize(n as usize, 0);
    world.process_at_rank(0).broadcast_into(&mut from_root[..]);
    let mut three = [0u16; 3];
    unsafe {
        world.unpack_into(&from_root, &mut three, 0);
    }
    assert_eq!(three, [1, 2, 3]);

    world.barrier();
    if rank == 0 {
        println!("pack_unpack ok");
    }
}

//! `#[derive(Equivalence)]`: type maps of structs with padding, nested arrays, tuples and
//! nested derived structs, the `crate` attribute, and values travelling through a
//! singleton job (a send to self, a collective, a user operation on the struct).

use rsmpi::collective::{SystemOperation, UserOperation};
use rsmpi::datatype::{DynBuffer, DynBufferMut, UserDatatype};
use rsmpi::traits::*;

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Inner {
    flag: bool,
    x: f64,
}

#[derive(Equivalence, Clone, Debug, PartialEq, Default)]
struct Outer {
    id: u8,
    grid: [[i32; 2]; 3],
    pair: (u16, f32),
    inner: Inner,
    tail: [Inner; 2],
}

/// Through a re-export path given explicitly.
mod reexport {
    pub use rsmpi as lib;
}

#[derive(rsmpi::traits::Equivalence, Clone, Copy, Debug, PartialEq)]
#[rsmpi(crate = "reexport::lib")]
struct Tagged(u32, i64);

fn outer(k: i32) -> Outer {
    Outer {
        id: k as u8,
        grid: [[k, -k], [2 * k, 3], [4, 5 * k]],
        pair: (k as u16 + 7, k as f32 / 4.0),
        inner: Inner {
            flag: k % 2 == 0,
            x: k as f64 * 1.5,
        },
        tail: [
            Inner {
                flag: true,
                x: -1.0,
            },
            Inner {
                flag: false,
                x: k as f64,
            },
        ],
    }
}

#[test]
fn derived_type_maps_and_transfers() {
    // type maps: padding skipped, extent the Rust size
    let inner = Inner::equivalent_datatype();
    assert_eq!(inner.size(), 1 + 8);
    assert_eq!(inner.extent(), std::mem::size_of::<Inner>() as i64);
    let o = Outer::equivalent_datatype();
    assert_eq!(o.size(), 1 + 24 + (2 + 4) + 9 + 2 * 9);
    assert_eq!(o.extent(), std::mem::size_of::<Outer>() as i64);
    assert_eq!(Tagged::equivalent_datatype().size(), 12);
    assert_ne!(
        UserDatatype::of::<Outer>(),
        UserDatatype::contiguous(1, &UserDatatype::bytes(std::mem::size_of::<Outer>())),
        "padding must not be part of the type map"
    );

    let universe = rsmpi::initialize().expect("singleton");
    let world = universe.world();
    assert_eq!(world.size(), 1);
    let me = world.this_process();

    // point to point to self, one value and a vector
    let sent: Vec<Outer> = (0..5).map(outer).collect();
    rsmpi::request::scope(|sc| {
        let r = me.immediate_send_with_tag(sc, &sent[..], 3);
        let (got, st) = me.receive_vec_with_tag::<Outer>(3);
        assert_eq!(got, sent);
        assert_eq!(st.count(Outer::equivalent_datatype()), 5);
        r.wait();
    });
    me.send(&Tagged(9, -9));
    let (t, _) = me.receive::<Tagged>();
    assert_eq!(t, Tagged(9, -9));

    // a collective and a user operation on the struct (downcast to it)
    let mut b = outer(0);
    if world.rank() == 0 {
        b = outer(4);
    }
    world.process_at_rank(0).broadcast_into(&mut b);
    assert_eq!(b, outer(4));
    let keep_max = UserOperation::commutative(|x: DynBuffer, y: DynBufferMut| {
        let x = x.downcast::<Inner>().expect("Inner values");
        let y = y.downcast::<Inner>().expect("Inner values");
        for (a, b) in x.iter().zip(y.iter_mut()) {
            if a.x > b.x {
                *b = *a;
            }
        }
    });
    let mine = [
        Inner { flag: true, x: 2.0 },
        Inner {
            flag: false,
            x: -3.0,
        },
    ];
    let mut res = [Inner::default(); 2];
    world.all_reduce_into(&mine[..], &mut res[..], &keep_max);
    assert_eq!(res, mine);
    // a predefined operation needs one basic type
    let mut n = 0u64;
    world.all_reduce_into(&41u64, &mut n, SystemOperation::sum());
    assert_eq!(n, 41);
}

//! User-defined reductions: `UserOperation::commutative` and `UserOperation::associative`
//! (non-commutative operations checked in rank order: 2x2 matrix products and bounded
//! string concatenation), `DynBuffer`/`DynBufferMut` downcasts, used with reduce,
//! all_reduce, scan, exclusive_scan, reduce_local_into and an immediate all_reduce.

use mpi::collective::{reduce_local_into, UserOperation};
use mpi::datatype::{DynBuffer, DynBufferMut};
use mpi::request;
use mpi::traits::*;

const P: i64 = 1_000_003;

/// A 2x2 matrix modulo P, row-major.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Mat2 {
    m: [i64; 4],
}

impl Mat2 {
    const ID: Mat2 = Mat2 { m: [1, 0, 0, 1] };
    fn of(rank: i32, k: usize) -> Mat2 {
        let a = (rank as i64 + 2 + k as i64) % P;
        Mat2 {
            m: [a, 1, (k as i64 + 1) % P, 0],
        }
    }
    fn mul(&self, o: &Mat2) -> Mat2 {
        let (a, b) = (&self.m, &o.m);
        Mat2 {
            m: [
                (a[0] * b[0] + a[1] * b[2]) % P,
                (a[0] * b[1] + a[1] * b[3]) % P,
                (a[2] * b[0] + a[3] * b[2]) % P,
                (a[2] * b[1] + a[3] * b[3]) % P,
            ],
        }
    }
}

/// A short string: concatenation truncated to the capacity is associative, not commutative.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Word {
    len: u8,
    bytes: [u8; 31],
}

impl Word {
    fn new(s: &str) -> Word {
        let mut w = Word {
            len: 0,
            bytes: [0; 31],
        };
        for (i, b) in s.bytes().take(31).enumerate() {
            w.bytes[i] = b;
            w.len = i as u8 + 1;
        }
        w
    }
    fn concat(&self, o: &Word) -> Word {
        let mut w = *self;
        for &b in &o.bytes[..o.len as usize] {
            if (w.len as usize) < 31 {
                w.bytes[w.len as usize] = b;
                w.len += 1;
            }
        }
        w
    }
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap()
    }
}

/// MAXLOC on (value, index) pairs, ties to the smaller index: commutative.
#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct ValIdx {
    val: f64,
    idx: i32,
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    const K: usize = 3;

    let mat_product = UserOperation::associative(|x: DynBuffer, y: DynBufferMut| {
        // inout = in (from lower ranks) * inout
        let x: &[Mat2] = x.downcast().expect("Mat2 data");
        let y: &mut [Mat2] = y.downcast().expect("Mat2 data");
        for (a, b) in x.iter().zip(y.iter_mut()) {
            *b = a.mul(b);
        }
    });
    let concat = UserOperation::associative(|x: DynBuffer, y: DynBufferMut| {
        assert!(x.is::<Word>() && y.is::<Word>());
        let x = x.downcast::<Word>().unwrap();
        let y = y.downcast::<Word>().unwrap();
        for (a, b) in x.iter().zip(y.iter_mut()) {
            *b = a.concat(b);
        }
    });
    let maxloc = UserOperation::commutative(|x: DynBuffer, y: DynBufferMut| {
        let x = x.downcast::<ValIdx>().unwrap();
        let y = y.downcast::<ValIdx>().unwrap();
        for (a, b) in x.iter().zip(y.iter_mut()) {
            if a.val > b.val || (a.val == b.val && a.idx < b.idx) {
                *b = *a;
            }
        }
    });
    let saturating = UserOperation::commutative(|x: DynBuffer, y: DynBufferMut| {
        if let (Some(x), Some(y)) = (x.downcast::<u16>(), y.downcast::<u16>()) {
            for (a, b) in x.iter().zip(y.iter_mut()) {
                *b = b.saturating_add(*a);
            }
        } else {
            panic!("saturating add called on something other than u16");
        }
    });

    let prod_upto =
        |last: i32, k: usize| (0..=last).fold(Mat2::ID, |acc, q| acc.mul(&Mat2::of(q, k)));
    let word_of = |q: i32| Word::new(&format!("r{q};"));
    let words_upto = |last: i32| (0..=last).fold(Word::new(""), |acc, q| acc.concat(&word_of(q)));

    // all_reduce: the ordered product of everyone's matrices, K at once
    let mine: Vec<Mat2> = (0..K).map(|k| Mat2::of(rank, k)).collect();
    let mut res = [Mat2::ID; K];
    world.all_reduce_into(&mine[..], &mut res[..], &mat_product);
    for (k, m) in res.iter().enumerate() {
        assert_eq!(*m, prod_upto(size - 1, k));
    }
    assert_ne!(
        prod_upto(1, 0),
        Mat2::of(1, 0).mul(&Mat2::of(0, 0)),
        "the test matrices must not commute"
    );

    // reduce to the last rank: ordered concatenation
    let root = world.process_at_rank(size - 1);
    if rank == size - 1 {
        let mut w = Word::new("");
        root.reduce_into_root(&word_of(rank), &mut w, &concat);
        assert_eq!(w.as_str(), words_upto(size - 1).as_str());
    } else {
        root.reduce_into(&word_of(rank), &concat);
    }

    // scan and exclusive scan: prefix products / prefixes of the string
    let mut pre = [Mat2::ID; K];
    world.scan_into(&mine[..], &mut pre[..], &mat_product);
    for (k, m) in pre.iter().enumerate() {
        assert_eq!(*m, prod_upto(rank, k));
    }
    let mut w = Word::new("?");
    world.exclusive_scan_into(&word_of(rank), &mut w, &concat);
    if rank > 0 {
        assert_eq!(w.as_str(), words_upto(rank - 1).as_str());
    }

    // commutative ones
    let mine = ValIdx {
        val: ((rank * 7) % 4) as f64,
        idx: rank,
    };
    let mut best = ValIdx { val: -1.0, idx: -1 };
    world.all_reduce_into(&mine, &mut best, &maxloc);
    let top = (0..size)
        .map(|q| ((q * 7) % 4) as f64)
        .fold(f64::MIN, f64::max);
    let first = (0..size).find(|&q| ((q * 7) % 4) as f64 == top).unwrap();
    assert_eq!((best.val, best.idx), (top, first));

    let mut total = [0u16; 2];
    world.all_reduce_into(&[40_000u16, rank as u16], &mut total, &saturating);
    assert_eq!(total, [u16::MAX, (0..size as u16).sum::<u16>()]);

    // the same operations locally
    let a = [Mat2::of(5, 0), Mat2::of(6, 1)];
    let mut b = [Mat2::of(7, 0), Mat2::ID];
    reduce_local_into(&a[..], &mut b[..], &mat_product);
    assert_eq!(b, [Mat2::of(5, 0).mul(&Mat2::of(7, 0)), Mat2::of(6, 1)]);
    let mut w = Word::new("world");
    reduce_local_into(&Word::new("hello "), &mut w, &concat);
    assert_eq!(w.as_str(), "hello world");

    // a user operation in an immediate collective
    let mine: Vec<Mat2> = (0..K).map(|k| Mat2::of(rank, k)).collect();
    let mut res = [Mat2::ID; K];
    request::scope(|sc| {
        let req = world.immediate_all_reduce_into(sc, &mine[..], &mut res[..], &mat_product);
        req.wait();
    });
    assert_eq!(res[K - 1], prod_upto(size - 1, K - 1));

    world.barrier();
    if rank == 0 {
        println!("user_ops ok");
    }
}

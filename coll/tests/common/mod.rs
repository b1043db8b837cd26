//! Helpers shared by the tests: data, the two reductions, and a runner that simulates
//! every schedule under several interleavings and checks the guarantees of the crate.
#![allow(dead_code)]

use rsmpi_coll::sim::{self, Options, SendCompletion};
use rsmpi_coll::{BufId, Schedule, Step};

/// Communicator sizes every collective is tested on.
pub const SIZES: [u32; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16];

/// Roots tried for a size: 0, 1, the middle and the last (deduplicated).
pub fn roots(n: u32) -> Vec<u32> {
    let mut r = vec![0, 1, n / 2, n - 1];
    r.retain(|&x| x < n);
    r.sort_unstable();
    r.dedup();
    r
}

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xdead_beef;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Commutative: u64 wrapping addition (8-byte elements).
pub const ADD_ELEM: usize = 8;

pub fn add(inv: &[u8], inout: &mut [u8]) {
    assert_eq!(inv.len(), inout.len());
    assert_eq!(
        inv.len() % ADD_ELEM,
        0,
        "reduction length not a multiple of the element"
    );
    for (i, o) in inv.chunks_exact(8).zip(inout.chunks_exact_mut(8)) {
        let v = u64::from_le_bytes(i.try_into().unwrap())
            .wrapping_add(u64::from_le_bytes(o.try_into().unwrap()));
        o.copy_from_slice(&v.to_le_bytes());
    }
}

/// Non-commutative: composition of affine maps x -> a*x + b modulo the prime 2^61 - 1
/// (16-byte elements: a, b). `inv op inout` = apply `inv` first, then `inout`.
pub const AFF_ELEM: usize = 16;
const P: u64 = (1 << 61) - 1;

fn mulmod(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) % P as u128) as u64
}

pub fn affine(inv: &[u8], inout: &mut [u8]) {
    assert_eq!(inv.len(), inout.len());
    assert_eq!(
        inv.len() % AFF_ELEM,
        0,
        "reduction length not a multiple of the element"
    );
    let rd = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap());
    for (l, r) in inv.chunks_exact(16).zip(inout.chunks_exact_mut(16)) {
        let (la, lb, ra, rb) = (rd(l, 0), rd(l, 8), rd(r, 0), rd(r, 8));
        let a = mulmod(ra, la);
        let b = (mulmod(ra, lb) + rb) % P;
        r[..8].copy_from_slice(&a.to_le_bytes());
        r[8..].copy_from_slice(&b.to_le_bytes());
    }
}

/// Valid affine-map elements (both words below the prime).
pub fn affine_input(seed: u64, len: usize) -> Vec<u8> {
    let raw = bytes(seed, len);
    let mut out = Vec::with_capacity(len);
    for c in raw.chunks_exact(8) {
        let v = u64::from_le_bytes(c.try_into().unwrap()) % P;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// The reductions under test: (name, element size, op, input generator).
pub type Op = fn(&[u8], &mut [u8]);
pub struct Red {
    pub name: &'static str,
    pub elem: usize,
    pub op: Op,
    pub commutative: bool,
    pub input: fn(u64, usize) -> Vec<u8>,
}

pub const REDS: [Red; 2] = [
    Red {
        name: "add",
        elem: ADD_ELEM,
        op: add,
        commutative: true,
        input: bytes,
    },
    Red {
        name: "affine",
        elem: AFF_ELEM,
        op: affine,
        commutative: false,
        input: affine_input,
    },
];

impl Red {
    /// Left fold in rank order of `xs`.
    pub fn fold<'a>(&self, xs: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
        let mut it = xs.into_iter();
        let mut acc = it.next().expect("nonempty").to_vec();
        for x in it {
            let mut next = x.to_vec();
            (self.op)(&acc, &mut next);
            acc = next;
        }
        acc
    }
}

fn no_op(_: &[u8], _: &mut [u8]) {
    panic!("a schedule without reductions reduced");
}

/// Checks the static guarantees of a schedule: ends quiet, no input writes (unless
/// allowed), reductions on element boundaries.
pub fn check_static(s: &Schedule, elem: Option<usize>, may_write_input: bool) {
    if !may_write_input {
        assert!(!s.writes_input(), "schedule writes bufs[0]: {s:?}");
    }
    assert!(s.bufs.len() <= u16::MAX as usize);
    for st in &s.steps {
        if let Step::Reduce {
            src_off,
            dst_off,
            len,
            ..
        } = *st
        {
            let e = elem.expect("reduction in a schedule without element size");
            assert_eq!(len % e, 0, "reduce length {len} not a multiple of {e}");
            assert_eq!(
                src_off % e,
                0,
                "reduce src offset {src_off} off element boundary"
            );
            assert_eq!(
                dst_off % e,
                0,
                "reduce dst offset {dst_off} off element boundary"
            );
        }
        if let Step::Send { len, .. } | Step::Recv { len, .. } = *st {
            let _ = len;
        }
    }
    if s.result.2 == 0 {
        assert_eq!(s.result, (BufId(0), 0, 0));
    }
}

/// Builds every rank's schedule with `make`, simulates it under several interleavings
/// (rendezvous sends, strict hazards) and once with buffered sends, checks that all runs
/// agree, and returns the per-rank results.
pub fn simulate(
    n: u32,
    make: impl Fn(u32) -> Schedule,
    inputs: &[Vec<u8>],
    op: Option<Op>,
    elem: Option<usize>,
    may_write_input: bool,
) -> Vec<Vec<u8>> {
    let scheds: Vec<Schedule> = (0..n).map(&make).collect();
    for s in &scheds {
        check_static(s, elem, may_write_input);
    }
    let op: &dyn Fn(&[u8], &mut [u8]) = match op {
        Some(f) => &move |a: &[u8], b: &mut [u8]| f(a, b),
        None => &no_op,
    };
    let seeds = [1u64, 2, 3 + n as u64 * 7919];
    let mut first: Option<Vec<Vec<u8>>> = None;
    for (i, &seed) in seeds.iter().enumerate() {
        let opts = Options {
            seed,
            sends: if i == 2 {
                SendCompletion::Buffered
            } else {
                SendCompletion::Rendezvous
            },
            strict: true,
        };
        let out = sim::run(&scheds, inputs, op, opts)
            .unwrap_or_else(|e| panic!("simulation failed (size {n}, seed {seed}): {e}"));
        match &first {
            None => first = Some(out),
            Some(f) => assert_eq!(f, &out, "results differ between interleavings"),
        }
    }
    first.unwrap()
}

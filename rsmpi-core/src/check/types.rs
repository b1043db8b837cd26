//! The type-signature check (`RSMPI_CHECK=errors`): a message's type signature (the
//! sequence of basic types it carries) must match the receive's, by MPI's rules.
//!
//! The send's signature travels in its note (`check/mod.rs`) as one element's
//! signature and a count; the receive's is recorded when it is posted. The message's
//! signature must equal the first part of the receive's: `struct(i32, f64)` × 2 sent
//! and `struct(i32, f64, i32, f64)` × 1 received match, `f64` × 4 sent and `i64` × 4
//! received do not. Signatures are compared run by run (`n` values of one basic type),
//! never expanded.
//!
//! Bytes match anything: a signature with `u8`, `i8` or `MPI_BYTE` in it is not
//! checked, as Rust programs send raw and packed data (`MPI_PACKED`) as bytes.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::datatype::{Prim, Run, UserDatatype, BYTE};

/// Set once at initialisation when the type check is on.
static WANTED: AtomicBool = AtomicBool::new(false);

/// Whether the type check is on (`RSMPI_CHECK=errors`): one load, so that the
/// watched calls skip building type signatures without a visit to the tools.
#[inline(always)]
pub(crate) fn wanted() -> bool {
    WANTED.load(Ordering::Relaxed)
}

/// Turns the type check on (`check::init`).
pub(crate) fn want() {
    WANTED.store(true, Ordering::Relaxed);
}

/// Runs compared per message at most (the rest of a longer message is not checked).
const STEPS: u64 = 1 << 20;

/// A type signature: `count` elements of signature `runs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TypeSig {
    pub runs: Vec<Run>,
    pub count: u64,
}

impl TypeSig {
    /// The signature of `count` elements of `dt`, if it is kept and checked.
    pub fn of(dt: &UserDatatype, count: usize) -> Option<TypeSig> {
        let runs = dt.signature()?;
        let bytes = [Prim::U8 as u8, Prim::I8 as u8, BYTE];
        if runs.iter().any(|r| bytes.contains(&r.0)) {
            return None;
        }
        Some(TypeSig {
            runs: runs.to_vec(),
            count: count as u64,
        })
    }

    /// The elements, as runs one after the other.
    fn iter(&self) -> impl Iterator<Item = Run> + '_ {
        (0..self.count).flat_map(|_| self.runs.iter().copied())
    }

    pub fn encode(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for &(c, n) in &self.runs {
            b.push(c);
            b.extend_from_slice(&n.to_le_bytes());
        }
    }

    /// Reads a signature [`encode`](Self::encode) wrote at `b[*o..]`.
    pub fn decode(b: &[u8], o: &mut usize) -> Option<TypeSig> {
        let at = *o;
        let count = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
        let len = u32::from_le_bytes(b.get(at + 8..at + 12)?.try_into().ok()?) as usize;
        let mut runs = Vec::with_capacity(len.min(1 << 12));
        let mut p = at + 12;
        for _ in 0..len {
            let c = *b.get(p)?;
            let n = u64::from_le_bytes(b.get(p + 1..p + 9)?.try_into().ok()?);
            runs.push((c, n));
            p += 9;
        }
        *o = p;
        Some(TypeSig { runs, count })
    }
}

/// Where a message with signature `sent` first differs from a receive with signature
/// `recv`: the index of the first basic value that does not match, and the two types
/// there. `None` when it matches (or the receive is shorter: a truncation, reported
/// as such).
pub(crate) fn mismatch(sent: &TypeSig, recv: &TypeSig) -> Option<(u64, u8, u8)> {
    if sent.runs == recv.runs || sent.count == 0 {
        return None;
    }
    let (mut a, mut b) = (sent.iter(), recv.iter());
    let (mut x, mut y) = (a.next()?, b.next()?);
    let mut at = 0;
    for _ in 0..STEPS {
        if x.0 != y.0 {
            return Some((at, x.0, y.0));
        }
        let m = x.1.min(y.1);
        at += m;
        x.1 -= m;
        y.1 -= m;
        if x.1 == 0 {
            x = a.next()?;
        }
        if y.1 == 0 {
            y = b.next()?;
        }
    }
    None
}

/// The name of a basic type in a signature.
pub(crate) fn type_name(code: u8) -> &'static str {
    const NAMES: [&str; 13] = [
        "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "u128", "i128", "f32", "f64", "bool",
    ];
    NAMES.get(code as usize).copied().unwrap_or("byte")
}

/// The size in bytes of a basic type in a signature.
pub(crate) fn type_size(code: u8) -> u64 {
    const SIZES: [u64; 13] = [1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 4, 8, 1];
    SIZES.get(code as usize).copied().unwrap_or(1)
}

/// The part of `s` from byte `off`, `len` bytes long, as a signature of its own
/// (`None` where a cut falls inside a value, or past [`STEPS`] runs).
pub(crate) fn slice(s: &TypeSig, off: u64, len: u64) -> Option<TypeSig> {
    if let [(c, n)] = s.runs[..] {
        // one basic type: arithmetic
        let z = type_size(c);
        let total = z * n * s.count;
        return (off.is_multiple_of(z) && len.is_multiple_of(z) && off + len <= total).then(|| {
            TypeSig {
                runs: vec![(c, 1)],
                count: len / z,
            }
        });
    }
    let (mut at, end) = (0u64, off + len);
    let mut runs: Vec<Run> = Vec::new();
    for (steps, (c, n)) in s.iter().enumerate() {
        if at >= end {
            break;
        }
        if steps as u64 >= STEPS {
            return None;
        }
        let z = type_size(c);
        let (from, to) = (at, at + z * n);
        at = to;
        if to <= off {
            continue;
        }
        let (a, b) = (from.max(off), to.min(end));
        if (a - from) % z != 0 || (b - from) % z != 0 {
            return None;
        }
        let k = (b - a) / z;
        match runs.last_mut() {
            Some(last) if last.0 == c => last.1 += k,
            _ => runs.push((c, k)),
        }
    }
    if at < end {
        return None;
    }
    Some(match runs[..] {
        // one basic type, shown as a count of it
        [(c, n)] => TypeSig {
            runs: vec![(c, 1)],
            count: n,
        },
        _ => TypeSig { runs, count: 1 },
    })
}

/// A signature as a report shows it, e.g. `2 × (i32, f64)` or `4 × f64`.
pub(crate) fn describe(s: &TypeSig) -> String {
    let mut o = String::new();
    let _ = write!(o, "{} × ", s.count);
    let one = |o: &mut String, &(c, n): &Run| {
        let _ = match n {
            1 => write!(o, "{}", type_name(c)),
            n => write!(o, "{n} {}", type_name(c)),
        };
    };
    match &s.runs[..] {
        [r] if r.1 == 1 => one(&mut o, r),
        runs => {
            o.push('(');
            for (i, r) in runs.iter().enumerate() {
                if i > 0 {
                    o.push_str(", ");
                }
                one(&mut o, r);
            }
            o.push(')');
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{Equivalence, UserDatatype};

    fn sig<T: Equivalence>(count: usize) -> TypeSig {
        TypeSig::of(&UserDatatype::of::<T>(), count).expect("checked")
    }

    #[test]
    fn mpi_rules() {
        // struct(int, double) × 2 against struct(int, double, int, double) × 1: legal
        assert_eq!(
            mismatch(&sig::<(i32, f64)>(2), &sig::<(i32, f64, i32, f64)>(1)),
            None
        );
        // and against a longer receive
        assert_eq!(mismatch(&sig::<(i32, f64)>(2), &sig::<(i32, f64)>(5)), None);
        let pair = UserDatatype::contiguous(2, &UserDatatype::of::<f64>());
        assert_eq!(
            mismatch(&sig::<f64>(4), &TypeSig::of(&pair, 2).unwrap()),
            None
        );
        // f64 sent, i64 received: the first value differs
        let (i64_, f64_) = (Prim::I64 as u8, Prim::F64 as u8);
        assert_eq!(
            mismatch(&sig::<f64>(4), &sig::<i64>(4)),
            Some((0, f64_, i64_))
        );
        // (i32, f64) × 2 against (i32, f64, f64, i32): the third value
        let i32_ = Prim::I32 as u8;
        assert_eq!(
            mismatch(&sig::<(i32, f64)>(2), &sig::<(i32, f64, f64, i32)>(1)),
            Some((2, i32_, f64_))
        );
        // bytes match anything: not checked
        assert!(TypeSig::of(&UserDatatype::of::<u8>(), 8).is_none());
        assert!(TypeSig::of(&UserDatatype::bytes(8), 1).is_none());
    }

    #[test]
    fn slices_by_bytes() {
        let f = sig::<f64>(6);
        assert_eq!(describe(&slice(&f, 16, 24).unwrap()), "3 × f64");
        assert_eq!(slice(&f, 4, 8), None);
        assert_eq!(slice(&f, 40, 16), None);
        // (i32, f64) × 3: the second element is bytes 12..24
        let s = sig::<(i32, f64)>(3);
        assert_eq!(describe(&slice(&s, 12, 12).unwrap()), "1 × (i32, f64)");
        assert_eq!(describe(&slice(&s, 4, 12).unwrap()), "1 × (f64, i32)");
        assert_eq!(slice(&s, 6, 12), None);
        assert_eq!(slice(&s, 24, 24), None);
    }

    #[test]
    fn encodes_and_describes() {
        let three = UserDatatype::contiguous(3, &UserDatatype::of::<f64>());
        let st = UserDatatype::structure(&[(0, &UserDatatype::of::<i32>()), (8, &three)], 32);
        let s = TypeSig::of(&st, 2).unwrap();
        let mut b = Vec::new();
        s.encode(&mut b);
        let mut o = 0;
        assert_eq!(TypeSig::decode(&b, &mut o), Some(s.clone()));
        assert_eq!(o, b.len());
        assert_eq!(describe(&s), "2 × (i32, 3 f64)");
        assert_eq!(describe(&sig::<f64>(4)), "4 × f64");
    }
}

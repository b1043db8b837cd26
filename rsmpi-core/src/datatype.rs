//! Which Rust values can travel in a message, and how they are laid out
//! (`mpi::datatype`): [`Equivalence`] for element types, [`Buffer`] / [`BufferMut`]
//! for what is sent and received, [`UserDatatype`] for MPI derived datatypes, and
//! [`View`] / [`MutView`] / [`Partition`] / [`PartitionMut`] to lay a datatype or
//! per-rank counts over a buffer.
//!
//! ```
//! use rsmpi::traits::*;
//! use rsmpi::datatype::UserDatatype;
//!
//! #[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
//! struct Particle { id: u32, pos: [f64; 3], charged: bool }   // padding is fine
//!
//! // every other f64 of a row of 8: a vector of 4 blocks of 1, stride 2
//! let col = UserDatatype::vector(4, 1, 2, &f64::equivalent_datatype());
//! assert_eq!((col.size(), col.extent()), (32, 7 * 8));
//! assert_eq!(Particle::equivalent_datatype().size(), 4 + 24 + 1);
//! ```
use std::borrow::Cow;

/// A count of elements (`int` in MPI's C binding).
pub type Count = i32;
/// A byte displacement (`MPI_Aint`).
pub type Address = i64;

/// `use rsmpi::datatype::traits::*`.
pub mod traits {
    pub use super::{
        AsDatatype, Buffer, BufferMut, Collection, Datatype, Equivalence, Partitioned,
        PartitionedBuffer, PartitionedBufferMut, UncommittedDatatype,
    };
}

/// The basic element type a datatype is made of, when it is made of one only: what
/// the predefined reduction operations need to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[doc(hidden)]
pub enum Prim {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    U128,
    I128,
    F32,
    F64,
    Bool,
}

impl Prim {
    /// Size in bytes of one value.
    pub fn size(self) -> usize {
        match self {
            Prim::U8 | Prim::I8 | Prim::Bool => 1,
            Prim::U16 | Prim::I16 => 2,
            Prim::U32 | Prim::I32 | Prim::F32 => 4,
            Prim::U64 | Prim::I64 | Prim::F64 => 8,
            Prim::U128 | Prim::I128 => 16,
        }
    }
}

/// An MPI derived datatype (`MPI_Type_*`): which bytes of a buffer, relative to the
/// start of one element, make up that element, and the element's extent (the stride
/// from one element to the next). Datatypes are values: they need no commit and no
/// free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDatatype {
    /// (byte offset, length) in type-map order; adjacent blocks are merged. Borrowed
    /// for the basic types, so that their datatypes cost no allocation.
    blocks: Cow<'static, [(i64, u64)]>,
    lb: i64,
    ub: i64,
    /// The one basic type of the type signature, if there is one.
    prim: Option<Prim>,
    /// The type signature, run-length encoded (`None` past [`SIG_RUNS`] runs): what
    /// the type-signature check (`RSMPI_CHECK=errors`) compares.
    sig: Option<Cow<'static, [Run]>>,
}

/// A run of a type signature: `n` values of one basic type (a [`Prim`] as `u8`, or
/// [`BYTE`]).
pub(crate) type Run = (u8, u64);

/// `MPI_BYTE` in a type signature.
pub(crate) const BYTE: u8 = u8::MAX;

/// Type signatures of more runs than this are not kept (the check skips them).
const SIG_RUNS: usize = 1 << 12;

/// The signature of one value of each basic type, by `Prim as usize`.
const PRIM_SIGS: [[Run; 1]; 13] = {
    let mut t = [[(0, 1)]; 13];
    let mut i = 0;
    while i < 13 {
        t[i] = [(i as u8, 1)];
        i += 1;
    }
    t
};

/// Appends `n` values of `code` to a signature.
fn push_run(sig: &mut Vec<Run>, code: u8, n: u64) {
    match sig.last_mut() {
        Some(last) if last.0 == code => last.1 += n,
        _ if n > 0 => sig.push((code, n)),
        _ => {}
    }
}

/// MPI-1 has a separate "uncommitted" state; rsmpi's datatypes are usable at once, so
/// this is the same type ([`UserDatatype::commit`] returns it unchanged).
pub type UncommittedUserDatatype = UserDatatype;

/// A borrowed or predefined datatype (`mpi::datatype::DatatypeRef`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatatypeRef<'a>(Cow<'a, UserDatatype>);

/// The datatype of a basic Rust type (`MPI_DOUBLE`, `MPI_INT`, …).
pub type SystemDatatype = DatatypeRef<'static>;
/// Same as [`DatatypeRef`] (MPI's uncommitted datatypes are committed ones here).
pub type UncommittedDatatypeRef<'a> = DatatypeRef<'a>;

impl<'a> From<&'a UserDatatype> for DatatypeRef<'a> {
    fn from(d: &'a UserDatatype) -> Self {
        DatatypeRef(Cow::Borrowed(d))
    }
}

impl From<UserDatatype> for DatatypeRef<'static> {
    fn from(d: UserDatatype) -> Self {
        DatatypeRef(Cow::Owned(d))
    }
}

impl<'a> From<&'a DatatypeRef<'_>> for DatatypeRef<'a> {
    fn from(d: &'a DatatypeRef<'_>) -> Self {
        DatatypeRef(Cow::Borrowed(d.0.as_ref()))
    }
}

impl std::ops::Deref for DatatypeRef<'_> {
    type Target = UserDatatype;
    fn deref(&self) -> &UserDatatype {
        &self.0
    }
}

/// Something that describes a datatype: [`UserDatatype`], [`DatatypeRef`], or a
/// reference to one.
pub trait Datatype {
    /// The type map.
    #[doc(hidden)]
    fn type_map(&self) -> &UserDatatype;
}

/// `mpi::datatype::UncommittedDatatype`: every [`Datatype`] here.
pub trait UncommittedDatatype: Datatype {
    /// A copy (`MPI_Type_dup`).
    fn dup(&self) -> UserDatatype {
        self.type_map().clone()
    }
}
impl<D: Datatype + ?Sized> UncommittedDatatype for D {}

impl Datatype for UserDatatype {
    fn type_map(&self) -> &UserDatatype {
        self
    }
}
impl Datatype for DatatypeRef<'_> {
    fn type_map(&self) -> &UserDatatype {
        &self.0
    }
}
impl<D: Datatype + ?Sized> Datatype for &D {
    fn type_map(&self) -> &UserDatatype {
        (**self).type_map()
    }
}

/// Errors of datatype construction and use (`MPI_ERR_TYPE`).
fn type_err(what: String) -> crate::Error {
    crate::Error::Type(what)
}

fn count(c: Count, what: &str) -> usize {
    usize::try_from(c).unwrap_or_else(|_| panic!("rsmpi: negative {what} {c}"))
}

impl UserDatatype {
    /// The datatype of one `T`.
    pub fn of<T: Equivalence>() -> UserDatatype {
        T::equivalent_datatype().type_map().clone()
    }

    /// `n` contiguous bytes (`MPI_BYTE` × n).
    pub fn bytes(n: usize) -> UserDatatype {
        Self::prim_n(n, None)
    }

    fn prim_n(n: usize, prim: Option<Prim>) -> UserDatatype {
        const ONE: [[(i64, u64); 1]; 5] = [[(0, 1)], [(0, 2)], [(0, 4)], [(0, 8)], [(0, 16)]];
        let blocks = match n {
            0 => Cow::Borrowed(&[][..]),
            1 => Cow::Borrowed(&ONE[0][..]),
            2 => Cow::Borrowed(&ONE[1][..]),
            4 => Cow::Borrowed(&ONE[2][..]),
            8 => Cow::Borrowed(&ONE[3][..]),
            16 => Cow::Borrowed(&ONE[4][..]),
            _ => Cow::Owned(vec![(0, n as u64)]),
        };
        let sig = match (prim, n) {
            (Some(p), _) => Cow::Borrowed(&PRIM_SIGS[p as usize][..]),
            (None, 0) => Cow::Borrowed(&[][..]),
            (None, n) => Cow::Owned(vec![(BYTE, n as u64)]),
        };
        UserDatatype {
            blocks,
            lb: 0,
            ub: n as i64,
            prim,
            sig: Some(sig),
        }
    }

    /// The type signature, run-length encoded, unless it is too long to keep.
    pub(crate) fn signature(&self) -> Option<&[Run]> {
        self.sig.as_deref()
    }

    #[doc(hidden)]
    pub fn basic(p: Prim) -> UserDatatype {
        Self::prim_n(p.size(), Some(p))
    }

    /// Total bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> u64 {
        self.blocks.iter().map(|b| b.1).sum()
    }

    /// Distance between consecutive elements in bytes (`MPI_Type_get_extent`).
    pub fn extent(&self) -> i64 {
        self.ub - self.lb
    }

    /// Lower bound in bytes.
    pub fn lower_bound(&self) -> i64 {
        self.lb
    }

    /// The one basic type this datatype is made of, if any.
    #[doc(hidden)]
    pub fn prim(&self) -> Option<Prim> {
        self.prim
    }

    /// MPI-1 datatypes must be committed before use; rsmpi's need not be. Returns
    /// `self`.
    pub fn commit(self) -> UserDatatype {
        self
    }

    /// A [`DatatypeRef`] to this datatype.
    pub fn as_ref(&self) -> DatatypeRef<'_> {
        DatatypeRef(Cow::Borrowed(self))
    }

    fn push(blocks: &mut Vec<(i64, u64)>, off: i64, len: u64) {
        if len == 0 {
            return;
        }
        if let Some(last) = blocks.last_mut() {
            if last.0 + last.1 as i64 == off {
                last.1 += len;
                return;
            }
        }
        blocks.push((off, len));
    }

    /// Concatenation of typed pieces: `(byte displacement, count, type)`.
    fn build<'t>(pieces: impl IntoIterator<Item = (i64, usize, &'t UserDatatype)>) -> UserDatatype {
        let mut blocks = Vec::new();
        let (mut lb, mut ub) = (i64::MAX, i64::MIN);
        // the basic type: the same in every non-empty piece, or none
        let mut prim: Option<Option<Prim>> = None;
        let mut sig = Some(Vec::new());
        for (disp, count, t) in pieces {
            if count > 0 && t.size() > 0 {
                prim = match prim {
                    None => Some(t.prim),
                    Some(p) if p == t.prim => Some(p),
                    Some(_) => Some(None),
                };
            }
            for j in 0..count as i64 {
                let base = disp + j * t.extent();
                for &(o, l) in t.blocks.iter() {
                    Self::push(&mut blocks, base + o, l);
                }
                lb = lb.min(base + t.lb);
                ub = ub.max(base + t.ub);
                sig = match (sig, &t.sig) {
                    (Some(mut s), Some(ts)) => {
                        for &(c, n) in ts.iter() {
                            push_run(&mut s, c, n);
                        }
                        (s.len() <= SIG_RUNS).then_some(s)
                    }
                    _ => None,
                };
            }
        }
        if lb > ub {
            (lb, ub) = (0, 0);
        }
        UserDatatype {
            blocks: Cow::Owned(blocks),
            lb,
            ub,
            prim: prim.flatten(),
            sig: sig.map(Cow::Owned),
        }
    }

    /// `count` copies of `oldtype` back to back (`MPI_Type_contiguous`).
    pub fn contiguous<D: UncommittedDatatype + ?Sized>(count: Count, oldtype: &D) -> UserDatatype {
        Self::build([(0, self::count(count, "count"), oldtype.type_map())])
    }

    /// `count` blocks of `blocklength` elements, `stride` elements apart
    /// (`MPI_Type_vector`).
    pub fn vector<D: UncommittedDatatype + ?Sized>(
        count: Count,
        blocklength: Count,
        stride: Count,
        oldtype: &D,
    ) -> UserDatatype {
        let stride = stride as i64 * oldtype.type_map().extent();
        Self::heterogeneous_vector(count, blocklength, stride, oldtype)
    }

    /// `count` blocks of `blocklength` elements, `stride` bytes apart
    /// (`MPI_Type_create_hvector`).
    pub fn heterogeneous_vector<D: UncommittedDatatype + ?Sized>(
        count: Count,
        blocklength: Count,
        stride: Address,
        oldtype: &D,
    ) -> UserDatatype {
        let n = self::count(blocklength, "block length");
        let t = oldtype.type_map();
        Self::build((0..self::count(count, "count") as i64).map(|i| (i * stride, n, t)))
    }

    /// Blocks of `blocklengths[i]` elements at `displacements[i]` elements
    /// (`MPI_Type_indexed`).
    pub fn indexed<D: UncommittedDatatype + ?Sized>(
        blocklengths: &[Count],
        displacements: &[Count],
        oldtype: &D,
    ) -> UserDatatype {
        let ext = oldtype.type_map().extent();
        let d: Vec<Address> = displacements.iter().map(|&d| d as i64 * ext).collect();
        Self::heterogeneous_indexed(blocklengths, &d, oldtype)
    }

    /// Blocks of `blocklengths[i]` elements at `displacements[i]` bytes
    /// (`MPI_Type_create_hindexed`).
    pub fn heterogeneous_indexed<D: UncommittedDatatype + ?Sized>(
        blocklengths: &[Count],
        displacements: &[Address],
        oldtype: &D,
    ) -> UserDatatype {
        assert_eq!(
            blocklengths.len(),
            displacements.len(),
            "rsmpi: one displacement per block"
        );
        let t = oldtype.type_map();
        Self::build(
            displacements
                .iter()
                .zip(blocklengths)
                .map(|(&d, &n)| (d, self::count(n, "block length"), t)),
        )
    }

    /// Blocks of `blocklength` elements at `displacements[i]` elements
    /// (`MPI_Type_create_indexed_block`).
    pub fn indexed_block<D: UncommittedDatatype + ?Sized>(
        blocklength: Count,
        displacements: &[Count],
        oldtype: &D,
    ) -> UserDatatype {
        let b = vec![blocklength; displacements.len()];
        Self::indexed(&b, displacements, oldtype)
    }

    /// Blocks of `blocklength` elements at `displacements[i]` bytes
    /// (`MPI_Type_create_hindexed_block`).
    pub fn heterogeneous_indexed_block<D: UncommittedDatatype + ?Sized>(
        blocklength: Count,
        displacements: &[Address],
        oldtype: &D,
    ) -> UserDatatype {
        let b = vec![blocklength; displacements.len()];
        Self::heterogeneous_indexed(&b, displacements, oldtype)
    }

    /// Blocks of `blocklengths[i]` elements of `types[i]` at `displacements[i]` bytes
    /// (`MPI_Type_create_struct`).
    pub fn structured<D: UncommittedDatatype>(
        blocklengths: &[Count],
        displacements: &[Address],
        types: &[D],
    ) -> UserDatatype {
        assert!(
            blocklengths.len() == displacements.len() && types.len() == blocklengths.len(),
            "rsmpi: one displacement and one type per block"
        );
        Self::build(
            displacements
                .iter()
                .zip(blocklengths)
                .zip(types)
                .map(|((&d, &n), t)| (d, self::count(n, "block length"), t.type_map())),
        )
    }

    /// A struct type whose extent is `size` bytes (what `#[derive(Equivalence)]`
    /// builds: each field at its offset, padding skipped).
    #[doc(hidden)]
    pub fn structure(fields: &[(usize, &UserDatatype)], size: usize) -> UserDatatype {
        let mut t = Self::build(fields.iter().map(|&(o, t)| (o as i64, 1, t)));
        t.lb = 0;
        t.ub = size as i64;
        t
    }

    /// Whether `count` elements are one contiguous run starting at byte 0.
    pub(crate) fn is_contiguous(&self, count: usize) -> bool {
        count == 0
            || (self.blocks.len() <= 1
                && self.lb == 0
                && self.blocks.first().is_none_or(|b| b.0 == 0)
                && self.extent() as u64 == self.size())
    }

    fn check(&self, count: usize, len: usize) -> crate::Result<()> {
        if count == 0 || self.blocks.is_empty() {
            return Ok(());
        }
        let first = self.blocks.iter().map(|b| b.0).min().unwrap();
        let last = self.blocks.iter().map(|b| b.0 + b.1 as i64).max().unwrap();
        let end = last + (count as i64 - 1) * self.extent().max(0);
        let start = first + (count as i64 - 1) * self.extent().min(0);
        if start < 0 || end > len as i64 {
            return Err(type_err(format!(
                "{count} elements of this datatype span bytes {start}..{end}, outside the {len}-byte buffer"
            )));
        }
        Ok(())
    }

    /// Gathers `count` elements of `buf` into a contiguous vector.
    pub(crate) fn pack(&self, count: usize, buf: &[u8]) -> crate::Result<Vec<u8>> {
        self.check(count, buf.len())?;
        let mut out = Vec::with_capacity(self.size() as usize * count);
        for j in 0..count as i64 {
            let base = j * self.extent();
            for &(o, l) in self.blocks.iter() {
                let s = (base + o) as usize;
                out.extend_from_slice(&buf[s..s + l as usize]);
            }
        }
        Ok(out)
    }

    /// Scatters contiguous `data` (possibly shorter than `count` elements, after a
    /// short message) into `count` elements of `buf`; bytes beyond `data` are left.
    pub(crate) fn unpack(&self, count: usize, data: &[u8], buf: &mut [u8]) -> crate::Result<()> {
        self.check(count, buf.len())?;
        let mut src = data;
        for j in 0..count as i64 {
            let base = j * self.extent();
            for &(o, l) in self.blocks.iter() {
                if src.is_empty() {
                    return Ok(());
                }
                let n = (l as usize).min(src.len());
                let d = (base + o) as usize;
                buf[d..d + n].copy_from_slice(&src[..n]);
                src = &src[n..];
            }
        }
        Ok(())
    }
}

/// A type whose values can be sent (`mpi::datatype::Equivalence`): the basic numbers,
/// `bool`, tuples of `Equivalence` types, and structs with `#[derive(Equivalence)]`
/// (whose fields are `Equivalence` types or arrays of them, nested to any depth;
/// padding is skipped). As in the `mpi` crate, an array `[T; N]` is not itself an
/// element type: as a buffer it is `N` elements of `T`.
///
/// The hidden methods are the derive's business: implement this trait by deriving it.
pub trait Equivalence: Sized {
    /// The type of [`Self::equivalent_datatype`].
    type Out: Datatype;
    /// The datatype of one value.
    fn equivalent_datatype() -> Self::Out;

    /// A value to receive into (all zero).
    #[doc(hidden)]
    fn rsmpi_zero() -> Self;
    /// Bytes of one value's type signature (on the message path: no allocation for
    /// the basic types).
    #[doc(hidden)]
    fn rsmpi_sig_size() -> usize {
        Self::equivalent_datatype().type_map().size() as usize
    }
    /// The values' bytes, when they are exactly their type signature (no padding).
    #[doc(hidden)]
    fn rsmpi_bytes(_s: &[Self]) -> Option<&[u8]> {
        None
    }
    /// The values' bytes for writing, when every byte pattern is a valid value.
    #[doc(hidden)]
    fn rsmpi_bytes_mut(_s: &mut [Self]) -> Option<&mut [u8]> {
        None
    }
    /// Appends the type signature's bytes of `s`.
    #[doc(hidden)]
    fn rsmpi_pack(s: &[Self], out: &mut Vec<u8>);
    /// Reads `s` from packed bytes; returns the bytes used. Stops early (leaving the
    /// rest) when `b` is short.
    #[doc(hidden)]
    fn rsmpi_unpack(s: &mut [Self], b: &[u8]) -> usize;
    /// The values seen in packed bytes, when the bytes can be borrowed as values.
    #[doc(hidden)]
    fn rsmpi_from_bytes(_b: &[u8]) -> Option<&[Self]> {
        None
    }
    /// Likewise, for writing.
    #[doc(hidden)]
    fn rsmpi_from_bytes_mut(_b: &mut [u8]) -> Option<&mut [Self]> {
        None
    }
}

macro_rules! equivalence {
    ($($t:ty => $p:ident),*) => { $(
        impl Equivalence for $t {
            type Out = SystemDatatype;
            fn equivalent_datatype() -> SystemDatatype {
                DatatypeRef(Cow::Owned(UserDatatype::basic(Prim::$p)))
            }
            fn rsmpi_zero() -> Self {
                0 as $t
            }
            fn rsmpi_sig_size() -> usize {
                std::mem::size_of::<$t>()
            }
            fn rsmpi_bytes(s: &[Self]) -> Option<&[u8]> {
                Some(bytemuck::cast_slice(s))
            }
            fn rsmpi_bytes_mut(s: &mut [Self]) -> Option<&mut [u8]> {
                Some(bytemuck::cast_slice_mut(s))
            }
            fn rsmpi_pack(s: &[Self], out: &mut Vec<u8>) {
                out.extend_from_slice(bytemuck::cast_slice(s));
            }
            fn rsmpi_unpack(s: &mut [Self], b: &[u8]) -> usize {
                let n = b.len().min(std::mem::size_of_val(s));
                bytemuck::cast_slice_mut::<Self, u8>(s)[..n].copy_from_slice(&b[..n]);
                n
            }
            fn rsmpi_from_bytes(b: &[u8]) -> Option<&[Self]> {
                bytemuck::try_cast_slice(b).ok()
            }
            fn rsmpi_from_bytes_mut(b: &mut [u8]) -> Option<&mut [Self]> {
                bytemuck::try_cast_slice_mut(b).ok()
            }
        }
    )* };
}
equivalence!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, u128 => U128, i128 => I128, f32 => F32, f64 => F64);
#[cfg(target_pointer_width = "64")]
equivalence!(usize => U64, isize => I64);
#[cfg(target_pointer_width = "32")]
equivalence!(usize => U32, isize => I32);

impl Equivalence for bool {
    type Out = SystemDatatype;
    fn equivalent_datatype() -> SystemDatatype {
        DatatypeRef(Cow::Owned(UserDatatype::basic(Prim::Bool)))
    }
    fn rsmpi_zero() -> Self {
        false
    }
    fn rsmpi_sig_size() -> usize {
        1
    }
    fn rsmpi_bytes(s: &[Self]) -> Option<&[u8]> {
        Some(bytemuck::cast_slice(s))
    }
    fn rsmpi_pack(s: &[Self], out: &mut Vec<u8>) {
        out.extend_from_slice(bytemuck::cast_slice(s));
    }
    fn rsmpi_unpack(s: &mut [Self], b: &[u8]) -> usize {
        let n = b.len().min(s.len());
        for (v, &x) in s.iter_mut().zip(&b[..n]) {
            *v = x != 0;
        }
        n
    }
    fn rsmpi_from_bytes(b: &[u8]) -> Option<&[Self]> {
        bytemuck::checked::try_cast_slice(b).ok()
    }
}

macro_rules! equivalence_tuple {
    ($(($($t:ident $i:tt),*))*) => { $(
        impl<$($t: Equivalence),*> Equivalence for ($($t,)*) {
            type Out = UserDatatype;
            fn equivalent_datatype() -> UserDatatype {
                UserDatatype::structure(
                    &[$((std::mem::offset_of!(Self, $i), $t::equivalent_datatype().type_map())),*],
                    std::mem::size_of::<Self>(),
                )
            }
            fn rsmpi_zero() -> Self {
                ($($t::rsmpi_zero(),)*)
            }
            fn rsmpi_pack(s: &[Self], out: &mut Vec<u8>) {
                for e in s {
                    $($t::rsmpi_pack(std::slice::from_ref(&e.$i), out);)*
                }
            }
            fn rsmpi_unpack(s: &mut [Self], b: &[u8]) -> usize {
                let mut at = 0;
                for e in s {
                    $(at += $t::rsmpi_unpack(std::slice::from_mut(&mut e.$i), &b[at..]);)*
                }
                at
            }
        }
    )* };
}
equivalence_tuple! {
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
}

/// Byte size of one value's type signature.
fn sig_size<T: Equivalence>() -> usize {
    T::rsmpi_sig_size()
}

/// `mpi::datatype::Collection`: how many elements a buffer holds.
pub trait Collection {
    /// The number of elements.
    fn count(&self) -> Count;
}

/// `mpi::datatype::AsDatatype`: the datatype of a buffer's elements.
pub trait AsDatatype {
    /// The datatype type.
    type Out: Datatype;
    /// The datatype of one element.
    fn as_datatype(&self) -> Self::Out;
}

/// Something that can be sent (`mpi::datatype::Buffer`): a value, a slice, a vector or
/// an array of [`Equivalence`] values, or a [`View`].
pub trait Buffer {
    /// The bytes of the type signature (packed where the memory has gaps).
    #[doc(hidden)]
    fn rsmpi_send(&self) -> crate::Result<Cow<'_, [u8]>>;
    /// The datatype of one element.
    #[doc(hidden)]
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype>;
    /// Number of elements.
    #[doc(hidden)]
    fn rsmpi_count(&self) -> usize;
}

/// Something that can be received into (`mpi::datatype::BufferMut`).
pub trait BufferMut {
    /// Where a message can land as it is (contiguous, no padding), if it can.
    #[doc(hidden)]
    fn rsmpi_direct(&mut self) -> Option<&mut [u8]>;
    /// Unpacks received type-signature bytes (possibly fewer than capacity).
    #[doc(hidden)]
    fn rsmpi_unpack(&mut self, data: &[u8]) -> crate::Result<()>;
    /// The datatype of one element.
    #[doc(hidden)]
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype>;
    /// Number of elements.
    #[doc(hidden)]
    fn rsmpi_count(&self) -> usize;
    /// The buffer's current contents, packed (what a broadcast root sends).
    #[doc(hidden)]
    fn rsmpi_read(&mut self) -> crate::Result<Vec<u8>>;
    /// Bytes of one element, for the check that a message is a whole number of
    /// elements (0: no check).
    #[doc(hidden)]
    fn rsmpi_elem_check(&self) -> usize {
        self.rsmpi_datatype().size() as usize
    }
    /// Bytes of the type signature the buffer holds.
    #[doc(hidden)]
    fn rsmpi_capacity(&self) -> usize {
        self.rsmpi_datatype().size() as usize * self.rsmpi_count()
    }
}

#[inline(always)]
fn packed<T: Equivalence>(s: &[T]) -> Cow<'_, [u8]> {
    match T::rsmpi_bytes(s) {
        Some(b) => Cow::Borrowed(b),
        None => {
            let mut v = Vec::with_capacity(sig_size::<T>() * s.len());
            T::rsmpi_pack(s, &mut v);
            Cow::Owned(v)
        }
    }
}

fn unpack_into<T: Equivalence>(s: &mut [T], data: &[u8]) -> crate::Result<()> {
    T::rsmpi_unpack(s, data);
    Ok(())
}

macro_rules! buffers {
    ($([$($g:tt)*] $t:ty => $s:ident, $sm:ident;)*) => { $(
        impl<$($g)*> Buffer for $t {
            // inlined: the fast path of every send from a slice starts here
            #[inline(always)]
            fn rsmpi_send(&self) -> crate::Result<Cow<'_, [u8]>> {
                Ok(packed($s(self)))
            }
            fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype> {
                Cow::Owned(UserDatatype::of::<T>())
            }
            fn rsmpi_count(&self) -> usize {
                $s(self).len()
            }
        }
        impl<$($g)*> BufferMut for $t {
            fn rsmpi_direct(&mut self) -> Option<&mut [u8]> {
                T::rsmpi_bytes_mut($sm(self))
            }
            fn rsmpi_unpack(&mut self, data: &[u8]) -> crate::Result<()> {
                unpack_into($sm(self), data)
            }
            fn rsmpi_read(&mut self) -> crate::Result<Vec<u8>> {
                Ok(packed($s(self)).into_owned())
            }
            fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype> {
                Cow::Owned(UserDatatype::of::<T>())
            }
            fn rsmpi_count(&self) -> usize {
                $s(self).len()
            }
            fn rsmpi_elem_check(&self) -> usize {
                T::rsmpi_sig_size()
            }
            fn rsmpi_capacity(&self) -> usize {
                T::rsmpi_sig_size() * $s(self).len()
            }
        }
        impl<$($g)*> Collection for $t {
            fn count(&self) -> Count {
                $s(self).len() as Count
            }
        }
        impl<$($g)*> AsDatatype for $t {
            type Out = <T as Equivalence>::Out;
            fn as_datatype(&self) -> Self::Out {
                T::equivalent_datatype()
            }
        }
    )* };
}

fn one<T>(x: &T) -> &[T] {
    std::slice::from_ref(x)
}
fn one_mut<T>(x: &mut T) -> &mut [T] {
    std::slice::from_mut(x)
}
fn all<T>(x: &[T]) -> &[T] {
    x
}
fn all_mut<T>(x: &mut [T]) -> &mut [T] {
    x
}

buffers! {
    [T: Equivalence] T => one, one_mut;
    [T: Equivalence] [T] => all, all_mut;
    [T: Equivalence] Vec<T> => all, all_mut;
    [T: Equivalence, const N: usize] [T; N] => all, all_mut;
}

/// A buffer seen through a datatype, for sending (`MPI_Send(buf, count, datatype)`).
pub struct View<'d, 'b, D: Datatype, B: ?Sized> {
    buffer: &'b B,
    count: usize,
    datatype: &'d D,
}

impl<'d, 'b, D: Datatype, B: Buffer + ?Sized> View<'d, 'b, D, B> {
    /// `count` elements of `datatype` laid over `buffer`.
    ///
    /// # Safety
    /// None in rsmpi: the datatype is checked against the buffer's bounds when the
    /// view is used (an `MPI_ERR_TYPE` error, nothing read out of bounds). The function
    /// is `unsafe` only because it is in the `mpi` crate, so that code written for it
    /// compiles unchanged; [`View::new`] is the same without `unsafe`.
    #[allow(unsafe_code)]
    pub unsafe fn with_count_and_datatype(buffer: &'b B, count: Count, datatype: &'d D) -> Self {
        Self::new(buffer, count, datatype)
    }

    /// `count` elements of `datatype` laid over `buffer`.
    pub fn new(buffer: &'b B, count: Count, datatype: &'d D) -> Self {
        View {
            buffer,
            count: self::count(count, "count"),
            datatype,
        }
    }
}

/// A buffer seen through a datatype, for receiving.
pub struct MutView<'d, 'b, D: Datatype, B: ?Sized> {
    buffer: &'b mut B,
    count: usize,
    datatype: &'d D,
}

impl<'d, 'b, D: Datatype, B: BufferMut + ?Sized> MutView<'d, 'b, D, B> {
    /// `count` elements of `datatype` laid over `buffer`.
    ///
    /// # Safety
    /// None in rsmpi (see [`View::with_count_and_datatype`]); [`MutView::new`] is the
    /// same without `unsafe`.
    #[allow(unsafe_code)]
    pub unsafe fn with_count_and_datatype(
        buffer: &'b mut B,
        count: Count,
        datatype: &'d D,
    ) -> Self {
        Self::new(buffer, count, datatype)
    }

    /// `count` elements of `datatype` laid over `buffer`.
    pub fn new(buffer: &'b mut B, count: Count, datatype: &'d D) -> Self {
        MutView {
            buffer,
            count: self::count(count, "count"),
            datatype,
        }
    }
}

fn view_bytes<B: Buffer + ?Sized>(b: &B) -> crate::Result<Cow<'_, [u8]>> {
    // a view addresses the buffer's memory, which must then be exactly its bytes
    b.rsmpi_send()
}

impl<D: Datatype, B: Buffer + ?Sized> Buffer for View<'_, '_, D, B> {
    fn rsmpi_send(&self) -> crate::Result<Cow<'_, [u8]>> {
        let t = self.datatype.type_map();
        let bytes = view_bytes(self.buffer)?;
        if t.is_contiguous(self.count) {
            let len = t.size() as usize * self.count;
            if len > bytes.len() {
                return Err(type_err(format!(
                    "{} elements need {len} bytes; the buffer has {}",
                    self.count,
                    bytes.len()
                )));
            }
            return Ok(match bytes {
                Cow::Borrowed(b) => Cow::Borrowed(&b[..len]),
                Cow::Owned(mut v) => {
                    v.truncate(len);
                    Cow::Owned(v)
                }
            });
        }
        t.pack(self.count, &bytes).map(Cow::Owned)
    }
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype> {
        Cow::Borrowed(self.datatype.type_map())
    }
    fn rsmpi_count(&self) -> usize {
        self.count
    }
}

impl<D: Datatype, B: BufferMut + ?Sized> BufferMut for MutView<'_, '_, D, B> {
    fn rsmpi_direct(&mut self) -> Option<&mut [u8]> {
        let t = self.datatype.type_map();
        if !t.is_contiguous(self.count) {
            return None;
        }
        let len = t.size() as usize * self.count;
        self.buffer
            .rsmpi_direct()
            .filter(|b| b.len() >= len)
            .map(|b| &mut b[..len])
    }
    fn rsmpi_unpack(&mut self, data: &[u8]) -> crate::Result<()> {
        let t = self.datatype.type_map();
        let Some(buf) = self.buffer.rsmpi_direct() else {
            return Err(type_err(
                "a datatype view needs a buffer of plain values (no padding)".into(),
            ));
        };
        t.unpack(self.count, data, buf)
    }
    fn rsmpi_read(&mut self) -> crate::Result<Vec<u8>> {
        let t = self.datatype.type_map();
        let Some(buf) = self.buffer.rsmpi_direct() else {
            return Err(type_err(
                "a datatype view needs a buffer of plain values (no padding)".into(),
            ));
        };
        t.pack(self.count, buf)
    }
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype> {
        Cow::Borrowed(self.datatype.type_map())
    }
    fn rsmpi_count(&self) -> usize {
        self.count
    }
    fn rsmpi_elem_check(&self) -> usize {
        0
    }
}

/// Counts and displacements (in elements) laid over a buffer, one pair per rank
/// (`mpi::datatype::Partitioned`).
pub trait Partitioned {
    /// Elements per rank.
    fn counts(&self) -> &[Count];
    /// Displacement (in elements) of each rank's block.
    fn displs(&self) -> &[Count];
}

/// A partitioned buffer to send from (`mpi::datatype::PartitionedBuffer`).
pub trait PartitionedBuffer: Partitioned {
    /// The block of rank `i`, packed.
    #[doc(hidden)]
    fn rsmpi_block(&self, i: usize) -> crate::Result<Cow<'_, [u8]>>;
    /// The element datatype.
    #[doc(hidden)]
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype>;
}

/// A partitioned buffer to receive into (`mpi::datatype::PartitionedBufferMut`).
pub trait PartitionedBufferMut: Partitioned {
    /// Unpacks `data` into the block of rank `i`.
    #[doc(hidden)]
    fn rsmpi_unpack_block(&mut self, i: usize, data: &[u8]) -> crate::Result<()>;
    /// The element datatype.
    #[doc(hidden)]
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype>;
}

/// A buffer with per-rank counts and displacements, to send from (varcount
/// collectives: `MPI_Gatherv`'s receive side at the root is a [`PartitionMut`]).
pub struct Partition<'b, B: ?Sized, C, D> {
    buf: &'b B,
    counts: C,
    displs: D,
}

impl<'b, B: ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>>
    Partition<'b, B, C, D>
{
    /// `counts[i]` elements of `buf` at displacement `displs[i]` (in elements) for
    /// rank `i`.
    pub fn new(buf: &'b B, counts: C, displs: D) -> Self {
        assert_eq!(
            counts.borrow().len(),
            displs.borrow().len(),
            "rsmpi: one count and one displacement per rank"
        );
        Partition {
            buf,
            counts,
            displs,
        }
    }
}

/// A buffer with per-rank counts and displacements, to receive into.
pub struct PartitionMut<'b, B: ?Sized, C, D> {
    buf: &'b mut B,
    counts: C,
    displs: D,
}

impl<'b, B: ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>>
    PartitionMut<'b, B, C, D>
{
    /// `counts[i]` elements of `buf` at displacement `displs[i]` (in elements) for
    /// rank `i`.
    pub fn new(buf: &'b mut B, counts: C, displs: D) -> Self {
        assert_eq!(
            counts.borrow().len(),
            displs.borrow().len(),
            "rsmpi: one count and one displacement per rank"
        );
        PartitionMut {
            buf,
            counts,
            displs,
        }
    }
}

impl<B: ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>> Partitioned
    for Partition<'_, B, C, D>
{
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
}

impl<B: ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>> Partitioned
    for PartitionMut<'_, B, C, D>
{
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
}

/// The element range of block `i` of a partition over `len` elements.
fn block_range(
    counts: &[Count],
    displs: &[Count],
    i: usize,
    len: usize,
) -> crate::Result<std::ops::Range<usize>> {
    let (c, d) = (counts[i], displs[i]);
    if c < 0 || d < 0 || d as usize + c as usize > len {
        return Err(crate::Error::Request(format!(
            "block {i} (count {c} at displacement {d}) lies outside the {len}-element buffer"
        )));
    }
    Ok(d as usize..d as usize + c as usize)
}

impl<T: Equivalence, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>>
    PartitionedBuffer for Partition<'_, [T], C, D>
{
    fn rsmpi_block(&self, i: usize) -> crate::Result<Cow<'_, [u8]>> {
        let r = block_range(self.counts(), self.displs(), i, self.buf.len())?;
        Ok(packed(&self.buf[r]))
    }
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype> {
        Cow::Owned(UserDatatype::of::<T>())
    }
}

impl<T: Equivalence, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>>
    PartitionedBufferMut for PartitionMut<'_, [T], C, D>
{
    fn rsmpi_unpack_block(&mut self, i: usize, data: &[u8]) -> crate::Result<()> {
        let r = block_range(
            self.counts.borrow(),
            self.displs.borrow(),
            i,
            self.buf.len(),
        )?;
        unpack_into(&mut self.buf[r], data)
    }
    fn rsmpi_datatype(&self) -> Cow<'_, UserDatatype> {
        Cow::Owned(UserDatatype::of::<T>())
    }
}

/// Values unpacked for a user operation whose element type cannot be borrowed from
/// the packed bytes (structs with padding), kept while the operation runs.
pub(crate) trait Unpacked {
    fn pack_into(&self, out: &mut Vec<u8>);
    fn as_any(&self) -> &dyn std::any::Any;
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

impl<T: Equivalence + 'static> Unpacked for Vec<T> {
    fn pack_into(&self, out: &mut Vec<u8>) {
        T::rsmpi_pack(self, out)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The packed values of `bytes` as a vector of `T`s.
fn unpacked<T: Equivalence>(bytes: &[u8], n: usize) -> Vec<T> {
    let mut v: Vec<T> = (0..n).map(|_| T::rsmpi_zero()).collect();
    T::rsmpi_unpack(&mut v, bytes);
    v
}

/// Where [`DynBuffer::downcast`] keeps values it had to unpack.
pub(crate) type UnpackedCache = std::cell::OnceCell<Box<dyn Unpacked>>;
/// Where [`DynBufferMut::downcast`] keeps values it had to unpack; the caller packs
/// them back when the operation returns.
pub(crate) type UnpackedSlot = Option<Box<dyn Unpacked>>;

/// A type-erased read-only buffer, the first argument of a user reduction function
/// (`mpi::datatype::DynBuffer`).
pub struct DynBuffer<'a> {
    bytes: &'a [u8],
    datatype: &'a UserDatatype,
    cache: Option<&'a UnpackedCache>,
}

/// A type-erased buffer, the second (in-out) argument of a user reduction function.
pub struct DynBufferMut<'a> {
    bytes: &'a mut [u8],
    datatype: &'a UserDatatype,
    slot: Option<&'a mut UnpackedSlot>,
}

fn elements(bytes: usize, datatype: &UserDatatype) -> usize {
    (bytes as u64).checked_div(datatype.size()).unwrap_or(0) as usize
}

impl<'a> DynBuffer<'a> {
    pub(crate) fn from_bytes(
        bytes: &'a [u8],
        datatype: &'a UserDatatype,
        cache: Option<&'a UnpackedCache>,
    ) -> Self {
        DynBuffer {
            bytes,
            datatype,
            cache,
        }
    }
    /// Whether the elements are `T`s.
    pub fn is<T: Equivalence>(&self) -> bool {
        *T::equivalent_datatype().type_map() == *self.datatype
    }
    /// The elements as `T`s, if they are `T`s.
    pub fn downcast<T: Equivalence + 'static>(self) -> Option<&'a [T]> {
        if !self.is::<T>() {
            return None;
        }
        if let Some(v) = T::rsmpi_from_bytes(self.bytes) {
            return Some(v);
        }
        let n = self.len();
        let b = self
            .cache?
            .get_or_init(|| Box::new(unpacked::<T>(self.bytes, n)));
        b.as_any().downcast_ref::<Vec<T>>().map(|v| &v[..])
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        elements(self.bytes.len(), self.datatype)
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The packed bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes
    }
}

impl<'a> DynBufferMut<'a> {
    pub(crate) fn from_bytes(
        bytes: &'a mut [u8],
        datatype: &'a UserDatatype,
        slot: Option<&'a mut UnpackedSlot>,
    ) -> Self {
        DynBufferMut {
            bytes,
            datatype,
            slot,
        }
    }
    /// Whether the elements are `T`s.
    pub fn is<T: Equivalence>(&self) -> bool {
        *T::equivalent_datatype().type_map() == *self.datatype
    }
    /// The elements as `T`s, if they are `T`s.
    pub fn downcast<T: Equivalence + 'static>(self) -> Option<&'a mut [T]> {
        if !self.is::<T>() {
            return None;
        }
        let n = self.len();
        let DynBufferMut { bytes, slot, .. } = self;
        if T::rsmpi_from_bytes_mut(bytes).is_some() {
            return T::rsmpi_from_bytes_mut(bytes);
        }
        let v = slot?.insert(Box::new(unpacked::<T>(bytes, n)));
        v.as_any_mut().downcast_mut::<Vec<T>>().map(|v| &mut v[..])
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        elements(self.bytes.len(), self.datatype)
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A read-only view.
    pub fn reborrow(&self) -> DynBuffer<'_> {
        DynBuffer {
            bytes: self.bytes,
            datatype: self.datatype,
            cache: None,
        }
    }
    /// A shorter-lived mutable view.
    pub fn reborrow_mut(&mut self) -> DynBufferMut<'_> {
        DynBufferMut {
            bytes: self.bytes,
            datatype: self.datatype,
            slot: self.slot.as_deref_mut(),
        }
    }
    /// Into a read-only view.
    pub fn downgrade(self) -> DynBuffer<'a> {
        DynBuffer {
            bytes: self.bytes,
            datatype: self.datatype,
            cache: None,
        }
    }
    /// The packed bytes.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

/// What `#[derive(Equivalence)]` expands to uses these.
#[doc(hidden)]
pub mod internal {
    pub use super::{Equivalence, UserDatatype};
    /// The type map of any datatype value.
    pub fn type_map<D: super::Datatype>(d: &D) -> &UserDatatype {
        d.type_map()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_pack_unpack() {
        let m: Vec<u8> = (0..16).collect(); // 4x4 matrix of bytes
        let col = UserDatatype::vector(4, 1, 4, &UserDatatype::bytes(1));
        assert_eq!((col.size(), col.extent()), (4, 13));
        assert_eq!(col.pack(1, &m[1..]).unwrap(), vec![1, 5, 9, 13]);
        let mut out = [0u8; 16];
        col.unpack(1, &[7, 7, 7, 7], &mut out[2..]).unwrap();
        assert_eq!(out.iter().filter(|&&x| x == 7).count(), 4);
        assert_eq!((out[2], out[6], out[10], out[14]), (7, 7, 7, 7));
        // out of bounds is an error, nothing written
        assert!(matches!(col.pack(1, &m[4..]), Err(crate::Error::Type(_))));
        let mut short = vec![0u8; 12];
        assert!(col.unpack(1, &[1, 2, 3, 4], &mut short).is_err());
        assert!(short.iter().all(|&x| x == 0));
    }

    #[test]
    fn indexed_struct_and_merging() {
        let f = UserDatatype::of::<u32>();
        let idx = UserDatatype::indexed(&[2, 1], &[0, 3], &f);
        assert_eq!(idx.blocks[..], [(0, 8), (12, 4)]);
        assert_eq!((idx.size(), idx.extent()), (12, 16));
        assert_eq!(idx.prim(), Some(Prim::U32));
        let hidx = UserDatatype::heterogeneous_indexed(&[1, 1], &[4, 0], &f);
        assert_eq!(hidx.blocks[..], [(4, 4), (0, 4)], "type-map order is kept");
        // struct { u8 a; [pad 3]; u32 b; u16 c; [pad 2] } sent without the padding
        let st = UserDatatype::structured(
            &[1, 1, 1],
            &[0, 4, 8],
            &[
                UserDatatype::of::<u8>(),
                f.clone(),
                UserDatatype::of::<u16>(),
            ],
        );
        assert_eq!((st.size(), st.extent()), (7, 10));
        assert_eq!(st.prim(), None, "mixed basic types");
        let st = UserDatatype::structured(&[1, 1], &[0, 12], &[st, UserDatatype::bytes(0)]);
        assert_eq!(st.extent(), 12);
        let buf: Vec<u8> = (0..24).collect();
        let p = st.pack(2, &buf).unwrap();
        assert_eq!(p, vec![0, 4, 5, 6, 7, 8, 9, 12, 16, 17, 18, 19, 20, 21]);
        let mut back = vec![0xffu8; 24];
        st.unpack(2, &p, &mut back).unwrap();
        assert_eq!(back[..4], [0, 0xff, 0xff, 0xff]);
        assert_eq!(back[12..16], [12, 0xff, 0xff, 0xff]);
        // a short message fills only its prefix
        let mut part = vec![0u8; 24];
        st.unpack(2, &p[..3], &mut part).unwrap();
        assert_eq!(part[..8], [0, 0, 0, 0, 4, 5, 0, 0]);
        assert!(UserDatatype::contiguous(3, &f).is_contiguous(2));
        assert!(!idx.is_contiguous(1));
    }

    #[test]
    fn tuples_arrays_and_bool() {
        let t = <(u8, f64)>::equivalent_datatype();
        assert_eq!((t.size(), t.extent()), (9, 16));
        let mut v = vec![(1u8, 2.5f64), (3, 4.5)];
        let b = v.rsmpi_send().unwrap().into_owned();
        assert_eq!(b.len(), 18);
        let mut w = vec![<(u8, f64)>::rsmpi_zero(); 2];
        w.rsmpi_unpack(&b).unwrap();
        assert_eq!(v, w);
        assert!(v.rsmpi_direct().is_none(), "padding: no direct landing");
        let mut a = [1u16, 2, 3, 4];
        assert_eq!(a.rsmpi_direct().map(|b| b.len()), Some(8));
        assert_eq!(BufferMut::rsmpi_count(&a), 4, "an array is N elements");
        let bools = [true, false, true];
        assert_eq!(&*bools[..].rsmpi_send().unwrap(), &[1, 0, 1]);
        let mut got = [false; 3];
        got[..].rsmpi_unpack(&[1, 0, 1]).unwrap();
        assert_eq!(got, bools);
    }
}

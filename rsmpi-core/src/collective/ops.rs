//! Reduction operations: the predefined ones ([`SystemOperation`]) and user functions
//! ([`UserOperation`]).

use crate::datatype::{
    Buffer, BufferMut, DynBuffer, DynBufferMut, Prim, UnpackedCache, UnpackedSlot, UserDatatype,
};
use crate::error::{Error, Result};

/// The predefined operations (`MPI_SUM`, `MPI_MAX`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[doc(hidden)]
pub enum SysOp {
    Max,
    Min,
    Sum,
    Product,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
}

/// A predefined reduction operation (`mpi::collective::SystemOperation`). All are
/// commutative. Arithmetic ones (`sum`, `product`, `max`, `min`) apply to integers and
/// floats, logical ones to integers and `bool`, bitwise ones to integers and `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SystemOperation(pub(crate) SysOp);

macro_rules! ctors {
    ($($name:ident => $op:ident, $mpi:literal;)*) => {
        impl SystemOperation { $(
            #[doc = concat!("`", $mpi, "`")]
            pub fn $name() -> SystemOperation {
                SystemOperation(SysOp::$op)
            }
        )* }
    };
}
ctors! {
    max => Max, "MPI_MAX";
    min => Min, "MPI_MIN";
    sum => Sum, "MPI_SUM";
    product => Product, "MPI_PROD";
    logical_and => LogicalAnd, "MPI_LAND";
    logical_or => LogicalOr, "MPI_LOR";
    logical_xor => LogicalXor, "MPI_LXOR";
    bitwise_and => BitwiseAnd, "MPI_BAND";
    bitwise_or => BitwiseOr, "MPI_BOR";
    bitwise_xor => BitwiseXor, "MPI_BXOR";
}

type UserFn<'a> = dyn Fn(DynBuffer, DynBufferMut) + Sync + 'a;

/// A reduction operation defined by a closure (`mpi::collective::UserOperation`). The
/// closure gets `invec` and `inoutvec` and must leave `invec[i] op inoutvec[i]` in
/// `inoutvec[i]`. It must be associative; non-commutative operations are applied in
/// rank order.
///
/// ```no_run
/// use rsmpi::traits::*;
/// use rsmpi::collective::UserOperation;
/// let universe = rsmpi::initialize().unwrap();
/// let world = universe.world();
/// let max_abs = UserOperation::commutative(|x, y| {
///     let (x, y) = (x.downcast::<i32>().unwrap(), y.downcast::<i32>().unwrap());
///     for (a, b) in x.iter().zip(y) { *b = (*b).abs().max(a.abs()); }
/// });
/// let mut m = 0i32;
/// world.all_reduce_into(&-world.rank(), &mut m, &max_abs);
/// ```
pub struct UserOperation<'a> {
    f: Box<UserFn<'a>>,
    commutative: bool,
}

impl std::fmt::Debug for UserOperation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserOperation")
            .field("commutative", &self.commutative)
            .finish()
    }
}

impl<'a> UserOperation<'a> {
    /// An associative, non-commutative operation.
    pub fn associative<F: Fn(DynBuffer, DynBufferMut) + Sync + 'a>(f: F) -> Self {
        Self::new(false, f)
    }
    /// An associative and commutative operation.
    pub fn commutative<F: Fn(DynBuffer, DynBufferMut) + Sync + 'a>(f: F) -> Self {
        Self::new(true, f)
    }
    /// An operation, commutative or not.
    pub fn new<F: Fn(DynBuffer, DynBufferMut) + Sync + 'a>(commute: bool, f: F) -> Self {
        UserOperation {
            f: Box::new(f),
            commutative: commute,
        }
    }
}

/// What an [`Operation`] is, for the library.
#[doc(hidden)]
pub enum OpRef<'o> {
    System(SysOp),
    User(&'o UserOperation<'o>),
}

/// A reduction operation (`mpi::collective::Operation`).
pub trait Operation {
    /// Whether `a op b == b op a`.
    fn is_commutative(&self) -> bool {
        match self.rsmpi_op() {
            OpRef::System(_) => true,
            OpRef::User(u) => u.commutative,
        }
    }
    #[doc(hidden)]
    fn rsmpi_op(&self) -> OpRef<'_>;
}

impl Operation for SystemOperation {
    fn rsmpi_op(&self) -> OpRef<'_> {
        OpRef::System(self.0)
    }
}

impl Operation for &UserOperation<'_> {
    fn rsmpi_op(&self) -> OpRef<'_> {
        OpRef::User(self)
    }
}

impl<T: Operation + ?Sized> Operation for &T {
    fn rsmpi_op(&self) -> OpRef<'_> {
        (**self).rsmpi_op()
    }
}

/// Reductions over packed bytes of whole elements: `inout = in op inout`.
pub(crate) type Reducer<'r> = dyn Fn(&[u8], &mut [u8]) -> Result<()> + 'r;

/// How a collective applies `op` to elements of `datatype`: a predefined operation
/// the executor applies itself, or a user operation as a closure that owns `op`.
pub(crate) fn prepare<'a, O: Operation + 'a>(
    op: O,
    datatype: UserDatatype,
) -> Result<(super::exec::ExecOp, Option<Box<Reducer<'a>>>)> {
    match op.rsmpi_op() {
        OpRef::System(s) => {
            let Some(p) = datatype.prim() else {
                return Err(Error::Type(
                    "a predefined reduction needs a datatype made of one basic type".into(),
                ));
            };
            check_system(s, p)?;
            Ok((super::exec::ExecOp::System(s, p), None))
        }
        OpRef::User(_) => Ok((
            super::exec::ExecOp::User,
            Some(Box::new(move |a: &[u8], b: &mut [u8]| {
                let f = reducer(&op, &datatype)?;
                f(a, b)
            })),
        )),
    }
}

/// The reducer of `op` on elements of `datatype`; fails (`MPI_ERR_OP` as a type
/// error) for a predefined operation on a datatype it does not apply to.
pub(crate) fn reducer<'r, O: Operation + ?Sized>(
    op: &'r O,
    datatype: &'r UserDatatype,
) -> Result<Box<Reducer<'r>>> {
    match op.rsmpi_op() {
        OpRef::System(s) => {
            let Some(p) = datatype.prim() else {
                return Err(Error::Type(
                    "a predefined reduction needs a datatype made of one basic type".into(),
                ));
            };
            check_system(s, p)?;
            Ok(Box::new(move |a: &[u8], b: &mut [u8]| {
                apply_system(s, p, a, b);
                Ok(())
            }))
        }
        OpRef::User(u) => Ok(Box::new(move |a: &[u8], b: &mut [u8]| {
            // the closure may view the bytes as values, which needs their alignment
            let mut x = aligned(a.len());
            let mut y = aligned(b.len());
            let xa = &mut bytemuck::cast_slice_mut::<u128, u8>(&mut x)[..a.len()];
            xa.copy_from_slice(a);
            let ya = &mut bytemuck::cast_slice_mut::<u128, u8>(&mut y)[..b.len()];
            ya.copy_from_slice(b);
            // values of types that cannot be borrowed from bytes are unpacked on
            // demand (by `downcast`) and the in-out ones packed back afterwards
            let cache = UnpackedCache::new();
            let mut slot: UnpackedSlot = None;
            (u.f)(
                DynBuffer::from_bytes(
                    &bytemuck::cast_slice::<u128, u8>(&x)[..a.len()],
                    datatype,
                    Some(&cache),
                ),
                DynBufferMut::from_bytes(
                    &mut bytemuck::cast_slice_mut::<u128, u8>(&mut y)[..b.len()],
                    datatype,
                    Some(&mut slot),
                ),
            );
            match slot {
                Some(v) => {
                    let mut out = Vec::with_capacity(b.len());
                    v.pack_into(&mut out);
                    b.copy_from_slice(&out[..b.len()]);
                }
                None => b.copy_from_slice(&bytemuck::cast_slice::<u128, u8>(&y)[..b.len()]),
            }
            Ok(())
        })),
    }
}

fn aligned(len: usize) -> Vec<u128> {
    vec![0u128; len.div_ceil(16)]
}

fn check_system(s: SysOp, p: Prim) -> Result<()> {
    use SysOp::*;
    let float = matches!(p, Prim::F32 | Prim::F64);
    let ok = match s {
        Max | Min | Sum | Product => p != Prim::Bool,
        LogicalAnd | LogicalOr | LogicalXor => !float,
        BitwiseAnd | BitwiseOr | BitwiseXor => !float,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Type(format!(
            "the predefined operation {s:?} does not apply to {p:?}"
        )))
    }
}

macro_rules! int_ops {
    ($t:ty, $s:expr, $a:expr, $b:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for (x, y) in $a.chunks_exact(N).zip($b.chunks_exact_mut(N)) {
            let x = <$t>::from_ne_bytes(x.try_into().unwrap());
            let yv = <$t>::from_ne_bytes((&*y).try_into().unwrap());
            let r: $t = match $s {
                SysOp::Max => x.max(yv),
                SysOp::Min => x.min(yv),
                SysOp::Sum => x.wrapping_add(yv),
                SysOp::Product => x.wrapping_mul(yv),
                SysOp::LogicalAnd => ((x != 0) && (yv != 0)) as $t,
                SysOp::LogicalOr => ((x != 0) || (yv != 0)) as $t,
                SysOp::LogicalXor => ((x != 0) != (yv != 0)) as $t,
                SysOp::BitwiseAnd => x & yv,
                SysOp::BitwiseOr => x | yv,
                SysOp::BitwiseXor => x ^ yv,
            };
            y.copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

macro_rules! float_ops {
    ($t:ty, $s:expr, $a:expr, $b:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for (x, y) in $a.chunks_exact(N).zip($b.chunks_exact_mut(N)) {
            let x = <$t>::from_ne_bytes(x.try_into().unwrap());
            let yv = <$t>::from_ne_bytes((&*y).try_into().unwrap());
            let r: $t = match $s {
                SysOp::Max => x.max(yv),
                SysOp::Min => x.min(yv),
                SysOp::Sum => x + yv,
                SysOp::Product => x * yv,
                _ => unreachable!("checked by check_system"),
            };
            y.copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

/// `b = a op b` for basic values of type `p` packed in `a` and `b`.
pub(crate) fn apply_system(s: SysOp, p: Prim, a: &[u8], b: &mut [u8]) {
    match p {
        Prim::U8 => int_ops!(u8, s, a, b),
        Prim::I8 => int_ops!(i8, s, a, b),
        Prim::U16 => int_ops!(u16, s, a, b),
        Prim::I16 => int_ops!(i16, s, a, b),
        Prim::U32 => int_ops!(u32, s, a, b),
        Prim::I32 => int_ops!(i32, s, a, b),
        Prim::U64 => int_ops!(u64, s, a, b),
        Prim::I64 => int_ops!(i64, s, a, b),
        Prim::U128 => int_ops!(u128, s, a, b),
        Prim::I128 => int_ops!(i128, s, a, b),
        Prim::F32 => float_ops!(f32, s, a, b),
        Prim::F64 => float_ops!(f64, s, a, b),
        Prim::Bool => {
            for (x, y) in a.iter().zip(b.iter_mut()) {
                let (x, yv) = (*x != 0, *y != 0);
                *y = match s {
                    SysOp::LogicalAnd | SysOp::BitwiseAnd => x && yv,
                    SysOp::LogicalOr | SysOp::BitwiseOr => x || yv,
                    SysOp::LogicalXor | SysOp::BitwiseXor => x != yv,
                    _ => unreachable!("checked by check_system"),
                } as u8;
            }
        }
    }
}

/// `inoutbuf = inbuf op inoutbuf`, locally (`MPI_Reduce_local`;
/// `mpi::collective::reduce_local_into`).
pub fn reduce_local_into<S, R, O>(inbuf: &S, inoutbuf: &mut R, op: O)
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    try_reduce_local_into(inbuf, inoutbuf, op)
        .unwrap_or_else(|e| crate::topology::fail("reduce_local", e))
}

/// [`reduce_local_into`] returning errors.
pub fn try_reduce_local_into<S, R, O>(inbuf: &S, inoutbuf: &mut R, op: O) -> Result<()>
where
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    let a = inbuf.rsmpi_send()?;
    let dt = inoutbuf.rsmpi_datatype().into_owned();
    let mut b = vec![0u8; inoutbuf.rsmpi_capacity()];
    if a.len() != b.len() {
        return Err(Error::Request(format!(
            "reduce_local: {} bytes into a {}-byte buffer",
            a.len(),
            b.len()
        )));
    }
    // the current contents of the in-out buffer, packed
    b.copy_from_slice(&inoutbuf.rsmpi_read()?);
    let f = reducer(&op, &dt)?;
    f(&a, &mut b)?;
    inoutbuf.rsmpi_unpack(&b)
}

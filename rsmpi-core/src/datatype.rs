//! Which Rust values can travel in a message.

/// A type whose values are sent as their bytes (`MPI_Datatype` equivalents of plain
/// data). Implemented for the primitive numbers; derive it for your own
/// `#[repr(C)]` structs of plain data with `bytemuck`'s `Pod` derive and an empty impl:
///
/// ```
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// #[repr(C)]
/// struct Particle { x: f64, y: f64, id: u64 }
/// impl rsmpi::Equivalence for Particle {}
/// ```
pub trait Equivalence: bytemuck::Pod {}

macro_rules! equivalence {
    ($($t:ty)*) => { $(impl Equivalence for $t {})* };
}
equivalence!(u8 i8 u16 i16 u32 i32 u64 i64 u128 i128 usize isize f32 f64);
impl<T: Equivalence, const N: usize> Equivalence for [T; N] where [T; N]: bytemuck::Pod {}

/// Something that can be sent: a value, a slice, a vector or an array of
/// [`Equivalence`] values.
pub trait Buffer {
    /// The bytes that go on the wire.
    fn as_bytes(&self) -> &[u8];
}

/// Something that can be received into.
pub trait BufferMut {
    /// The bytes a message is written into.
    fn as_bytes_mut(&mut self) -> &mut [u8];
    /// Size of one element, to check that a message is a whole number of them.
    fn elem_size(&self) -> usize;
}

impl<T: Equivalence> Buffer for T {
    fn as_bytes(&self) -> &[u8] {
        bytemuck::bytes_of(self)
    }
}
impl<T: Equivalence> Buffer for [T] {
    fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}
impl<T: Equivalence> Buffer for Vec<T> {
    fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}
impl<T: Equivalence> BufferMut for T {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::bytes_of_mut(self)
    }
    fn elem_size(&self) -> usize {
        std::mem::size_of::<T>()
    }
}
impl<T: Equivalence> BufferMut for [T] {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self)
    }
    fn elem_size(&self) -> usize {
        std::mem::size_of::<T>()
    }
}
impl<T: Equivalence> BufferMut for Vec<T> {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self)
    }
    fn elem_size(&self) -> usize {
        std::mem::size_of::<T>()
    }
}

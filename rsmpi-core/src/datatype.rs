//! Which Rust values can travel in a message.

/// A type whose values are sent as their bytes (`MPI_Datatype` equivalents of plain
/// data). Implemented for the primitive numbers and arrays of them; derive it for
/// your own `#[repr(C)]` structs of plain data:
///
/// ```
/// use rsmpi::bytemuck::{Pod, Zeroable};
/// #[derive(Clone, Copy, Pod, Zeroable, rsmpi::Equivalence)]
/// #[repr(C)]
/// struct Particle { x: f64, y: f64, id: u64 }
/// assert_eq!(rsmpi::Datatype::of::<Particle>().size(), 24);
/// ```
///
/// Structs with padding, or with fields you do not want to send, are sent through a
/// [`Datatype::structured`] [`View`] instead.
pub trait Equivalence: bytemuck::Pod {
    /// The datatype of one value.
    fn equivalent_datatype() -> Datatype {
        Datatype::of::<Self>()
    }
}

macro_rules! equivalence {
    ($($t:ty)*) => { $(impl Equivalence for $t {})* };
}
equivalence!(u8 i8 u16 i16 u32 i32 u64 i64 u128 i128 usize isize f32 f64);
impl<T: Equivalence, const N: usize> Equivalence for [T; N] where [T; N]: bytemuck::Pod {}

/// Something that can be sent: a value, a slice, a vector or an array of
/// [`Equivalence`] values.
pub trait Buffer {
    /// The bytes of the buffer (for a [`View`], the whole underlying buffer).
    fn as_bytes(&self) -> &[u8];
    /// The datatype and count laid over the bytes, for non-contiguous buffers.
    fn layout(&self) -> Option<(&Datatype, usize)> {
        None
    }
}

/// Something that can be received into.
pub trait BufferMut {
    /// The bytes a message is written into.
    fn as_bytes_mut(&mut self) -> &mut [u8];
    /// Size of one element, to check that a message is a whole number of them
    /// (0: no check).
    fn elem_size(&self) -> usize;
    /// The datatype and count laid over the bytes, for non-contiguous buffers.
    fn layout(&self) -> Option<(&Datatype, usize)> {
        None
    }
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

/// An MPI derived datatype (`MPI_Type_*`): which bytes of a buffer, relative to the
/// start of one element, make up that element, and the element's extent (the stride
/// from one element to the next).
///
/// ```
/// use rsmpi::Datatype;
/// // every other f64 of a row of 8: a vector of 4 blocks of 1, stride 2
/// let col = Datatype::vector(4, 1, 2, &Datatype::of::<f64>());
/// assert_eq!((col.size(), col.extent()), (32, 7 * 8));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datatype {
    /// (byte offset, length) in type-map order; adjacent blocks are merged.
    blocks: Vec<(i64, u64)>,
    lb: i64,
    ub: i64,
}

/// Errors of datatype construction and use (`MPI_ERR_TYPE`).
fn type_err(what: String) -> crate::Error {
    crate::Error::Type(what)
}

impl Datatype {
    /// The datatype of one `T`.
    pub fn of<T: Equivalence>() -> Datatype {
        Datatype::bytes(std::mem::size_of::<T>())
    }

    /// `n` contiguous bytes (`MPI_BYTE` × n).
    pub fn bytes(n: usize) -> Datatype {
        let blocks = if n == 0 { vec![] } else { vec![(0, n as u64)] };
        Datatype {
            blocks,
            lb: 0,
            ub: n as i64,
        }
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
    fn build(pieces: impl IntoIterator<Item = (i64, usize, Datatype)>) -> Datatype {
        let mut blocks = Vec::new();
        let (mut lb, mut ub) = (i64::MAX, i64::MIN);
        for (disp, count, t) in pieces {
            for j in 0..count as i64 {
                let base = disp + j * t.extent();
                for &(o, l) in &t.blocks {
                    Self::push(&mut blocks, base + o, l);
                }
                lb = lb.min(base + t.lb);
                ub = ub.max(base + t.ub);
            }
        }
        if lb > ub {
            (lb, ub) = (0, 0);
        }
        Datatype { blocks, lb, ub }
    }

    /// `count` copies of `old` back to back (`MPI_Type_contiguous`).
    pub fn contiguous(count: usize, old: &Datatype) -> Datatype {
        Self::build([(0, count, old.clone())])
    }

    /// `count` blocks of `blocklength` elements, `stride` elements apart
    /// (`MPI_Type_vector`).
    pub fn vector(count: usize, blocklength: usize, stride: isize, old: &Datatype) -> Datatype {
        Self::heterogeneous_vector(count, blocklength, stride as i64 * old.extent(), old)
    }

    /// `count` blocks of `blocklength` elements, `stride` bytes apart
    /// (`MPI_Type_create_hvector`).
    pub fn heterogeneous_vector(
        count: usize,
        blocklength: usize,
        stride: i64,
        old: &Datatype,
    ) -> Datatype {
        Self::build((0..count as i64).map(|i| (i * stride, blocklength, old.clone())))
    }

    /// Blocks of `blocklengths[i]` elements at `displacements[i]` elements
    /// (`MPI_Type_indexed`).
    pub fn indexed(blocklengths: &[usize], displacements: &[isize], old: &Datatype) -> Datatype {
        let d: Vec<i64> = displacements
            .iter()
            .map(|&d| d as i64 * old.extent())
            .collect();
        Self::heterogeneous_indexed(blocklengths, &d, old)
    }

    /// Blocks of `blocklengths[i]` elements at `displacements[i]` bytes
    /// (`MPI_Type_create_hindexed`).
    pub fn heterogeneous_indexed(
        blocklengths: &[usize],
        displacements: &[i64],
        old: &Datatype,
    ) -> Datatype {
        assert_eq!(
            blocklengths.len(),
            displacements.len(),
            "one displacement per block"
        );
        Self::build(
            displacements
                .iter()
                .zip(blocklengths)
                .map(|(&d, &n)| (d, n, old.clone())),
        )
    }

    /// Blocks of `blocklengths[i]` elements of `types[i]` at `displacements[i]` bytes
    /// (`MPI_Type_create_struct`).
    pub fn structured(
        blocklengths: &[usize],
        displacements: &[i64],
        types: &[Datatype],
    ) -> Datatype {
        assert!(
            blocklengths.len() == displacements.len() && types.len() == blocklengths.len(),
            "one displacement and one type per block"
        );
        Self::build(
            displacements
                .iter()
                .zip(blocklengths)
                .zip(types)
                .map(|((&d, &n), t)| (d, n, t.clone())),
        )
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
        let end = last + (count as i64 - 1) * self.extent();
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
            for &(o, l) in &self.blocks {
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
            for &(o, l) in &self.blocks {
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

/// A buffer seen through a datatype, for sending (`MPI_Send(buf, count, datatype)`).
pub struct View<'a> {
    bytes: &'a [u8],
    count: usize,
    datatype: Datatype,
}

impl<'a> View<'a> {
    /// `count` elements of `datatype` laid over `buf`.
    pub fn with_count_and_datatype<B: Buffer + ?Sized>(
        buf: &'a B,
        count: usize,
        datatype: &Datatype,
    ) -> View<'a> {
        View {
            bytes: buf.as_bytes(),
            count,
            datatype: datatype.clone(),
        }
    }
}

/// A buffer seen through a datatype, for receiving.
pub struct MutView<'a> {
    bytes: &'a mut [u8],
    count: usize,
    datatype: Datatype,
}

impl<'a> MutView<'a> {
    /// `count` elements of `datatype` laid over `buf`.
    pub fn with_count_and_datatype<B: BufferMut + ?Sized>(
        buf: &'a mut B,
        count: usize,
        datatype: &Datatype,
    ) -> MutView<'a> {
        MutView {
            bytes: buf.as_bytes_mut(),
            count,
            datatype: datatype.clone(),
        }
    }
}

impl Buffer for View<'_> {
    fn as_bytes(&self) -> &[u8] {
        self.bytes
    }
    fn layout(&self) -> Option<(&Datatype, usize)> {
        Some((&self.datatype, self.count))
    }
}

impl BufferMut for MutView<'_> {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
    fn elem_size(&self) -> usize {
        0
    }
    fn layout(&self) -> Option<(&Datatype, usize)> {
        Some((&self.datatype, self.count))
    }
}

/// The bytes a send puts on the wire: the buffer itself, or its packed elements.
pub(crate) fn send_bytes<B: Buffer + ?Sized>(buf: &B) -> crate::Result<std::borrow::Cow<'_, [u8]>> {
    match buf.layout() {
        Some((dt, n)) if !dt.is_contiguous(n) => {
            dt.pack(n, buf.as_bytes()).map(std::borrow::Cow::Owned)
        }
        Some((dt, n)) => {
            let len = dt.size() as usize * n;
            let b = buf.as_bytes();
            if len > b.len() {
                return Err(type_err(format!(
                    "{n} elements need {len} bytes; the buffer has {}",
                    b.len()
                )));
            }
            Ok(std::borrow::Cow::Borrowed(&b[..len]))
        }
        None => Ok(std::borrow::Cow::Borrowed(buf.as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_pack_unpack() {
        let m: Vec<u8> = (0..16).collect(); // 4x4 matrix of bytes
        let col = Datatype::vector(4, 1, 4, &Datatype::bytes(1));
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
        let f = Datatype::of::<u32>();
        let idx = Datatype::indexed(&[2, 1], &[0, 3], &f);
        assert_eq!(idx.blocks, vec![(0, 8), (12, 4)]);
        assert_eq!((idx.size(), idx.extent()), (12, 16));
        let hidx = Datatype::heterogeneous_indexed(&[1, 1], &[4, 0], &f);
        assert_eq!(hidx.blocks, vec![(4, 4), (0, 4)], "type-map order is kept");
        // struct { u8 a; [pad 3]; u32 b; u16 c; [pad 2] } sent without the padding
        let st = Datatype::structured(
            &[1, 1, 1],
            &[0, 4, 8],
            &[Datatype::of::<u8>(), f.clone(), Datatype::of::<u16>()],
        );
        assert_eq!((st.size(), st.extent()), (7, 10));
        let st = Datatype::structured(&[1, 1], &[0, 12], &[st, Datatype::bytes(0)]);
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
        assert!(Datatype::contiguous(3, &f).is_contiguous(2));
        assert!(!idx.is_contiguous(1));
    }
}

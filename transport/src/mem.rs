//! Registered memory: user buffers lent to the library for the length of a scope.
//!
//! Non-blocking operations need the library to reach a user's buffer later, from
//! inside some other call (a direct write from a peer lands in it, a rendezvous read
//! fills it, an eager payload is copied into it). Rust's borrows cannot express "valid
//! until this request completes", so buffers are lent to a [`Regions`] table inside a
//! [`scope`]: the scope takes the borrow for its whole length, and before the borrow
//! ends the scope's host must finish (or cancel and finish) every operation that uses
//! the lent regions. This is the pattern of `std::thread::scope`; nothing a caller does
//! with the returned [`RegionId`]s (copying, forgetting) can outlive the scope.
//!
//! ```
//! use std::cell::RefCell;
//! use transport::mem::{scope, RegionHost, RegionId, Regions};
//!
//! struct Host(RefCell<Regions>);
//! impl RegionHost for Host {
//!     fn with_regions<R>(&self, f: impl FnOnce(&mut Regions) -> R) -> R { f(&mut self.0.borrow_mut()) }
//!     fn quiesce(&self, _ids: &[RegionId]) {} // nothing in flight in this example
//! }
//!
//! let host = Host(RefCell::new(Regions::default()));
//! let mut buf = [0u8; 4];
//! scope(&host, |s| {
//!     let id = s.lend_mut(&mut buf);
//!     host.with_regions(|r| r.slice_mut(id).unwrap().copy_from_slice(b"abcd"));
//! });
//! assert_eq!(&buf, b"abcd");
//! ```
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::marker::PhantomData;

/// A lent buffer in a [`Regions`] table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(u32);

impl RegionId {
    /// A small dense index (slots are reused), for side tables indexed by region.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

/// The table of lent buffers (and of the library's own buffers that operations
/// address like lent ones: [`Regions::insert_owned`]).
#[derive(Debug, Default)]
pub struct Regions {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// The memory of owned regions, by slot index; its heap buffer never moves while
    /// it is here (nothing resizes it).
    owned: Vec<Option<Vec<u8>>>,
}

// SAFETY: the raw pointers are only dereferenced through `&self`/`&mut self` methods,
// so access follows the table's own borrows; the memory they point to is owned by the
// scope that lent it, which outlives the entries (see `scope`).
unsafe impl Send for Regions {}

impl Regions {
    fn insert(&mut self, slot: Slot) -> RegionId {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                RegionId(i)
            }
            None => {
                self.slots.push(Some(slot));
                RegionId(self.slots.len() as u32 - 1)
            }
        }
    }

    fn remove(&mut self, id: RegionId) {
        if let Some(s) = self.slots.get_mut(id.0 as usize) {
            if s.take().is_some() {
                self.free.push(id.0);
            }
        }
        if let Some(o) = self.owned.get_mut(id.0 as usize) {
            *o = None;
        }
    }

    /// Keeps `v` in the table as a writable region, so that operations can address
    /// ranges of it; [`Regions::take_owned`] gives it back.
    pub fn insert_owned(&mut self, mut v: Vec<u8>) -> RegionId {
        let slot = Slot {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            writable: true,
        };
        let id = self.insert(slot);
        let i = id.0 as usize;
        if self.owned.len() <= i {
            self.owned.resize_with(i + 1, || None);
        }
        self.owned[i] = Some(v);
        id
    }

    /// Removes an owned region and returns its memory (`None` for a lent region).
    pub fn take_owned(&mut self, id: RegionId) -> Option<Vec<u8>> {
        let v = self.owned.get_mut(id.0 as usize)?.take()?;
        self.remove(id);
        Some(v)
    }

    /// `a` to read and `b` to write at once, if both exist, `b` is writable and their
    /// memory does not overlap.
    pub fn pair(&mut self, a: RegionId, b: RegionId) -> Option<(&[u8], &mut [u8])> {
        let (sa, sb) = (self.slot(a)?, self.slot(b)?);
        let (a0, b0) = (sa.ptr as usize, sb.ptr as usize);
        if !sb.writable || (a0 < b0 + sb.len && b0 < a0 + sa.len && sa.len > 0 && sb.len > 0) {
            return None;
        }
        // SAFETY: both slots describe live memory (see `slice`); the two ranges were
        // just checked to be disjoint, so the shared and the exclusive reference do not
        // alias; `b` came from a writable (exclusive) borrow or owned memory; both
        // borrows are tied to `&mut self`, which excludes every other access path
        // through the table.
        Some(unsafe {
            (
                std::slice::from_raw_parts(sa.ptr, sa.len),
                std::slice::from_raw_parts_mut(sb.ptr, sb.len),
            )
        })
    }

    fn slot(&self, id: RegionId) -> Option<Slot> {
        self.slots.get(id.0 as usize).copied().flatten()
    }

    /// Start address of a region (what a shared-memory peer writes to).
    pub fn addr(&self, id: RegionId) -> Option<usize> {
        self.slot(id).map(|s| s.ptr as usize)
    }

    /// Length of a region in bytes.
    pub fn len(&self, id: RegionId) -> Option<usize> {
        self.slot(id).map(|s| s.len)
    }

    /// Number of lent regions.
    pub fn count(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Reads a region.
    pub fn slice(&self, id: RegionId) -> Option<&[u8]> {
        let s = self.slot(id)?;
        // SAFETY: the slot was created from a live `&'scope [u8]` or `&'scope mut [u8]`
        // whose borrow the scope holds until after the slot is removed, so the memory
        // is valid for `len` bytes; the returned borrow is tied to `&self`, and the
        // only mutable access path (`slice_mut`) needs `&mut self`.
        Some(unsafe { std::slice::from_raw_parts(s.ptr, s.len) })
    }

    /// Writes a region; `None` for regions lent read-only.
    pub fn slice_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
        let s = self.slot(id).filter(|s| s.writable)?;
        // SAFETY: as in `slice`, and the slot came from a `&'scope mut [u8]` that the
        // scope holds exclusively, so no other reference to the memory exists; the
        // returned borrow is tied to `&mut self`.
        Some(unsafe { std::slice::from_raw_parts_mut(s.ptr, s.len) })
    }
}

/// What a scope needs from the library that owns the table.
pub trait RegionHost {
    /// Runs `f` on the table.
    fn with_regions<R>(&self, f: impl FnOnce(&mut Regions) -> R) -> R;
    /// Called when the scope ends (also by unwinding): must not return while any
    /// operation may still read or write the regions `ids`.
    fn quiesce(&self, ids: &[RegionId]);
    /// Called when the scope ends: quiesces `ids` as [`Self::quiesce`] does, then runs
    /// `release` (which removes them) on the table. The default makes the two calls
    /// apart; a host that can tell in one access to the table that no operation uses
    /// the regions may release them in that same access (a scope per blocking call
    /// pays it per message). `release` must run only once nothing may read or write
    /// the regions; if it does not run, the scope runs it after this returns.
    fn quiesce_then(&self, ids: &[RegionId], release: impl FnOnce(&mut Regions)) {
        self.quiesce(ids);
        self.with_regions(release);
    }
}

/// A scope in which buffers borrowed for `'scope` can be lent.
pub struct Scope<'scope, 'env: 'scope, H: RegionHost> {
    host: &'env H,
    ids: RefCell<Ids>,
    // invariance in both lifetimes, as in `std::thread::Scope`
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope, 'env, H: RegionHost> Scope<'scope, 'env, H> {
    /// Lends a buffer for reading until the scope ends.
    pub fn lend(&'scope self, buf: &'scope [u8]) -> RegionId {
        let slot = Slot {
            ptr: buf.as_ptr() as *mut u8,
            len: buf.len(),
            writable: false,
        };
        self.add(slot)
    }

    /// Lends a buffer for reading and writing until the scope ends.
    #[inline(always)]
    pub fn lend_mut(&'scope self, buf: &'scope mut [u8]) -> RegionId {
        let slot = Slot {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            writable: true,
        };
        self.add(slot)
    }

    // always inlined: on rsmpi's per-message path it has several callers, and out of
    // line it cost a lend ~50 instructions (rsmpi's docs/performance.md, "Tools off")
    #[inline(always)]
    fn add(&self, slot: Slot) -> RegionId {
        let id = self.host.with_regions(|r| r.insert(slot));
        self.ids.borrow_mut().push(id);
        id
    }

    /// Lends `buf` (whose bytes `bytes` selects) for reading and writing, and keeps
    /// the way back to it: [`Loan::reclaim`] returns the buffer before the scope ends,
    /// once the host has no operation on it (a completed request handing its data
    /// back).
    #[inline(always)]
    pub fn lend_typed_mut<D: ?Sized>(
        &'scope self,
        buf: &'scope mut D,
        bytes: impl FnOnce(&mut D) -> &mut [u8],
    ) -> Loan<'scope, D, H> {
        let ptr: *mut D = buf;
        // SAFETY: `ptr` comes from the live exclusive borrow `buf`, which this scope
        // holds for `'scope`; the reference made here only lives for this call.
        let b = bytes(unsafe { &mut *ptr });
        let id = self.lend_mut(b);
        Loan {
            id,
            ptr,
            host: self.host,
            _borrow: PhantomData,
        }
    }

    /// The host this scope lends to.
    pub fn host(&self) -> &'env H {
        self.host
    }
}

/// The regions a scope has lent: inline while there are few (most scopes lend one or
/// two buffers, and a scope per message must not allocate), on the heap beyond.
#[derive(Default)]
struct Ids {
    inline: [RegionId; Ids::INLINE],
    n: usize,
    heap: Vec<RegionId>,
}

impl Ids {
    const INLINE: usize = 4;
    /// Room the heap list is first given.
    const SPILL: usize = 128;

    /// Inlined: its common case is three instructions, and a scope's lending
    /// exists twice on the per-message path (the calls' watched and unwatched copies,
    /// `rsmpi::tools::Mode`), which would otherwise keep it out of line.
    /// Past the inline room, a push into the heap list's reserved room is inlined
    /// too (a window of 64 requests in one scope makes 60 of them).
    #[inline(always)]
    fn push(&mut self, id: RegionId) {
        if self.n < Self::INLINE {
            self.inline[self.n] = id;
            self.n += 1;
        } else if !self.heap.is_empty() && self.heap.len() < self.heap.capacity() {
            self.heap.push(id);
        } else {
            self.spill(id);
        }
    }

    /// [`Self::push`] past the inline room (a window of requests in one scope).
    #[inline(never)]
    fn spill(&mut self, id: RegionId) {
        if self.heap.is_empty() {
            // one allocation for a window of requests (the message-rate
            // benchmarks' 64), not one per doubling from 4
            self.heap.reserve(Self::SPILL);
            self.heap.extend_from_slice(&self.inline);
        }
        self.heap.push(id);
    }

    fn as_slice(&self) -> &[RegionId] {
        if self.heap.is_empty() {
            &self.inline[..self.n]
        } else {
            &self.heap
        }
    }
}

impl Default for RegionId {
    fn default() -> Self {
        RegionId(u32::MAX)
    }
}

/// A buffer lent by [`Scope::lend_typed_mut`]: its region, and the way back to the
/// buffer ([`Loan::reclaim`]).
pub struct Loan<'scope, D: ?Sized, H: RegionHost> {
    id: RegionId,
    ptr: *mut D,
    host: &'scope H,
    _borrow: PhantomData<&'scope mut D>,
}

impl<D: ?Sized, H: RegionHost> std::fmt::Debug for Loan<'_, D, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("id", &self.id).finish()
    }
}

impl<'scope, D: ?Sized, H: RegionHost> Loan<'scope, D, H> {
    /// The lent region.
    pub fn id(&self) -> RegionId {
        self.id
    }

    /// Returns the buffer: quiesces the region first (the host finishes or cancels
    /// anything still using it). The region stays in the table, unused, until the
    /// scope ends.
    pub fn reclaim(self) -> &'scope mut D {
        self.host.quiesce(&[self.id]);
        // SAFETY: `ptr` was made from a `&'scope mut D` that the scope holds for
        // `'scope`. The only other path to that memory is the region, which the host
        // has just quiesced: no operation uses it, and the host starts none on a
        // region it did not get a new request for (the region id stays private to
        // the request that owned this loan, which is being consumed). `Loan` is not
        // `Clone` and `reclaim` takes it by value, so the exclusive reference is made
        // once.
        unsafe { &mut *self.ptr }
    }
}

/// Lends one buffer for reading for the length of `f`: a [`scope`] with a single
/// region and no allocation, for blocking calls. The region is released, after
/// [`RegionHost::quiesce`], before `lend` returns or unwinds.
pub fn lend<H: RegionHost, T>(host: &H, buf: &[u8], f: impl FnOnce(RegionId) -> T) -> T {
    let slot = Slot {
        ptr: buf.as_ptr() as *mut u8,
        len: buf.len(),
        writable: false,
    };
    let lent = Lent::new(host, slot);
    f(lent.id)
    // `lent` drops here, while `buf` is still borrowed
}

/// Lends one buffer for reading and writing for the length of `f` (see [`lend`]).
pub fn lend_mut<H: RegionHost, T>(host: &H, buf: &mut [u8], f: impl FnOnce(RegionId) -> T) -> T {
    let slot = Slot {
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
        writable: true,
    };
    let lent = Lent::new(host, slot);
    f(lent.id)
}

/// One lent region, released when dropped (also by unwinding). Only `lend` and
/// `lend_mut` make one, from a borrow that outlives it.
struct Lent<'h, H: RegionHost> {
    host: &'h H,
    id: RegionId,
}

impl<'h, H: RegionHost> Lent<'h, H> {
    fn new(host: &'h H, slot: Slot) -> Self {
        let id = host.with_regions(|r| r.insert(slot));
        Lent { host, id }
    }
}

impl<H: RegionHost> Drop for Lent<'_, H> {
    /// As a scope ends ([`scope`]): quiesced and released in one access to the table
    /// when the host can (a blocking call's buffer, once per message).
    fn drop(&mut self) {
        let id = self.id;
        let mut released = false;
        self.host.quiesce_then(&[id], |r| {
            r.remove(id);
            released = true;
        });
        if !released {
            self.host.with_regions(|r| r.remove(id));
        }
    }
}

/// A scope that never ends, for buffers borrowed for `'static` (`StaticScope`
/// requests): its regions stay lent until [`Loan::reclaim`] takes them back. One
/// small allocation is leaked per call; callers keep one per thread.
pub fn leak_scope<H: RegionHost>(host: &'static H) -> &'static Scope<'static, 'static, H> {
    Box::leak(Box::new(Scope {
        host,
        ids: RefCell::new(Ids::default()),
        _scope: PhantomData,
        _env: PhantomData,
    }))
}

/// Runs `f` with a [`Scope`]; every buffer lent in it is released, after
/// [`RegionHost::quiesce`], before `scope` returns or unwinds.
pub fn scope<'env, H: RegionHost, T>(
    host: &'env H,
    f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env, H>) -> T,
) -> T {
    let s = Scope {
        host,
        ids: RefCell::new(Ids::default()),
        _scope: PhantomData,
        _env: PhantomData,
    };
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&s)));
    let ids = std::mem::take(&mut *s.ids.borrow_mut());
    let ids = ids.as_slice();
    let mut released = false;
    host.quiesce_then(ids, |r| {
        ids.iter().for_each(|&id| r.remove(id));
        released = true;
    });
    if !released {
        host.with_regions(|r| ids.iter().for_each(|&id| r.remove(id)));
    }
    match out {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Host(RefCell<Regions>, RefCell<Vec<RegionId>>);
    impl RegionHost for Host {
        fn with_regions<R>(&self, f: impl FnOnce(&mut Regions) -> R) -> R {
            f(&mut self.0.borrow_mut())
        }
        fn quiesce(&self, ids: &[RegionId]) {
            self.1.borrow_mut().extend_from_slice(ids);
        }
    }

    /// A host whose `quiesce_then` leaves `release` unrun still gets its regions
    /// released; one that runs it gets them released once.
    #[test]
    fn scope_releases_when_the_host_does_not() {
        struct Lazy(RefCell<Regions>, bool);
        impl RegionHost for Lazy {
            fn with_regions<R>(&self, f: impl FnOnce(&mut Regions) -> R) -> R {
                f(&mut self.0.borrow_mut())
            }
            fn quiesce(&self, _ids: &[RegionId]) {}
            fn quiesce_then(&self, _ids: &[RegionId], release: impl FnOnce(&mut Regions)) {
                if self.1 {
                    release(&mut self.0.borrow_mut());
                }
            }
        }
        for runs in [false, true] {
            let host = Lazy(RefCell::default(), runs);
            let mut bufs = [[0u8; 2]; 6];
            scope(&host, |s| {
                for b in bufs.iter_mut() {
                    s.lend_mut(b);
                }
            });
            assert_eq!(
                host.0.borrow().count(),
                0,
                "regions outlived their scope (release run: {runs})"
            );
            // a blocking call's one buffer (`lend`, `lend_mut`), the same way
            let (mut a, b) = ([0u8; 4], [1u8; 4]);
            let ids = lend_mut(&host, &mut a, |x| lend(&host, &b, |y| [x, y]));
            assert_ne!(ids[0], ids[1]);
            assert_eq!(
                host.0.borrow().count(),
                0,
                "a lent buffer outlived its call (release run: {runs})"
            );
        }
    }

    /// A blocking call's buffer is quiesced before it is released, also when the
    /// call unwinds.
    #[test]
    fn a_lent_buffer_is_quiesced_then_released() {
        let host = Host(RefCell::default(), RefCell::default());
        let mut a = [0u8; 4];
        let id = lend_mut(&host, &mut a, |id| {
            assert_eq!(host.0.borrow().count(), 1);
            id
        });
        assert_eq!(*host.1.borrow(), [id]);
        assert_eq!(host.0.borrow().count(), 0);
        let b = [0u8; 4];
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lend(&host, &b, |_| panic!("the call fails"))
        }));
        assert!(unwound.is_err());
        assert_eq!(host.1.borrow().len(), 2, "quiesced when unwinding");
        assert_eq!(host.0.borrow().count(), 0);
    }

    /// A scope releases every region it lent: inline, in the heap list's first room,
    /// or past it (the list grown).
    #[test]
    fn scope_releases_all_it_lent() {
        let sizes = [
            0,
            1,
            Ids::INLINE,
            Ids::INLINE + 1,
            3 * Ids::INLINE,
            Ids::SPILL,
            Ids::SPILL + 1,
            2 * Ids::SPILL + 3,
        ];
        for n in sizes {
            let host = Host(RefCell::default(), RefCell::default());
            let mut bufs = vec![[0u8; 2]; n];
            let lent: Vec<RegionId> =
                scope(&host, |s| bufs.iter_mut().map(|b| s.lend_mut(b)).collect());
            assert_eq!(
                *host.1.borrow(),
                lent,
                "quiesced in lending order ({n} buffers)"
            );
            let r = host.0.borrow();
            assert!(
                r.slots.iter().all(Option::is_none),
                "a region outlived its scope ({n} buffers)"
            );
        }
    }
}

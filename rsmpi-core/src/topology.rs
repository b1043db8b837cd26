//! Communicators, groups, processes and Cartesian topologies (`mpi::topology`).
//!
//! ```no_run
//! use rsmpi::traits::*;
//! use rsmpi::topology::Color;
//!
//! let universe = rsmpi::initialize().unwrap();
//! let world = universe.world();
//! // even and odd ranks in two communicators
//! let half = world.split_by_color(Color::with_value(world.rank() % 2)).unwrap();
//! assert_eq!(half.size(), (world.size() + 1 - world.rank() % 2) / 2);
//! let grid = world.create_cartesian_communicator(&[world.size()], &[true], false).unwrap();
//! let (left, right) = grid.shift(0, 1);
//! ```

use crate::datatype::{Buffer, BufferMut, Count, Datatype};
use crate::error::{Error, Result};
use crate::point_to_point::Status;
use crate::progress;
use std::marker::PhantomData;

pub use crate::point_to_point::Tag;

/// A rank within a communicator.
pub type Rank = i32;
/// The key of [`Communicator::split_by_color_with_key`]: orders the new ranks.
pub type Key = i32;
/// Largest valid tag (`MPI_TAG_UB`).
pub const TAG_UB: Tag = matching::TAG_UB;
/// `MPI_PROC_NULL`: sends to it and receives from it complete at once and move nothing.
pub const PROC_NULL: Rank = -2;
/// Context ids at and above this are internal (collectives of the communicator whose
/// id is the low half).
pub(crate) const INTERNAL: u32 = 1 << 31;

/// `use rsmpi::topology::traits::*`.
pub mod traits {
    pub use super::{AsCommunicator, Communicator, Group};
}

/// The default error handler (`MPI_ERRORS_ARE_FATAL`): names the rank, the call and
/// the cause, and ends the job.
pub(crate) fn fail(call: &str, e: Error) -> ! {
    if crate::tools::checking() {
        crate::check::errors::failed(&e);
    }
    match progress::try_with(|s| s.fatal(call, &e)) {
        Ok(never) => never,
        Err(_) => panic!("rsmpi: {call}: {e}"),
    }
}

/// A communicator: a group of ranks with its own context, so that its traffic never
/// matches receives of another communicator. A small `Copy` handle; the context stays
/// valid until [`SimpleCommunicator::free`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleCommunicator {
    pub(crate) ctx: u32,
    pub(crate) rank: Rank,
    pub(crate) size: Rank,
}

/// Result of [`Communicator::compare`] (`MPI_Comm_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommunicatorRelation {
    /// The same communicator.
    Identical,
    /// Same members in the same order, different context.
    Congruent,
    /// Same members, another order.
    Similar,
    /// Anything else.
    Unequal,
}

/// The color of [`Communicator::split_by_color`]: ranks of one color form one new
/// communicator; [`Color::undefined`] joins none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Color(Option<i32>);

impl Color {
    /// `MPI_UNDEFINED`: this rank gets no new communicator.
    pub fn undefined() -> Color {
        Color(None)
    }
    /// A color; must be non-negative.
    pub fn with_value(value: i32) -> Color {
        assert!(value >= 0, "rsmpi: color {value} is negative");
        Color(Some(value))
    }
}

impl From<Option<i32>> for Color {
    fn from(c: Option<i32>) -> Color {
        c.map_or(Color::undefined(), Color::with_value)
    }
}

/// Something that stands for a communicator (`mpi::topology::AsCommunicator`): a
/// communicator itself, or a [`Process`] of one.
pub trait AsCommunicator {
    /// The communicator type.
    type Out: Communicator;
    /// The communicator.
    fn as_communicator(&self) -> &Self::Out;
}

/// The operations of every communicator (`mpi::topology::Communicator`; collectives
/// are in [`CommunicatorCollectives`](crate::collective::CommunicatorCollectives)).
pub trait Communicator {
    /// The handle of the communicator.
    #[doc(hidden)]
    fn rsmpi_comm(&self) -> SimpleCommunicator;

    /// Number of ranks (of the remote group, for inter-communicators, which rsmpi
    /// does not have).
    fn target_size(&self) -> Rank {
        self.size()
    }
    /// Number of ranks (`MPI_Comm_size`).
    fn size(&self) -> Rank {
        self.rsmpi_comm().size
    }
    /// This process's rank (`MPI_Comm_rank`).
    fn rank(&self) -> Rank {
        self.rsmpi_comm().rank
    }
    /// The process with rank `r` (send to it, receive from it, use it as a root).
    fn process_at_rank(&self, r: Rank) -> Process<'_> {
        // an invalid rank is reported by the operation that uses it
        Process {
            comm: self.rsmpi_comm(),
            rank: r,
            _borrow: PhantomData,
        }
    }
    /// Any process (`MPI_ANY_SOURCE`), for receives and probes.
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess {
            comm: self.rsmpi_comm(),
            _borrow: PhantomData,
        }
    }
    /// This process.
    fn this_process(&self) -> Process<'_> {
        self.process_at_rank(self.rank())
    }
    /// `MPI_Comm_compare`.
    fn compare(&self, other: &dyn Communicator) -> CommunicatorRelation {
        self.rsmpi_comm().relation(&other.rsmpi_comm())
    }
    /// A copy with a new context (`MPI_Comm_dup`). Collective.
    fn duplicate(&self) -> SimpleCommunicator {
        self.rsmpi_comm()
            .try_duplicate()
            .unwrap_or_else(|e| fail("dup", e))
    }
    /// `MPI_Comm_split` with the old rank as key. Collective.
    fn split_by_color(&self, color: Color) -> Option<SimpleCommunicator> {
        self.split_by_color_with_key(color, self.rank())
    }
    /// `MPI_Comm_split`: ranks with the same color form a new communicator, ordered by
    /// `key` then old rank; [`Color::undefined`] gets `None`. Collective.
    fn split_by_color_with_key(&self, color: Color, key: Key) -> Option<SimpleCommunicator> {
        self.rsmpi_comm()
            .try_split(color.0, key)
            .unwrap_or_else(|e| fail("split", e))
    }
    /// `MPI_Comm_create`: the members of `group` (a subgroup of this communicator)
    /// get a communicator of them, the others `None`. Collective over this
    /// communicator.
    fn split_by_subgroup_collective(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        let me = self.rsmpi_comm().world_rank(self.rank());
        let g = group.rsmpi_group();
        let color = g.iter().position(|&w| w == me).map(|i| (0, i as Key));
        self.rsmpi_comm()
            .try_split(color.map(|c| c.0), color.map_or(0, |c| c.1))
            .unwrap_or_else(|e| fail("comm_create", e))
    }
    /// `MPI_Comm_create_group`: like [`Self::split_by_subgroup_collective`], but only
    /// the members of `group` call it.
    fn split_by_subgroup(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        self.split_by_subgroup_with_tag(group, 0)
    }
    /// [`Self::split_by_subgroup`] with a tag that tells apart concurrent calls.
    fn split_by_subgroup_with_tag(
        &self,
        group: &dyn Group,
        tag: Tag,
    ) -> Option<SimpleCommunicator> {
        self.rsmpi_comm()
            .try_create_group(&group.rsmpi_group(), tag)
            .unwrap_or_else(|e| fail("comm_create_group", e))
    }
    /// The group of this communicator (`MPI_Comm_group`).
    fn group(&self) -> UserGroup {
        let c = self.rsmpi_comm();
        UserGroup((0..c.size).map(|r| c.world_rank(r)).collect())
    }
    /// Ends the whole job with `errorcode` (`MPI_Abort`).
    fn abort(&self, errorcode: i32) -> ! {
        progress::with(|s| {
            s.abort(
                errorcode,
                &format!("rsmpi: rank {} called abort({errorcode})", s.rank()),
            )
        })
    }
    /// Whether this is an inter-communicator: never, in rsmpi.
    fn test_inter(&self) -> bool {
        false
    }
    /// Names the communicator (`MPI_Comm_set_name`; local to this process).
    fn set_name(&self, name: &str) {
        let ctx = self.rsmpi_comm().ctx;
        progress::with(|s| s.names.insert(ctx, name.to_string()));
    }
    /// The communicator's name (`MPI_Comm_get_name`).
    fn get_name(&self) -> String {
        let ctx = self.rsmpi_comm().ctx;
        progress::with(|s| s.names.get(&ctx).cloned()).unwrap_or_else(|| match ctx {
            0 => "MPI_COMM_WORLD".into(),
            1 => "MPI_COMM_SELF".into(),
            _ => String::new(),
        })
    }
    /// A communicator with a Cartesian layout of `dims` (`MPI_Cart_create`); ranks
    /// beyond the grid get `None`. rsmpi keeps the rank order (`reorder` is allowed to
    /// do nothing). Collective.
    fn create_cartesian_communicator(
        &self,
        dims: &[Count],
        periods: &[bool],
        reorder: bool,
    ) -> Option<CartesianCommunicator> {
        let _ = reorder;
        CartesianCommunicator::create(self.rsmpi_comm(), dims, periods)
            .unwrap_or_else(|e| fail("cart_create", e))
    }
    /// The rank this process would have in a grid of `dims` (`MPI_Cart_map`), `None`
    /// if it would be outside.
    fn cartesian_map(&self, dims: &[Count], periods: &[bool]) -> Option<Rank> {
        assert_eq!(dims.len(), periods.len(), "rsmpi: one period per dimension");
        let n: i64 = dims.iter().map(|&d| d as i64).product();
        if n > self.size() as i64 {
            fail(
                "cart_map",
                Error::Request(format!(
                    "a grid of {n} ranks does not fit {} ranks",
                    self.size()
                )),
            );
        }
        (i64::from(self.rank()) < n).then_some(self.rank())
    }
    /// Bytes [`Self::pack`] needs for `incount` elements of `datatype` (`MPI_Pack_size`).
    fn pack_size<Dt>(&self, incount: Count, datatype: &Dt) -> Count
    where
        Dt: Datatype,
        Self: Sized,
    {
        (datatype.type_map().size() as i64 * i64::from(incount)) as Count
    }
    /// The buffer's data, packed (`MPI_Pack`).
    fn pack<Buf>(&self, inbuf: &Buf) -> Vec<u8>
    where
        Buf: ?Sized + Buffer,
        Self: Sized,
    {
        inbuf
            .rsmpi_send()
            .unwrap_or_else(|e| fail("pack", e))
            .into_owned()
    }
    /// Packs the buffer into `outbuf` at `position`; returns the position after it.
    fn pack_into<Buf>(&self, inbuf: &Buf, outbuf: &mut [u8], position: Count) -> Count
    where
        Buf: ?Sized + Buffer,
        Self: Sized,
    {
        let b = inbuf.rsmpi_send().unwrap_or_else(|e| fail("pack", e));
        let at = usize::try_from(position).unwrap_or(usize::MAX);
        if at.saturating_add(b.len()) > outbuf.len() {
            fail(
                "pack",
                Error::Truncated {
                    len: (at as u64).saturating_add(b.len() as u64),
                    capacity: outbuf.len() as u64,
                },
            );
        }
        outbuf[at..at + b.len()].copy_from_slice(&b);
        (at + b.len()) as Count
    }
    /// Unpacks from `inbuf` at `position` into `outbuf`; returns the position after
    /// what was read (`MPI_Unpack`).
    ///
    /// # Safety
    /// None in rsmpi (bounds are checked); `unsafe` only as in the `mpi` crate, so that
    /// code written for it compiles unchanged.
    #[allow(unsafe_code)]
    unsafe fn unpack_into<Buf>(&self, inbuf: &[u8], outbuf: &mut Buf, position: Count) -> Count
    where
        Buf: ?Sized + BufferMut,
        Self: Sized,
    {
        let at = usize::try_from(position)
            .unwrap_or(usize::MAX)
            .min(inbuf.len());
        let n = outbuf.rsmpi_capacity().min(inbuf.len() - at);
        outbuf
            .rsmpi_unpack(&inbuf[at..at + n])
            .unwrap_or_else(|e| fail("unpack", e));
        (at + n) as Count
    }
}

impl Communicator for SimpleCommunicator {
    fn rsmpi_comm(&self) -> SimpleCommunicator {
        *self
    }
}

impl AsCommunicator for SimpleCommunicator {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &SimpleCommunicator {
        self
    }
}

impl<C: Communicator + ?Sized> Communicator for &C {
    fn rsmpi_comm(&self) -> SimpleCommunicator {
        (**self).rsmpi_comm()
    }
}

impl SimpleCommunicator {
    /// `MPI_COMM_WORLD`.
    pub fn world() -> SimpleCommunicator {
        progress::with(|s| SimpleCommunicator {
            ctx: 0,
            rank: s.engine.rank() as Rank,
            size: s.engine.size() as Rank,
        })
    }

    /// `MPI_COMM_SELF`.
    pub fn self_comm() -> SimpleCommunicator {
        SimpleCommunicator {
            ctx: 1,
            rank: 0,
            size: 1,
        }
    }

    /// The same ranks on the internal context (collectives, communicator set-up).
    pub(crate) fn internal(&self) -> SimpleCommunicator {
        SimpleCommunicator {
            ctx: self.ctx | INTERNAL,
            ..*self
        }
    }

    /// World rank of rank `r`.
    pub(crate) fn world_rank(&self, r: Rank) -> u32 {
        progress::with(|s| s.world_rank(self.ctx, r))
    }

    fn relation(&self, other: &SimpleCommunicator) -> CommunicatorRelation {
        if self.ctx == other.ctx {
            return CommunicatorRelation::Identical;
        }
        let members = |c: &SimpleCommunicator| -> Vec<u32> {
            progress::with(|s| (0..c.size).map(|r| s.world_rank(c.ctx, r)).collect())
        };
        let (mut a, mut b) = (members(self), members(other));
        if a == b {
            CommunicatorRelation::Congruent
        } else {
            a.sort();
            b.sort();
            if a == b {
                CommunicatorRelation::Similar
            } else {
                CommunicatorRelation::Unequal
            }
        }
    }

    /// The world rank of `r`, `None` for `PROC_NULL`; fails for a rank out of range or
    /// a freed communicator (the sends on the per-message path check in their own
    /// visit to the library state, with [`Self::check_rank_in`]).
    pub(crate) fn check_rank(&self, r: Rank) -> Result<Option<u32>> {
        progress::try_with(|s| self.check_rank_in(s, r))?
    }

    /// `check_rank` on the library state the caller already holds (inlined: on the
    /// per-message path its `Result` would otherwise go through memory).
    #[inline(always)]
    pub(crate) fn check_rank_in(&self, s: &progress::State, r: Rank) -> Result<Option<u32>> {
        let ctx = self.ctx & !INTERNAL;
        if !s.freed.is_empty() && s.freed.contains(&ctx) {
            Err(Error::Comm(ctx))
        } else if r == PROC_NULL {
            Ok(None)
        } else if (0..self.size).contains(&r) {
            Ok(Some(s.world_rank(self.ctx, r)))
        } else {
            Err(Error::InvalidRank {
                rank: r,
                size: self.size,
            })
        }
    }

    pub(crate) fn check_live(&self) -> Result<()> {
        progress::try_with(|s| self.check_live_in(s))?
    }

    /// `check_live` on the library state the caller already holds.
    pub(crate) fn check_live_in(&self, s: &progress::State) -> Result<()> {
        let ctx = self.ctx & !INTERNAL;
        if !s.freed.is_empty() && s.freed.contains(&ctx) {
            Err(Error::Comm(ctx))
        } else {
            Ok(())
        }
    }

    /// Every member's `mine`, indexed by position in `members` (ranks of this
    /// communicator, including this rank), over the internal context.
    fn allgather_among(&self, members: &[Rank], mine: [i64; 3], tag: Tag) -> Result<Vec<[i64; 3]>> {
        use crate::point_to_point::LibTraffic;
        let inner = self.internal();
        let tag = (1 << 20) + (tag & 0xfffff);
        for &r in members.iter().filter(|&&r| r != self.rank) {
            inner.process_at_rank(r).lib_send(&mine, tag);
        }
        Ok(members
            .iter()
            .map(|&r| {
                if r == self.rank {
                    mine
                } else {
                    let mut v = [0i64; 3];
                    inner.process_at_rank(r).lib_receive_into(&mut v, tag);
                    v
                }
            })
            .collect())
    }

    /// A context id no member uses yet: the largest next free id over the members.
    fn agree_ctx(all: &[[i64; 3]]) -> u32 {
        let ctx = all.iter().map(|x| x[2]).max().unwrap_or(0) as u32;
        progress::with(|s| s.next_ctx = ctx + 1);
        ctx
    }

    fn try_duplicate(&self) -> Result<SimpleCommunicator> {
        self.check_live()?;
        let next = progress::with(|s| s.next_ctx) as i64;
        let all: Vec<Rank> = (0..self.size).collect();
        let all = self.allgather_among(&all, [0, 0, next], 0)?;
        let ctx = Self::agree_ctx(&all);
        progress::with(|s| {
            if let Some(g) = s.groups.get(&self.ctx) {
                let g = progress::Group::new(g.world.clone());
                s.groups.insert(ctx, g);
            }
        });
        Ok(SimpleCommunicator { ctx, ..*self })
    }

    /// A communicator of `members` (world ranks, in order) with context `ctx`.
    fn with_members(ctx: u32, world: Vec<u32>) -> SimpleCommunicator {
        let me = progress::with(|s| s.rank());
        let rank = world.iter().position(|&w| w == me).expect("member") as Rank;
        let size = world.len() as Rank;
        progress::with(|s| s.groups.insert(ctx, progress::Group::new(world)));
        SimpleCommunicator { ctx, rank, size }
    }

    pub(crate) fn try_split(
        &self,
        color: Option<i32>,
        key: Key,
    ) -> Result<Option<SimpleCommunicator>> {
        if let Some(c) = color {
            if c < 0 {
                return Err(Error::Request(format!("color {c} is negative")));
            }
        }
        self.check_live()?;
        let next = progress::with(|s| s.next_ctx) as i64;
        let all: Vec<Rank> = (0..self.size).collect();
        let all = self.allgather_among(&all, [color.map_or(-1, i64::from), key as i64, next], 0)?;
        let ctx = Self::agree_ctx(&all);
        let Some(c) = color else {
            return Ok(None);
        };
        let mut members: Vec<(i64, Rank)> = (0..self.size)
            .filter(|&r| all[r as usize][0] == c as i64)
            .map(|r| (all[r as usize][1], r))
            .collect();
        members.sort();
        let world = members.iter().map(|&(_, r)| self.world_rank(r)).collect();
        Ok(Some(Self::with_members(ctx, world)))
    }

    fn try_create_group(&self, group: &[u32], tag: Tag) -> Result<Option<SimpleCommunicator>> {
        self.check_live()?;
        let mine = progress::with(|s| s.rank());
        if !group.contains(&mine) {
            return Ok(None);
        }
        let members: Vec<Rank> = group
            .iter()
            .map(|&w| {
                progress::with(|s| s.comm_rank(self.ctx, w))
                    .max(0)
                    .min(self.size - 1)
            })
            .collect();
        if members
            .iter()
            .zip(group)
            .any(|(&r, &w)| self.world_rank(r) != w)
        {
            return Err(Error::Request(
                "the group is not a subgroup of the communicator".into(),
            ));
        }
        let next = progress::with(|s| s.next_ctx) as i64;
        let all = self.allgather_among(&members, [0, 0, next], tag)?;
        let ctx = Self::agree_ctx(&all);
        Ok(Some(Self::with_members(ctx, group.to_vec())))
    }

    /// Frees the communicator (`MPI_Comm_free`); any later use of it (or of a copy of
    /// this handle) fails with [`Error::Comm`]. Collective. The world and self
    /// communicators cannot be freed.
    pub fn free(self) -> Result<()> {
        use crate::collective::CommunicatorCollectives;
        self.check_live()?;
        if self.ctx < 16 {
            return Err(Error::Request(
                "the world and self communicators cannot be freed".into(),
            ));
        }
        self.barrier();
        progress::with(|s| {
            s.freed.insert(self.ctx);
            s.groups.remove(&self.ctx);
            s.names.remove(&self.ctx);
        });
        Ok(())
    }

    /// Sends `buf` to `dest`, then replaces its contents with a message from `source`
    /// (`MPI_Sendrecv_replace`).
    pub fn sendrecv_replace<B: BufferMut + Buffer + ?Sized>(
        &self,
        buf: &mut B,
        dest: Rank,
        stag: Tag,
        source: Rank,
        rtag: Tag,
    ) -> Status {
        let out = buf
            .rsmpi_send()
            .unwrap_or_else(|e| fail("sendrecv", e))
            .into_owned();
        self.sendrecv(&out[..], dest, stag, buf, source, rtag)
    }

    /// Sends `sbuf` to `dest` and receives into `rbuf` from `source`, without
    /// deadlocking against a matching `sendrecv` (`MPI_Sendrecv`).
    pub fn sendrecv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        sbuf: &S,
        dest: Rank,
        stag: Tag,
        rbuf: &mut R,
        source: Rank,
        rtag: Tag,
    ) -> Status {
        use crate::point_to_point::{Destination, Source};
        crate::request::scope(|sc| {
            let r = self
                .process_at_rank(source)
                .immediate_receive_into_with_tag(sc, rbuf, rtag);
            self.process_at_rank(dest).send_with_tag(sbuf, stag);
            r.wait()
        })
    }
}

/// One process of a communicator (`mpi::topology::Process`).
#[derive(Clone, Copy, Debug)]
pub struct Process<'a> {
    pub(crate) comm: SimpleCommunicator,
    pub(crate) rank: Rank,
    _borrow: PhantomData<&'a ()>,
}

impl Process<'_> {
    /// The rank of this process in its communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// Whether it is the calling process.
    pub fn is_self(&self) -> bool {
        self.rank == self.comm.rank
    }
}

impl AsCommunicator for Process<'_> {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &SimpleCommunicator {
        &self.comm
    }
}

/// Any process of a communicator (`MPI_ANY_SOURCE`; `mpi::topology::AnyProcess`).
#[derive(Clone, Copy, Debug)]
pub struct AnyProcess<'a> {
    pub(crate) comm: SimpleCommunicator,
    _borrow: PhantomData<&'a ()>,
}

impl AsCommunicator for AnyProcess<'_> {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &SimpleCommunicator {
        &self.comm
    }
}

/// Result of [`Group::compare`] (`MPI_Group_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRelation {
    /// Same members, same order.
    Identical,
    /// Same members, another order.
    Similar,
    /// Anything else.
    Unequal,
}

/// An ordered set of processes (`MPI_Group`; `mpi::topology::Group`).
pub trait Group {
    /// The members as world ranks, in group order.
    #[doc(hidden)]
    fn rsmpi_group(&self) -> Vec<u32>;

    /// `MPI_Group_union`: this group's members, then the other's not in it.
    fn union(&self, other: &dyn Group) -> UserGroup {
        let mut m = self.rsmpi_group();
        for w in other.rsmpi_group() {
            if !m.contains(&w) {
                m.push(w);
            }
        }
        UserGroup(m)
    }
    /// `MPI_Group_intersection`: this group's members that are in the other, in this
    /// group's order.
    fn intersection(&self, other: &dyn Group) -> UserGroup {
        let o = other.rsmpi_group();
        UserGroup(
            self.rsmpi_group()
                .into_iter()
                .filter(|w| o.contains(w))
                .collect(),
        )
    }
    /// `MPI_Group_difference`: this group's members not in the other.
    fn difference(&self, other: &dyn Group) -> UserGroup {
        let o = other.rsmpi_group();
        UserGroup(
            self.rsmpi_group()
                .into_iter()
                .filter(|w| !o.contains(w))
                .collect(),
        )
    }
    /// `MPI_Group_incl`: the members at `ranks`, in that order.
    fn include(&self, ranks: &[Rank]) -> UserGroup {
        let m = self.rsmpi_group();
        UserGroup(
            ranks
                .iter()
                .map(|&r| {
                    *usize::try_from(r)
                        .ok()
                        .and_then(|i| m.get(i))
                        .unwrap_or_else(|| {
                            fail(
                                "group_incl",
                                Error::InvalidRank {
                                    rank: r,
                                    size: m.len() as Rank,
                                },
                            )
                        })
                })
                .collect(),
        )
    }
    /// `MPI_Group_excl`: the members not at `ranks`.
    fn exclude(&self, ranks: &[Rank]) -> UserGroup {
        let m = self.rsmpi_group();
        if let Some(&r) = ranks.iter().find(|&&r| !(0..m.len() as Rank).contains(&r)) {
            fail(
                "group_excl",
                Error::InvalidRank {
                    rank: r,
                    size: m.len() as Rank,
                },
            );
        }
        UserGroup(
            m.iter()
                .enumerate()
                .filter(|(i, _)| !ranks.contains(&(*i as Rank)))
                .map(|(_, &w)| w)
                .collect(),
        )
    }
    /// Number of members.
    fn size(&self) -> Rank {
        self.rsmpi_group().len() as Rank
    }
    /// This process's rank in the group, `None` if it is not a member.
    fn rank(&self) -> Option<Rank> {
        let me = progress::with(|s| s.rank());
        self.rsmpi_group()
            .iter()
            .position(|&w| w == me)
            .map(|i| i as Rank)
    }
    /// The rank in `other` of the process with `rank` in this group
    /// (`MPI_Group_translate_ranks`), `None` if it is not in `other`.
    fn translate_rank(&self, rank: Rank, other: &dyn Group) -> Option<Rank> {
        let w = *self.rsmpi_group().get(usize::try_from(rank).ok()?)?;
        other
            .rsmpi_group()
            .iter()
            .position(|&x| x == w)
            .map(|i| i as Rank)
    }
    /// [`Self::translate_rank`] for several ranks.
    fn translate_ranks(&self, ranks: &[Rank], other: &dyn Group) -> Vec<Option<Rank>> {
        ranks
            .iter()
            .map(|&r| self.translate_rank(r, other))
            .collect()
    }
    /// `MPI_Group_compare`.
    fn compare(&self, other: &dyn Group) -> GroupRelation {
        let (a, b) = (self.rsmpi_group(), other.rsmpi_group());
        if a == b {
            GroupRelation::Identical
        } else {
            let (mut a, mut b) = (a, b);
            a.sort();
            b.sort();
            if a == b {
                GroupRelation::Similar
            } else {
                GroupRelation::Unequal
            }
        }
    }
}

/// A group (`mpi::topology::UserGroup`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserGroup(Vec<u32>);

impl Group for UserGroup {
    fn rsmpi_group(&self) -> Vec<u32> {
        self.0.clone()
    }
}

/// A predefined group: [`SystemGroup::empty`] (`MPI_GROUP_EMPTY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SystemGroup;

impl SystemGroup {
    /// The empty group.
    pub fn empty() -> SystemGroup {
        SystemGroup
    }
}

impl Group for SystemGroup {
    fn rsmpi_group(&self) -> Vec<u32> {
        Vec::new()
    }
}

/// Dimensions, periodicity and this rank's coordinates of a Cartesian communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CartesianLayout {
    /// Ranks along each dimension.
    pub dims: Vec<Count>,
    /// Whether each dimension wraps around.
    pub periods: Vec<bool>,
    /// This rank's coordinates.
    pub coords: Vec<Count>,
}

/// A communicator whose ranks form a grid (`MPI_Cart_*`;
/// `mpi::topology::CartesianCommunicator`). Ranks are laid out in row-major order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CartesianCommunicator {
    comm: SimpleCommunicator,
    dims: Vec<Count>,
    periods: Vec<bool>,
}

impl Communicator for CartesianCommunicator {
    fn rsmpi_comm(&self) -> SimpleCommunicator {
        self.comm
    }
}

impl AsCommunicator for CartesianCommunicator {
    type Out = CartesianCommunicator;
    fn as_communicator(&self) -> &CartesianCommunicator {
        self
    }
}

impl std::ops::Deref for CartesianCommunicator {
    type Target = SimpleCommunicator;
    fn deref(&self) -> &SimpleCommunicator {
        &self.comm
    }
}

impl CartesianCommunicator {
    fn create(
        comm: SimpleCommunicator,
        dims: &[Count],
        periods: &[bool],
    ) -> Result<Option<CartesianCommunicator>> {
        if dims.len() != periods.len() {
            return Err(Error::Request("one period per dimension".into()));
        }
        if dims.iter().any(|&d| d <= 0) {
            return Err(Error::Request(format!(
                "dimensions {dims:?} must be positive"
            )));
        }
        let n: i64 = dims.iter().map(|&d| d as i64).product();
        if n > comm.size as i64 {
            return Err(Error::Request(format!(
                "a grid of {n} ranks does not fit a communicator of {}",
                comm.size
            )));
        }
        let color = (i64::from(comm.rank) < n).then_some(0);
        Ok(comm
            .try_split(color, comm.rank)?
            .map(|c| CartesianCommunicator {
                comm: c,
                dims: dims.to_vec(),
                periods: periods.to_vec(),
            }))
    }

    /// Number of dimensions (`MPI_Cartdim_get`).
    pub fn num_dimensions(&self) -> Count {
        self.dims.len() as Count
    }

    /// Dimensions, periods and this rank's coordinates (`MPI_Cart_get`).
    pub fn get_layout(&self) -> CartesianLayout {
        CartesianLayout {
            dims: self.dims.clone(),
            periods: self.periods.clone(),
            coords: self.rank_to_coordinates(self.comm.rank),
        }
    }

    /// [`Self::get_layout`] into slices of `num_dimensions` entries.
    pub fn get_layout_into(&self, dims: &mut [Count], periods: &mut [bool], coords: &mut [Count]) {
        let l = self.get_layout();
        dims.copy_from_slice(&l.dims);
        periods.copy_from_slice(&l.periods);
        coords.copy_from_slice(&l.coords);
    }

    /// The rank at `coords` (`MPI_Cart_rank`); periodic dimensions wrap around.
    pub fn coordinates_to_rank(&self, coords: &[Count]) -> Rank {
        assert_eq!(
            coords.len(),
            self.dims.len(),
            "rsmpi: one coordinate per dimension"
        );
        let mut r: i64 = 0;
        for ((&c, &d), &p) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let c = if p {
                c.rem_euclid(d)
            } else if (0..d).contains(&c) {
                c
            } else {
                fail(
                    "cart_rank",
                    Error::Request(format!(
                        "coordinate {c} outside 0..{d} of a non-periodic dimension"
                    )),
                )
            };
            r = r * d as i64 + c as i64;
        }
        r as Rank
    }

    /// The coordinates of `rank` (`MPI_Cart_coords`).
    pub fn rank_to_coordinates(&self, rank: Rank) -> Vec<Count> {
        if !(0..self.comm.size).contains(&rank) {
            fail(
                "cart_coords",
                Error::InvalidRank {
                    rank,
                    size: self.comm.size,
                },
            );
        }
        let mut c = vec![0; self.dims.len()];
        let mut r = rank;
        for i in (0..self.dims.len()).rev() {
            c[i] = r % self.dims[i];
            r /= self.dims[i];
        }
        c
    }

    /// [`Self::rank_to_coordinates`] into a slice.
    pub fn rank_to_coordinates_into(&self, rank: Rank, coords: &mut [Count]) {
        coords.copy_from_slice(&self.rank_to_coordinates(rank));
    }

    /// The neighbours `displacement` away along `dimension` (`MPI_Cart_shift`):
    /// (source, destination), `None` past the edge of a non-periodic dimension.
    pub fn shift(&self, dimension: Count, displacement: Count) -> (Option<Rank>, Option<Rank>) {
        let d = usize::try_from(dimension)
            .ok()
            .filter(|&d| d < self.dims.len())
            .unwrap_or_else(|| {
                fail(
                    "cart_shift",
                    Error::Request(format!("dimension {dimension} out of range")),
                )
            });
        let me = self.rank_to_coordinates(self.comm.rank);
        let at = |off: Count| -> Option<Rank> {
            let mut c = me.clone();
            c[d] += off;
            if !self.periods[d] && !(0..self.dims[d]).contains(&c[d]) {
                return None;
            }
            Some(self.coordinates_to_rank(&c))
        };
        (at(-displacement), at(displacement))
    }

    /// The sub-grids that keep the dimensions where `retain` is true (`MPI_Cart_sub`).
    /// Collective.
    pub fn subgroup(&self, retain: &[bool]) -> CartesianCommunicator {
        assert_eq!(
            retain.len(),
            self.dims.len(),
            "rsmpi: one flag per dimension"
        );
        let me = self.rank_to_coordinates(self.comm.rank);
        // the color: coordinates along the dropped dimensions; the key: along the kept
        let (mut color, mut key) = (0i64, 0i64);
        for i in 0..self.dims.len() {
            if retain[i] {
                key = key * self.dims[i] as i64 + me[i] as i64;
            } else {
                color = color * self.dims[i] as i64 + me[i] as i64;
            }
        }
        let comm = self
            .comm
            .try_split(Some(color as i32), key as Key)
            .unwrap_or_else(|e| fail("cart_sub", e))
            .expect("every rank has a color");
        let keep = |v: &[Count]| -> Vec<Count> {
            v.iter()
                .zip(retain)
                .filter(|(_, &k)| k)
                .map(|(&x, _)| x)
                .collect()
        };
        CartesianCommunicator {
            comm,
            dims: keep(&self.dims),
            periods: self
                .periods
                .iter()
                .zip(retain)
                .filter(|(_, &k)| k)
                .map(|(&p, _)| p)
                .collect(),
        }
    }

    /// The underlying communicator.
    pub fn as_simple(&self) -> SimpleCommunicator {
        self.comm
    }
}

/// Balanced dimensions for `nnodes` ranks over `dims.len()` dimensions
/// (`MPI_Dims_create`): entries of `dims` that are non-zero are kept.
pub fn dims_create(nnodes: Count, dims: &mut [Count]) -> Result<()> {
    let fixed: i64 = dims.iter().filter(|&&d| d > 0).map(|&d| d as i64).product();
    if fixed == 0 || i64::from(nnodes) % fixed != 0 {
        return Err(Error::Request(format!(
            "{nnodes} ranks cannot be split over the fixed dimensions {dims:?}"
        )));
    }
    let free: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == 0).collect();
    let mut rest = i64::from(nnodes) / fixed;
    let mut out = vec![1i64; free.len()];
    // largest prime factors first, each to the currently smallest dimension
    let mut factors = Vec::new();
    let mut p = 2;
    while rest > 1 {
        while rest % p == 0 {
            factors.push(p);
            rest /= p;
        }
        p += 1;
    }
    if free.is_empty() && !factors.is_empty() {
        return Err(Error::Request("no free dimension left".into()));
    }
    for f in factors.into_iter().rev() {
        if let Some(m) = out.iter_mut().min() {
            *m *= f;
        }
    }
    out.sort_unstable_by(|a, b| b.cmp(a));
    for (i, v) in free.into_iter().zip(out) {
        dims[i] = v as Count;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn dims_create() {
        let mut d = [0, 0];
        super::dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 3, 0];
        super::dims_create(24, &mut d).unwrap();
        assert_eq!(d, [4, 3, 2]);
        let mut d = [5, 0];
        assert!(super::dims_create(12, &mut d).is_err());
    }
}

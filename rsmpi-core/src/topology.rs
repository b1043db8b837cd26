//! Communicators, processes, and the point-to-point calls on them.

use crate::datatype::send_bytes;
use crate::datatype::{Buffer, BufferMut, Equivalence};
use crate::error::{Error, Result};
use crate::progress::{self, Key, RecvDst, SendSrc};
use crate::request::{self, finish, Request, Scope};
use matching::{RecvSpec, SendMode, SendSpec, Source as Src, TagSel};
use transport::mem::RegionId;

/// A rank within a communicator.
pub type Rank = i32;
/// A message tag.
pub type Tag = i32;
/// Largest valid tag (`MPI_TAG_UB`).
pub const TAG_UB: Tag = matching::TAG_UB;
/// `MPI_PROC_NULL`: sends to it and receives from it complete at once and move nothing.
pub const PROC_NULL: Rank = -2;
/// Context ids at and above this are internal (collectives of the communicator whose
/// id is the low half).
pub(crate) const INTERNAL: u32 = 1 << 31;

/// What a receive or probe reports (`MPI_Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub(crate) source: Rank,
    pub(crate) tag: Tag,
    pub(crate) len: u64,
    pub(crate) cancelled: bool,
}

impl Status {
    /// The rank that sent the message.
    pub fn source_rank(&self) -> Rank {
        self.source
    }
    /// The message's tag.
    pub fn tag(&self) -> Tag {
        self.tag
    }
    /// The message length in bytes.
    pub fn count_bytes(&self) -> u64 {
        self.len
    }
    /// The number of `T` elements received (`MPI_Get_count`).
    pub fn count<T: Equivalence>(&self) -> usize {
        (self.len / std::mem::size_of::<T>().max(1) as u64) as usize
    }
    /// Whether a cancel won (`MPI_Test_cancelled`).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
    fn proc_null() -> Status {
        Status {
            source: PROC_NULL,
            tag: -1,
            len: 0,
            cancelled: false,
        }
    }
}

/// The default error handler (`MPI_ERRORS_ARE_FATAL`): names the rank, the call and
/// the cause, and ends the job.
pub(crate) fn fail(call: &str, e: Error) -> ! {
    match progress::try_with(|s| s.fatal(call, &e)) {
        Ok(never) => never,
        Err(_) => panic!("rsmpi: {call}: {e}"),
    }
}

/// A communicator: a group of ranks with its own context, so that its traffic never
/// matches receives of another communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleCommunicator {
    ctx: u32,
    rank: Rank,
    size: Rank,
}

/// Result of [`SimpleCommunicator::compare`] (`MPI_Comm_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommunicatorRelation {
    Identical,
    Congruent,
    Similar,
    Unequal,
}

impl SimpleCommunicator {
    pub(crate) fn world() -> SimpleCommunicator {
        progress::with(|s| SimpleCommunicator {
            ctx: 0,
            rank: s.engine.rank() as Rank,
            size: s.engine.size() as Rank,
        })
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// Number of ranks.
    pub fn size(&self) -> Rank {
        self.size
    }
    /// The process with rank `r` (send to it, receive from it).
    pub fn process_at_rank(&self, r: Rank) -> Process {
        Process {
            comm: *self,
            rank: r,
        }
    }
    /// Any process (`MPI_ANY_SOURCE`), for receives and probes.
    pub fn any_process(&self) -> AnyProcess {
        AnyProcess { comm: *self }
    }
    /// A copy with a new context (`MPI_Comm_dup`). Collective.
    pub fn duplicate(&self) -> SimpleCommunicator {
        self.check_live().unwrap_or_else(|e| fail("dup", e));
        let next = progress::with(|s| s.next_ctx) as i64;
        let all = self.allgather([0, 0, next]);
        let ctx = self.agree_ctx(&all);
        progress::with(|s| {
            if let Some(g) = s.groups.get(&self.ctx) {
                let g = progress::Group::new(g.world.clone());
                s.groups.insert(ctx, g);
            }
        });
        SimpleCommunicator { ctx, ..*self }
    }
    /// `MPI_Comm_compare`.
    pub fn compare(&self, other: &SimpleCommunicator) -> CommunicatorRelation {
        if self.ctx == other.ctx {
            return CommunicatorRelation::Identical;
        }
        let members = |c: &SimpleCommunicator| -> Vec<u32> {
            progress::with(|s| (0..c.size).map(|r| s.world_rank(c.ctx, r)).collect())
        };
        let (a, b) = (members(self), members(other));
        if a == b {
            CommunicatorRelation::Congruent
        } else {
            let (mut a, mut b) = (a, b);
            a.sort();
            b.sort();
            if a == b {
                CommunicatorRelation::Similar
            } else {
                CommunicatorRelation::Unequal
            }
        }
    }
    /// Blocks until every rank of the communicator has called it (`MPI_Barrier`).
    pub fn barrier(&self) {
        let n = self.size;
        let mut k = 1;
        let mut round = 0;
        let inner = SimpleCommunicator {
            ctx: self.ctx | INTERNAL,
            ..*self
        };
        while k < n {
            let to = inner.process_at_rank((self.rank + k) % n);
            let from = inner.process_at_rank((self.rank - k + n) % n);
            let mut token = [0u8; 0];
            request::scope(|sc| {
                let r = from.immediate_receive_into_with_tag(sc, &mut token[..], round);
                to.send_with_tag(&[0u8; 0][..], round);
                r.wait();
            });
            k *= 2;
            round += 1;
        }
    }

    /// The world rank of `r`, `None` for `PROC_NULL`; fails for a rank out of range or
    /// a freed communicator.
    fn check_rank(&self, r: Rank) -> Result<Option<u32>> {
        progress::try_with(|s| self.check_rank_in(s, r))?
    }

    /// `check_rank` on the library state the caller already holds.
    fn check_rank_in(&self, s: &progress::State, r: Rank) -> Result<Option<u32>> {
        let ctx = self.ctx & !INTERNAL;
        if s.freed.contains(&ctx) {
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

    fn check_live(&self) -> Result<()> {
        let ctx = self.ctx & !INTERNAL;
        if progress::try_with(|s| s.freed.contains(&ctx))? {
            Err(Error::Comm(ctx))
        } else {
            Ok(())
        }
    }

    /// `MPI_COMM_SELF`.
    pub(crate) fn self_comm() -> SimpleCommunicator {
        SimpleCommunicator {
            ctx: 1,
            rank: 0,
            size: 1,
        }
    }

    /// Every rank's `mine`, indexed by rank (an all-gather over the internal context).
    fn allgather(&self, mine: [i64; 3]) -> Vec<[i64; 3]> {
        const TAG: Tag = 1 << 20;
        let inner = SimpleCommunicator {
            ctx: self.ctx | INTERNAL,
            ..*self
        };
        for r in (0..self.size).filter(|&r| r != self.rank) {
            inner.process_at_rank(r).send_with_tag(&mine, TAG);
        }
        (0..self.size)
            .map(|r| {
                if r == self.rank {
                    mine
                } else {
                    inner.process_at_rank(r).receive_with_tag::<[i64; 3]>(TAG).0
                }
            })
            .collect()
    }

    /// A context id no member uses yet: the largest next free id over the members.
    fn agree_ctx(&self, all: &[[i64; 3]]) -> u32 {
        let ctx = all.iter().map(|x| x[2]).max().unwrap_or(0) as u32;
        progress::with(|s| s.next_ctx = ctx + 1);
        ctx
    }

    /// Splits the communicator by `color` (`MPI_Comm_split`): ranks with the same color
    /// form a new communicator, ordered by `key` then old rank; `None` as color
    /// (`MPI_UNDEFINED`) joins none and gets `None`. Collective.
    pub fn split_by_color_with_key(
        &self,
        color: Option<i32>,
        key: i32,
    ) -> Option<SimpleCommunicator> {
        if let Some(c) = color {
            if c < 0 {
                fail("split", Error::Request(format!("color {c} is negative")));
            }
        }
        self.check_live().unwrap_or_else(|e| fail("split", e));
        let next = progress::with(|s| s.next_ctx) as i64;
        let all = self.allgather([color.map_or(-1, i64::from), key as i64, next]);
        let ctx = self.agree_ctx(&all);
        let c = color? as i64;
        let mut members: Vec<(i64, Rank)> = (0..self.size)
            .filter(|&r| all[r as usize][0] == c)
            .map(|r| (all[r as usize][1], r))
            .collect();
        members.sort();
        let world: Vec<u32> = progress::with(|s| {
            members
                .iter()
                .map(|&(_, r)| s.world_rank(self.ctx, r))
                .collect()
        });
        let rank = members
            .iter()
            .position(|&(_, r)| r == self.rank)
            .expect("member") as Rank;
        let size = world.len() as Rank;
        progress::with(|s| s.groups.insert(ctx, progress::Group::new(world)));
        Some(SimpleCommunicator { ctx, rank, size })
    }

    /// `MPI_Comm_split` with the old rank as key.
    pub fn split_by_color(&self, color: Option<i32>) -> Option<SimpleCommunicator> {
        self.split_by_color_with_key(color, self.rank)
    }

    /// Frees the communicator (`MPI_Comm_free`); any later use of it (or of a copy of
    /// this handle) fails with [`Error::Comm`]. Collective. The world and self
    /// communicators cannot be freed.
    pub fn free(self) -> Result<()> {
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
        });
        Ok(())
    }
}

fn check_tag(t: Tag) -> Result<()> {
    if t < 0 {
        Err(Error::InvalidTag(t))
    } else {
        Ok(())
    }
}

/// One process of a communicator.
#[derive(Clone, Copy, Debug)]
pub struct Process {
    comm: SimpleCommunicator,
    rank: Rank,
}

/// Any process of a communicator (`MPI_ANY_SOURCE`).
#[derive(Clone, Copy, Debug)]
pub struct AnyProcess {
    comm: SimpleCommunicator,
}

/// The data of a send: a lent buffer, or packed elements the library keeps.
enum SendArg {
    Region(RegionId),
    Packed(Vec<u8>),
}

fn start_send(ctx: u32, dest: u32, tag: Tag, arg: SendArg, mode: SendMode) -> Result<Key> {
    progress::with(|s| {
        let src = match (arg, mode) {
            (SendArg::Region(r), SendMode::Buffered) => {
                SendSrc::Owned(s.regions.slice(r).expect("lent").to_vec())
            }
            (SendArg::Packed(v), SendMode::Buffered) => SendSrc::Owned(v),
            (SendArg::Region(r), _) => SendSrc::Region(r),
            (SendArg::Packed(v), _) => SendSrc::Packed(v),
        };
        let (addr, len) = match &src {
            SendSrc::Region(r) => (
                s.regions.addr(*r).expect("lent"),
                s.regions.len(*r).expect("lent"),
            ),
            SendSrc::Owned(v) | SendSrc::Packed(v) => (v.as_ptr() as usize, v.len()),
        };
        let buf = s.transport.expose(addr, len);
        let spec = SendSpec {
            dest,
            tag,
            ctx,
            len: len as u64,
            mode,
            buf: progress::to_matching(buf),
        };
        let id = s.engine.start_send(spec)?;
        if let SendSrc::Region(r) = &src {
            s.by_region.insert(*r, Key::Send(id));
        }
        s.send_src.insert(id, src);
        s.run_outputs();
        Ok(Key::Send(id))
    })
}

fn start_recv(ctx: u32, source: Src, tag: TagSel, dst: RecvDst) -> Result<Key> {
    progress::with(|s| {
        let mut dst = dst;
        let bytes = dst.bytes(&mut s.regions).expect("lent mutably");
        let (addr, len) = (bytes.as_mut_ptr() as usize, bytes.len());
        let buf = s.transport.expose(addr, len);
        let spec = RecvSpec {
            source,
            tag,
            ctx,
            capacity: len as u64,
            buf: Some(progress::to_matching(buf)),
        };
        let id = s.engine.post_recv(spec)?;
        s.by_region.insert(dst.region(), Key::Recv(id));
        s.recv_dst.insert(id, dst);
        s.run_outputs();
        Ok(Key::Recv(id))
    })
}

/// Where a receive into `bytes` (with an optional datatype layout) lands.
fn recv_dst(region: RegionId, layout: Option<(&crate::Datatype, usize)>) -> Result<RecvDst> {
    match layout {
        Some((dt, n)) if !dt.is_contiguous(n) => {
            let tmp = vec![0u8; dt.size() as usize * n];
            Ok(RecvDst::Packed {
                tmp,
                region,
                datatype: dt.clone(),
                count: n,
            })
        }
        _ => Ok(RecvDst::Region(region)),
    }
}

fn blocking_send<B: Buffer + ?Sized>(p: &Process, buf: &B, tag: Tag, mode: SendMode) -> Result<()> {
    let bytes = send_bytes(buf);
    // one visit to the library state: check the rank and the tag, try the fast path
    let dest = progress::try_with(|s| -> Result<Option<u32>> {
        let Some(dest) = p.comm.check_rank_in(s, p.rank)? else {
            return Ok(None); // PROC_NULL
        };
        check_tag(tag)?;
        if let (SendMode::Standard, Ok(b)) = (mode, &bytes) {
            if s.send_now(p.comm.ctx, dest, tag, b)? {
                return Ok(None); // sent and complete
            }
        }
        Ok(Some(dest))
    })??;
    let Some(dest) = dest else {
        return Ok(());
    };
    let bytes = bytes?;
    transport::mem::lend(&progress::HOST, &bytes, |region| {
        let key = start_send(p.comm.ctx, dest, tag, SendArg::Region(region), mode)?;
        finish(progress::wait(key), 0, 0, 0).map(|_| ())
    })
}

fn blocking_recv<B: BufferMut + ?Sized>(
    comm: &SimpleCommunicator,
    src: Src,
    tag: TagSel,
    buf: &mut B,
) -> Result<Status> {
    let elem = buf.elem_size();
    let layout = buf.layout().map(|(d, n)| (d.clone(), n));
    let bytes = buf.as_bytes_mut();
    let cap = match &layout {
        Some((d, n)) => d.size() * *n as u64,
        None => bytes.len() as u64,
    };
    transport::mem::lend_mut(&progress::HOST, bytes, |region| {
        let dst = recv_dst(region, layout.as_ref().map(|(d, n)| (d, *n)))?;
        let key = start_recv(comm.ctx, src, tag, dst)?;
        finish(progress::wait(key), cap, elem, comm.ctx)
    })
}

fn tagsel(tag: Option<Tag>) -> Result<TagSel> {
    match tag {
        None => Ok(TagSel::Any),
        Some(t) => check_tag(t).map(|_| TagSel::Tag(t)),
    }
}

/// The receive side, shared by [`Process`] and [`AnyProcess`].
macro_rules! receive_methods {
    () => {
        /// Receives into `buf` with any tag; returns the status.
        pub fn receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Status {
            self.try_receive_into_tagged(buf, None)
                .unwrap_or_else(|e| fail("receive", e))
        }
        /// Receives into `buf` a message with `tag`.
        pub fn receive_into_with_tag<B: BufferMut + ?Sized>(
            &self,
            buf: &mut B,
            tag: Tag,
        ) -> Status {
            self.try_receive_into_tagged(buf, Some(tag))
                .unwrap_or_else(|e| fail("receive", e))
        }
        /// [`Self::receive_into`] returning errors (truncation, bad rank or tag).
        pub fn try_receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<Status> {
            self.try_receive_into_tagged(buf, None)
        }
        /// [`Self::receive_into_with_tag`] returning errors.
        pub fn try_receive_into_with_tag<B: BufferMut + ?Sized>(
            &self,
            buf: &mut B,
            tag: Tag,
        ) -> Result<Status> {
            self.try_receive_into_tagged(buf, Some(tag))
        }
        /// Receives one value.
        pub fn receive<T: Equivalence>(&self) -> (T, Status) {
            let mut v = T::zeroed();
            let st = self.receive_into(&mut v);
            (v, st)
        }
        /// Receives one value with `tag`.
        pub fn receive_with_tag<T: Equivalence>(&self, tag: Tag) -> (T, Status) {
            let mut v = T::zeroed();
            let st = self.receive_into_with_tag(&mut v, tag);
            (v, st)
        }
        /// Receives a message of any length into a new vector.
        pub fn receive_vec<T: Equivalence>(&self) -> (Vec<T>, Status) {
            self.try_receive_vec_tagged(None)
                .unwrap_or_else(|e| fail("receive_vec", e))
        }
        /// Receives a message with `tag` of any length into a new vector.
        pub fn receive_vec_with_tag<T: Equivalence>(&self, tag: Tag) -> (Vec<T>, Status) {
            self.try_receive_vec_tagged(Some(tag))
                .unwrap_or_else(|e| fail("receive_vec", e))
        }
        /// [`Self::receive_vec`] returning errors.
        pub fn try_receive_vec<T: Equivalence>(&self) -> Result<(Vec<T>, Status)> {
            self.try_receive_vec_tagged(None)
        }
        /// Waits for a matching message without receiving it (`MPI_Probe`).
        pub fn probe(&self) -> Status {
            self.probe_tagged(None).unwrap_or_else(|e| fail("probe", e))
        }
        /// Waits for a matching message with `tag` (`MPI_Probe`).
        pub fn probe_with_tag(&self, tag: Tag) -> Status {
            self.probe_tagged(Some(tag))
                .unwrap_or_else(|e| fail("probe", e))
        }
        /// `MPI_Iprobe`.
        pub fn immediate_probe(&self) -> Option<Status> {
            self.iprobe_tagged(None)
                .unwrap_or_else(|e| fail("iprobe", e))
        }
        /// `MPI_Iprobe` with a tag.
        pub fn immediate_probe_with_tag(&self, tag: Tag) -> Option<Status> {
            self.iprobe_tagged(Some(tag))
                .unwrap_or_else(|e| fail("iprobe", e))
        }
        /// Waits for a matching message and takes it, so that only the returned
        /// [`Message`] can receive it (`MPI_Mprobe`).
        pub fn matched_probe(&self) -> (Message, Status) {
            self.mprobe_tagged(None)
                .unwrap_or_else(|e| fail("mprobe", e))
        }
        /// `MPI_Improbe`: takes a matching message if one is there, without waiting.
        pub fn immediate_matched_probe_with_tag(&self, tag: Tag) -> Option<(Message, Status)> {
            self.improbe_tagged(Some(tag))
                .unwrap_or_else(|e| fail("improbe", e))
        }

        /// `MPI_Improbe` with any tag.
        pub fn immediate_matched_probe(&self) -> Option<(Message, Status)> {
            self.improbe_tagged(None)
                .unwrap_or_else(|e| fail("improbe", e))
        }

        /// `MPI_Mprobe` with a tag.
        pub fn matched_probe_with_tag(&self, tag: Tag) -> (Message, Status) {
            self.mprobe_tagged(Some(tag))
                .unwrap_or_else(|e| fail("mprobe", e))
        }
        /// Starts a receive into `buf`, completed by the returned request.
        pub fn immediate_receive_into<'s, 'e, B: BufferMut + ?Sized>(
            &self,
            scope: &'s Scope<'s, 'e>,
            buf: &'s mut B,
        ) -> Request<'s> {
            self.try_immediate_receive_into_tagged(scope, buf, None)
                .unwrap_or_else(|e| fail("irecv", e))
        }
        /// Starts a receive into `buf` of a message with `tag`.
        pub fn immediate_receive_into_with_tag<'s, 'e, B: BufferMut + ?Sized>(
            &self,
            scope: &'s Scope<'s, 'e>,
            buf: &'s mut B,
            tag: Tag,
        ) -> Request<'s> {
            self.try_immediate_receive_into_tagged(scope, buf, Some(tag))
                .unwrap_or_else(|e| fail("irecv", e))
        }

        /// A persistent receive into `buf` (`MPI_Recv_init`); start it with
        /// [`request::Persistent::start`].
        pub fn receive_init<'s, 'e, B: BufferMut + ?Sized>(
            &self,
            scope: &'s Scope<'s, 'e>,
            buf: &'s mut B,
            tag: Option<Tag>,
        ) -> request::Persistent<'s> {
            let (src, tg) = match (self.source(), tagsel(tag)) {
                (Ok(s), Ok(t)) => (s, t),
                (Err(e), _) | (_, Err(e)) => fail("recv_init", e),
            };
            let elem = buf.elem_size();
            let bytes = buf.as_bytes_mut();
            let cap = bytes.len() as u64;
            let region = scope.lend_mut(bytes);
            let ctx = self.comm.ctx;
            let start = move || -> Result<Request<'s>> {
                let Some(src) = src else {
                    return Ok(done_request(None));
                };
                let key = start_recv(ctx, src, tg, RecvDst::Region(region))?;
                Ok(Request {
                    key,
                    capacity: cap,
                    elem,
                    ctx,
                    _scope: std::marker::PhantomData,
                })
            };
            request::Persistent {
                start: Box::new(start),
                active: None,
                region,
            }
        }

        /// [`Self::immediate_receive_into_with_tag`] returning errors (`tag` `None` =
        /// any tag).
        pub fn try_immediate_receive_into<'s, 'e, B: BufferMut + ?Sized>(
            &self,
            scope: &'s Scope<'s, 'e>,
            buf: &'s mut B,
            tag: Option<Tag>,
        ) -> Result<Request<'s>> {
            self.try_immediate_receive_into_tagged(scope, buf, tag)
        }

        /// [`Self::probe_with_tag`] returning errors (`tag` `None` = any tag).
        pub fn try_probe(&self, tag: Option<Tag>) -> Result<Status> {
            self.probe_tagged(tag)
        }

        fn try_receive_vec_tagged<T: Equivalence>(
            &self,
            tag: Option<Tag>,
        ) -> Result<(Vec<T>, Status)> {
            let (msg, st) = self.mprobe_tagged(tag)?;
            let size = std::mem::size_of::<T>();
            if size > 0 && st.len % size as u64 != 0 {
                return Err(Error::Count { len: st.len, size });
            }
            let mut v = vec![T::zeroed(); (st.len as usize).checked_div(size).unwrap_or(0)];
            let st = msg.try_receive_into(&mut v[..])?;
            Ok((v, st))
        }

        fn probe_tagged(&self, tag: Option<Tag>) -> Result<Status> {
            let mut backoff = progress::Backoff::new();
            loop {
                if let Some(s) = self.iprobe_tagged(tag)? {
                    return Ok(s);
                }
                backoff.idle();
            }
        }

        fn mprobe_tagged(&self, tag: Option<Tag>) -> Result<(Message, Status)> {
            let (src, tag) = (self.source()?, tagsel(tag)?);
            let Some(src) = src else {
                return Ok((
                    Message {
                        id: None,
                        ctx: self.comm.ctx,
                    },
                    Status::proc_null(),
                ));
            };
            let ctx = self.comm.ctx;
            let mut backoff = progress::Backoff::new();
            loop {
                let got = progress::with(|s| {
                    s.progress();
                    s.engine.mprobe(src, tag, ctx)
                });
                if let Some((id, env)) = got {
                    let source = progress::with(|s| s.comm_rank(ctx, env.source));
                    let st = Status {
                        source,
                        tag: env.tag,
                        len: env.len,
                        cancelled: false,
                    };
                    return Ok((Message { id: Some(id), ctx }, st));
                }
                backoff.idle();
            }
        }

        fn improbe_tagged(&self, tag: Option<Tag>) -> Result<Option<(Message, Status)>> {
            let (src, tag) = (self.source()?, tagsel(tag)?);
            let Some(src) = src else {
                return Ok(Some((
                    Message {
                        id: None,
                        ctx: self.comm.ctx,
                    },
                    Status::proc_null(),
                )));
            };
            let ctx = self.comm.ctx;
            Ok(progress::with(|s| {
                s.progress();
                let (id, env) = s.engine.mprobe(src, tag, ctx)?;
                let source = s.comm_rank(ctx, env.source);
                let st = Status {
                    source,
                    tag: env.tag,
                    len: env.len,
                    cancelled: false,
                };
                Some((Message { id: Some(id), ctx }, st))
            }))
        }

        fn iprobe_tagged(&self, tag: Option<Tag>) -> Result<Option<Status>> {
            let (src, tag) = (self.source()?, tagsel(tag)?);
            let Some(src) = src else {
                return Ok(Some(Status::proc_null()));
            };
            let ctx = self.comm.ctx;
            Ok(progress::with(|s| {
                s.progress();
                let env = s.engine.probe(src, tag, ctx)?;
                let source = s.comm_rank(ctx, env.source);
                Some(Status {
                    source,
                    tag: env.tag,
                    len: env.len,
                    cancelled: false,
                })
            }))
        }

        fn try_receive_into_tagged<B: BufferMut + ?Sized>(
            &self,
            buf: &mut B,
            tag: Option<Tag>,
        ) -> Result<Status> {
            let (src, tag) = (self.source()?, tagsel(tag)?);
            let Some(src) = src else {
                return Ok(Status::proc_null());
            };
            blocking_recv(&self.comm, src, tag, buf)
        }

        fn try_immediate_receive_into_tagged<'s, 'e, B: BufferMut + ?Sized>(
            &self,
            scope: &'s Scope<'s, 'e>,
            buf: &'s mut B,
            tag: Option<Tag>,
        ) -> Result<Request<'s>> {
            let (src, tag) = (self.source()?, tagsel(tag)?);
            let elem = buf.elem_size();
            let layout = buf.layout().map(|(d, n)| (d.clone(), n));
            let bytes = buf.as_bytes_mut();
            let Some(src) = src else {
                return Ok(done_request(None));
            };
            let region = scope.lend_mut(bytes);
            let dst = recv_dst(region, layout.as_ref().map(|(d, n)| (d, *n)))?;
            let cap = match &dst {
                RecvDst::Packed { tmp, .. } => tmp.len() as u64,
                RecvDst::Region(_) => progress::with(|s| s.regions.len(region).unwrap_or(0)) as u64,
            };
            let ctx = self.comm.ctx;
            let key = start_recv(ctx, src, tag, dst)?;
            Ok(Request {
                key,
                capacity: cap,
                elem,
                ctx,
                _scope: std::marker::PhantomData,
            })
        }
    };
}

/// A request complete from the start: a `PROC_NULL` operation (`done` = `None`) or a
/// send that left at once. Each has its own key, so that several can be pending.
fn done_request<'s>(done: Option<progress::Done>) -> Request<'s> {
    let done = done.unwrap_or(progress::Done::Recv(matching::RecvOutcome::Received {
        source: PROC_NULL as u32,
        tag: -1,
        len: 0,
        truncated_from: None,
    }));
    let key = progress::with(|s| {
        s.next_null += 1;
        let key = Key::Null(s.next_null);
        s.done.insert(key, done);
        key
    });
    Request {
        key,
        capacity: 0,
        elem: 0,
        ctx: 0,
        _scope: std::marker::PhantomData,
    }
}

impl Process {
    /// The rank of this process in its communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    fn source(&self) -> Result<Option<Src>> {
        Ok(self.comm.check_rank(self.rank)?.map(Src::Rank))
    }

    receive_methods!();

    fn send_mode<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag, mode: SendMode, call: &str) {
        blocking_send(self, buf, tag, mode).unwrap_or_else(|e| fail(call, e))
    }

    /// Standard-mode send with tag 0 (`MPI_Send`).
    pub fn send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.send_mode(buf, 0, SendMode::Standard, "send")
    }
    /// Standard-mode send (`MPI_Send`).
    pub fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        self.send_mode(buf, tag, SendMode::Standard, "send")
    }
    /// [`Self::send_with_tag`] returning errors.
    pub fn try_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        blocking_send(self, buf, tag, SendMode::Standard)
    }
    /// Synchronous send: returns once a receive matched (`MPI_Ssend`).
    pub fn synchronous_send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.send_mode(buf, 0, SendMode::Synchronous, "ssend")
    }
    /// `MPI_Ssend` with a tag.
    pub fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        self.send_mode(buf, tag, SendMode::Synchronous, "ssend")
    }
    /// Ready send (`MPI_Rsend`): the receive must be posted already.
    pub fn ready_send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.send_mode(buf, 0, SendMode::Ready, "rsend")
    }
    /// `MPI_Rsend` with a tag.
    pub fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        self.send_mode(buf, tag, SendMode::Ready, "rsend")
    }
    /// [`Self::ready_send_with_tag`] returning errors ([`Error::NoReceivePosted`]).
    pub fn try_ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        blocking_send(self, buf, tag, SendMode::Ready)
    }
    /// Buffered send (`MPI_Bsend`) through the attached buffer.
    pub fn buffered_send<B: Buffer + ?Sized>(&self, buf: &B) {
        self.send_mode(buf, 0, SendMode::Buffered, "bsend")
    }
    /// `MPI_Bsend` with a tag.
    pub fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) {
        self.send_mode(buf, tag, SendMode::Buffered, "bsend")
    }
    /// [`Self::buffered_send_with_tag`] returning errors.
    pub fn try_buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        blocking_send(self, buf, tag, SendMode::Buffered)
    }

    fn immediate<'s, 'e, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'s, 'e>,
        buf: &'s B,
        tag: Tag,
        mode: SendMode,
    ) -> Result<Request<'s>> {
        let Some(dest) = self.comm.check_rank(self.rank)? else {
            return Ok(done_request(None));
        };
        check_tag(tag)?;
        let bytes = send_bytes(buf)?;
        if mode == SendMode::Standard
            && progress::with(|s| s.send_now(self.comm.ctx, dest, tag, &bytes))?
        {
            return Ok(done_request(Some(progress::Done::Send(
                matching::SendOutcome::Sent,
            ))));
        }
        let arg = match bytes {
            std::borrow::Cow::Borrowed(b) => SendArg::Region(scope.lend(b)),
            std::borrow::Cow::Owned(v) => SendArg::Packed(v),
        };
        let key = start_send(self.comm.ctx, dest, tag, arg, mode)?;
        Ok(Request {
            key,
            capacity: 0,
            elem: 0,
            ctx: self.comm.ctx,
            _scope: std::marker::PhantomData,
        })
    }
    /// A persistent standard-mode send of `buf` (`MPI_Send_init`); start it with
    /// [`request::Persistent::start`]; update the data between starts with
    /// [`request::Persistent::with_buffer`].
    pub fn send_init<'s, 'e, B: BufferMut + ?Sized>(
        &self,
        scope: &'s Scope<'s, 'e>,
        buf: &'s mut B,
        tag: Tag,
    ) -> request::Persistent<'s> {
        let dest = self
            .comm
            .check_rank(self.rank)
            .and_then(|d| check_tag(tag).map(|_| d));
        let dest = dest.unwrap_or_else(|e| fail("send_init", e));
        let region = scope.lend_mut(buf.as_bytes_mut());
        let ctx = self.comm.ctx;
        let start = move || -> Result<Request<'s>> {
            let Some(dest) = dest else {
                return Ok(done_request(None));
            };
            let key = start_send(ctx, dest, tag, SendArg::Region(region), SendMode::Standard)?;
            Ok(Request {
                key,
                capacity: 0,
                elem: 0,
                ctx: 0,
                _scope: std::marker::PhantomData,
            })
        };
        request::Persistent {
            start: Box::new(start),
            active: None,
            region,
        }
    }

    /// Starts a send in any mode, returning errors instead of aborting.
    pub fn try_immediate_send_with_tag<'s, 'e, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'s, 'e>,
        buf: &'s B,
        tag: Tag,
        mode: SendMode,
    ) -> Result<Request<'s>> {
        self.immediate(scope, buf, tag, mode)
    }

    /// [`Self::synchronous_send_with_tag`] returning errors.
    pub fn try_synchronous_send_with_tag<B: Buffer + ?Sized>(
        &self,
        buf: &B,
        tag: Tag,
    ) -> Result<()> {
        blocking_send(self, buf, tag, SendMode::Synchronous)
    }

    /// Starts a standard-mode send with tag 0 (`MPI_Isend`).
    pub fn immediate_send<'s, 'e, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'s, 'e>,
        buf: &'s B,
    ) -> Request<'s> {
        self.immediate(scope, buf, 0, SendMode::Standard)
            .unwrap_or_else(|e| fail("isend", e))
    }
    /// `MPI_Isend`.
    pub fn immediate_send_with_tag<'s, 'e, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'s, 'e>,
        buf: &'s B,
        tag: Tag,
    ) -> Request<'s> {
        self.immediate(scope, buf, tag, SendMode::Standard)
            .unwrap_or_else(|e| fail("isend", e))
    }
    /// `MPI_Issend`.
    pub fn immediate_synchronous_send_with_tag<'s, 'e, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'s, 'e>,
        buf: &'s B,
        tag: Tag,
    ) -> Request<'s> {
        self.immediate(scope, buf, tag, SendMode::Synchronous)
            .unwrap_or_else(|e| fail("issend", e))
    }
    /// `MPI_Irsend`.
    pub fn immediate_ready_send_with_tag<'s, 'e, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'s, 'e>,
        buf: &'s B,
        tag: Tag,
    ) -> Request<'s> {
        self.immediate(scope, buf, tag, SendMode::Ready)
            .unwrap_or_else(|e| fail("irsend", e))
    }
}

impl AnyProcess {
    fn source(&self) -> Result<Option<Src>> {
        self.comm.check_live()?;
        Ok(Some(Src::Any))
    }

    receive_methods!();
}

/// A message taken by a matched probe; only [`Message::receive_into`] receives it.
#[derive(Debug)]
#[must_use = "a matched message must be received"]
pub struct Message {
    id: Option<matching::MsgId>,
    ctx: u32,
}

impl Message {
    /// Receives the message into `buf` (`MPI_Mrecv`).
    pub fn receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Status {
        self.try_receive_into(buf)
            .unwrap_or_else(|e| fail("mrecv", e))
    }

    /// [`Self::receive_into`] returning errors.
    pub fn try_receive_into<B: BufferMut + ?Sized>(self, buf: &mut B) -> Result<Status> {
        let Some(id) = self.id else {
            return Ok(Status::proc_null());
        };
        let ctx = self.ctx;
        let elem = buf.elem_size();
        let layout = buf.layout().map(|(d, n)| (d.clone(), n));
        let bytes = buf.as_bytes_mut();
        request::scope(|sc| {
            let region = sc.lend_mut(bytes);
            let mut dst = recv_dst(region, layout.as_ref().map(|(d, n)| (d, *n)))?;
            let cap = progress::with(|s| dst.bytes(&mut s.regions).map_or(0, |b| b.len())) as u64;
            let key = progress::with(|s| -> Result<Key> {
                let r = s.engine.mrecv(id, cap)?;
                s.by_region.insert(dst.region(), Key::Recv(r));
                s.recv_dst.insert(r, dst);
                s.run_outputs();
                Ok(Key::Recv(r))
            })?;
            finish(progress::wait(key), cap, elem, ctx)
        })
    }
}

impl SimpleCommunicator {
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
        let out = buf.as_bytes().to_vec();
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
        request::scope(|sc| {
            let r = self
                .process_at_rank(source)
                .immediate_receive_into_with_tag(sc, rbuf, rtag);
            self.process_at_rank(dest).send_with_tag(sbuf, stag);
            r.wait()
        })
    }
}

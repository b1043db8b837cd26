//! Non-blocking requests (`mpi::request`), which live inside a [`scope`].
//!
//! ```no_run
//! use rsmpi::traits::*;
//! let universe = rsmpi::initialize().unwrap();
//! let world = universe.world();
//! let peer = world.process_at_rank(1 - world.rank());
//! let mut got = [0u64; 4];
//! let out = [world.rank() as u64; 4];
//! rsmpi::request::scope(|scope| {
//!     let r = peer.immediate_receive_into(scope, &mut got[..]);
//!     let s = peer.immediate_send(scope, &out[..]);
//!     s.wait();
//!     r.wait();
//! });
//! ```

use crate::error::{Error, Result};
use crate::point_to_point::Status;
use crate::progress::{self, Done, Key, HOST};
use crate::trace::format::Op;
use matching::{RecvOutcome, SendError, SendOutcome};
use std::marker::PhantomData;
use transport::mem::{self, RegionId};

/// The scope that immediate operations lend their buffers to (`mpi::request::LocalScope`).
pub type LocalScope<'s, 'e> = mem::Scope<'s, 'e, progress::Host>;

/// A lent receive buffer and the way back to it.
pub(crate) type Loan<'a, D> = mem::Loan<'a, D, progress::Host>;

/// Something immediate operations can lend buffers to for `'a`: a [`LocalScope`]
/// (from [`scope`]) or [`StaticScope`] for `'static` buffers.
pub trait Scope<'a> {
    /// Lends `buf` for reading.
    #[doc(hidden)]
    fn rsmpi_lend(&self, buf: &'a [u8]) -> RegionId;
    /// Lends `buf` for writing, keeping the way back to it.
    #[doc(hidden)]
    fn rsmpi_lend_mut<D: ?Sized>(
        &self,
        buf: &'a mut D,
        bytes: impl FnOnce(&mut D) -> &mut [u8],
    ) -> Loan<'a, D>;
}

impl<'s, 'e> Scope<'s> for &'s LocalScope<'s, 'e> {
    fn rsmpi_lend(&self, buf: &'s [u8]) -> RegionId {
        self.lend(buf)
    }
    // inlined: an immediate receive lends in its caller's function, once for each
    // copy of the call (`point_to_point::immediate_recv`)
    #[inline(always)]
    fn rsmpi_lend_mut<D: ?Sized>(
        &self,
        buf: &'s mut D,
        bytes: impl FnOnce(&mut D) -> &mut [u8],
    ) -> Loan<'s, D> {
        self.lend_typed_mut(buf, bytes)
    }
}

/// The scope of requests on `'static` buffers (and of immediate collectives without
/// buffers, such as [`immediate_barrier`](crate::collective::CommunicatorCollectives::immediate_barrier)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StaticScope;

fn static_scope() -> &'static LocalScope<'static, 'static> {
    thread_local! {
        static S: &'static LocalScope<'static, 'static> = mem::leak_scope(&HOST);
    }
    S.with(|s| *s)
}

impl Scope<'static> for StaticScope {
    fn rsmpi_lend(&self, buf: &'static [u8]) -> RegionId {
        static_scope().lend(buf)
    }
    fn rsmpi_lend_mut<D: ?Sized>(
        &self,
        buf: &'static mut D,
        bytes: impl FnOnce(&mut D) -> &mut [u8],
    ) -> Loan<'static, D> {
        static_scope().lend_typed_mut(buf, bytes)
    }
}

/// Runs `f` with a scope for immediate (non-blocking) operations. Buffers passed to
/// `immediate_*` calls stay borrowed until the scope ends; requests not completed by
/// then are cancelled and finished before `scope` returns, so no data can land in a
/// buffer after it is handed back.
pub fn scope<'e, T>(f: impl for<'s> FnOnce(&'s LocalScope<'s, 'e>) -> T) -> T {
    mem::scope(&HOST, f)
}

/// A [`scope`] with a [`RequestCollection`] (`mpi::request::multiple_scope`).
pub fn multiple_scope<'e, T, D: ?Sized + 'e>(
    reserve: usize,
    f: impl for<'s> FnOnce(&'s LocalScope<'s, 'e>, &mut RequestCollection<'s, D>) -> T,
) -> T {
    scope(|s| {
        let mut coll = RequestCollection {
            requests: Vec::with_capacity(reserve),
        };
        f(s, &mut coll)
    })
}

/// What completes a request: the library's key and what is needed to turn its
/// outcome into a [`Status`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pub key: Key,
    pub capacity: u64,
    pub elem: usize,
    pub ctx: u32,
}

impl Pending {
    pub(crate) fn new(key: Key, capacity: u64, elem: usize, ctx: u32) -> Pending {
        Pending {
            key,
            capacity,
            elem,
            ctx,
        }
    }
}

/// The data a request hands back when it completes.
pub(crate) enum Data<'a, D: ?Sized> {
    /// A send's buffer.
    Shared(&'a D),
    /// A receive buffer lent to the scope as it is.
    Loan(Loan<'a, D>),
    /// A receive buffer the message is unpacked into on completion (it landed in
    /// the library's own buffer: padding, a datatype with gaps, a collective).
    Unpack(&'a mut D, fn(&mut D, &[u8]) -> Result<()>),
    /// As `Unpack`, for an immediate collective whose last step runs on its result
    /// first (the rank-order reduction of a user operation). The step is boxed twice
    /// so that its pointer is one word and every request stays 80 bytes.
    UnpackAfter(
        &'a mut D,
        fn(&mut D, &[u8]) -> Result<()>,
        Box<Box<crate::collective::PostFn<'a>>>,
    ),
}

/// A pending non-blocking operation (`mpi::request::Request`). `D` is the buffer it
/// uses, `S` its scope.
#[must_use = "a request must be waited on or tested"]
pub struct Request<'a, D: ?Sized = (), S = StaticScope> {
    pub(crate) pending: Pending,
    pub(crate) data: Data<'a, D>,
    pub(crate) _scope: PhantomData<S>,
}

impl<D: ?Sized, S> std::fmt::Debug for Request<'_, D, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("key", &self.pending.key)
            .finish()
    }
}

impl<'a, D: ?Sized, S> Request<'a, D, S> {
    pub(crate) fn new(pending: Pending, data: Data<'a, D>) -> Self {
        Request {
            pending,
            data,
            _scope: PhantomData,
        }
    }

    /// The same request with its scope type forgotten.
    fn erase<S2>(self) -> Request<'a, D, S2> {
        Request {
            pending: self.pending,
            data: self.data,
            _scope: PhantomData,
        }
    }

    /// Waits for completion (`MPI_Wait`); errors go to the error handler.
    #[track_caller]
    pub fn wait(self) -> Status {
        // the message-rate loop's two cases with no tool on in a function of their
        // own size; every other request out of line, so that these save and copy
        // only what they use
        if !crate::tools::is_on() {
            if let Some(st) = self.wait_quick() {
                return st.unwrap_or_else(|e| crate::topology::fail("wait", e));
            }
        }
        self.wait_other()
    }

    /// [`Self::wait`] for every other request.
    #[track_caller]
    #[inline(never)]
    fn wait_other(self) -> Status {
        self.try_wait()
            .unwrap_or_else(|e| crate::topology::fail("wait", e))
    }

    /// Waits for completion and drops the status.
    #[track_caller]
    pub fn wait_without_status(self) {
        self.wait();
    }

    /// Waits for completion and returns the request's buffer (for a receive: the
    /// data received).
    #[track_caller]
    pub fn wait_for_data(self) -> &'a D {
        if crate::tools::is_on() {
            let site = std::panic::Location::caller();
            return crate::tools::watched(Op::Wait, site, || {
                self.wait_for_data_now::<crate::tools::On>()
            });
        }
        self.wait_for_data_now::<crate::tools::Off>()
    }

    /// The body of [`Self::wait_for_data`].
    #[inline(always)]
    fn wait_for_data_now<W: crate::tools::Mode>(self) -> &'a D {
        let d = self.wait_done();
        let (st, d) = self.complete(d);
        st.unwrap_or_else(|e| crate::topology::fail("wait", e));
        d.expect("rsmpi: wait_for_data on a request without data")
    }

    /// Waits for completion and returns errors (truncation, ready send without a
    /// receive) to the caller.
    #[track_caller]
    pub fn try_wait(self) -> Result<Status> {
        if crate::tools::is_on() {
            let site = std::panic::Location::caller();
            return crate::tools::watched(Op::Wait, site, || {
                self.try_wait_now::<crate::tools::On>()
            });
        }
        self.try_wait_now::<crate::tools::Off>()
    }

    /// The body of [`Self::try_wait`].
    #[inline(always)]
    fn try_wait_now<W: crate::tools::Mode>(self) -> Result<Status> {
        if let Some(st) = self.wait_quick() {
            return st;
        }
        let d = self.wait_done();
        self.complete_status(d)
    }

    /// The message-rate loop's two cases, finished here: a send that left at once
    /// (complete, with nothing kept in the library and nothing to hand back: a window
    /// of sends waits on 64 of these) and a receive into a lent buffer (its outcome
    /// straight to the status, not through the general `Done`, whose copies went
    /// through the stack). `None` for every other request, not yet waited on.
    #[inline(always)]
    fn wait_quick(&self) -> Option<Result<Status>> {
        match self.pending.key {
            Key::Sent(0) => Some(Ok(Status::empty(false))),
            Key::Recv(r) if matches!(self.data, Data::Loan(_)) => {
                let p = &self.pending;
                let o = progress::wait_recv(r);
                Some(finish_recv(o, p.capacity, p.elem, p.ctx))
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn wait_done(&self) -> Done {
        match self.pending.key {
            Key::Recv(r) => Done::Recv(progress::wait_recv(r)),
            k => progress::wait(k),
        }
    }

    /// Tests for completion (`MPI_Test`): the status if complete, else the request.
    #[track_caller]
    pub fn test(self) -> std::result::Result<Status, Self> {
        self.test_with_data().map(|(st, _)| st)
    }

    /// Tests for completion: the status and the buffer if complete, else the request.
    #[track_caller]
    pub fn test_with_data(self) -> std::result::Result<(Status, &'a D), Self>
    where
        D: 'a,
    {
        // the watched test's halves out of line and the request kept here, one
        // `Err(self)` for both paths: a request handed back whole by a function out
        // of line was copied out of its result and back into the caller's at every
        // unfinished test, and that function kept the unwatched test's visit out of
        // line too (+63 instructions an idle test with the tools off;
        // `docs/performance.md`, "An idle test with the tools off")
        let mut watch = None;
        let done = if crate::tools::is_on() {
            test_watched(self.pending.key, std::panic::Location::caller()).map(|(w, d)| {
                watch = Some(w);
                d
            })
        } else {
            progress::test_in::<crate::tools::Off>(self.pending.key)
        };
        match done {
            None => Err(self),
            Some(d) => {
                let r = self.completed(d);
                if let Some(w) = watch {
                    test_leave(w);
                }
                Ok(r)
            }
        }
    }

    /// A tested request that completed with `d`: its status and buffer.
    #[inline(always)]
    fn completed(self, d: Done) -> (Status, &'a D) {
        let (st, data) = self.complete(d);
        let st = st.unwrap_or_else(|e| crate::topology::fail("test", e));
        (st, data.unwrap_or_else(|| unit_data()))
    }

    /// Cancels the request (`MPI_Cancel`); wait on it afterwards:
    /// [`Status::is_cancelled`] tells whether the cancel won.
    pub fn cancel(&self) {
        cancel(self.pending.key)
    }

    /// Finishes a request whose outcome is `d` when the caller needs only the status:
    /// a lent receive buffer stays lent (unused) until its scope ends.
    #[inline(always)]
    fn complete_status(self, d: Done) -> Result<Status> {
        if let Data::Loan(_) = self.data {
            return finish(
                d,
                self.pending.capacity,
                self.pending.elem,
                self.pending.ctx,
            );
        }
        self.complete(d).0
    }

    /// Finishes a request whose outcome is `d`: the status, and the buffer back.
    pub(crate) fn complete(self, d: Done) -> (Result<Status>, Option<&'a D>) {
        let st = finish(
            d,
            self.pending.capacity,
            self.pending.elem,
            self.pending.ctx,
        );
        let (d, unpack, post) = match self.data {
            Data::Shared(d) => {
                if let Key::Coll(_) = self.pending.key {
                    settle_check(self.pending.key);
                    // a collective's result this rank does not take (a non-root)
                    progress::with(|s| s.owned_done.remove(&self.pending.key));
                }
                return (st, Some(d));
            }
            Data::Loan(l) => {
                let d: &'a D = l.reclaim();
                return (st, Some(d));
            }
            Data::Unpack(d, unpack) => (d, unpack, None),
            Data::UnpackAfter(d, unpack, post) => (d, unpack, Some(post)),
        };
        if let Key::Coll(_) = self.pending.key {
            settle_check(self.pending.key);
        }
        let bytes = progress::with(|s| s.owned_done.remove(&self.pending.key));
        if let (Ok(_), Some(mut b)) = (&st, bytes) {
            let done = match &post {
                Some(post) => post(&mut b),
                None => Ok(()),
            };
            let res = done.and_then(|_| unpack(d, &b));
            progress::with(|s| s.colls.pool.give(b));
            if let Err(e) = res {
                return (Err(e), Some(d));
            }
        }
        let d: &'a D = d;
        (st, Some(d))
    }
}

/// A watched test (`MPI_Test`) of `key`, made at `site`: the call begins and the
/// library progresses once; the call ends here unless `key` completed, with the
/// outcome handed back, the call's end then left to [`test_leave`] once the request
/// is finished.
#[cold]
#[inline(never)]
fn test_watched(
    key: Key,
    site: &'static std::panic::Location<'static>,
) -> Option<(crate::tools::Watch, Done)> {
    let w = crate::tools::begin(Op::Test, site);
    match progress::test_in::<crate::tools::On>(key) {
        Some(d) => Some((w, d)),
        None => {
            crate::tools::end(w);
            None
        }
    }
}

/// The watched test `w` of a request that completed ends.
#[cold]
#[inline(never)]
fn test_leave(w: crate::tools::Watch) {
    crate::tools::end(w)
}

/// An immediate collective's request completes (every way a request completes
/// comes to [`Request::complete`]: `wait`, `test`, `wait_any`, …): with
/// `RSMPI_CHECK=errors`, its check reads the other ranks' calls and reports. A wait
/// that finds the request pending settles it sooner (`progress::wait`), so that a
/// collective that cannot run is reported rather than waited for.
fn settle_check(key: Key) {
    if crate::check::types::wanted() {
        crate::check::coll::settle(key);
    }
}

/// The "data" of a request without a buffer.
fn unit_data<'a, D: ?Sized>() -> &'a D {
    panic!("rsmpi: this request has no buffer to return")
}

pub(crate) fn cancel(key: Key) {
    progress::with(|s| {
        s.cancel(key);
        s.run_outputs();
    })
}

#[inline(always)]
pub(crate) fn finish(d: Done, capacity: u64, elem: usize, ctx: u32) -> Result<Status> {
    match d {
        Done::Recv(o) => finish_recv(o, capacity, elem, ctx),
        Done::Send(SendOutcome::Cancelled) => Ok(Status::empty(true)),
        Done::Send(SendOutcome::Sent) | Done::Coll(Ok(())) => Ok(Status::empty(false)),
        Done::Send(SendOutcome::Failed(SendError::NoReceivePosted)) => Err(Error::NoReceivePosted),
        Done::Send(SendOutcome::Failed(e)) => Err(Error::Buffer(e.to_string())),
        Done::Coll(Err(e)) => Err(e),
    }
}

/// [`finish`] for a receive's outcome `o`: its status, or the error of a message
/// longer than `capacity` or not a whole number of `elem`-byte elements.
#[inline(always)]
pub(crate) fn finish_recv(o: RecvOutcome, capacity: u64, elem: usize, ctx: u32) -> Result<Status> {
    finish_recv_ranked(o, capacity, elem, ctx, |ctx, w| {
        progress::with(|s| s.comm_rank(ctx, w))
    })
}

/// [`finish_recv`] with the source's rank in a communicator other than the world's
/// from `rank` (in a visit to the library state: from that visit).
#[inline(always)]
fn finish_recv_ranked(
    o: RecvOutcome,
    capacity: u64,
    elem: usize,
    ctx: u32,
    rank: impl FnOnce(u32, u32) -> i32,
) -> Result<Status> {
    match o {
        RecvOutcome::Received {
            source,
            tag,
            len,
            truncated_from,
        } => {
            if let Some(full) = truncated_from {
                return Err(Error::Truncated {
                    len: full,
                    capacity,
                });
            }
            // a whole number of elements (most element sizes are powers of two: no
            // division on the per-message path)
            let e = elem as u64;
            let whole = match e {
                0 | 1 => true,
                e if e.is_power_of_two() => len & (e - 1) == 0,
                e => len % e == 0,
            };
            if !whole {
                return Err(Error::Count { len, size: elem });
            }
            let source = if source == crate::PROC_NULL as u32 {
                crate::PROC_NULL
            } else if ctx & !crate::topology::INTERNAL == 0 {
                source as i32
            } else {
                rank(ctx, source)
            };
            Ok(Status {
                source,
                tag,
                len,
                cancelled: false,
            })
        }
        RecvOutcome::Cancelled => Ok(Status::empty(true)),
    }
}

/// Waits until the request is complete when dropped (`mpi::request::WaitGuard`).
#[derive(Debug)]
pub struct WaitGuard<'a, D: ?Sized = (), S = StaticScope>(Option<Request<'a, D, S>>);

impl<D: ?Sized, S> Drop for WaitGuard<'_, D, S> {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.wait();
        }
    }
}

impl<'a, D: ?Sized, S> From<Request<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(r: Request<'a, D, S>) -> Self {
        WaitGuard(Some(r))
    }
}

impl<'a, D: ?Sized, S> From<WaitGuard<'a, D, S>> for Request<'a, D, S> {
    fn from(mut g: WaitGuard<'a, D, S>) -> Self {
        g.0.take().expect("a guard holds its request")
    }
}

/// Cancels the request and waits for it when dropped (`mpi::request::CancelGuard`).
#[derive(Debug)]
pub struct CancelGuard<'a, D: ?Sized = (), S = StaticScope>(Option<Request<'a, D, S>>);

impl<D: ?Sized, S> Drop for CancelGuard<'_, D, S> {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.cancel();
            r.wait();
        }
    }
}

impl<'a, D: ?Sized, S> From<Request<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(r: Request<'a, D, S>) -> Self {
        CancelGuard(Some(r))
    }
}

impl<'a, D: ?Sized, S> From<WaitGuard<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(g: WaitGuard<'a, D, S>) -> Self {
        CancelGuard(Some(Request::from(g)))
    }
}

impl<'a, D: ?Sized, S> From<CancelGuard<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(mut g: CancelGuard<'a, D, S>) -> Self {
        WaitGuard(g.0.take())
    }
}

/// Requests of one [`multiple_scope`] (`mpi::request::RequestCollection`): completed
/// ones become inactive, their index stays.
pub struct RequestCollection<'a, D: ?Sized> {
    requests: Vec<Option<Request<'a, D, ()>>>,
}

impl<'a, D: ?Sized> RequestCollection<'a, D> {
    /// Adds a request; returns its index.
    pub fn add<S>(&mut self, r: Request<'a, D, S>) -> usize {
        self.requests.push(Some(r.erase()));
        self.requests.len() - 1
    }

    /// Number of requests not yet completed.
    pub fn incomplete(&self) -> usize {
        self.requests.iter().flatten().count()
    }

    /// Total number of requests added.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether no request was added.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Tells the deadlock detector that `wait_any` / `wait_some` waits for any of
    /// the requests still pending.
    fn waiting(&self) {
        if crate::tools::checking() {
            waiting_any(self.requests.iter().flatten().map(|r| r.pending.key));
        }
    }

    fn take_done(&mut self, i: usize) -> Option<(usize, Status, &'a D)> {
        let key = self.requests[i].as_ref()?.pending.key;
        let d = progress::with(|s| s.take_done(&key))?;
        let r = self.requests[i].take().expect("active");
        let (st, data) = r.complete(d);
        let st = st.unwrap_or_else(|e| crate::topology::fail("wait", e));
        Some((i, st, data.unwrap_or_else(|| unit_data())))
    }

    /// `MPI_Testany`: one completed request, if any.
    #[track_caller]
    pub fn test_any(&mut self) -> Option<(usize, Status, &'a D)> {
        crate::tools::mpi_call!(crate::trace::format::Op::Testany, {
            progress_once();
            (0..self.requests.len()).find_map(|i| self.take_done(i))
        })
    }

    /// `MPI_Waitany`: waits for one request; `None` once all are complete.
    #[track_caller]
    pub fn wait_any(&mut self) -> Option<(usize, Status, &'a D)> {
        crate::tools::mpi_call!(crate::trace::format::Op::Waitany, {
            let mut backoff = progress::Backoff::new();
            while self.incomplete() > 0 {
                if let Some(x) = self.test_any() {
                    return Some(x);
                }
                backoff.idle();
                self.waiting();
            }
            None
        })
    }

    /// `MPI_Testsome`: appends every completed request to `result`.
    #[track_caller]
    pub fn test_some(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        crate::tools::mpi_call!(crate::trace::format::Op::Testsome, {
            result.clear();
            progress_once();
            for i in 0..self.requests.len() {
                result.extend(self.take_done(i));
            }
        })
    }

    /// `MPI_Waitsome`: waits until at least one request completes (unless none is
    /// left) and appends the completed ones to `result`.
    #[track_caller]
    pub fn wait_some(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        crate::tools::mpi_call!(crate::trace::format::Op::Waitsome, {
            let mut backoff = progress::Backoff::new();
            loop {
                self.test_some(result);
                if !result.is_empty() || self.incomplete() == 0 {
                    return;
                }
                backoff.idle();
                self.waiting();
            }
        })
    }

    /// `MPI_Waitall`: waits for every request, appending them to `result`.
    #[track_caller]
    pub fn wait_all(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        crate::tools::mpi_call!(crate::trace::format::Op::Waitall, {
            result.clear();
            for i in 0..self.requests.len() {
                if let Some(r) = self.requests[i].take() {
                    let d = r.wait_done();
                    let (st, data) = r.complete(d);
                    let st = st.unwrap_or_else(|e| crate::topology::fail("wait", e));
                    result.push((i, st, data.unwrap_or_else(|| unit_data())));
                }
            }
        })
    }

    /// `MPI_Testall`: if every request is complete, appends them all to `result`
    /// and returns true; otherwise changes nothing and returns false.
    #[track_caller]
    pub fn test_all(&mut self, result: &mut Vec<(usize, Status, &'a D)>) -> bool {
        crate::tools::mpi_call!(crate::trace::format::Op::Testall, {
            result.clear();
            progress_once();
            let all = progress::with(|s| {
                self.requests
                    .iter()
                    .flatten()
                    .all(|r| s.is_done(&r.pending.key))
            });
            if all {
                for i in 0..self.requests.len() {
                    result.extend(self.take_done(i));
                }
            }
            all
        })
    }
}

/// `mpi::request::wait_any`: waits for one of `requests`, removes it from the vector
/// and returns its index and status; `None` for an empty vector.
#[track_caller]
pub fn wait_any<'a, D: ?Sized, S>(
    requests: &mut Vec<Request<'a, D, S>>,
) -> Option<(usize, Status)> {
    crate::tools::mpi_call!(crate::trace::format::Op::Waitany, {
        if requests.is_empty() {
            return None;
        }
        let mut backoff = progress::Backoff::new();
        loop {
            progress_once();
            let hit = progress::with(|s| requests.iter().position(|r| s.is_done(&r.pending.key)));
            if let Some(i) = hit {
                let r = requests.remove(i);
                let d = progress::with(|s| s.take_done(&r.pending.key)).expect("done");
                let st = r
                    .complete_status(d)
                    .unwrap_or_else(|e| crate::topology::fail("wait", e));
                return Some((i, st));
            }
            backoff.idle();
            if crate::tools::checking() {
                waiting_any(requests.iter().map(|r| r.pending.key));
            }
        }
    })
}

/// Finishes request `i` of a slice if it completed; inactive (`None`) entries are
/// skipped, finished ones become `None` (`MPI_REQUEST_NULL`).
fn poll_one<D: ?Sized, S>(reqs: &mut [Option<Request<'_, D, S>>], i: usize) -> Option<Status> {
    let key = reqs[i].as_ref()?.pending.key;
    let d = progress::with(|s| s.take_done(&key))?;
    let r = reqs[i].take().expect("active");
    Some(
        r.complete_status(d)
            .unwrap_or_else(|e| crate::topology::fail("wait", e)),
    )
}

/// Tells the deadlock detector that a wait waits for any of the requests `keys`.
fn waiting_any(keys: impl Iterator<Item = Key>) {
    crate::check::deadlock::waiting_any(keys.collect());
}

fn progress_once() -> bool {
    progress::with(|s| s.progress())
}

/// What [`test_any`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestAny {
    /// Request `.0` completed with this status (its entry is now `None`).
    Completed(usize, Status),
    /// Active requests remain, none completed yet.
    Pending,
    /// Every entry is inactive (`MPI_UNDEFINED`).
    Inactive,
}

/// `MPI_Testany` over a slice whose inactive entries are `None`.
#[track_caller]
pub fn test_any<D: ?Sized, S>(reqs: &mut [Option<Request<'_, D, S>>]) -> TestAny {
    crate::tools::mpi_call!(crate::trace::format::Op::Testany, {
        if reqs.iter().all(Option::is_none) {
            return TestAny::Inactive;
        }
        progress_once();
        match (0..reqs.len()).find_map(|i| poll_one(reqs, i).map(|st| (i, st))) {
            Some((i, st)) => TestAny::Completed(i, st),
            None => TestAny::Pending,
        }
    })
}

/// `MPI_Waitany` over a slice whose inactive entries are `None`: waits until one
/// request completes; `None` when every entry is inactive (`MPI_UNDEFINED`). (The
/// `mpi` crate's form, on a vector, is [`wait_any`].)
#[track_caller]
pub fn wait_any_of<D: ?Sized, S>(
    reqs: &mut [Option<Request<'_, D, S>>],
) -> Option<(usize, Status)> {
    crate::tools::mpi_call!(crate::trace::format::Op::Waitany, {
        let mut backoff = progress::Backoff::new();
        loop {
            match test_any(reqs) {
                TestAny::Inactive => return None,
                TestAny::Completed(i, st) => return Some((i, st)),
                TestAny::Pending => {
                    backoff.idle();
                    if crate::tools::checking() {
                        waiting_any(reqs.iter().flatten().map(|r| r.pending.key));
                    }
                }
            }
        }
    })
}

/// `MPI_Testsome`: completes every finished request; returns (index, status) pairs.
#[track_caller]
pub fn test_some<D: ?Sized, S>(reqs: &mut [Option<Request<'_, D, S>>]) -> Vec<(usize, Status)> {
    crate::tools::mpi_call!(crate::trace::format::Op::Testsome, {
        progress_once();
        (0..reqs.len())
            .filter_map(|i| poll_one(reqs, i).map(|st| (i, st)))
            .collect()
    })
}

/// `MPI_Waitsome`: waits until at least one request completes (unless all are
/// inactive: then returns an empty vector at once).
#[track_caller]
pub fn wait_some<D: ?Sized, S>(reqs: &mut [Option<Request<'_, D, S>>]) -> Vec<(usize, Status)> {
    crate::tools::mpi_call!(crate::trace::format::Op::Waitsome, {
        let mut backoff = progress::Backoff::new();
        loop {
            if reqs.iter().all(Option::is_none) {
                return Vec::new();
            }
            let got = test_some(reqs);
            if !got.is_empty() {
                return got;
            }
            backoff.idle();
            if crate::tools::checking() {
                waiting_any(reqs.iter().flatten().map(|r| r.pending.key));
            }
        }
    })
}

/// `MPI_Testall`: the statuses if every active request completed (then all entries
/// become `None`), otherwise `None` and nothing changes.
#[track_caller]
pub fn test_all<D: ?Sized, S>(
    reqs: &mut [Option<Request<'_, D, S>>],
) -> Option<Vec<Option<Status>>> {
    crate::tools::mpi_call!(crate::trace::format::Op::Testall, {
        progress_once();
        let all = progress::with(|s| reqs.iter().flatten().all(|r| s.is_done(&r.pending.key)));
        all.then(|| (0..reqs.len()).map(|i| poll_one(reqs, i)).collect())
    })
}

/// `MPI_Waitall`: waits for every active request; inactive entries give `None`.
#[track_caller]
pub fn wait_all<D: ?Sized, S>(reqs: &mut [Option<Request<'_, D, S>>]) -> Vec<Option<Status>> {
    if !crate::tools::is_on() {
        return wait_all_quick(reqs);
    }
    crate::tools::mpi_call!(crate::trace::format::Op::Waitall, {
        let mut out = vec![None; reqs.len()];
        for (i, r) in reqs.iter_mut().enumerate() {
            if let Some(r) = r.take() {
                out[i] = Some(r.wait());
            }
        }
        out
    })
}

/// [`wait_all`] with no tool on. The message-rate loop's window (OSU's `MPI_Waitall`
/// on 64 receives, or 64 sends) in few visits to the library state: each visit takes,
/// in order, every request that is finished and of the two kinds
/// [`Request::wait`] finishes quickly (a receive into a lent buffer, a send that left
/// at once), progressing once when the first one it meets is not finished yet. The
/// request it stops at is waited for alone, as [`Request::wait`] would, and the next
/// visit goes on after it. Each request's own wait cost a visit of its own: the
/// thread-local access, the borrow of the state and the call (`docs/performance.md`,
/// "A window's waits in one visit").
#[inline(never)]
fn wait_all_quick<D: ?Sized, S>(reqs: &mut [Option<Request<'_, D, S>>]) -> Vec<Option<Status>> {
    let mut out = vec![None; reqs.len()];
    let mut i = 0;
    while i < reqs.len() {
        let (next, failed) = progress::with(|s| {
            let mut progressed = false;
            let mut k = i;
            while let Some(slot) = reqs.get(k) {
                let Some(r) = slot else {
                    k += 1;
                    continue;
                };
                match r.pending.key {
                    Key::Sent(0) => out[k] = Some(Status::empty(false)),
                    Key::Recv(id) if matches!(r.data, Data::Loan(_)) => {
                        let o = match s.recvs.take_done(id) {
                            Some(o) => o,
                            None if !progressed => {
                                progressed = true;
                                s.progress();
                                match s.recvs.take_done(id) {
                                    Some(o) => o,
                                    None => break,
                                }
                            }
                            None => break,
                        };
                        let p = &r.pending;
                        match finish_recv_ranked(o, p.capacity, p.elem, p.ctx, |c, w| {
                            s.comm_rank(c, w)
                        }) {
                            Ok(st) => out[k] = Some(st),
                            Err(e) => return (k, Some(e)),
                        }
                    }
                    _ => break,
                }
                k += 1;
            }
            (k, None)
        });
        // the requests taken are done with (a lent buffer goes back with its scope)
        reqs[i..next].iter_mut().for_each(|r| drop(r.take()));
        if let Some(e) = failed {
            reqs[next] = None;
            crate::topology::fail("wait", e);
        }
        if let Some(r) = reqs.get_mut(next).and_then(Option::take) {
            out[next] = Some(r.wait());
        }
        i = next + 1;
    }
    out
}

/// A persistent request (`MPI_Send_init` / `MPI_Recv_init`): the same operation,
/// started again and again with [`Persistent::start`].
pub struct Persistent<'s> {
    pub(crate) start: Box<dyn Fn() -> crate::Result<Pending> + 's>,
    pub(crate) active: Option<Pending>,
    pub(crate) region: transport::mem::RegionId,
}

impl Persistent<'_> {
    /// Starts the operation (`MPI_Start`); it must not be active.
    pub fn start(&mut self) -> crate::Result<()> {
        if self.active.is_some() {
            return Err(crate::Error::Request(
                "persistent request started while active".into(),
            ));
        }
        self.active = Some((self.start)()?);
        Ok(())
    }

    /// Waits for the current operation; `None` if it was not started (inactive).
    #[track_caller]
    pub fn wait(&mut self) -> Option<Status> {
        crate::tools::mpi_call!(crate::trace::format::Op::Wait, {
            let p = self.active.take()?;
            let d = progress::wait(p.key);
            Some(
                finish(d, p.capacity, p.elem, p.ctx)
                    .unwrap_or_else(|e| crate::topology::fail("wait", e)),
            )
        })
    }

    /// Tests the current operation: `Some(status)` once complete, `None` while
    /// pending or inactive.
    #[track_caller]
    pub fn test(&mut self) -> Option<Status> {
        crate::tools::mpi_call!(crate::trace::format::Op::Test, {
            let p = self.active?;
            let d = progress::test(p.key)?;
            self.active = None;
            Some(
                finish(d, p.capacity, p.elem, p.ctx)
                    .unwrap_or_else(|e| crate::topology::fail("test", e)),
            )
        })
    }

    /// Whether an operation is in progress.
    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// Reads or updates the request's buffer between operations (not while active):
    /// the data a receive got, or the data the next send sends.
    pub fn with_buffer<T: crate::Equivalence, R>(
        &self,
        f: impl FnOnce(&mut [T]) -> R,
    ) -> crate::Result<R> {
        if self.active.is_some() {
            return Err(crate::Error::Request(
                "buffer of an active persistent request".into(),
            ));
        }
        progress::with(|s| {
            let b = s.regions.slice_mut(self.region).expect("lent mutably");
            T::rsmpi_from_bytes_mut(b)
                .map(f)
                .ok_or_else(|| crate::Error::Request("buffer is not a slice of this type".into()))
        })
    }
}

//! Non-blocking requests, which live inside a [`scope`].

use crate::error::{Error, Result};
use crate::progress::{self, Done, Key, HOST};
use crate::topology::Status;
use matching::{RecvOutcome, SendError, SendOutcome};
use transport::mem;

/// The scope that immediate operations lend their buffers to.
pub type Scope<'s, 'e> = mem::Scope<'s, 'e, progress::Host>;

/// Runs `f` with a scope for immediate (non-blocking) operations. Buffers passed to
/// `immediate_*` calls stay borrowed until the scope ends; requests not completed by
/// then are cancelled and finished before `scope` returns, so no data can land in a
/// buffer after it is handed back.
///
/// ```no_run
/// use rsmpi::traits::*;
/// let universe = rsmpi::initialize().unwrap();
/// let world = universe.world();
/// let peer = world.process_at_rank(1 - world.rank());
/// let mut got = [0u64; 4];
/// let out = [world.rank() as u64; 4];
/// rsmpi::request::scope(|scope| {
///     let r = peer.immediate_receive_into(scope, &mut got[..]);
///     let s = peer.immediate_send(scope, &out[..]);
///     s.wait();
///     r.wait();
/// });
/// ```
pub fn scope<'e, T>(f: impl for<'s> FnOnce(&'s Scope<'s, 'e>) -> T) -> T {
    mem::scope(&HOST, f)
}

/// A pending non-blocking operation.
#[must_use = "a request must be waited on or tested"]
pub struct Request<'s> {
    pub(crate) key: Key,
    pub(crate) capacity: u64,
    pub(crate) elem: usize,
    pub(crate) ctx: u32,
    pub(crate) _scope: std::marker::PhantomData<&'s ()>,
}

impl Request<'_> {
    /// Waits for completion (`MPI_Wait`); errors go to the error handler.
    pub fn wait(self) -> Status {
        self.try_wait()
            .unwrap_or_else(|e| crate::topology::fail("wait", e))
    }

    /// Waits for completion and returns errors (truncation, ready send without a
    /// receive) to the caller.
    pub fn try_wait(self) -> Result<Status> {
        let d = progress::wait(self.key);
        finish(d, self.capacity, self.elem, self.ctx)
    }

    /// Tests for completion (`MPI_Test`): the status if complete, else the request.
    pub fn test(self) -> std::result::Result<Status, Self> {
        match progress::test(self.key) {
            Some(d) => Ok(finish(d, self.capacity, self.elem, self.ctx)
                .unwrap_or_else(|e| crate::topology::fail("test", e))),
            None => Err(self),
        }
    }

    /// Cancels the request (`MPI_Cancel`); wait on it afterwards:
    /// [`Status::is_cancelled`] tells whether the cancel won.
    pub fn cancel(&self) {
        progress::with(|s| {
            let _ = match self.key {
                Key::Recv(r) => s.engine.cancel_recv(r),
                Key::Send(x) => s.engine.cancel_send(x),
                Key::Null(_) => Ok(()),
            };
            s.run_outputs();
        })
    }
}

pub(crate) fn finish(d: Done, capacity: u64, elem: usize, ctx: u32) -> Result<Status> {
    match d {
        Done::Recv(RecvOutcome::Received {
            source,
            tag,
            len,
            truncated_from,
        }) => {
            if let Some(full) = truncated_from {
                return Err(Error::Truncated {
                    len: full,
                    capacity,
                });
            }
            if elem > 0 && len % elem as u64 != 0 {
                return Err(Error::Count { len, size: elem });
            }
            let source = if source == crate::PROC_NULL as u32 {
                crate::PROC_NULL
            } else if ctx & !crate::topology::INTERNAL == 0 {
                source as i32
            } else {
                progress::with(|s| s.comm_rank(ctx, source))
            };
            Ok(Status {
                source,
                tag,
                len,
                cancelled: false,
            })
        }
        Done::Recv(RecvOutcome::Cancelled) | Done::Send(SendOutcome::Cancelled) => Ok(Status {
            source: -1,
            tag: -1,
            len: 0,
            cancelled: true,
        }),
        Done::Send(SendOutcome::Sent) => Ok(Status {
            source: -1,
            tag: -1,
            len: 0,
            cancelled: false,
        }),
        Done::Send(SendOutcome::Failed(SendError::NoReceivePosted)) => Err(Error::NoReceivePosted),
        Done::Send(SendOutcome::Failed(e)) => Err(Error::Buffer(e.to_string())),
    }
}

/// Finishes request `i` of a collection if it completed; inactive (`None`) entries
/// are skipped, finished ones become `None` (`MPI_REQUEST_NULL`).
fn poll_one(reqs: &mut [Option<Request<'_>>], i: usize) -> Option<Status> {
    let key = reqs[i].as_ref()?.key;
    let d = progress::with(|s| s.done.remove(&key))?;
    let r = reqs[i].take().expect("active");
    Some(finish(d, r.capacity, r.elem, r.ctx).unwrap_or_else(|e| crate::topology::fail("wait", e)))
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

/// `MPI_Testany`: completes one finished request, if any.
pub fn test_any(reqs: &mut [Option<Request<'_>>]) -> TestAny {
    if reqs.iter().all(Option::is_none) {
        return TestAny::Inactive;
    }
    progress_once();
    match (0..reqs.len()).find_map(|i| poll_one(reqs, i).map(|st| (i, st))) {
        Some((i, st)) => TestAny::Completed(i, st),
        None => TestAny::Pending,
    }
}

/// `MPI_Waitany`: waits until one request completes; `None` when every entry is
/// inactive (`MPI_UNDEFINED`).
pub fn wait_any(reqs: &mut [Option<Request<'_>>]) -> Option<(usize, Status)> {
    let mut backoff = progress::Backoff::new();
    loop {
        match test_any(reqs) {
            TestAny::Inactive => return None,
            TestAny::Completed(i, st) => return Some((i, st)),
            TestAny::Pending => {
                backoff.idle();
            }
        }
    }
}

/// `MPI_Testsome`: completes every finished request; returns (index, status) pairs.
pub fn test_some(reqs: &mut [Option<Request<'_>>]) -> Vec<(usize, Status)> {
    progress_once();
    (0..reqs.len())
        .filter_map(|i| poll_one(reqs, i).map(|st| (i, st)))
        .collect()
}

/// `MPI_Waitsome`: waits until at least one request completes (unless all are
/// inactive: then returns an empty vector at once).
pub fn wait_some(reqs: &mut [Option<Request<'_>>]) -> Vec<(usize, Status)> {
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
    }
}

/// `MPI_Testall`: the statuses if every active request completed (then all entries
/// become `None`), otherwise `None` and nothing changes.
pub fn test_all(reqs: &mut [Option<Request<'_>>]) -> Option<Vec<Option<Status>>> {
    progress_once();
    let all = progress::with(|s| reqs.iter().flatten().all(|r| s.done.contains_key(&r.key)));
    all.then(|| (0..reqs.len()).map(|i| poll_one(reqs, i)).collect())
}

/// `MPI_Waitall`: waits for every active request; inactive entries give `None`.
pub fn wait_all(reqs: &mut [Option<Request<'_>>]) -> Vec<Option<Status>> {
    let mut out = vec![None; reqs.len()];
    for (i, r) in reqs.iter_mut().enumerate() {
        if let Some(r) = r.take() {
            out[i] = Some(r.wait());
        }
    }
    out
}

/// A persistent request (`MPI_Send_init` / `MPI_Recv_init`): the same operation,
/// started again and again with [`Persistent::start`].
pub struct Persistent<'s> {
    pub(crate) start: Box<dyn Fn() -> crate::Result<Request<'s>> + 's>,
    pub(crate) active: Option<Request<'s>>,
    pub(crate) region: transport::mem::RegionId,
}

impl<'s> Persistent<'s> {
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
    pub fn wait(&mut self) -> Option<Status> {
        self.active.take().map(Request::wait)
    }

    /// Tests the current operation: `Some(status)` once complete, `None` while
    /// pending or inactive.
    pub fn test(&mut self) -> Option<Status> {
        let r = self.active.take()?;
        match r.test() {
            Ok(st) => Some(st),
            Err(r) => {
                self.active = Some(r);
                None
            }
        }
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
            bytemuck::try_cast_slice_mut(b).map(f).map_err(|e| {
                crate::Error::Request(format!("buffer is not a slice of this type: {e}"))
            })
        })
    }
}

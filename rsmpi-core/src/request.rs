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
/// rsmpi::request::scope(|scope| {
///     let r = peer.immediate_receive_into(scope, &mut got[..]);
///     let s = peer.immediate_send(scope, &[world.rank() as u64; 4][..]);
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
    pub(crate) _scope: std::marker::PhantomData<&'s ()>,
}

impl Request<'_> {
    /// Waits for completion (`MPI_Wait`); errors go to the error handler.
    pub fn wait(self) -> Status {
        self.try_wait().unwrap_or_else(|e| crate::topology::fail("wait", e))
    }

    /// Waits for completion and returns errors (truncation, ready send without a
    /// receive) to the caller.
    pub fn try_wait(self) -> Result<Status> {
        let d = progress::wait(self.key);
        finish(d, self.capacity, self.elem)
    }

    /// Tests for completion (`MPI_Test`): the status if complete, else the request.
    pub fn test(self) -> std::result::Result<Status, Self> {
        match progress::test(self.key) {
            Some(d) => Ok(finish(d, self.capacity, self.elem).unwrap_or_else(|e| crate::topology::fail("test", e))),
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
            };
            s.run_outputs();
        })
    }
}

pub(crate) fn finish(d: Done, capacity: u64, elem: usize) -> Result<Status> {
    match d {
        Done::Recv(RecvOutcome::Received { source, tag, len, truncated_from }) => {
            if let Some(full) = truncated_from {
                return Err(Error::Truncated { len: full, capacity });
            }
            if elem > 0 && len % elem as u64 != 0 {
                return Err(Error::Count { len, size: elem });
            }
            Ok(Status { source: source as i32, tag, len, cancelled: false })
        }
        Done::Recv(RecvOutcome::Cancelled) | Done::Send(SendOutcome::Cancelled) => {
            Ok(Status { source: -1, tag: -1, len: 0, cancelled: true })
        }
        Done::Send(SendOutcome::Sent) => Ok(Status { source: -1, tag: -1, len: 0, cancelled: false }),
        Done::Send(SendOutcome::Failed(SendError::NoReceivePosted)) => Err(Error::NoReceivePosted),
        Done::Send(SendOutcome::Failed(e)) => Err(Error::Buffer(e.to_string())),
    }
}

/// Waits for all requests (`MPI_Waitall`).
pub fn wait_all(reqs: Vec<Request<'_>>) -> Vec<Status> {
    reqs.into_iter().map(Request::wait).collect()
}

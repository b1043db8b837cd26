//! The hooks the built-in tools hang on: one switch for all of them, the guard that
//! marks an MPI call's enter and leave, and the library state's record of messages
//! and receives. With no tool on, a call tests one relaxed atomic flag on entry and a
//! register on return, and a message tests whether the state holds any tool.
//!
//! The tools: the tracer (`RSMPI_TRACE`, [`crate::trace`]), the message-race checker
//! (`RSMPI_CHECK=races`, [`crate::check`]) and the deadlock detector
//! (`RSMPI_CHECK=deadlock`, `check/deadlock.rs`); `docs/tools.md`.

use std::sync::atomic::{AtomicBool, Ordering};

use matching::{RecvId, RecvOutcome, SendId, Source, TagSel};

use crate::check::deadlock::Deadlock;
use crate::check::Races;
use crate::progress;
use crate::topology::SimpleCommunicator;
use crate::trace::format::{Kind, Op};
use crate::trace::Tracer;

static ON: AtomicBool = AtomicBool::new(false);

/// Whether any tool is on in this process.
#[inline(always)]
pub(crate) fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The tools of this rank, in the library state while any is on.
#[derive(Default)]
pub(crate) struct Tools {
    pub trace: Option<Tracer>,
    pub races: Option<Races>,
    pub deadlock: Option<Deadlock>,
    /// A tool's own traffic is running: no tool records or checks it.
    pub busy: bool,
    /// The user's MPI call in progress (the outermost one) and how deep inside it
    /// the library is.
    pub call: crate::check::Call,
    pub depth: u32,
}

impl Tools {
    /// A message of `bytes` bytes left for world rank `dest`.
    #[cold]
    #[inline(never)]
    pub fn sent(&mut self, dest: u32, ctx: u32, tag: i32, bytes: u64, id: Option<SendId>) {
        if self.busy {
            return;
        }
        if let Some(t) = &mut self.trace {
            t.send(dest, ctx, tag, bytes);
        }
        if let (Some(d), Some(id)) = (&mut self.deadlock, id) {
            d.send_started(id, dest, self.call);
        }
    }

    /// A send completed.
    #[cold]
    #[inline(never)]
    pub fn send_done(&mut self, id: SendId) {
        if let Some(d) = &mut self.deadlock {
            d.send_done(id);
        }
    }

    /// A receive was posted (or a matched message's receive started: `source` and
    /// `tag` are then the message's own).
    #[cold]
    #[inline(never)]
    pub fn posted(&mut self, id: RecvId, ctx: u32, source: Source, tag: TagSel) {
        if self.busy {
            return;
        }
        if let Some(t) = &mut self.trace {
            t.posted(id, ctx);
        }
        if let Some(r) = &mut self.races {
            r.posted(id, ctx, source, tag, self.call);
        }
        if let Some(d) = &mut self.deadlock {
            d.posted(id, source, self.call);
        }
    }

    /// A receive completed (in the order the engine matched them).
    #[cold]
    #[inline(never)]
    pub fn received(&mut self, id: RecvId, outcome: &RecvOutcome) {
        if let Some(t) = &mut self.trace {
            t.received(id, outcome);
        }
        if let Some(r) = &mut self.races {
            r.received(id, outcome);
        }
        if let Some(d) = &mut self.deadlock {
            d.received(id);
        }
    }
}

/// Starts the tools the environment asks for; called by every rank at initialisation
/// (the tools' set-up is collective: every rank must have the same settings).
pub(crate) fn init(world: &SimpleCommunicator) -> crate::Result<()> {
    let trace = crate::trace::settings()?;
    let checks = crate::check::settings()?;
    if trace.is_none() && !checks.any() {
        return Ok(());
    }
    progress::with(|s| s.tools = Some(Box::default()));
    ON.store(true, Ordering::Relaxed);
    if checks.any() {
        crate::check::init(world, checks)?;
    }
    if let Some(t) = trace {
        crate::trace::init(world, t)?;
    }
    Ok(())
}

/// Ends the tools at finalize (before the final barrier).
pub(crate) fn finish() {
    if is_on() {
        crate::check::finish();
        crate::trace::finish();
        with(|t| t.deadlock = None);
        ON.store(false, Ordering::Relaxed);
    }
}

/// Runs a tool's own traffic (`f`), which no tool records or checks.
pub(crate) fn own_traffic<R>(f: impl FnOnce() -> R) -> R {
    with(|t| t.busy = true);
    let r = f();
    with(|t| t.busy = false);
    r
}

/// Runs `f` on this rank's tools, if any is on and MPI is initialised.
pub(crate) fn with<R>(f: impl FnOnce(&mut Tools) -> R) -> Option<R> {
    progress::try_with(|s| s.tools.as_deref_mut().map(f))
        .ok()
        .flatten()
}

/// An MPI call in progress: the tools see it begin when it is made and end when this
/// is dropped.
pub(crate) struct Call(Option<Op>);

/// Marks the start of the MPI call `op` (a no-op unless a tool is on). The functions
/// between the user's call and this one are `#[track_caller]`, so that the tools see
/// the user's source line.
#[inline(always)]
#[track_caller]
pub(crate) fn call(op: Op) -> Call {
    if is_on() {
        enter(op, std::panic::Location::caller());
        Call(Some(op))
    } else {
        Call(None)
    }
}

impl Call {
    /// Whether a tool is watching this call.
    #[inline(always)]
    pub fn watched(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Call {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(op) = self.0 {
            leave(op);
        }
    }
}

#[cold]
#[inline(never)]
fn enter(op: Op, site: &'static std::panic::Location<'static>) {
    with(|t| {
        if t.busy {
            return;
        }
        if t.depth == 0 {
            t.call = crate::check::Call {
                op: Some(op),
                site: Some(site),
            };
        }
        t.depth += 1;
        if let Some(t) = &mut t.trace {
            t.push(Kind::Enter, op as u8, 0, 0, 0, 0, 0);
        }
    });
}

#[cold]
#[inline(never)]
fn leave(op: Op) {
    with(|t| {
        if t.busy {
            return;
        }
        t.depth = t.depth.saturating_sub(1);
        if let Some(t) = &mut t.trace {
            t.push(Kind::Leave, op as u8, 0, 0, 0, 0, 0);
        }
    });
    // the receives this call completed, checked for races in the order they matched
    crate::check::settle();
}

//! A traced rank asked to stop by a signal writes its events first.
//!
//! When one rank of a job fails, `rsmpirun` sends the others SIGTERM and, two seconds
//! later, SIGKILL; it forwards SIGINT, SIGTERM and SIGHUP (a user's Ctrl-C on a hung
//! job) the same way. A traced rank killed so kept only what it had flushed, often
//! nothing, although the events it held are the ones that show why the job hung.
//!
//! While tracing, those three signals only note that they came (a flag, which is all a
//! signal handler may safely do). A rank that then waits in the library
//! ([`crate::progress::Backoff::idle`], where every blocking call spins) writes its
//! buffer, without the record written at finalize, and ends as the signal would have
//! ended it. A rank that does not wait in the library before the launcher's SIGKILL
//! loses its buffer as before; one that reaches finalize first ends there, after its
//! trace is complete. More signals change nothing: a Ctrl-C reaches the ranks both
//! from the terminal and forwarded by `rsmpirun`, and the second must not cut the
//! write short (`rsmpirun` sends SIGKILL at once on a second Ctrl-C; without it,
//! Ctrl-\ (SIGQUIT) ends a traced program at once). Once tracing has finished, the
//! signals end the process at once as by default.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The signals a launcher stops a job with.
const STOPS: [i32; 3] = [SIGTERM, SIGINT, SIGHUP];

struct Caught {
    /// The number of the signal that came (0 before one came).
    got: Arc<AtomicUsize>,
    /// A signal ends the process at once, as by default (tracing is not on).
    now: Arc<AtomicBool>,
}

static CAUGHT: OnceLock<Caught> = OnceLock::new();

/// Catches the stop signals while tracing (at the tracer's start). A signal that
/// cannot be caught is left as it is, with a warning.
pub(crate) fn catch() {
    let c = CAUGHT.get_or_init(|| {
        let c = Caught {
            got: Arc::new(AtomicUsize::new(0)),
            now: Arc::new(AtomicBool::new(true)),
        };
        for sig in STOPS {
            let res = signal_hook::flag::register_conditional_default(sig, c.now.clone())
                .and_then(|_| signal_hook::flag::register_usize(sig, c.got.clone(), sig as usize));
            if let Err(e) = res {
                eprintln!(
                    "rsmpi: tracing: signal {sig} not caught ({e}): a rank it stops loses \
                     the events it has not written"
                );
            }
        }
        c
    });
    c.now.store(false, Ordering::SeqCst);
}

/// Whether a stop signal came (read where a rank waits in the library).
#[inline]
pub(crate) fn came() -> bool {
    CAUGHT
        .get()
        .is_some_and(|c| c.got.load(Ordering::Relaxed) != 0)
}

/// Tracing ends (at finalize): a signal ends the process at once again, and one that
/// came while the rank was not waiting in the library ends it now.
pub(crate) fn release() {
    if let Some(c) = CAUGHT.get() {
        c.now.store(true, Ordering::SeqCst);
        end(c);
    }
}

/// A stop signal came: writes this rank's buffered events and ends the process as
/// the signal would have.
#[cold]
#[inline(never)]
pub(crate) fn stop() {
    crate::tools::with(|t| {
        if let Some(tr) = t.trace.as_mut() {
            tr.write_at_abort();
        }
    });
    if let Some(c) = CAUGHT.get() {
        end(c);
    }
}

/// Ends the process as the signal that came would have, if one came.
fn end(c: &Caught) {
    let sig = c.got.load(Ordering::SeqCst) as i32;
    if sig != 0 {
        // resets the signal's action to the default and raises it; falls back to
        // an abort if that does not end the process
        let _ = signal_hook::low_level::emulate_default_handler(sig);
        std::process::exit(128 + sig);
    }
}

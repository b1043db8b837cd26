//! Start-up and shut-down (`mpi::environment`): [`initialize`], [`Universe`], time,
//! and the environment inquiries.

use crate::error::{Error, Result};
use crate::progress::{self, State};
use crate::topology::{Communicator, SimpleCommunicator};
use launcher::Boot;
use matching::{Config, Engine, MatchingMode, RecvProtocol};
use rustc_hash::FxHashMap as HashMap;
use transport::Exchange;

/// The MPI environment of this process. Dropping it finalizes MPI.
pub struct Universe {
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Messages up to this size travel inside the send request (eager); larger ones by
/// rendezvous. On shared memory a copy into the ring and one out of it beat a
/// `process_vm_readv`/`writev`, which costs over a microsecond before it copies
/// anything, up to at least this size (docs/performance.md); it is also the largest
/// record of the shared-memory ring.
pub const DEFAULT_EAGER_LIMIT: u64 = 65536;
/// Direct writes up to this size ride inside their notice (the receiver copies them
/// out of the ring, which beats a `process_vm_writev` by the sender up to here); larger
/// ones are written one-sided by the sender, leaving the receiver's CPU free.
pub const DEFAULT_INLINE_LIMIT: u64 = 65536;

/// Reads the protocol switches from the environment:
/// `RSMPI_MATCHING=both|receiver`, `RSMPI_PROTOCOL=eager|get|sync`,
/// `RSMPI_EAGER_LIMIT=bytes` (default [`DEFAULT_EAGER_LIMIT`]), `RSMPI_INLINE_LIMIT=bytes`
/// (direct writes up to this size travel inline in their notice instead of by a
/// one-sided write; default [`DEFAULT_INLINE_LIMIT`], 0 = always one-sided),
/// `RSMPI_ADVERTISE=adaptive|always` (default adaptive: receives that eager messages
/// fit are not advertised under the eager protocol, and a sender whose sends keep
/// crossing the advertisements gets none for a while: `Config::advertise_above`,
/// `Config::adapt_after`; always = advertise every receive, as the paper does),
/// `RSMPI_LONE_READ_ABOVE=bytes|off` (a standard send above this size with nothing
/// else in flight to its destination is read once by the receiver, at its arrival:
/// `Config::lone_read_above`; default the transport's measured
/// `Caps::lone_read_above`, 8 KiB on shared memory),
/// `RSMPI_CROSS_READ_ABOVE=bytes|off` (a standard send above this size, to a peer whose
/// own large sends keep arriving while a stream of this rank's is in flight to it, is
/// read once by the receiver: `Config::cross_read_above`; default the transport's
/// `Caps::cross_read_above`, 8 KiB on shared memory),
/// `RSMPI_STREAM_READ_ABOVE=bytes|off` (a standard send above this size, within the
/// eager limit, sent while others of this rank's are in flight to its destination, is
/// read once by the receiver where the transport advises it:
/// `Config::stream_read_above`; default `Caps::lone_read_above`).
/// Every rank of a job must see the same values (rsmpirun passes its environment to
/// all ranks).
pub fn config_from_env() -> Result<Config> {
    let mut c = Config {
        eager_limit: DEFAULT_EAGER_LIMIT,
        inline_limit: DEFAULT_INLINE_LIMIT,
        tell_after: matching::TELL_AFTER,
        ..Config::default()
    };
    if let Ok(v) = std::env::var("RSMPI_INLINE_LIMIT") {
        c.inline_limit = v
            .parse()
            .map_err(|_| Error::Transport(format!("RSMPI_INLINE_LIMIT={v}")))?;
    }
    if let Ok(v) = std::env::var("RSMPI_MATCHING") {
        c.matching = match v.as_str() {
            "both" => MatchingMode::Both,
            "receiver" => MatchingMode::Receiver,
            _ => {
                return Err(Error::Transport(format!(
                    "RSMPI_MATCHING={v}: expected both or receiver"
                )))
            }
        };
    }
    if let Ok(v) = std::env::var("RSMPI_PROTOCOL") {
        c.protocol = match v.as_str() {
            "eager" => RecvProtocol::Eager,
            "get" => RecvProtocol::Get,
            "sync" => RecvProtocol::Sync,
            _ => {
                return Err(Error::Transport(format!(
                    "RSMPI_PROTOCOL={v}: expected eager, get or sync"
                )))
            }
        };
    }
    if let Ok(v) = std::env::var("RSMPI_EAGER_LIMIT") {
        c.eager_limit = v
            .parse()
            .map_err(|_| Error::Transport(format!("RSMPI_EAGER_LIMIT={v}")))?;
    }
    // with the eager protocol a receive that eager messages fit gains nothing from
    // being advertised (docs/protocol.md rule 15)
    if c.protocol == RecvProtocol::Eager {
        c.advertise_above = c.eager_limit;
    }
    if let Some(n) = bytes_or_off("RSMPI_LONE_READ_ABOVE")? {
        c.lone_read_above = n;
    }
    if let Some(n) = bytes_or_off("RSMPI_CROSS_READ_ABOVE")? {
        c.cross_read_above = n;
    }
    if let Some(n) = bytes_or_off("RSMPI_STREAM_READ_ABOVE")? {
        c.stream_read_above = n;
    }
    if let Ok(v) = std::env::var("RSMPI_ADVERTISE") {
        match v.as_str() {
            "adaptive" => {}
            "always" => {
                c.adapt_after = 0;
                c.advertise_above = 0;
            }
            _ => {
                return Err(Error::Transport(format!(
                    "RSMPI_ADVERTISE={v}: expected adaptive or always"
                )))
            }
        }
    }
    Ok(c)
}

/// The size the environment variable `name` sets, `bytes` or `off` (`u64::MAX`:
/// never), if it is set.
fn bytes_or_off(name: &str) -> Result<Option<u64>> {
    let Ok(v) = std::env::var(name) else {
        return Ok(None);
    };
    match v.as_str() {
        "off" => Ok(Some(u64::MAX)),
        _ => v
            .parse()
            .map(Some)
            .map_err(|_| Error::Transport(format!("{name}={v}: expected bytes or off"))),
    }
}

/// Sizes the protocol's credits to what the transport's channel to one peer holds.
fn size_credits(cfg: &mut Config, caps: &transport::Caps) {
    if caps.ring_bytes > 0 {
        // weighed by size: one credit per started KiB of payload. A message costing c
        // credits carries under c KiB, so its record (header word, protocol header,
        // rounding to a line) is under c * PER bytes; explicit credit returns (one
        // line each, at most credits / low_water + 2 in flight) get their own room.
        const UNIT: u64 = 1024;
        const PER: u64 = UNIT + 8 + matching::wire::MAX_HEADER as u64 + 64;
        let room = caps.ring_bytes as u64 - 16 * 64;
        let credits = (room / PER).min(u64::from(u32::MAX)) as u32;
        if credits >= 8 {
            cfg.credit_unit = UNIT;
            cfg.credits = credits;
            cfg.low_water = credits / 4;
            return;
        }
    }
    while cfg.ring_slots_needed() as usize > caps.ctrl_slots && cfg.credits > 1 {
        cfg.credits /= 2;
        cfg.low_water = (cfg.credits / 2).max(1);
    }
}

/// Initializes MPI (`MPI_Init`): joins the job started by `rsmpirun` (or runs as a
/// job of one rank when started directly).
///
/// As in the `mpi` crate, `None` means MPI was already initialized; any other failure
/// (a bad setting, a launcher or transport that cannot start) panics with its cause.
/// [`try_initialize`] returns every error instead.
pub fn initialize() -> Option<Universe> {
    match try_initialize() {
        Ok(u) => Some(u),
        Err(Error::AlreadyInitialized) => None,
        Err(e) => panic!("rsmpi: initialize: {e}"),
    }
}

/// [`initialize`] returning errors.
pub fn try_initialize() -> Result<Universe> {
    let cfg = config_from_env()?;
    initialize_with(cfg)
}

/// Thread support levels (`MPI_THREAD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Threading {
    Single,
    Funneled,
    Serialized,
    Multiple,
}

/// `MPI_Init_thread`: rsmpi provides `Funneled` — every call from the thread that
/// initialized (the library state is that thread's); the level provided is returned.
pub fn initialize_thread(required: Threading) -> Result<(Universe, Threading)> {
    let _ = required;
    Ok((try_initialize()?, Threading::Funneled))
}

/// `MPI_Init_thread` in the `mpi` crate's spelling: the level provided is
/// `Funneled` at most (see [`initialize_thread`]).
/// `None` when MPI is already initialized (see [`initialize`]).
pub fn initialize_with_threading(required: Threading) -> Option<(Universe, Threading)> {
    match initialize_thread(required) {
        Ok((u, provided)) => Some((u, provided.min(required))),
        Err(Error::AlreadyInitialized) => None,
        Err(e) => panic!("rsmpi: initialize: {e}"),
    }
}

/// The thread support level of the running library (`MPI_Query_thread`).
pub fn threading_support() -> Threading {
    Threading::Funneled
}

/// Whether MPI is initialized on this thread and not yet finalized.
pub fn is_initialized() -> bool {
    progress::try_with(|_| ()).is_ok()
}

/// Whether MPI was finalized in this process.
pub fn is_finalized() -> bool {
    FINALIZED.load(std::sync::atomic::Ordering::Relaxed)
}

static FINALIZED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The version of the MPI standard implemented (`MPI_Get_version`): MPI-1's
/// point-to-point and collective operations, with the MPI-3 matched probes, so 3.1.
pub fn version() -> (i32, i32) {
    (3, 1)
}

/// The library's name and version (`MPI_Get_library_version`).
pub fn library_version() -> std::result::Result<String, std::string::FromUtf8Error> {
    Ok(format!("rsmpi {}", env!("CARGO_PKG_VERSION")))
}

/// The name of this node (`MPI_Get_processor_name`).
pub fn processor_name() -> std::result::Result<String, std::string::FromUtf8Error> {
    let name = std::fs::read("/proc/sys/kernel/hostname").unwrap_or_else(|_| b"localhost".to_vec());
    String::from_utf8(name).map(|s| s.trim().to_string())
}

/// Initializes MPI with explicit protocol settings (all ranks must agree).
pub fn initialize_with(mut cfg: Config) -> Result<Universe> {
    if progress::try_with(|_| ()).is_ok() {
        return Err(Error::AlreadyInitialized);
    }
    let mut boot = Boot::init().map_err(|e| Error::Transport(e.to_string()))?;
    let (t, transport_kind) = crate::select::open(&mut boot)?;
    let caps = t.caps();
    // the eager payload rides inside one control message
    cfg.eager_limit = cfg
        .eager_limit
        .min((caps.max_ctrl - matching::wire::MAX_HEADER) as u64);
    cfg.inline_limit = cfg.inline_limit.min(cfg.eager_limit);
    // choose by capability: where the transport carries a few bytes one-sidedly in the
    // work request (RDMA), a pre-posted receive gets every direct write that way; on
    // shared memory a small payload is faster in the ring (RSMPI_INLINE_LIMIT decides)
    if caps.put_inline > 0 && std::env::var_os("RSMPI_INLINE_LIMIT").is_none() {
        cfg.inline_limit = 0;
    }
    cfg.advertise_above = cfg.advertise_above.min(cfg.eager_limit);
    // the transport's measured switch, unless RSMPI_LONE_READ_ABOVE or the caller chose
    if cfg.lone_read_above == u64::MAX && std::env::var_os("RSMPI_LONE_READ_ABOVE").is_none() {
        cfg.lone_read_above = caps.lone_read_above;
    }
    // a stream's sends above the same switch are read where the transport advises it
    if cfg.stream_read_above == u64::MAX && std::env::var_os("RSMPI_STREAM_READ_ABOVE").is_none() {
        cfg.stream_read_above = caps.lone_read_above;
    }
    // and its switch for reads of crossing traffic
    if cfg.cross_read_above == u64::MAX && std::env::var_os("RSMPI_CROSS_READ_ABOVE").is_none() {
        cfg.cross_read_above = caps.cross_read_above;
    }
    size_credits(&mut cfg, &caps);
    let me = boot.rank();
    let mut engine = Engine::new(me, boot.size(), cfg);
    // an early message's payload is copied the way that does not stall on this
    // machine's 4 KiB aliasing, as every other copy of a message is
    engine.copy_early_with(transport::copy::extend);
    progress::install(State {
        engine,
        transport: wrap_transport(t),
        transport_kind,
        regions: Default::default(),
        recvs: Default::default(),
        send_src: Default::default(),
        by_region: Default::default(),
        done: Default::default(),
        boot,
        next_ctx: 16,
        next_null: 0,
        groups: HashMap::from_iter([(1, progress::Group::new(vec![me]))]),
        freed: Default::default(),
        names: Default::default(),
        owned_done: Default::default(),
        colls: Default::default(),
        start: std::time::Instant::now(),
        registers: caps.registers,
        exposures: Default::default(),
        pending_gets: Default::default(),
        pending_puts: 0,
        want_done: caps.registers,
        unexpose_later: Vec::new(),
        tools: None,
        finish_hooks: caps.registers,
    })?;
    let u = Universe {
        _not_send: std::marker::PhantomData,
    };
    // every rank has its rings mapped before anyone sends
    crate::collective::CommunicatorCollectives::barrier(&u.world());
    crate::tools::init(&u.world())?;
    Ok(u)
}

impl Universe {
    /// `MPI_COMM_WORLD`.
    pub fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    /// `MPI_COMM_SELF`.
    pub fn self_comm(&self) -> SimpleCommunicator {
        SimpleCommunicator::self_comm()
    }

    /// The number of ranks the job has (`MPI_UNIVERSE_SIZE`): its size, as rsmpi
    /// cannot spawn processes.
    pub fn size(&self) -> Option<usize> {
        Some(self.world().size() as usize)
    }

    /// The size of the attached buffered-send buffer (0 when none).
    pub fn buffer_size(&self) -> usize {
        progress::with(|s| s.engine.buffer_size()) as usize
    }

    /// Attaches a buffer of `size` bytes for buffered sends, detaching (and waiting
    /// for) any earlier one first; 0 detaches only.
    pub fn set_buffer_size(&mut self, size: usize) {
        self.detach_buffer();
        if size > 0 {
            self.buffer_attach(size)
                .unwrap_or_else(|e| crate::topology::fail("buffer_attach", e));
        }
    }

    /// Detaches the buffered-send buffer, waiting until every buffered send has left.
    pub fn detach_buffer(&mut self) {
        if self.buffer_size() > 0 {
            self.buffer_detach()
                .unwrap_or_else(|e| crate::topology::fail("buffer_detach", e));
        }
    }

    /// The transports this rank uses: `shm`, `verbs`, `ofi`, or two joined by `+`
    /// (shared memory within the node, the network beyond).
    pub fn transport(&self) -> String {
        progress::with(|s| s.transport_kind.clone())
    }

    /// Counters of which path sends took (direct write, eager, rendezvous).
    pub fn stats(&self) -> matching::Stats {
        progress::with(|s| s.engine.stats())
    }

    /// Attaches a buffer of `size` bytes for buffered sends (`MPI_Buffer_attach`).
    pub fn buffer_attach(&self, size: usize) -> Result<()> {
        progress::with(|s| s.engine.attach_buffer(size as u64)).map_err(Into::into)
    }

    /// Detaches the buffer, waiting until every buffered send has left
    /// (`MPI_Buffer_detach`); returns its size.
    pub fn buffer_detach(&self) -> Result<usize> {
        loop {
            let r = progress::with(|s| {
                s.progress();
                s.engine.detach_buffer()
            })?;
            if let Some(n) = r {
                return Ok(n as usize);
            }
            std::thread::yield_now();
        }
    }

    /// Ends the whole job with `code` (`MPI_Abort`).
    pub fn abort(&self, code: i32) -> ! {
        progress::with(|s| {
            s.abort(
                code,
                &format!("rsmpi: rank {} called abort({code})", s.rank()),
            )
        })
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // a rank that panics ends the job: the others may be waiting for it
            progress::with(|s| {
                let msg = format!("rsmpi: rank {} panicked; ending the job", s.rank());
                s.abort(101, &msg)
            });
        }
        // MPI_Finalize: finish outstanding traffic, then make sure no peer still
        // needs our rings before unmapping them.
        crate::tools::finish();
        progress::with(|s| s.engine.closing());
        crate::collective::CommunicatorCollectives::barrier(&self.world());
        // the transport finishes its traffic (a network endpoint must not close while
        // a peer still reads from its own, `Transport::close`), then every rank waits
        // for the others outside it before any lets it go
        progress::with(|s| {
            let me = s.rank();
            if let Err(e) = s.transport.close() {
                eprintln!("rsmpi: rank {me}: MPI_Finalize: closing the transport: {e}");
            }
            if let Err(e) = s.boot.fence() {
                eprintln!("rsmpi: rank {me}: MPI_Finalize: the last fence: {e}");
            }
        });
        progress::uninstall();
        FINALIZED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `MPI_Wtime`: seconds since an arbitrary point in the past.
pub fn time() -> f64 {
    progress::try_with(|s| s.start.elapsed().as_secs_f64()).unwrap_or_else(|_| {
        static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        T0.get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
    })
}

/// `MPI_Wtick`: resolution of [`time`] in seconds.
pub fn time_resolution() -> f64 {
    1e-9
}

#[cfg(feature = "fault-injection")]
fn wrap_transport(t: crate::link::Link) -> crate::link::Link {
    // unwrapped unless a fault is asked for, so that shared memory's sends are still
    // called directly in a build with the feature (the conformance suite's)
    match crate::fault::asked() {
        Some(fault) => crate::link::Link::Any(crate::fault::wrap(t.into_dyn(), fault)),
        None => t,
    }
}

#[cfg(not(feature = "fault-injection"))]
fn wrap_transport(t: crate::link::Link) -> crate::link::Link {
    t
}

#[cfg(test)]
mod tests {
    use super::bytes_or_off;

    /// A size setting: unset, a number of bytes, `off`, or anything else (an error
    /// that names the variable and its value).
    #[test]
    fn sizes_from_the_environment() {
        // a name of this test's own: other tests read the real ones
        const NAME: &str = "RSMPI_TEST_BYTES_OR_OFF";
        std::env::remove_var(NAME);
        assert_eq!(bytes_or_off(NAME).unwrap(), None);
        std::env::set_var(NAME, "16384");
        assert_eq!(bytes_or_off(NAME).unwrap(), Some(16384));
        std::env::set_var(NAME, "off");
        assert_eq!(bytes_or_off(NAME).unwrap(), Some(u64::MAX));
        std::env::set_var(NAME, "16k");
        let err = bytes_or_off(NAME).unwrap_err().to_string();
        assert!(
            err.contains("RSMPI_TEST_BYTES_OR_OFF=16k: expected bytes or off"),
            "{err}"
        );
        std::env::remove_var(NAME);
    }
}

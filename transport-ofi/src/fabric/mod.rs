//! The libfabric transport proper (cargo feature `libfabric`). All FFI and all
//! `unsafe` live in [`ffi`]; this module is safe code on top of it.

#[allow(unsafe_code)]
mod ffi;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::time::{Duration, Instant};

use transport::{check_bounds, Caps, Exchange, Posted, Rank, RemoteBuf, Transport, TransportError};

use crate::{
    OfiConfig, CTRL_SLOTS, ENV_MR_LOCAL, ENV_NO_SAW, KEY_ADDR, KEY_MODE, KEY_PROV, MAX_CTRL,
};
use ffi::{AddrKind, Endpoint, ErrKind, Event, FiError, InfoDesc, InfoList, Local, MrId, Post};

/// Bytes of our own header in front of every control message: the sender's rank and
/// the message's sequence number on its (sender, receiver) pair, both u32 LE.
const WIRE_HDR: usize = 8;
/// In the header's rank word: the message is the sender's goodbye (`goodbye`).
const BYE: u32 = 1 << 31;
/// One bounce slot: a maximum control message plus our header, in whole cache lines.
const SLOT_BYTES: usize = (MAX_CTRL + WIRE_HDR).div_ceil(64) * 64;
/// Send bounce slots (shared by all peers).
const SEND_SLOTS: usize = 64;
/// Posted receive slots. The provider buffers what arrives beyond them (RDM endpoints
/// with FI_RM_ENABLED never drop a message for lack of a posted receive).
const RECV_SLOTS: usize = 64;
/// Completion-queue reads per `poll`, at most (each takes up to 64 entries).
const POLL_READS: usize = 16;
/// How long a closing transport waits for its peers' goodbyes before it closes anyway
/// (a peer that died without its goodbye, for example).
const GOODBYE_WAIT: Duration = Duration::from_secs(10);
/// Providers that are known to hang here; only used when named explicitly.
const SKIPPED: &[&str] = &["sockets", "udp;ofi_rxd"];

fn fi_os(call: &'static str, e: FiError) -> TransportError {
    let source = if e.errno > 0 && e.errno < 256 {
        io::Error::new(io::Error::from_raw_os_error(e.errno).kind(), e.text)
    } else {
        io::Error::other(e.text)
    };
    TransportError::Os { call, source }
}

/// An error of an operation involving `peer`. An operation canceled because its
/// connection went down counts as the peer being unreachable.
fn peer_err(call: &'static str, peer: Rank, e: FiError) -> TransportError {
    match e.kind {
        ErrKind::Unreachable | ErrKind::Canceled => {
            let hint = if matches!(call, "fi_write" | "fi_read") {
                " (the connection is down: tcp;ofi_rxm also closes it when the target \
                 refuses a one-sided access, for example with a stale key)"
            } else {
                ""
            };
            TransportError::PeerGone(peer, format!("{call}: {}{hint}", e.text))
        }
        ErrKind::Access => TransportError::AccessDenied(peer, format!("{call}: {}", e.text)),
        ErrKind::Other => fi_os(call, e),
    }
}

/// fi_errno values of a post that refuses the flags or the operation.
const FI_EBADFLAGS: i32 = 260;
const EOPNOTSUPP: i32 = 95;
const ENOSYS: i32 = 38;

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The rxm utility provider (`tcp;ofi_rxm`, `verbs;ofi_rxm`) sends messages up to
/// `FI_OFI_RXM_BUFFER_SIZE` (16 KiB by default) eagerly and larger ones with a
/// rendezvous of its own, a round trip more: the control channel's messages go up to
/// [`MAX_CTRL`], so unless the user set it, rsmpi raises it to fit them (measured
/// across two network namespaces over tcp: 16 KiB one-way 25 -> 13 us, 64 KiB 35 ->
/// 24 us). libfabric reads it when the provider loads, at the first `fi_getinfo`.
fn rxm_eager_fits_a_control_message() {
    const VAR: &str = "FI_OFI_RXM_BUFFER_SIZE";
    if std::env::var_os(VAR).is_none() {
        std::env::set_var(VAR, (MAX_CTRL + 256).to_string());
    }
}

/// Receive buffers rxm posts to its shared receive context over verbs when rsmpi
/// turns that on ([`rxm_shared_receives`]): at the raised eager size (~66 KiB a
/// buffer) 34 MiB, pinned, against 270 MiB for rxm's default of 4 096.
const RXM_SRX_SIZE: usize = 512;

/// libfabric 1.17's rxm closes a connection's endpoint *before* it empties the
/// completion queue the endpoint shares (`rxm_close_conn`; fixed upstream in 2026,
/// libfabric commit 697688386). A completion still queued then is handled against the
/// closed endpoint. Over `verbs;ofi_rxm` that happens at `fi_close`: the verbs
/// provider's flow control sends credit messages whenever a receiver has reposted
/// half of a connection's receive buffers, one can come in after a rank's last read
/// (its peers read its goodbye and repost after it stopped reading), and rxm then
/// reposts the credit's buffer on the closed endpoint: a segfault inside libfabric.so
/// (1 job in ~80 of the short soak in the SoftRoCE guest; docs/transports.md). With a
/// shared receive context there is no such flow control (verbs offers it only without
/// one) and rxm reposts into the shared context, which it closes last. So unless the
/// user chose, rsmpi runs rxm with a shared receive context (`tcp;ofi_rxm` already
/// does by default), and when the provider asked for is verbs, one of
/// [`RXM_SRX_SIZE`] buffers (tcp keeps rxm's 4 096: 64 KiB `bw` across namespaces
/// ran at half the rate in half the jobs with 512). libfabric reads the size when
/// the provider loads, at the first `fi_getinfo`.
fn rxm_shared_receives(cfg: &OfiConfig) {
    let named = cfg
        .provider
        .clone()
        .or_else(|| std::env::var("FI_PROVIDER").ok())
        .unwrap_or_default();
    let verbs = named.to_ascii_lowercase().contains("verbs");
    for (var, value) in rxm_receive_settings(|v| std::env::var_os(v).is_some(), verbs) {
        std::env::set_var(var, value);
    }
}

/// The variables [`rxm_shared_receives`] sets, given which are set already (`is_set`)
/// and whether the provider asked for is verbs: none if the user chose whether rxm
/// shares its receive context; otherwise that it does, and over verbs its size unless
/// the user chose one.
fn rxm_receive_settings(is_set: impl Fn(&str) -> bool, verbs: bool) -> Vec<(&'static str, String)> {
    const SRX: &str = "FI_OFI_RXM_USE_SRX";
    const SIZE: &str = "FI_OFI_RXM_MSG_RX_SIZE";
    if is_set(SRX) {
        return Vec::new();
    }
    let mut v = vec![(SRX, "1".to_string())];
    if verbs && !is_set(SIZE) {
        v.push((SIZE, RXM_SRX_SIZE.to_string()));
    }
    v
}

/// What we chose from fi_getinfo.
struct Choice {
    list: InfoList,
    idx: usize,
    desc: InfoDesc,
}

/// Picks the fi_getinfo result to open; see the crate docs ("Provider selection").
fn select(cfg: &OfiConfig) -> Result<Choice, TransportError> {
    let explicit = cfg.provider.as_deref().filter(|p| !p.is_empty());
    let named = explicit.is_some() || std::env::var("FI_PROVIDER").is_ok_and(|p| !p.is_empty());
    // (SAW, SAS, manual progress): the first that yields a usable result wins.
    let attempts = [
        (true, true, true),
        (false, true, true),
        (false, false, true),
        (true, true, false),
        (false, true, false),
        (false, false, false),
    ];
    let no_saw = env_flag(ENV_NO_SAW);
    let mut seen = Vec::new();
    for (saw, sas, manual) in attempts {
        if saw && no_saw {
            continue;
        }
        let Some(list) =
            InfoList::get(explicit, saw, sas, manual).map_err(|e| fi_os("fi_getinfo", e))?
        else {
            continue;
        };
        let descs = list.describe();
        let usable = |d: &InfoDesc| {
            d.ep_rdm
                && !d.mr_raw
                && !d.needs_context
                && (named || !SKIPPED.contains(&d.prov.as_str()))
        };
        let pick = if cfg.prefer_external {
            descs
                .iter()
                .position(|d| {
                    usable(d) && matches!(d.addr_kind, AddrKind::Routable | AddrKind::Other)
                })
                .or_else(|| {
                    descs
                        .iter()
                        .position(|d| usable(d) && d.addr_kind == AddrKind::LinkLocal)
                })
        } else {
            descs.iter().position(usable)
        };
        if let Some(idx) = pick {
            let desc = descs[idx].clone();
            return Ok(Choice { list, idx, desc });
        }
        for d in descs {
            let s = format!(
                "{} ({} on {}, {:?})",
                d.prov, d.fabric, d.domain, d.addr_kind
            );
            if !seen.contains(&s) {
                seen.push(s);
            }
        }
    }
    let what = match explicit {
        Some(p) => format!("provider {p:?}"),
        None => "any provider".to_string(),
    };
    let why = if seen.is_empty() {
        "fi_getinfo found no RDM endpoint with FI_MSG and FI_RMA".to_string()
    } else {
        format!(
            "none of the results fits ({}){}",
            seen.join(", "),
            if cfg.prefer_external {
                "; a non-loopback address is required because the ranks span hosts"
            } else {
                ""
            }
        )
    };
    Err(TransportError::Os {
        call: "fi_getinfo",
        source: io::Error::new(io::ErrorKind::NotFound, format!("libfabric, {what}: {why}")),
    })
}

/// A received message waiting for its turn.
#[derive(Debug)]
enum Held {
    /// Still in its receive slot (it was next in line when it arrived).
    Slot(usize),
    /// Copied out of its slot (it arrived before an earlier message of its source).
    Copy(Vec<u8>),
    /// The source's goodbye: it sends nothing after it.
    Bye,
}

/// The libfabric [`Transport`]; see the crate docs.
pub struct OfiTransport {
    rank: Rank,
    size: u32,
    prov: String,
    /// Fabric and domain names of the chosen fi_info (for Debug output).
    fabric: String,
    domain: String,
    ep: Endpoint,
    /// FI_ORDER_SAW in both directions.
    saw: bool,
    /// Writes are posted with FI_DELIVERY_COMPLETE (see the crate docs); cleared if the
    /// provider refuses the flag and SAW ordering makes plain writes enough.
    dc_writes: bool,
    /// Local buffers need registrations (FI_MR_LOCAL, or forced by RSMPI_OFI_MR_LOCAL).
    mr_local: bool,
    /// Targets are addressed by virtual address (FI_MR_VIRT_ADDR), else by offset.
    virt_addr: bool,
    inject_size: usize,
    /// Largest single RMA operation (ep_attr->max_msg_size).
    chunk: usize,
    /// Every rank's address is in the address vector (`new` has finished): only then
    /// are goodbyes sent at close.
    connected: bool,
    /// Peers whose goodbye has arrived (see [`OfiTransport::goodbye`]).
    bye: Vec<bool>,
    /// Next requested registration key (unique over the life of the transport, so
    /// that a stale descriptor can never match a later registration).
    next_key: u64,
    /// Live exposures, by key.
    exposed: HashMap<u64, (RemoteBuf, MrId)>,
    tx_seq: Vec<u32>,
    rx_seq: Vec<u32>,
    /// Received, not yet delivered messages per source, by sequence number.
    pending: Vec<BTreeMap<u32, Held>>,
    /// Receive slots to (re)post.
    idle: Vec<usize>,
    /// Asynchronous failures to report from `poll`.
    errors: VecDeque<TransportError>,
    /// Peers found unreachable, with the reason.
    gone: Vec<Option<String>>,
    /// Round-robin start of the next delivery.
    next_src: usize,
    events: Vec<Event>,
}

impl std::fmt::Debug for OfiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfiTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("provider", &self.prov)
            .field("fabric", &self.fabric)
            .field("domain", &self.domain)
            .field("saw", &self.saw)
            .field("dc_writes", &self.dc_writes)
            .field("mr_local", &self.mr_local)
            .field("virt_addr", &self.virt_addr)
            .field("inject_size", &self.inject_size)
            .field("exposed", &self.exposed.len())
            .finish()
    }
}

impl OfiTransport {
    /// Opens an RDM endpoint and connects it to every rank of `ex`; collective over all
    /// ranks (two fences). See the crate docs for the steps.
    pub fn new(ex: &mut dyn Exchange, cfg: &OfiConfig) -> Result<OfiTransport, TransportError> {
        let (rank, size) = (ex.rank(), ex.size());
        if rank >= size {
            return Err(TransportError::Exchange(format!("rank {rank} of {size}")));
        }
        let opened = Self::open_local(rank, size, cfg).and_then(|t| {
            let name = t.ep.name().map_err(|e| fi_os("fi_getname", e))?;
            Ok((t, name))
        });
        let (mut t, name) = match opened {
            Ok(x) => x,
            Err(e) => {
                // Tell the others why this rank is missing, rather than letting them
                // wait for an address that never comes.
                let _ = ex.publish(KEY_PROV, format!("!{e}").as_bytes());
                let _ = ex.fence();
                return Err(e);
            }
        };
        ex.publish(KEY_ADDR, &name)?;
        ex.publish(KEY_PROV, t.prov.as_bytes())?;
        ex.publish(KEY_MODE, t.mode().as_bytes())?;
        ex.fence()?;

        let mut provs = Vec::with_capacity(size as usize);
        for r in 0..size {
            let p = String::from_utf8_lossy(&ex.lookup(r, KEY_PROV)?).into_owned();
            if let Some(why) = p.strip_prefix('!') {
                return Err(TransportError::Exchange(format!(
                    "rank {r} could not open libfabric: {why}"
                )));
            }
            provs.push(p);
        }
        let differ: Vec<String> = provs
            .iter()
            .enumerate()
            .filter(|(_, p)| **p != t.prov)
            .map(|(r, p)| format!("rank {r}: {p}"))
            .collect();
        if !differ.is_empty() {
            return Err(TransportError::Exchange(format!(
                "ranks chose different libfabric providers (rank {rank}: {}; {}): set \
                 RSMPI_OFI_PROVIDER (or FI_PROVIDER) to one provider for the whole job",
                t.prov,
                differ.join(", ")
            )));
        }
        for r in 0..size {
            let m = ex.lookup(r, KEY_MODE)?;
            if m != t.mode().as_bytes() {
                return Err(TransportError::Exchange(format!(
                    "rank {r} uses libfabric provider {} with {}, rank {rank} with {}",
                    t.prov,
                    String::from_utf8_lossy(&m),
                    t.mode()
                )));
            }
        }
        for r in 0..size {
            let addr = ex.lookup(r, KEY_ADDR)?;
            peer_addr_fits(r, &addr)?;
            let fi_addr =
                t.ep.av_insert(&addr)
                    .map_err(|e| TransportError::Exchange(format!("address of rank {r}: {e}")))?;
            if fi_addr != u64::from(r) {
                return Err(TransportError::Exchange(format!(
                    "fi_av_insert gave fi_addr {fi_addr} to rank {r} (FI_AV_TABLE should \
                     number addresses in order)"
                )));
            }
        }
        // Nobody sends before everybody has inserted every address.
        ex.fence()?;
        t.connected = true;
        Ok(t)
    }

    /// Everything before the exchange: choose, open, post the receives.
    fn open_local(rank: Rank, size: u32, cfg: &OfiConfig) -> Result<OfiTransport, TransportError> {
        rxm_eager_fits_a_control_message();
        rxm_shared_receives(cfg);
        let Choice { list, idx, desc } = select(cfg)?;
        let mr_local = desc.mr_local || env_flag(ENV_MR_LOCAL);
        let mut next_key = 1u64;
        let ep = Endpoint::open(
            &list,
            idx,
            size as usize,
            SEND_SLOTS,
            RECV_SLOTS,
            SLOT_BYTES,
            mr_local,
            &mut next_key,
        )
        .map_err(|e| fi_os("opening the libfabric endpoint", e))?;
        let chunk = match usize::try_from(desc.max_msg_size) {
            Ok(0) => 1 << 30,
            Ok(n) => n,
            Err(_) => usize::MAX,
        };
        let mut t = OfiTransport {
            rank,
            size,
            prov: desc.prov.clone(),
            fabric: desc.fabric.clone(),
            domain: desc.domain.clone(),
            ep,
            saw: desc.order_saw,
            dc_writes: true,
            mr_local,
            virt_addr: desc.mr_virt_addr,
            inject_size: desc.inject_size,
            chunk,
            next_key,
            exposed: HashMap::new(),
            tx_seq: vec![0; size as usize],
            rx_seq: vec![0; size as usize],
            pending: (0..size).map(|_| BTreeMap::new()).collect(),
            idle: (0..RECV_SLOTS).rev().collect(),
            errors: VecDeque::new(),
            gone: vec![None; size as usize],
            connected: false,
            bye: vec![false; size as usize],
            next_src: 0,
            events: Vec::new(),
        };
        t.repost()?;
        if t.idle.len() == RECV_SLOTS {
            return Err(fi_os(
                "fi_recv",
                FiError {
                    errno: 11,
                    kind: ErrKind::Other,
                    text: "the provider accepted no receive buffer".into(),
                },
            ));
        }
        Ok(t)
    }

    /// The libfabric provider in use (for example `tcp;ofi_rxm`), for log lines.
    pub fn provider_name(&self) -> &str {
        &self.prov
    }

    /// Memory exposures currently registered (for tests: returns to 0 once every
    /// `expose` has been matched by an `unexpose`).
    pub fn live_registrations(&self) -> usize {
        self.exposed.len()
    }

    /// The registration addressing mode, which all ranks must share.
    fn mode(&self) -> &'static str {
        if self.virt_addr {
            "mr=virt_addr"
        } else {
            "mr=offset"
        }
    }

    fn check_peer(&self, peer: Rank) -> Result<(), TransportError> {
        match self.gone.get(peer as usize) {
            None => Err(TransportError::NoSuchRank(peer)),
            Some(Some(why)) => Err(TransportError::PeerGone(peer, why.clone())),
            Some(None) => Ok(()),
        }
    }

    /// Posts idle receive slots again (after delivery, or after a failed receive).
    fn repost(&mut self) -> Result<(), TransportError> {
        while let Some(&slot) = self.idle.last() {
            match self.ep.post_recv(slot) {
                Ok(true) => {
                    self.idle.pop();
                }
                Ok(false) => break,
                Err(e) => return Err(fi_os("fi_recv", e)),
            }
        }
        Ok(())
    }

    /// Files the events read from the completion queue: received messages into the
    /// per-source reorder maps, failures into `errors`.
    fn absorb(&mut self) -> Result<(), TransportError> {
        let mut events = std::mem::take(&mut self.events);
        for ev in events.drain(..) {
            match ev {
                Event::Recv { slot } => {
                    let data = self.ep.recv_data(slot).unwrap_or(&[]);
                    let parsed = (data.len() >= WIRE_HDR).then(|| {
                        let word = u32::from_le_bytes(data[0..4].try_into().unwrap());
                        let seq = u32::from_le_bytes(data[4..8].try_into().unwrap());
                        (word & !BYE, seq, word & BYE != 0)
                    });
                    match parsed {
                        Some((src, seq, bye)) if src < self.size => {
                            let pending = &mut self.pending[src as usize];
                            // Deliverable once the messages before it are: the end of
                            // the contiguous run from the next expected one.
                            let mut next = self.rx_seq[src as usize];
                            while pending.contains_key(&next) {
                                next = next.wrapping_add(1);
                            }
                            let held = if bye {
                                self.idle.push(slot);
                                Held::Bye
                            } else if seq == next {
                                Held::Slot(slot)
                            } else {
                                // Out of order: copy it out and free the slot at once,
                                // so that slots never all wait for a message that
                                // itself waits for a slot.
                                self.idle.push(slot);
                                Held::Copy(data[WIRE_HDR..].to_vec())
                            };
                            if let Some(old) = pending.insert(seq, held) {
                                if let Held::Slot(s) = old {
                                    self.idle.push(s);
                                }
                                self.errors.push_back(bad_message(format!(
                                    "rank {src} sent sequence number {seq} twice"
                                )));
                            }
                        }
                        _ => {
                            self.errors.push_back(bad_message(format!(
                                "a {}-byte message without a valid rsmpi header",
                                data.len()
                            )));
                            self.idle.push(slot);
                        }
                    }
                }
                Event::SendFailed { dest, err } => {
                    let peer = dest as Rank;
                    if matches!(err.kind, ErrKind::Unreachable | ErrKind::Canceled) {
                        if let Some(g) = self.gone.get_mut(peer as usize) {
                            g.get_or_insert_with(|| err.text.clone());
                        }
                    }
                    self.errors.push_back(peer_err("fi_send", peer, err));
                }
                Event::RecvFailed { slot, err } => {
                    self.idle.push(slot);
                    if err.kind != ErrKind::Canceled {
                        self.errors.push_back(fi_os("fi_recv completion", err));
                    }
                }
                // A peer's access to our memory that the provider refused (a stale
                // key, for example): the peer gets the error, nothing to do here.
                Event::Stray => {}
            }
        }
        self.events = events;
        self.repost()
    }

    /// Hands up to `max` received messages to `f`: round robin over the sources, one
    /// message per source per turn, each source's messages strictly in sequence
    /// order. A goodbye is noted, not handed on.
    fn deliver(&mut self, max: usize, f: &mut dyn FnMut(Rank, &[u8])) -> usize {
        let n = self.size as usize;
        let (mut got, mut idle, mut s) = (0, 0, self.next_src);
        // sources taken in turn without a division, and one with nothing held passed
        // over without a lookup: an idle poll is mostly this
        let next = |s: usize| if s + 1 == n { 0 } else { s + 1 };
        while got < max && idle < n {
            if self.pending[s].is_empty() {
                idle += 1;
                s = next(s);
                continue;
            }
            let want = self.rx_seq[s];
            match self.pending[s].remove(&want) {
                Some(held) => {
                    match held {
                        Held::Slot(slot) => {
                            let data = self.ep.recv_data(slot).unwrap_or(&[]);
                            f(s as Rank, data.get(WIRE_HDR..).unwrap_or(&[]));
                            self.idle.push(slot);
                        }
                        Held::Copy(m) => f(s as Rank, &m),
                        Held::Bye => self.bye[s] = true,
                    }
                    self.rx_seq[s] = want.wrapping_add(1);
                    got += 1;
                    idle = 0;
                    s = next(s);
                    self.next_src = s;
                }
                None => {
                    idle += 1;
                    s = next(s);
                }
            }
        }
        got
    }

    /// The last exchange before the endpoint closes. Closing with a message still on
    /// its way, in either direction, has crashed libfabric's `verbs;ofi_rxm` inside the
    /// provider (a `Credit` set off by `MPI_Finalize`'s last barrier; the crate docs,
    /// "Teardown"). So every rank sends each reachable peer a goodbye after everything
    /// else it sent (with a completion, unlike `fi_inject`), then keeps reading until
    /// every reachable peer's goodbye has arrived and its own sends have completed.
    /// Messages are delivered in order per source, so a peer's goodbye comes after all
    /// it ever sent us, and nothing follows it; what arrives before it now is dropped.
    /// Gives up after [`GOODBYE_WAIT`], and at once for a peer found unreachable. Runs
    /// once.
    fn goodbye(&mut self) -> Result<(), TransportError> {
        if !std::mem::take(&mut self.connected) {
            return Ok(());
        }
        let deadline = Instant::now() + GOODBYE_WAIT;
        let late = |p: usize| {
            TransportError::PeerGone(
                p as Rank,
                format!("no goodbye within {} s of closing", GOODBYE_WAIT.as_secs()),
            )
        };
        let me = self.rank as usize;
        let reachable = |t: &OfiTransport, p: usize| p != me && t.gone[p].is_none();
        for p in 0..self.size as usize {
            while reachable(self, p) {
                let mut wire = self.wire_header(p as Rank);
                wire[0..4].copy_from_slice(&(self.rank | BYE).to_le_bytes());
                match self.ep.send(p as u64, &[&wire[..]]) {
                    Ok(Post::Done) => {
                        self.tx_seq[p] = self.tx_seq[p].wrapping_add(1);
                        break;
                    }
                    Ok(Post::Again | Post::NoSlot) => {
                        self.progress_once()?;
                        self.errors.clear();
                        self.deliver(usize::MAX, &mut |_, _| {});
                        if Instant::now() > deadline {
                            return Err(late(p));
                        }
                    }
                    Err(e) => self.gone[p] = Some(e.text),
                }
            }
        }
        loop {
            self.errors.clear();
            self.deliver(usize::MAX, &mut |_, _| {});
            let unheard = (0..self.size as usize).find(|&p| reachable(self, p) && !self.bye[p]);
            if unheard.is_none() && self.ep.sends_in_flight() == 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(late(unheard.unwrap_or(me)));
            }
            self.progress_once()?;
        }
        match self.gone.iter().position(Option::is_some) {
            Some(p) => Err(TransportError::PeerGone(
                p as Rank,
                self.gone[p].clone().unwrap_or_default(),
            )),
            None => Ok(()),
        }
    }

    /// Reads the completion queue once and files what it held.
    fn progress_once(&mut self) -> Result<usize, TransportError> {
        let n = self
            .ep
            .progress(&mut self.events)
            .map_err(|e| fi_os("fi_cq_read", e))?;
        self.absorb()?;
        Ok(n)
    }

    fn wire_header(&self, peer: Rank) -> [u8; WIRE_HDR] {
        let mut h = [0u8; WIRE_HDR];
        h[0..4].copy_from_slice(&self.rank.to_le_bytes());
        h[4..8].copy_from_slice(&self.tx_seq[peer as usize].to_le_bytes());
        h
    }

    /// One attempt to post a control message; `Ok(false)` when there is no room.
    fn post_ctrl(
        &mut self,
        peer: Rank,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, TransportError> {
        let wire = self.wire_header(peer);
        let parts = [&wire[..], header, payload];
        let len = WIRE_HDR + header.len() + payload.len();
        let r = if len <= self.inject_size {
            self.ep.inject(u64::from(peer), &parts)
        } else {
            self.ep.send(u64::from(peer), &parts)
        };
        match r {
            Ok(Post::Done) => Ok(true),
            Ok(Post::Again | Post::NoSlot) => Ok(false),
            Err(e) => {
                if e.kind == ErrKind::Unreachable {
                    self.gone[peer as usize] = Some(e.text.clone());
                }
                Err(peer_err("fi_send", peer, e))
            }
        }
    }

    /// A one-sided operation to `peer`'s exposure `buf` at `offset` (bounds checked).
    fn one_sided(
        &mut self,
        peer: Rank,
        mut local: Local<'_>,
        buf: RemoteBuf,
        offset: u64,
    ) -> Result<(), TransportError> {
        self.check_peer(peer)?;
        let (len, write) = match &local {
            Local::Src(s) => (s.len(), true),
            Local::Dst(d) => (d.len(), false),
        };
        let call = if write { "fi_write" } else { "fi_read" };
        check_bounds(&buf, offset, len as u64)?;
        if len == 0 {
            return Ok(());
        }
        // Under FI_MR_VIRT_ADDR the target is addressed by its virtual address, else by
        // the offset into the registration (RemoteBuf::addr is always the virtual
        // address; offset-based providers ignore it).
        let raddr = if self.virt_addr {
            buf.addr
                .checked_add(offset)
                .ok_or(TransportError::OutOfBounds {
                    offset,
                    len: len as u64,
                    limit: buf.len,
                })?
        } else {
            offset
        };
        loop {
            let dc = write && self.dc_writes;
            let local_key = self.mr_local.then(|| {
                let k = self.next_key;
                self.next_key += 1;
                k
            });
            let again = match &mut local {
                Local::Src(s) => Local::Src(s),
                Local::Dst(d) => Local::Dst(d),
            };
            let r = self.ep.rma(
                again,
                u64::from(peer),
                raddr,
                buf.key,
                self.chunk,
                dc,
                local_key,
                &mut self.events,
            );
            // Messages and failures read while waiting are delivered by the next poll.
            self.absorb()?;
            let Err(e) = r else { return Ok(()) };
            // A provider refusing FI_DELIVERY_COMPLETE refuses the first piece, before
            // anything moved: where SAW ordering holds, plain writes will do.
            if dc && self.saw && matches!(e.errno, FI_EBADFLAGS | EOPNOTSUPP | ENOSYS) {
                self.dc_writes = false;
                continue;
            }
            if matches!(e.kind, ErrKind::Unreachable | ErrKind::Canceled) {
                self.gone[peer as usize].get_or_insert_with(|| e.text.clone());
            }
            return Err(peer_err(call, peer, e));
        }
    }
}

fn bad_message(what: String) -> TransportError {
    TransportError::Os {
        call: "libfabric receive",
        source: io::Error::new(io::ErrorKind::InvalidData, what),
    }
}

impl Drop for OfiTransport {
    fn drop(&mut self) {
        let _ = self.goodbye();
    }
}

impl Transport for OfiTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn caps(&self) -> Caps {
        Caps {
            max_ctrl: MAX_CTRL,
            ctrl_slots: CTRL_SLOTS,
            ring_bytes: 0,
            put: true,
            get: true,
            registers: true,
            // operations finish before they return: no tiers to choose between
            put_inline: 0,
            put_bounce: 0,
            // not measured over a network: eager up to the eager limit
            lone_read_above: u64::MAX,
            cross_read_above: u64::MAX,
        }
    }

    fn try_send(
        &mut self,
        peer: Rank,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), TransportError> {
        let len = header.len() + payload.len();
        if len > MAX_CTRL {
            return Err(TransportError::TooLarge { len, max: MAX_CTRL });
        }
        self.check_peer(peer)?;
        let mut sent = self.post_ctrl(peer, header, payload)?;
        if !sent {
            // Completions may free a slot or queue space: drive once and retry.
            self.progress_once()?;
            sent = self.post_ctrl(peer, header, payload)?;
        }
        if !sent {
            return Err(TransportError::Full(peer));
        }
        let s = &mut self.tx_seq[peer as usize];
        *s = s.wrapping_add(1);
        Ok(())
    }

    fn poll(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Rank, &[u8]),
    ) -> Result<usize, TransportError> {
        for _ in 0..POLL_READS {
            if self.progress_once()? < 64 {
                break;
            }
        }
        if let Some(e) = self.errors.pop_front() {
            return Err(e);
        }
        let got = self.deliver(max, f);
        self.repost()?;
        Ok(got)
    }

    fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError> {
        let mut buf = RemoteBuf {
            addr: addr as u64,
            len: len as u64,
            key: 0,
        };
        if len == 0 {
            return Ok(buf);
        }
        let key = self.next_key;
        self.next_key += 1;
        let id = self
            .ep
            .register_remote(addr, len, key)
            .map_err(|e| fi_os("fi_mr_reg", e))?;
        buf.key = self.ep.key(id);
        if let Some((_, old)) = self.exposed.insert(buf.key, (buf, id)) {
            // A provider key that is still live cannot be handed out twice; should it
            // happen, keep the table consistent rather than leak the old registration.
            let _ = self.ep.deregister(old);
        }
        Ok(buf)
    }

    fn unexpose(&mut self, buf: RemoteBuf) {
        if buf.len == 0 {
            return;
        }
        if let Some(&(b, id)) = self.exposed.get(&buf.key) {
            if b == buf {
                self.exposed.remove(&buf.key);
                let _ = self.ep.deregister(id);
            }
        }
    }

    fn put(
        &mut self,
        peer: Rank,
        src: &[u8],
        dst: RemoteBuf,
        offset: u64,
        _token: u64,
    ) -> Result<Posted, TransportError> {
        self.one_sided(peer, Local::Src(src), dst, offset)?;
        Ok(Posted::Done)
    }

    fn get(
        &mut self,
        peer: Rank,
        dst: &mut [u8],
        src: RemoteBuf,
        offset: u64,
        _token: u64,
    ) -> Result<Posted, TransportError> {
        self.one_sided(peer, Local::Dst(dst), src, offset)?;
        Ok(Posted::Done)
    }

    /// The last exchange with every peer ([`OfiTransport::goodbye`]); `Drop` does the
    /// same when it has not run, without the fence after it. `Err` names a peer whose
    /// goodbye did not come within [`GOODBYE_WAIT`] (it may have died), or one found
    /// unreachable.
    fn close(&mut self) -> Result<(), TransportError> {
        self.goodbye()
    }
}

/// Whether rank `r`'s published address `addr` is one [`Endpoint::av_insert`] can
/// take: not empty, and no longer than [`ffi::NAME_MAX`]. Addresses of one provider
/// need not be of one length: the shm provider's is a string holding the process's
/// id, one byte longer for a rank whose id has one more digit (a job whose ids
/// straddled 10 000 failed to start while this demanded equal lengths).
fn peer_addr_fits(r: Rank, addr: &[u8]) -> Result<(), TransportError> {
    if addr.is_empty() || addr.len() > ffi::NAME_MAX {
        return Err(TransportError::Exchange(format!(
            "rank {r} published a {}-byte {KEY_ADDR} (1 to {} bytes expected)",
            addr.len(),
            ffi::NAME_MAX
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_addresses_may_differ_in_length_within_bounds() {
        // shm addresses of processes 9999 and 10000
        assert!(peer_addr_fits(1, b"fi_shm://9999:0\0").is_ok());
        assert!(peer_addr_fits(2, b"fi_shm://10000:0\0").is_ok());
        assert!(peer_addr_fits(3, &[7; ffi::NAME_MAX]).is_ok());
        let empty = peer_addr_fits(4, b"").unwrap_err().to_string();
        assert!(empty.contains("rank 4 published a 0-byte"), "{empty}");
        assert!(peer_addr_fits(5, &[7; ffi::NAME_MAX + 1]).is_err());
    }

    fn settings(set: &[&str], verbs: bool) -> Vec<(&'static str, String)> {
        rxm_receive_settings(|v| set.contains(&v), verbs)
    }

    #[test]
    fn rxm_shares_its_receive_context_unless_the_user_chose() {
        let srx = ("FI_OFI_RXM_USE_SRX", "1".to_string());
        let size = ("FI_OFI_RXM_MSG_RX_SIZE", "512".to_string());
        assert_eq!(settings(&[], true), [srx.clone(), size]);
        // rxm's own size over tcp
        assert_eq!(settings(&[], false), std::slice::from_ref(&srx));
        // the user's size is kept
        assert_eq!(settings(&["FI_OFI_RXM_MSG_RX_SIZE"], true), [srx]);
        // the user's choice either way is kept, and then nothing else is set
        for verbs in [true, false] {
            assert!(settings(&["FI_OFI_RXM_USE_SRX"], verbs).is_empty());
            let both = ["FI_OFI_RXM_USE_SRX", "FI_OFI_RXM_MSG_RX_SIZE"];
            assert!(settings(&both, verbs).is_empty());
        }
    }
}

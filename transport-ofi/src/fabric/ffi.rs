//! The crate's only `unsafe` code: declarations of the C shim (`src/shim.c`) and safe
//! wrappers around it.
//!
//! Ownership rules that make the wrappers sound:
//!
//! * [`Endpoint`] owns the shim's handle (fabric, domain, address vector, completion
//!   queue, endpoint), every memory registration made through it, and the two bounce
//!   pools. Its `Drop` closes the endpoint first (so that the provider stops touching
//!   any buffer), then the registrations, then domain and fabric; the pools' memory is
//!   freed only after that, when the fields drop.
//! * Pool memory is only ever touched through raw pointers, slot by slot. A receive
//!   slot is readable (as a `&[u8]`) only in state `Ready`, i.e. after the provider
//!   reported its completion and before we post it again; a send slot is written only
//!   while no send of it is outstanding.
//! * Caller memory handed to the provider (`put` source, `get` destination) is borrowed
//!   for the whole of [`Endpoint::rma`], which does not return before every operation
//!   it posted has completed (or the endpoint was closed, which ends them).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;

/// `struct fi_info` (a list of them), opaque.
#[repr(C)]
struct FiInfo {
    _opaque: [u8; 0],
}

/// `struct rsofi_ep` of the shim, opaque.
#[repr(C)]
struct RawEp {
    _opaque: [u8; 0],
}

/// `struct fid_mr`, opaque.
#[repr(C)]
struct RawMr {
    _opaque: [u8; 0],
}

/// `struct rsofi_info_desc` of the shim (our own POD).
#[repr(C)]
struct RawDesc {
    prov: [c_char; 64],
    fabric: [c_char; 64],
    domain: [c_char; 64],
    addr_kind: u32,
    ep_rdm: u32,
    mr_local: u32,
    mr_virt_addr: u32,
    mr_raw: u32,
    order_saw: u32,
    needs_context: u32,
    inject_size: u64,
    max_msg_size: u64,
}

/// `struct rsofi_comp` of the shim.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawComp {
    ctx: u64,
    len: u64,
}

/// `struct rsofi_cqerr` of the shim.
#[repr(C)]
struct RawCqErr {
    ctx: u64,
    err: i32,
    prov_errno: i32,
    kind: u32,
}

const RSOFI_AGAIN: c_int = 1;
const RSOFI_CQ_ERR: c_int = 2;

const ACC_SEND: u32 = 1;
const ACC_RECV: u32 = 2;
const ACC_READ: u32 = 4;
const ACC_WRITE: u32 = 8;
const ACC_REMOTE: u32 = 16;

const FI_ENODATA: c_int = 61; // ENODATA on Linux, what fi_getinfo returns for "no match"

extern "C" {
    fn rsofi_abi_sizes(out: *mut usize);
    fn rsofi_strerror(err: c_int) -> *const c_char;
    fn rsofi_classify(err: c_int) -> u32;
    fn rsofi_getinfo(
        prov: *const c_char,
        order_saw: u32,
        order_sas: u32,
        manual_progress: u32,
        out: *mut *mut FiInfo,
    ) -> c_int;
    fn rsofi_info_count(list: *mut FiInfo) -> usize;
    fn rsofi_info_describe(list: *mut FiInfo, idx: usize, d: *mut RawDesc) -> c_int;
    fn rsofi_freeinfo(list: *mut FiInfo);
    fn rsofi_open(
        list: *mut FiInfo,
        idx: usize,
        av_count: usize,
        out: *mut *mut RawEp,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn rsofi_shutdown(e: *mut RawEp);
    fn rsofi_free(e: *mut RawEp);
    fn rsofi_getname(e: *mut RawEp, buf: *mut c_void, len: *mut usize) -> c_int;
    fn rsofi_av_insert(e: *mut RawEp, addr: *const c_void, fi_addr: *mut u64) -> c_int;
    fn rsofi_mr_reg(
        e: *mut RawEp,
        buf: *mut c_void,
        len: usize,
        acc: u32,
        key: u64,
        out: *mut *mut RawMr,
        desc: *mut *mut c_void,
        out_key: *mut u64,
    ) -> c_int;
    fn rsofi_mr_close(mr: *mut RawMr) -> c_int;
    fn rsofi_recv(
        e: *mut RawEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        ctx: u64,
    ) -> c_int;
    fn rsofi_send(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        ctx: u64,
    ) -> c_int;
    fn rsofi_inject(e: *mut RawEp, buf: *const c_void, len: usize, dest: u64) -> c_int;
    fn rsofi_write(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        raddr: u64,
        key: u64,
        ctx: u64,
        delivery_complete: u32,
    ) -> c_int;
    fn rsofi_read(
        e: *mut RawEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        raddr: u64,
        key: u64,
        ctx: u64,
    ) -> c_int;
    fn rsofi_cq_read(e: *mut RawEp, out: *mut RawComp, cap: usize, n: *mut usize) -> c_int;
    fn rsofi_cq_readerr(
        e: *mut RawEp,
        out: *mut RawCqErr,
        msg: *mut c_char,
        msglen: usize,
    ) -> c_int;
}

/// How a libfabric error is to be reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrKind {
    Other,
    /// The peer cannot be reached (connection refused/reset, host unreachable, ...).
    Unreachable,
    /// The target refused the access (bad or revoked key, outside the registration).
    Access,
    /// The operation was canceled (the endpoint is closing).
    Canceled,
}

fn kind_of(raw: u32) -> ErrKind {
    match raw {
        1 => ErrKind::Unreachable,
        2 => ErrKind::Access,
        3 => ErrKind::Canceled,
        _ => ErrKind::Other,
    }
}

/// A libfabric error: the (positive) fi_errno, its class and a readable text.
#[derive(Clone, Debug)]
pub(crate) struct FiError {
    pub errno: i32,
    pub kind: ErrKind,
    pub text: String,
}

impl FiError {
    /// The error of a call that returned `rc` (a negative fi_errno).
    fn from_rc(call: &str, rc: c_int) -> FiError {
        // SAFETY: rsofi_strerror returns fi_strerror's pointer to a static,
        // NUL-terminated string (never null), which we only read.
        let text = unsafe { CStr::from_ptr(rsofi_strerror(rc)) }.to_string_lossy();
        // SAFETY: a pure function of an integer.
        let kind = kind_of(unsafe { rsofi_classify(rc) });
        FiError {
            errno: rc.saturating_abs(),
            kind,
            text: format!("{call}: {text} ({rc})"),
        }
    }

    fn new(errno: i32, kind: ErrKind, text: String) -> FiError {
        FiError { errno, kind, text }
    }
}

impl std::fmt::Display for FiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

fn c_string(bytes: &[c_char]) -> String {
    let b: Vec<u8> = bytes
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// Which kind of address an fi_getinfo result offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddrKind {
    /// Not an IP address (for example shm's names).
    Other,
    Loopback,
    LinkLocal,
    Routable,
}

/// What the transport needs to know about one fi_getinfo result.
#[derive(Clone, Debug)]
pub(crate) struct InfoDesc {
    pub prov: String,
    pub fabric: String,
    pub domain: String,
    pub addr_kind: AddrKind,
    pub ep_rdm: bool,
    pub mr_local: bool,
    pub mr_virt_addr: bool,
    pub mr_raw: bool,
    pub order_saw: bool,
    pub needs_context: bool,
    pub inject_size: usize,
    pub max_msg_size: u64,
}

/// The result list of one fi_getinfo call (freed on drop).
pub(crate) struct InfoList {
    list: NonNull<FiInfo>,
}

impl InfoList {
    /// Calls fi_getinfo for RDM endpoints with our capabilities and mr_mode bits, the
    /// given message ordering and progress model, restricted to `prov` if given.
    /// `Ok(None)` when nothing matches.
    pub fn get(
        prov: Option<&str>,
        saw: bool,
        sas: bool,
        manual: bool,
    ) -> Result<Option<InfoList>, FiError> {
        let prov = match prov {
            Some(p) => Some(CString::new(p).map_err(|_| {
                FiError::new(
                    22,
                    ErrKind::Other,
                    format!("provider name {p:?} contains NUL"),
                )
            })?),
            None => None,
        };
        let mut sizes = [0usize; 3];
        // SAFETY: the shim writes exactly three size_t values into `sizes`.
        unsafe { rsofi_abi_sizes(sizes.as_mut_ptr()) };
        let ours = [
            std::mem::size_of::<RawDesc>(),
            std::mem::size_of::<RawComp>(),
            std::mem::size_of::<RawCqErr>(),
        ];
        if sizes != ours {
            return Err(FiError::new(
                22,
                ErrKind::Other,
                format!("shim structs have sizes {sizes:?}, Rust expects {ours:?}"),
            ));
        }
        let mut out: *mut FiInfo = std::ptr::null_mut();
        // SAFETY: `prov` is null or a NUL-terminated string that outlives the call (the
        // shim copies it); `out` is a valid place for the result pointer.
        let rc = unsafe {
            rsofi_getinfo(
                prov.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                saw as u32,
                sas as u32,
                manual as u32,
                &mut out,
            )
        };
        if rc == -FI_ENODATA {
            return Ok(None);
        }
        if rc != 0 {
            return Err(FiError::from_rc("fi_getinfo", rc));
        }
        Ok(NonNull::new(out).map(|list| InfoList { list }))
    }

    /// The results, in fi_getinfo's order.
    pub fn describe(&self) -> Vec<InfoDesc> {
        // SAFETY: `self.list` is a live list from fi_getinfo (freed only on drop).
        let n = unsafe { rsofi_info_count(self.list.as_ptr()) };
        (0..n)
            .filter_map(|i| {
                let mut d = RawDesc {
                    prov: [0; 64],
                    fabric: [0; 64],
                    domain: [0; 64],
                    addr_kind: 0,
                    ep_rdm: 0,
                    mr_local: 0,
                    mr_virt_addr: 0,
                    mr_raw: 0,
                    order_saw: 0,
                    needs_context: 0,
                    inject_size: 0,
                    max_msg_size: 0,
                };
                // SAFETY: the list is live and `i` < its length; `d` is a valid, writable
                // struct rsofi_info_desc (same layout: repr(C), same field order/types).
                let rc = unsafe { rsofi_info_describe(self.list.as_ptr(), i, &mut d) };
                (rc == 0).then(|| InfoDesc {
                    prov: c_string(&d.prov),
                    fabric: c_string(&d.fabric),
                    domain: c_string(&d.domain),
                    addr_kind: match d.addr_kind {
                        1 => AddrKind::Loopback,
                        2 => AddrKind::LinkLocal,
                        3 => AddrKind::Routable,
                        _ => AddrKind::Other,
                    },
                    ep_rdm: d.ep_rdm != 0,
                    mr_local: d.mr_local != 0,
                    mr_virt_addr: d.mr_virt_addr != 0,
                    mr_raw: d.mr_raw != 0,
                    order_saw: d.order_saw != 0,
                    needs_context: d.needs_context != 0,
                    inject_size: usize::try_from(d.inject_size).unwrap_or(0),
                    max_msg_size: d.max_msg_size,
                })
            })
            .collect()
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list came from fi_getinfo and is freed exactly once, here;
        // endpoints opened from it hold their own copy (fi_dupinfo).
        unsafe { rsofi_freeinfo(self.list.as_ptr()) }
    }
}

/// Page-aligned, zero-initialised heap memory that the provider may access; only ever
/// touched through raw pointers.
struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Region {
    fn new(len: usize) -> Region {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("pool layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Region { ptr, layout }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once. The owning Endpoint
        // has closed its endpoint (and registrations) before its fields drop, so the
        // provider no longer accesses the memory.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Ours, not posted.
    Idle,
    /// Handed to the provider (a posted receive or an outstanding send).
    Posted,
    /// A receive completed with this many bytes; ours until posted again.
    Ready(usize),
}

/// Fixed-size slots in one region, with their state and (if registered) descriptor.
struct Pool {
    region: Region,
    slot_bytes: usize,
    state: Vec<Slot>,
    desc: *mut c_void,
}

impl Pool {
    fn new(slots: usize, slot_bytes: usize) -> Pool {
        Pool {
            region: Region::new(slots * slot_bytes),
            slot_bytes,
            state: vec![Slot::Idle; slots],
            desc: std::ptr::null_mut(),
        }
    }

    fn slot_ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.state.len());
        // SAFETY: i < slots, so the offset stays inside the region's allocation.
        unsafe { self.region.ptr.as_ptr().add(i * self.slot_bytes) }
    }
}

/// A registration made through [`Endpoint::register`].
struct Mr {
    raw: NonNull<RawMr>,
    desc: *mut c_void,
    key: u64,
}

/// Handle of a registration of an [`Endpoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MrId(usize);

/// What a control-channel post achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Post {
    Done,
    /// No free send slot.
    NoSlot,
    /// The provider has no room now (-FI_EAGAIN).
    Again,
}

/// A completion (or error) read from the completion queue, other than those of the
/// one-sided operation [`Endpoint::rma`] is waiting for.
#[derive(Debug)]
pub(crate) enum Event {
    /// Receive slot `slot` holds a message ([`Endpoint::recv_data`]).
    Recv { slot: usize },
    /// A send to fi_addr `dest` failed.
    SendFailed { dest: u64, err: FiError },
    /// A posted receive failed; the slot is idle again (repost it).
    RecvFailed { slot: usize, err: FiError },
    /// An error entry with no context of ours (for example a refused remote access to
    /// our memory that the provider reports at the target).
    Stray,
}

/// The local buffer of a one-sided operation.
pub(crate) enum Local<'a> {
    /// `fi_write` from this buffer.
    Src(&'a [u8]),
    /// `fi_read` into this buffer.
    Dst(&'a mut [u8]),
}

const CTX_SEND: u64 = 1 << 56;
const CTX_RECV: u64 = 2 << 56;
const CTX_RMA: u64 = 3 << 56;
const CTX_KIND: u64 = 0xff << 56;

/// The longest endpoint address [`Endpoint::name`] takes (a string format's, such as
/// the shm provider's, is as long as the process's id makes it).
pub(crate) const NAME_MAX: usize = 512;

/// An opened, enabled RDM endpoint with its queues, registrations and bounce pools.
pub(crate) struct Endpoint {
    raw: NonNull<RawEp>,
    /// Closed (endpoint, CQ and AV) after a fatal completion-queue failure.
    shut: bool,
    /// Registrations by MrId, and the free entries of that table.
    mrs: Vec<Option<Mr>>,
    free_mrs: Vec<usize>,
    send: Pool,
    /// Destination fi_addr of each outstanding send slot.
    send_dest: Vec<u64>,
    free_send: Vec<usize>,
    recv: Pool,
    scratch: Vec<u8>,
    rma_serial: u64,
}

impl Endpoint {
    /// Opens result `idx` of `list` with an address vector for `av_count` addresses,
    /// and allocates `send_slots` / `recv_slots` bounce slots of `slot_bytes` each. With
    /// `register_pools` (FI_MR_LOCAL) both pools are registered, with keys from
    /// `next_key`. The receive slots are not posted yet ([`Endpoint::post_recv`]).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        list: &InfoList,
        idx: usize,
        av_count: usize,
        send_slots: usize,
        recv_slots: usize,
        slot_bytes: usize,
        register_pools: bool,
        next_key: &mut u64,
    ) -> Result<Endpoint, FiError> {
        let mut raw: *mut RawEp = std::ptr::null_mut();
        let mut err = [0 as c_char; 256];
        // SAFETY: `list` is live for the call (the shim duplicates the chosen entry);
        // `raw` and `err` are valid for writes, `err` of the length passed.
        let rc = unsafe {
            rsofi_open(
                list.list.as_ptr(),
                idx,
                av_count,
                &mut raw,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != 0 {
            // SAFETY: pure function of an integer.
            let kind = kind_of(unsafe { rsofi_classify(rc) });
            return Err(FiError::new(rc.saturating_abs(), kind, c_string(&err)));
        }
        let raw = NonNull::new(raw)
            .ok_or_else(|| FiError::new(5, ErrKind::Other, "rsofi_open returned null".into()))?;
        let mut ep = Endpoint {
            raw,
            shut: false,
            mrs: Vec::new(),
            free_mrs: Vec::new(),
            send: Pool::new(send_slots, slot_bytes),
            send_dest: vec![0; send_slots],
            free_send: (0..send_slots).rev().collect(),
            recv: Pool::new(recv_slots, slot_bytes),
            scratch: Vec::new(),
            rma_serial: 0,
        };
        if register_pools {
            // The regions live as long as the endpoint; their registrations are closed
            // in Drop before the regions are freed.
            let (sp, sl) = (
                ep.send.region.ptr.as_ptr() as usize,
                ep.send.region.layout.size(),
            );
            let id = ep.register_access(sp, sl, ACC_SEND, *next_key)?;
            *next_key += 1;
            ep.send.desc = ep.desc(id);
            let (rp, rl) = (
                ep.recv.region.ptr.as_ptr() as usize,
                ep.recv.region.layout.size(),
            );
            let id = ep.register_access(rp, rl, ACC_RECV, *next_key)?;
            *next_key += 1;
            ep.recv.desc = ep.desc(id);
        }
        Ok(ep)
    }

    fn check_open(&self) -> Result<(), FiError> {
        if self.shut {
            Err(FiError::new(
                107, // ENOTCONN
                ErrKind::Other,
                "the libfabric endpoint was closed after a completion-queue failure".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// This endpoint's address (fi_getname), at most [`NAME_MAX`] bytes.
    pub fn name(&self) -> Result<Vec<u8>, FiError> {
        self.check_open()?;
        let mut buf = vec![0u8; NAME_MAX];
        let mut len = buf.len();
        // SAFETY: `buf` is writable for `len` bytes; the shim writes at most `len` and
        // stores the needed length in `len`.
        let rc = unsafe { rsofi_getname(self.raw.as_ptr(), buf.as_mut_ptr().cast(), &mut len) };
        if rc != 0 {
            return Err(FiError::from_rc("fi_getname", rc));
        }
        buf.truncate(len.min(buf.len()));
        Ok(buf)
    }

    /// Inserts one peer address (as its fi_getname produced it) into the address vector
    /// and returns its fi_addr.
    pub fn av_insert(&mut self, addr: &[u8]) -> Result<u64, FiError> {
        self.check_open()?;
        // The provider reads an address of its own format's size (for string formats up
        // to the NUL); the zero padding keeps that inside our buffer whatever a peer
        // published.
        let mut padded = addr.to_vec();
        padded.resize(addr.len() + NAME_MAX, 0);
        let mut fi_addr = u64::MAX;
        // SAFETY: `padded` is readable for its whole (padded) length, which covers what
        // the provider reads; `fi_addr` is a valid place for the result.
        let rc =
            unsafe { rsofi_av_insert(self.raw.as_ptr(), padded.as_ptr().cast(), &mut fi_addr) };
        if rc != 0 {
            return Err(FiError::from_rc("fi_av_insert", rc));
        }
        Ok(fi_addr)
    }

    fn register_access(
        &mut self,
        addr: usize,
        len: usize,
        acc: u32,
        key: u64,
    ) -> Result<MrId, FiError> {
        self.check_open()?;
        let mut mr: *mut RawMr = std::ptr::null_mut();
        let mut desc: *mut c_void = std::ptr::null_mut();
        let mut out_key = 0u64;
        // SAFETY: registering only records the range with the provider; no memory is
        // accessed by the call itself. Later accesses: local ones only by operations we
        // post on buffers we own or borrow for their duration; remote ones as the
        // Transport::expose contract allows (the caller keeps the memory alive and
        // unexposes it before reuse). Out-pointers are valid.
        let rc = unsafe {
            rsofi_mr_reg(
                self.raw.as_ptr(),
                addr as *mut c_void,
                len,
                acc,
                key,
                &mut mr,
                &mut desc,
                &mut out_key,
            )
        };
        if rc != 0 {
            return Err(FiError::from_rc("fi_mr_reg", rc));
        }
        let raw = NonNull::new(mr)
            .ok_or_else(|| FiError::new(5, ErrKind::Other, "fi_mr_reg returned null".into()))?;
        let m = Mr {
            raw,
            desc,
            key: out_key,
        };
        let i = match self.free_mrs.pop() {
            Some(i) => {
                self.mrs[i] = Some(m);
                i
            }
            None => {
                self.mrs.push(Some(m));
                self.mrs.len() - 1
            }
        };
        Ok(MrId(i))
    }

    /// Registers `len` (> 0) bytes at `addr` for remote read and write by peers, with
    /// `key` as the requested key (ignored under FI_MR_PROV_KEY).
    pub fn register_remote(&mut self, addr: usize, len: usize, key: u64) -> Result<MrId, FiError> {
        self.register_access(addr, len, ACC_REMOTE, key)
    }

    /// The key peers use for registration `id`.
    pub fn key(&self, id: MrId) -> u64 {
        self.mrs
            .get(id.0)
            .and_then(Option::as_ref)
            .map_or(0, |m| m.key)
    }

    fn desc(&self, id: MrId) -> *mut c_void {
        self.mrs
            .get(id.0)
            .and_then(Option::as_ref)
            .map_or(std::ptr::null_mut(), |m| m.desc)
    }

    /// Closes registration `id`; afterwards peers' accesses with its key fail.
    pub fn deregister(&mut self, id: MrId) -> Result<(), FiError> {
        let Some(m) = self.mrs.get_mut(id.0).and_then(Option::take) else {
            return Ok(());
        };
        self.free_mrs.push(id.0);
        // SAFETY: `m.raw` is a live registration of this endpoint's domain, taken out of
        // the table so it is closed exactly once.
        let rc = unsafe { rsofi_mr_close(m.raw.as_ptr()) };
        if rc != 0 {
            return Err(FiError::from_rc("fi_close(mr)", rc));
        }
        Ok(())
    }

    /// Posts receive slot `slot` (idle or ready). `Ok(false)`: no room (-FI_EAGAIN).
    pub fn post_recv(&mut self, slot: usize) -> Result<bool, FiError> {
        self.check_open()?;
        assert!(
            self.recv.state[slot] != Slot::Posted,
            "receive slot posted twice"
        );
        let ptr = self.recv.slot_ptr(slot);
        // SAFETY: the slot is ours (not posted), inside the region, `slot_bytes` long;
        // from here until its completion only the provider touches it, and we create no
        // reference to it before `progress` marks it Ready. The region outlives the
        // endpoint's posted operations (Drop closes the endpoint first).
        let rc = unsafe {
            rsofi_recv(
                self.raw.as_ptr(),
                ptr.cast(),
                self.recv.slot_bytes,
                self.recv.desc,
                CTX_RECV | slot as u64,
            )
        };
        match rc {
            0 => {
                self.recv.state[slot] = Slot::Posted;
                Ok(true)
            }
            RSOFI_AGAIN => Ok(false),
            rc => Err(FiError::from_rc("fi_recv", rc)),
        }
    }

    /// The bytes received into `slot`, if it holds a completed receive.
    pub fn recv_data(&self, slot: usize) -> Option<&[u8]> {
        match self.recv.state.get(slot) {
            Some(&Slot::Ready(len)) => {
                let ptr = self.recv.slot_ptr(slot);
                // SAFETY: a Ready slot's receive has completed, so the provider no
                // longer writes it, and it is not posted again while this borrow of
                // `self` lives (posting needs `&mut self`). `len` <= slot_bytes (clamped
                // in `progress`), the memory is initialised (zeroed at allocation, then
                // written by the provider) and lives as long as `self`.
                Some(unsafe { std::slice::from_raw_parts(ptr, len) })
            }
            _ => None,
        }
    }

    fn concat_len(parts: &[&[u8]]) -> usize {
        parts.iter().map(|p| p.len()).sum()
    }

    /// Sends the concatenation of `parts` to `dest` from a bounce slot; the slot returns
    /// to the pool when the send completes.
    pub fn send(&mut self, dest: u64, parts: &[&[u8]]) -> Result<Post, FiError> {
        self.check_open()?;
        let total = Self::concat_len(parts);
        assert!(
            total <= self.send.slot_bytes,
            "message larger than a send slot"
        );
        let Some(slot) = self.free_send.pop() else {
            return Ok(Post::NoSlot);
        };
        let base = self.send.slot_ptr(slot);
        let mut off = 0;
        for p in parts {
            // SAFETY: the slot is free (no send of it outstanding), so nothing else
            // reads or writes it; `off + p.len() <= total <= slot_bytes` keeps the copy
            // inside the slot; `p` is a live slice that cannot overlap our region.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), base.add(off), p.len()) };
            off += p.len();
        }
        // SAFETY: the slot holds `total` initialised bytes and stays untouched by us
        // until its completion returns it to `free_send`; the region outlives the
        // endpoint's operations.
        let rc = unsafe {
            rsofi_send(
                self.raw.as_ptr(),
                base.cast(),
                total,
                self.send.desc,
                dest,
                CTX_SEND | slot as u64,
            )
        };
        match rc {
            0 => {
                self.send.state[slot] = Slot::Posted;
                self.send_dest[slot] = dest;
                Ok(Post::Done)
            }
            RSOFI_AGAIN => {
                self.free_send.push(slot);
                Ok(Post::Again)
            }
            rc => {
                self.free_send.push(slot);
                Err(FiError::from_rc("fi_send", rc))
            }
        }
    }

    /// Sends posted with [`Endpoint::send`] whose completion has not been read yet.
    pub fn sends_in_flight(&self) -> usize {
        self.send.state.len() - self.free_send.len()
    }

    /// Sends the concatenation of `parts` (at most the provider's inject size) with
    /// fi_inject: the data is copied before the call returns, no completion follows.
    pub fn inject(&mut self, dest: u64, parts: &[&[u8]]) -> Result<Post, FiError> {
        self.check_open()?;
        self.scratch.clear();
        for p in parts {
            self.scratch.extend_from_slice(p);
        }
        // SAFETY: `scratch` is a live buffer of the given length that fi_inject only
        // reads before returning.
        let rc = unsafe {
            rsofi_inject(
                self.raw.as_ptr(),
                self.scratch.as_ptr().cast(),
                self.scratch.len(),
                dest,
            )
        };
        match rc {
            0 => Ok(Post::Done),
            RSOFI_AGAIN => Ok(Post::Again),
            rc => Err(FiError::from_rc("fi_inject", rc)),
        }
    }

    /// Reads the completion queue once (up to 64 entries), updating slot states, and
    /// appends what the transport must see to `out`. Completions of one-sided
    /// operations are returned as `(ctx, Ok|Err)` in `rma`. Returns how many entries
    /// were read.
    fn read_cq(
        &mut self,
        out: &mut Vec<Event>,
        rma: &mut Vec<(u64, Result<(), FiError>)>,
    ) -> Result<usize, FiError> {
        self.check_open()?;
        // not zeroed: a waiting rank reads an empty queue again and again, and
        // clearing 1 KiB was ~77 of the ~1 360 instructions of such a read
        let mut comps = [std::mem::MaybeUninit::<RawComp>::uninit(); 64];
        let mut n = 0usize;
        // SAFETY: `comps` is writable for 64 entries of the shim's struct rsofi_comp
        // (`MaybeUninit<RawComp>` has `RawComp`'s layout), `n` is a valid place for
        // the count.
        let rc = unsafe { rsofi_cq_read(self.raw.as_ptr(), comps.as_mut_ptr().cast(), 64, &mut n) };
        if rc == RSOFI_CQ_ERR {
            return self.read_err(out, rma).map(|()| 1);
        }
        if rc < 0 {
            return Err(FiError::from_rc("fi_cq_read", rc));
        }
        // SAFETY: on success the shim has written the first `n` entries (at most 64,
        // and 0 when the queue was empty), so they are initialised.
        let comps =
            unsafe { std::slice::from_raw_parts(comps.as_ptr().cast::<RawComp>(), n.min(64)) };
        for c in comps {
            let idx = (c.ctx & !CTX_KIND) as usize;
            match c.ctx & CTX_KIND {
                CTX_SEND if self.send.state.get(idx) == Some(&Slot::Posted) => {
                    self.send.state[idx] = Slot::Idle;
                    self.free_send.push(idx);
                }
                CTX_RECV if self.recv.state.get(idx) == Some(&Slot::Posted) => {
                    let len = usize::try_from(c.len).unwrap_or(usize::MAX);
                    self.recv.state[idx] = Slot::Ready(len.min(self.recv.slot_bytes));
                    out.push(Event::Recv { slot: idx });
                }
                CTX_RMA => rma.push((c.ctx, Ok(()))),
                // Not ours (or not outstanding): nothing to update.
                _ => {}
            }
        }
        Ok(n)
    }

    fn read_err(
        &mut self,
        out: &mut Vec<Event>,
        rma: &mut Vec<(u64, Result<(), FiError>)>,
    ) -> Result<(), FiError> {
        let mut e = RawCqErr {
            ctx: 0,
            err: 0,
            prov_errno: 0,
            kind: 0,
        };
        let mut msg = [0 as c_char; 512];
        // SAFETY: `e` is a writable struct rsofi_cqerr (same layout), `msg` is writable
        // for the length passed.
        let rc =
            unsafe { rsofi_cq_readerr(self.raw.as_ptr(), &mut e, msg.as_mut_ptr(), msg.len()) };
        if rc == RSOFI_AGAIN {
            return Ok(());
        }
        if rc != 0 {
            return Err(FiError::from_rc("fi_cq_readerr", rc));
        }
        let err = FiError::new(e.err, kind_of(e.kind), c_string(&msg));
        let idx = (e.ctx & !CTX_KIND) as usize;
        match e.ctx & CTX_KIND {
            CTX_SEND if self.send.state.get(idx) == Some(&Slot::Posted) => {
                self.send.state[idx] = Slot::Idle;
                self.free_send.push(idx);
                out.push(Event::SendFailed {
                    dest: self.send_dest[idx],
                    err,
                });
            }
            CTX_RECV if self.recv.state.get(idx) == Some(&Slot::Posted) => {
                self.recv.state[idx] = Slot::Idle;
                out.push(Event::RecvFailed { slot: idx, err });
            }
            CTX_RMA => rma.push((e.ctx, Err(err))),
            _ => {
                let _ = err;
                out.push(Event::Stray)
            }
        }
        Ok(())
    }

    /// Drives progress: reads the completion queue once. Completions of one-sided
    /// operations cannot occur here (none is outstanding outside [`Endpoint::rma`]).
    pub fn progress(&mut self, out: &mut Vec<Event>) -> Result<usize, FiError> {
        let mut rma = Vec::new();
        let n = self.read_cq(out, &mut rma)?;
        debug_assert!(rma.is_empty(), "RMA completion outside rma()");
        Ok(n)
    }

    /// One blocking one-sided operation: `fi_write` of `Src` or `fi_read` into `Dst`,
    /// against `dest`'s registration `key` at remote address `raddr`, split into pieces
    /// of at most `chunk` bytes. Returns once every posted piece has completed (other
    /// completions read meanwhile are appended to `out`). With `local_key`, the local
    /// buffer is registered for the duration (FI_MR_LOCAL). With `delivery_complete`,
    /// writes complete only once the data is visible at the target.
    #[allow(clippy::too_many_arguments)]
    pub fn rma(
        &mut self,
        local: Local<'_>,
        dest: u64,
        raddr: u64,
        key: u64,
        chunk: usize,
        delivery_complete: bool,
        local_key: Option<u64>,
        out: &mut Vec<Event>,
    ) -> Result<(), FiError> {
        self.check_open()?;
        let (ptr, len, write) = match local {
            Local::Src(s) => (s.as_ptr() as *mut u8, s.len(), true),
            Local::Dst(d) => (d.as_mut_ptr(), d.len(), false),
        };
        if len == 0 {
            return Ok(());
        }
        let chunk = chunk.max(1);
        let mr = match local_key {
            Some(k) => {
                let acc = if write { ACC_WRITE } else { ACC_READ };
                Some(self.register_access(ptr as usize, len, acc, k)?)
            }
            None => None,
        };
        let desc = mr.map_or(std::ptr::null_mut(), |id| self.desc(id));
        self.rma_serial = (self.rma_serial + 1) & !CTX_KIND;
        let ctx = CTX_RMA | self.rma_serial;
        let pieces = len.div_ceil(chunk);
        let (mut posted, mut done) = (0usize, 0usize);
        let mut first_err: Option<FiError> = None;
        let mut rma_done = Vec::new();
        loop {
            while posted < pieces && first_err.is_none() {
                let off = posted * chunk;
                let n = chunk.min(len - off);
                // SAFETY: [ptr+off, ptr+off+n) lies inside the caller's slice, which is
                // borrowed (shared for a write source, exclusive for a read target) for
                // this whole call, and this function does not return before the piece
                // has completed or the endpoint has been closed (which ends it). For a
                // read, the provider writing into the exclusively borrowed slice is
                // like any write through `&mut [u8]` (all bit patterns are valid).
                let rc = unsafe {
                    let p = ptr.add(off);
                    if write {
                        rsofi_write(
                            self.raw.as_ptr(),
                            p.cast(),
                            n,
                            desc,
                            dest,
                            raddr.wrapping_add(off as u64),
                            key,
                            ctx,
                            delivery_complete as u32,
                        )
                    } else {
                        rsofi_read(
                            self.raw.as_ptr(),
                            p.cast(),
                            n,
                            desc,
                            dest,
                            raddr.wrapping_add(off as u64),
                            key,
                            ctx,
                        )
                    }
                };
                match rc {
                    0 => posted += 1,
                    RSOFI_AGAIN => break,
                    rc => {
                        first_err = Some(FiError::from_rc(
                            if write { "fi_write" } else { "fi_read" },
                            rc,
                        ))
                    }
                }
            }
            if done == posted && (posted == pieces || first_err.is_some()) {
                break;
            }
            rma_done.clear();
            if let Err(e) = self.read_cq(out, &mut rma_done) {
                // We cannot tell when the outstanding pieces end: close the endpoint,
                // which ends them, so that the caller's buffer is free again.
                self.shutdown();
                first_err.get_or_insert(e);
                break;
            }
            for (c, r) in rma_done.drain(..) {
                if c == ctx {
                    done += 1;
                    if let Err(e) = r {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(id) = mr {
            if let Err(e) = self.deregister(id) {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Closes endpoint, completion queue and address vector: every outstanding
    /// operation ends and the provider touches none of our buffers any more.
    fn shutdown(&mut self) {
        if !self.shut {
            self.shut = true;
            // SAFETY: the handle is live; the shim closes each object once and nulls it.
            unsafe { rsofi_shutdown(self.raw.as_ptr()) }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shutdown();
        for m in self.mrs.drain(..).flatten() {
            // SAFETY: a live registration of this domain, closed once; the endpoint
            // that used it is closed.
            unsafe { rsofi_mr_close(m.raw.as_ptr()) };
        }
        // SAFETY: endpoint, queues and registrations are closed; domain and fabric are
        // closed and the handle freed exactly once. The pools' regions are freed after
        // this (field drop), when nothing refers to them any more.
        unsafe { rsofi_free(self.raw.as_ptr()) }
    }
}

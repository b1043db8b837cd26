//! Safe wrappers over the C shim (`src/shim.c`), which opens libibverbs with dlopen.
//! All `unsafe` of the verbs transport is in this module.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

const ERRLEN: usize = 256;

/// What the shim reports about the opened device and port (`struct rsv_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Info {
    name: [u8; 64],
    pub gid: [u8; 16],
    /// -1: InfiniBand LID routing, no GID.
    pub gid_index: c_int,
    pub lid: u16,
    pub port: u8,
    pub link_layer: u8,
    pub active_mtu: u8,
    pub max_rd_atomic: u8,
    pub max_inline: u32,
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    pub max_mr_size: u64,
}

impl Info {
    /// The device name (`rxe0`, `mlx5_0`).
    pub fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(64);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
    /// RoCE (Ethernet link layer) rather than InfiniBand.
    pub fn ethernet(&self) -> bool {
        // SAFETY: a constant getter without arguments.
        self.link_layer as c_int == unsafe { rsv_link_ethernet() }
    }
}

/// One completion (`struct rsv_wc`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub qp_num: u32,
    pub vendor_err: u32,
}

#[repr(C)]
struct RawDev {
    _p: [u8; 0],
}
#[repr(C)]
struct RawQp {
    _p: [u8; 0],
}
#[repr(C)]
struct RawMr {
    _p: [u8; 0],
}

extern "C" {
    fn rsv_open(
        name: *const c_char,
        port: c_int,
        gid_index: c_int,
        cqe: c_int,
        err: *mut c_char,
        errlen: usize,
    ) -> *mut RawDev;
    fn rsv_info(d: *const RawDev) -> *const Info;
    fn rsv_close(d: *mut RawDev);
    fn rsv_reg(
        d: *mut RawDev,
        addr: *mut c_void,
        len: usize,
        access: c_int,
        lkey: *mut u32,
        rkey: *mut u32,
        err: *mut c_char,
        errlen: usize,
    ) -> *mut RawMr;
    fn rsv_dereg(mr: *mut RawMr) -> c_int;
    fn rsv_qp_create(
        d: *mut RawDev,
        sq_depth: u32,
        max_inline: u32,
        qpn: *mut u32,
        got_inline: *mut u32,
        err: *mut c_char,
        errlen: usize,
    ) -> *mut RawQp;
    fn rsv_qp_connect(
        d: *mut RawDev,
        qp: *mut RawQp,
        rqpn: u32,
        rlid: u16,
        rgid: *const u8,
        my_psn: u32,
        remote_psn: u32,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn rsv_qp_destroy(qp: *mut RawQp);
    fn rsv_post(
        qp: *mut RawQp,
        opcode: c_int,
        wr_id: u64,
        laddr: u64,
        len: u32,
        lkey: u32,
        raddr: u64,
        rkey: u32,
        flags: c_int,
    ) -> c_int;
    fn rsv_poll(d: *mut RawDev, max: c_int, out: *mut Wc) -> c_int;
    fn rsv_status_str(status: u32) -> *const c_char;
    fn rsv_status_rem_access() -> u32;
    fn rsv_status_flush() -> u32;
    fn rsv_link_ethernet() -> c_int;
    fn rsv_uffd_open() -> c_int;
    fn rsv_uffd_watch(fd: c_int, start: u64, len: u64) -> c_int;
    fn rsv_uffd_wait(fd: c_int, timeout_ms: c_int) -> c_int;
    fn rsv_uffd_read(fd: c_int, out: *mut u64, max: c_int) -> c_int;
    fn rsv_uffd_close(fd: c_int);
}

/// A userfaultfd that reports unmaps, `madvise` removals and remaps of the ranges it
/// watches (see `unmaps.rs`). Closed on drop.
pub struct Uffd(c_int);

impl Uffd {
    /// Opens one; the error is the errno (unprivileged userfaultfd disabled, old kernel).
    pub fn open() -> Result<Uffd, i32> {
        // SAFETY: no arguments; returns a new descriptor or -errno.
        let fd = unsafe { rsv_uffd_open() };
        if fd < 0 {
            Err(-fd)
        } else {
            Ok(Uffd(fd))
        }
    }
    /// Watches the page-aligned range; false where that is impossible (memory that is
    /// not anonymous, such as a file mapping).
    pub fn watch(&self, start: u64, len: u64) -> bool {
        // SAFETY: an ioctl on our descriptor with a range by value; registering only
        // marks the mappings, it does not touch memory.
        unsafe { rsv_uffd_watch(self.0, start, len) == 0 }
    }
    /// Waits up to `ms` for events; true when some are ready.
    pub fn wait(&self, ms: i32) -> bool {
        // SAFETY: poll on our descriptor.
        unsafe { rsv_uffd_wait(self.0, ms) > 0 }
    }
    /// Reads the pending events into `out` as (start, end) ranges; returns how many.
    pub fn read(&self, out: &mut [[u64; 2]; 16]) -> usize {
        // SAFETY: `out` is 16 pairs of u64 (32 contiguous words), the most the shim
        // writes for max = 16.
        let n = unsafe { rsv_uffd_read(self.0, out.as_mut_ptr().cast::<u64>(), 16) };
        n.max(0) as usize
    }
}

impl Drop for Uffd {
    fn drop(&mut self) {
        // SAFETY: our descriptor, closed once.
        unsafe { rsv_uffd_close(self.0) }
    }
}

fn errstr(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The text libibverbs gives a completion status.
pub fn status_str(status: u32) -> String {
    // SAFETY: the shim returns a static NUL-terminated string for any value.
    unsafe { CStr::from_ptr(rsv_status_str(status)) }
        .to_string_lossy()
        .into_owned()
}

/// `IBV_WC_REM_ACCESS_ERR`: the peer refused the access (bad or revoked key, bounds).
pub fn status_rem_access() -> u32 {
    // SAFETY: a constant getter without arguments.
    unsafe { rsv_status_rem_access() }
}

/// `IBV_WC_WR_FLUSH_ERR`: the work request was flushed after an earlier error.
pub fn status_flush() -> u32 {
    // SAFETY: a constant getter without arguments.
    unsafe { rsv_status_flush() }
}

/// Memory access rights of a registration.
pub const ACCESS_LOCAL_WRITE: c_int = 1;
pub const ACCESS_REMOTE_WRITE: c_int = 2;
pub const ACCESS_REMOTE_READ: c_int = 4;

/// An open device: protection domain and the one completion queue.
pub struct Device {
    raw: *mut RawDev,
    info: Info,
}

impl Device {
    /// Opens `name` (None: the first device whose `port` is active) with a completion
    /// queue of `cqe` entries; `gid_index` None picks the GID (RoCE v2, IPv4 first).
    pub fn open(
        name: Option<&str>,
        port: u8,
        gid_index: Option<u32>,
        cqe: u32,
    ) -> Result<Device, String> {
        let mut err = [0u8; ERRLEN];
        let cname = name
            .map(|n| CString::new(n).map_err(|_| format!("bad device name {n:?}")))
            .transpose()?;
        let gid = gid_index.map_or(-1, |g| g as c_int);
        // SAFETY: `cname` (or null) is a valid C string that outlives the call; `err`
        // is writable for ERRLEN bytes.
        let raw = unsafe {
            rsv_open(
                cname.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                port as c_int,
                gid,
                cqe.min(i32::MAX as u32) as c_int,
                err.as_mut_ptr().cast(),
                ERRLEN,
            )
        };
        if raw.is_null() {
            return Err(errstr(&err));
        }
        // SAFETY: `raw` is a live device; the info struct lives inside it, is filled
        // at open and never changed, and is copied out here.
        let info = unsafe { *rsv_info(raw) };
        Ok(Device { raw, info })
    }

    pub fn info(&self) -> &Info {
        &self.info
    }

    /// Registers `len` bytes at `addr`.
    pub fn register(&self, addr: usize, len: usize, access: c_int) -> Result<Mr, String> {
        let (mut lkey, mut rkey) = (0u32, 0u32);
        let mut err = [0u8; ERRLEN];
        // SAFETY: the device is live. Registration only pins and maps the pages; it
        // does not access them through this pointer. The caller keeps the memory
        // mapped while the registration is used (see `Mr`).
        let raw = unsafe {
            rsv_reg(
                self.raw,
                addr as *mut c_void,
                len,
                access,
                &mut lkey,
                &mut rkey,
                err.as_mut_ptr().cast(),
                ERRLEN,
            )
        };
        if raw.is_null() {
            return Err(errstr(&err));
        }
        Ok(Mr { raw, lkey, rkey })
    }

    /// Creates an RC queue pair in state INIT; returns it with the inline size granted.
    pub fn create_qp(&self, sq_depth: u32, max_inline: u32) -> Result<(Qp, u32), String> {
        let (mut qpn, mut inline) = (0u32, 0u32);
        let mut err = [0u8; ERRLEN];
        // SAFETY: the device is live; the out-pointers and `err` are valid.
        let raw = unsafe {
            rsv_qp_create(
                self.raw,
                sq_depth,
                max_inline,
                &mut qpn,
                &mut inline,
                err.as_mut_ptr().cast(),
                ERRLEN,
            )
        };
        if raw.is_null() {
            return Err(errstr(&err));
        }
        Ok((Qp { raw, qpn }, inline))
    }

    /// Connects `qp` to the remote queue pair (RTR, then RTS).
    pub fn connect(
        &self,
        qp: &Qp,
        rqpn: u32,
        rlid: u16,
        rgid: &[u8; 16],
        my_psn: u32,
        remote_psn: u32,
    ) -> Result<(), String> {
        let mut err = [0u8; ERRLEN];
        // SAFETY: device and QP are live; `rgid` is 16 readable bytes; `err` writable.
        let rc = unsafe {
            rsv_qp_connect(
                self.raw,
                qp.raw,
                rqpn,
                rlid,
                rgid.as_ptr(),
                my_psn,
                remote_psn,
                err.as_mut_ptr().cast(),
                ERRLEN,
            )
        };
        match rc {
            0 => Ok(()),
            _ => Err(errstr(&err)),
        }
    }

    /// Polls up to 32 completions into `out`; returns how many.
    pub fn poll(&self, out: &mut [Wc; 32]) -> Result<usize, String> {
        // SAFETY: the device is live; `out` has room for 32 entries, the most the shim
        // writes.
        let n = unsafe { rsv_poll(self.raw, 32, out.as_mut_ptr()) };
        usize::try_from(n).map_err(|_| "ibv_poll_cq failed".to_string())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every queue pair and registration was dropped first (the transport
        // declares them before the device), so nothing uses the device any more.
        unsafe { rsv_close(self.raw) }
    }
}

/// A memory registration. Dropping it deregisters (revokes its keys).
pub struct Mr {
    raw: *mut RawMr,
    pub lkey: u32,
    pub rkey: u32,
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: `raw` came from a successful registration and is deregistered once.
        unsafe {
            rsv_dereg(self.raw);
        }
    }
}

/// An RC queue pair.
pub struct Qp {
    raw: *mut RawQp,
    pub qpn: u32,
}

/// A one-sided operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Write,
    Read,
}

impl Qp {
    /// Posts one RDMA WRITE or READ of `len` bytes between local `laddr` (covered by
    /// `lkey`, or inline) and remote `raddr` (`rkey`). Returns the errno on failure.
    ///
    /// # Safety
    /// `laddr .. laddr + len` must stay valid (and, for a READ, unaliased) until the
    /// work request completes — for an inline write only until this call returns.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn post(
        &self,
        op: Op,
        wr_id: u64,
        laddr: usize,
        len: u32,
        lkey: u32,
        raddr: u64,
        rkey: u32,
        signaled: bool,
        inline: bool,
    ) -> Result<(), i32> {
        let flags = signaled as c_int | (inline as c_int) << 1;
        let opcode = (op == Op::Read) as c_int;
        // SAFETY: the QP is live; the caller guarantees the local range per the
        // function's contract; the shim builds the work request on its stack.
        let rc = unsafe {
            rsv_post(
                self.raw,
                opcode,
                wr_id,
                laddr as u64,
                len,
                lkey,
                raddr,
                rkey,
                flags,
            )
        };
        match rc {
            0 => Ok(()),
            e => Err(e),
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: `raw` came from a successful create and is destroyed once.
        unsafe { rsv_qp_destroy(self.raw) }
    }
}

/// Reads a `u64` that the device may write at any time (a ring header or trailer, a
/// credit counter).
///
/// # Safety
/// `addr` must be 8-byte aligned and inside a live mapping.
pub unsafe fn read_u64(addr: *const u8) -> u64 {
    // SAFETY: per the contract; volatile because the device writes behind the
    // compiler's back.
    unsafe { std::ptr::read_volatile(addr.cast::<u64>()) }
}

//! Cross-memory attach: `process_vm_writev` / `process_vm_readv` through the `libc`
//! crate (rustix does not wrap them). This is the crate's only FFI.
//!
//! Both functions move bytes between a local slice and an address range in another
//! process (or this one). The kernel checks the remote range against the target's
//! mappings (unmapped → `EFAULT`) and the caller's right to access the target
//! (`EPERM`); a target that has exited gives `ESRCH`. Transfers may be partial; both
//! functions loop until everything has moved or an error occurs.

use std::ffi::c_void;
use std::io;

fn remote_iov(addr: u64, done: usize, len: usize) -> io::Result<libc::iovec> {
    let base = addr
        .checked_add(done as u64)
        .and_then(|a| usize::try_from(a).ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
    Ok(libc::iovec {
        iov_base: base as *mut c_void,
        iov_len: len,
    })
}

/// Writes all of `local` to address `remote` of process `pid`.
///
/// When `pid` is this process the write lands in this process's own memory: the caller
/// must make sure the range is memory it is entitled to overwrite (for the transport:
/// a buffer that was exposed with `Transport::expose` and is not otherwise in use),
/// exactly as a peer process writing there would require.
pub fn write(pid: i32, local: &[u8], remote: u64) -> io::Result<()> {
    let mut done = 0;
    while done < local.len() {
        let rest = &local[done..];
        let liov = libc::iovec {
            iov_base: rest.as_ptr() as *mut c_void,
            iov_len: rest.len(),
        };
        let riov = remote_iov(remote, done, rest.len())?;
        // SAFETY: `liov` describes `rest`, a live slice that the kernel only reads
        // (process_vm_writev never writes the local iovecs' memory); both iovec arrays
        // have exactly the one element we pass as the count. The remote range is checked
        // by the kernel against the target's mappings; memory of this process is not
        // written unless pid is our own pid, which the caller's contract covers.
        let n = unsafe { libc::process_vm_writev(pid, &liov, 1, &riov, 1, 0) };
        done += advance(n)?;
    }
    Ok(())
}

/// Fills all of `local` from address `remote` of process `pid`.
pub fn read(pid: i32, local: &mut [u8], remote: u64) -> io::Result<()> {
    let mut done = 0;
    while done < local.len() {
        let rest = &mut local[done..];
        let liov = libc::iovec {
            iov_base: rest.as_mut_ptr() as *mut c_void,
            iov_len: rest.len(),
        };
        let riov = remote_iov(remote, done, rest.len())?;
        // SAFETY: `liov` describes `rest`, a live, exclusively borrowed slice, so the
        // kernel may write any bytes into it (every bit pattern is a valid u8); both
        // iovec arrays have exactly the one element we pass as the count. The remote
        // range is only read, and checked by the kernel.
        let n = unsafe { libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0) };
        done += advance(n)?;
    }
    Ok(())
}

/// Interprets a process_vm_* return value: bytes moved, or the error.
fn advance(n: isize) -> io::Result<usize> {
    match n {
        n if n > 0 => Ok(n as usize),
        // Nothing moved although bytes remain: the remote range ends here.
        0 => Err(io::Error::from_raw_os_error(libc::EFAULT)),
        _ => {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                Ok(0)
            } else {
                Err(e)
            }
        }
    }
}

//! Cross-memory attach: `process_vm_writev` / `process_vm_readv` through the `libc`
//! crate (rustix does not wrap them). This and `pull::resident` (`mincore`) are the
//! crate's only FFI.
//!
//! Both functions move bytes between a local slice and an address range in another
//! process (or this one). The kernel checks the remote range against the target's
//! mappings (unmapped → `EFAULT`) and the caller's right to access the target
//! (`EPERM`); a target that has exited gives `ESRCH`. Transfers may be partial; both
//! functions loop until everything has moved or an error occurs.
//!
//! **4 KiB aliasing.** The kernel copies with `rep movsb`, which on some CPUs (AMD
//! Zen 3, this project's CI machine) runs ~5 times slower when the destination lies
//! 1–31 bytes past the source modulo 4 KiB (`transport::copy`). For a read the
//! destination is the local buffer and the source the remote address; for a write the
//! other way round. Where a transfer of [`ALIAS_FROM`] bytes or more would alias and
//! this machine was measured slow for it ([`slow_when_aliased`], once per process),
//! it goes through a bounce buffer placed at the remote side's page offset, in pieces
//! of [`BOUNCE`] bytes, and the bounce is copied to or from the caller's buffer with
//! [`transport::copy::copy`], which does not stall.

use std::cell::RefCell;
use std::ffi::c_void;
use std::io;
use std::sync::OnceLock;
use transport::copy::aliased;

/// Transfers shorter than this go as they are, aliased or not (the bounce's extra
/// copy would cost about what it saves).
pub const ALIAS_FROM: usize = 1024;

/// The bounce buffer's piece: large enough to amortize a call, small enough to stay
/// in the cache between the kernel's copy and ours.
pub const BOUNCE: usize = 64 * 1024;

thread_local! {
    /// The bounce buffer (one piece plus a page of room to place it).
    static BOUNCE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether the kernel's copy on this machine is slow for aliasing buffers: a 16 KiB
/// `process_vm_readv` of this process's own memory at a relative page offset of 16
/// against one at 0 (the better of 5 each, timed once per process); slow when it takes
/// over twice as long. `false` where the call is refused.
pub fn slow_when_aliased() -> bool {
    static SLOW: OnceLock<bool> = OnceLock::new();
    *SLOW.get_or_init(|| {
        const N: usize = 16 * 1024;
        let mut mem = vec![1u8; 4 * N + 8192];
        let s = (4096 - mem.as_ptr() as usize % 4096) % 4096;
        let pid = std::process::id() as i32;
        let mut time = |rel: usize| -> Option<u128> {
            let (a, b) = mem.split_at_mut(s + 2 * N);
            let src = a[s..].as_ptr() as u64;
            let dst = &mut b[rel..rel + N];
            let mut best = u128::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                read_direct(pid, dst, src).ok()?;
                best = best.min(t.elapsed().as_nanos());
            }
            Some(best)
        };
        match (time(0), time(16)) {
            (Some(plain), Some(aliased)) => aliased > 2 * plain.max(1),
            _ => false,
        }
    })
}

/// Whether a transfer of `len` bytes between local address `dst` and `src` (for a
/// read: local, remote; for a write: remote, local) takes the bounce.
#[inline(always)]
fn bounces(len: usize, dst: usize, src: usize) -> bool {
    len >= ALIAS_FROM && aliased(dst, src) && slow_when_aliased()
}

/// Runs `f` on pieces of `len` bytes starting at remote address `remote`: each piece
/// as (its offset, a bounce slice of its length at the remote address's page offset).
fn in_pieces(
    len: usize,
    remote: u64,
    mut f: impl FnMut(usize, &mut [u8]) -> io::Result<()>,
) -> io::Result<()> {
    BOUNCE_BUF.with_borrow_mut(|b| {
        if b.len() < BOUNCE + 4096 {
            b.resize(BOUNCE + 4096, 0);
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(BOUNCE);
            let at = (remote as usize).wrapping_add(done) % 4096;
            let off = (at + 4096 - b.as_ptr() as usize % 4096) % 4096;
            f(done, &mut b[off..off + n])?;
            done += n;
        }
        Ok(())
    })
}

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
    if bounces(local.len(), remote as usize, local.as_ptr() as usize) {
        return write_bounced(pid, local, remote);
    }
    write_direct(pid, local, remote)
}

/// [`write`] through the bounce buffer.
fn write_bounced(pid: i32, local: &[u8], remote: u64) -> io::Result<()> {
    in_pieces(local.len(), remote, |at, bounce| {
        transport::copy::copy(bounce, &local[at..at + bounce.len()]);
        write_direct(pid, bounce, remote + at as u64)
    })
}

/// [`write`] in the kernel's own way.
fn write_direct(pid: i32, local: &[u8], remote: u64) -> io::Result<()> {
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
    if bounces(local.len(), local.as_ptr() as usize, remote as usize) {
        return read_bounced(pid, local, remote);
    }
    read_direct(pid, local, remote)
}

/// [`read`] through the bounce buffer.
fn read_bounced(pid: i32, local: &mut [u8], remote: u64) -> io::Result<()> {
    in_pieces(local.len(), remote, |at, bounce| {
        read_direct(pid, bounce, remote + at as u64)?;
        transport::copy::copy(&mut local[at..at + bounce.len()], bounce);
        Ok(())
    })
}

/// [`read`] in the kernel's own way.
fn read_direct(pid: i32, local: &mut [u8], remote: u64) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A source of `len` bytes and a destination `rel` bytes past its page offset, in
    /// one allocation; calls `f(src, dst)`.
    fn pair(len: usize, rel: usize, f: impl FnOnce(&mut [u8], &mut [u8])) {
        let mut mem = vec![0u8; 2 * len + 4 * 4096 + rel];
        let s = (4096 - mem.as_ptr() as usize % 4096) % 4096 + 8;
        let d = s + len.div_ceil(4096) * 4096 + 4096 + rel;
        let (a, b) = mem.split_at_mut(d);
        f(&mut a[s..s + len], &mut b[..len]);
    }

    #[test]
    fn reads_and_writes_through_the_bounce_move_every_byte() {
        let me = std::process::id() as i32;
        for len in [ALIAS_FROM, 5000, BOUNCE, 2 * BOUNCE + 4097] {
            for rel in [0, 16, 31, 4000] {
                pair(len, rel, |src, dst| {
                    for (i, b) in src.iter_mut().enumerate() {
                        *b = (i * 13 + rel) as u8;
                    }
                    let want = src.to_vec();
                    read_bounced(me, dst, src.as_ptr() as u64).unwrap();
                    assert!(dst == &want[..], "read, len {len} rel {rel}");
                    dst.fill(0);
                    read(me, dst, src.as_ptr() as u64).unwrap();
                    assert!(dst == &want[..], "read, len {len} rel {rel}");
                    // a write from the source into the destination
                    dst.fill(0);
                    write_bounced(me, src, dst.as_ptr() as u64).unwrap();
                    assert!(dst == &want[..], "write, len {len} rel {rel}");
                    dst.fill(0);
                    write(me, src, dst.as_ptr() as u64).unwrap();
                    assert!(dst == &want[..], "write, len {len} rel {rel}");
                });
            }
        }
    }

    #[test]
    fn a_bad_remote_range_fails_through_the_bounce_too() {
        let me = std::process::id() as i32;
        let mut dst = vec![0u8; 8192];
        let e = read_bounced(me, &mut dst, 16).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
    }
}

//! Unmap notifications for the registration cache.
//!
//! A registration pins the pages a buffer had when it was registered. If the program
//! frees the buffer (`munmap`, or `madvise(MADV_DONTNEED)` by the allocator) and gets
//! new memory at the same address, a cached registration would still point at the old
//! pages: the device would read stale data and write where nobody looks. The cache
//! therefore keeps a registration after its last user only for memory it watches with
//! a userfaultfd, which reports every unmap, removal and remap of the watched pages.
//!
//! The kernel holds the unmapping thread until the event has been *read*, so the
//! events are read by a small monitor thread (the only thread the transport starts;
//! it moves no data). The cache then knows of an unmap before it can be asked about
//! memory mapped after it: the monitor counts reads begun and reads finished (events
//! handed over), and [`Unmaps::drain`] waits until no read is half done — an unmap
//! that has returned was read, so its range is in the channel by then.

use super::ffi::Uffd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

struct Shared {
    uffd: Uffd,
    begun: AtomicU64,
    finished: AtomicU64,
    stop: AtomicBool,
}

pub struct Unmaps {
    shared: Arc<Shared>,
    rx: Receiver<(u64, u64)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const PAGE: u64 = 4096;

impl Unmaps {
    /// A monitor, or the reason there is none (then the cache keeps nothing idle).
    pub fn new() -> Result<Unmaps, String> {
        let uffd = Uffd::open()
            .map_err(|e| format!("userfaultfd: {}", std::io::Error::from_raw_os_error(e)))?;
        let shared = Arc::new(Shared {
            uffd,
            begun: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let (tx, rx) = channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rsmpi-unmaps".into())
            .spawn(move || {
                let mut buf = [[0u64; 2]; 16];
                while !s.stop.load(SeqCst) {
                    if !s.uffd.wait(100) {
                        continue;
                    }
                    s.begun.fetch_add(1, SeqCst);
                    let n = s.uffd.read(&mut buf);
                    for r in &buf[..n] {
                        let _ = tx.send((r[0], r[1]));
                    }
                    s.finished.fetch_add(1, SeqCst);
                }
            })
            .map_err(|e| format!("monitor thread: {e}"))?;
        Ok(Unmaps {
            shared,
            rx,
            thread: Some(thread),
        })
    }

    /// Watches the pages under `addr .. addr + len`; false if they cannot be watched.
    pub fn watch(&self, addr: usize, len: usize) -> bool {
        let start = addr as u64 & !(PAGE - 1);
        let end = (addr as u64 + len as u64).div_ceil(PAGE) * PAGE;
        self.shared.uffd.watch(start, end - start)
    }

    /// Calls `f(start, end)` for every range unmapped since the last call, including
    /// any unmap that has returned to its caller before this call.
    pub fn drain(&self, mut f: impl FnMut(u64, u64)) {
        while self.shared.begun.load(SeqCst) != self.shared.finished.load(SeqCst) {
            std::hint::spin_loop();
        }
        while let Ok((s, e)) = self.rx.try_recv() {
            f(s, e);
        }
    }
}

impl Drop for Unmaps {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs no RDMA device: userfaultfd alone (skipped, with a line, where the kernel
    /// refuses it to this user).
    #[test]
    fn unmap_of_a_watched_mapping_is_reported_before_munmap_returns() {
        let u = match Unmaps::new() {
            Ok(u) => u,
            Err(e) => {
                eprintln!("no userfaultfd here ({e}): the cache keeps nothing idle");
                return;
            }
        };
        let len = 1 << 20;
        let m = memmap2::MmapMut::map_anon(len).unwrap();
        let at = m.as_ptr() as u64;
        assert!(u.watch(m.as_ptr() as usize + 100, 5000));
        let mut got = Vec::new();
        u.drain(|s, e| got.push((s, e)));
        assert!(got.is_empty(), "{got:x?}");
        drop(m); // munmap
        u.drain(|s, e| got.push((s, e)));
        assert!(
            got.iter().any(|&(s, e)| s <= at && e > at),
            "unmap of {at:#x} not reported: {got:x?}"
        );
        // a new mapping of the same size: no stale report, and watchable again
        let m = memmap2::MmapMut::map_anon(len).unwrap();
        assert!(u.watch(m.as_ptr() as usize, len));
        let mut more = Vec::new();
        u.drain(|s, e| more.push((s, e)));
        assert!(more.is_empty(), "{more:x?}");
    }
}

//! This machine's physical limits: a raw two-process cache-line ping-pong over a
//! shared mapping, memcpy bandwidth, and the cost of one cross-memory read
//! (`process_vm_readv`, the single-copy path of rendezvous and one-sided writes); the
//! two copies again with 4 KiB aliasing (`transport::copy`), where some CPUs slow down.

use crate::report::Row;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Round trips per timed repetition of the cache-line ping-pong.
const ROUNDS: u64 = 200_000;
/// Repetitions (the median is reported).
const REPS: u64 = 11;

/// A shared mapping of a small file, seen as atomic 64-bit words.
struct SharedWords {
    map: memmap2::MmapMut,
}

impl SharedWords {
    /// Maps `file` read-write and shared.
    ///
    /// # Safety
    /// While the mapping lives, the file must not be truncated, and its bytes must be
    /// accessed (by any process) only through [`SharedWords::words`], that is, with
    /// atomic 8-byte operations. Both holds for the private, owner-only file created
    /// by [`cacheline_pingpong`] and used only by it and its child.
    unsafe fn map(file: &File) -> io::Result<SharedWords> {
        // SAFETY: the caller guarantees the conditions of `MmapMut::map_mut` (no
        // truncation, no access other than through the atomics below).
        let map = unsafe { memmap2::MmapMut::map_mut(file)? };
        Ok(SharedWords { map })
    }

    fn words(&self) -> &[AtomicU64] {
        let bytes: &[u8] = &self.map;
        // SAFETY: the mapping is page-aligned (so aligned for u64) and `len / 8` words
        // long; AtomicU64 has the size and bit validity of u64 and any bit pattern is
        // a valid u64; the bytes are only ever accessed atomically (the contract of
        // `map`), so the shared access through `&AtomicU64` is sound; the slice
        // borrows `self`, so it cannot outlive the mapping.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<AtomicU64>(), bytes.len() / 8) }
    }
}

/// Removes the file when dropped.
struct Remove(PathBuf);
impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Spins until `w` holds `v`; false if that takes longer than `CHILD_IDLE`.
fn spin_until(w: &AtomicU64, v: u64) -> bool {
    let mut spins = 0u32;
    let t = Instant::now();
    while w.load(Ordering::Acquire) != v {
        spins = spins.wrapping_add(1);
        if spins & ((1 << 20) - 1) == 0 && t.elapsed() > CHILD_IDLE {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// Value that ends the child.
const STOP: u64 = u64::MAX;
/// A repetition stops early after this long (a loaded machine makes every handoff
/// wait for the scheduler), and the child gives up after `CHILD_IDLE` without news.
const REP_BUDGET: Duration = Duration::from_millis(300);
const CHILD_IDLE: Duration = Duration::from_secs(10);

/// The child side: `rsmpi-bench __limits-child PATH` answers every odd value with
/// the next even one, until it reads `STOP` (or hears nothing for `CHILD_IDLE`).
pub fn child(path: &Path) -> io::Result<()> {
    crate::rank::pin(1, 2);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    // SAFETY: the file is the owner-only one the parent created for this ping-pong
    // only; neither side truncates it or touches it other than through `words`.
    let shared = unsafe { SharedWords::map(&file)? };
    let w = shared.words();
    w[8].store(1, Ordering::Release); // ready (another cache line)
    let mut last = 0;
    let mut idle_since = Instant::now();
    let mut spins = 0u32;
    loop {
        let v = w[0].load(Ordering::Acquire);
        if v == STOP {
            return Ok(());
        }
        if v % 2 == 1 && v != last {
            w[0].store(v + 1, Ordering::Release);
            last = v;
            idle_since = Instant::now();
            continue;
        }
        spins += 1;
        if spins & ((1 << 20) - 1) == 0 && idle_since.elapsed() > CHILD_IDLE {
            return Err(io::Error::other("the parent went away"));
        }
        std::hint::spin_loop();
    }
}

/// One-way time (µs) of a cache line bouncing between two processes pinned to
/// different CPUs: the median over batches of 16 round trips.
pub fn cacheline_pingpong() -> io::Result<(f64, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = PathBuf::from(format!(
        "/dev/shm/rsmpi-bench-limits-{}",
        std::process::id()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let _rm = Remove(path.clone());
    file.set_len(4096)?;
    // SAFETY: see `child`: this file is ours alone, never truncated while mapped, and
    // only accessed through the atomic words.
    let shared = unsafe { SharedWords::map(&file)? };
    let w = shared.words();
    let mut kid = std::process::Command::new(std::env::current_exe()?)
        .arg("__limits-child")
        .arg(&path)
        .spawn()?;
    // pinned for the measurement only: jobs launched later by this process must not
    // inherit a one-CPU mask (both ranks would share it)
    let _unpin = Unpin(rustix::thread::sched_getaffinity(None).ok());
    crate::rank::pin(0, 2);
    let t_ready = Instant::now();
    while w[8].load(Ordering::Acquire) != 1 {
        if t_ready.elapsed().as_secs() > 10 || kid.try_wait()?.is_some() {
            let _ = kid.kill();
            let _ = kid.wait();
            return Err(io::Error::other("the limits child did not start"));
        }
        std::thread::yield_now();
    }
    // Round trips are timed in batches of `BATCH`, and the median batch is reported:
    // a batch during which another process took one of the CPUs is an outlier that
    // the median ignores, so the figure holds on a busy machine too.
    const BATCH: u64 = 16;
    let mut times = Vec::new();
    let mut k = 0u64;
    for rep in 0..=REPS {
        let t = Instant::now();
        let mut rounds = 0u64;
        while rounds < ROUNDS && t.elapsed() < REP_BUDGET {
            let tb = Instant::now();
            for _ in 0..BATCH {
                w[0].store(2 * k + 1, Ordering::Release);
                if !spin_until(&w[0], 2 * k + 2) {
                    let _ = kid.kill();
                    let _ = kid.wait();
                    return Err(io::Error::other("the limits child stopped answering"));
                }
                k += 1;
            }
            rounds += BATCH;
            if rep > 0 {
                // the first repetition is the warm-up
                times.push(tb.elapsed().as_secs_f64() * 1e6 / (2 * BATCH) as f64);
            }
        }
    }
    w[0].store(STOP, Ordering::Release);
    kid.wait()?;
    let n = times.len() as u64 * BATCH;
    Ok((median(&mut times), n))
}

/// Restores this thread's CPU affinity when dropped.
struct Unpin(Option<rustix::thread::CpuSet>);

impl Drop for Unpin {
    fn drop(&mut self) {
        if let Some(set) = &self.0 {
            let _ = rustix::thread::sched_setaffinity(None, set);
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A source and a destination of `size` bytes in one allocation, the destination
/// `rel` bytes past the source's offset in its 4 KiB page (two allocations would lie
/// wherever the allocator puts them: `rel` 16 side by side, the slow case of 4 KiB
/// aliasing, `transport::copy`).
struct Pair {
    mem: Vec<u8>,
    src: usize,
    dst: usize,
    size: usize,
}

impl Pair {
    fn new(size: usize, rel: usize) -> Pair {
        let mut mem = vec![0u8; 2 * size + 3 * 4096 + rel];
        let src = (4096 - mem.as_ptr() as usize % 4096) % 4096;
        let dst = src + size.div_ceil(4096) * 4096 + rel;
        mem[src..src + size].fill(1);
        Pair {
            mem,
            src,
            dst,
            size,
        }
    }

    fn parts(&mut self) -> (&[u8], &mut [u8]) {
        let (a, b) = self.mem.split_at_mut(self.dst);
        (&a[self.src..self.src + self.size], &mut b[..self.size])
    }
}

/// Median bandwidth (GB/s) of `copy` for blocks of `size` bytes, the destination `rel`
/// bytes past the source modulo 4 KiB.
pub fn copy_bw(size: usize, rel: usize, copy: fn(&mut [u8], &[u8])) -> f64 {
    let mut p = Pair::new(size, rel);
    let copies = ((256usize << 20) / size).max(4);
    let mut times = Vec::new();
    for rep in 0..=REPS {
        let t = Instant::now();
        for _ in 0..copies {
            let (src, dst) = p.parts();
            copy(dst, std::hint::black_box(src));
            std::hint::black_box(dst);
        }
        if rep > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    (size * copies) as f64 / median(&mut times) / 1e9
}

/// Median memcpy bandwidth (GB/s) for blocks of `size` bytes.
pub fn memcpy_bw(size: usize) -> f64 {
    copy_bw(size, 0, |d, s| d.copy_from_slice(s))
}

/// Median time (µs) of one `process_vm_readv` of `size` bytes, the destination `rel`
/// bytes past the source modulo 4 KiB. It reads this process's own memory (no peer
/// needed); the kernel path (locking the address space, pinning the pages, copying)
/// is the one a read from a peer takes, though reading a peer measured somewhat faster
/// here for large sizes.
pub fn cma_read(size: usize, rel: usize) -> io::Result<f64> {
    let mut p = Pair::new(size, rel);
    let calls = ((64usize << 20) / size.max(4096)).clamp(16, 20_000);
    let pid = std::process::id() as libc::pid_t;
    let mut times = Vec::new();
    for rep in 0..=REPS {
        let t = Instant::now();
        for _ in 0..calls {
            let (src, dst) = p.parts();
            let local = libc::iovec {
                iov_base: dst.as_mut_ptr().cast(),
                iov_len: size,
            };
            let remote = libc::iovec {
                iov_base: src.as_ptr() as *mut libc::c_void,
                iov_len: size,
            };
            // SAFETY: FFI call with one local and one remote iovec describing live,
            // disjoint buffers of `size` bytes owned by `p` (`dst` borrowed mutably);
            // the kernel validates the remote range and reports faults as errors.
            let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
            if n != size as isize {
                return Err(io::Error::last_os_error());
            }
            std::hint::black_box(dst);
        }
        if rep > 0 {
            times.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
        }
    }
    Ok(median(&mut times))
}

/// Rows for the limits table.
pub fn measure() -> io::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let row = |metric: &str, size: u64, value: f64, unit: &str, iterations: u64| Row {
        benchmark: "limits".into(),
        implementation: "hardware".into(),
        transport: "shm".into(),
        matching: "-".into(),
        protocol: "-".into(),
        metric: metric.into(),
        size,
        value,
        unit: unit.into(),
        iterations,
        ranks: 2,
    };
    let (line, n) = cacheline_pingpong()?;
    rows.push(row("cacheline-oneway", 8, line, "us", n));
    for size in [1usize << 20, 4 << 20] {
        rows.push(row("memcpy", size as u64, memcpy_bw(size), "GB/s", REPS));
    }
    // 4 KiB aliasing (`transport::copy`): 64 KiB with the destination 16 bytes past
    // the source modulo a page, by memcpy and by rsmpi's copy
    const ALIASED: usize = 16;
    rows.push(row(
        "memcpy-aliased",
        65536,
        copy_bw(65536, ALIASED, |d, s| d.copy_from_slice(s)),
        "GB/s",
        REPS,
    ));
    rows.push(row(
        "copy-aliased",
        65536,
        copy_bw(65536, ALIASED, transport::copy::copy),
        "GB/s",
        REPS,
    ));
    for (size, rel, metric) in [
        (8usize, 0, "cma-read"),
        (65536, 0, "cma-read"),
        (1 << 20, 0, "cma-read"),
        (65536, ALIASED, "cma-read-aliased"),
    ] {
        match cma_read(size, rel) {
            Ok(us) => rows.push(row(metric, size as u64, us, "us", REPS)),
            Err(e) => eprintln!("rsmpi-bench: limits: process_vm_readv unavailable: {e}"),
        }
    }
    Ok(rows)
}

/// rsmpi as ratios of the limits, from rows of the same run.
pub fn ratios(rows: &[Row]) -> Vec<Row> {
    let find = |b: &str, m: &str, size: u64| {
        rows.iter().find(|r| {
            r.benchmark == b && r.implementation != "rsmpi-x" && r.metric == m && r.size == size
        })
    };
    let mut out = Vec::new();
    let mk = |metric: &str, size: u64, value: f64| Row {
        benchmark: "limits".into(),
        implementation: "rsmpi".into(),
        transport: "shm".into(),
        matching: "both".into(),
        protocol: "eager".into(),
        metric: metric.into(),
        size,
        value,
        unit: "x".into(),
        iterations: 0,
        ranks: 2,
    };
    let rs = |b: &str, m: &str, size: u64| {
        rows.iter().find(|r| {
            r.benchmark == b && r.implementation == "rsmpi" && r.metric == m && r.size == size
        })
    };
    if let Some(line) = find("limits", "cacheline-oneway", 8) {
        for size in [0, 8] {
            if let Some(l) = rs("latency", "", size) {
                out.push(mk("rsmpi-latency-ratio", size, l.value / line.value));
            }
        }
    }
    for size in [1u64 << 20, 4 << 20] {
        if let Some(m) = find("limits", "memcpy", size) {
            if let Some(b) = rs("bw", "", size) {
                out.push(mk("rsmpi-bw-ratio", size, b.value / 1e3 / m.value));
            }
            if let Some(b) = rs("bibw", "", size) {
                out.push(mk("rsmpi-bibw-ratio", size, b.value / 1e3 / m.value));
            }
        }
    }
    out
}

//! Copying bytes where the CPU's string copy is slow: 4 KiB aliasing.
//!
//! ```
//! let src = vec![7u8; 16 * 1024 + 64];
//! let mut dst = vec![0u8; 16 * 1024 + 64];
//! // whatever the two buffers' page offsets, the copy takes a fast way
//! transport::copy::copy(&mut dst[16..16 + 16 * 1024], &src[..16 * 1024]);
//! assert!(dst[16..16 + 16 * 1024].iter().all(|&b| b == 7));
//! ```
//!
//! On AMD Zen 3 (the machine the project's CI and benchmarks run on: `cpu family 25`),
//! `rep movsb` runs 5–25 times slower when the destination lies 1–31 bytes past the
//! source modulo 4 KiB: `(dst - src) mod 4096` in `1..=31`. glibc's `memcpy` uses
//! `rep movsb` from a few KiB up, so a 16 KiB copy takes ~9 µs instead of ~0.4 µs,
//! and the kernel uses it for every copy to or from user memory, so a
//! `process_vm_readv` of 64 KiB takes ~42 µs instead of ~8 µs
//! (`docs/performance.md`, "4 KiB aliasing"). A buffer's page offset is an accident of
//! the allocator, so any message can fall there, and then every message between the
//! same two buffers does.
//!
//! [`copy`] tests the two addresses (one subtraction and a compare, out of line, and
//! only for copies of [`ALIAS_FROM`] bytes or more). Where they alias and this machine was
//! measured slow for it ([`slow_when_aliased`], timed once per process), it copies
//! with 16-byte vector loads and stores, which do not stall; everywhere else it is
//! `copy_from_slice`. The shared-memory transport's reads and writes of another
//! process's memory avoid the kernel's slow case with a bounce buffer at the remote
//! side's page offset (`transport-shm`'s `cma` module).
#![allow(unsafe_code)]

use std::sync::OnceLock;
use std::time::Instant;

/// Copies shorter than this are never slowed by aliasing enough to matter (glibc
/// copies them without `rep movsb`).
pub const ALIAS_FROM: usize = 2048;

/// Whether a copy from `src` to `dst` (addresses) falls in the slow window:
/// `(dst - src) mod 4096` in `1..=31`.
#[inline(always)]
pub fn aliased(dst: usize, src: usize) -> bool {
    (dst.wrapping_sub(src) & 4095).wrapping_sub(1) < 31
}

/// Copies `src` into `dst` (which must be as long), the fast way for this machine.
///
/// # Panics
///
/// If the two lengths differ, as `copy_from_slice` does.
#[inline(always)]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    if src.len() >= ALIAS_FROM {
        // out of line: a short copy pays one test
        return copy_long(dst, src);
    }
    dst.copy_from_slice(src);
}

/// Appends `src` to `v`, the fast way for this machine: [`copy`] for a vector that
/// grows. The matching engine copies an early message's payload with it
/// (`matching::Engine::copy_early_with`), so that an unexpected message of a few KiB
/// does not meet the aliasing stall either.
///
/// ```
/// let src = vec![3u8; 8192];
/// let mut v = Vec::new();
/// transport::copy::extend(&mut v, &src);
/// assert_eq!(v, src);
/// ```
#[inline(always)]
pub fn extend(v: &mut Vec<u8>, src: &[u8]) {
    if src.len() >= ALIAS_FROM {
        return extend_long(v, src);
    }
    v.extend_from_slice(src);
}

/// [`extend`] of [`ALIAS_FROM`] bytes or more: where the vector's free room lies in
/// the window, it is zeroed and then written with vector stores (the zeroing is a
/// store stream, which aliasing does not slow); elsewhere `extend_from_slice`.
#[inline(never)]
fn extend_long(v: &mut Vec<u8>, src: &[u8]) {
    v.reserve(src.len());
    let at = v.len();
    let room = v.as_ptr() as usize + at;
    if aliased(room, src.as_ptr() as usize) && slow_when_aliased() {
        v.resize(at + src.len(), 0);
        by_vectors(&mut v[at..], src);
    } else {
        v.extend_from_slice(src);
    }
}

/// [`copy`] of [`ALIAS_FROM`] bytes or more.
#[inline(never)]
fn copy_long(dst: &mut [u8], src: &[u8]) {
    if aliased(dst.as_ptr() as usize, src.as_ptr() as usize) && slow_when_aliased() {
        by_vectors(dst, src);
    } else {
        dst.copy_from_slice(src);
    }
}

/// Whether `memcpy` on this machine is slow for aliasing buffers: a 16 KiB copy at a
/// relative page offset of 16 against one at 0 (the better of 5 runs each, timed once
/// per process, ~0.1 ms); slow when it takes over twice as long.
pub fn slow_when_aliased() -> bool {
    static SLOW: OnceLock<bool> = OnceLock::new();
    *SLOW.get_or_init(|| {
        const N: usize = 16 * 1024;
        let mut mem = vec![1u8; 4 * N + 8192];
        let base = mem.as_ptr() as usize;
        // the source page-aligned, destinations 2N further at relative offsets 0 and 16
        let s = (4096 - base % 4096) % 4096;
        let time = |mem: &mut Vec<u8>, rel: usize| {
            let mut best = u128::MAX;
            for _ in 0..5 {
                let (a, b) = mem.split_at_mut(s + 2 * N);
                let (src, dst) = (&a[s..s + N], &mut b[rel..rel + N]);
                let t = Instant::now();
                dst.copy_from_slice(std::hint::black_box(src));
                std::hint::black_box(dst);
                best = best.min(t.elapsed().as_nanos());
            }
            best
        };
        let plain = time(&mut mem, 0);
        time(&mut mem, 16) > 2 * plain.max(1)
    })
}

/// Copies `src` into `dst` with 16-byte loads and stores (64 bytes a turn), the tail
/// with `copy_from_slice` (under 64 bytes, never `rep movsb`). Public for tests and
/// benchmarks; use [`copy`].
///
/// # Panics
///
/// If the two lengths differ.
pub fn by_vectors(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of different lengths"
    );
    let body = src.len() / 64 * 64;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_si128, _mm_storeu_si128};
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = 0;
        while i < body {
            // SAFETY: i + 64 <= body <= the length of both slices, so every 16-byte
            // access is in bounds; `loadu` / `storeu` need no alignment (SSE2 is part
            // of x86_64); `dst` is borrowed exclusively and `src` shared, so the two
            // do not overlap. (LLVM does not turn this loop back into `memcpy`, and so
            // into `rep movsb`, which is what the function exists to avoid: checked in
            // the release build's code.)
            unsafe {
                let v0 = _mm_loadu_si128(s.add(i).cast());
                let v1 = _mm_loadu_si128(s.add(i + 16).cast());
                let v2 = _mm_loadu_si128(s.add(i + 32).cast());
                let v3 = _mm_loadu_si128(s.add(i + 48).cast());
                _mm_storeu_si128(d.add(i).cast(), v0);
                _mm_storeu_si128(d.add(i + 16).cast(), v1);
                _mm_storeu_si128(d.add(i + 32).cast(), v2);
                _mm_storeu_si128(d.add(i + 48).cast(), v3);
            }
            i += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst[..body].copy_from_slice(&src[..body]);
    dst[body..].copy_from_slice(&src[body..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_one_to_thirty_one_bytes_past_modulo_a_page() {
        assert!(!aliased(4096, 4096));
        assert!(aliased(4097, 4096));
        assert!(aliased(4096 + 31, 4096));
        assert!(!aliased(4096 + 32, 4096));
        assert!(!aliased(4095, 4096), "before the source is not the window");
        assert!(aliased(3 * 4096 + 16, 4096), "modulo 4 KiB");
        assert!(aliased(16, usize::MAX - 4095), "wrapping");
    }

    #[test]
    fn every_offset_and_length_copies_exactly() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 63, 64, 65, 127, 2047, 2048, 4096, 5000, 8191] {
            for so in [0, 1, 16, 31] {
                for rel in [0usize, 1, 8, 16, 31, 32, 63, 4095] {
                    let mut dst = vec![0xAAu8; len + 4200];
                    // a destination `rel` bytes past the source's page offset
                    let want = (src.as_ptr() as usize + so + rel) % 4096;
                    let at = (want + 4096 - dst.as_ptr() as usize % 4096) % 4096;
                    let s = &src[so..so + len];
                    copy(&mut dst[at..at + len], s);
                    assert_eq!(&dst[at..at + len], s, "len {len} so {so} rel {rel}");
                    assert!(dst[..at].iter().all(|&b| b == 0xAA), "before");
                    assert!(dst[at + len..].iter().all(|&b| b == 0xAA), "after");
                    let mut v = vec![0x55u8; len];
                    by_vectors(&mut v, s);
                    assert_eq!(v, s);
                }
            }
        }
    }

    #[test]
    fn extend_appends_exactly_at_every_offset() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 5 + 1) as u8).collect();
        for len in [0, 1, 1024, 2047, 2048, 4096, 5000, 8191] {
            for rel in [0usize, 1, 16, 31, 32, 4095] {
                // a vector whose free room starts `rel` bytes past the source's page
                // offset, with `head` bytes in it already
                let mut v: Vec<u8> = Vec::with_capacity(len + 4200);
                let want = (src.as_ptr() as usize + rel) % 4096;
                let head = (want + 4096 - v.as_ptr() as usize % 4096) % 4096;
                v.resize(head, 0xAA);
                let s = &src[..len];
                extend(&mut v, s);
                assert_eq!(v.len(), head + len, "len {len} rel {rel}");
                assert_eq!(&v[head..], s, "len {len} rel {rel}");
                assert!(v[..head].iter().all(|&b| b == 0xAA), "before");
            }
        }
        let mut v = Vec::new();
        extend(&mut v, &src[..4096]);
        assert_eq!(v, &src[..4096], "into an empty vector");
    }

    #[test]
    #[should_panic(expected = "different lengths")]
    fn lengths_must_agree() {
        by_vectors(&mut [0u8; 64], &[0u8; 65]);
    }
}

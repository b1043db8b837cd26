//! The benchmarks as they run inside a job: every rank calls [`run`]; rank 0 returns
//! the rows.

use crate::report::Row;
use rsmpi::traits::*;
use rsmpi::{request, Process, SimpleCommunicator, Universe};
use std::hint::black_box;
use std::time::Instant;

/// OSU's window for `bw`, `bibw` and `mbw_mr`.
pub const WINDOW: usize = 64;
/// OSU's boundary between small and large messages (iteration counts drop above it).
pub const LARGE: usize = 8192;
/// Memory a pre-posted loop may use for its receive buffers in all.
const PREPOST_BYTES: usize = 64 << 20;
/// Memory one batch of pre-posted receives may use (they stay in the 32 MiB L3).
const BATCH_BYTES: usize = 8 << 20;

/// What a rank needs to know about the run.
#[derive(Clone, Debug)]
pub struct Opts {
    pub quick: bool,
    pub min_size: usize,
    pub max_size: usize,
    pub pairs: usize,
    /// mbw_mr: barrier after the warm-up windows, as osu_mbw_mr does (off by default:
    /// it trips an engine bug, "direct write into a receive that is not pending").
    pub mid_barrier: bool,
}

/// Sizes 0, 1, 2, 4, ... up to `max`, from `min` on.
pub fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = 0usize;
    while s <= max {
        if s >= min {
            v.push(s);
        }
        s = if s == 0 { 1 } else { s * 2 };
    }
    v
}

/// (timed iterations, warm-up iterations) of a ping-pong, as osu_latency.
pub fn lat_iters(size: usize, quick: bool) -> (usize, usize) {
    match (size > LARGE, quick) {
        (false, false) => (10_000, 100),
        (true, false) => (1_000, 10),
        (false, true) => (1_000, 10),
        (true, true) => (100, 2),
    }
}

/// (timed iterations, warm-up iterations) of a windowed bandwidth loop, as osu_bw.
pub fn bw_iters(size: usize, quick: bool) -> (usize, usize) {
    match (size > LARGE, quick) {
        (false, false) => (100, 10),
        (true, false) => (20, 2),
        (false, true) => (20, 2),
        (true, true) => (5, 1),
    }
}

/// Number of receives a pre-posted loop posts (each into its own buffer).
pub fn prepost_count(size: usize, quick: bool) -> usize {
    let (iters, _) = lat_iters(size, quick);
    let cap = PREPOST_BYTES.checked_div(size).unwrap_or(iters);
    iters.min(if quick { 500 } else { 2000 }).min(cap).max(8)
}

/// (timed iterations, warm-up iterations) of a collective, as OSU's collectives
/// (`COLL_LOOP_SMALL`/`COLL_SKIP_SMALL` up to 8 KiB, `_LARGE` above; quick: a tenth).
pub fn coll_iters(size: usize, quick: bool) -> (usize, usize) {
    match (size > LARGE, quick) {
        (false, false) => (1_000, 100),
        (true, false) => (100, 10),
        (false, true) => (100, 10),
        (true, true) => (10, 1),
    }
}

/// Message sizes of a collective: powers of two from 4 B (one float) to `max`
/// (barrier: the single size 0).
pub fn coll_sizes(bench: &str, min: usize, max: usize) -> Vec<usize> {
    if bench == "barrier" {
        vec![0]
    } else {
        sizes(min.max(4), max)
    }
}

/// Pins the calling process to one CPU (rank modulo the CPUs it may use), as
/// `mpirun --bind-to core` does; does nothing when there are more ranks than CPUs.
pub fn pin(rank: usize, nranks: usize) {
    let Ok(cpus) = launcher::own_cpus() else {
        return;
    };
    if cpus.is_empty() || nranks > cpus.len() {
        return;
    }
    let mut one = rustix::thread::CpuSet::new();
    one.set(cpus[rank % cpus.len()]);
    let _ = rustix::thread::sched_setaffinity(None, &one);
}

/// `n` receive buffers of `size` bytes carved out of `buf` (which holds `n * size`).
fn carve(buf: &mut [u8], size: usize, n: usize) -> Vec<&mut [u8]> {
    if size == 0 {
        (0..n).map(|_| <&mut [u8]>::default()).collect()
    } else {
        buf.chunks_mut(size).take(n).collect()
    }
}

struct Ctx<'a> {
    world: SimpleCommunicator,
    me: usize,
    n: usize,
    opts: &'a Opts,
    matching: String,
    protocol: String,
    /// The transports this rank uses (`Universe::transport`).
    transport: String,
    rows: Vec<Row>,
}

impl Ctx<'_> {
    fn row(
        &mut self,
        bench: &str,
        metric: &str,
        size: usize,
        value: f64,
        unit: &str,
        iters: usize,
    ) {
        self.rows.push(Row {
            benchmark: bench.into(),
            implementation: "rsmpi".into(),
            transport: self.transport.clone(),
            matching: self.matching.clone(),
            protocol: self.protocol.clone(),
            metric: metric.into(),
            size: size as u64,
            value,
            unit: unit.into(),
            iterations: iters as u64,
            ranks: self.n as u32,
        });
    }
    fn peer(&self) -> Process<'_> {
        self.world.process_at_rank(1 - self.me as i32)
    }
    fn need_two(&self, what: &str) -> bool {
        if self.n < 2 {
            eprintln!("rsmpi-bench: {what} needs at least 2 ranks");
            return false;
        }
        self.me < 2
    }
}

/// Runs benchmark `bench` on every rank; rank 0 gets the rows.
pub fn run(universe: &Universe, bench: &str, opts: &Opts) -> Vec<Row> {
    let world = universe.world();
    let (me, n) = (world.rank() as usize, world.size() as usize);
    pin(me, n);
    let mut c = Ctx {
        world,
        me,
        n,
        opts,
        matching: std::env::var("RSMPI_MATCHING").unwrap_or_else(|_| "both".into()),
        protocol: std::env::var("RSMPI_PROTOCOL").unwrap_or_else(|_| "eager".into()),
        transport: universe.transport(),
        rows: Vec::new(),
    };
    world.barrier();
    match bench {
        "latency" => latency(&mut c),
        "bw" => bw(&mut c, false),
        "bibw" => bw(&mut c, true),
        "pingpong-preposted" => preposted(&mut c),
        "table1-cell" => table1_cell(&mut c),
        "queue-depth" => queue_depth(&mut c),
        "mbw_mr" => mbw_mr(&mut c),
        "multi_lat" => multi_lat(&mut c),
        "overlap" => overlap(&mut c),
        b if crate::report::is_collective(b) => collective(&mut c, b),
        other => {
            eprintln!("rsmpi-bench: no in-job benchmark {other:?}");
            universe.abort(2);
        }
    }
    world.barrier();
    if me == 0 {
        eprintln!(
            "rsmpi-bench: {bench}: paths taken by rank 0's sends: {}",
            universe.stats()
        );
    }
    c.rows
}

/// Blocking ping-pong of `iters` round trips after `skip` warm-up ones; one-way µs.
fn pingpong(c: &Ctx, sbuf: &[u8], rbuf: &mut [u8], iters: usize, skip: usize, tag: i32) -> f64 {
    let peer = c.peer();
    let mut t0 = 0.0;
    for i in 0..iters + skip {
        if i == skip {
            t0 = rsmpi::time();
        }
        if c.me == 0 {
            peer.send_with_tag(sbuf, tag);
            peer.receive_into_with_tag(rbuf, tag);
        } else {
            peer.receive_into_with_tag(rbuf, tag);
            peer.send_with_tag(sbuf, tag);
        }
    }
    (rsmpi::time() - t0) * 1e6 / (2 * iters) as f64
}

fn latency(c: &mut Ctx) {
    for size in sizes(c.opts.min_size, c.opts.max_size) {
        let (iters, skip) = lat_iters(size, c.opts.quick);
        if c.need_two("latency") {
            let sbuf = PageBuf::new(b'a', size);
            let mut rbuf = PageBuf::new(0, size);
            let lat = pingpong(c, &sbuf, &mut rbuf, iters, skip, 1);
            assert!(rbuf.iter().all(|&b| b == b'a'), "payload corrupted");
            if c.me == 0 {
                c.row("latency", "", size, lat, "us", iters);
            }
        }
        c.world.barrier();
    }
}

/// One window of `bw`/`bibw` on a sender (`send`) and/or receiver (`recv`) side.
fn window(peer: Process, sbuf: &[u8], rbufs: &mut [u8], size: usize, send: bool, recv: bool) {
    request::scope(|sc| {
        let mut reqs = Vec::with_capacity(2 * WINDOW);
        if recv {
            for b in carve(rbufs, size, WINDOW) {
                reqs.push(Some(peer.immediate_receive_into_with_tag(sc, b, 100)));
            }
        }
        if send {
            for _ in 0..WINDOW {
                reqs.push(Some(peer.immediate_send_with_tag(sc, sbuf, 100)));
            }
        }
        // one `MPI_Waitall` for the window, as OSU's loops and `bench_ref.c`
        request::wait_all(&mut reqs);
    });
}

fn bw(c: &mut Ctx, bidir: bool) {
    let name = if bidir { "bibw" } else { "bw" };
    for size in sizes(c.opts.min_size, c.opts.max_size) {
        let (iters, skip) = bw_iters(size, c.opts.quick);
        if c.need_two(name) {
            let peer = c.peer();
            let sbuf = PageBuf::new(b'a', size);
            let mut rbufs = PageBuf::new(0, size * WINDOW);
            let mut ack = [0u8; 4];
            let mut t0 = 0.0;
            for i in 0..iters + skip {
                if i == skip {
                    t0 = rsmpi::time();
                }
                if bidir {
                    window(peer, &sbuf, &mut rbufs, size, true, true);
                } else if c.me == 0 {
                    window(peer, &sbuf, &mut rbufs, size, true, false);
                    peer.receive_into_with_tag(&mut ack[..], 101);
                } else {
                    window(peer, &sbuf, &mut rbufs, size, false, true);
                    peer.send_with_tag(&ack[..], 101);
                }
            }
            let t = rsmpi::time() - t0;
            let bytes = (size * WINDOW * iters) as f64 * if bidir { 2.0 } else { 1.0 };
            if c.me == 1 || bidir {
                assert!(rbufs.iter().all(|&b| b == b'a'), "payload corrupted");
            }
            if c.me == 0 {
                c.row(name, "", size, bytes / t / 1e6, "MB/s", iters * WINDOW);
            }
        }
        c.world.barrier();
    }
}

/// Pre-posts receives of `size` from the peer on `tag` and ping-pongs through them,
/// `n` round trips in all. The receives are posted in batches whose buffers take at
/// most `BATCH_BYTES` (all `n` at once for small messages), with a barrier after each
/// posting, outside the timing; so large messages land in cache-resident buffers as
/// in the plain loop. Returns (one-way µs, posting µs per receive).
fn preposted_loop(c: &Ctx, size: usize, n: usize, tag: i32) -> (f64, f64) {
    let peer = c.peer();
    let sbuf = PageBuf::new(b'p', size);
    let k = BATCH_BYTES
        .checked_div(size)
        .unwrap_or(n)
        .clamp(2, n.max(2));
    // written once so that every page is mapped before the timing (a direct write
    // into a never-touched page costs a page fault in the kernel)
    let mut bufs = PageBuf::new(0xff, size * k);
    let (mut t_loop, mut t_post, mut done) = (0.0, 0.0, 0);
    while done < n {
        let m = k.min(n - done);
        bufs.fill(0xff);
        request::scope(|sc| {
            // the requests' room made and touched before the clock, as `bench_ref.c`
            // allocates its array of requests once (`room`)
            let (slices, mut reqs) = (carve(&mut bufs, size, m), room(m));
            let t0 = Instant::now();
            for b in slices {
                reqs.push(peer.immediate_receive_into_with_tag(sc, b, tag));
            }
            t_post += t0.elapsed().as_secs_f64();
            c.world.barrier();
            let t1 = rsmpi::time();
            for r in reqs {
                if c.me == 0 {
                    peer.send_with_tag(&sbuf[..], tag);
                    r.wait();
                } else {
                    r.wait();
                    peer.send_with_tag(&sbuf[..], tag);
                }
            }
            t_loop += rsmpi::time() - t1;
        });
        assert!(
            bufs[..m * size].iter().all(|&b| b == b'p'),
            "payload corrupted"
        );
        done += m;
    }
    (t_loop * 1e6 / (2 * n) as f64, t_post * 1e6 / n as f64)
}

fn preposted(c: &mut Ctx) {
    for size in sizes(c.opts.min_size, c.opts.max_size) {
        if c.need_two("pingpong-preposted") {
            let (iters, skip) = lat_iters(size, c.opts.quick);
            let sbuf = PageBuf::new(b'a', size);
            let mut rbuf = PageBuf::new(0, size);
            let plain = pingpong(c, &sbuf, &mut rbuf, iters, skip, 1);
            let n = prepost_count(size, c.opts.quick);
            // warm-up: as many receives as the timed loop, so that the library's
            // tables have grown to hold them (as they have in a program's steady state)
            let _ = preposted_loop(c, size, n, 2);
            let (pre, post) = preposted_loop(c, size, n, 2);
            if c.me == 0 {
                let b = "pingpong-preposted";
                c.row(b, "plain", size, plain, "us", iters);
                c.row(b, "preposted", size, pre, "us", n);
                c.row(b, "post", size, post, "us", n);
                c.row(b, "preposted+post", size, pre + post, "us", n);
            }
        }
        c.world.barrier();
    }
}

fn table1_cell(c: &mut Ctx) {
    if c.need_two("table1") {
        let size = 4;
        let (iters, skip) = lat_iters(size, c.opts.quick);
        let sbuf = PageBuf::new(b'a', size);
        let mut rbuf = PageBuf::new(0, size);
        let plain = pingpong(c, &sbuf, &mut rbuf, iters, skip, 1);
        let n = prepost_count(size, c.opts.quick);
        let _ = preposted_loop(c, size, n, 2); // warm-up, as in `preposted`
        let (pre, post) = preposted_loop(c, size, n, 2);
        if c.me == 0 {
            c.row("table1", "plain", size, plain, "us", iters);
            c.row("table1", "preposted", size, pre, "us", n);
            c.row("table1", "post", size, post, "us", n);
        }
    }
}

/// An empty `Vec` with room for `n` elements whose memory is already touched (written
/// with zeros): what a C program's array of requests is by the time it posts into it,
/// so that a timed burst of posts measures the posting, not the page faults of the
/// benchmark's own storage. Made inside the timed part, a `Vec` of 4 096 requests
/// (384 KiB) took ~100 page faults in each burst after the first (~0.13 ms of
/// 0.38): the C library hands a freed block that size back to the kernel, here
/// even after warm-up bursts.
fn room<T>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    v.spare_capacity_mut()
        .fill_with(std::mem::MaybeUninit::zeroed);
    // the writes are the point: not to be elided as stores nothing reads
    std::hint::black_box(v.spare_capacity_mut());
    v
}

/// Posts a receive from `peer` into each 4-byte buffer of `bufs`, into `reqs`
/// (made by [`room`]).
fn post_each<'a, S: request::Scope<'a> + Copy>(
    peer: Process,
    sc: S,
    bufs: Vec<&'a mut [u8]>,
    reqs: &mut Vec<request::Request<'a, [u8], S>>,
) {
    for (i, b) in bufs.into_iter().enumerate() {
        reqs.push(peer.immediate_receive_into_with_tag(sc, b, 10_000 + i as i32));
    }
}

/// Posts `depth` receives that never match (distinct tags, into `idle`), then
/// cancels them; the posting time in µs. The first burst of a process also grows the
/// library's tables and faults in their memory; `queue_depth` reports it apart.
fn post_burst(c: &Ctx, idle: &mut [u8], depth: usize) -> f64 {
    let peer = c.peer();
    request::scope(|sc| {
        let (bufs, mut reqs) = (carve(idle, 4, depth), room(depth));
        let t0 = Instant::now();
        post_each(peer, sc, bufs, &mut reqs);
        let post = t0.elapsed().as_secs_f64() * 1e6;
        for r in &reqs {
            r.cancel();
        }
        for r in reqs {
            assert!(r.wait().is_cancelled(), "a non-matching receive matched");
        }
        post
    })
}

fn queue_depth(c: &mut Ctx) {
    for depth in [0usize, 16, 256, 4096] {
        if c.need_two("queue-depth") {
            let peer = c.peer();
            let (iters, skip) = lat_iters(4, c.opts.quick);
            let mut idle = vec![0u8; 4 * depth];
            let sbuf = [b'q'; 4];
            let mut rbuf = [0u8; 4];
            let first = post_burst(c, &mut idle, depth);
            let (lat, post) = request::scope(|sc| {
                let (bufs, mut reqs) = (carve(&mut idle, 4, depth), room(depth));
                let t0 = Instant::now();
                post_each(peer, sc, bufs, &mut reqs);
                let post = t0.elapsed().as_secs_f64() * 1e6;
                c.world.barrier();
                let lat = pingpong(c, &sbuf, &mut rbuf, iters, skip, 1);
                for r in &reqs {
                    r.cancel();
                }
                for r in reqs {
                    assert!(r.wait().is_cancelled(), "a non-matching receive matched");
                }
                (lat, post)
            });
            if c.me == 0 {
                c.row("queue-depth", "latency", depth, lat, "us", iters);
                c.row("queue-depth", "post total", depth, post, "us", depth);
                c.row("queue-depth", "first post total", depth, first, "us", depth);
            }
        }
        c.world.barrier();
    }
}

/// Senders are ranks 0..pairs, each paired with rank + pairs.
fn pair_of<'c>(c: &'c Ctx) -> Option<(bool, Process<'c>)> {
    let p = c.opts.pairs.max(1).min(c.n / 2);
    if c.me < p {
        Some((true, c.world.process_at_rank((c.me + p) as i32)))
    } else if c.me < 2 * p {
        Some((false, c.world.process_at_rank((c.me - p) as i32)))
    } else {
        None
    }
}

fn mbw_mr(c: &mut Ctx) {
    let pairs = c.opts.pairs.max(1).min(c.n / 2);
    for size in sizes(c.opts.min_size, c.opts.max_size) {
        let (iters, skip) = bw_iters(size, c.opts.quick);
        let sbuf = PageBuf::new(b'm', size);
        let mut rbufs = PageBuf::new(0, size * WINDOW);
        let mut ack = [0u8; 4];
        let mut t0 = 0.0;
        let pair = pair_of(c);
        c.world.barrier();
        for i in 0..iters + skip {
            if i == skip {
                if c.opts.mid_barrier {
                    // where osu_mbw_mr puts it; see the crate docs (`--mid-barrier`)
                    c.world.barrier();
                }
                t0 = rsmpi::time();
            }
            match pair {
                Some((true, peer)) => {
                    window(peer, &sbuf, &mut rbufs, size, true, false);
                    peer.receive_into_with_tag(&mut ack[..], 101);
                }
                Some((false, peer)) => {
                    window(peer, &sbuf, &mut rbufs, size, false, true);
                    peer.send_with_tag(&ack[..], 101);
                }
                None => {}
            }
        }
        c.world.barrier();
        let t = rsmpi::time() - t0;
        if c.me == 0 {
            let msgs = (pairs * iters * WINDOW) as f64;
            c.row(
                "mbw_mr",
                &format!("{pairs} pair(s)"),
                size,
                msgs * size as f64 / t / 1e6,
                "MB/s",
                iters * WINDOW,
            );
            c.row(
                "mbw_mr",
                &format!("{pairs} pair(s)"),
                size,
                msgs / t,
                "msg/s",
                iters * WINDOW,
            );
        }
    }
}

fn multi_lat(c: &mut Ctx) {
    let pairs = c.opts.pairs.max(1).min(c.n / 2);
    for size in sizes(c.opts.min_size, c.opts.max_size) {
        let (iters, skip) = lat_iters(size, c.opts.quick);
        let sbuf = PageBuf::new(b'a', size);
        let mut rbuf = PageBuf::new(0, size);
        c.world.barrier();
        let mut lat = 0.0;
        if let Some((sender, peer)) = pair_of(c) {
            let mut t0 = 0.0;
            for i in 0..iters + skip {
                if i == skip {
                    t0 = rsmpi::time();
                }
                if sender {
                    peer.send_with_tag(&sbuf[..], 1);
                    peer.receive_into_with_tag(&mut rbuf[..], 1);
                } else {
                    peer.receive_into_with_tag(&mut rbuf[..], 1);
                    peer.send_with_tag(&sbuf[..], 1);
                }
            }
            lat = (rsmpi::time() - t0) * 1e6 / (2 * iters) as f64;
        }
        // average over the senders, gathered at rank 0
        if c.me == 0 {
            let mut sum = lat;
            for r in 1..pairs {
                sum += c
                    .world
                    .process_at_rank(r as i32)
                    .receive_with_tag::<f64>(7)
                    .0;
            }
            c.row(
                "multi_lat",
                &format!("{pairs} pair(s)"),
                size,
                sum / pairs as f64,
                "us",
                iters,
            );
        } else if c.me < pairs {
            c.world.process_at_rank(0).send_with_tag(&lat, 7);
        }
        c.world.barrier();
    }
}

/// Busy work the compiler cannot remove: `units` dependent multiply-adds.
fn work(units: u64) -> u64 {
    let mut x = black_box(1u64);
    for i in 0..units {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    black_box(x)
}

/// Seconds per work unit on this CPU.
fn calibrate() -> f64 {
    let _ = work(100_000);
    let n = 4_000_000;
    let t = Instant::now();
    work(n);
    t.elapsed().as_secs_f64() / n as f64
}

/// One timed iteration of an overlap pattern: the measuring rank's seconds from the
/// start of the operation to its completion, with `units` of work in between.
/// `recv_side`: rank 1 receives and measures; otherwise rank 0 sends and measures.
fn overlap_once(
    c: &Ctx,
    size: usize,
    sbuf: &[u8],
    rbuf: &mut [u8],
    recv_side: bool,
    prepost: bool,
    units: u64,
) -> f64 {
    let peer = c.peer();
    let token = [0u8; 1];
    let mut tok = [0u8; 1];
    const TOK: i32 = 50;
    const DATA: i32 = 51;
    let _ = size;
    match (recv_side, c.me) {
        (true, 1) => {
            if prepost {
                request::scope(|sc| {
                    let r = peer.immediate_receive_into_with_tag(sc, rbuf, DATA);
                    peer.send_with_tag(&token[..], TOK);
                    let t0 = Instant::now();
                    work(units);
                    r.wait();
                    t0.elapsed().as_secs_f64()
                })
            } else {
                peer.send_with_tag(&token[..], TOK);
                peer.probe_with_tag(DATA);
                request::scope(|sc| {
                    let t0 = Instant::now();
                    let r = peer.immediate_receive_into_with_tag(sc, rbuf, DATA);
                    work(units);
                    r.wait();
                    t0.elapsed().as_secs_f64()
                })
            }
        }
        (true, 0) => {
            peer.receive_into_with_tag(&mut tok[..], TOK);
            peer.send_with_tag(sbuf, DATA);
            0.0
        }
        (false, 0) => {
            peer.receive_into_with_tag(&mut tok[..], TOK);
            request::scope(|sc| {
                let t0 = Instant::now();
                let s = peer.immediate_send_with_tag(sc, sbuf, DATA);
                work(units);
                s.wait();
                t0.elapsed().as_secs_f64()
            })
        }
        (false, 1) => {
            if prepost {
                request::scope(|sc| {
                    let r = peer.immediate_receive_into_with_tag(sc, rbuf, DATA);
                    peer.send_with_tag(&token[..], TOK);
                    r.wait();
                });
            } else {
                peer.send_with_tag(&token[..], TOK);
                peer.probe_with_tag(DATA);
                peer.receive_into_with_tag(rbuf, DATA);
            }
            0.0
        }
        _ => 0.0,
    }
}

fn overlap(c: &mut Ctx) {
    let per_unit = calibrate();
    let min = c.opts.min_size.max(1024);
    let iters = if c.opts.quick { 10 } else { 40 };
    for size in sizes(min, c.opts.max_size) {
        if c.need_two("overlap") {
            let sbuf = PageBuf::new(b'o', size);
            let mut rbuf = PageBuf::new(0, size);
            for (recv_side, prepost, metric) in [
                (true, true, "recv avail preposted"),
                (true, false, "recv avail"),
                (false, true, "send avail preposted"),
                (false, false, "send avail"),
            ] {
                let measurer = if recv_side { 1 } else { 0 };
                let avg = |c: &Ctx, rbuf: &mut [u8], units: u64| -> f64 {
                    let _ = overlap_once(c, size, &sbuf, rbuf, recv_side, prepost, units);
                    let mut t = 0.0;
                    for _ in 0..iters {
                        t += overlap_once(c, size, &sbuf, rbuf, recv_side, prepost, units);
                    }
                    t / iters as f64
                };
                let base = avg(c, &mut rbuf, 0);
                // work of about twice the bare transfer time, so that all of it could overlap
                let mut units = [0u64];
                if c.me == measurer {
                    units[0] = ((2.0 * base / per_unit) as u64).max(1000);
                }
                // the other rank must run the same number of iterations only; share units anyway
                let peer = c.peer();
                if c.me == measurer {
                    peer.send_with_tag(&units[..], 52);
                } else {
                    peer.receive_into_with_tag(&mut units[..], 52);
                }
                let t = Instant::now();
                for _ in 0..iters {
                    work(units[0]);
                }
                let work_t = t.elapsed().as_secs_f64() / iters as f64;
                let total = avg(c, &mut rbuf, units[0]);
                let overhead = (total - work_t).max(0.0);
                let avail = (1.0 - overhead / base).clamp(0.0, 1.0) * 100.0;
                // both ranks know the measurer's numbers only on the measurer: send to rank 0
                let mut vals = [avail, base * 1e6];
                if measurer == 1 {
                    if c.me == 1 {
                        peer.send_with_tag(&vals[..], 53);
                    } else {
                        peer.receive_into_with_tag(&mut vals[..], 53);
                    }
                }
                if c.me == 0 {
                    c.row("overlap", metric, size, vals[0], "%", iters);
                    c.row(
                        "overlap",
                        &format!("{} time", metric.replace(" avail", "")),
                        size,
                        vals[1],
                        "us",
                        iters,
                    );
                }
            }
        }
        c.world.barrier();
    }
}

/// One OSU collective benchmark (osu_allreduce, osu_bcast, osu_reduce, osu_allgather,
/// osu_alltoall, osu_barrier) on every rank of the job: for each size, `skip` warm-up
/// calls and `iters` timed ones, each preceded by an untimed barrier (as OMB 7) and
/// timed on its own; each rank's latency is its mean time per call, and rank 0 reports
/// the average (metric ""), minimum and maximum over the ranks. Reductions are float
/// sums (`size / 4` elements); bcast and reduce are rooted at rank 0; for allgather
/// and alltoall `size` is the block each rank contributes to each rank.
fn collective(c: &mut Ctx, bench: &str) {
    use rsmpi::collective::SystemOperation;
    let n = c.n;
    for size in coll_sizes(bench, c.opts.min_size, c.opts.max_size) {
        let root = c.world.process_at_rank(0);
        let (iters, skip) = coll_iters(size, c.opts.quick);
        let floats = size / 4;
        let fsend = vec![1.0f32; floats];
        let mut frecv = vec![0.0f32; floats];
        let bytes = match bench {
            "allgather" => size,
            "alltoall" => size * n,
            _ => size,
        };
        let bsend = PageBuf::new(b'c', bytes);
        let mut brecv = PageBuf::new(0, size * n);
        if bench == "bcast" && c.me == 0 {
            brecv.fill(b'c');
        }
        let mut timer = 0.0;
        c.world.barrier();
        for i in 0..iters + skip {
            c.world.barrier();
            let t0 = rsmpi::time();
            match bench {
                "allreduce" => {
                    c.world
                        .all_reduce_into(&fsend[..], &mut frecv[..], SystemOperation::sum())
                }
                "reduce" => {
                    if c.me == 0 {
                        root.reduce_into_root(&fsend[..], &mut frecv[..], SystemOperation::sum());
                    } else {
                        root.reduce_into(&fsend[..], SystemOperation::sum());
                    }
                }
                "bcast" => root.broadcast_into(&mut brecv[..size]),
                "allgather" => c.world.all_gather_into(&bsend[..], &mut brecv[..]),
                "alltoall" => c.world.all_to_all_into(&bsend[..], &mut brecv[..]),
                "barrier" => c.world.barrier(),
                _ => unreachable!(),
            }
            let t1 = rsmpi::time();
            if i >= skip {
                timer += t1 - t0;
            }
        }
        // the results are right (checked once, after the timing)
        match bench {
            "allreduce" => assert!(frecv.iter().all(|&x| x == n as f32), "allreduce: wrong sum"),
            "reduce" if c.me == 0 => {
                assert!(frecv.iter().all(|&x| x == n as f32), "reduce: wrong sum")
            }
            "bcast" => assert!(
                brecv[..size].iter().all(|&b| b == b'c'),
                "bcast: payload corrupted"
            ),
            "allgather" | "alltoall" => {
                assert!(
                    brecv.iter().all(|&b| b == b'c'),
                    "{bench}: payload corrupted"
                )
            }
            _ => {}
        }
        let lat = timer * 1e6 / iters as f64;
        let mut all = vec![0.0f64; n];
        if c.me == 0 {
            root.gather_into_root(&lat, &mut all[..]);
            let avg = all.iter().sum::<f64>() / n as f64;
            let min = all.iter().copied().fold(f64::INFINITY, f64::min);
            let max = all.iter().copied().fold(0.0, f64::max);
            c.row(bench, "", size, avg, "us", iters);
            c.row(bench, "min", size, min, "us", iters);
            c.row(bench, "max", size, max, "us", iters);
        } else {
            root.gather_into(&lat);
        }
        c.world.barrier();
    }
}

/// A message buffer on a page boundary, as the OSU micro-benchmarks allocate theirs
/// (`posix_memalign` to the page size; `bench_ref.c`'s `msg_alloc` likewise), so that
/// two buffers' relative page offset is 0 in every process and every MPI, not what
/// the allocator made of it: on AMD Zen 3 a destination 1-31 bytes past the source
/// modulo 4 KiB makes every single-copy transfer several times slower
/// (`docs/performance.md`, "4 KiB aliasing").
struct PageBuf {
    mem: Vec<u8>,
    at: usize,
    len: usize,
}

impl PageBuf {
    /// `len` bytes of `fill`, starting on a page boundary.
    fn new(fill: u8, len: usize) -> PageBuf {
        let mem = vec![fill; len + 4096];
        let at = (4096 - mem.as_ptr() as usize % 4096) % 4096;
        PageBuf { mem, at, len }
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.mem[self.at..self.at + self.len]
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.at..self.at + self.len]
    }
}

//! What one idle poll costs: rank 0 posts a receive from rank 1 and tests it `N` times
//! while rank 1 sleeps (`idlepoll N`, default 100000), then prints the time per test.
//! Each test is one visit of the progress engine that finds nothing: the transport's
//! poll for incoming messages (and, on the network transports, for finished
//! one-sided operations). A waiting rank repeats it until its message comes, so its
//! cost is how late a message is seen, on average half of it. Under callgrind
//! (`--toggle-collect='*idlepoll*tests*'`, the difference of two `N`) it counts the
//! instructions per idle poll. Rank 1 sleeps without polling, then sends.
use rsmpi::request;
use rsmpi::traits::*;

/// The measured loop: `n` tests of a receive that does not complete. Returns the
/// request, or `None` if it completed.
#[inline(never)]
fn tests<'a, S: request::Scope<'a>>(
    mut r: request::Request<'a, [u8], S>,
    n: usize,
) -> Option<request::Request<'a, [u8], S>> {
    for _ in 0..n {
        r = r.test().err()?;
    }
    Some(r)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let universe = rsmpi::initialize().expect("init");
    let world = universe.world();
    assert_eq!(world.size(), 2, "idlepoll needs two ranks");
    let peer = world.process_at_rank(1 - world.rank());
    let mut buf = [0u8; 8];
    if world.rank() == 0 {
        // both ranks set up; rank 1 sleeps until rank 0's second message
        peer.send_with_tag(&buf[..], 0);
        let dt = request::scope(|sc| {
            let r = peer.immediate_receive_into_with_tag(sc, &mut buf[..], 1);
            let t = rsmpi::time();
            let r = tests(r, n).expect("the message came while testing: raise the sleep");
            let dt = rsmpi::time() - t;
            r.wait();
            dt
        });
        println!("{:.1} ns per idle test ({n} tests)", dt / n as f64 * 1e9);
    } else {
        peer.receive_into_with_tag(&mut buf[..], 0);
        // long enough for rank 0's tests under valgrind in the emulated guest
        let nap = std::time::Duration::from_micros(n as u64 * 200 + 2_000_000);
        std::thread::sleep(nap);
        peer.send_with_tag(&buf[..], 1);
    }
}

//! Closing at the end of a job (`Transport::close`, what `MPI_Finalize` calls after its
//! last barrier): every rank sends each peer a few messages that the test does not
//! read, then closes; the last rank closes two seconds later than the others. Each close returns
//! only once every peer's goodbye is in, so the early ranks wait for the late one; it
//! hands nothing up, then or after; a second close does nothing; and after a fence
//! every rank lets the transport go and exits cleanly.
#![cfg(feature = "libfabric")]

mod common;

use std::time::{Duration, Instant};

use common::{open, polling_barrier, send_blocking, Rng, SHM, TCP, VERBS};
use transport::{Exchange, Rank, Transport};
use transport_shm::testing::{run_ranks, RankEnv};

/// Messages to each peer, none of them read: few enough that the receivers' buffers
/// hold them all (a sender never waits for a reader that will not come).
const MSGS: u32 = 16;
/// Messages to each peer over `verbs;ofi_rxm`: more than half of the 128 receive
/// buffers rxm gave a connection without a shared receive context (the verbs flow
/// control then sent credits), and few enough for the 512 shared ones rsmpi sets up.
const VERBS_MSGS: u32 = 100;
/// How much later than the others the last rank closes.
const LATE: Duration = Duration::from_secs(2);

fn close_with_traffic(env: RankEnv, provider: &str, msgs: u32) {
    let mut t = open(&env, provider);
    let (me, n) = (env.rank, env.size);
    // a rank that leaves the barrier first may send before the others have left it:
    // what they read meanwhile is read, the rest is not
    polling_barrier(&mut t, &env, "start", &mut |_, _| {});
    let mut rng = Rng::new(u64::from(me) + 7);
    let mut payload = vec![0u8; 2048];
    for i in 0..msgs {
        for p in (0..n).filter(|&p| p != me) {
            let len = rng.below(payload.len() as u64 + 1) as usize;
            rng.fill(&mut payload[..len]);
            send_blocking(&mut t, p as Rank, &i.to_le_bytes(), &payload[..len]);
        }
    }
    let late = me == n - 1;
    if late {
        std::thread::sleep(LATE);
    }
    let started = Instant::now();
    t.close()
        .unwrap_or_else(|e| panic!("rank {me} ({provider}): close: {e}"));
    let waited = started.elapsed();
    if !late {
        // the late rank's goodbye came after its sleep (half of it: the ranks do not
        // start their sleep and their close at the same instant)
        assert!(
            waited >= LATE / 2,
            "rank {me} ({provider}): close returned after {waited:?}, before the late rank's goodbye"
        );
    }
    let mut handed_up = 0;
    t.poll(64, &mut |_, _| handed_up += 1).unwrap();
    assert_eq!(handed_up, 0, "rank {me}: messages handed up after close");
    let again = Instant::now();
    t.close().unwrap();
    assert!(
        again.elapsed() < Duration::from_millis(100),
        "rank {me}: a second close waited again"
    );
    env.exchange().fence().unwrap();
    drop(t);
    eprintln!("rank {me} ({provider}): closed after {waited:?}");
}

#[test]
fn close_waits_for_every_peer_tcp() {
    run_ranks(
        "close_waits_for_every_peer_tcp",
        3,
        Duration::from_secs(60),
        |env| close_with_traffic(env, TCP, MSGS),
    );
}

#[test]
fn close_waits_for_every_peer_shm() {
    run_ranks(
        "close_waits_for_every_peer_shm",
        3,
        Duration::from_secs(60),
        |env| close_with_traffic(env, SHM, MSGS),
    );
}

/// Over `verbs;ofi_rxm`, in the SoftRoCE guest (`RSMPI_VERBS_TEST=1`,
/// `ci/guest-ofi-verbs.sh`); elsewhere there is no RDMA device, and the test checks
/// that there is none.
#[test]
fn close_waits_for_every_peer_verbs() {
    if !common::with_device() {
        return;
    }
    run_ranks(
        "close_waits_for_every_peer_verbs",
        3,
        Duration::from_secs(120),
        |env| close_with_traffic(env, VERBS, VERBS_MSGS),
    );
}

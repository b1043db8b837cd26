//! Helpers shared by the multi-process tests (each test binary includes this module).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use transport::{Rank, Transport};
use transport_ofi::{OfiConfig, OfiTransport};
use transport_shm::testing::RankEnv;

/// The providers the tests run over: TCP through the RDM utility provider (what runs
/// between hosts) and shared memory.
pub const TCP: &str = "tcp;ofi_rxm";
pub const SHM: &str = "shm";
/// RDMA through the RDM utility provider: only in the SoftRoCE guest
/// ([`with_device`]).
pub const VERBS: &str = "verbs;ofi_rxm";

/// Whether this run has an RDMA device (`RSMPI_VERBS_TEST=1`, set in the SoftRoCE
/// guest). Without it there must be none, or the variable was forgotten.
pub fn with_device() -> bool {
    if std::env::var("RSMPI_VERBS_TEST").is_ok_and(|v| v == "1") {
        return true;
    }
    let present = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    assert!(
        !present,
        "an RDMA device is present: run the verbs cases with RSMPI_VERBS_TEST=1"
    );
    false
}

pub fn open(env: &RankEnv, provider: &str) -> OfiTransport {
    let cfg = OfiConfig {
        provider: Some(provider.to_string()),
        prefer_external: false,
    };
    let t = OfiTransport::new(&mut env.exchange(), &cfg)
        .unwrap_or_else(|e| panic!("rank {}: OfiTransport::new({provider}): {e}", env.rank));
    assert_eq!(t.provider_name(), provider);
    t
}

/// A barrier that keeps polling (manual progress: a rank blocked in a plain fence would
/// stop moving its own queued sends and its peers' one-sided accesses). Every rank
/// creates `{dir}/pf.{tag}.{rank}`, then polls until all ranks' markers exist. Messages
/// that arrive meanwhile go to `on_msg`.
pub fn polling_barrier(
    t: &mut OfiTransport,
    env: &RankEnv,
    tag: &str,
    on_msg: &mut dyn FnMut(Rank, &[u8]),
) {
    std::fs::write(env.dir.join(format!("pf.{tag}.{}", env.rank)), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut r = 0;
    while r < env.size {
        t.poll(64, on_msg).unwrap();
        if env.dir.join(format!("pf.{tag}.{r}")).exists() {
            r += 1;
            continue;
        }
        assert!(
            Instant::now() < deadline,
            "rank {}: barrier {tag}: rank {r} did not arrive",
            env.rank
        );
        std::thread::yield_now();
    }
}

/// Polls until one message arrives and returns it; panics after 20 s.
pub fn recv_one(t: &mut OfiTransport, what: &str) -> (Rank, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = None;
    while got.is_none() {
        t.poll(1, &mut |from, m| got = Some((from, m.to_vec())))
            .unwrap();
        assert!(
            Instant::now() < deadline,
            "rank {}: no {what} within 20 s",
            t.rank()
        );
    }
    got.unwrap()
}

/// Sends one message, polling (and discarding nothing: there must be none) while Full.
pub fn send_blocking(t: &mut OfiTransport, peer: Rank, header: &[u8], payload: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match t.try_send(peer, header, payload) {
            Ok(()) => return,
            Err(transport::TransportError::Full(_)) => {
                t.poll(0, &mut |_, _| {}).unwrap();
                assert!(Instant::now() < deadline, "send to {peer} stayed Full");
            }
            Err(e) => panic!("try_send to {peer}: {e}"),
        }
    }
}

#[allow(unused_imports)] // not every test binary uses both
pub use transport_shm::testing::{checksum, Rng};

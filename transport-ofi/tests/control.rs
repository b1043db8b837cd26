//! Control channel over real processes: every rank streams 2000 messages of random
//! sizes (0 ..= MAX_CTRL - 16 bytes of payload after a 16-byte test header) to every
//! rank, itself included, while polling; receivers check per-source order, length,
//! checksum and count.
#![cfg(feature = "libfabric")]

mod common;

use std::time::{Duration, Instant};

use common::{checksum, open, polling_barrier, Rng, SHM, TCP};
use transport::{Rank, Transport, TransportError};
use transport_ofi::MAX_CTRL;
use transport_shm::testing::{run_ranks, RankEnv};

const MSGS: u32 = 2000;
const HDR: usize = 16;

/// A message size: a quarter tiny (fits fi_inject), a quarter below 4 KiB (eager), the
/// rest anything up to the maximum (segmented and rendezvous paths of ofi_rxm).
fn size(rng: &mut Rng) -> usize {
    let max = (MAX_CTRL - HDR) as u64;
    (match rng.below(4) {
        0 => rng.below(49),
        1 => rng.below(4096),
        _ => rng.below(max + 1),
    }) as usize
}

fn all_to_all(env: RankEnv, provider: &str) {
    let started = Instant::now();
    let mut t = open(&env, provider);
    assert_eq!(t.caps().max_ctrl, MAX_CTRL);
    let n = env.size as usize;
    let me = env.rank;
    let mut rng = Rng::new(u64::from(me) + 1);
    let mut next_send = vec![0u32; n];
    let mut expect = vec![0u32; n];
    let mut received = 0usize;
    let total = n * MSGS as usize;
    let mut fulls = 0u64;
    let mut payload = vec![0u8; MAX_CTRL];
    let check = |from: Rank, m: &[u8], expect: &mut Vec<u32>, received: &mut usize| {
        assert!(m.len() >= HDR, "short message {} from {from}", m.len());
        let seq = u32::from_le_bytes(m[0..4].try_into().unwrap());
        let len = u32::from_le_bytes(m[4..8].try_into().unwrap()) as usize;
        let sum = u64::from_le_bytes(m[8..16].try_into().unwrap());
        let e = &mut expect[from as usize];
        assert_eq!(seq, *e, "rank {me}: message from {from} out of order");
        assert_eq!(
            m.len() - HDR,
            len,
            "rank {me}: message {seq} from {from}: length"
        );
        assert_eq!(
            checksum(&m[HDR..]),
            sum,
            "rank {me}: message {seq} from {from}: checksum"
        );
        *e += 1;
        *received += 1;
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    while received < total || next_send.iter().any(|&s| s < MSGS) {
        #[allow(clippy::needless_range_loop)]
        for p in 0..n {
            if next_send[p] >= MSGS {
                continue;
            }
            let len = size(&mut rng);
            rng.fill(&mut payload[..len]);
            let mut h = Vec::with_capacity(HDR);
            h.extend_from_slice(&next_send[p].to_le_bytes());
            h.extend_from_slice(&(len as u32).to_le_bytes());
            h.extend_from_slice(&checksum(&payload[..len]).to_le_bytes());
            match t.try_send(p as Rank, &h, &payload[..len]) {
                Ok(()) => next_send[p] += 1,
                Err(TransportError::Full(q)) => {
                    // nothing was sent: this sequence number goes out next time (with
                    // other contents, which is fine)
                    assert_eq!(q as usize, p);
                    fulls += 1;
                    break;
                }
                Err(e) => panic!("rank {me}: try_send to {p}: {e}"),
            }
            t.poll(8, &mut |from, m| check(from, m, &mut expect, &mut received))
                .unwrap();
        }
        t.poll(64, &mut |from, m| {
            check(from, m, &mut expect, &mut received)
        })
        .unwrap();
        assert!(
            Instant::now() < deadline,
            "rank {me}: stuck: sent {next_send:?}, received {expect:?}"
        );
    }
    assert_eq!(expect, vec![MSGS; n]);
    polling_barrier(&mut t, &env, "end", &mut |from, _| {
        panic!("rank {me}: unexpected message from {from} after the stream")
    });
    eprintln!(
        "rank {me} ({provider}): {total} messages in and out in {:?}, {fulls} times Full",
        started.elapsed()
    );
}

#[test]
fn all_to_all_3_ranks_tcp() {
    run_ranks(
        "all_to_all_3_ranks_tcp",
        3,
        Duration::from_secs(60),
        |env| all_to_all(env, TCP),
    );
}

#[test]
fn all_to_all_3_ranks_shm() {
    run_ranks(
        "all_to_all_3_ranks_shm",
        3,
        Duration::from_secs(60),
        |env| all_to_all(env, SHM),
    );
}

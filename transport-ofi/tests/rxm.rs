//! rsmpi runs libfabric's rxm with a shared receive context unless the user chose
//! (`FI_OFI_RXM_USE_SRX`): libfabric 1.17's rxm over verbs crashes at `fi_close`
//! without one now and then (`fabric::rxm_shared_receives`, docs/transports.md).
#![cfg(feature = "libfabric")]

mod common;

use std::time::Duration;

use common::{open, polling_barrier, TCP};
use transport_shm::testing::run_ranks;

#[test]
fn rxm_runs_with_a_shared_receive_context() {
    run_ranks(
        "rxm_runs_with_a_shared_receive_context",
        2,
        Duration::from_secs(60),
        |env| {
            let var = |v: &str| std::env::var(v).ok();
            let before = (var("FI_OFI_RXM_USE_SRX"), var("FI_OFI_RXM_MSG_RX_SIZE"));
            let mut t = open(&env, TCP);
            let after = (var("FI_OFI_RXM_USE_SRX"), var("FI_OFI_RXM_MSG_RX_SIZE"));
            match before {
                // over tcp the size stays rxm's (or the user's)
                (None, size) => assert_eq!(after, (Some("1".into()), size)),
                // the user's choice stands
                (Some(_), _) => assert_eq!(after, before),
            }
            polling_barrier(&mut t, &env, "done", &mut |_, _| {});
        },
    );
}

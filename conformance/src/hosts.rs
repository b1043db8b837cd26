//! Placing the suite's jobs on hosts: network namespaces of this machine
//! ([`launcher::netns::Hosts`]) named by `CONFORMANCE_HOSTS`.

pub use launcher::netns::Hosts;

use std::net::IpAddr;

/// The hosts a job case is placed on when `CONFORMANCE_HOSTS` (namespace names,
/// comma-separated) and `CONFORMANCE_KVS_ADDR` are set: how the suite runs across
/// hosts.
pub fn from_env() -> Option<(Vec<launcher::Host>, IpAddr)> {
    let list = std::env::var("CONFORMANCE_HOSTS").ok()?;
    let addr = std::env::var("CONFORMANCE_KVS_ADDR").ok()?.parse().ok()?;
    Some((launcher::Host::parse_list(&list).ok()?, addr))
}

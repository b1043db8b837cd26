//! Choosing a transport for every peer at start-up: shared memory for the ranks of
//! this node, the network transport for the others.
//!
//! * `RSMPI_TRANSPORT=auto` (the default): shared memory when the whole job is on one
//!   node; otherwise shared memory to this node's ranks and the network (`RSMPI_NET`) to
//!   the rest, through one [`transport::route::Routed`] transport.
//! * `RSMPI_TRANSPORT=shm`: shared memory only (an error if the job spans nodes).
//! * `RSMPI_TRANSPORT=ofi` (or `net`): the network transport to every peer, this
//!   rank's own node and itself included — how to test the network path on one node.
//! * `RSMPI_NET=ofi` (the default; `verbs` is not built yet) names the network transport.
//!
//! A node is what `/proc/sys/kernel/hostname` and the network namespace
//! (`/proc/self/ns/net`) name together, so that ranks placed in different network
//! namespaces of one machine count as different hosts; `RSMPI_NODE` overrides it.
//! `RSMPI_DEBUG=1` prints the choice, one line per rank.

use launcher::Boot;
use transport::route::Routed;
use transport::{Exchange, Rank, Transport};

use crate::{Error, Result};

/// Key under which each rank publishes its node's name.
const KEY_NODE: &str = "node";

const VERBS: &str = "the verbs transport is not part of rsmpi yet: use RSMPI_NET=ofi \
                     with FI_PROVIDER=\"verbs;ofi_rxm\" for InfiniBand or RoCE";

/// What the ranks are told to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Auto,
    Shm,
    Net,
}

/// The network transports rsmpi knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Net {
    Ofi,
    Verbs,
}

fn choice(boot: &Boot) -> Result<Choice> {
    match boot.transport() {
        "" | "auto" => Ok(Choice::Auto),
        "shm" => Ok(Choice::Shm),
        "ofi" | "net" => Ok(Choice::Net),
        "verbs" => Err(Error::Transport(VERBS.into())),
        other => Err(Error::Transport(format!(
            "RSMPI_TRANSPORT={other:?}: expected auto, shm, ofi or verbs"
        ))),
    }
}

fn net() -> Result<Net> {
    match std::env::var("RSMPI_NET").as_deref() {
        Err(_) | Ok("") | Ok("ofi") => Ok(Net::Ofi),
        Ok("verbs") => Ok(Net::Verbs),
        Ok(other) => Err(Error::Transport(format!(
            "RSMPI_NET={other:?}: expected ofi or verbs"
        ))),
    }
}

/// This node's name: hostname and network namespace, or `RSMPI_NODE`.
pub(crate) fn node_name() -> String {
    if let Ok(n) = std::env::var("RSMPI_NODE") {
        return n;
    }
    let host = crate::environment::processor_name().unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{host}/{ns}")
}

/// Which ranks share this rank's node (this rank included, ascending). Collective.
fn local_ranks(boot: &mut Boot) -> Result<Vec<Rank>> {
    let (me, size) = (boot.rank(), boot.size());
    if size == 1 {
        return Ok(vec![0]);
    }
    let ex = |e: transport::TransportError| Error::Transport(format!("start-up exchange: {e}"));
    let mine = node_name();
    boot.publish(KEY_NODE, mine.as_bytes()).map_err(ex)?;
    boot.fence().map_err(ex)?;
    let mut local = Vec::new();
    for r in 0..size {
        if r == me || boot.lookup(r, KEY_NODE).map_err(ex)? == mine.as_bytes() {
            local.push(r);
        }
    }
    Ok(local)
}

/// `0-3,6,8-9`: a short form of an ascending rank list for log and error lines.
pub(crate) fn ranges(ranks: &[Rank]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn shm(boot: &mut Boot, local: &[Rank]) -> Result<Box<dyn Transport>> {
    let t = transport_shm::ShmTransport::with_local(boot, local)
        .map_err(|e| Error::Transport(format!("shared memory: {e}")))?;
    Ok(Box::new(t))
}

/// The network transport to every rank; returns it and its name for log lines.
fn network(boot: &mut Boot, external: bool) -> Result<(Box<dyn Transport>, String)> {
    match net()? {
        Net::Verbs => Err(Error::Transport(VERBS.into())),
        #[cfg(not(feature = "ofi"))]
        Net::Ofi => {
            let _ = (boot, external);
            Err(Error::Transport(
                "the ranks span nodes, and this build of rsmpi has no network transport: \
                 rebuild it with the `ofi` feature (needs libfabric-dev)"
                    .into(),
            ))
        }
        #[cfg(feature = "ofi")]
        Net::Ofi => {
            let mut cfg = transport_ofi::OfiConfig::from_env();
            cfg.prefer_external = cfg.prefer_external || external;
            match transport_ofi::OfiTransport::new(boot, &cfg) {
                Ok(t) => {
                    let name = format!("ofi ({})", t.provider_name());
                    Ok((Box::new(t), name))
                }
                Err(transport::TransportError::Unsupported(what)) => {
                    Err(Error::Transport(format!(
                        "the network transport is not in this build ({what}): rebuild rsmpi with \
                     the `ofi` feature (needs libfabric-dev)"
                    )))
                }
                Err(e) => Err(Error::Transport(format!("libfabric: {e}"))),
            }
        }
    }
}

/// Opens the transports this rank uses, as the environment asks. Collective over the
/// job: every rank makes the same decisions from the same exchanged node names.
pub(crate) fn open(boot: &mut Boot) -> Result<Box<dyn Transport>> {
    let choice = choice(boot)?;
    let (me, size) = (boot.rank(), boot.size());
    let debug = std::env::var("RSMPI_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0");
    let all: Vec<Rank> = (0..size).collect();
    let (t, line): (Box<dyn Transport>, String) = match choice {
        Choice::Net => {
            let (t, name) = network(boot, false)?;
            (t, format!("{name} to ranks {}", ranges(&all)))
        }
        Choice::Shm | Choice::Auto => {
            let local = local_ranks(boot)?;
            // route[r]: 0 = shared memory (this node), 1 = the network
            let route: Vec<u8> = {
                let mut r = vec![1u8; size as usize];
                for &l in &local {
                    r[l as usize] = 0;
                }
                r
            };
            let far: Vec<Rank> = all
                .iter()
                .copied()
                .filter(|&r| route[r as usize] == 1)
                .collect();
            if local.len() == size as usize {
                (shm(boot, &all)?, format!("shm to ranks {}", ranges(&all)))
            } else if choice == Choice::Shm {
                return Err(Error::Transport(format!(
                    "RSMPI_TRANSPORT=shm, but ranks {} are on other nodes than rank {me}",
                    ranges(&far)
                )));
            } else {
                let near = shm(boot, &local)?;
                let (far_t, name) = network(boot, true)?;
                let line = format!(
                    "shm to ranks {}, {name} to ranks {}",
                    ranges(&local),
                    ranges(&far)
                );
                let t = Routed::new(vec![near, far_t], route)
                    .map_err(|e| Error::Transport(e.to_string()))?;
                (Box::new(t), line)
            }
        }
    };
    if debug {
        // one write, so that the lines of several ranks do not interleave
        use std::io::Write as _;
        let _ = std::io::stderr()
            .write_all(format!("rsmpi: rank {me}: transport: {line}\n").as_bytes());
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranges() {
        assert_eq!(super::ranges(&[]), "");
        assert_eq!(super::ranges(&[3]), "3");
        assert_eq!(super::ranges(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }
}

//! Choosing a transport for every peer at start-up: shared memory for the ranks of
//! this node, the network transport for the others.
//!
//! * `RSMPI_TRANSPORT=auto` (the default): shared memory when the whole job is on one
//!   node; otherwise shared memory to this node's ranks and the network (`RSMPI_NET`) to
//!   the rest, through one [`transport::route::Routed`] transport.
//! * `RSMPI_TRANSPORT=shm`: shared memory only (an error if the job spans nodes).
//! * `RSMPI_TRANSPORT=verbs` or `ofi` (or `net`, which takes `RSMPI_NET`): that network
//!   transport to every peer, this rank's own node and itself included — how to run the
//!   network path on one node (2–4 ranks on one SoftRoCE device). When verbs cannot
//!   run here (no libibverbs, no device) and the job is on one node, the ranks use
//!   shared memory and rank 0 says so in one line.
//! * `RSMPI_NET=verbs|ofi` names the network transport for peers on other nodes. Unset:
//!   verbs where this build has it and a device is there, else libfabric (rank 0 says
//!   why verbs was passed over).
//!
//! A node is what `/proc/sys/kernel/hostname` and the network namespace
//! (`/proc/self/ns/net`) name together, so that ranks placed in different network
//! namespaces of one machine count as different hosts; `RSMPI_NODE` overrides it.
//! `RSMPI_DEBUG=1` prints the choice, one line per rank.

use launcher::Boot;
use transport::route::Routed;
use transport::{Exchange, Rank, Transport};

use crate::link::Link;
use crate::{Error, Result};

/// Key under which each rank publishes its node's name.
const KEY_NODE: &str = "node";

/// What the ranks are told to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Auto,
    Shm,
    /// A network transport to every rank: the one named, or `RSMPI_NET`'s.
    Net(Option<Net>),
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
        "net" => Ok(Choice::Net(None)),
        "ofi" => Ok(Choice::Net(Some(Net::Ofi))),
        "verbs" => Ok(Choice::Net(Some(Net::Verbs))),
        other => Err(Error::Transport(format!(
            "RSMPI_TRANSPORT={other:?}: expected auto, shm, verbs, ofi or net"
        ))),
    }
}

/// `RSMPI_NET`; `None` when unset (verbs if it can run, else libfabric).
fn net() -> Result<Option<Net>> {
    match std::env::var("RSMPI_NET").as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("ofi") => Ok(Some(Net::Ofi)),
        Ok("verbs") => Ok(Some(Net::Verbs)),
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

fn shm(boot: &mut Boot, local: &[Rank]) -> Result<Link> {
    let t = transport_shm::ShmTransport::with_local(boot, local)
        .map_err(|e| Error::Transport(format!("shared memory: {e}")))?;
    Ok(Link::Shm(Box::new(t)))
}

/// Why the network transport did not open: it cannot run here (the caller may fall
/// back), or it failed.
enum NetError {
    Unavailable(String),
    Failed(Error),
}

impl From<Error> for NetError {
    fn from(e: Error) -> Self {
        NetError::Failed(e)
    }
}

impl NetError {
    fn into_error(self) -> Error {
        match self {
            NetError::Unavailable(why) => Error::Transport(why),
            NetError::Failed(e) => e,
        }
    }
}

/// Rank 0 tells the user, in one line, what could not be used and what is used instead.
fn say(boot: &Boot, line: &str) {
    if boot.rank() == 0 {
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(format!("rsmpi: {line}\n").as_bytes());
    }
}

fn verbs(boot: &mut Boot) -> std::result::Result<(Box<dyn Transport>, String), NetError> {
    #[cfg(not(feature = "verbs"))]
    {
        let _ = boot;
        Err(NetError::Unavailable(
            "this build of rsmpi has no verbs transport: rebuild it with the `verbs` feature \
             (needs libibverbs-dev)"
                .into(),
        ))
    }
    #[cfg(feature = "verbs")]
    {
        let cfg = transport_verbs::VerbsConfig::from_env();
        match transport_verbs::VerbsTransport::new(boot, &cfg) {
            Ok(t) => {
                let name = format!("verbs ({})", t.device_name());
                Ok((Box::new(t), name))
            }
            Err(transport::TransportError::Unavailable(why)) => {
                Err(NetError::Unavailable(format!("verbs cannot run: {why}")))
            }
            Err(e) => Err(NetError::Failed(Error::Transport(format!("verbs: {e}")))),
        }
    }
}

fn ofi(
    boot: &mut Boot,
    external: bool,
) -> std::result::Result<(Box<dyn Transport>, String), NetError> {
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (boot, external);
        Err(NetError::Unavailable(
            "this build of rsmpi has no libfabric transport: rebuild it with the `ofi` \
             feature (needs libfabric-dev)"
                .into(),
        ))
    }
    #[cfg(feature = "ofi")]
    {
        let mut cfg = transport_ofi::OfiConfig::from_env();
        cfg.prefer_external = cfg.prefer_external || external;
        match transport_ofi::OfiTransport::new(boot, &cfg) {
            Ok(t) => {
                let name = format!("ofi ({})", t.provider_name());
                Ok((Box::new(t), name))
            }
            Err(e) => Err(NetError::Failed(Error::Transport(format!(
                "libfabric: {e}"
            )))),
        }
    }
}

/// The network transport to every rank (`which`, else `RSMPI_NET`, else verbs where it
/// can run and libfabric otherwise); returns it and its name for log lines.
fn network(
    boot: &mut Boot,
    external: bool,
    which: Option<Net>,
) -> std::result::Result<(Box<dyn Transport>, String), NetError> {
    match which.or(net()?) {
        Some(Net::Verbs) => verbs(boot),
        Some(Net::Ofi) => ofi(boot, external),
        None => match verbs(boot) {
            Ok(t) => Ok(t),
            Err(NetError::Unavailable(why)) => {
                let t = ofi(boot, external).map_err(|e| match e {
                    NetError::Unavailable(no_ofi) => NetError::Unavailable(format!(
                        "the ranks span nodes and no network transport can run: {why}; {no_ofi}"
                    )),
                    failed => failed,
                })?;
                if cfg!(feature = "verbs") {
                    say(boot, &format!("{why}; using libfabric"));
                }
                Ok(t)
            }
            Err(e) => Err(e),
        },
    }
}

/// Opens the transports this rank uses, as the environment asks. Collective over the
/// job: every rank makes the same decisions from the same exchanged node names.
/// Returns the transport and its short name (`shm`, `verbs`, `ofi`, `shm+verbs`, …).
pub(crate) fn open(boot: &mut Boot) -> Result<(Link, String)> {
    let choice = choice(boot)?;
    let (me, size) = (boot.rank(), boot.size());
    let debug = std::env::var("RSMPI_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0");
    let all: Vec<Rank> = (0..size).collect();
    let (t, line): (Link, String) = match choice {
        Choice::Net(which) => match network(boot, false, which) {
            Ok((t, name)) => (Link::Any(t), format!("{name} to ranks {}", ranges(&all))),
            // verbs asked for where it cannot run: shared memory, if the job allows
            Err(NetError::Unavailable(why)) => {
                let local = local_ranks(boot)?;
                if local.len() != size as usize {
                    return Err(Error::Transport(why));
                }
                say(boot, &format!("{why}; using shared memory"));
                (shm(boot, &all)?, format!("shm to ranks {}", ranges(&all)))
            }
            Err(e) => return Err(e.into_error()),
        },
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
                let (far_t, name) = network(boot, true, None).map_err(NetError::into_error)?;
                let line = format!(
                    "shm to ranks {}, {name} to ranks {}",
                    ranges(&local),
                    ranges(&far)
                );
                let t = Routed::new(vec![near.into_dyn(), far_t], route)
                    .map_err(|e| Error::Transport(e.to_string()))?;
                (Link::Any(Box::new(t)), line)
            }
        }
    };
    if debug {
        // one write, so that the lines of several ranks do not interleave
        use std::io::Write as _;
        let _ = std::io::stderr()
            .write_all(format!("rsmpi: rank {me}: transport: {line}\n").as_bytes());
    }
    Ok((t, kind(&line)))
}

/// `shm+verbs` from `shm to ranks 0-1, verbs (rxe0 port 1 (RoCE, GID index 1)) to
/// ranks 2-3`: the first word of each part (parts are separated by ", " outside
/// parentheses).
fn kind(line: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&line[start..]);
    let mut names: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.trim_start().split([' ', '(']).next())
        .filter(|n| !n.is_empty())
        .collect();
    names.dedup();
    names.join("+")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranges() {
        assert_eq!(super::ranges(&[]), "");
        assert_eq!(super::ranges(&[3]), "3");
        assert_eq!(super::ranges(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }

    #[test]
    fn kind() {
        assert_eq!(super::kind("shm to ranks 0-3"), "shm");
        assert_eq!(
            super::kind("shm to ranks 0-1, verbs (rxe0 port 1 (RoCE, GID index 1)) to ranks 2-3"),
            "shm+verbs"
        );
        assert_eq!(super::kind("ofi (tcp;ofi_rxm) to ranks 0-1"), "ofi");
    }
}

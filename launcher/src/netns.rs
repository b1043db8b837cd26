//! Hosts on one machine: network namespaces joined by veth pairs to a bridge, so that a
//! job placed on them by `rsmpirun --hosts` talks shared memory inside a namespace and
//! the network between namespaces, as on a cluster.
//!
//! ```no_run
//! let net = launcher::netns::Hosts::create(3).expect("needs root and iproute2");
//! let mut job = launcher::Job::new(6, "target/release/ring", Vec::<String>::new());
//! net.place(&mut job); // 2 ranks per namespace, start-up over TCP
//! launcher::run(&job).unwrap();
//! // dropping `net` deletes the namespaces and the bridge
//! ```
//!
//! The addresses are `10.213.X.0/24` with X from this process's id (the bridge, in
//! the initial namespace, is `.1`, host i is `.10 + i`), created here and removed on
//! drop; nothing else on the machine is touched.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

/// Network namespaces standing in for hosts; removed when dropped.
pub struct Hosts {
    id: u32,
    names: Vec<String>,
    bridge: String,
    subnet: u8,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Hosts {
    /// Creates `n` namespaces `rsmpi-{pid}-{i}` with an `eth0` each, bridged to the
    /// initial namespace. Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and `ip`.
    pub fn create(n: usize) -> Result<Hosts, String> {
        let id = std::process::id();
        let mut h = Hosts {
            id,
            names: Vec::new(),
            bridge: format!("rsb{}", id % 100_000_000),
            subnet: (id % 250) as u8 + 1,
        };
        ip(&["link", "add", &h.bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("10.213.{}.1/24", h.subnet),
            "dev",
            &h.bridge,
        ])?;
        ip(&["link", "set", &h.bridge, "up"])?;
        for i in 0..n {
            let ns = format!("rsmpi-{id}-{i}");
            ip(&["netns", "add", &ns])?;
            h.names.push(ns.clone());
            let veth = h.veth(i);
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &veth, "master", &h.bridge, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("10.213.{}.{}/24", h.subnet, 10 + i),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(h)
    }

    /// The bridge-side end of host `i`'s veth pair.
    fn veth(&self, i: usize) -> String {
        format!("rsv{}h{i}", self.id % 1_000_000)
    }

    /// The namespaces' names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The launcher's address, as the namespaces reach it.
    pub fn kvs_addr(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 213, self.subnet, 1))
    }

    /// The hosts' subnet, `10.213.X.0/24`.
    pub fn subnet(&self) -> String {
        format!("10.213.{}.0/24", self.subnet)
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 213, self.subnet, 10 + i as u8))
    }

    /// The `--hosts` list (`a,b,c`).
    pub fn list(&self) -> String {
        self.names.join(",")
    }

    /// Places `job`'s ranks on these hosts in equal blocks.
    pub fn place(&self, job: &mut crate::Job) {
        job.hosts = self
            .names
            .iter()
            .map(|n| crate::Host {
                netns: n.clone(),
                slots: None,
            })
            .collect();
        job.kvs_addr = Some(self.kvs_addr());
    }

    /// Cuts host `i` off the network (its veth goes down).
    pub fn cut(&self, i: usize) -> Result<(), String> {
        ip(&["link", "set", &self.veth(i), "down"])
    }

    /// The pids of every process in host `i`'s namespace.
    pub fn pids(&self, i: usize) -> Vec<i32> {
        Command::new("ip")
            .args(["netns", "pids", &self.names[i]])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for (i, ns) in self.names.iter().enumerate() {
            let _ = ip(&["link", "del", &self.veth(i)]);
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// A stand-in for `ssh [options] host command…` that runs the command in the network
/// namespace named as the host: what other launchers (MPICH's Hydra with
/// `-bootstrap-exec`, Open MPI's `mpirun` with `--mca plm_rsh_agent`) use to start
/// their daemons on [`Hosts`]. With `NETNS_SSH_OWN_TMPDIR=1` in its environment each
/// host gets a `TMPDIR` of its own next to the script, as a real host has its own
/// `/tmp`: Open MPI's daemons, started at once with one hostname, otherwise create
/// the same session directory under `/tmp`, and one of them now and then fails with
/// "File exists" (a CI run of `rsmpi-bench latency --across-hosts --compare`).
/// Without it every host shares this machine's `/tmp`, which some tests rely on.
const SSH_AGENT: &str = "#!/bin/sh\n\
# ssh stand-in: the host is a network namespace of this machine\n\
while [ \"${1#-}\" != \"$1\" ]; do shift; done\n\
h=$1; shift\n\
if [ -n \"${NETNS_SSH_OWN_TMPDIR:-}\" ]; then\n\
    TMPDIR=\"$(dirname \"$0\")/tmp.$h\"; mkdir -p \"$TMPDIR\"; export TMPDIR\n\
fi\n\
exec ip netns exec \"$h\" sh -c \"$*\"\n";

/// Writes the `ssh` stand-in as `dir/netns-ssh` (mode 0755) and returns its path.
pub fn write_ssh_agent(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    let p = dir.join("netns-ssh");
    std::fs::write(&p, SSH_AGENT)?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    Ok(p)
}

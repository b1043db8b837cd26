//! The hardware floor on RDMA (`--transport verbs --compare`): perftest's
//! `ib_write_lat`, `ib_send_lat` and `ib_write_bw` on the same device, at the same
//! sizes, as reference columns. Debian's Open MPI and MPICH do not run over SoftRoCE
//! (docs/performance.md says why), so on verbs these are the references.
//!
//! Each figure is one perftest run: the server in the background, the client to
//! 127.0.0.1 (the exchange of queue-pair numbers goes over TCP; the traffic over the
//! device, with the RoCE v2 GID that carries an IPv4 address). Latency is perftest's
//! average one-way time (`t_avg`, half a round trip, as OSU's and rsmpi-bench's are);
//! bandwidth its average, converted from MiB/s to MB/s.

use crate::report::Row;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

/// Benchmarks with perftest columns.
pub const COMPARABLE: [&str; 3] = ["latency", "bw", "pingpong-preposted"];

static PORT: AtomicU16 = AtomicU16::new(18600);

/// The first RDMA device and its RoCE v2 IPv4 GID index (InfiniBand: none).
fn device() -> Result<(String, Option<u32>), String> {
    let dev = std::fs::read_dir("/sys/class/infiniband")
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .ok_or("no RDMA device in /sys/class/infiniband")?;
    let port = format!("/sys/class/infiniband/{dev}/ports/1");
    let gid = (0..16).find(|i| {
        let t = std::fs::read_to_string(format!("{port}/gid_attrs/types/{i}")).unwrap_or_default();
        let g = std::fs::read_to_string(format!("{port}/gids/{i}")).unwrap_or_default();
        t.starts_with("RoCE v2") && g.starts_with("0000:0000:0000:0000:0000:ffff:")
    });
    Ok((dev, gid))
}

/// Runs `tool` with `args` as server and client; returns the client's output.
fn run(tool: &str, args: &[String]) -> Result<String, String> {
    let (dev, gid) = device()?;
    let port = PORT.fetch_add(1, Ordering::Relaxed).to_string();
    let mut common: Vec<String> = vec!["-d".into(), dev, "-p".into(), port, "-F".into()];
    if let Some(g) = gid {
        common.extend(["-x".into(), g.to_string()]);
    }
    common.extend(args.iter().cloned());
    // one CPU each, as rsmpi-bench pins its two ranks: two busy-polling processes on
    // one CPU take turns at the scheduler's tick (4 ms per round trip here)
    let mut server = Command::new("taskset")
        .args(["-c", "0", tool])
        .args(&common)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{tool}: {e} (install perftest)"))?;
    let mut out = None;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let o = Command::new("taskset")
            .args(["-c", "1", tool])
            .args(&common)
            .arg("127.0.0.1")
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("{tool}: {e}"))?;
        if o.status.success() {
            out = Some(String::from_utf8_lossy(&o.stdout).into_owned());
            break;
        }
        if server.try_wait().ok().flatten().is_some() {
            return Err(format!(
                "{tool} {}: the server ended; client: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    out.ok_or_else(|| format!("{tool} {}: the client never connected", args.join(" ")))
}

/// The figure in column `col` of the result line for `size` bytes.
fn figure(out: &str, size: usize, col: usize) -> Option<f64> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > col && f[0] == size.to_string())
        .and_then(|f| f[col].parse().ok())
}

fn row(bench: &str, imp: &str, metric: &str, size: usize, value: f64, unit: &str, n: usize) -> Row {
    Row {
        benchmark: bench.into(),
        implementation: imp.into(),
        transport: "verbs".into(),
        matching: "-".into(),
        protocol: "-".into(),
        metric: metric.into(),
        size: size as u64,
        value,
        unit: unit.into(),
        iterations: n as u64,
        ranks: 2,
    }
}

/// perftest's rows for `bench` at the sizes rsmpi-bench measures (perftest starts at
/// 1 byte for latency and 2 for bandwidth; smaller sizes get none).
pub fn rows(bench: &str, quick: bool, sizes: &[usize]) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for &size in sizes {
        match bench {
            "latency" | "pingpong-preposted" => {
                if size == 0 {
                    continue;
                }
                let n = if quick || size > 65536 { 200 } else { 1000 };
                for (tool, metric) in [("ib_write_lat", "preposted"), ("ib_send_lat", "plain")] {
                    let args = vec!["-s".into(), size.to_string(), "-n".into(), n.to_string()];
                    let out = run(tool, &args)?;
                    let v = figure(&out, size, 5)
                        .ok_or_else(|| format!("{tool} -s {size}: no result line in:\n{out}"))?;
                    // on the pre-posted table, one write per message is the floor of the
                    // pre-posted column and a send the floor of the plain one
                    let (imp, metric) = if bench == "latency" {
                        (tool, "")
                    } else {
                        (tool, metric)
                    };
                    rows.push(row(bench, imp, metric, size, v, "us", n));
                }
            }
            "bw" => {
                if size < 2 {
                    continue;
                }
                let n = if quick || size > 65536 { 200 } else { 1000 };
                let args = vec!["-s".into(), size.to_string(), "-n".into(), n.to_string()];
                let out = run("ib_write_bw", &args)?;
                let mib = figure(&out, size, 3)
                    .ok_or_else(|| format!("ib_write_bw -s {size}: no result line in:\n{out}"))?;
                rows.push(row(
                    bench,
                    "ib_write_bw",
                    "",
                    size,
                    mib * 1.048_576,
                    "MB/s",
                    n,
                ));
            }
            _ => {}
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    #[test]
    fn result_lines() {
        let lat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n 8       1000          13.60          52.30        14.30               15.02          2.57\n";
        assert_eq!(super::figure(lat, 8, 5), Some(15.02));
        assert_eq!(super::figure(lat, 16, 5), None);
        let bw = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536      200              22.51              22.40                  0.000358\n";
        assert_eq!(super::figure(bw, 65536, 3), Some(22.40));
    }
}

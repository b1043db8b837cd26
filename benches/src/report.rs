//! Result rows, OSU-style text tables, JSON output and the ratio columns.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;

/// One measured figure.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// `latency`, `bw`, `bibw`, `pingpong-preposted`, `table1`, ...
    pub benchmark: String,
    /// `rsmpi`, `openmpi-vader`, `openmpi-ucx`, `mpich`, `hardware`.
    pub implementation: String,
    /// `shm` for every MPI run here.
    pub transport: String,
    /// rsmpi's `RSMPI_MATCHING` (`both`, `receiver`); `-` for the references.
    pub matching: String,
    /// rsmpi's `RSMPI_PROTOCOL` (`eager`, `get`, `sync`); `-` for the references.
    pub protocol: String,
    /// What the value is, when a benchmark reports several (`plain`, `preposted`, ...).
    pub metric: String,
    /// Message size in bytes (for `queue-depth`: the number of posted receives).
    pub size: u64,
    pub value: f64,
    /// `us`, `MB/s`, `msg/s`, `%`, `GB/s`, `x`.
    pub unit: String,
    /// Timed iterations behind the value.
    pub iterations: u64,
    /// Ranks in the job (2 for the point-to-point benchmarks; 2, 3, 4... for the
    /// collectives, whose tables are per rank count).
    #[serde(default = "two")]
    pub ranks: u32,
}

fn two() -> u32 {
    2
}

/// The collective benchmarks (OSU's osu_allreduce, osu_bcast, ...).
pub const COLLECTIVES: [&str; 6] = [
    "allreduce",
    "bcast",
    "reduce",
    "allgather",
    "alltoall",
    "barrier",
];

/// Whether `b` is one of [`COLLECTIVES`].
pub fn is_collective(b: &str) -> bool {
    COLLECTIVES.contains(&b)
}

/// Whether a larger value is better for this unit.
pub fn higher_is_better(unit: &str) -> bool {
    matches!(unit, "MB/s" | "GB/s" | "msg/s" | "%")
}

/// Rows of many runs of the same thing, reduced to the median per
/// (benchmark, implementation, matching, protocol, metric, size).
pub fn median_of_runs(rows: Vec<Row>) -> Vec<Row> {
    let mut groups: Vec<(Row, Vec<f64>)> = Vec::new();
    for r in rows {
        match groups.iter_mut().find(|(g, _)| same_cell(g, &r)) {
            Some((_, v)) => v.push(r.value),
            None => {
                let v = vec![r.value];
                groups.push((r, v));
            }
        }
    }
    groups
        .into_iter()
        .map(|(mut r, mut v)| {
            v.sort_by(|a, b| a.total_cmp(b));
            let n = v.len();
            r.value = if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            };
            r
        })
        .collect()
}

fn same_cell(a: &Row, b: &Row) -> bool {
    a.benchmark == b.benchmark
        && a.implementation == b.implementation
        && a.matching == b.matching
        && a.protocol == b.protocol
        && a.metric == b.metric
        && a.unit == b.unit
        && a.size == b.size
        && a.ranks == b.ranks
}

/// The column a row belongs to in its benchmark's table.
fn column(r: &Row) -> String {
    let mut parts = vec![r.implementation.clone()];
    if r.benchmark == "queue-depth" && r.matching != "-" {
        parts.push(r.matching.clone());
    }
    if !r.metric.is_empty() {
        parts.push(r.metric.clone());
    }
    format!("{} ({})", parts.join(" "), r.unit)
}

/// Prints one OSU-style table per benchmark present in `rows` (in first-seen order).
/// Where a metric has both an rsmpi column and reference columns, a column
/// `rsmpi/best` follows: rsmpi divided by the best reference (lowest time, highest
/// bandwidth).
pub fn print_tables(rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    // one table per benchmark, and per rank count for the collectives
    let key = |r: &Row| {
        let n = if is_collective(&r.benchmark) {
            r.ranks
        } else {
            0
        };
        (r.benchmark.clone(), n)
    };
    let mut benches: Vec<(String, u32)> = Vec::new();
    for r in rows {
        if !benches.contains(&key(r)) {
            benches.push(key(r));
        }
    }
    for (b, n) in benches {
        let b = b.as_str();
        let rs: Vec<&Row> = rows
            .iter()
            .filter(|r| key(r) == (b.to_string(), n))
            // the tables show the average over ranks; min and max are in --json
            .filter(|r| n == 0 || r.metric.is_empty())
            .collect();
        if n > 0 {
            print_by_size(&format!("{b} ({n} ranks)"), &rs, out)?;
        } else if b == "table1" {
            print_table1(&rs, out)?;
        } else if b == "limits" {
            print_limits(&rs, out)?;
        } else {
            print_by_size(b, &rs, out)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn title(b: &str) -> &'static str {
    match b.split(' ').next().unwrap_or(b) {
        "allreduce" => "osu_allreduce: float sum, average over ranks of each rank's mean time per call",
        "bcast" => "osu_bcast: root 0, average over ranks of each rank's mean time per call",
        "reduce" => "osu_reduce: float sum to root 0, average over ranks of each rank's mean time per call",
        "allgather" => "osu_allgather: size = bytes per rank, average over ranks of each rank's mean time per call",
        "alltoall" => "osu_alltoall: size = bytes per rank pair, average over ranks of each rank's mean time per call",
        "barrier" => "osu_barrier: average over ranks of each rank's mean time per call",
        "latency" => "Latency Test: blocking ping-pong, one-way time",
        "bw" => "Bandwidth Test: window of 64 non-blocking sends, one ack per window",
        "bibw" => "Bi-Directional Bandwidth Test: window of 64 each way",
        "pingpong-preposted" => {
            "Pre-posted Ping-Pong (MPI-EMX Fig. 9) next to the plain one (Fig. 8), one-way time"
        }
        "queue-depth" => {
            "Queue Depth: 4-byte ping-pong with N non-matching receives posted (size column = N); post total: posting the N (the second burst of N; the requests' memory made before the clock, as a C array), first post total: the first burst, which also grows the tables"
        }
        "mbw_mr" => "Multiple Bandwidth / Message Rate Test",
        "multi_lat" => "Multi-pair Latency Test, one-way time averaged over pairs",
        "overlap" => "Overlap (Sandia SMB post-work-wait): CPU availability while a message moves",
        _ => "",
    }
}

fn print_by_size(b: &str, rs: &[&Row], out: &mut impl Write) -> std::io::Result<()> {
    let mut cols: Vec<String> = Vec::new();
    for r in rs {
        let c = column(r);
        if !cols.contains(&c) {
            cols.push(c);
        }
    }
    // ratio columns: for every rsmpi column whose metric also has reference columns
    // (the derived metrics `post` and `preposted+post` get none; mbw_mr's is its
    // message rate; queue-depth's, one per matching mode); (rsmpi column, metric,
    // unit, higher better, label). The best reference is looked for in the same
    // metric *and unit*: mbw_mr's MB/s and msg/s rows share a metric, and from 1 MiB
    // a reference's MB/s outnumbers its msg/s
    let mut ratios: Vec<(String, String, String, bool, String)> = Vec::new();
    for r in rs.iter().filter(|r| {
        r.implementation == "rsmpi"
            && (matches!(r.metric.as_str(), "" | "plain" | "preposted")
                || r.unit == "msg/s"
                || r.benchmark == "queue-depth")
    }) {
        let has_ref = rs
            .iter()
            .any(|x| x.implementation != "rsmpi" && x.metric == r.metric && x.unit == r.unit);
        let c = column(r);
        if has_ref && !ratios.iter().any(|(rc, ..)| *rc == c) {
            let unit = r.unit.clone();
            let hb = higher_is_better(&r.unit);
            let label = match (r.benchmark == "queue-depth", r.metric.is_empty()) {
                (true, _) => format!("rsmpi/best {} {}", r.matching, r.metric),
                (false, true) => "rsmpi/best".to_string(),
                (false, false) => format!("rsmpi/best {}", r.metric),
            };
            let label = match hb {
                true => format!("{label} (>1 better)"),
                false => format!("{label} (<1 better)"),
            };
            ratios.push((c, r.metric.clone(), unit, hb, label));
        }
    }
    let mut table: BTreeMap<u64, BTreeMap<String, f64>> = BTreeMap::new();
    for r in rs {
        table.entry(r.size).or_default().insert(column(r), r.value);
    }
    writeln!(out, "# rsmpi-bench {b}: {}", title(b))?;
    // the transport rsmpi's ranks used (Universe::transport), so that a figure is
    // never read as another transport's
    let mut over: Vec<&str> = Vec::new();
    for r in rs.iter().filter(|r| r.implementation == "rsmpi") {
        if !over.contains(&r.transport.as_str()) {
            over.push(&r.transport);
        }
    }
    if !over.is_empty() {
        writeln!(out, "# rsmpi over {}", over.join(", "))?;
    }
    let w = |c: &str| c.len().max(12);
    let size_label = if b == "queue-depth" { "# N" } else { "# Size" };
    write!(out, "{size_label:<10}")?;
    for c in &cols {
        write!(out, " {:>w$}", c, w = w(c))?;
    }
    for (.., label) in &ratios {
        write!(out, " {label:>12}")?;
    }
    writeln!(out)?;
    for (size, vals) in &table {
        write!(out, "{size:<10}")?;
        for c in &cols {
            match vals.get(c) {
                Some(v) => write!(out, " {:>w$}", fmt_val(*v), w = w(c))?,
                None => write!(out, " {:>w$}", "-", w = w(c))?,
            }
        }
        for (rc, m, unit, hb, label) in &ratios {
            let label_w = label.len().max(12);
            let best = rs
                .iter()
                .filter(|x| {
                    x.size == *size
                        && x.implementation != "rsmpi"
                        && x.metric == *m
                        && x.unit == *unit
                })
                .map(|x| x.value)
                .fold(None, |acc: Option<f64>, v| {
                    Some(acc.map_or(v, |a| if *hb { a.max(v) } else { a.min(v) }))
                });
            match (vals.get(rc), best) {
                (Some(v), Some(bv)) if bv > 0.0 => write!(out, " {:>label_w$.2}", v / bv)?,
                _ => write!(out, " {:>label_w$}", "-")?,
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

fn fmt_val(v: f64) -> String {
    if v >= 1e6 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn print_table1(rs: &[&Row], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "# rsmpi-bench table1: MPI-EMX Table 1 on rsmpi, one-way 4-byte latency (us), over {}",
        rs.first().map_or("-", |r| r.transport.as_str())
    )?;
    writeln!(
        out,
        "{:<10} {:<9} {:>10} {:>12} {:>16}",
        "# matching", "protocol", "plain", "pre-posted", "post cost/recv"
    )?;
    let mut cells: Vec<(String, String)> = Vec::new();
    for r in rs {
        let k = (r.matching.clone(), r.protocol.clone());
        if !cells.contains(&k) {
            cells.push(k);
        }
    }
    for (m, p) in cells {
        let get = |metric: &str| {
            rs.iter()
                .find(|r| r.matching == m && r.protocol == p && r.metric == metric)
                .map_or("-".to_string(), |r| format!("{:.3}", r.value))
        };
        writeln!(
            out,
            "{m:<10} {p:<9} {:>10} {:>12} {:>16}",
            get("plain"),
            get("preposted"),
            get("post")
        )?;
    }
    Ok(())
}

fn print_limits(rs: &[&Row], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "# rsmpi-bench limits: this machine's physical limits, and rsmpi as ratios of them"
    )?;
    for r in rs {
        let what = match r.metric.as_str() {
            "cacheline-oneway" => "two-process cache-line ping-pong, one-way".to_string(),
            "memcpy" => format!("memcpy {} bandwidth", human(r.size)),
            "cma-read" => format!("process_vm_readv {} (one call)", human(r.size)),
            "memcpy-aliased" => format!("memcpy {} bandwidth, 4 KiB-aliased", human(r.size)),
            "copy-aliased" => format!("rsmpi's copy {} bandwidth, 4 KiB-aliased", human(r.size)),
            "cma-read-aliased" => {
                format!(
                    "process_vm_readv {} (one call), 4 KiB-aliased",
                    human(r.size)
                )
            }
            "rsmpi-latency-ratio" => {
                format!("rsmpi {} latency / cache-line one-way", human(r.size))
            }
            "rsmpi-bw-ratio" => format!("rsmpi bw {} / memcpy {}", human(r.size), human(r.size)),
            "rsmpi-bibw-ratio" => {
                format!("rsmpi bibw {} / memcpy {}", human(r.size), human(r.size))
            }
            m => m.to_string(),
        };
        writeln!(out, "{what:<52} {:>10.3} {}", r.value, r.unit)?;
    }
    Ok(())
}

/// `4096` → `4 KiB`.
pub fn human(b: u64) -> String {
    if b >= 1 << 20 && b.trailing_zeros() >= 20 {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 && b.trailing_zeros() >= 10 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// Writes every row as one JSON array.
pub fn write_json(path: &std::path::Path, rows: &[Row]) -> std::io::Result<()> {
    let s = serde_json::to_string_pretty(rows).map_err(std::io::Error::other)?;
    std::fs::write(path, s + "\n")
}

/// Reads the JSON-lines file a job's rank 0 wrote.
pub fn read_lines(path: &std::path::Path) -> std::io::Result<Vec<Row>> {
    let s = std::fs::read_to_string(path)?;
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}

/// A `latency` row of implementation `imp` for tests.
#[cfg(test)]
pub(crate) fn test_row(imp: &str, size: u64, value: f64, unit: &str) -> Row {
    Row {
        benchmark: "latency".into(),
        implementation: imp.into(),
        transport: "shm".into(),
        matching: "-".into(),
        protocol: "-".into(),
        metric: String::new(),
        size,
        value,
        unit: unit.into(),
        iterations: 1,
        ranks: 2,
    }
}

#[cfg(test)]
mod tests {
    use super::test_row as row;
    use super::*;

    #[test]
    fn median_per_cell() {
        let rows = vec![
            row("a", 0, 3.0, "us"),
            row("a", 0, 1.0, "us"),
            row("a", 0, 2.0, "us"),
            row("a", 1, 5.0, "us"),
        ];
        let m = median_of_runs(rows);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].value, 2.0);
        assert_eq!(m[1].value, 5.0);
    }

    #[test]
    fn ratio_column_against_best_reference() {
        let rows = vec![
            row("rsmpi", 8, 0.3, "us"),
            row("openmpi-vader", 8, 0.2, "us"),
            row("mpich", 8, 0.6, "us"),
        ];
        let mut out = Vec::new();
        print_tables(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = text.lines().find(|l| l.starts_with('8')).unwrap();
        assert!(line.trim_end().ends_with("1.50"), "{text}");
        // bandwidth: the best reference is the highest
        let rows = vec![
            row("rsmpi", 8, 300.0, "MB/s"),
            row("openmpi-vader", 8, 200.0, "MB/s"),
            row("mpich", 8, 600.0, "MB/s"),
        ];
        let mut out = Vec::new();
        print_tables(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines()
                .find(|l| l.starts_with('8'))
                .unwrap()
                .trim_end()
                .ends_with("0.50"),
            "{text}"
        );
    }

    /// mbw_mr's ratio is its message rate over the best reference's message rate, at
    /// every size: from 1 MiB a reference's MB/s figure is the larger of its two, and
    /// the ratio once divided by it.
    #[test]
    fn mbw_mr_ratio_in_messages_per_second() {
        let mut rows = Vec::new();
        for (imp, mbs, rate) in [
            ("rsmpi", 6750.0, 3218.0),
            ("openmpi-vader", 5800.0, 2765.0),
            ("mpich", 5170.0, 2467.0),
        ] {
            for (v, unit) in [(mbs, "MB/s"), (rate, "msg/s")] {
                let mut r = row(imp, 2 << 20, v, unit);
                r.benchmark = "mbw_mr".into();
                r.metric = "1 pair(s)".into();
                rows.push(r);
            }
        }
        let mut out = Vec::new();
        print_tables(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = text.lines().find(|l| l.starts_with('2')).unwrap();
        // 3218 / 2765, not 3218 / 5800
        assert!(line.trim_end().ends_with("1.16"), "{text}");
    }

    /// queue-depth: a ratio column for each matching mode and metric, each against
    /// the best reference of that metric.
    #[test]
    fn queue_depth_ratios_per_mode_and_metric() {
        let mut rows = Vec::new();
        for (imp, matching, metric, v) in [
            ("rsmpi", "both", "latency", 0.1),
            ("rsmpi", "receiver", "latency", 0.3),
            ("rsmpi", "both", "post total", 100.0),
            ("rsmpi", "receiver", "post total", 120.0),
            ("openmpi-ucx", "-", "latency", 0.2),
            ("mpich", "-", "latency", 9.0),
            ("openmpi-ucx", "-", "post total", 80.0),
            ("mpich", "-", "post total", 50.0),
        ] {
            let mut r = row(imp, 4096, v, "us");
            r.benchmark = "queue-depth".into();
            r.matching = matching.into();
            r.metric = metric.into();
            rows.push(r);
        }
        let mut out = Vec::new();
        print_tables(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let header = text.lines().find(|l| l.starts_with("# N")).unwrap();
        let labels: Vec<&str> = header.split("rsmpi/best ").skip(1).collect();
        let labels: Vec<&str> = labels.iter().map(|l| l.trim_end()).collect();
        assert_eq!(
            labels,
            [
                "both latency (<1 better)",
                "receiver latency (<1 better)",
                "both post total (<1 better)",
                "receiver post total (<1 better)"
            ],
            "{text}"
        );
        let line = text.lines().find(|l| l.starts_with("4096")).unwrap();
        let ratios: Vec<&str> = line.split_whitespace().rev().take(4).collect();
        // latency against UCX's 0.2, posting against MPICH's 50
        assert_eq!(ratios, ["2.40", "2.00", "1.50", "0.50"], "{text}");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(4 << 20), "4 MiB");
        assert_eq!(human(4096), "4 KiB");
        assert_eq!(human(100), "100 B");
    }
}

//! The suite starts its own ranks and prints a latency table with a positive figure
//! for every size (no timing is asserted: performance claims live in
//! docs/performance.md).

use std::process::Command;

#[test]
fn latency_quick_prints_a_row_per_size() {
    let out = Command::new(env!("CARGO_BIN_EXE_rsmpi-bench"))
        .args(["latency", "--quick", "--max-size", "64", "--timeout", "60"])
        .env_remove("RSMPI_RANK")
        .output()
        .expect("run rsmpi-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rsmpi-bench failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(u64, f64)> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().expect("size"), f[1].parse().expect("latency"))
        })
        .collect();
    let sizes: Vec<u64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(sizes, vec![0, 1, 2, 4, 8, 16, 32, 64], "{stdout}");
    for (size, lat) in rows {
        assert!(
            lat > 0.0 && lat.is_finite(),
            "size {size}: latency {lat}\n{stdout}"
        );
    }
}

#[test]
fn json_rows_have_every_field() {
    let dir = std::env::temp_dir().join(format!("rsmpi-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("rows.json");
    let out = Command::new(env!("CARGO_BIN_EXE_rsmpi-bench"))
        .args([
            "bw",
            "--quick",
            "--min-size",
            "1024",
            "--max-size",
            "2048",
            "--timeout",
            "60",
            "--json",
        ])
        .arg(&json)
        .env_remove("RSMPI_RANK")
        .output()
        .expect("run rsmpi-bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    for key in [
        "benchmark",
        "implementation",
        "transport",
        "matching",
        "size",
        "value",
        "unit",
        "iterations",
    ] {
        assert!(text.contains(&format!("\"{key}\"")), "no {key} in {text}");
    }
    assert!(
        text.contains("\"MB/s\"") && text.contains("\"size\": 2048"),
        "{text}"
    );
}

#[test]
fn collectives_report_avg_min_max_per_rank_count() {
    let dir = std::env::temp_dir().join(format!("rsmpi-bench-coll-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("rows.json");
    for (bench, sizes) in [
        ("allreduce", vec![4u64, 8, 16, 32, 64]),
        ("barrier", vec![0]),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rsmpi-bench"))
            .args([
                bench,
                "--quick",
                "--max-size",
                "64",
                "--ranks",
                "2,3",
                "--timeout",
                "60",
                "--json",
            ])
            .arg(&json)
            .env_remove("RSMPI_RANK")
            .output()
            .expect("run rsmpi-bench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{bench}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(&format!("{bench} (3 ranks)")), "{stdout}");
        let rows: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        for ranks in [2u64, 3] {
            for metric in ["", "min", "max"] {
                let got: Vec<u64> = rows
                    .iter()
                    .filter(|r| r["ranks"] == ranks && r["metric"] == metric)
                    .map(|r| {
                        let v = r["value"].as_f64().unwrap();
                        assert!(v > 0.0 && v.is_finite(), "{r}");
                        r["size"].as_u64().unwrap()
                    })
                    .collect();
                assert_eq!(got, sizes, "{bench} {ranks} ranks {metric:?}: {rows:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

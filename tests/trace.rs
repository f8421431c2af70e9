//! Trace export: valid JSON written event by event with bounded memory, no
//! partial overlap of slices on one track, every flow start finished.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

#[test]
fn a_large_trace_is_valid_well_nested_and_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args([
            "run",
            "--algorithm",
            "ring",
            "--min-bytes",
            "4K",
            "--max-bytes",
            "4K",
            "--trace",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "wrote PATH (N trace events; peak memory of this run X GiB)"
    let line = stdout.lines().find(|l| l.starts_with("wrote ")).unwrap();
    let n: usize = line
        .split('(')
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n > 100_000, "{line}");
    let gib: f64 = line
        .rsplit("run ")
        .next()
        .unwrap()
        .trim_end_matches(" GiB)")
        .parse()
        .unwrap();
    // Records held until the write, not a JSON tree: ~60 B per event.
    assert!(gib < 0.25, "peak {gib} GiB for {n} events: {line}");

    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), n);
    let mut tracks: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    let (mut starts, mut finishes) = (BTreeSet::new(), BTreeSet::new());
    for e in events {
        match e["ph"].as_str().unwrap() {
            "X" => {
                let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
                let ts = e["ts"].as_f64().unwrap();
                tracks
                    .entry(key)
                    .or_default()
                    .push((ts, ts + e["dur"].as_f64().unwrap()));
            }
            "s" => assert!(starts.insert(e["id"].as_u64().unwrap())),
            "f" => assert!(finishes.insert(e["id"].as_u64().unwrap())),
            _ => {}
        }
    }
    assert!(!starts.is_empty());
    assert_eq!(starts, finishes, "every flow start has its finish");
    for (track, mut slices) in tracks {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        // A stack of open slices: each new one must end inside its parent.
        // Times are µs as floats: a picosecond of rounding is not an overlap.
        const EPS: f64 = 1e-6;
        let mut open: Vec<f64> = Vec::new();
        for (s, e) in slices {
            while open.last().is_some_and(|&end| end <= s + EPS) {
                open.pop();
            }
            if let Some(&parent_end) = open.last() {
                assert!(
                    e <= parent_end + EPS,
                    "partial overlap on track {track:?} at {s}"
                );
            }
            open.push(e);
        }
    }
}

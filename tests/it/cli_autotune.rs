//! `kernbench autotune` end to end: the decision table, its CSV, the cache
//! on a second run, and the heterogeneous path.

use std::process::Command;

fn kernbench(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn autotune_prints_the_table_writes_csv_and_reuses_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let csv = dir.path().join("at.csv");
    let args = [
        "autotune",
        "--collective",
        "all_reduce",
        "--sizes",
        "1K,3K",
        "--cache",
        cache.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ];
    let (ok, first, err) = kernbench(&args);
    assert!(ok, "{first}\n{err}");
    assert!(
        first.contains("bucket(B)") && first.contains("runner-up"),
        "{first}"
    );
    assert!(!first.contains("(cached)"), "{first}");
    let (ok, second, _) = kernbench(&args);
    assert!(ok);
    assert!(second.contains("# 0 simulations"), "{second}");
    assert_eq!(second.matches("(cached)").count(), 2, "{second}");
    // The CSV has one row per bucket (1K and 4K), with the printed choice.
    let mut r = csv::Reader::from_path(&csv).unwrap();
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert_eq!(rows.len(), 2);
    assert_eq!((&rows[0][1], &rows[1][1]), ("1024", "4096"));
    for row in &rows {
        assert!(first.contains(&row[2]), "{}", &row[2]);
    }
}

#[test]
fn autotune_on_sip_kinds_names_the_fallback_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let spec = kernbench::spec::DEFAULT_SYSTEM_YAML
        .replace(
            "    topology: ring_1d          # ring_1d | torus_2d | mesh_2d_no_wrap",
            "    topology: ring_1d\n    kinds: { h100: [0, 1], a100: [\"2..4\"] }",
        )
        .replace("cube_mesh: { w: 4, h: 4 }", "cube_mesh: { w: 1, h: 1 }")
        + "sip_kinds:\n  h100: { memory: { hbm: { bandwidth_gbps: 16.0 } }, capabilities: [ring, ring_sram] }\n  a100: { capabilities: [ring] }\n";
    let ccl =
        "defaults: { algorithm: ring, buffer_kind: hbm, n_slots: 2, slot_size: 4096, chunks: 1 }
autotune: { configs: [ring, ring_sram] }
algorithms:
  ring: { algorithm: ring }
  ring_sram: { algorithm: ring, buffer_kind: sram, n_slots: 8 }
";
    let (sys_path, ccl_path) = (dir.path().join("s.yaml"), dir.path().join("c.yaml"));
    std::fs::write(&sys_path, spec).unwrap();
    std::fs::write(&ccl_path, ccl).unwrap();
    let csv = dir.path().join("h.csv");
    let (ok, out, err) = kernbench(&[
        "autotune",
        "--system",
        sys_path.to_str().unwrap(),
        "--ccl",
        ccl_path.to_str().unwrap(),
        "--sizes",
        "16K",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("heterogeneous"), "{out}");
    assert!(
        out.contains("ring_sram") && out.contains("2:ring 3:ring"),
        "{out}"
    );
}

/// `run --algorithm auto` runs each size's pick and names it at the end of
/// its line and in the CSV; `autotune` then finds every decision in the
/// cache run wrote (no simulation) and agrees with it.
#[test]
fn run_auto_runs_and_names_each_sizes_pick_from_the_shared_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (csv, at) = (dir.path().join("run.csv"), dir.path().join("at.csv"));
    let system = "tests/data/doc/small.yaml";
    let (ok, out, err) = kernbench(&[
        "run",
        "--system",
        system,
        "--algorithm",
        "auto",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "1024",
        "-c",
        "1",
        "--autotune-cache",
        cache.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("# all_reduce / auto, op sum"), "{out}");
    assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
    let picks: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("[auto: "))
        .map(|l| l.rsplit("[auto: ").next().unwrap().trim_end_matches(']'))
        .collect();
    assert_eq!(picks.len(), 2, "{out}");
    let (ok, tuned, err) = kernbench(&[
        "autotune",
        "--system",
        system,
        "--sizes",
        "1K,1M",
        "--cache",
        cache.to_str().unwrap(),
        "--csv",
        at.to_str().unwrap(),
    ]);
    assert!(ok, "{tuned}\n{err}");
    assert!(tuned.contains("# 0 simulations"), "{tuned}");
    let chosen: Vec<String> = csv::Reader::from_path(&at)
        .unwrap()
        .records()
        .map(|r| r.unwrap()[2].to_string())
        .collect();
    assert_eq!(picks, chosen);
    // Both placements of both sizes, each naming its pick.
    let mut r = csv::Reader::from_path(&csv).unwrap();
    let col = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "autotuned")
        .unwrap();
    let rows: Vec<String> = r.records().map(|x| x.unwrap()[col].to_string()).collect();
    assert_eq!(rows, [0, 0, 1, 1].map(|k| chosen[k].clone()));
}

/// A cache file edited to pick a configuration the ccl config does not
/// have is discarded with a note naming the file and that configuration,
/// and the size is tuned again: no panic, the same pick as the first run.
#[test]
fn run_auto_discards_a_cached_decision_naming_a_missing_config() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let args = [
        "run",
        "--system",
        "tests/data/doc/small.yaml",
        "--algorithm",
        "auto",
        "-b",
        "1K",
        "-e",
        "1K",
        "-c",
        "1",
        "--autotune-cache",
        cache.to_str().unwrap(),
    ];
    let (ok, first, err) = kernbench(&args);
    assert!(ok, "{first}\n{err}");
    let pick = |out: &str| {
        out.lines()
            .find(|l| !l.starts_with('#') && l.contains("[auto: "))
            .map(|l| {
                l.rsplit("[auto: ")
                    .next()
                    .unwrap()
                    .trim_end_matches(']')
                    .to_string()
            })
            .unwrap_or_else(|| panic!("no pick in:\n{out}"))
    };
    let files: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let mut entry: serde_json::Value = serde_json::from_str(&text).unwrap();
    entry["decision"]["config"] = "no_such_config".into();
    std::fs::write(&files[0], entry.to_string()).unwrap();
    let (ok, second, err) = kernbench(&args);
    assert!(ok, "{second}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let note = format!(
        "note: rebuilt a cached decision: {}: its decision names config 'no_such_config', which is not a candidate of the current ccl config (",
        files[0].display()
    );
    assert!(err.contains(&note), "{err}");
    assert!(second.contains("# Out of bounds values : 0 OK"), "{second}");
    assert_eq!(pick(&second), pick(&first));
    // The re-tuned decision replaced the edited one.
    let fixed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(fixed["decision"]["config"], pick(&first).as_str());
}

//! Result sets are never destroyed or mixed: fingerprints, the lock, safe
//! merges, corrupt point files, panics recorded as errors, honest exits.

use kernbench::sweep::lock::Lock;
use kernbench::sweep::{Options, Plan, run};
use std::path::Path;
use std::process::Command;

/// A plan of 6 quick points (ring all-reduce on 4 SIPs, 1x1 cubes).
const PLAN: &str = "name: tiny\nbase:\n  sip.cube_mesh.w: 1\n  sip.cube_mesh.h: 1\nstudies:\n  - name: s\n    grid:\n      algorithm: [ring, tree]\n      bytes: [1K, 4K, 16K]\n";

fn plan(text: &str) -> Plan {
    Plan::from_yaml(text, "tiny.yaml").unwrap()
}

fn opts(out: &Path, shard: Option<(usize, usize)>, resume: bool, ccl: &str) -> Options {
    Options {
        resume,
        shard,
        ccl_text: ccl.into(),
        ccl_origin: "test ccl".into(),
        ..Options::new(out.to_path_buf(), 2)
    }
}

fn ccl() -> &'static str {
    kernbench::ccl::config::DEFAULT_CCL_YAML
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// (exit code, stdout, stderr) of the real binary.
fn kernbench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Every file under `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn merge_into_one_of_its_inputs_is_refused_and_the_input_is_intact() {
    let p = plan(PLAN);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    run(&p, &opts(a.path(), Some((1, 2)), false, ccl())).unwrap();
    run(&p, &opts(b.path(), Some((2, 2)), false, ccl())).unwrap();
    let before = snapshot(a.path());
    let (a_s, b_s) = (a.path().to_str().unwrap(), b.path().to_str().unwrap());
    let (code, _, err) = kernbench(&["merge", a_s, b_s, "--out", a_s]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--out {a_s} is the input {a_s} or inside it")),
        "{err}"
    );
    assert_eq!(snapshot(a.path()), before, "the input was changed");
    // Inside an input is refused too.
    let inner = a.path().join("merged");
    let (code, _, err) = kernbench(&["merge", a_s, b_s, "--out", inner.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(!inner.exists() || std::fs::read_dir(&inner).unwrap().next().is_none());
}

#[test]
fn merge_refuses_shards_of_different_ccl_configs_and_warns_of_a_missing_shard() {
    let p = plan(PLAN);
    let other = ccl().replace("n_slots: 4 ", "n_slots: 8 ");
    assert_ne!(other, ccl());
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    run(&p, &opts(dirs[0].path(), Some((1, 3)), false, ccl())).unwrap();
    run(&p, &opts(dirs[1].path(), Some((2, 3)), false, &other)).unwrap();
    run(&p, &opts(dirs[2].path(), Some((3, 3)), false, ccl())).unwrap();
    let s = |i: usize| dirs[i].path().to_str().unwrap().to_string();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("m");
    let (code, _, err) = kernbench(&["merge", &s(0), &s(1), "--out", target.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("come from different sweeps: the ccl config differs"),
        "{err}"
    );
    assert!(
        !target.exists(),
        "nothing is written when an input is refused"
    );
    // Shards 1 and 3 of one sweep: merged, with a warning about shard 2.
    let (code, out_text, err) =
        kernbench(&["merge", &s(0), &s(2), "--out", target.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: shard 2/3 is missing"), "{err}");
    assert!(
        out_text.contains("merged 4 point files from 2 directories"),
        "{out_text}"
    );
}

#[test]
fn resume_refuses_another_ccl_or_plan_naming_the_part() {
    let p = plan(PLAN);
    let d = tempfile::tempdir().unwrap();
    run(&p, &opts(d.path(), None, false, ccl())).unwrap();
    let other = ccl().replace("n_slots: 4 ", "n_slots: 8 ");
    let e = run(&p, &opts(d.path(), None, true, &other)).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "cannot resume {}: the ccl config differs",
            d.path().display()
        )),
        "{e}"
    );
    let bigger = plan(&PLAN.replace("[1K, 4K, 16K]", "[1K, 4K, 16K, 64K]"));
    let e = run(&bigger, &opts(d.path(), None, true, ccl())).unwrap_err();
    assert!(e.contains("the plan differs"), "{e}");
    // The same inputs resume (nothing to do).
    let again = run(&p, &opts(d.path(), None, true, ccl())).unwrap();
    assert_eq!((again.ran, again.skipped), (0, 6));
}

#[test]
fn a_second_sweep_on_a_locked_directory_fails_at_once() {
    let d = tempfile::tempdir().unwrap();
    let _held = Lock::take(d.path()).unwrap();
    let e = run(&plan(PLAN), &opts(d.path(), None, false, ccl())).unwrap_err();
    assert!(e.contains("is in use by another sweep"), "{e}");
    assert!(e.contains(".lock"), "{e}");
}

#[test]
fn a_truncated_point_file_is_run_again_on_resume() {
    let p = plan(PLAN);
    let (clean, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    run(&p, &opts(clean.path(), None, false, ccl())).unwrap();
    run(&p, &opts(d.path(), None, false, ccl())).unwrap();
    let points = d.path().join("points");
    let victim = std::fs::read_dir(&points)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let text = read(&victim);
    std::fs::write(&victim, &text[..text.len() / 2]).unwrap();
    // Without --resume, consolidation names the file and the fix.
    let e = kernbench::sweep::consolidate(d.path()).unwrap_err();
    assert!(
        e.contains(&victim.display().to_string()) && e.contains("--resume"),
        "{e}"
    );
    let resumed = run(&p, &opts(d.path(), None, true, ccl())).unwrap();
    assert_eq!((resumed.ran, resumed.skipped), (1, 5));
    assert!(
        points
            .join("corrupt")
            .join(victim.file_name().unwrap())
            .exists()
    );
    assert_eq!(
        read(&d.path().join("results.csv")),
        read(&clean.path().join("results.csv"))
    );
}

#[test]
fn a_write_error_names_its_path() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("results");
    let e = run(&plan(PLAN), &opts(&out, None, false, ccl())).unwrap_err();
    assert!(e.contains(&file.display().to_string()), "{e}");
}

#[test]
fn a_panicking_point_is_recorded_the_others_finish_and_the_exit_is_1() {
    let d = tempfile::tempdir().unwrap();
    let plan_path = d.path().join("plan.yaml");
    std::fs::write(&plan_path, PLAN.replace("[ring, tree]", "[ring, panics]")).unwrap();
    let ccl_path = d.path().join("ccl.yaml");
    std::fs::write(
        &ccl_path,
        format!("{}  panics:\n    algorithm: panics\n", ccl()),
    )
    .unwrap();
    let out = d.path().join("out");
    let (code, _, err) = kernbench(&[
        "sweep",
        "--plan",
        plan_path.to_str().unwrap(),
        "--ccl",
        ccl_path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("3 point(s) failed:"), "{err}");
    assert!(
        err.contains("panicked: test-only algorithm 'panics' panicked on purpose"),
        "{err}"
    );
    let csv = read(&out.join("results.csv"));
    assert_eq!(csv.lines().count(), 7, "header + 6 rows:\n{csv}");
    let failed = csv
        .lines()
        .filter(|l| l.contains("panicked on purpose"))
        .count();
    assert_eq!(failed, 3, "{csv}");
    assert!(!out.join(".lock").exists(), "the lock is released");
}

#[test]
fn jobs_zero_is_an_error_and_too_many_are_clamped() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("o");
    let (code, _, err) = kernbench(&[
        "sweep",
        "--plan",
        "smoke",
        "--jobs",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--jobs 0"), "{err}");
    let plan_path = d.path().join("plan.yaml");
    std::fs::write(&plan_path, PLAN).unwrap();
    let (code, _, err) = kernbench(&[
        "sweep",
        "--plan",
        plan_path.to_str().unwrap(),
        "--jobs",
        "100000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("note: --jobs 100000 clamped to "), "{err}");
}

/// Issue 12's acceptance: a sweep with one bad point writes everything,
/// names the failure and exits 1; results.csv keeps the failed row's axis
/// values and leaves its result fields empty (NaN in pandas), never 0.
#[test]
fn a_sweep_with_one_bad_point_exits_1_and_its_row_has_empty_results() {
    let d = tempfile::tempdir().unwrap();
    let plan_path = d.path().join("plan.yaml");
    // 6 SIPs on a torus without w/h cannot use the square fallback.
    let yaml = "name: one_bad\nbase:\n  sip.cube_mesh.w: 1\n  sip.cube_mesh.h: 1\nstudies:\n  - name: s\n    grid:\n      system.sips.topology: [torus_2d]\n      system.sips.count: [4, 6]\n      algorithm: [ring]\n      bytes: [4K]\n";
    std::fs::write(&plan_path, yaml).unwrap();
    let out = d.path().join("out");
    let (code, _, err) = kernbench(&[
        "sweep",
        "--plan",
        plan_path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("1 point(s) failed:"), "{err}");
    assert!(
        err.contains("[1] s: system.sips.topology=torus_2d, system.sips.count=6"),
        "{err}"
    );
    assert!(err.contains("not a square"), "{err}");
    for f in ["results.json", "plan.yaml", "system.yaml", "simulator.csv"] {
        assert!(out.join(f).exists(), "{f} written");
    }
    let mut csv = csv::Reader::from_path(out.join("results.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    let rows: Vec<csv::StringRecord> = csv.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 2);
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let at = |row: usize, name: &str| rows[row][col(name)].to_string();
    // One column per axis the plan varies, as the plan wrote the values;
    // the algorithm and size axes are the rows' own columns.
    for (axis, values) in [
        ("system.sips.topology", ["torus_2d", "torus_2d"]),
        ("system.sips.count", ["4", "6"]),
        ("algorithm", ["ring", "ring"]),
        ("bytes", ["4096", "4096"]),
    ] {
        assert_eq!([at(0, axis), at(1, axis)], values, "{axis}");
    }
    // The good row: the spec's tick, the element type, the bound's term and
    // the simulated numbers (pinned: the simulator is deterministic).
    assert_eq!(
        [
            at(0, "dtype"),
            at(0, "tick_ns"),
            at(0, "sips"),
            at(0, "participants")
        ],
        ["half", "1.0", "4", "4"]
    );
    assert_eq!(at(0, "ticks"), "2185");
    assert!(!at(0, "bound_term").is_empty());
    // The failed row: every result field empty, the error kept.
    for field in [
        "sips",
        "tick_ns",
        "participants",
        "ticks",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "bound_ticks",
        "pct_of_bound",
        "bound_term",
        "verified",
    ] {
        assert_eq!(at(1, field), "", "{field} of the failed row");
    }
    assert!(
        at(1, "error").contains("not a square"),
        "{}",
        at(1, "error")
    );
    let json: serde_json::Value = serde_json::from_str(&read(&out.join("results.json"))).unwrap();
    assert!(
        json[1]["ticks"].is_null() && json[1]["busbw_gbps"].is_null(),
        "{json}"
    );
}

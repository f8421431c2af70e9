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

/// The tiny plan in a file of `dir`; its path.
fn plan_file(dir: &Path) -> String {
    let path = dir.join("tiny.yaml");
    std::fs::write(&path, PLAN).unwrap();
    path.display().to_string()
}

/// A sweep of the tiny plan on one job (the binary, so stderr is seen).
fn sweep_tiny(plan: &str, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = out.to_str().unwrap();
    let mut args = vec!["sweep", "--plan", plan, "--jobs", "1", "--out", out];
    args.extend(extra);
    kernbench(&args)
}

#[test]
fn an_output_that_is_an_input_or_another_output_is_refused_before_any_work() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("spec.yaml");
    let spec_text = kernbench::spec::System::embedded_default().to_yaml();
    std::fs::write(&spec, &spec_text).unwrap();
    let link = d.path().join("link.yaml");
    std::os::unix::fs::symlink(&spec, &link).unwrap();
    let spec_s = spec.to_str().unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    // The same file by another spelling: through `./`, `..` and a symlink.
    let dotted = format!("{}/./sub/../spec.yaml", d.path().display());
    for csv in [spec_s, &dotted, link.to_str().unwrap()] {
        let (code, _, err) = kernbench(&["run", "--system", spec_s, "--csv", csv]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!(
                "--csv {csv} and --system {spec_s} are the same file"
            )),
            "{err}"
        );
        assert!(err.contains("choose another --csv"), "{err}");
        assert_eq!(read(&spec), spec_text, "the input spec was overwritten");
    }
    let both = d.path().join("r.out");
    let b = both.to_str().unwrap();
    let (code, _, err) = kernbench(&["run", "--csv", b, "--json", b]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--json {b} and --csv {b} are the same file")),
        "{err}"
    );
    assert!(!both.exists(), "nothing is written");
    // A sweep's plan file inside --out, where the sweep writes plan.yaml.
    let out = d.path().join("set");
    std::fs::create_dir(&out).unwrap();
    let plan = out.join("plan.yaml");
    std::fs::write(&plan, PLAN).unwrap();
    let (code, _, err) = sweep_tiny(plan.to_str().unwrap(), &out, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--out {0} and --plan {0} are the same file",
            plan.display()
        )),
        "{err}"
    );
    assert_eq!(read(&plan), PLAN);
}

#[test]
fn a_directory_that_is_not_the_commands_own_output_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let mine = d.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("results.csv"), "my,own\n1,2\n").unwrap();
    let m = mine.to_str().unwrap();
    let plan = plan_file(d.path());
    let (code, _, err) = sweep_tiny(&plan, &mine, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--out {m}: the directory holds files that are not a kernbench result set (no fingerprint.json): results.csv"
        )),
        "{err}"
    );
    assert!(err.contains("allowed: an empty or new --out"), "{err}");
    // A TP plan writes a result set too: the same refusal.
    let (code, _, err) = kernbench(&["sweep", "--plan", "tp", "--out", m]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--out {m}: the directory holds files that are not a kernbench result set (no fingerprint.json): results.csv"
        )),
        "{err}"
    );
    {
        let args = ["gemm-sweep", "--out", m];
        let (code, _, err) = kernbench(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(&format!("--out {m}: the directory already holds files that are not the output of `kernbench ")),
            "{err}"
        );
        assert!(
            err.contains("(results.csv)") && err.contains("choose another --out"),
            "{err}"
        );
    }
    let (code, _, err) = kernbench(&["topo", "--preset", "mesh_16", "--dot", m]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--dot {m}: the directory already holds")),
        "{err}"
    );
    assert_eq!(read(&mine.join("results.csv")), "my,own\n1,2\n");
    // A command's own output directory is written again.
    let dots = d.path().join("dots");
    for _ in 0..2 {
        let (code, out, err) = kernbench(&[
            "topo",
            "--preset",
            "mesh_16",
            "--dot",
            dots.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(&format!("wrote       {}", dots.join("cube.dot").display())),
            "{out}"
        );
    }
}

#[test]
fn a_failed_write_is_an_error_naming_the_path_and_nothing_says_wrote() {
    let (code, _, err) = kernbench(&[
        "run",
        "--preset",
        "mesh_16",
        "-b",
        "1K",
        "-e",
        "1K",
        "--csv",
        "/dev/full",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error: --csv: cannot write /dev/full: No space left on device"),
        "{err}"
    );
    assert!(!err.contains("wrote"), "{err}");
    // gemm-sweep into its own directory where a figure's name is taken by a
    // directory: the figure cannot be written.
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("gemm");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(
        out.join(kernbench::output::OWNER_FILE),
        "kernbench gemm-sweep\n",
    )
    .unwrap();
    let blocked = out.join("gemm_tflops.svg");
    std::fs::create_dir(&blocked).unwrap();
    let (code, _, err) = kernbench(&["gemm-sweep", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "error: --out: cannot write {}: ",
            blocked.display()
        )),
        "{err}"
    );
    assert!(!err.contains("wrote"), "{err}");
    // The figure before it is whole; no temporary file is left.
    let svg = read(&out.join("gemm_latency.svg"));
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    let left = kernbench::output::foreign_entries(&out, &[]).unwrap();
    assert_eq!(
        left,
        [
            ".kernbench-output",
            "fingerprint.json",
            "gemm_latency.svg",
            "gemm_tflops.svg",
            "points",
            "results.csv"
        ]
    );
    assert!(
        std::fs::read_dir(&out).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".kbtmp"))
    );
}

#[test]
fn two_default_output_sweeps_started_together_get_two_directories() {
    let d = tempfile::tempdir().unwrap();
    let plan = plan_file(d.path());
    let start = || {
        Command::new(env!("CARGO_BIN_EXE_kernbench"))
            .args(["sweep", "--plan", &plan, "--jobs", "1"])
            .current_dir(d.path())
            .output()
            .unwrap()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(start);
        let b = s.spawn(start);
        (a.join().unwrap(), b.join().unwrap())
    });
    for o in [&a, &b] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let mut dirs: Vec<String> = std::fs::read_dir(d.path().join("results"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    // Started in the same second (the usual case): the second name has -2.
    if dirs[1].starts_with(&dirs[0]) {
        assert_eq!(dirs[1], format!("{}-2", dirs[0]));
    }
    for name in &dirs {
        assert!(name.starts_with("tiny-"), "{name}");
        let csv = read(&d.path().join("results").join(name).join("results.csv"));
        assert_eq!(csv.lines().count(), 7, "{name}: header + 6 rows");
    }
}

#[test]
fn resume_says_what_it_resumes_keeps_its_shard_and_ignores_stray_points() {
    let d = tempfile::tempdir().unwrap();
    let plan = plan_file(d.path());
    let missing = d.path().join("missing");
    let (code, _, err) = sweep_tiny(&plan, &missing, &["--resume"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--resume --out {}: no such directory",
            missing.display()
        )),
        "{err}"
    );
    assert!(err.contains("drop --resume to start a new sweep"), "{err}");
    assert!(!missing.exists());
    // A shard's set resumes as that shard; another shard is refused.
    let half = d.path().join("half");
    let (code, _, err) = sweep_tiny(&plan, &half, &["--shard", "1/2"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = sweep_tiny(&plan, &half, &["--resume", "--shard", "2/2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--shard 2/2: cannot resume {} with it: the result set holds shard 1/2; allowed: no --shard (the set's own) or --shard 1/2",
            half.display()
        )),
        "{err}"
    );
    let (code, out, err) = sweep_tiny(&plan, &half, &["--resume"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("6 points, shard 1/2"), "{err}");
    assert!(out.contains("3 of 3 points done (0 run now"), "{out}");
    assert!(read(&half.join("fingerprint.json")).contains("\"shard\": [\n    1,\n    2\n  ]"));
    // Point files that are not the plan's: one past its end, one whose
    // contents are another point's.
    let full = d.path().join("full");
    assert_eq!(sweep_tiny(&plan, &full, &[]).0, 0);
    let clean = read(&full.join("results.csv"));
    let points = full.join("points");
    let mut files: Vec<_> = std::fs::read_dir(&points)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let past = points.join("000006-0123456789abcdef.json");
    std::fs::copy(&files[0], &past).unwrap();
    let swapped = files[1].clone();
    std::fs::copy(&files[2], &swapped).unwrap();
    let (code, out, err) = sweep_tiny(&plan, &full, &["--resume"]);
    assert_eq!(code, 0, "{err}");
    for f in [&past, &swapped] {
        assert!(
            err.contains(&format!("note: ignoring the point file {}", f.display())),
            "{err}"
        );
    }
    assert!(
        err.contains("of no point of this run (past the plan"),
        "{err}"
    );
    assert!(
        err.contains("its contents are of another point than its name says"),
        "{err}"
    );
    assert!(out.contains("6 of 6 points done (1 run now in "), "{out}");
    assert!(out.contains(" 5 from before, 0 failed)"), "{out}");
    assert_eq!(read(&full.join("results.csv")), clean, "6 rows, each once");
    assert!(
        points
            .join("ignored")
            .join(past.file_name().unwrap())
            .exists()
    );
}

#[test]
fn merging_a_full_set_with_its_shard_writes_each_point_once_and_says_so() {
    let p = plan(PLAN);
    let (full, half) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    run(&p, &opts(full.path(), None, false, ccl())).unwrap();
    run(&p, &opts(half.path(), Some((1, 2)), false, ccl())).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let target = dest.path().join("merged");
    let (f, h) = (full.path().to_str().unwrap(), half.path().to_str().unwrap());
    let (code, out, err) = kernbench(&["merge", f, h, "--out", target.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "warning: {f} holds all points of the plan, so {h} (shard 1/2) add(s) no point: each point is written once"
        )),
        "{err}"
    );
    assert!(!err.contains("is missing"), "{err}");
    assert!(
        out.contains("merged 6 point files from 2 directories"),
        "{out}"
    );
    assert_eq!(
        read(&target.join("results.csv")),
        read(&full.path().join("results.csv"))
    );
}

/// xorshift64: the kill delays, the same on every run of the test.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The finished point files of a result directory (0 if it has none).
fn points_on_disk(dir: &Path) -> usize {
    kernbench::output::foreign_entries(&dir.join("points"), &[])
        .unwrap()
        .iter()
        .filter(|n| n.ends_with(".json"))
        .count()
}

#[test]
fn a_sweep_killed_20_times_and_resumed_ends_with_the_uninterrupted_results() {
    use std::os::unix::process::ExitStatusExt;
    use std::time::Instant;
    let d = tempfile::tempdir().unwrap();
    // 12 points of about 10 to 40 ms each, so kills land in them, not only
    // in start-up and consolidation.
    let plan_path = d.path().join("kill.yaml");
    let sizes = "[2M, 3M, 4M, 5M, 6M, 7M]";
    std::fs::write(&plan_path, PLAN.replace("[1K, 4K, 16K]", sizes)).unwrap();
    let plan = plan_path.to_str().unwrap();
    let clean = d.path().join("clean");
    let t0 = Instant::now();
    assert_eq!(sweep_tiny(plan, &clean, &[]).0, 0);
    let whole = t0.elapsed();
    let t0 = Instant::now();
    assert_eq!(sweep_tiny(plan, &clean, &["--resume"]).0, 0);
    let no_points = t0.elapsed().min(whole);
    let out = d.path().join("killed");
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let (mut killed, mut partial) = (0, 0);
    for _ in 0..20 {
        let mut args = vec![
            "sweep",
            "--plan",
            plan,
            "--jobs",
            "1",
            "--out",
            out.to_str().unwrap(),
        ];
        if out.exists() {
            args.push("--resume");
        }
        // A run's expected time: start-up and consolidation, plus its
        // share of the points still to do; the kill lands in its first 70%.
        let left = (12 - points_on_disk(&out)) as f64 / 12.0;
        let expected = no_points + (whole - no_points).mul_f64(left);
        let mut child = Command::new(env!("CARGO_BIN_EXE_kernbench"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(expected.mul_f64((next(&mut seed) % 700) as f64 / 1000.0));
        child.kill().unwrap(); // SIGKILL
        if child.wait().unwrap().signal() == Some(9) {
            killed += 1;
            partial += usize::from((1..12).contains(&points_on_disk(&out)));
        }
        // A run that finished before its kill leaves nothing to interrupt:
        // until a kill has left a partial set, start again from nothing.
        if partial == 0 && out.exists() && points_on_disk(&out) == 12 {
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
    assert!(
        killed >= 10,
        "only {killed} of 20 runs were killed before they ended"
    );
    assert!(partial > 0, "no kill left a partial result set");
    let resume: &[&str] = if out.exists() { &["--resume"] } else { &[] };
    let (code, _, err) = sweep_tiny(plan, &out, resume);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        read(&out.join("results.csv")),
        read(&clean.join("results.csv"))
    );
}

#[test]
fn a_second_process_on_a_locked_directory_is_refused_naming_the_holder() {
    let d = tempfile::tempdir().unwrap();
    let plan = d.path().join("slow.yaml");
    // About a second of points: the holder is still running when refused.
    std::fs::write(&plan, PLAN.replace("[1K, 4K, 16K]", "[8M, 16M, 32M, 64M]")).unwrap();
    let plan = plan.to_str().unwrap();
    let out = d.path().join("out");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args([
            "sweep",
            "--plan",
            plan,
            "--jobs",
            "1",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = holder.id().to_string();
    let lock = out.join(".lock");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&lock).map_or(true, |t| t.trim() != pid) {
        assert!(
            t0.elapsed().as_secs() < 30,
            "the first sweep never took the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (code, _, err) = sweep_tiny(plan, &out, &["--resume"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{} is in use by another sweep (process {pid}, lock {})",
            out.display(),
            lock.display()
        )),
        "{err}"
    );
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder still ran when refused"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Killed, it released the lock: the next sweep takes it over.
    let (code, _, err) = sweep_tiny(plan, &out, &["--resume"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "note: taking over the lock {} of process {pid}",
            lock.display()
        )),
        "{err}"
    );
}

/// gemm-sweep writes a result set (a point file per shape, the
/// fingerprint) into its own directory, and a second run replaces it:
/// the same results.csv, no stale or extra point file.
#[test]
fn gemm_sweep_writes_a_result_set_and_a_rerun_replaces_it() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("gemm");
    let o = out.to_str().unwrap();
    let (code, first, err) = kernbench(&["gemm-sweep", "--out", o]);
    assert_eq!(code, 0, "{err}");
    let csv = read(&out.join("results.csv"));
    std::fs::write(out.join("points/000099-stale.json"), "{}").unwrap();
    let (code, second, err) = kernbench(&["gemm-sweep", "--out", o]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((second, read(&out.join("results.csv"))), (first, csv));
    let points = kernbench::output::foreign_entries(&out.join("points"), &[]).unwrap();
    assert_eq!(points.len(), 14, "{points:?}");
    assert_eq!(points[0], "000000-square-128x128x128.json");
    assert!(out.join("fingerprint.json").exists());
}

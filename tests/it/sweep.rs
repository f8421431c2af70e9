//! Sweeps: result files, plots, determinism, resume, shards and merge.

use kernbench::sweep::{Options, Plan, consolidate, run};
use std::path::Path;

fn opts(out: &Path, shard: Option<(usize, usize)>, resume: bool) -> Options {
    Options {
        resume,
        shard,
        ..Options::new(out.to_path_buf(), 2)
    }
}

fn smoke() -> Plan {
    Plan::load("smoke").unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn smoke_sweep_writes_results_plots_and_is_deterministic() {
    let plan = smoke();
    let n = plan.points().len();
    assert_eq!(
        n,
        3 * 2 * 22 * 2,
        "3 topologies x 2 buffers x 22 (collective, algorithm) pairs x 2 sizes"
    );
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let out = run(&plan, &opts(a.path(), None, false)).unwrap();
    assert_eq!(
        (out.rows.len(), out.ran, out.skipped, out.interrupted),
        (n, n, 0, false)
    );
    assert!(
        out.rows.iter().all(|r| r.error.is_empty()
            && r.verified == "ok"
            && r.bound_ticks.is_some()
            && r.ticks >= r.bound_ticks),
        "{:?}",
        out.rows.iter().find(|r| !r.error.is_empty())
    );
    let csv = read(&a.path().join("results.csv"));
    assert_eq!(csv.lines().count(), n + 1);
    assert!(csv.starts_with("index,id,study,point,topology,sips"));
    let json: serde_json::Value =
        serde_json::from_str(&read(&a.path().join("results.json"))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), n);
    for f in ["plan.yaml", "system.yaml", "ccl.yaml", "simulator.csv"] {
        assert!(a.path().join(f).exists(), "{f}");
    }
    // Plots: well-formed SVG documents with labelled axes and drawn data.
    let svgs: Vec<_> = std::fs::read_dir(a.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    assert!(svgs.len() >= 5, "{} plots", svgs.len());
    for p in &svgs {
        let s = read(p);
        assert!(
            s.trim_start().starts_with("<svg") && s.trim_end().ends_with("</svg>"),
            "{}",
            p.display()
        );
        assert_eq!(
            s.matches("<text").count(),
            s.matches("</text>").count(),
            "{}",
            p.display()
        );
        assert!(s.contains("<polyline"), "{} has no data line", p.display());
        let name = p.file_name().unwrap().to_str().unwrap();
        let x_label = if name.starts_with("scaling") {
            "SIPs"
        } else {
            "size per participant (bytes)"
        };
        assert!(s.contains(x_label), "{name}: x axis unlabelled");
        let y_label = ["time (us)", "busbw (GB/s)", "% of bound"];
        assert!(
            y_label.iter().any(|l| s.contains(l)),
            "{name}: y axis unlabelled"
        );
    }
    for kind in [
        "latency_all_reduce.svg",
        "busbw_all_reduce.svg",
        "bound_all_reduce.svg",
    ] {
        assert!(a.path().join(kind).exists(), "{kind}");
    }
    // The same plan again gives byte-identical results.
    run(&plan, &opts(b.path(), None, false)).unwrap();
    assert_eq!(csv, read(&b.path().join("results.csv")));
    assert_eq!(
        read(&a.path().join("results.json")),
        read(&b.path().join("results.json"))
    );
}

#[test]
fn interrupted_then_resumed_equals_uninterrupted() {
    let plan = smoke();
    let (full, part) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    run(&plan, &opts(full.path(), None, false)).unwrap();
    // An interruption before any point: a valid, empty partial result set.
    let o = opts(part.path(), None, false);
    o.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let stopped = run(&plan, &o).unwrap();
    assert!(stopped.interrupted && stopped.rows.is_empty());
    assert_eq!(read(&part.path().join("results.csv")).lines().count(), 0);
    // Resumed (a full set resumes as a full set), then lose some finished
    // files: resume completes the set.
    run(&plan, &opts(part.path(), None, true)).unwrap();
    let points = part.path().join("points");
    let mut files: Vec<_> = std::fs::read_dir(&points)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files.iter().step_by(7) {
        std::fs::remove_file(f).unwrap();
    }
    let resumed = run(&plan, &opts(part.path(), None, true)).unwrap();
    assert!(resumed.skipped > 0 && resumed.ran > 0);
    assert_eq!(
        read(&part.path().join("results.csv")),
        read(&full.path().join("results.csv"))
    );
    // Without --resume a used directory is refused.
    let err = run(&plan, &opts(part.path(), None, false)).unwrap_err();
    assert!(err.contains("--resume"), "{err}");
}

#[test]
fn three_shards_merged_equal_the_unsharded_set() {
    let plan = smoke();
    let full = tempfile::tempdir().unwrap();
    run(&plan, &opts(full.path(), None, false)).unwrap();
    let shards: Vec<_> = (1..=3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut total = 0;
    for (k, d) in shards.iter().enumerate() {
        let o = run(&plan, &opts(d.path(), Some((k + 1, 3)), false)).unwrap();
        total += o.rows.len();
    }
    assert_eq!(total, plan.points().len());
    // Merge through the command line, as a user would.
    let merged = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .arg("merge")
        .args(shards.iter().map(|d| d.path()))
        .arg("--out")
        .arg(merged.path())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(
        read(&merged.path().join("results.csv")),
        read(&full.path().join("results.csv"))
    );
    assert_eq!(
        consolidate(merged.path()).unwrap().len(),
        plan.points().len()
    );
}

#[test]
fn a_failing_point_is_recorded_and_the_sweep_goes_on() {
    // 6 SIPs on a torus without w/h cannot use the square fallback.
    let yaml = "name: bad\nstudies:\n  - name: s\n    grid:\n      system.sips.topology: [torus_2d]\n      system.sips.count: [4, 6]\n      bytes: [4K]\n";
    let plan = Plan::from_yaml(yaml, "bad.yaml").unwrap();
    let d = tempfile::tempdir().unwrap();
    let out = run(&plan, &opts(d.path(), None, false)).unwrap();
    assert_eq!(out.rows.len(), 2);
    assert!(out.rows[0].error.is_empty());
    assert!(
        out.rows[1].error.contains("not a square"),
        "{}",
        out.rows[1].error
    );
}

#[test]
fn bad_plans_name_the_axis() {
    for (yaml, needle) in [
        ("name: x\nstudies: []\n", "studies"),
        (
            "name: x\nstudies:\n  - name: s\n    grid:\n      colective: [all_reduce]\n",
            "colective",
        ),
        (
            "name: x\nstudies:\n  - name: s\n    grid:\n      collective: [allreduce]\n",
            "allreduce",
        ),
        (
            "name: x\nstudies:\n  - name: s\n    grid:\n      bytes: [12Q]\n",
            "12Q",
        ),
        (
            "name: x\nstudies:\n  - name: s\n    grid:\n      algorithm: [fastest]\n",
            "fastest",
        ),
        (
            "name: x\nstudies:\n  - name: s\n    zip:\n      bytes: [1K, 2K]\n      collective: [all_reduce]\n",
            "different lengths",
        ),
        (
            "name: x\nstudies:\n  - name: s\n    grid:\n      system.sips.count: [many]\n",
            "system.sips.count",
        ),
        (
            "name: x\nstudies:\n  - name: s\n    grid:\n      ccl.n_slot: [4]\n",
            "ccl.n_slot",
        ),
    ] {
        let e = Plan::from_yaml(yaml, "plan.yaml").unwrap_err().to_string();
        assert!(e.contains("plan.yaml") && e.contains(needle), "{e}");
    }
}

/// Issue 12's plot test: every figure of a sweep has one series per
/// combination of the axes the plan varies besides the figure's own (the
/// collective, the size, the topology and SIP count of a panel), each
/// visible: a style of its own, a marker that differs in shape or size
/// from every other, data in every panel, and a legend entry in the SVG.
#[test]
fn every_plot_has_a_visible_series_per_combination_of_the_varied_axes() {
    use kernbench::sweep::figure::{MARKED, style};
    let yaml = "name: plots\nbase:\n  sip.cube_mesh.w: 1\n  sip.cube_mesh.h: 1\nstudies:\n  - name: s\n    grid:\n      system.sips.topology: [ring_1d, torus_2d]\n      system.sips.count: [4, 16]\n      collective: [all_reduce, broadcast]\n      algorithm: [ring, tree]\n      ccl.n_slots: [2, 4]\n      bytes: [1K, 4K, 16K]\n";
    let plan = Plan::from_yaml(yaml, "plots.yaml").unwrap();
    assert_eq!(plan.points().len(), 2 * 2 * 2 * 2 * 2 * 3);
    let d = tempfile::tempdir().unwrap();
    let out = run(&plan, &opts(d.path(), None, false)).unwrap();
    assert!(out.rows.iter().all(|r| r.error.is_empty()));
    let points = kernbench::sweep::results::load_points(d.path()).unwrap();
    let figures = kernbench::sweep::plots::figures(&points);
    let files: Vec<&str> = figures.iter().map(|f| f.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "latency_all_reduce.svg",
            "busbw_all_reduce.svg",
            "bound_all_reduce.svg",
            "scaling_all_reduce.svg",
            "scaling_bound_all_reduce.svg",
            "latency_broadcast.svg",
            "busbw_broadcast.svg",
            "bound_broadcast.svg",
            "scaling_broadcast.svg",
            "scaling_bound_broadcast.svg",
        ]
    );
    // algorithm x ccl.n_slots: 2 x 2 series in every figure.
    let labels = [
        "ring, n_slots=2",
        "ring, n_slots=4",
        "tree, n_slots=2",
        "tree, n_slots=4",
    ];
    for f in &figures {
        assert_eq!(f.series, labels, "{}", f.file);
        assert!(f.series.len() <= MARKED, "{}: markers would repeat", f.file);
        let scaling = f.file.starts_with("scaling");
        let (panels, xs) = if scaling { (2, 2) } else { (4, 3) };
        assert_eq!(f.panels.len(), panels, "{}", f.file);
        for p in &f.panels {
            let series: Vec<usize> = p.lines.iter().map(|l| l.series).collect();
            assert_eq!(series, [0, 1, 2, 3], "{} {}", f.file, p.title);
            for l in &p.lines {
                assert_eq!(l.points.len(), xs, "{} {}", f.file, p.title);
                assert!(
                    l.points.iter().all(|&(x, y)| x > 0.0 && y > 0.0),
                    "{} {}",
                    f.file,
                    p.title
                );
            }
        }
        assert!(
            f.title
                .contains("1x1 cubes per SIP, 4096 B inter-SIP packets"),
            "{}",
            f.title
        );
        let svg = read(&d.path().join(&f.file));
        for label in labels {
            assert_eq!(
                svg.matches(&format!(">\n{label}\n<")).count(),
                1,
                "{}: legend {label}",
                f.file
            );
        }
    }
    let marks: std::collections::BTreeSet<(usize, i32)> = (0..labels.len())
        .map(|i| (style(i).marker, style(i).size))
        .collect();
    assert_eq!(marks.len(), labels.len(), "markers differ in shape or size");
    // Panels name their slice; sizes tick as powers of two written 1K, 4K, 16K.
    let latency = read(&d.path().join("latency_all_reduce.svg"));
    for text in [
        "ring_1d x4",
        "ring_1d x16",
        "torus_2d x4",
        "torus_2d x16",
        ">\n1K\n<",
        ">\n4K\n<",
        ">\n16K\n<",
    ] {
        assert!(latency.contains(text), "{text}");
    }
    let scaling = read(&d.path().join("scaling_all_reduce.svg"));
    assert!(
        scaling.contains(">\n4\n<") && scaling.contains(">\n16\n<"),
        "SIP ticks are plain counts"
    );
}

//! The `kernbench` binary end to end: `topo` and `bench` output, Graphviz
//! files, exit codes and error messages (docs/guide.md §CLI).

use kernbench::spec::{System, presets};
use kernbench::sweep::Plan;
use kernbench::topology::Topology;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Exit code of the CLI for every error it reports itself (`error: ...`).
const USER_ERROR: i32 = 2;

/// The result of one run of the binary.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Panics with both streams unless the run exited with `code`.
    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected exit status\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// An error the CLI reported itself: exit 2, `error: ` first, no panic.
    fn expect_user_error(&self) -> &Self {
        self.expect_code(USER_ERROR);
        assert!(
            self.stderr.starts_with("error: "),
            "stderr must start with 'error: ':\n{}",
            self.stderr
        );
        assert!(
            !self.stderr.contains("panicked"),
            "the CLI panicked:\n{}",
            self.stderr
        );
        self
    }
}

fn kernbench(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the kernbench binary runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

fn manifest_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The rows of the `topo` section that starts with `header` (up to the
/// next blank line).
fn section<'a>(stdout: &'a str, header: &str) -> Vec<&'a str> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(header));
    assert!(
        lines.next().is_some(),
        "no '{header}' section in:\n{stdout}"
    );
    lines.take_while(|l| !l.trim().is_empty()).collect()
}

/// The row names of a `topo` section.
fn section_rows<'a>(stdout: &'a str, header: &str) -> Vec<&'a str> {
    section(stdout, header)
        .into_iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

/// The count printed for `name` in the `topo` section that starts with
/// `header` (rows of `  name   count`).
fn section_count(stdout: &str, header: &str, name: &str) -> u64 {
    section(stdout, header)
        .into_iter()
        .find_map(|l| {
            let mut cols = l.split_whitespace();
            (cols.next() == Some(name)).then(|| cols.next())?
        })
        .unwrap_or_else(|| panic!("no '{name}' row under '{header}' in:\n{stdout}"))
        .parse()
        .unwrap_or_else(|e| panic!("'{name}' count under '{header}' is not a number: {e}"))
}

/// Hop count of the `diameter` line.
fn diameter_hops(stdout: &str) -> usize {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("diameter"))
        .unwrap_or_else(|| panic!("no diameter line in:\n{stdout}"));
    let mut cols = line.split_whitespace().skip(1);
    let hops = cols.next().expect("diameter value").parse().expect("hops");
    assert_eq!(cols.next(), Some("hops"), "{line}");
    hops
}

#[test]
fn topo_default_describes_the_embedded_4_sip_system() {
    let r = kernbench(&["topo"]);
    r.expect_code(0);
    let out = &r.stdout;
    assert!(out.contains("system      <embedded default>"), "{out}");
    assert!(
        out.contains("totals      4 SIPs x 16 cubes x 8 PEs = 512 PEs (64 cubes)"),
        "{out}"
    );
    assert_eq!(section_count(out, "nodes by kind", "pe"), 512);
    assert_eq!(section_count(out, "nodes by kind", "sip_io"), 4);
    assert_eq!(section_rows(out, "ECS entities"), ["Pe"]);
    assert_eq!(section_count(out, "ECS entities", "Pe"), 512);
    let hops = diameter_hops(out);
    assert!(hops > 0, "{out}");
    // Same figure as the library computes for the same spec.
    let expected = Topology::new(&System::embedded_default()).diameter().0;
    assert_eq!(hops, expected);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn topo_ring_4096_preset_builds_half_a_million_pes() {
    let r = kernbench(&["topo", "--preset", "ring_4096"]);
    r.expect_code(0);
    let out = &r.stdout;
    assert!(
        out.contains("system      configs/topologies/ring_4096.yaml"),
        "{out}"
    );
    assert!(
        out.contains("sips        4096 (ring_1d, grid 4096x1)"),
        "{out}"
    );
    assert!(
        out.contains("totals      4096 SIPs x 16 cubes x 8 PEs = 524288 PEs (65536 cubes)"),
        "{out}"
    );
    assert_eq!(section_count(out, "nodes by kind", "pe"), 524_288);
    assert_eq!(section_rows(out, "ECS entities"), ["Pe"]);
    assert_eq!(section_count(out, "ECS entities", "Pe"), 524_288);
    // The ring's far side is 2048 SIP hops away.
    assert!(diameter_hops(out) > 2048, "{out}");
}

#[test]
fn topo_torus_6_rect_preset_is_a_3x2_torus() {
    let r = kernbench(&["topo", "--preset", "torus_6_rect"]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("sips        6 (torus_2d, grid 3x2)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("totals      6 SIPs x 16 cubes x 8 PEs = 768 PEs (96 cubes)"),
        "{}",
        r.stdout
    );
    assert_eq!(section_count(&r.stdout, "ECS entities", "Pe"), 768);
}

#[test]
fn topo_dot_writes_sip_and_cube_graphs() {
    let dir = tempfile::tempdir().unwrap();
    // A directory that does not exist yet: --dot creates it.
    let out_dir = dir.path().join("views");
    let r = kernbench(&["topo", "--dot", out_dir.to_str().unwrap()]);
    r.expect_code(0);
    let read = |name: &str| {
        let path = out_dir.join(name);
        assert!(
            r.stdout
                .contains(&format!("wrote       {}", path.display())),
            "{}",
            r.stdout
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let sips = read("sips.dot");
    let cube = read("cube.dot");
    for (name, text) in [("sips.dot", &sips), ("cube.dot", &cube)] {
        assert!(text.starts_with("graph"), "{name}:\n{text}");
        assert!(text.trim_end().ends_with('}'), "{name}:\n{text}");
    }
    // The default system is a 4-SIP ring: 4 SIP nodes, 4 ring edges.
    for s in 0..4 {
        assert!(sips.contains(&format!("sip{s} [")), "{sips}");
    }
    assert!(sips.contains("sip3 -- sip0"), "{sips}");
    assert_eq!(sips.matches(" -- ").count(), 4, "{sips}");
    assert!(cube.contains("\"sip0.cube0.pe0\""), "{cube}");
    assert!(cube.contains("\"sip0.cube0.pe7\""), "{cube}");
    assert!(cube.contains("\"sip0.cube0.hbm\""), "{cube}");
    assert!(!cube.contains("sip0.cube0.pe8"), "{cube}");
}

/// The 1-based line of the `<-- HERE` marker of a bad spec (the header
/// comment mentions the marker too).
fn marked_line(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && l.contains("<-- HERE"))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 1, "{}: one <-- HERE marker", path.display());
    lines[0]
}

#[test]
fn topo_bad_specs_report_file_line_and_field() {
    for (file, field, problem) in [
        (
            "zero_bandwidth.yaml",
            "links.ucie.bandwidth_gbps",
            "bandwidth_gbps is 0",
        ),
        (
            "unknown_field_nested.yaml",
            "system.tick_nsec",
            "unknown field `tick_nsec`",
        ),
        (
            "wrong_type_count.yaml",
            "system.sips.count",
            "invalid type: string \"four\"",
        ),
        (
            "negative_latency.yaml",
            "links.inter_sip.latency_ns",
            "latency_ns is -300",
        ),
    ] {
        let path = manifest_path("tests/data/bad_inputs/spec").join(file);
        let r = kernbench(&["topo", "--system", path.to_str().unwrap()]);
        r.expect_user_error();
        let line = marked_line(&path);
        let head = format!("error: {}:{line}: {field}: ", path.display());
        assert!(
            r.stderr.starts_with(&head),
            "{file}: expected stderr to start with\n{head}\ngot\n{}",
            r.stderr
        );
        assert!(r.stderr.contains(problem), "{file}: {}", r.stderr);
        assert!(r.stderr.contains("; allowed: "), "{file}: {}", r.stderr);
        assert!(
            r.stdout.is_empty(),
            "{file}: nothing is built: {}",
            r.stdout
        );
    }
}

#[test]
fn topo_missing_system_file_names_the_path() {
    let r = kernbench(&["topo", "--system", "/nonexistent.yaml"]);
    r.expect_user_error();
    assert!(r.stderr.contains("/nonexistent.yaml"), "{}", r.stderr);
    assert!(r.stderr.contains("cannot read"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn topo_unknown_preset_lists_the_presets() {
    let r = kernbench(&["topo", "--preset", "nope"]);
    r.expect_user_error();
    assert!(r.stderr.contains("'nope'"), "{}", r.stderr);
    assert!(r.stderr.contains("ring_4096"), "{}", r.stderr);
    for (name, _) in presets::PRESETS {
        assert!(r.stderr.contains(name), "{name} missing: {}", r.stderr);
    }
}

#[test]
fn topo_system_and_preset_conflict() {
    let spec = manifest_path("configs/topology.yaml");
    let r = kernbench(&[
        "topo",
        "--system",
        spec.to_str().unwrap(),
        "--preset",
        "mesh_16",
    ]);
    assert_ne!(r.code, Some(0), "{}", r.stdout);
    assert!(r.stderr.contains("cannot be used with"), "{}", r.stderr);
    assert!(r.stderr.contains("--system"), "{}", r.stderr);
    assert!(r.stderr.contains("--preset"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn help_lists_commands_and_options() {
    let top = kernbench(&["--help"]);
    top.expect_code(0);
    for word in ["Usage: kernbench", "topo", "bench", "--help", "--version"] {
        assert!(top.stdout.contains(word), "{word}: {}", top.stdout);
    }
    let topo = kernbench(&["topo", "--help"]);
    topo.expect_code(0);
    for opt in ["--system <FILE>", "--preset <NAME>", "--dot <DIR>"] {
        assert!(topo.stdout.contains(opt), "{opt}: {}", topo.stdout);
    }
    // The preset list in the help names every preset.
    for (name, _) in presets::PRESETS {
        assert!(topo.stdout.contains(name), "{name}: {}", topo.stdout);
    }
    let bench = kernbench(&["bench", "--help"]);
    bench.expect_code(0);
    for opt in ["--sips", "--rounds", "--bytes", "--no-build"] {
        assert!(bench.stdout.contains(opt), "{opt}: {}", bench.stdout);
    }
    // The sweep's examples read one a line, each a command to copy.
    let sweep = kernbench(&["sweep", "--help"]);
    sweep.expect_code(0);
    let examples: Vec<&str> = sweep
        .stdout
        .lines()
        .skip_while(|l| *l != "Examples:")
        .skip(1)
        .collect();
    assert_eq!(examples.len(), 4, "{}", sweep.stdout);
    for line in examples {
        assert!(line.starts_with("  kernbench sweep"), "{line:?}");
        assert_eq!(line.matches("kernbench").count(), 1, "{line:?}");
    }
}

#[test]
fn bench_small_ring_reports_messages() {
    let r = kernbench(&[
        "bench",
        "--sips",
        "8",
        "--rounds",
        "20",
        "--bytes",
        "4096",
        "--no-build",
    ]);
    r.expect_code(0);
    // 8 SIPs x 20 rounds = 160 messages, all delivered.
    assert!(
        r.stdout
            .contains("8 SIPs x 20 rounds x 4096 B: 160 messages"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("M messages/s"), "{}", r.stdout);
    // --no-build skips the 4096-SIP build measurement.
    assert!(!r.stdout.contains("build   ring_4096"), "{}", r.stdout);
}

// ---------------------------------------------------------------------------
// `run`: the nccl-tests-style table and its errors
// ---------------------------------------------------------------------------

/// One placement's cells of a `run` line.
#[derive(Debug)]
struct Cells {
    time_us: f64,
    algbw: f64,
    busbw: f64,
    /// `N/A` unless checked (-c 1).
    wrong: String,
    pct_bound: f64,
}

/// One data line of the `run` table: both placements of one size.
#[derive(Debug)]
struct RunRow {
    size: u64,
    count: u64,
    dtype: String,
    redop: String,
    root: i64,
    out: Cells,
    inp: Cells,
    /// The bound's limiting term.
    bound_by: String,
}

/// Participants printed in the `# participants: P (...)` header line.
fn participants(stdout: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("# participants: "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no participant count in:\n{stdout}"))
}

/// The data lines of the first table: after the column header (the `#`
/// line naming `redop`), up to the footer.
fn run_rows(stdout: &str) -> Vec<RunRow> {
    let mut lines = stdout.lines().skip_while(|l| !l.contains(" redop "));
    assert!(lines.next().is_some(), "no column header in:\n{stdout}");
    lines
        .skip_while(|l| l.starts_with('#'))
        .take_while(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert!(cols.len() >= 16, "row {l:?}");
            let num = |i: usize| -> f64 {
                cols[i]
                    .parse()
                    .unwrap_or_else(|e| panic!("column {i} of {l:?}: {e}"))
            };
            let cells = |at: usize| Cells {
                time_us: num(at),
                algbw: num(at + 1),
                busbw: num(at + 2),
                wrong: cols[at + 3].to_string(),
                pct_bound: num(at + 4),
            };
            RunRow {
                size: cols[0].parse().expect("size"),
                count: cols[1].parse().expect("count"),
                dtype: cols[2].to_string(),
                redop: cols[3].to_string(),
                root: cols[4].parse().expect("root"),
                out: cells(5),
                inp: cells(10),
                bound_by: cols[15..].join(" "),
            }
        })
        .collect()
}

/// The header of the torus_6_rect ring run: what ran, on what, and the
/// columns of both placements.
fn assert_header_and_columns(out: &str) {
    let header = out
        .lines()
        .find(|l| l.starts_with('#'))
        .unwrap_or_else(|| panic!("no header line in:\n{out}"));
    assert!(header.starts_with("# all_reduce / ring"), "{header}");
    assert!(header.contains("op sum"), "{header}");
    assert!(
        out.contains("# system: configs/topologies/torus_6_rect.yaml: 6 SIPs torus_2d 3x2"),
        "{out}"
    );
    assert!(
        out.contains("# ccl: ring (algorithm ring): buffer "),
        "{out}"
    );
    assert!(out.contains("no warmup or iterations"), "{out}");
    // 6 SIPs x 16 cubes, one participant per cube.
    assert_eq!(participants(out), 96, "{out}");
    let columns = out
        .lines()
        .find(|l| l.contains(" redop "))
        .unwrap_or_else(|| panic!("no column header in:\n{out}"));
    for col in [
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "%bound",
    ] {
        assert!(columns.contains(col), "{col} missing: {columns}");
    }
    assert!(
        out.contains("out-of-place") && out.contains("in-place"),
        "{out}"
    );
}

#[test]
fn run_ring_all_reduce_on_torus_6_rect_prints_a_verified_table() {
    let r = kernbench(&[
        "run",
        "--preset",
        "torus_6_rect",
        "--collective",
        "all_reduce",
        "--algorithm",
        "ring",
        "--min-bytes",
        "4K",
        "--max-bytes",
        "16K",
        "--verify",
    ]);
    r.expect_code(0);
    let out = &r.stdout;
    assert_header_and_columns(out);
    let p = participants(out);
    let rows = run_rows(out);
    let sizes: Vec<u64> = rows.iter().map(|r| r.size).collect();
    assert_eq!(sizes, [4096, 8192, 16384], "{out}");
    let factor = 2.0 * (p as f64 - 1.0) / p as f64;
    for row in &rows {
        assert_eq!(
            (row.dtype.as_str(), row.redop.as_str(), row.root),
            ("half", "sum", -1)
        );
        assert_eq!(
            (row.out.wrong.as_str(), row.inp.wrong.as_str()),
            ("0", "0"),
            "{row:?}"
        );
        assert!(
            [
                "participant port",
                "cube links",
                "SIP lanes",
                "HBM port",
                "latency"
            ]
            .contains(&row.bound_by.as_str()),
            "{row:?}"
        );
        assert_eq!(row.count, row.size / 2, "f16 elements: {row:?}");
        for c in [&row.out, &row.inp] {
            // Latency-bound: the bound's share is the same at these sizes.
            assert_eq!(c.pct_bound, 2.2, "{row:?}");
            // GB/s = bytes / ns; the table shows 2 decimals, so compare with
            // the exact value from size and time plus half a unit of the last digit.
            let algbw = row.size as f64 / (c.time_us * 1000.0);
            let shown = 0.005 + 1e-9;
            assert!((c.algbw - algbw).abs() <= shown, "algbw: {row:?}");
            let busbw = algbw * factor;
            assert!(
                (c.busbw - busbw).abs() <= (busbw * 0.01).max(shown),
                "busbw must be algbw x 2(P-1)/P = {busbw:.4}: {row:?}"
            );
        }
    }
    // Simulated times (deterministic): out of place, the copy of the result
    // into the output buffer comes on top of the in-place collective.
    let times: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.out.time_us, r.inp.time_us))
        .collect();
    assert_eq!(
        times,
        [(33.758, 33.578), (33.798, 33.578), (33.974, 33.674)],
        "{out}"
    );
    assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
    let util = out
        .lines()
        .position(|l| l.contains("utilization"))
        .unwrap_or_else(|| panic!("no utilization section in:\n{out}"));
    let section: Vec<&str> = out.lines().skip(util + 1).collect();
    assert!(
        section
            .iter()
            .any(|l| l.trim_start().starts_with("link inter_sip")),
        "{out}"
    );
    assert!(
        section
            .iter()
            .any(|l| l.trim_start().starts_with("port hbm")),
        "{out}"
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn run_rejects_a_collective_the_algorithm_does_not_support() {
    let r = kernbench(&[
        "run",
        "--algorithm",
        "adr0032",
        "--collective",
        "reduce_scatter",
        "--max-bytes",
        "4K",
    ]);
    r.expect_user_error();
    for word in ["adr0032", "reduce_scatter", "supports all_reduce"] {
        assert!(r.stderr.contains(word), "{word}: {}", r.stderr);
    }
    // Nothing was measured.
    let rows = r
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert_eq!(rows, 0, "{}", r.stdout);
}

#[test]
fn run_unknown_algorithm_lists_the_entries() {
    let r = kernbench(&["run", "--algorithm", "nope"]);
    r.expect_user_error();
    assert!(r.stderr.contains("'nope'"), "{}", r.stderr);
    for name in [
        "defaults",
        "adr0032",
        "adr0032_pipelined",
        "ring",
        "hier_lanes",
        "tree",
        "pairwise",
        "bruck",
    ] {
        assert!(r.stderr.contains(name), "{name} not listed: {}", r.stderr);
    }
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn run_rejects_min_bytes_above_max_bytes() {
    let r = kernbench(&["run", "--min-bytes", "1K", "--max-bytes", "512"]);
    r.expect_user_error();
    assert!(r.stderr.contains("--min-bytes"), "{}", r.stderr);
    assert!(
        r.stderr.contains("1024") && r.stderr.contains("512"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn run_rejects_a_size_with_an_unknown_suffix() {
    let r = kernbench(&["run", "--min-bytes", "12Q"]);
    assert_ne!(r.code, Some(0), "{}", r.stdout);
    assert!(r.stderr.contains("is not a size"), "{}", r.stderr);
    assert!(r.stderr.contains("--min-bytes"), "{}", r.stderr);
    assert!(r.stderr.contains("12Q"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn run_bad_ccl_file_reports_file_line_and_field() {
    let path = manifest_path("tests/data/bad_inputs/ccl/unknown_field_entry.yaml");
    let r = kernbench(&["run", "--ccl", path.to_str().unwrap()]);
    r.expect_user_error();
    let line = marked_line(&path);
    let head = format!("error: {}:{line}: algorithms.ring.n_slot: ", path.display());
    assert!(
        r.stderr.starts_with(&head),
        "expected stderr to start with\n{head}\ngot\n{}",
        r.stderr
    );
    assert!(r.stderr.contains("unknown field `n_slot`"), "{}", r.stderr);
    assert!(r.stderr.contains("; allowed: "), "{}", r.stderr);
    assert!(r.stderr.contains("n_slots"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn run_help_lists_its_options() {
    let r = kernbench(&["run", "--help"]);
    r.expect_code(0);
    for opt in [
        "--collective",
        "--algorithm",
        "--op",
        "--min-bytes",
        "--max-bytes",
        "--step-factor",
        "--ccl",
        "--verify",
        "--system",
        "--preset",
        "-b, --min-bytes",
        "-e, --max-bytes",
        "-f, --step-factor",
        "-o, --op",
        "-c, --verify",
        "--csv <FILE>",
        "--json <FILE>",
    ] {
        assert!(r.stdout.contains(opt), "{opt}: {}", r.stdout);
    }
    // Why there is no -n / -w.
    assert!(
        r.stdout.contains("There are no iteration or warmup counts")
            && r.stdout.contains("the simulator is deterministic"),
        "{}",
        r.stdout
    );
    // The collectives and ops clap accepts.
    for value in [
        "all_reduce",
        "reduce_scatter",
        "all_gather",
        "broadcast",
        "all_to_all",
        "sum",
        "max",
    ] {
        assert!(r.stdout.contains(value), "{value}: {}", r.stdout);
    }
}

#[test]
fn run_algorithm_all_compares_every_entry_and_names_the_best_per_size() {
    let r = kernbench(&[
        "run",
        "--preset",
        "torus_6_rect",
        "--collective",
        "broadcast",
        "--algorithm",
        "all",
        "--min-bytes",
        "4K",
        "--max-bytes",
        "16K",
        "--step-factor",
        "4",
        "--verify",
    ]);
    r.expect_code(0);
    let out = &r.stdout;
    // Broadcast is supported by ring, bidir_ring, tree, dbtree, dims and
    // hier_lanes (and their ccl entries: bidir_ring and hier_lanes with 4
    // and 16 slots).
    const ENTRIES: [&str; 8] = [
        "ring",
        "bidir_ring",
        "bidir_ring_deep",
        "tree",
        "dbtree",
        "dims",
        "hier_lanes",
        "hier_lanes_deep",
    ];
    let tables: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("# broadcast / "))
        .collect();
    assert_eq!(tables.len(), 8, "{out}");
    // Each table names its entry.
    for entry in ENTRIES {
        assert!(
            tables.contains(&format!("# broadcast / {entry}, op sum").as_str()),
            "{out}"
        );
    }
    let checked: Vec<RunRow> = out
        .split("# broadcast / ")
        .skip(1)
        .flat_map(run_rows)
        .collect();
    assert_eq!(checked.len(), 16, "8 entries x 2 sizes:\n{out}");
    for row in &checked {
        assert_eq!((row.redop.as_str(), row.root), ("none", 0), "{row:?}");
        assert_eq!(
            (row.out.wrong.as_str(), row.inp.wrong.as_str()),
            ("0", "0"),
            "{row:?}"
        );
    }
    let best = out
        .split("# best per size (of 8 entries)\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    let rows: Vec<&str> = best.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{best}");
    for (row, size) in rows.iter().zip(["4096", "16384"]) {
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(f[0], size, "{row}");
        assert!(ENTRIES.contains(&f[1]), "{row}");
        assert!(row.ends_with('x'), "the runner-up's ratio: {row}");
    }
    let r = kernbench(&["run", "--algorithm", "all", "--trace", "t.json"]);
    r.expect_user_error();
    assert!(
        r.stderr.contains("allowed: --algorithm NAME"),
        "{}",
        r.stderr
    );
}

#[test]
fn run_all_to_all_pairwise_verifies_and_refuses_sizes_that_do_not_split() {
    let r = kernbench(&[
        "run",
        "--collective",
        "all_to_all",
        "--algorithm",
        "pairwise",
        "--max-bytes",
        "16K",
        "--verify",
    ]);
    r.expect_code(0);
    let out = &r.stdout;
    assert!(out.contains("# all_to_all / pairwise"), "{out}");
    let rows = run_rows(out);
    assert_eq!(rows.len(), 5, "1K..16K:\n{out}");
    for row in &rows {
        assert_eq!((row.redop.as_str(), row.root), ("none", -1), "{row:?}");
        assert_eq!(
            (row.out.wrong.as_str(), row.inp.wrong.as_str()),
            ("0", "0"),
            "{row:?}"
        );
    }
    // torus_6_rect: 6 SIPs x 16 cubes = 96 participants; 1 KiB is not 96 blocks.
    let r = kernbench(&[
        "run",
        "--preset",
        "torus_6_rect",
        "--collective",
        "all_to_all",
        "--algorithm",
        "pairwise",
    ]);
    r.expect_user_error();
    for part in [
        "1024 B per participant over 96 participants",
        "a multiple of 192 B",
        "e.g. 960 B or 1152 B",
    ] {
        assert!(r.stderr.contains(part), "{part}: {}", r.stderr);
    }
}

/// `tp-mlp` prints one row per TP size with the error, the breakdown and
/// the configuration its all-reduce ran: by default the autotuner's pick
/// (`auto`, here dims); a TP size that does not fit the layer sizes is a
/// user error naming them.
#[test]
fn tp_mlp_prints_error_and_breakdown() {
    let r = kernbench(&["tp-mlp", "--tp", "1,2"]);
    r.expect_code(0);
    assert!(r.stdout.contains("; all-reduce 'auto';"), "{}", r.stdout);
    let rows: Vec<&str> = r.stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 3, "{}", r.stdout);
    assert!(rows[0].contains("max|err|") && rows[0].ends_with("launch+wait  all-reduce"));
    let tp2: Vec<&str> = rows[2].split_whitespace().collect();
    assert_eq!(&tp2[..2], ["2", "2"]);
    assert_eq!((tp2[2], tp2[10]), ("1.810e-3", "dims"), "{}", r.stdout);
    let r = kernbench(&["tp-mlp", "--tp", "3"]);
    r.expect_user_error();
    assert!(
        r.stderr
            .starts_with("error: --d-hidden 2048 over --tp 3 ranks and the 16 cubes")
            && r.stderr.contains("a multiple of 48 for --tp 3"),
        "{}",
        r.stderr
    );
}

/// The default system with one cube per SIP: 4 participants, quick to check.
fn one_cube_system(dir: &Path) -> PathBuf {
    let spec = std::fs::read_to_string(manifest_path("configs/topology.yaml"))
        .unwrap()
        .replace("cube_mesh: { w: 4, h: 4 }", "cube_mesh: { w: 1, h: 1 }");
    let system = dir.join("four.yaml");
    std::fs::write(&system, spec).unwrap();
    system
}

/// The `--csv` file's records: one per size and placement (out of place
/// first), holding the numbers the table shows.
fn records_match_table(csv_path: &Path, rows: &[RunRow]) -> Vec<kernbench::nccl_table::Record> {
    let mut reader = csv::Reader::from_path(csv_path).unwrap();
    let records: Vec<kernbench::nccl_table::Record> =
        reader.deserialize().map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), 2 * rows.len());
    for (k, row) in rows.iter().enumerate() {
        let (o, i) = (&records[2 * k], &records[2 * k + 1]);
        assert_eq!(
            (o.placement.as_str(), i.placement.as_str()),
            ("out_of_place", "in_place")
        );
        assert_eq!(
            (o.bytes, i.count, i.wrong, o.wrong),
            (row.size, row.count as usize, Some(0), Some(0))
        );
        for (rec, cells) in [(o, &row.out), (i, &row.inp)] {
            assert_eq!(
                format!("{:.3}", rec.time_us),
                format!("{:.3}", cells.time_us)
            );
            assert_eq!(
                format!("{:.2}", rec.busbw_gbps),
                format!("{:.2}", cells.busbw)
            );
            assert_eq!(rec.time_us, rec.ticks as f64 / 1000.0, "1 ns ticks");
        }
    }
    records
}

/// Issue 12's acceptance: nccl-tests' flags give its table with both
/// placements and the footer, and `--csv`/`--json` hold the same numbers.
#[test]
fn run_with_nccl_tests_flags_prints_both_placements_and_writes_csv_and_json() {
    let d = tempfile::tempdir().unwrap();
    let system = one_cube_system(d.path());
    let (csv_path, json_path) = (d.path().join("r.csv"), d.path().join("r.json"));
    let r = kernbench(&[
        "run",
        "--system",
        system.to_str().unwrap(),
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "4",
        "-o",
        "max",
        "-c",
        "1",
        "--csv",
        csv_path.to_str().unwrap(),
        "--json",
        json_path.to_str().unwrap(),
    ]);
    r.expect_code(0);
    let out = &r.stdout;
    assert_eq!(participants(out), 4, "{out}");
    assert!(out.contains("op max"), "{out}");
    let rows = run_rows(out);
    let sizes: Vec<u64> = rows.iter().map(|r| r.size).collect();
    assert_eq!(sizes, [1024, 4096, 16384, 65536, 262144, 1048576], "{out}");
    for row in &rows {
        assert_eq!(
            (row.dtype.as_str(), row.redop.as_str(), row.root),
            ("half", "max", -1)
        );
        assert_eq!(
            (row.out.wrong.as_str(), row.inp.wrong.as_str()),
            ("0", "0"),
            "{row:?}"
        );
    }
    assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
    let records = records_match_table(&csv_path, &rows);
    // Simulated ticks, pinned (the simulator is deterministic).
    let ticks: Vec<(u64, u64)> = records
        .chunks(2)
        .map(|p| (p[0].ticks, p[1].ticks))
        .collect();
    // Out of place adds the copy: 1 MiB read and written through the cube's
    // HBM port (256 GB/s) is 8192 ticks, 8242 with latency and launch.
    assert_eq!(
        ticks,
        [
            (2260, 2128),
            (2365, 2185),
            (2898, 2598),
            (4434, 3654),
            (9976, 7878),
            (25661, 17419)
        ],
        "{out}"
    );
    let avg = records.iter().map(|r| r.busbw_gbps).sum::<f64>() / 12.0;
    assert!(
        out.contains(&format!("# Avg bus bandwidth    : {avg:.3} GB/s")),
        "{avg}\n{out}"
    );
    // The JSON holds the very same records.
    let json: Vec<kernbench::nccl_table::Record> =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json, records);
    // Without -c nothing is checked: N/A in the table, empty in the CSV.
    let r = kernbench(&[
        "run",
        "--system",
        system.to_str().unwrap(),
        "-e",
        "2K",
        "--csv",
        csv_path.to_str().unwrap(),
    ]);
    r.expect_code(0);
    assert!(
        run_rows(&r.stdout)
            .iter()
            .all(|row| row.out.wrong == "N/A" && row.inp.wrong == "N/A")
    );
    assert!(
        r.stdout.contains("# Out of bounds values : N/A"),
        "{}",
        r.stdout
    );
    let text = std::fs::read_to_string(&csv_path).unwrap();
    let wrong = text
        .lines()
        .next()
        .and_then(|h| h.split(',').position(|c| c == "wrong"))
        .expect("a wrong column");
    assert!(
        text.lines()
            .skip(1)
            .all(|l| l.split(',').nth(wrong) == Some("")),
        "wrong is empty:\n{text}"
    );
}

/// `list` names every preset, plan and ccl entry, each entry with what its
/// algorithm supports; `list algorithms` shows only that part.
#[test]
fn list_shows_presets_plans_and_what_each_algorithm_supports() {
    let r = kernbench(&["list"]);
    r.expect_code(0);
    let out = &r.stdout;
    assert!(
        out.contains(
            "  mesh_16          16 SIPs mesh_2d_no_wrap 4x4, 16 cubes x 8 PEs per SIP, 2048 PEs"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "  ring_4096_lean   4096 SIPs ring_1d 4096x1, 1 cubes x 1 PEs per SIP, 4096 PEs"
        ),
        "{out}"
    );
    for plan in [
        "default", "scaling", "smoke", "bounds", "large", "tp", "train",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("  {plan} "))),
            "plan {plan}: {out}"
        );
    }
    let entry = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no entry {name}: {out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        entry("ring"),
        "ring ring all_reduce, reduce_scatter, all_gather, broadcast, reduce ring_1d, torus_2d, mesh_2d_no_wrap"
    );
    assert_eq!(
        entry("hier_lanes"),
        "hier_lanes hier_lanes all_reduce, reduce_scatter, all_gather, broadcast, reduce ring_1d, torus_2d, mesh_2d_no_wrap"
    );
    assert_eq!(
        entry("pairwise"),
        "pairwise pairwise all_to_all ring_1d, torus_2d, mesh_2d_no_wrap"
    );
    // Columns fit the longest entry name; auto is the autotuner's choice.
    assert_eq!(
        entry("adr0032_pipelined"),
        "adr0032_pipelined adr0032 all_reduce ring_1d, torus_2d, mesh_2d_no_wrap"
    );
    // An entry that names its algorithm by an alias shows the registered name.
    assert!(
        out.contains("hier_root (alias adr0032): centre-root row/column reduce"),
        "{out}"
    );
    assert!(
        entry("auto")
            .starts_with("auto chosen per size among the ccl config's autotune candidates"),
        "{out}"
    );
    let only = kernbench(&["list", "algorithms"]);
    only.expect_code(0);
    assert!(
        only.stdout.starts_with("algorithms (--algorithm NAME"),
        "{}",
        only.stdout
    );
    assert!(!only.stdout.contains("presets ("), "{}", only.stdout);
}

/// On a terminal `run` shows which size it is simulating (a long size is
/// not a silent wait), and clears the line before the size's table row.
#[test]
fn run_on_a_terminal_shows_a_progress_line_per_size() {
    let bin = env!("CARGO_BIN_EXE_kernbench");
    // `script` gives the command a terminal and copies what it shows.
    let out = Command::new("script")
        .args(["-qec", &format!("{bin} run -b 1K -e 4K"), "/dev/null"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("script (util-linux) runs");
    assert_eq!(out.status.code(), Some(0));
    let shown = String::from_utf8_lossy(&out.stdout);
    for (k, size) in ["1024", "2048", "4096"].iter().enumerate() {
        assert!(
            shown.contains(&format!(
                "\r# simulating {size} B ({}/3) ...\r\x1b[K",
                k + 1
            )),
            "{shown:?}"
        );
    }
}

/// `run` at 1 KiB with values checked on a preset or system file (`--preset
/// NAME` or `--system PATH`), within a 5 s time budget.
fn run_checked(flag: &str, system: &str) -> Run {
    kernbench(&[
        "run",
        flag,
        system,
        "-b",
        "1K",
        "-e",
        "1K",
        "-c",
        "1",
        "--max-time",
        "5",
    ])
}

#[test]
fn run_works_on_every_shipped_preset_or_refuses_it_at_once_with_an_estimate() {
    // The presets whose 1 KiB all-reduce fits the 5 s budget; the others
    // (4096 SIPs) must be refused before anything is built.
    let runs = ["mesh_16", "torus_6_rect"];
    for (name, _) in presets::PRESETS {
        let started = std::time::Instant::now();
        let r = run_checked("--preset", name);
        if runs.contains(&name) {
            r.expect_code(0);
            let rows = run_rows(&r.stdout);
            assert_eq!(rows.len(), 1, "{name}: {}", r.stdout);
            assert_eq!(
                (rows[0].out.wrong.as_str(), rows[0].inp.wrong.as_str()),
                ("0", "0"),
                "{name}"
            );
            assert!(rows[0].out.time_us > 0.0, "{name}: {}", r.stdout);
        } else {
            r.expect_user_error();
            assert!(
                r.stderr.contains(&format!(
                    "configs/topologies/{name}.yaml: this run is estimated to need"
                )),
                "{name}: {}",
                r.stderr
            );
            assert!(
                r.stderr.contains("more than the time budget of 5 s"),
                "{}",
                r.stderr
            );
            assert!(
                started.elapsed().as_secs() < 5,
                "{name} was not refused at once"
            );
        }
    }
}

#[test]
fn run_on_a_lean_ring_with_ideal_host_links_finishes_both_placements() {
    // Ideal noc and pcie links deliver the collective's launch and its
    // out-of-place copy to a PE in the same tick; both must run.
    let dir = tempfile::tempdir().unwrap();
    let lean = presets::PRESETS
        .iter()
        .find(|p| p.0 == "ring_4096_lean")
        .unwrap()
        .1;
    let path = dir.path().join("ring_2_lean.yaml");
    std::fs::write(&path, lean.replace("count: 4096", "count: 2")).unwrap();
    let r = run_checked("--system", path.to_str().unwrap());
    r.expect_code(0);
    assert_eq!(participants(&r.stdout), 2, "{}", r.stdout);
    let rows = run_rows(&r.stdout);
    assert_eq!(rows.len(), 1, "{}", r.stdout);
    assert_eq!(
        (rows[0].out.wrong.as_str(), rows[0].inp.wrong.as_str()),
        ("0", "0")
    );
    // 1 KiB over 2 SIPs: 300 ns link latency each way bounds it from below.
    assert!(rows[0].inp.time_us >= 0.3, "{}", r.stdout);
    assert!(rows[0].out.time_us >= rows[0].inp.time_us, "{}", r.stdout);
}

#[test]
fn run_honours_an_entrys_all_pes_mapper() {
    let dir = tempfile::tempdir().unwrap();
    let ccl = dir.path().join("ccl.yaml");
    std::fs::write(
        &ccl,
        "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 2 }\nalgorithms:\n  ring_every_pe: { algorithm: ring, mapper: all_pes }\n",
    )
    .unwrap();
    let r = kernbench(&[
        "run",
        "--system",
        "tests/data/doc/small.yaml",
        "--ccl",
        ccl.to_str().unwrap(),
        "--algorithm",
        "ring_every_pe",
        "-b",
        "4K",
        "-e",
        "4K",
        "-c",
        "1",
    ]);
    r.expect_code(0);
    // 4 SIPs x 2 cubes x 8 PEs, every one a participant.
    assert!(
        r.stdout
            .contains("# participants: 64 (every PE of every cube)"),
        "{}",
        r.stdout
    );
    let rows = run_rows(&r.stdout);
    assert_eq!(
        (rows[0].out.wrong.as_str(), rows[0].inp.wrong.as_str()),
        ("0", "0")
    );
}

/// Every command passes one budget before any work: autotune's estimate is
/// the sum of its simulations (every candidate at every bucket), refused at
/// once with that total, the simulation that drives it and the knobs.
#[test]
fn autotune_refuses_work_over_the_time_budget_at_once() {
    use kernbench::ccl::{CclConfig, Collective};
    let sys = presets::preset("ring_4096_lean").unwrap();
    let tuner = kernbench::autotune::Tuner::new(&sys, &CclConfig::embedded_default());
    let sizes = [1024, 4 << 20];
    let cost =
        kernbench::command_costs::autotune(&sys, tuner.candidates(), Collective::AllReduce, &sizes);
    assert!(cost.seconds() > 60.0, "{}", cost.seconds());
    let t0 = std::time::Instant::now();
    let run = kernbench(&[
        "autotune",
        "--preset",
        "ring_4096_lean",
        "--sizes",
        "1K,4M",
        "--max-time",
        "60",
        "--max-memory",
        "1000G",
    ]);
    run.expect_user_error();
    assert!(t0.elapsed().as_secs() < 20, "{:?}", t0.elapsed());
    for want in [
        format!(
            "autotune is estimated to need {:.0} s to simulate ({} part(s); the largest: ",
            cost.seconds(),
            cost.parts.len()
        ),
        "more than the time budget of 60 s".into(),
        "fewer or smaller --sizes".into(),
        "--max-time if the wait is worth it".into(),
    ] {
        assert!(run.stderr.contains(&want), "{want}\n{}", run.stderr);
    }
}

/// A run its estimate lets through but whose heap outgrows the budget
/// stops with an error naming the budget and the fixes, not an abort by the
/// operating system: a dims all-reduce of 1 MiB on 32 one-cube SIPs that
/// carries values (`-c 1`: its registers hold about three buffers of them a
/// participant, where the estimate counts one), estimated at 0.21 GiB and holding 250 MiB
/// by tick 22,956, in 1.3 s.
/// A run whose estimate counts its memory is refused before it starts: the
/// tree reduce of 64 MiB in flow mode there, whose leaves load their whole
/// buffers at once (a flow per leg of each load).
#[test]
fn a_run_whose_heap_outgrows_the_budget_its_estimate_fitted_stops_naming_it() {
    let system = manifest_path("tests/data/bench/ring_32.yaml");
    let run = |budget: &str, args: &[&str]| {
        let mut all = vec![
            "run",
            "--system",
            system.to_str().unwrap(),
            "--max-memory",
            budget,
        ];
        all.extend_from_slice(args);
        kernbench(&all)
    };
    let dims = run(
        "250M",
        &["--algorithm", "dims", "-c", "1", "-b", "1M", "-e", "1M"],
    );
    dims.expect_user_error();
    for want in [
        "error: run stopped at tick ",
        "over the memory budget of 250.0 MiB (--max-memory; ",
        "does not see all of a run's memory",
        "allowed: a smaller run (",
        "or a larger --max-memory where the machine has it",
    ] {
        assert!(dims.stderr.contains(want), "{want}\n{}", dims.stderr);
    }
    let tree = run(
        "130M",
        &[
            "--collective",
            "reduce",
            "--algorithm",
            "tree",
            "-b",
            "64M",
            "-e",
            "64M",
            "--network",
            "flow",
        ],
    );
    tree.expect_user_error();
    for want in [
        "is estimated to need 0.15 GiB of memory",
        "3.277e4 messages in flight",
        "more than the budget of 0.13 GiB",
    ] {
        assert!(tree.stderr.contains(want), "{want}\n{}", tree.stderr);
    }
}

/// tp-mlp's estimate counts a worker stack per rank and every value: TP
/// 65536 and a batch of 2^32 are refused with their memory, not aborted by
/// the allocator.
#[test]
fn tp_mlp_refuses_worlds_and_shapes_over_the_memory_budget() {
    use kernbench::tp::mlp::MlpShape;
    let base = System::embedded_default();
    let ccl = kernbench::ccl::CclConfig::embedded_default();
    let auto = ccl.entry("auto").unwrap();
    // --d-hidden splits over 65536 ranks x 16 cubes.
    let shape = MlpShape {
        d_hidden: 1 << 20,
        ..MlpShape::default()
    };
    let cost = kernbench::command_costs::tp_mlp(&base, &ccl, auto, &[65536], 1, shape).unwrap();
    let run = kernbench(&[
        "tp-mlp",
        "--tp",
        "65536",
        "--d-hidden",
        "1048576",
        "--max-memory",
        "16G",
    ]);
    run.expect_user_error();
    let want = format!(
        "tp-mlp is estimated to need {} of memory (1 part(s); the largest: tp 65536 (65536 ranks)",
        kernbench::estimate::gib(cost.peak_bytes())
    );
    assert!(run.stderr.contains(&want), "{want}\n{}", run.stderr);
    assert!(run.stderr.contains("more than the budget of 16.00 GiB"));
    let batch = kernbench(&["tp-mlp", "--batch", "4294967296", "--max-memory", "16G"]);
    batch.expect_user_error();
    assert!(
        batch.stderr.contains("a smaller --dp, --batch"),
        "{}",
        batch.stderr
    );
}

/// bench adds its phases: with every round of u64::MAX it is refused with
/// the kernel phase as the largest and --rounds as the knob.
#[test]
fn bench_refuses_rounds_over_the_time_budget() {
    let run = kernbench(&[
        "bench",
        "--rounds",
        "18446744073709551615",
        "--no-build",
        "--no-traffic",
    ]);
    run.expect_user_error();
    assert!(
        run.stderr.starts_with("error: bench is estimated to need")
            && run.stderr.contains("(1 part(s); the largest: kernel, ")
            && run.stderr.contains("fewer --rounds"),
        "{}",
        run.stderr
    );
}

/// gemm-sweep's shapes pass the budget too (one SIP of the system each).
#[test]
fn gemm_sweep_refuses_a_grid_over_the_time_budget() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g");
    let run = kernbench(&[
        "gemm-sweep",
        "--max-time",
        "0.001",
        "--out",
        out.to_str().unwrap(),
    ]);
    run.expect_user_error();
    assert!(
        run.stderr.contains("gemm-sweep is estimated to need")
            && run
                .stderr
                .contains("14 part(s); the largest: square 4096x4096x4096")
            && run.stderr.contains("more than the time budget of 0 s"),
        "{}",
        run.stderr
    );
    assert!(!out.exists(), "nothing ran, nothing was written");
}

/// `topo --dot` on a system over the budget is refused before its
/// directory is made.
#[test]
fn topo_dot_over_the_budget_makes_no_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("views");
    let run = kernbench(&["topo", "--max-memory", "1K", "--dot", out.to_str().unwrap()]);
    run.expect_user_error();
    assert!(
        run.stderr.starts_with(
            "error: <embedded default>: this run is estimated to need 0.02 GiB of memory"
        ),
        "{}",
        run.stderr
    );
    assert!(!out.exists(), "nothing was built, nothing was written");
}

/// `run --algorithm all` where every entry is over budget fails (exit 2)
/// naming each entry with its estimate, instead of an empty comparison.
#[test]
fn run_all_fails_when_every_entry_is_over_budget() {
    let run = kernbench(&[
        "run",
        "--algorithm",
        "all",
        "-b",
        "64M",
        "-e",
        "64M",
        "--max-time",
        "0.5",
    ]);
    run.expect_user_error();
    assert!(
        run.stderr
            .starts_with("error: --algorithm all: every entry that runs all_reduce here was refused before it ran (adr0032: "),
        "{}",
        run.stderr
    );
    for entry in ["ring: ", "tree: ", "hier_lanes: "] {
        assert!(run.stderr.contains(entry), "{entry}: {}", run.stderr);
    }
    assert!(!run.stdout.contains("no entry of the ccl config supports"));
}

/// A spec with sip_kinds: tp-mlp's copies with TP SIPs keep the kinds of
/// the SIPs they have (kinds listing SIPs 1 and 2 of 4); before, TP 1 and 2
/// were refused for SIP 2 "not existing".
#[test]
fn tp_mlp_runs_on_a_spec_with_sip_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("kinds.yaml");
    let yaml = kernbench::spec::DEFAULT_SYSTEM_YAML.replace(
        "    topology: ring_1d          # ring_1d | torus_2d | mesh_2d_no_wrap",
        "    topology: ring_1d\n    kinds: { half: [1, 2] }",
    ) + "\nsip_kinds:\n  half:\n    pe: { vector_lanes: 128 }\n";
    std::fs::write(&spec, yaml).unwrap();
    let run = kernbench(&["tp-mlp", "--system", spec.to_str().unwrap(), "--tp", "1,2"]);
    run.expect_code(0);
    let rows: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains("world"))
        .collect();
    assert_eq!(rows.len(), 2, "{}", run.stdout);
    // Progress goes to stderr as plain lines when it is not a terminal.
    assert!(
        run.stderr
            .contains("tp-mlp: 2/2 TP sizes (100% of the estimated work)"),
        "{}",
        run.stderr
    );
}

/// Autotune's estimate counts only the buckets its cache lacks: a second
/// run of the same sizes passes any budget; --retune counts them again.
#[test]
fn autotune_budget_counts_only_buckets_to_tune() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let csv = dir.path().join("a.csv");
    let (cache, csv) = (cache.to_str().unwrap(), csv.to_str().unwrap());
    let args = ["autotune", "--sizes", "1K", "--cache", cache, "--csv", csv];
    let first = kernbench(&args);
    first.expect_code(0);
    // Progress per simulation, plain lines when stderr is not a terminal.
    let sys = System::embedded_default();
    let ccl = kernbench::ccl::CclConfig::embedded_default();
    let tuner = kernbench::autotune::Tuner::new(&sys, &ccl);
    let n = kernbench::command_costs::autotune(
        &sys,
        tuner.candidates(),
        kernbench::ccl::Collective::AllReduce,
        &[1024],
    )
    .parts
    .len();
    let done = format!("autotune: {n}/{n} simulations (100% of the estimated work)");
    assert!(first.stderr.contains(&done), "{done}\n{}", first.stderr);
    let tiny = [&args[..], &["--max-time", "0.000001"]].concat();
    let cached = kernbench(&tiny);
    cached.expect_code(0);
    assert!(cached.stdout.contains("(cached)"), "{}", cached.stdout);
    let retune = kernbench(&[&tiny[..], &["--retune"]].concat());
    retune.expect_user_error();
    assert!(
        retune.stderr.contains("autotune is estimated to need")
            && retune.stderr.contains("more than the time budget of 0 s"),
        "{}",
        retune.stderr
    );
}

/// bench shows its phases' progress on stderr (plain lines off a terminal).
#[test]
fn bench_shows_progress_per_phase() {
    let run = kernbench(&[
        "bench",
        "--no-build",
        "--sips",
        "4",
        "--rounds",
        "4",
        "--bytes",
        "1024",
    ]);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("bench: 2/2 phases (100% of the estimated work)"),
        "{}",
        run.stderr
    );
}

/// The benchmark inputs the docs quote figures on stay runnable: each
/// system file loads, and each plan loads and has points.
#[test]
fn every_bench_input_loads() {
    let dir = manifest_path("tests/data/bench");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        if text.lines().any(|l| l.starts_with("studies:")) {
            let plan = Plan::load(path.to_str().unwrap()).unwrap_or_else(|e| panic!("{e}"));
            assert!(!plan.points().is_empty(), "{name} has no points");
        } else {
            System::from_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        names.push(name);
    }
    names.sort();
    assert_eq!(
        names,
        [
            "default_256_64m.yaml",
            "ring_256.yaml",
            "ring_32.yaml",
            "torus_256.yaml",
            "tree_reduce_256_64m.yaml"
        ]
    );
}

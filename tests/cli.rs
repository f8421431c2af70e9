//! The `kernbench` binary end to end: `topo` and `bench` output, Graphviz
//! files, exit codes and error messages (docs/guide.md §CLI).

use kernbench::spec::{System, presets};
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

/// The count printed for `name` in the `topo` section that starts with
/// `header` (rows of `  name   count` up to the next blank line).
fn section_count(stdout: &str, header: &str, name: &str) -> u64 {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(header));
    assert!(
        lines.next().is_some(),
        "no '{header}' section in:\n{stdout}"
    );
    lines
        .take_while(|l| !l.trim().is_empty())
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
    assert_eq!(section_count(out, "ECS entities", "Sip"), 4);
    assert_eq!(section_count(out, "ECS entities", "Cube"), 64);
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
    assert_eq!(section_count(out, "ECS entities", "Sip"), 4096);
    assert_eq!(section_count(out, "ECS entities", "Cube"), 65_536);
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
        let path = manifest_path("tests/data/bad_specs").join(file);
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

#[test]
fn bench_rejects_a_one_sip_ring() {
    let r = kernbench(&["bench", "--sips", "1", "--no-build"]);
    r.expect_user_error();
    assert!(r.stderr.contains("--sips"), "{}", r.stderr);
    assert!(r.stderr.contains("got 1"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

//! System spec loading: what the bad-input corpus (tests/data/bad_inputs/spec,
//! checked by bad_inputs.rs) cannot say about a refusal, and every shipped
//! spec must load.

use std::path::{Path, PathBuf};

use kernbench::spec::{SipTopology, System};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn bad_spec(name: &str) -> PathBuf {
    repo("tests/data/bad_inputs/spec").join(name)
}

/// An unknown topology's refusal lists every topology there is, so one added
/// later cannot be left out of the fix.
#[test]
fn bad_topology_name_lists_all_three() {
    let e = System::from_file(&bad_spec("bad_topology.yaml")).unwrap_err();
    assert_eq!(e.path, "system.sips.topology", "{e}");
    for name in SipTopology::NAMES {
        assert!(e.allowed.contains(name), "{name} not listed: {e}");
    }
}

#[test]
fn missing_file() {
    let name = "no_such_spec.yaml";
    let path = bad_spec(name);
    assert!(!path.exists());
    let e = System::from_file(&path).unwrap_err();
    let shown = e.to_string();
    assert_eq!((e.path.as_str(), e.line), ("(file)", None), "{shown}");
    assert!(
        shown.starts_with(&format!("{}: (file): cannot read", path.display())),
        "{shown}"
    );
    assert!(
        e.problem
            .contains(&std::io::Error::from(std::io::ErrorKind::NotFound).to_string())
            || e.problem.contains("os error"),
        "{shown}"
    );
    assert!(e.allowed.contains("readable"), "{shown}");
}

// ---------------------------------------------------------------------------
// Specs that must load
// ---------------------------------------------------------------------------

#[test]
fn embedded_default_loads() {
    let s = System::embedded_default();
    assert_eq!(s.origin, "<embedded default>");
    assert_eq!(s.n_sips(), 4);
    assert_eq!(s.spec.system.sips.topology, SipTopology::Ring1d);
    assert_eq!(s.sip_grid, (4, 1));
    assert_eq!(s.cubes_per_sip(), 16);
    assert_eq!(s.pes_per_cube(), 8);
    assert_eq!(s.total_pes(), 4 * 16 * 8);
}

#[test]
fn default_file_matches_embedded_default() {
    let s = System::from_file(&repo("configs/topology.yaml")).unwrap();
    assert_eq!(s.spec, System::embedded_default().spec);
    assert!(s.origin.ends_with("topology.yaml"), "{}", s.origin);
}

#[test]
fn every_preset_loads() {
    let dir = repo("configs/topologies");
    let mut loaded = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            let s = System::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            loaded.push((path.file_name().unwrap().to_string_lossy().into_owned(), s));
        }
    }
    loaded.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = loaded.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "mesh_16.yaml",
        "ring_4096.yaml",
        "ring_4096_lean.yaml",
        "torus_4096.yaml",
        "torus_6_rect.yaml",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let get = |n: &str| &loaded.iter().find(|(name, _)| name == n).unwrap().1;
    let shape = |s: &System| {
        (
            s.n_sips(),
            s.spec.system.sips.topology,
            s.sip_grid,
            s.cubes_per_sip(),
            s.pes_per_cube(),
        )
    };
    assert_eq!(
        shape(get("ring_4096.yaml")),
        (4096, SipTopology::Ring1d, (4096, 1), 16, 8)
    );
    assert_eq!(
        shape(get("torus_4096.yaml")),
        (4096, SipTopology::Torus2d, (64, 64), 16, 8)
    );
    assert_eq!(
        shape(get("mesh_16.yaml")),
        (16, SipTopology::Mesh2dNoWrap, (4, 4), 16, 8)
    );
    assert_eq!(
        shape(get("torus_6_rect.yaml")),
        (6, SipTopology::Torus2d, (3, 2), 16, 8)
    );
    let lean = get("ring_4096_lean.yaml");
    assert_eq!(shape(lean), (4096, SipTopology::Ring1d, (4096, 1), 1, 1));
    assert_eq!(lean.spec.cube.noc_mesh.w * lean.spec.cube.noc_mesh.h, 1);
    let m = &lean.spec.memory;
    assert!(m.tcm.ideal && m.sram.ideal && m.hbm.ideal);
    let l = &lean.spec.links;
    assert!(l.noc.ideal && l.ucie.ideal && l.pcie.ideal && !l.inter_sip.ideal);
}

fn default_with(edits: &[(&str, &str)]) -> String {
    let mut text = kernbench::spec::DEFAULT_SYSTEM_YAML.to_string();
    for (from, to) in edits {
        assert!(text.contains(from), "{from:?} not in the default spec");
        text = text.replacen(from, to, 1);
    }
    text
}

#[test]
fn rectangular_torus_of_six() {
    let text = default_with(&[
        ("count: 4", "count: 6"),
        ("topology: ring_1d", "topology: torus_2d"),
        ("# w: 2", "w: 3"),
        ("# h: 2", "h: 2"),
    ]);
    let s = System::from_yaml(&text, "t").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.n_sips(), s.sip_grid), (6, (3, 2)));
}

#[test]
fn square_fallback_of_sixteen() {
    for topology in ["torus_2d", "mesh_2d_no_wrap"] {
        let text = default_with(&[
            ("count: 4", "count: 16"),
            ("topology: ring_1d", &format!("topology: {topology}")),
        ]);
        let s = System::from_yaml(&text, "t").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.spec.system.sips.w, s.spec.system.sips.h), (None, None));
        assert_eq!(s.sip_grid, (4, 4), "{topology}");
    }
}

#[test]
fn inter_sip_cubes_are_sorted() {
    let text = default_with(&[("# inter_sip_cubes: [0, 5]", "inter_sip_cubes: [15, 0, 5]")]);
    let s = System::from_yaml(&text, "t").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.inter_sip_cubes(), vec![0, 5, 15]);
}

#[test]
fn to_yaml_round_trips() {
    let torus = default_with(&[
        ("count: 4", "count: 6"),
        ("topology: ring_1d", "topology: mesh_2d_no_wrap"),
        ("# w: 2", "w: 3"),
        ("# h: 2", "h: 2"),
        ("# inter_sip_cubes: [0, 5]", "inter_sip_cubes: [5, 0]"),
        ("tick_ns: 1.0", "tick_ns: 0.25"),
    ]);
    let mut systems = vec![
        System::embedded_default(),
        System::from_yaml(&torus, "t").unwrap(),
    ];
    systems.push(System::from_file(&repo("configs/topologies/ring_4096_lean.yaml")).unwrap());
    for s in systems {
        let yaml = s.to_yaml();
        let back = System::from_yaml(&yaml, "round trip").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(back.spec, s.spec);
        assert_eq!(back.sip_grid, s.sip_grid);
    }
}

#[test]
fn from_spec_validates_without_lines() {
    let mut spec = System::embedded_default().spec;
    assert!(System::from_spec(spec.clone(), "built").is_ok());
    spec.cube.pe_layout.corners = 0;
    let e = System::from_spec(spec, "built").unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.path.as_str(), e.line),
        ("built", "cube.pe_layout.corners", None)
    );
    assert!(
        e.to_string().starts_with("built: cube.pe_layout.corners: "),
        "{e}"
    );
}

/// A control message of gigabytes would be millions of packets per chunk
/// (a mutated spec with 4 GiB credits once grew a run past 24 GB): refused.
#[test]
fn control_messages_of_gigabytes_are_refused_naming_the_field() {
    let mut spec = kernbench::spec::System::embedded_default().spec;
    spec.control.credit_bytes = 1 << 32;
    let e = kernbench::spec::System::from_spec(spec, "test").unwrap_err();
    assert_eq!(e.path, "control.credit_bytes", "{e}");
    assert!(
        e.problem.contains("more than the limit of 1048576") && e.allowed.contains("1 to 1048576"),
        "{e}"
    );
}

/// A spec, a plan and a ccl config of 100,000 nested flow brackets (0.2 MB)
/// are refused at once by the one nesting check, and the sweep's TP-plan
/// probe does not parse such a file first.
#[test]
fn deep_flow_nesting_is_refused_at_once_in_every_config() {
    let dir = tempfile::tempdir().unwrap();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let file = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let spec = file("spec.yaml", format!("system: {deep}\n"));
    let plan = file("plan.yaml", format!("name: p\nstudies: {deep}\n"));
    let ccl = file("ccl.yaml", format!("defaults: {deep}\n"));
    let started = std::time::Instant::now();
    let errors = [
        System::from_file(&spec).unwrap_err(),
        kernbench::sweep::Plan::load(plan.to_str().unwrap()).unwrap_err(),
        kernbench::ccl::CclConfig::from_file(&ccl).unwrap_err(),
    ];
    assert!(
        kernbench::tp::study::TpPlan::find(plan.to_str().unwrap())
            .unwrap()
            .is_none()
    );
    assert!(
        started.elapsed().as_secs() < 2,
        "took {:?}",
        started.elapsed()
    );
    for e in errors {
        assert_eq!(e.problem, "YAML nested 65 levels deep", "{e}");
        assert!(e.allowed.contains("at most 64 levels"), "{e}");
    }
}

/// A file saved with a UTF-8 byte-order mark reads like one without.
#[test]
fn a_byte_order_mark_before_a_spec_plan_or_ccl_config_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let bom = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("\u{feff}{text}")).unwrap();
        p
    };
    let spec = bom(
        "spec.yaml",
        include_str!("../../configs/topologies/mesh_16.yaml"),
    );
    assert_eq!(System::from_file(&spec).unwrap().n_sips(), 16);
    let plan = bom("plan.yaml", include_str!("../data/doc/tiny.yaml"));
    let want = kernbench::sweep::Plan::load("tests/data/doc/tiny.yaml").unwrap();
    let got = kernbench::sweep::Plan::load(plan.to_str().unwrap()).unwrap();
    assert_eq!(got.file, want.file);
    let ccl = bom("ccl.yaml", include_str!("../../configs/ccl.yaml"));
    let got = kernbench::ccl::CclConfig::from_file(&ccl).unwrap();
    assert_eq!(
        got.entries,
        kernbench::ccl::CclConfig::embedded_default().entries
    );
}

//! ccl.yaml loading: what the bad-input corpus (tests/data/bad_inputs/ccl,
//! checked by bad_inputs.rs) cannot say about a refusal; the embedded default
//! must load, name only registered algorithms and resolve inheritance.

use std::path::{Path, PathBuf};

use kernbench::ccl::algorithms;
use kernbench::ccl::config::DEFAULT_CCL_YAML;
use kernbench::ccl::{AlgoConfig, CclConfig, Chunks};
use kernbench::spec::SpecError;
use kernbench::topology::address::Space;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn ccl_case(name: &str) -> PathBuf {
    repo("tests/data/bad_inputs/ccl").join(name)
}

/// Loads a bad config of the corpus, which must be rejected.
fn load_bad(name: &str) -> SpecError {
    match CclConfig::from_file(&ccl_case(name)) {
        Ok(c) => panic!("{name} was accepted: {c:?}"),
        Err(e) => e,
    }
}

/// The same text through from_yaml is refused like the file, at the same
/// field and line, under the origin it is given.
#[test]
fn every_bad_ccl_file_is_refused_alike_through_from_yaml() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(ccl_case(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 42, "{} ccl cases", files.len());
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy();
        let e = load_bad(&name);
        let text = std::fs::read_to_string(file).unwrap();
        let again = CclConfig::from_yaml(&text, "inline.yaml").unwrap_err();
        assert_eq!(
            (again.file.as_str(), &again.path, again.line),
            ("inline.yaml", &e.path, e.line),
            "{name}"
        );
    }
}

/// The fix lists every registered algorithm, so one added later is offered.
#[test]
fn unknown_algorithm_in_defaults_lists_registered_ones() {
    let e = load_bad("unknown_algorithm_defaults.yaml");
    assert_eq!(e.path, "defaults.algorithm", "{e}");
    for name in algorithms::names() {
        assert!(e.allowed.contains(name), "{name} not listed: {e}");
    }
}

/// The fix is exactly the registered algorithms, in order (an alias beside
/// its algorithm), and auto.
#[test]
fn unknown_algorithm_in_entry_lists_registered_ones() {
    let e = load_bad("unknown_algorithm_entry.yaml");
    assert_eq!(e.path, "algorithms.fast.algorithm", "{e}");
    assert_eq!(
        e.allowed,
        format!("{}, or auto", algorithms::allowed()),
        "{e}"
    );
}

#[test]
fn missing_file() {
    let path = ccl_case("no_such_ccl.yaml");
    assert!(!path.exists());
    let e = CclConfig::from_file(&path).unwrap_err();
    let shown = e.to_string();
    assert_eq!(e.file, path.display().to_string(), "{shown}");
    assert_eq!((e.path.as_str(), e.line), ("(file)", None), "{shown}");
    assert!(
        shown.starts_with(&format!("{}: (file): cannot read", path.display())),
        "{shown}"
    );
    assert!(e.problem.contains("os error"), "{shown}");
    assert!(e.allowed.contains("readable"), "{shown}");
}

// ---------------------------------------------------------------------------
// Configs that must load
// ---------------------------------------------------------------------------

fn names(c: &CclConfig) -> Vec<&str> {
    c.entries.iter().map(|e| e.name.as_str()).collect()
}

#[test]
fn embedded_default_has_the_shipped_entries() {
    let c = CclConfig::embedded_default();
    assert_eq!(c.origin, "<embedded ccl.yaml>");
    let got = names(&c);
    for want in [
        "adr0032",
        "adr0032_pipelined",
        "ring",
        "bidir_ring",
        "bidir_ring_deep",
        "hier_lanes",
        "hier_lanes_deep",
        "tree",
        "pairwise",
        "pairwise_wide",
        "bruck",
        "rhd",
        "dbtree",
        "dims",
        "torus_trees",
    ] {
        assert!(got.contains(&want), "{want} missing from {got:?}");
    }
    assert_eq!(got.len(), 15, "{got:?}");
    assert_eq!(
        c.defaults,
        AlgoConfig {
            name: "defaults".into(),
            algorithm: "ring".into(),
            buffer_kind: Space::Tcm,
            n_slots: 4,
            slot_size: 65536,
            chunks: Chunks::Auto,
            world_size: None,
            mapper: "leader_only".into(),
            validator: None,
        }
    );
}

#[test]
fn embedded_default_names_only_registered_algorithms() {
    let c = CclConfig::embedded_default();
    let registered = algorithms::names();
    for e in c.entries.iter().chain([&c.defaults]) {
        assert!(
            registered.contains(&algorithms::canonical(&e.algorithm)),
            "{}: algorithm {} is not in {registered:?}",
            e.name,
            e.algorithm
        );
        assert!(algorithms::find(&e.algorithm).is_ok(), "{}", e.name);
    }
    // Every registered algorithm is reachable through some entry.
    for name in registered {
        assert!(
            c.entries
                .iter()
                .any(|e| algorithms::canonical(&e.algorithm) == name),
            "no entry runs {name}"
        );
    }
}

#[test]
fn embedded_default_matches_the_config_file() {
    let file = CclConfig::from_file(&repo("configs/ccl.yaml")).unwrap();
    let embedded = CclConfig::embedded_default();
    assert_eq!(file.defaults, embedded.defaults);
    assert_eq!(file.entries, embedded.entries);
    assert!(file.origin.ends_with("ccl.yaml"), "{}", file.origin);
    assert_eq!(
        std::fs::read_to_string(repo("configs/ccl.yaml")).unwrap(),
        DEFAULT_CCL_YAML
    );
}

#[test]
fn embedded_entries_inherit_from_defaults() {
    let c = CclConfig::embedded_default();
    let adr = c.entry("adr0032").unwrap();
    let piped = c.entry("adr0032_pipelined").unwrap();
    assert_eq!(adr.algorithm, "adr0032");
    assert_eq!(piped.algorithm, "adr0032");
    // hier_root as first designed does not pipeline; the default depth is auto.
    assert_eq!(adr.chunks, Chunks::Fixed(1));
    assert_eq!(piped.chunks, Chunks::Fixed(8));
    assert_eq!(c.entry("ring").unwrap().chunks, Chunks::Auto);
    // The all-to-all entries set their own queues (n−1 or 2⌈log2 n⌉ per
    // participant), rhd (a step's half in up to log2 n + 1 ranges) and
    // dbtree (pieces pipelined over six queues), dims (a queue to every
    // other participant of each line), hier_lanes_deep and bidir_ring_deep
    // (chunks in flight to cover a round trip), torus_trees (pieces in flight over inter-SIP hops); every other entry inherits
    // them.
    let own_queues = [
        "pairwise",
        "pairwise_wide",
        "bruck",
        "rhd",
        "dbtree",
        "dims",
        "hier_lanes_deep",
        "bidir_ring_deep",
        "torus_trees",
    ];
    for e in c
        .entries
        .iter()
        .filter(|e| !own_queues.contains(&e.name.as_str()))
    {
        assert_eq!(e.buffer_kind, c.defaults.buffer_kind, "{}", e.name);
        assert_eq!(e.n_slots, c.defaults.n_slots, "{}", e.name);
        assert_eq!(e.slot_size, c.defaults.slot_size, "{}", e.name);
    }
    let queues = |name: &str| {
        let e = c.entry(name).unwrap();
        (e.buffer_kind, e.n_slots, e.slot_size, e.chunks)
    };
    assert_eq!(queues("pairwise"), (Space::Sram, 4, 16384, Chunks::Auto));
    assert_eq!(queues("torus_trees"), (Space::Tcm, 16, 16384, Chunks::Auto));
    assert_eq!(
        queues("pairwise_wide"),
        (Space::Sram, 2, 32768, Chunks::Auto)
    );
    assert_eq!(
        queues("hier_lanes_deep"),
        (Space::Tcm, 16, 32768, Chunks::Auto)
    );
    assert_eq!(queues("bruck"), (Space::Sram, 64, 4096, Chunks::Auto));
    assert_eq!(queues("rhd"), (Space::Tcm, 16, 8192, Chunks::Auto));
    assert_eq!(queues("dims"), (Space::Tcm, 4, 8192, Chunks::Auto));
    assert_eq!(queues("dbtree"), (Space::Tcm, 16, 16384, Chunks::Auto));
}

#[test]
fn entry_fields_override_defaults_and_omitted_ones_inherit() {
    let text = "\
defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 65536, chunks: 1 }
algorithms:
  plain:
    algorithm: tree
  custom:
    buffer_kind: hbm
    n_slots: 16
    slot_size: 4096
    chunks: 3
";
    let c = CclConfig::from_yaml(text, "inline").unwrap();
    let plain = c.entry("plain").unwrap();
    assert_eq!(
        (plain.algorithm.as_str(), plain.buffer_kind, plain.n_slots),
        ("tree", Space::Tcm, 4)
    );
    assert_eq!((plain.slot_size, plain.chunks), (65536, Chunks::Fixed(1)));
    let custom = c.entry("custom").unwrap();
    // No algorithm given: the defaults' one.
    assert_eq!(custom.algorithm, "ring");
    assert_eq!(
        (
            custom.buffer_kind,
            custom.n_slots,
            custom.slot_size,
            custom.chunks
        ),
        (Space::Hbm, 16, 4096, Chunks::Fixed(3))
    );
    assert_eq!(custom.name, "custom");
    // Entries do not change the defaults.
    assert_eq!(c.defaults.n_slots, 4);
}

#[test]
fn chunks_is_auto_or_a_number_and_a_wrong_word_names_both() {
    let text = |chunks: &str| {
        format!(
            "defaults: {{ algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 2 }}\nalgorithms:\n  r:\n    chunks: {chunks}\n"
        )
    };
    let c = CclConfig::from_yaml(&text("auto"), "inline").unwrap();
    assert_eq!(c.entry("r").unwrap().chunks, Chunks::Auto);
    assert_eq!(c.defaults.chunks, Chunks::Fixed(2));
    let e = CclConfig::from_yaml(&text("deep"), "inline").unwrap_err();
    assert_eq!(e.path, "algorithms.r.chunks", "{e}");
    assert!(e.problem.contains("'deep'"), "{e}");
    assert!(e.allowed.contains("auto"), "{e}");
}

#[test]
fn algorithms_section_is_optional() {
    let text =
        "defaults: { algorithm: tree, buffer_kind: sram, n_slots: 2, slot_size: 2, chunks: 1 }\n";
    let c = CclConfig::from_yaml(text, "inline").unwrap();
    assert!(c.entries.is_empty());
    assert_eq!(c.entry("defaults").unwrap().buffer_kind, Space::Sram);
}

#[test]
fn entry_defaults_is_the_defaults_entry() {
    let c = CclConfig::embedded_default();
    let d = c.entry("defaults").unwrap();
    assert_eq!(d, &c.defaults);
    assert_eq!(d.name, "defaults");
}

#[test]
fn unknown_entry_lists_the_entry_names() {
    let c = CclConfig::embedded_default();
    let (problem, msg) = c.entry("nope").unwrap_err();
    assert_eq!(
        problem,
        "<embedded ccl.yaml> has no algorithm entry named 'nope'"
    );
    assert!(msg.starts_with("an entry of the ccl config: "), "{msg}");
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
        assert!(msg.contains(name), "{name} not listed: {msg}");
    }
}

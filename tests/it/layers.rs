//! The workspace's layering, read from its Cargo.toml files and sources: each
//! crate depends only on the crates below it in [`LAYERS`], and no source file
//! of a crate names a crate above it (or an external crate its layer never
//! names). Adding a crate is one line in [`LAYERS`]. Inside the engine, the
//! leaf modules of [`ENGINE_LEAVES`] (the clock, the shared ids, the plugin
//! trait, the trace) name no model module.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// A workspace crate and the external crates it must never name.
struct Layer {
    name: &'static str,
    never: &'static [&'static str],
}

/// The workspace crates, lowest first: each may depend only on those before
/// it. A new crate is one line here, at its place. The engine never names
/// YAML; the runtime never parses a file format or runs a thread pool; the
/// collective library and the distributed runtime never write tables or
/// figures; only the command line names clap outside the collective
/// library's value enums.
const LAYERS: &[Layer] = &[
    layer("kernbench-systems", &["serde_yaml"]),
    layer("kernbench-spec", &[]),
    layer("kernbench-runtime", &["serde_yaml", "rayon", "clap"]),
    layer("kernbench-ccl", &["rayon", "csv", "plotters"]),
    layer("kernbench-dist", &["rayon", "csv", "plotters", "clap"]),
    layer("kernbench-studies", &["clap"]),
    layer("kernbench", &[]),
];

const fn layer(name: &'static str, never: &'static [&'static str]) -> Layer {
    Layer { name, never }
}

/// The rule every message ends with, so a failure says what was broken.
fn rule() -> String {
    let order: Vec<&str> = LAYERS.iter().map(|l| l.name).collect();
    format!(
        "the layers, lowest first, are {}; a crate may depend only on crates below it (tests/it/layers.rs LAYERS)",
        order.join(" → ")
    )
}

/// One workspace crate as its Cargo.toml declares it.
struct Manifest {
    name: String,
    /// The crate's directory, relative to the workspace root (`.` for the root).
    dir: String,
    /// (dependency table, package name) for every dependency of every kind.
    deps: Vec<(String, String)>,
}

/// The manifest's lines with comments dropped and multi-line arrays or
/// inline tables joined, so each entry is one line.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    let mut depth = 0i32;
    for raw in text.lines() {
        let mut quote: Option<char> = None;
        for c in raw.chars() {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(open), _) if c == open => quote = None,
                (None, '#') => break,
                (None, '[' | '{') => depth += 1,
                (None, ']' | '}') => depth -= 1,
                _ => {}
            }
            pending.push(c);
        }
        pending.push(' ');
        if depth <= 0 {
            lines.push(pending.trim().to_string());
            pending.clear();
            depth = 0;
        }
    }
    lines.retain(|l| !l.is_empty());
    lines
}

/// The value of `key = "value"` inside `line` (the whole key: `package`
/// does not match `my-package`), if present.
fn string_field(line: &str, key: &str) -> Option<String> {
    let pattern = format!("{key} = \"");
    let (at, _) = line.match_indices(&pattern).find(|(at, _)| {
        line[..*at]
            .chars()
            .next_back()
            .is_none_or(|c| matches!(c, ' ' | '{' | ','))
    })?;
    let value = &line[at + pattern.len()..];
    Some(value[..value.find('"')?].to_string())
}

/// Whether a table header names a dependency table (`dependencies`,
/// `dev-dependencies`, `build-dependencies`, also under `target.…`).
fn is_dependency_table(table: &str) -> bool {
    let last = table.rsplit('.').next().unwrap_or(table);
    matches!(
        last,
        "dependencies" | "dev-dependencies" | "build-dependencies"
    )
}

/// The dependencies of a manifest's text: (table, key, package renamed to).
/// `[dependencies.foo]` tables count as the dependency `foo` of `dependencies`.
fn dependency_entries(text: &str) -> Vec<(String, String, Option<String>)> {
    let mut entries = Vec::new();
    let mut table = String::new();
    let mut in_dependency_table = false;
    for line in logical_lines(text) {
        if let Some(header) = line.strip_prefix('[') {
            table = header
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            in_dependency_table = is_dependency_table(&table);
            if let Some((parent, dep)) = table.rsplit_once('.')
                && is_dependency_table(parent)
            {
                entries.push((parent.to_string(), dep.trim_matches('"').to_string(), None));
            }
            continue;
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if in_dependency_table {
            let dep = key.split('.').next().unwrap_or(key).trim_matches('"');
            entries.push((
                table.clone(),
                dep.to_string(),
                string_field(&line, "package"),
            ));
        } else if key == "package"
            && let Some(last) = entries.last_mut()
            && table.ends_with(&format!(".{}", last.1))
        {
            last.2 = string_field(&line, "package");
        }
    }
    entries
}

/// Reads a member's manifest; `workspace_renames` maps a key of
/// `[workspace.dependencies]` to its package, for `key.workspace = true`.
fn read_manifest(root: &Path, dir: &str, workspace_renames: &BTreeMap<String, String>) -> Manifest {
    let path = root.join(dir).join("Cargo.toml");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = parse_package_name(&text)
        .unwrap_or_else(|| panic!("{}: no [package] name", path.display()));
    let deps = dependency_entries(&text)
        .into_iter()
        .filter(|(table, _, _)| !table.starts_with("workspace."))
        .map(|(table, key, package)| {
            let package = package
                .or_else(|| workspace_renames.get(&key).cloned())
                .unwrap_or(key);
            (table, package)
        })
        .collect();
    Manifest {
        name,
        dir: dir.to_string(),
        deps,
    }
}

/// `name` of the `[package]` table.
fn parse_package_name(text: &str) -> Option<String> {
    let mut in_package = false;
    for line in logical_lines(text) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && line.starts_with("name") {
            return string_field(&line, "name");
        }
    }
    None
}

/// The workspace root's members (directories) and the package each
/// `[workspace.dependencies]` key stands for.
fn workspace(root_text: &str) -> (Vec<String>, BTreeMap<String, String>) {
    let members_line = logical_lines(root_text)
        .into_iter()
        .find(|l| l.starts_with("members"))
        .expect("the root Cargo.toml lists workspace members");
    let members = members_line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    let renames = dependency_entries(root_text)
        .into_iter()
        .filter(|(table, _, _)| table == "workspace.dependencies")
        .map(|(_, key, package)| (key.clone(), package.unwrap_or(key)))
        .collect();
    (members, renames)
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every workspace member's manifest.
fn manifests() -> Vec<Manifest> {
    let root = workspace_root();
    let root_text = fs::read_to_string(root.join("Cargo.toml")).expect("root Cargo.toml");
    let (members, renames) = workspace(&root_text);
    members
        .iter()
        .map(|dir| read_manifest(&root, dir, &renames))
        .collect()
}

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.name == name)
}

/// Every dependency that breaks the layering, as a message naming the crate,
/// its manifest table, the dependency and the rule.
fn dependency_violations(manifests: &[Manifest]) -> Vec<String> {
    let mut violations = Vec::new();
    for m in manifests {
        let Some(own) = layer_of(&m.name) else {
            continue;
        };
        for (table, dep) in &m.deps {
            let at = format!("{} ({}/Cargo.toml [{table}])", m.name, m.dir);
            match layer_of(dep) {
                Some(layer) if layer > own => violations.push(format!(
                    "{at} depends on {dep}, which is above it: {}",
                    rule()
                )),
                _ if LAYERS[own].never.contains(&dep.as_str()) => violations.push(format!(
                    "{at} depends on {dep}, which its layer never names (tests/it/layers.rs LAYERS)"
                )),
                _ => {}
            }
        }
    }
    violations
}

/// The crate's Rust name: `kernbench-spec` is written `kernbench_spec`.
fn rust_name(package: &str) -> String {
    package.replace('-', "_")
}

/// Lines of `text` that name the Rust crate `krate` as a path (`krate::`) or
/// an `extern crate`; `kernbench::` does not match inside `my_kernbench::`.
fn lines_naming(text: &str, krate: &str) -> Vec<usize> {
    let path = format!("{krate}::");
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let names = |line: &str| {
        line.match_indices(&path)
            .any(|(at, _)| !line[..at].chars().next_back().is_some_and(is_ident))
            || line.split("extern crate ").skip(1).any(|rest| {
                rest.strip_prefix(krate)
                    .is_some_and(|after| !after.starts_with(is_ident))
            })
    };
    (1..)
        .zip(text.lines())
        .filter(|(_, l)| names(l))
        .map(|(n, _)| n)
        .collect()
}

/// What a crate at layer `own` may not name: every crate above it, and the
/// external crates of its layer's `never` list.
fn forbidden_names(own: usize) -> Vec<(String, String)> {
    let above = LAYERS[own + 1..].iter().map(|l| {
        (
            rust_name(l.name),
            format!("{}, which is above it: {}", l.name, rule()),
        )
    });
    let never = LAYERS[own].never.iter().map(|n| {
        (
            rust_name(n),
            format!("{n}, which its layer never names (tests/it/layers.rs LAYERS)"),
        )
    });
    above.chain(never).collect()
}

/// Violations in one source file of the crate at layer `own`.
fn source_violations(own: usize, file: &str, text: &str) -> Vec<String> {
    let mut violations = Vec::new();
    for (krate, why) in forbidden_names(own) {
        for line in lines_naming(text, &krate) {
            violations.push(format!(
                "{file}:{line} of {} names `{krate}`: {why}",
                LAYERS[own].name
            ));
        }
    }
    violations
}

/// The `.rs` files under `dir`, skipping build output, hidden directories and
/// the directories of other members (`skip`).
fn rust_files(dir: &Path, skip: &[PathBuf], out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') && !skip.contains(&path) {
                rust_files(&path, skip, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn workspace_members_are_the_declared_layers() {
    let mut members: Vec<String> = manifests().into_iter().map(|m| m.name).collect();
    let mut declared: Vec<String> = LAYERS.iter().map(|l| l.name.to_string()).collect();
    members.sort();
    declared.sort();
    assert_eq!(
        members, declared,
        "every workspace member has one line in tests/it/layers.rs LAYERS, at its place (lowest first)"
    );
}

#[test]
fn each_crate_depends_only_on_crates_below_it() {
    let found = manifests();
    let depends = |name: &str, dep: &str| {
        let m = found.iter().find(|m| m.name == name).expect(name);
        m.deps.iter().any(|(t, d)| t == "dependencies" && d == dep)
    };
    // The parse finds the real edges, so an empty result below means something.
    assert!(depends("kernbench", "kernbench-spec"));
    assert!(depends("kernbench", "kernbench-systems"));
    assert!(depends("kernbench-spec", "kernbench-systems"));
    assert!(depends("kernbench-runtime", "kernbench-spec"));
    assert!(depends("kernbench-ccl", "kernbench-runtime"));
    assert!(depends("kernbench-dist", "kernbench-ccl"));
    assert!(depends("kernbench-studies", "kernbench-dist"));
    assert!(depends("kernbench", "kernbench-studies"));
    // The root's dev-dependency on itself (test-only features) is not upward.
    let violations = dependency_violations(&found);
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn no_source_names_a_crate_above_its_own() {
    let root = workspace_root();
    let found = manifests();
    let dir_of = |m: &Manifest| {
        if m.dir == "." {
            root.clone()
        } else {
            root.join(&m.dir)
        }
    };
    let dirs: Vec<PathBuf> = found.iter().map(dir_of).collect();
    let mut violations = Vec::new();
    let mut files_read = 0;
    for (m, dir) in found.iter().zip(&dirs) {
        let own = layer_of(&m.name).expect("every member is a layer");
        let others: Vec<PathBuf> = dirs.iter().filter(|d| *d != dir).cloned().collect();
        let mut files = Vec::new();
        rust_files(dir, &others, &mut files);
        for file in files {
            let text =
                fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let shown = file
                .strip_prefix(&root)
                .unwrap_or(&file)
                .display()
                .to_string();
            violations.extend(source_violations(own, &shown, &text));
            files_read += 1;
        }
    }
    assert!(
        files_read > 100,
        "only {files_read} source files found under {}",
        root.display()
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn an_upward_dependency_is_named_with_its_crate_table_and_rule() {
    let engine = r#"
[package]
name = "kernbench-systems"

[dependencies]
bevy_ecs.workspace = true
my-package = "1"
serde_yaml = "0.9"

[dev-dependencies.spec]   # renamed
package = "kernbench-spec"
path = "../spec"

[target.'cfg(unix)'.build-dependencies]
kernbench = { path = "..", features = [
    "test-algorithms",
] }
"#;
    let deps = dependency_entries(engine);
    let packages: Vec<Option<&str>> = deps.iter().map(|d| d.2.as_deref()).collect();
    assert_eq!(packages, [None, None, None, Some("kernbench-spec"), None]);
    let manifest = Manifest {
        name: parse_package_name(engine).expect("name"),
        dir: "systems".into(),
        deps: deps
            .into_iter()
            .map(|(t, k, p)| (t, p.unwrap_or(k)))
            .collect(),
    };
    let violations = dependency_violations(&[manifest]);
    assert_eq!(violations.len(), 3, "{violations:#?}");
    assert_eq!(
        violations[0],
        "kernbench-systems (systems/Cargo.toml [dependencies]) depends on serde_yaml, which its layer never names (tests/it/layers.rs LAYERS)"
    );
    assert_eq!(
        violations[1],
        format!(
            "kernbench-systems (systems/Cargo.toml [dev-dependencies]) depends on kernbench-spec, which is above it: {}",
            rule()
        )
    );
    assert!(violations[2].starts_with("kernbench-systems (systems/Cargo.toml [target.'cfg(unix)'.build-dependencies]) depends on kernbench, which is above it: the layers, lowest first, are kernbench-systems → kernbench-spec → kernbench-runtime → kernbench-ccl → kernbench-dist → kernbench-studies → kernbench; a crate may depend only on crates below it"), "{}", violations[2]);
}

#[test]
fn a_source_naming_a_higher_crate_is_named_with_its_line() {
    let text = "use bevy_ecs::prelude::*;\n// see my_kernbench::x\nuse kernbench_spec::spec::System;\nfn f() { ::kernbench::machine::Machine::build(); }\nextern crate kernbench;\nlet y = serde_yaml::from_str(t);\n";
    let engine = source_violations(0, "systems/src/x.rs", text);
    let lines: Vec<&str> = engine
        .iter()
        .map(|v| v.split(" of ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        lines,
        [
            "systems/src/x.rs:3",
            "systems/src/x.rs:4",
            "systems/src/x.rs:5",
            "systems/src/x.rs:6"
        ]
    );
    assert!(engine[0].starts_with("systems/src/x.rs:3 of kernbench-systems names `kernbench_spec`: kernbench-spec, which is above it: the layers"), "{}", engine[0]);
    // The spec layer may name the engine and YAML, not the root crate.
    let spec = source_violations(1, "spec/src/x.rs", text);
    assert_eq!(spec.len(), 2, "{spec:#?}");
    assert!(spec[0].starts_with(
        "spec/src/x.rs:4 of kernbench-spec names `kernbench`: kernbench, which is above it"
    ));
    assert!(source_violations(LAYERS.len() - 1, "src/x.rs", text).is_empty());
}

/// The engine's leaf modules, each with the only engine modules it may
/// name: the clock and the shared ids first, the plugin trait, then the
/// trace, which the network, IPCQ and exec models record into (so it names
/// none of them).
const ENGINE_LEAVES: &[(&str, &[&str])] = &[
    ("time", &[]),
    ("ids", &["time"]),
    ("plugin", &["time"]),
    ("trace", &["time", "ids", "plugin"]),
];

/// (line, first segment) of every `crate::…` path in the code of `text`
/// (comment lines skipped); a group `crate::{a::x, b}` gives `a` and `b`.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[at + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            found.push((line, ident(rest)));
            continue;
        };
        let (mut depth, mut start) = (0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    found.push((line, ident(&group[start..i])));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    found.push((line, ident(&group[start..i])));
                    start = i + 1;
                }
                _ => {}
            }
        }
    }
    found.retain(|(_, name)| !name.is_empty());
    found
}

/// Every path of the leaf `module` (file `file`) to an engine item outside
/// the modules it may name.
fn leaf_violations(module: &str, file: &str, text: &str) -> Vec<String> {
    let (_, allowed) = ENGINE_LEAVES
        .iter()
        .find(|(m, _)| *m == module)
        .expect("a leaf of ENGINE_LEAVES");
    crate_paths(text)
        .into_iter()
        .filter(|(_, name)| !allowed.contains(&name.as_str()))
        .map(|(line, name)| {
            format!(
                "{file}:{line} names `crate::{name}`; the engine module {module} may name only [{}] (tests/it/layers.rs ENGINE_LEAVES), so that no model module's import comes back around to it",
                allowed.join(", ")
            )
        })
        .collect()
}

#[test]
fn engine_leaf_modules_name_only_the_leaves_before_them() {
    let root = workspace_root().join("systems/src");
    let mut violations = Vec::new();
    for (module, _) in ENGINE_LEAVES {
        let file = root.join(format!("{module}.rs"));
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        violations.extend(leaf_violations(
            module,
            &format!("systems/src/{module}.rs"),
            &text,
        ));
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn a_leaf_naming_a_model_module_is_named_with_its_line() {
    let text = "//! Links to [`crate::exec`] in docs are fine.\nuse crate::time::Tick;\nuse crate::{\n    ids::Arrival,\n    network::{LinkId, MsgId},\n};\nimpl crate::plugin::Plugin for T {}\nconst P: Tick = crate::exec::PENDING;\n";
    let paths: Vec<(usize, String)> = crate_paths(text);
    let names: Vec<(usize, &str)> = paths.iter().map(|(l, n)| (*l, n.as_str())).collect();
    assert_eq!(
        names,
        [
            (2, "time"),
            (3, "ids"),
            (3, "network"),
            (7, "plugin"),
            (8, "exec")
        ]
    );
    let v = leaf_violations("trace", "systems/src/trace.rs", text);
    assert_eq!(v.len(), 2, "{v:#?}");
    assert_eq!(
        v[0],
        "systems/src/trace.rs:3 names `crate::network`; the engine module trace may name only [time, ids, plugin] (tests/it/layers.rs ENGINE_LEAVES), so that no model module's import comes back around to it"
    );
    assert!(
        v[1].starts_with("systems/src/trace.rs:8 names `crate::exec`"),
        "{}",
        v[1]
    );
    assert_eq!(
        leaf_violations("time", "systems/src/time.rs", text).len(),
        5
    );
}

/// The collective library's `config` module names no other module of its
/// crate (`crate::…`, or `super::super::…` out of it): `algorithms` uses
/// config's types, so a config file naming the registry would make the two
/// depend on each other (the registry's checks of a ccl.yaml are in
/// `ccl/src/load.rs`, above both).
#[test]
fn ccl_config_names_no_other_module_of_its_crate() {
    let dir = workspace_root().join("ccl/src/config");
    let mut files = Vec::new();
    rust_files(&dir, &[], &mut files);
    assert!(files.len() >= 5, "ccl/src/config holds {files:?}");
    let mut violations = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (line, name) in crate_paths(&text) {
            violations.push(format!("{}:{line} names `crate::{name}`", file.display()));
        }
        if text.contains("super::super") {
            violations.push(format!("{} names `super::super`", file.display()));
        }
    }
    assert!(
        violations.is_empty(),
        "{}; config sits below algorithms, which uses its types",
        violations.join("\n")
    );
}

//! Property tests over mutated inputs: the default system spec and a small
//! sweep plan with random fields replaced by hostile values. Whatever the
//! mutation, the program never panics or hangs: it either refuses the input
//! (a message naming a field) or runs within a small budget to a result
//! that does not beat its α-β bound.

use crate::common;
use kernbench::ccl::{CclConfig, Collective, Communicator, Job, ReduceOp};
use kernbench::estimate::{Budget, Estimate};
use kernbench::spec::System;
use kernbench::sweep::plan::Plan;
use kernbench::sweep::run::run_point;
use kernbench_systems::memory::DataMode;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_yaml::Value;

/// A small budget: mutations that would build or run something large are
/// refused by the estimate instead of slowing the test down.
const BUDGET: Budget = Budget {
    bytes: 1 << 30,
    seconds: 2.0,
};

/// Values a hostile or careless user writes, as YAML; the last ones are
/// valid somewhere (a topology, a buffer kind, small counts and sizes).
const HOSTILE: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "-1",
    "7",
    "64",
    "1000",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "0.5",
    "1e-12",
    "1e30",
    ".nan",
    ".inf",
    "-.inf",
    "abc",
    "''",
    "[]",
    "{}",
    "true",
    "~",
    "[1, 2]",
    "4K",
    "torus_2d",
    "mesh_2d_no_wrap",
    "hbm",
    "sram",
    "ring",
    "tree",
    "adr0032",
    "hier_lanes",
    "reduce_scatter",
    "broadcast",
    "max",
    "16",
    "256",
    "64K",
    "1M",
];

fn hostile() -> impl Strategy<Value = Value> {
    prop::sample::select(HOSTILE).prop_map(|s| serde_yaml::from_str(s).expect("valid YAML"))
}

/// One edit of a field: a hostile value, or the field's own number scaled
/// (so that about half the mutated specs are valid and run).
#[derive(Debug, Clone)]
enum Edit {
    Replace(Value),
    Scale(f64),
}

impl Edit {
    fn apply(&self, old: &Value) -> Value {
        match (self, old) {
            (Edit::Replace(v), _) => v.clone(),
            (Edit::Scale(k), Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
                // Whole numbers stay whole (a scaled count is still a count).
                (Some(u), _) => Value::from((u as f64 * k).round() as u64),
                (None, Some(f)) => Value::from(f * k),
                (None, None) => Value::Number(n.clone()),
            },
            (Edit::Scale(_), other) => other.clone(),
        }
    }
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        hostile().prop_map(Edit::Replace),
        prop::sample::select(&[0.25, 0.5, 2.0, 3.0, 16.0][..]).prop_map(Edit::Scale),
    ]
}

/// Dotted paths of every scalar in `v`.
fn leaves(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            for (k, child) in m {
                let key = k.as_str().expect("string keys");
                let path = if at.is_empty() {
                    key.to_string()
                } else {
                    format!("{at}.{key}")
                };
                leaves(child, &path, out);
            }
        }
        _ => out.push(at.to_string()),
    }
}

fn edit_at(root: &mut Value, path: &str, edit: &Edit) {
    let mut cur = root;
    for key in path.split('.') {
        cur = cur.get_mut(key).expect("a path from leaves()");
    }
    *cur = edit.apply(cur);
}

/// Runs a 4 KiB collective on `sys` if the budget allows: Ok(()) when it
/// ran or was refused with a message, Err when something is wrong.
fn run_small(sys: &System, algorithm: &str, collective: Collective) -> Result<(), String> {
    let ccl = CclConfig::embedded_default();
    let config = ccl.entry(algorithm).expect("a shipped entry");
    let job = Job {
        collective,
        op: ReduceOp::Sum,
        elems: 2048,
    };
    let refused = |e: &str| {
        if e.is_empty() {
            Err("an empty error message".to_string())
        } else {
            Ok(())
        }
    };
    if let Err(e) = Communicator::check_before_build(sys, config, &job) {
        return refused(&e.to_string());
    }
    if let Err(e) = Estimate::collective(sys, config, &job, false, false).check(&BUDGET, "knobs") {
        return refused(&e);
    }
    let (mut m, comm) = match common::communicator(sys, config, DataMode::TimingOnly) {
        Ok(c) => c,
        Err(e) => return refused(&e.to_string()),
    };
    m.engine
        .world
        .insert_resource(kernbench_systems::RunLimits {
            max_ticks: Some(1 << 40),
            ..Default::default()
        });
    match comm.run(&mut m, job) {
        Ok(r) if r.ticks == 0 || r.ticks < r.bound_ticks => Err(format!(
            "{} ticks against a bound of {}",
            r.ticks, r.bound_ticks
        )),
        Ok(_) => Ok(()),
        Err(e) => refused(&e.to_string()),
    }
}

const SMALL_PLAN: &str = "
name: mutated
studies:
  - name: s
    grid:
      collective: [all_reduce]
      algorithm: [ring]
      bytes: [4K]
";

/// Axes a mutation may add to [`SMALL_PLAN`], each with values that are
/// valid on the default system (hostile ones are mixed in by [`axis`]).
const AXES: &[(&str, &[&str])] = &[
    ("bytes", &["2", "4K", "64K", "1M"]),
    (
        "collective",
        &[
            "all_reduce",
            "reduce_scatter",
            "all_gather",
            "broadcast",
            "reduce",
        ],
    ),
    (
        "algorithm",
        &["ring", "tree", "adr0032", "adr0032_pipelined", "hier_lanes"],
    ),
    ("op", &["sum", "max", "min"]),
    ("ccl.n_slots", &["1", "2", "8"]),
    ("ccl.slot_size", &["2", "4096", "65536"]),
    ("ccl.chunks", &["1", "2", "8"]),
    ("ccl.buffer_kind", &["tcm", "sram", "hbm"]),
    ("system.sips.count", &["1", "2", "4", "9"]),
    (
        "system.sips.topology",
        &["ring_1d", "torus_2d", "mesh_2d_no_wrap"],
    ),
    ("sip.cube_mesh.w", &["1", "2", "3"]),
    ("links.noc.packet_bytes", &["64", "4096", "65536"]),
    ("links.inter_sip.latency_ns", &["0", "1", "1000"]),
];

/// An axis and one or two values, three in four of them valid.
fn axis() -> impl Strategy<Value = (&'static str, Vec<Value>)> {
    prop::sample::select(AXES).prop_flat_map(|(name, valid)| {
        let value = prop_oneof![
            3 => prop::sample::select(valid).prop_map(|s| serde_yaml::from_str(s).expect("valid YAML")),
            1 => hostile(),
        ];
        (Just(name), prop::collection::vec(value, 1..3))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_mutated_spec_is_refused_or_runs_within_its_bound(
        edits in prop::collection::vec((any::<Index>(), edit()), 1..4),
        tree in any::<bool>(),
    ) {
        let mut root = serde_yaml::to_value(&System::embedded_default().spec).unwrap();
        let mut paths = Vec::new();
        leaves(&root, "", &mut paths);
        for (i, v) in edits {
            edit_at(&mut root, i.get::<String>(&paths), &v);
        }
        let text = serde_yaml::to_string(&root).unwrap();
        match System::from_yaml(&text, "mutated.yaml") {
            Err(e) => {
                prop_assert!(!e.path.is_empty() && !e.allowed.is_empty(), "{}", e);
            }
            Ok(sys) => {
                let algorithm = if tree { "tree" } else { "ring" };
                if Estimate::build(&sys).check(&BUDGET, "knobs").is_ok() {
                    let r = run_small(&sys, algorithm, Collective::AllReduce);
                    prop_assert!(r.is_ok(), "{}\n{}", r.unwrap_err(), text);
                }
            }
        }
    }

    #[test]
    fn a_mutated_plan_is_refused_or_its_points_run(
        axes in prop::collection::vec(axis(), 1..4),
    ) {
        let mut root: Value = serde_yaml::from_str(SMALL_PLAN).unwrap();
        let grid = &mut root["studies"][0]["grid"];
        for (axis, values) in axes {
            grid[axis] = Value::Sequence(values);
        }
        let text = serde_yaml::to_string(&root).unwrap();
        match Plan::from_yaml(&text, "mutated-plan.yaml") {
            Err(e) => {
                prop_assert!(!e.path.is_empty() && !e.allowed.is_empty(), "{}", e);
            }
            Ok(plan) => {
                for p in plan.points().iter().take(4) {
                    let row = run_point(&plan, p, false, None, &BUDGET, None).row;
                    prop_assert!(!row.error.contains("panicked"), "{}\n{}", row.error, text);
                    if row.error.is_empty() {
                        prop_assert!(
                            row.ticks > Some(0) && row.bound_ticks.is_some() && row.ticks >= row.bound_ticks,
                            "{:?} ticks, bound {:?}\n{}", row.ticks, row.bound_ticks, text
                        );
                    }
                }
            }
        }
    }
}

/// Values a user mistypes on a command line: zero, negative, huge, not a
/// number, empty, unicode, units, beyond u64.
const HOSTILE_ARGS: &[&str] = &[
    "0",
    "-1",
    "-4K",
    "3",
    "0.5",
    "1e30",
    "4294967296",
    "9223372036854775808",
    "18446744073709551614",
    "18446744073709551616",
    "abc",
    "",
    "ü",
    "１２",
    "64G",
    "1T",
];

/// One argument of a base command line: a flag with its value, a flag
/// alone, or a positional value.
type Arg = (Option<&'static str>, Option<String>);

/// Small valid command lines, one per subcommand, cheap in the test
/// profile; paths inside `dir` (the working directory of every run).
fn base_command_lines(dir: &std::path::Path, merge_input: &str) -> Vec<(&'static str, Vec<Arg>)> {
    let v = |s: &str| Some(s.to_string());
    let plan = dir.join("plan.yaml");
    std::fs::write(&plan, SMALL_PLAN).unwrap();
    let ccl = format!("{}/configs/ccl.yaml", env!("CARGO_MANIFEST_DIR"));
    vec![
        (
            "run",
            vec![
                (Some("--min-bytes"), v("1K")),
                (Some("--max-bytes"), v("2K")),
                (Some("--step-factor"), v("2")),
                (Some("--collective"), v("all_reduce")),
                (Some("--algorithm"), v("ring")),
                (Some("--max-time"), v("1")),
                (Some("--max-memory"), v("4G")),
            ],
        ),
        (
            "sweep",
            vec![
                (Some("--plan"), Some(plan.display().to_string())),
                (Some("--out"), v("swept")),
                (Some("--jobs"), v("1")),
                (Some("--max-time"), v("1")),
            ],
        ),
        (
            "autotune",
            vec![
                (Some("--sizes"), v("1K")),
                (Some("--collective"), v("all_reduce")),
                (Some("--csv"), v("a.csv")),
                (Some("--cache"), v("cache")),
                (Some("--max-time"), v("1")),
            ],
        ),
        (
            "tp-mlp",
            vec![
                (Some("--tp"), v("1,2")),
                (Some("--dp"), v("1")),
                (Some("--batch"), v("1")),
                (Some("--d-in"), v("64")),
                (Some("--d-hidden"), v("256")),
                (Some("--d-out"), v("64")),
                (Some("--max-time"), v("1")),
            ],
        ),
        (
            "gemm-sweep",
            vec![(Some("--out"), v("gemm")), (Some("--max-time"), v("3"))],
        ),
        (
            "bench",
            vec![
                (Some("--no-build"), None),
                (Some("--sips"), v("4")),
                (Some("--rounds"), v("4")),
                (Some("--bytes"), v("1024")),
                (Some("--slot-bytes"), v("1K")),
                (Some("--slots"), v("2")),
                (Some("--max-time"), v("1")),
            ],
        ),
        (
            "topo",
            vec![
                (Some("--preset"), v("mesh_16")),
                (Some("--max-time"), v("1")),
                (Some("--max-memory"), v("4G")),
            ],
        ),
        (
            "list",
            vec![(None, v("presets")), (Some("--ccl"), Some(ccl))],
        ),
        (
            "merge",
            vec![(None, v(merge_input)), (Some("--out"), v("merged"))],
        ),
    ]
}

/// What a mutation does to one argument of a base command line.
#[derive(Debug, Clone)]
enum ArgEdit {
    Value(&'static str),
    Drop,
    Duplicate,
}

fn arg_edit() -> impl Strategy<Value = (Index, ArgEdit)> {
    let edit = prop_oneof![
        4 => prop::sample::select(HOSTILE_ARGS).prop_map(ArgEdit::Value),
        1 => Just(ArgEdit::Drop),
        1 => Just(ArgEdit::Duplicate),
    ];
    (any::<Index>(), edit)
}

/// The command line after `edit` of argument `at`, and the names an error
/// about it may give: the flag, or a positional's value or placeholder.
fn mutated(sub: &str, args: &[Arg], at: usize, edit: &ArgEdit) -> (Vec<String>, Vec<String>) {
    let (flag, value) = &args[at];
    let mut names: Vec<String> = match flag {
        Some(f) => vec![f.to_string()],
        None => vec!["[WHAT]".into(), "<DIR>".into()],
    };
    let mut line = vec![sub.to_string()];
    for (k, (f, v)) in args.iter().enumerate() {
        let copies = match (k == at, edit) {
            (true, ArgEdit::Drop) => 0,
            (true, ArgEdit::Duplicate) => 2,
            _ => 1,
        };
        for _ in 0..copies {
            line.extend(f.map(String::from));
            let value = match (k == at, edit) {
                (true, ArgEdit::Value(h)) if v.is_some() => Some(h.to_string()),
                _ => v.clone(),
            };
            line.extend(value);
        }
    }
    if let (ArgEdit::Value(h), Some(_)) = (edit, value) {
        names.push(h.to_string());
        if h.starts_with('-') {
            // A path or name that looks like a flag (numbers reach their
            // flag's parser): clap names its first letters.
            names.push(format!("'{}'", &h[..2]));
        }
    }
    if let (ArgEdit::Duplicate, None, Some(v)) = (edit, flag, value) {
        // A positional given twice: clap names the extra value.
        names.push(format!("'{v}'"));
    }
    if matches!(edit, ArgEdit::Drop) {
        // Without it a default applies: an error may name what the default drives.
        names.extend(args.iter().filter_map(|a| a.0.map(String::from)));
    }
    (line, names)
}

/// Wall-clock limit of one run: the budget is 1 s of release-build time
/// (3 s for gemm-sweep), good to a factor of about 4, in the slower test profile.
const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(40);

/// Runs the binary in `dir`, killing it past [`RUN_LIMIT`]: (exit code,
/// stderr, whether it was killed).
fn run_binary(dir: &std::path::Path, line: &[String]) -> (Option<i32>, String, bool) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args(line)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kernbench binary runs");
    let t0 = std::time::Instant::now();
    let mut killed = false;
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > RUN_LIMIT {
            child.kill().unwrap();
            killed = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
        killed,
    )
}

/// A result directory of the small plan, for `merge` to read.
fn merge_input() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plan.yaml"), SMALL_PLAN).unwrap();
        let line: Vec<String> = ["sweep", "--plan", "plan.yaml", "--out", "r", "--jobs", "1"]
            .map(String::from)
            .to_vec();
        let (code, stderr, _) = run_binary(dir.path(), &line);
        assert_eq!(code, Some(0), "{stderr}");
        dir
    })
    .path()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 4,
        rng_seed: proptest::test_runner::RngSeed::Fixed(20261126),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Every subcommand with one argument mutated: no panic or signal, exit
    /// 0 or 2 (1 for sweep and merge: some points failed, each named),
    /// an error names what was mutated, nothing runs past its limit.
    #[test]
    fn a_mutated_command_line_is_refused_by_name_or_runs_within_its_limit(
        edits in prop::collection::vec(arg_edit(), 9),
    ) {
        let input = merge_input().join("r").display().to_string();
        for (k, (at, edit)) in edits.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let (sub, args) = base_command_lines(dir.path(), &input).swap_remove(k);
            let (line, names) = mutated(sub, &args, at.index(args.len()), edit);
            let (code, stderr, killed) = run_binary(dir.path(), &line);
            let shown = format!("kernbench {:?}\n{stderr}", line);
            prop_assert!(!killed, "ran past {RUN_LIMIT:?}: {shown}");
            prop_assert!(!stderr.contains("panicked"), "{shown}");
            let failed_points = matches!(sub, "sweep" | "merge") && code == Some(1);
            prop_assert!(code == Some(0) || code == Some(2) || failed_points, "exit {code:?}: {shown}");
            if failed_points {
                prop_assert!(stderr.contains("point(s) failed:"), "{shown}");
            }
            if code == Some(2) {
                prop_assert!(stderr.starts_with("error: "), "{shown}");
                // The first line, or the list clap puts under it.
                let first: Vec<&str> = stderr.lines().take_while(|l| !l.is_empty()).collect();
                let first = first.join("\n");
                prop_assert!(
                    names.iter().any(|n| !n.is_empty() && first.contains(n.as_str())),
                    "names none of {names:?}: {shown}"
                );
            }
        }
    }
}

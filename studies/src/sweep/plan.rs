//! Sweep plans (`configs/sweeps/*.yaml`): named studies whose axes range over
//! the collective, the algorithm entry, the size, the reduction, any field of
//! the system spec (a dotted path such as `system.sips.count`) and any field
//! of the algorithm's ccl entry (`ccl.buffer_kind`, `ccl.n_slots`, ...).
//! Axes under `grid` combine as a cartesian product (first axis outermost),
//! axes under `zip` advance together; a study's points are grid × zip.
//! Points whose algorithm does not implement their collective are skipped.

use kernbench_ccl::estimate::NetworkChoice;
use kernbench_ccl::{AUTO, AlgoConfig, CclConfig, Collective, ReduceOp, algorithms};
use kernbench_spec::spec::{SpecError, System, parse_yaml, presets};
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};
use std::path::Path;

/// Most points a plan may expand to.
pub const MAX_POINTS: u128 = 100_000;

/// The names of every built-in plan: the collective plans, then the TP plan.
pub fn plan_names() -> impl Iterator<Item = &'static str> {
    PLANS.iter().map(|p| p.0).chain([TP_PLAN.0, TRAIN_PLAN.0])
}

/// The built-in training-step plan (`workload: train_step`, run by `train::study`).
pub const TRAIN_PLAN: (&str, &str) = ("train", include_str!("../../../configs/sweeps/train.yaml"));

/// The built-in TP plan (`workload: tp_block`, run by `tp::study`).
pub const TP_PLAN: (&str, &str) = ("tp", include_str!("../../../configs/sweeps/tp.yaml"));

/// Plans built into the binary: (name, YAML).
pub const PLANS: [(&str, &str); 5] = [
    (
        "default",
        include_str!("../../../configs/sweeps/default.yaml"),
    ),
    (
        "scaling",
        include_str!("../../../configs/sweeps/scaling.yaml"),
    ),
    ("smoke", include_str!("../../../configs/sweeps/smoke.yaml")),
    (
        "bounds",
        include_str!("../../../configs/sweeps/bounds.yaml"),
    ),
    ("large", include_str!("../../../configs/sweeps/large.yaml")),
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// System spec: a file path or `preset:NAME`; default the embedded spec.
    #[serde(default)]
    pub system: Option<String>,
    /// Spec fields set on every point before its axes (dotted paths).
    #[serde(default)]
    pub base: Mapping,
    /// Check every result against the reference (functional mode).
    #[serde(default)]
    pub verify: bool,
    /// What the terminal report shows: `summary` (best algorithm per
    /// collective, size and topology) or `points` (every point with the
    /// simulator's own wall time and peak memory).
    #[serde(default)]
    pub print: Print,
    pub studies: Vec<Study>,
}

/// The terminal report of a sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Print {
    #[default]
    Summary,
    Points,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Study {
    pub name: String,
    #[serde(default)]
    pub grid: Mapping,
    #[serde(default)]
    pub zip: Mapping,
}

/// A loaded plan with the system and ccl config its points start from.
#[derive(Debug, Clone)]
pub struct Plan {
    pub file: PlanFile,
    pub origin: String,
    pub text: String,
    pub system: System,
    pub ccl: CclConfig,
    /// The network model of every point (`--network`); `Spec` keeps each
    /// point's own (its system's, or a `system.network.model` axis).
    pub network: NetworkChoice,
}

/// One point: where it sits in the plan and what it sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Position in the plan's expansion order (stable across runs and shards).
    pub index: usize,
    pub study: String,
    /// "key=value" assignments in axis order.
    pub assignments: Vec<(String, String)>,
}

impl Point {
    /// A stable identifier: FNV-1a of the study and assignments.
    pub fn id(&self) -> String {
        format!(
            "{:016x}",
            super::fingerprint::fnv1a(self.label().as_bytes())
        )
    }

    pub fn label(&self) -> String {
        let a: Vec<String> = self
            .assignments
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{}: {}", self.study, a.join(", "))
    }
}

/// Everything a point runs with, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub system: System,
    pub config: AlgoConfig,
    pub collective: Collective,
    pub op: ReduceOp,
    pub bytes: u64,
}

impl Resolved {
    /// The collective call (sizes were checked to be whole elements).
    pub fn job(&self) -> kernbench_ccl::Job {
        kernbench_ccl::Job {
            collective: self.collective,
            op: self.op,
            elems: (self.bytes / 2) as usize,
        }
    }

    /// The system the point simulates with `config`: its own, or its fold
    /// when the spec asks for one (`simulation.fold`) and it applies; the
    /// second value says why an asked-for fold does not (the point then
    /// runs whole).
    pub fn simulated_system(&self, config: &AlgoConfig, verify: bool) -> (System, Option<String>) {
        kernbench_ccl::fold::simulated_system(&self.system, config, &[self.job()], verify)
    }
}

fn plan_error(origin: &str, path: &str, problem: String, allowed: &str) -> SpecError {
    SpecError {
        file: origin.into(),
        path: path.into(),
        line: None,
        problem,
        allowed: allowed.into(),
    }
}

/// The longest plan name: it names the result directory.
pub const MAX_NAME_LEN: usize = 64;

/// Checks a plan's `name`, which becomes the default result directory
/// `results/<name>-<time>`: 1 to 64 letters, digits, `_`, `-` or `.`, not
/// starting with `.`, so it can neither leave `results/`, nor make nested
/// or hidden directories.
pub fn check_name(origin: &str, name: &str) -> Result<(), SpecError> {
    let problem = if name.is_empty() {
        "is empty"
    } else if name.chars().count() > MAX_NAME_LEN {
        "is longer than 64 characters"
    } else if name.starts_with('.') {
        "starts with '.'"
    } else if name.contains(['/', '\\']) {
        "holds a path separator"
    } else if name.chars().any(char::is_control) {
        "holds a control character"
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        "holds a character other than a letter, digit, '_', '-' or '.'"
    } else {
        return Ok(());
    };
    Err(plan_error(
        origin,
        "name",
        format!("the plan name {name:?} {problem}"),
        "a name matching [A-Za-z0-9_-][A-Za-z0-9_.-]{0,63} (it names the result directory results/<name>-<time>); rename the plan, e.g. name: my_study",
    ))
}

/// "64M" → 67108864 (K, M, G are powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("iB").trim_end_matches('B');
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a size; use e.g. 4096, 64K, 16M, 1G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// Sets a ccl field from a plan axis value through the same range checks as
/// ccl.yaml (`AlgoConfig::set`). Err is (problem, allowed).
fn set_ccl_field(config: &mut AlgoConfig, field: &str, v: &str) -> Result<(), (String, String)> {
    match field {
        "buffer_kind" => config.set_buffer_kind(v),
        "chunks" => config.set_chunks(v),
        "n_slots" | "slot_size" => {
            let n = v.parse::<u64>().map_err(|_| {
                (
                    format!("{field} = {v} is not a whole number"),
                    "a whole number, e.g. 4".to_string(),
                )
            })?;
            config.set(field, n)
        }
        other => Err((
            format!("unknown ccl field '{other}'"),
            "ccl.buffer_kind, ccl.n_slots, ccl.slot_size, ccl.chunks".into(),
        )),
    }
}

/// Whether a plan's `base:` or axes (`m`) set the network model.
pub fn sets_network_model(m: &Mapping) -> bool {
    m.keys()
        .any(|k| matches!(scalar(k).as_str(), "network" | "network.model"))
}

/// Whether a plan's `base:` sets the compute model.
pub fn sets_compute_model(m: &Mapping) -> bool {
    m.keys()
        .any(|k| matches!(scalar(k).as_str(), "simulation" | "simulation.compute"))
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        // Lists and mappings on one line, as a user would write them.
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other:?}")),
    }
}

/// Sets a dotted path in a YAML mapping.
fn set_path(root: &mut Value, path: &str, v: Value) -> Result<(), String> {
    let mut cur = root;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        let Value::Mapping(m) = cur else {
            return Err(format!("'{}' is not a section", parts[..i].join(".")));
        };
        if i + 1 == parts.len() {
            m.insert(Value::String((*p).into()), v);
            return Ok(());
        }
        cur = m
            .entry(Value::String((*p).into()))
            .or_insert_with(|| Value::Mapping(Mapping::new()));
    }
    Ok(())
}

/// `system` with a plan's `base:` fields (dotted spec paths) set; an error
/// names the field as `base.<path>` in plan file `origin`.
pub(crate) fn with_base(
    system: &System,
    base: &Mapping,
    origin: &str,
) -> Result<System, SpecError> {
    let mut root = serde_yaml::to_value(&system.spec).expect("spec serializes");
    for (k, v) in base {
        let key = scalar(k);
        set_path(&mut root, &key, v.clone()).map_err(|e| {
            plan_error(
                origin,
                &format!("base.{key}"),
                e,
                "dotted system-spec paths such as sip.cube_mesh.w",
            )
        })?;
    }
    let spec = serde_path_to_error::deserialize(root).map_err(|e| {
        let inner = e.inner().to_string();
        let (problem, allowed) = match inner.split_once(", expected ") {
            Some((head, expected)) => (head.to_string(), expected.to_string()),
            None => (inner, "a value of the field's type".to_string()),
        };
        plan_error(origin, &format!("base.{}", e.path()), problem, &allowed)
    })?;
    System::from_spec(spec, &system.origin).map_err(|e| SpecError {
        file: origin.into(),
        path: format!("base.{}", e.path),
        ..e
    })
}

impl Plan {
    /// An embedded plan by name, or a plan file.
    pub fn load(name_or_path: &str) -> Result<Plan, SpecError> {
        Self::load_with(name_or_path, None, None)
    }

    /// As [`Plan::load`], with another base system spec (instead of the
    /// plan's own or the embedded one) or ccl config for every point.
    pub fn load_with(
        name_or_path: &str,
        system: Option<System>,
        ccl: Option<CclConfig>,
    ) -> Result<Plan, SpecError> {
        if let Some((_, yaml)) = PLANS.iter().find(|p| p.0 == name_or_path) {
            let origin = format!("configs/sweeps/{name_or_path}.yaml");
            return Self::from_yaml_with(yaml, &origin, system, ccl);
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            return Err(plan_error(
                &format!("--plan {name_or_path:?}"),
                "(file)",
                format!(
                    "no built-in plan of that name and no such file{}",
                    kernbench_spec::names::did_you_mean(name_or_path, plan_names())
                ),
                &format!(
                    "a plan file, or one of: {}",
                    plan_names().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let text = kernbench_spec::spec::input::read_config(path, "sweep plan")?;
        Self::from_yaml_with(&text, name_or_path, system, ccl)
    }

    pub fn from_yaml(text: &str, origin: &str) -> Result<Plan, SpecError> {
        Self::from_yaml_with(text, origin, None, None)
    }

    /// Parses and checks a plan whose points start from `system` (default:
    /// the plan's `system:`, else the embedded spec) and `ccl` (default: the
    /// embedded ccl.yaml). Every point is checked against these bases.
    pub fn from_yaml_with(
        text: &str,
        origin: &str,
        system: Option<System>,
        ccl: Option<CclConfig>,
    ) -> Result<Plan, SpecError> {
        let file: PlanFile = parse_yaml(text, origin)?;
        let system = match (system, file.system.as_deref()) {
            (Some(s), _) => s,
            (None, None) => System::embedded_default(),
            (None, Some(s)) => match s.strip_prefix("preset:") {
                Some(name) => presets::preset(name).map_err(|e| SpecError {
                    file: origin.into(),
                    path: "system".into(),
                    ..e
                })?,
                None => System::from_file(Path::new(s))?,
            },
        };
        let plan = Plan {
            file,
            origin: origin.into(),
            text: text.into(),
            system,
            ccl: ccl.unwrap_or_else(CclConfig::embedded_default),
            network: NetworkChoice::Spec,
        };
        plan.check()?;
        Ok(plan)
    }

    /// Static checks: studies, axis names and values, zip lengths.
    fn check(&self) -> Result<(), SpecError> {
        let o = &self.origin;
        check_name(o, &self.file.name)?;
        if self.file.studies.is_empty() {
            return Err(plan_error(
                o,
                "studies",
                "no studies".into(),
                "a list of studies, each with a name and grid and/or zip axes",
            ));
        }
        self.base_system()?;
        for (i, st) in self.file.studies.iter().enumerate() {
            let at = format!("studies[{i}]");
            for (section, axes) in [("grid", &st.grid), ("zip", &st.zip)] {
                let mut len = None;
                for (k, v) in axes {
                    let key = scalar(k);
                    let path = format!("{at}.{section}.{key}");
                    let Value::Sequence(values) = v else {
                        return Err(plan_error(
                            o,
                            &path,
                            "axis values must be a list".into(),
                            "a YAML list, e.g. [4, 16, 64]",
                        ));
                    };
                    if values.is_empty() {
                        return Err(plan_error(
                            o,
                            &path,
                            "axis has no values".into(),
                            "at least one value",
                        ));
                    }
                    if section == "zip" && *len.get_or_insert(values.len()) != values.len() {
                        return Err(plan_error(
                            o,
                            &path,
                            "zipped axes have different lengths".into(),
                            "the same number of values on every zip axis",
                        ));
                    }
                    for v in values {
                        self.check_value(&key, v)
                            .map_err(|e| plan_error(o, &path, e.0, &e.1))?;
                    }
                }
            }
            if st.grid.is_empty() && st.zip.is_empty() {
                return Err(plan_error(
                    o,
                    &at,
                    "study has no axes".into(),
                    "grid and/or zip axes",
                ));
            }
            if let Some(k) = st.grid.keys().find(|k| st.zip.contains_key(*k)) {
                return Err(plan_error(
                    o,
                    &format!("{at}.zip.{}", scalar(k)),
                    format!("axis '{}' is in both grid and zip", scalar(k)),
                    "each axis once per study: in grid or in zip",
                ));
            }
        }
        let total = self.expansion_size();
        if total > MAX_POINTS {
            return Err(plan_error(
                o,
                "studies",
                format!("the plan expands to {total} points"),
                &format!(
                    "at most {MAX_POINTS} points: fewer values per axis, or split the study into plans"
                ),
            ));
        }
        self.check_points()
    }

    /// Points the plan expands to before skipping unsupported ones
    /// (saturating), computed without expanding.
    fn expansion_size(&self) -> u128 {
        self.file
            .studies
            .iter()
            .map(|st| {
                let len = |v: &Value| v.as_sequence().map_or(1, |s| s.len() as u128);
                let grid: u128 = st.grid.values().map(len).product();
                let zip = st.zip.values().next().map_or(1, len);
                grid.saturating_mul(zip)
            })
            .fold(0u128, |a, b| a.saturating_add(b))
    }

    /// Resolves every point before any runs: a plan none of whose points
    /// can run fails now, naming the first few and why.
    fn check_points(&self) -> Result<(), SpecError> {
        let points = self.points();
        let bad: Vec<(Point, String)> = points
            .iter()
            .filter_map(|p| self.resolve(p).err().map(|e| (p.clone(), e)))
            .collect();
        if points.is_empty() || bad.len() < points.len() {
            return Ok(());
        }
        let shown: Vec<String> = bad
            .iter()
            .take(3)
            .map(|(p, e)| format!("[{}] {e}", p.label()))
            .collect();
        Err(plan_error(
            &self.origin,
            "studies",
            format!(
                "none of the {} points can run: {}{}",
                points.len(),
                shown.join("; "),
                if bad.len() > 3 { "; ..." } else { "" }
            ),
            "axis values every point accepts (each error above names the field)",
        ))
    }

    /// Whether `v` is a valid value for axis `key`: (problem, allowed) if not.
    fn check_value(&self, key: &str, v: &Value) -> Result<(), (String, String)> {
        let s = scalar(v);
        match key {
            "collective" => Collective::ALL
                .iter()
                .find(|c| c.name() == s)
                .map(|_| ())
                .ok_or_else(|| {
                    (
                        format!("unknown collective '{s}'"),
                        Collective::ALL.map(|c| c.name()).join(", "),
                    )
                }),
            "algorithm" => self.ccl.entry(&s).map(|_| ()),
            "op" => ["sum", "max", "min"]
                .contains(&s.as_str())
                .then_some(())
                .ok_or_else(|| (format!("unknown op '{s}'"), "sum, max, min".into())),
            "bytes" => parse_bytes(&s)
                .map_err(|e| (e, "sizes like 1K, 64M".into()))
                .and_then(kernbench_ccl::Job::elems_of)
                .map(|_| ()),
            k if k.starts_with("ccl.") => {
                let mut scratch = self.ccl.defaults.clone();
                set_ccl_field(&mut scratch, &k[4..], &s)
            }
            k => {
                let mut root = serde_yaml::to_value(&self.system.spec).expect("spec serializes");
                // A section left out of the serialised spec at its default
                // (e.g. `network`) is still a field: the spec, which refuses
                // unknown fields, takes it.
                let written = k.split('.').try_fold(&root, |cur, p| cur.get(p)).is_some();
                let mut probe = root.clone();
                let optional = !written
                    && set_path(&mut probe, k, v.clone()).is_ok()
                    && serde_yaml::from_value::<kernbench_spec::spec::SystemSpec>(probe).is_ok();
                if !written && !optional {
                    return Err((format!("'{k}' is not an axis or a system-spec field"), "collective, algorithm, bytes, op, ccl.<field>, or a spec path like system.sips.count".into()));
                }
                set_path(&mut root, k, v.clone()).map_err(|e| (e, "a spec field".into()))?;
                serde_yaml::from_value::<kernbench_spec::spec::SystemSpec>(root)
                    .map(|_| ())
                    .map_err(|e| {
                        (
                            format!("{k} = {s}: {e}"),
                            "a value of the field's type".into(),
                        )
                    })
            }
        }
    }

    /// Runs every point with `choice`'s network model (`--network`): a
    /// fixed model becomes the base system's, so `system.yaml` and the
    /// fingerprint say it; `auto` decides per point. A plan that sets the
    /// model itself (in `base` or as an axis) is refused: one of the two
    /// would be silently ignored.
    pub fn set_network(&mut self, choice: NetworkChoice) -> Result<(), String> {
        if choice == NetworkChoice::Spec {
            return Ok(());
        }
        let sets_model = sets_network_model;
        let axis = self
            .file
            .studies
            .iter()
            .find(|s| sets_model(&s.grid) || sets_model(&s.zip));
        if let Some(study) = axis {
            return Err(format!(
                "--network: study '{}' of plan '{}' has a network.model axis; allowed: --network or the axis, not both",
                study.name, self.file.name
            ));
        }
        if sets_model(&self.file.base) {
            return Err(format!(
                "--network: plan '{}' sets network.model in its base; allowed: --network or the plan's base, not both",
                self.file.name
            ));
        }
        match choice {
            NetworkChoice::Fixed(model) => self.system.spec.network.model = model,
            _ => self.network = choice,
        }
        Ok(())
    }

    /// The plan's system with its `base:` overrides; an error names the
    /// overridden field as `base.<path>`.
    fn base_system(&self) -> Result<System, SpecError> {
        with_base(&self.system, &self.file.base, &self.origin)
    }

    /// Every point, in order, skipping algorithms that lack their collective.
    pub fn points(&self) -> Vec<Point> {
        let mut out = Vec::new();
        for st in &self.file.studies {
            let axes = |m: &Mapping| -> Vec<(String, Vec<String>)> {
                m.iter()
                    .map(|(k, v)| {
                        (
                            scalar(k),
                            v.as_sequence()
                                .map(|s| s.iter().map(scalar).collect())
                                .unwrap_or_default(),
                        )
                    })
                    .collect()
            };
            let (grid, zip) = (axes(&st.grid), axes(&st.zip));
            let zip_len = zip.first().map_or(1, |z| z.1.len());
            let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
            for (k, vals) in &grid {
                combos = combos
                    .into_iter()
                    .flat_map(|c| {
                        vals.iter()
                            .map(move |v| [c.clone(), vec![(k.clone(), v.clone())]].concat())
                    })
                    .collect();
            }
            for c in combos {
                for z in 0..zip_len {
                    let mut a = c.clone();
                    a.extend(zip.iter().map(|(k, vals)| (k.clone(), vals[z].clone())));
                    if self.supported(&a) {
                        out.push(Point {
                            index: out.len(),
                            study: st.name.clone(),
                            assignments: a,
                        });
                    }
                }
            }
        }
        out
    }

    fn get<'a>(a: &'a [(String, String)], key: &str) -> Option<&'a str> {
        a.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn supported(&self, a: &[(String, String)]) -> bool {
        let collective = Self::get(a, "collective").unwrap_or("all_reduce");
        let entry = self
            .ccl
            .entry(Self::get(a, "algorithm").unwrap_or("defaults"));
        match entry.ok().and_then(|e| algorithms::find(&e.algorithm).ok()) {
            Some(alg) => alg.collectives().iter().any(|c| c.name() == collective),
            None => true, // an unknown entry is reported when the point runs
        }
    }

    /// A point's estimated simulation cost (docs/model.md §Cost estimate);
    /// None if it does not resolve.
    pub fn estimate(&self, p: &Point) -> Option<kernbench_ccl::estimate::Estimate> {
        let r = self.resolve(p).ok()?;
        let job = r.job();
        let estimate = |config: &AlgoConfig| {
            let (system, _) = r.simulated_system(config, self.file.verify);
            kernbench_ccl::estimate::Estimate::collective(
                &system,
                config,
                &job,
                self.file.verify,
                false,
            )
        };
        if r.config.algorithm != AUTO {
            return Some(estimate(&r.config));
        }
        // An auto point runs the pick, unknown until tuned: the costliest
        // candidate stands for it.
        self.ccl
            .candidates
            .iter()
            .map(estimate)
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds))
    }

    /// The system, algorithm config and job of a point; errors name the axis.
    pub fn resolve(&self, p: &Point) -> Result<Resolved, String> {
        let base = self.base_system().map_err(|e| e.to_string())?;
        let mut root = serde_yaml::to_value(&base.spec).expect("spec serializes");
        let mut ccl_overrides = Vec::new();
        for (k, v) in &p.assignments {
            if !["collective", "algorithm", "bytes", "op"].contains(&k.as_str()) {
                if let Some(field) = k.strip_prefix("ccl.") {
                    ccl_overrides.push((field, v));
                } else {
                    let value: Value =
                        serde_yaml::from_str(v).map_err(|e| format!("{k} = {v}: {e}"))?;
                    set_path(&mut root, k, value)?;
                }
            }
        }
        let spec = serde_yaml::from_value(root).map_err(|e| e.to_string())?;
        let system = System::from_spec(spec, &self.system.origin).map_err(|e| e.to_string())?;
        let mut config = self
            .ccl
            .entry(Self::get(&p.assignments, "algorithm").unwrap_or("defaults"))
            .map_err(|(problem, allowed)| format!("algorithm: {problem}; allowed: {allowed}"))?
            .clone();
        if config.algorithm == AUTO
            && let Some((field, _)) = ccl_overrides.first()
        {
            return Err(format!(
                "ccl.{field} on a point whose algorithm is auto: the tuner's candidates carry their own settings; allowed: a named algorithm, or the axis in the ccl config's autotune: section"
            ));
        }
        for (field, v) in ccl_overrides {
            set_ccl_field(&mut config, field, v).map_err(|(problem, allowed)| {
                format!("ccl.{field}: {problem}; allowed: {allowed}")
            })?;
        }
        let collective = Collective::ALL
            .into_iter()
            .find(|c| Some(c.name()) == Self::get(&p.assignments, "collective"))
            .unwrap_or(Collective::AllReduce);
        let op = match Self::get(&p.assignments, "op").unwrap_or("sum") {
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            _ => ReduceOp::Sum,
        };
        let bytes = parse_bytes(Self::get(&p.assignments, "bytes").unwrap_or("1M"))?;
        let job = kernbench_ccl::Job {
            collective,
            op,
            elems: kernbench_ccl::Job::elems_of(bytes)
                .map_err(|(problem, allowed)| format!("bytes: {problem}; allowed: {allowed}"))?,
        };
        job.check(config.chunks.fixed().unwrap_or(1))
            .map_err(|(problem, allowed)| format!("ccl.chunks: {problem}; allowed: {allowed}"))?;
        let mut system = system;
        self.network
            .apply(&mut system, &config, &job, self.file.verify);
        Ok(Resolved {
            system,
            config,
            collective,
            op,
            bytes,
        })
    }
}

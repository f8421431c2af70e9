//! Resolving a ccl.yaml: every entry filled from `defaults` and checked
//! field by field (a [`SpecError`] names the field's path and line, the
//! problem and what is allowed), entry names, and the `autotune:` candidates.
//!
//! The checks that need the algorithm registry (a known algorithm name, a
//! mapper the algorithm runs under) come in through [`Registry`]: `config`
//! sits below `algorithms`, whose kernels take config's [`Chunks`] and
//! whose registry names [`AUTO`], so it never names the registry itself;
//! `crate::load` passes the registry in.

use super::algo_config::{AUTO, AlgoConfig, MAPPERS, VALIDATORS, leader_only};
use super::file::{CclFile, EntrySpec};
use super::pieces::Chunks;
use super::tune_space::tune_space;
use kernbench_spec::spec::{SpecError, line_of, parse_yaml};

/// All entries of a ccl.yaml, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct CclConfig {
    pub origin: String,
    /// The `defaults` entry as a configuration named "defaults".
    pub defaults: AlgoConfig,
    pub entries: Vec<AlgoConfig>,
    /// The candidates `algorithm: auto` chooses among, in order (ties go to
    /// the first): the `autotune:` grid, or every entry when there is none.
    pub candidates: Vec<AlgoConfig>,
    /// `--algorithm auto` when no entry has that name: the defaults with
    /// algorithm auto.
    pub auto: AlgoConfig,
}

/// What resolving a ccl.yaml asks of the algorithm registry (implemented
/// above both by `crate::load`).
pub(crate) trait Registry {
    /// The registered names, an alias beside its algorithm, for the allowed
    /// list of a message.
    fn allowed(&self) -> String;
    /// Whether `name` is a registered algorithm or an alias of one.
    fn knows(&self, name: &str) -> bool;
    /// Refuses a mapper entry `name`'s algorithm cannot run. Err is
    /// (problem, allowed).
    fn check_mapper(&self, name: &str, cfg: &AlgoConfig) -> Result<(), (String, String)>;
}

/// One ccl.yaml being resolved: its text and origin (for a refusal's path
/// and line) and the registry its entries are checked against.
struct Resolver<'a> {
    text: &'a str,
    origin: &'a str,
    registry: &'a dyn Registry,
}

impl CclConfig {
    /// Resolves ccl.yaml `text` (from `origin`) against `registry`: the
    /// defaults, every entry, the autotune candidates and the auto entry.
    pub(crate) fn resolve(
        text: &str,
        origin: &str,
        registry: &dyn Registry,
    ) -> Result<Self, SpecError> {
        let file: CclFile = parse_yaml(text, origin)?;
        let at = Resolver {
            text,
            origin,
            registry,
        };
        let defaults = at.entry("defaults", "defaults", &file.defaults, None)?;
        let entries = file
            .algorithms
            .iter()
            .map(|(name, e)| {
                let path = format!("algorithms.{name}");
                check_entry_name(name)
                    .map_err(|(problem, allowed)| at.err(path.clone(), problem, allowed))?;
                at.entry(name, &path, e, Some(&defaults))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let candidates = match &file.autotune {
            Some(space) => tune_space(space, &entries)
                .map_err(|(path, problem, allowed)| at.err(path, problem, allowed))?,
            None => entries
                .iter()
                .filter(|e| e.algorithm != AUTO)
                .cloned()
                .collect(),
        };
        let auto = AlgoConfig {
            name: AUTO.into(),
            algorithm: AUTO.into(),
            ..defaults.clone()
        };
        Ok(Self {
            origin: origin.into(),
            defaults,
            entries,
            candidates,
            auto,
        })
    }

    /// The entry named `name` ("defaults" is the defaults entry); Err is
    /// (problem, allowed).
    pub fn entry(&self, name: &str) -> Result<&AlgoConfig, (String, String)> {
        if name == "defaults" {
            return Ok(&self.defaults);
        }
        let found = self.entries.iter().find(|e| e.name == name);
        if found.is_none() && name == AUTO {
            return Ok(&self.auto);
        }
        found.ok_or_else(|| {
            let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
            let hint = kernbench_spec::names::did_you_mean(name, names.iter().copied());
            (
                format!(
                    "{} has no algorithm entry named '{name}'{hint}",
                    self.origin
                ),
                format!(
                    "an entry of the ccl config: defaults, {}, or {AUTO}",
                    names.join(", ")
                ),
            )
        })
    }
}

impl Resolver<'_> {
    /// The refusal of the value at `path`.
    fn err(&self, path: String, problem: String, allowed: String) -> SpecError {
        SpecError {
            file: self.origin.into(),
            line: line_of(self.text, &path),
            path,
            problem,
            allowed,
        }
    }

    /// The refusal of a field set neither at `path` nor in defaults.
    fn missing(&self, path: &str, field: &str) -> SpecError {
        self.err(
            format!("{path}.{field}"),
            format!("{field} is not set here or in defaults"),
            "set it in defaults".into(),
        )
    }

    /// Entry `name` at `path`, every field it omits taken from `base` (the
    /// defaults; None for the defaults themselves), checked in field order.
    fn entry(
        &self,
        name: &str,
        path: &str,
        e: &EntrySpec,
        base: Option<&AlgoConfig>,
    ) -> Result<AlgoConfig, SpecError> {
        let algorithm = self.algorithm(path, e, base)?;
        // Numeric fields are filled below through the range-checking
        // setter.
        let mut cfg = AlgoConfig {
            name: name.into(),
            algorithm,
            buffer_kind: e
                .buffer_kind
                .or(base.map(|b| b.buffer_kind))
                .ok_or_else(|| self.missing(path, "buffer_kind"))?,
            n_slots: 0,
            slot_size: 0,
            chunks: Chunks::Auto,
            world_size: e.world_size.or(base.and_then(|b| b.world_size)),
            mapper: e
                .mapper
                .clone()
                .or(base.map(|b| b.mapper.clone()))
                .unwrap_or_else(leader_only),
            validator: e
                .validator
                .clone()
                .or(base.and_then(|b| b.validator.clone())),
        };
        self.check_process_group(name, path, &cfg)?;
        self.fill_pipeline(path, e, base, &mut cfg)?;
        Ok(cfg)
    }

    /// The entry's algorithm: given or inherited, and registered (or auto).
    fn algorithm(
        &self,
        path: &str,
        e: &EntrySpec,
        base: Option<&AlgoConfig>,
    ) -> Result<String, SpecError> {
        let algorithm = e
            .algorithm
            .clone()
            .or(base.map(|b| b.algorithm.clone()))
            .ok_or_else(|| {
                self.err(
                    format!("{path}.algorithm"),
                    "no algorithm given".into(),
                    self.registry.allowed(),
                )
            })?;
        if algorithm != AUTO && !self.registry.knows(&algorithm) {
            return Err(self.err(
                format!("{path}.algorithm"),
                format!("unknown algorithm '{algorithm}'"),
                format!("{}, or {AUTO}", self.registry.allowed()),
            ));
        }
        Ok(algorithm)
    }

    /// The process-group fields: a world of at least one rank, a known
    /// mapper and validator, and a mapper the algorithm runs under.
    fn check_process_group(
        &self,
        name: &str,
        path: &str,
        cfg: &AlgoConfig,
    ) -> Result<(), SpecError> {
        if cfg.world_size == Some(0) {
            return Err(self.err(
                format!("{path}.world_size"),
                "world_size is 0".into(),
                "a whole number of ranks from 1 to the SIP count, or no world_size (one rank per SIP)".into(),
            ));
        }
        for (field, name, known) in [
            ("mapper", Some(&cfg.mapper), MAPPERS),
            ("validator", cfg.validator.as_ref(), VALIDATORS),
        ] {
            if let Some(n) = name
                && !known.contains(&n.as_str())
            {
                return Err(self.err(
                    format!("{path}.{field}"),
                    format!("unknown {field} '{n}'"),
                    known.join(", "),
                ));
            }
        }
        self.registry
            .check_mapper(name, cfg)
            .map_err(|(problem, allowed)| self.err(format!("{path}.mapper"), problem, allowed))
    }

    /// The queue and pipeline fields (n_slots, slot_size, chunks): given or
    /// inherited, each through its one range check.
    fn fill_pipeline(
        &self,
        path: &str,
        e: &EntrySpec,
        base: Option<&AlgoConfig>,
        cfg: &mut AlgoConfig,
    ) -> Result<(), SpecError> {
        for (field, given, inherited) in [
            ("n_slots", e.n_slots, base.map(|b| u64::from(b.n_slots))),
            ("slot_size", e.slot_size, base.map(|b| b.slot_size)),
        ] {
            let v = given
                .or(inherited)
                .ok_or_else(|| self.missing(path, field))?;
            cfg.set(field, v).map_err(|(problem, allowed)| {
                self.err(format!("{path}.{field}"), problem, allowed)
            })?;
        }
        cfg.chunks = match (&e.chunks, base) {
            (Some(spec), _) => Chunks::try_from(spec).map_err(|(problem, allowed)| {
                self.err(format!("{path}.chunks"), problem, allowed)
            })?,
            (None, Some(b)) => b.chunks,
            (None, None) => return Err(self.missing(path, "chunks")),
        };
        Ok(())
    }
}

/// Names the CLI gives its own meaning (`--algorithm all`, `auto`,
/// `defaults`): an entry may not take them.
pub const RESERVED_ENTRY_NAMES: [&str; 3] = ["all", AUTO, "defaults"];

/// Longest ccl entry name.
pub const MAX_ENTRY_NAME: usize = 64;

/// Refuses an entry name the CLI could not name unambiguously: a reserved
/// word, or one outside 1 to 64 letters, digits, `_`, `-` and `.`. Err is
/// (problem, allowed).
fn check_entry_name(name: &str) -> Result<(), (String, String)> {
    let pattern = format!(
        "1 to {MAX_ENTRY_NAME} letters, digits, '_', '-' or '.', other than {}",
        RESERVED_ENTRY_NAMES.join(", ")
    );
    let meaning = match name {
        "all" => Some("every entry, then the best per size"),
        AUTO => Some("the autotuned pick per size"),
        "defaults" => Some("the defaults entry"),
        _ => None,
    };
    let problem = if let Some(meaning) = meaning {
        format!("entry name '{name}' is reserved: --algorithm {name} means {meaning}")
    } else if name.is_empty() {
        "an entry has an empty name".to_string()
    } else if name.chars().count() > MAX_ENTRY_NAME {
        format!("entry name '{name}' is longer than {MAX_ENTRY_NAME} characters")
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        format!("entry name {name:?} contains {c:?}")
    } else {
        return Ok(());
    };
    Err((
        problem,
        format!("{pattern}; rename the entry, e.g. my_{}", safe_stem(name)),
    ))
}

/// `name` cut down to the entry-name pattern, for the fix of a bad name.
fn safe_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(MAX_ENTRY_NAME - 3)
        .collect();
    if stem.is_empty() {
        "entry".into()
    } else {
        stem
    }
}

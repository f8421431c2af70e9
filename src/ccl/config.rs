//! `configs/ccl.yaml`: defaults plus named algorithm entries.
//!
//! ```yaml
//! defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 65536, chunks: 1 }
//! algorithms:
//!   ring_sram: { algorithm: ring, buffer_kind: sram }
//! ```
//! An entry inherits every field it omits from `defaults`.

use super::algorithms;
use crate::spec::{SpecError, line_of, parse_yaml};
use crate::topology::address::Space;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The embedded default (`configs/ccl.yaml`).
pub const DEFAULT_CCL_YAML: &str = include_str!("../../configs/ccl.yaml");

/// Buffer kind names in YAML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferKind {
    Tcm,
    Sram,
    Hbm,
}

impl From<BufferKind> for Space {
    fn from(b: BufferKind) -> Space {
        match b {
            BufferKind::Tcm => Space::Tcm,
            BufferKind::Sram => Space::Sram,
            BufferKind::Hbm => Space::Hbm,
        }
    }
}

/// One entry: every field optional, missing ones come from `defaults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    /// A registered algorithm (see `kernbench run --help`).
    pub algorithm: Option<String>,
    /// Memory holding each queue's receive slots.
    pub buffer_kind: Option<BufferKind>,
    /// Slots per queue (credits a sender starts with).
    pub n_slots: Option<u32>,
    /// Bytes per slot: the largest chunk one message carries.
    pub slot_size: Option<u64>,
    /// Pipeline depth: each transfer of the algorithm is cut into this many pieces.
    pub chunks: Option<u32>,
}

/// The file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CclFile {
    pub defaults: EntrySpec,
    #[serde(default)]
    pub algorithms: BTreeMap<String, EntrySpec>,
}

/// A resolved, validated algorithm configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlgoConfig {
    /// The entry's name in ccl.yaml (what reports show).
    pub name: String,
    /// The registered algorithm it runs.
    pub algorithm: String,
    #[serde(with = "space_name")]
    pub buffer_kind: Space,
    pub n_slots: u32,
    pub slot_size: u64,
    pub chunks: u32,
}

mod space_name {
    use super::*;
    pub fn serialize<S: serde::Serializer>(s: &Space, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.name())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Space, D::Error> {
        let b = BufferKind::deserialize(d)?;
        Ok(b.into())
    }
}

/// All entries of a ccl.yaml, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct CclConfig {
    pub origin: String,
    /// The `defaults` entry as a configuration named "defaults".
    pub defaults: AlgoConfig,
    pub entries: Vec<AlgoConfig>,
}

impl CclConfig {
    pub fn embedded_default() -> Self {
        Self::from_yaml(DEFAULT_CCL_YAML, "<embedded ccl.yaml>")
            .unwrap_or_else(|e| panic!("embedded ccl.yaml is invalid: {e}"))
    }

    pub fn from_file(path: &Path) -> Result<Self, SpecError> {
        let text = crate::spec::input::read_config(path, "ccl config")?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, SpecError> {
        let file: CclFile = parse_yaml(text, origin)?;
        let err = |path: String, problem: String, allowed: String| SpecError {
            file: origin.into(),
            line: line_of(text, &path),
            path,
            problem,
            allowed,
        };
        let resolve = |name: &str,
                       path: &str,
                       e: &EntrySpec,
                       base: Option<&AlgoConfig>|
         -> Result<AlgoConfig, SpecError> {
            let pick = |v: Option<String>, d: Option<String>| v.or(d);
            let algorithm = pick(e.algorithm.clone(), base.map(|b| b.algorithm.clone()))
                .ok_or_else(|| {
                    err(
                        format!("{path}.algorithm"),
                        "no algorithm given".into(),
                        algorithms::names().join(", "),
                    )
                })?;
            if algorithms::find(&algorithm).is_err() {
                return Err(err(
                    format!("{path}.algorithm"),
                    format!("unknown algorithm '{algorithm}'"),
                    algorithms::names().join(", "),
                ));
            }
            let missing = |field: &str| {
                err(
                    format!("{path}.{field}"),
                    format!("{field} is not set here or in defaults"),
                    "set it in defaults".into(),
                )
            };
            let cfg = AlgoConfig {
                name: name.into(),
                algorithm,
                buffer_kind: e
                    .buffer_kind
                    .map(Space::from)
                    .or(base.map(|b| b.buffer_kind))
                    .ok_or_else(|| missing("buffer_kind"))?,
                n_slots: e
                    .n_slots
                    .or(base.map(|b| b.n_slots))
                    .ok_or_else(|| missing("n_slots"))?,
                slot_size: e
                    .slot_size
                    .or(base.map(|b| b.slot_size))
                    .ok_or_else(|| missing("slot_size"))?,
                chunks: e
                    .chunks
                    .or(base.map(|b| b.chunks))
                    .ok_or_else(|| missing("chunks"))?,
            };
            for (field, v) in [
                ("n_slots", cfg.n_slots as u64),
                ("slot_size", cfg.slot_size),
                ("chunks", cfg.chunks as u64),
            ] {
                if v == 0 {
                    return Err(err(
                        format!("{path}.{field}"),
                        format!("{field} is 0"),
                        "a whole number >= 1".into(),
                    ));
                }
            }
            if !cfg.slot_size.is_multiple_of(2) {
                return Err(err(
                    format!("{path}.slot_size"),
                    format!("slot_size {} is odd: data is f16", cfg.slot_size),
                    "an even number of bytes".into(),
                ));
            }
            Ok(cfg)
        };
        let defaults = resolve("defaults", "defaults", &file.defaults, None)?;
        let entries = file
            .algorithms
            .iter()
            .map(|(name, e)| resolve(name, &format!("algorithms.{name}"), e, Some(&defaults)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            origin: origin.into(),
            defaults,
            entries,
        })
    }

    /// The entry named `name` ("defaults" is the defaults entry).
    pub fn entry(&self, name: &str) -> Result<&AlgoConfig, String> {
        if name == "defaults" {
            return Ok(&self.defaults);
        }
        self.entries.iter().find(|e| e.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
            format!(
                "{}: no algorithm entry named '{name}'; entries: defaults, {}",
                self.origin,
                names.join(", ")
            )
        })
    }
}

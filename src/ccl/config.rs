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
    pub n_slots: Option<u64>,
    /// Bytes per slot: the largest chunk one message carries.
    pub slot_size: Option<u64>,
    /// Pipeline depth: each transfer of the algorithm is cut into this many pieces.
    pub chunks: Option<u64>,
    /// Ranks of the process group (default: one per SIP).
    pub world_size: Option<u32>,
    /// Which PEs of a rank's SIP take part (`leader_only`, `all_pes`).
    pub mapper: Option<String>,
    /// The shard layout a collective's tensor must have (`cube_leaders`,
    /// `single_shard_per_rank`, `multi_pe_sip_local`; default: the mapper's own).
    pub validator: Option<String>,
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
    /// Process-group settings (see `dist`): ranks (None: one per SIP), the
    /// mapper and validator names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    #[serde(default = "leader_only", skip_serializing_if = "is_leader_only")]
    pub mapper: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
}

fn leader_only() -> String {
    "leader_only".into()
}

fn is_leader_only(s: &String) -> bool {
    s == "leader_only"
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

/// Most slots per queue (credits a sender starts with).
pub const MAX_N_SLOTS: u64 = 1 << 16;
/// Largest slot, bytes (4 GiB): one chunk message.
pub const MAX_SLOT_SIZE: u64 = 1 << 32;
/// Deepest pipeline: pieces per transfer.
pub const MAX_CHUNKS: u64 = 1 << 20;

impl AlgoConfig {
    /// Sets a numeric field after checking its range: the one check every
    /// origin of the value (ccl.yaml, a sweep plan axis) goes through.
    /// Err is (problem, allowed).
    pub fn set(&mut self, field: &str, v: u64) -> Result<(), (String, String)> {
        let range = |lo: u64, hi: u64, unit: &str| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err((
                    format!("{field} is {v}"),
                    format!("a whole number from {lo} to {hi}{unit}"),
                ))
            }
        };
        match field {
            "n_slots" => {
                range(1, MAX_N_SLOTS, "")?;
                self.n_slots = v as u32;
            }
            "slot_size" => {
                range(2, MAX_SLOT_SIZE, " bytes, even (f16 elements)")?;
                if !v.is_multiple_of(2) {
                    return Err((
                        format!("slot_size {v} is odd: data is f16 (2 bytes per element)"),
                        format!("an even number of bytes from 2 to {MAX_SLOT_SIZE}"),
                    ));
                }
                self.slot_size = v;
            }
            "chunks" => {
                range(1, MAX_CHUNKS, "")?;
                self.chunks = v as u32;
            }
            other => {
                return Err((
                    format!("unknown ccl field '{other}'"),
                    "algorithm, buffer_kind, n_slots, slot_size, chunks".into(),
                ));
            }
        }
        Ok(())
    }

    /// Sets `buffer_kind` from its YAML name.
    pub fn set_buffer_kind(&mut self, name: &str) -> Result<(), (String, String)> {
        self.buffer_kind = match name {
            "tcm" => Space::Tcm,
            "sram" => Space::Sram,
            "hbm" => Space::Hbm,
            other => {
                return Err((
                    format!("unknown buffer_kind '{other}'"),
                    "tcm, sram or hbm".into(),
                ));
            }
        };
        Ok(())
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
            // Numeric fields are filled below through the range-checking setter.
            let mut cfg = AlgoConfig {
                name: name.into(),
                algorithm,
                buffer_kind: e
                    .buffer_kind
                    .map(Space::from)
                    .or(base.map(|b| b.buffer_kind))
                    .ok_or_else(|| missing("buffer_kind"))?,
                n_slots: 0,
                slot_size: 0,
                chunks: 0,
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
            if cfg.world_size == Some(0) {
                return Err(err(
                    format!("{path}.world_size"),
                    "world_size is 0".into(),
                    "a whole number of ranks from 1 to the SIP count, or no world_size (one rank per SIP)".into(),
                ));
            }
            for (field, name, known) in [
                ("mapper", Some(&cfg.mapper), crate::dist::layout::MAPPERS),
                (
                    "validator",
                    cfg.validator.as_ref(),
                    crate::dist::layout::VALIDATORS,
                ),
            ] {
                if let Some(n) = name
                    && !known.contains(&n.as_str())
                {
                    return Err(err(
                        format!("{path}.{field}"),
                        format!("unknown {field} '{n}'"),
                        known.join(", "),
                    ));
                }
            }
            for (field, given, inherited) in [
                ("n_slots", e.n_slots, base.map(|b| u64::from(b.n_slots))),
                ("slot_size", e.slot_size, base.map(|b| b.slot_size)),
                ("chunks", e.chunks, base.map(|b| u64::from(b.chunks))),
            ] {
                let v = given.or(inherited).ok_or_else(|| missing(field))?;
                cfg.set(field, v).map_err(|(problem, allowed)| {
                    err(format!("{path}.{field}"), problem, allowed)
                })?;
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

    /// The entry named `name` ("defaults" is the defaults entry); Err is
    /// (problem, allowed).
    pub fn entry(&self, name: &str) -> Result<&AlgoConfig, (String, String)> {
        if name == "defaults" {
            return Ok(&self.defaults);
        }
        self.entries.iter().find(|e| e.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
            (
                format!("{} has no algorithm entry named '{name}'", self.origin),
                format!("an entry of the ccl config: defaults, {}", names.join(", ")),
            )
        })
    }
}

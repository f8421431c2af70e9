//! The ccl.yaml file as written: [`CclFile`] with its `defaults` and named
//! [`EntrySpec`]s (every field optional), the `autotune:` space
//! ([`TuneSpaceSpec`]) and a `chunks` value as written ([`ChunksSpec`]).
//! Nothing here is checked beyond its YAML shape; `resolve` checks it.

use kernbench_spec::topology::address::Space;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The embedded default (`configs/ccl.yaml`).
pub const DEFAULT_CCL_YAML: &str = include_str!("../../../configs/ccl.yaml");

/// `chunks` as written: a number or a word (only `auto` is valid; the
/// resolver names the field when it is not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ChunksSpec {
    Number(u64),
    Word(String),
}

impl<'de> Deserialize<'de> for ChunksSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = ChunksSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a whole number in digits (no sign, fraction or unit suffix such as K), or auto")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ChunksSpec, E> {
                Ok(ChunksSpec::Number(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ChunksSpec, E> {
                u64::try_from(v)
                    .map(ChunksSpec::Number)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ChunksSpec, E> {
                Ok(ChunksSpec::Word(v.into()))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// One entry: every field optional, missing ones come from `defaults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    /// A registered algorithm (see `kernbench run --help`).
    pub algorithm: Option<String>,
    /// Memory holding each queue's receive slots.
    pub buffer_kind: Option<Space>,
    /// Slots per queue (credits a sender starts with).
    pub n_slots: Option<u64>,
    /// Bytes per slot: the largest chunk one message carries.
    pub slot_size: Option<u64>,
    /// Pipeline depth: each transfer of the algorithm is cut into this many
    /// pieces, or `auto` (chosen from the size and the system).
    pub chunks: Option<ChunksSpec>,
    /// Ranks of the process group (default: one per SIP).
    pub world_size: Option<u32>,
    /// Which PEs of a rank's SIP take part (`leader_only`, `all_pes`).
    pub mapper: Option<String>,
    /// The shard layout a collective's tensor must have (`cube_leaders`,
    /// `cube_replicas`, `single_shard_per_rank`, `multi_pe_sip_local`;
    /// default: none for a lane-wise collective, the mapper's own for a
    /// replica reduction).
    pub validator: Option<String>,
}

/// The file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CclFile {
    pub defaults: EntrySpec,
    #[serde(default)]
    pub algorithms: BTreeMap<String, EntrySpec>,
    /// What `algorithm: auto` chooses among (the autotuner above this crate decides).
    #[serde(default)]
    pub autotune: Option<TuneSpaceSpec>,
}

/// `autotune:` as written: entries to try and optional axes that replace a
/// field of every entry, making a grid (entries × buffer kinds × slots ×
/// slot sizes × chunks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneSpaceSpec {
    pub configs: Vec<String>,
    pub buffer_kind: Option<Vec<Space>>,
    pub n_slots: Option<Vec<u64>>,
    pub slot_size: Option<Vec<u64>>,
    pub chunks: Option<Vec<ChunksSpec>>,
}

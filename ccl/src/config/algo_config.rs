//! [`AlgoConfig`]: one resolved, validated ccl.yaml entry, the range checks
//! of its numeric fields (the one check every origin of a value goes
//! through: ccl.yaml, a sweep plan axis) and the mapper and validator names
//! an entry may give.

use super::file::ChunksSpec;
use super::pieces::Chunks;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_spec::topology::address::Space;
use serde::{Deserialize, Serialize};

/// Mapper names, as ccl.yaml's `mapper:` takes them (`dist::layout`
/// implements each).
pub const MAPPERS: &[&str] = &["leader_only", "all_pes"];

/// Validator names, as ccl.yaml's `validator:` takes them (`dist::layout`
/// implements each).
pub const VALIDATORS: &[&str] = &[
    "cube_leaders",
    "cube_replicas",
    "single_shard_per_rank",
    "multi_pe_sip_local",
];

/// The algorithm name that asks the autotuner to choose per size bucket.
pub const AUTO: &str = "auto";

/// A resolved, validated algorithm configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlgoConfig {
    /// The entry's name in ccl.yaml (what reports show).
    pub name: String,
    /// The registered algorithm it runs.
    pub algorithm: String,
    pub buffer_kind: Space,
    pub n_slots: u32,
    pub slot_size: u64,
    pub chunks: Chunks,
    /// Process-group settings (see `dist`): ranks (None: one per SIP), the
    /// mapper and validator names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    #[serde(default = "leader_only", skip_serializing_if = "is_leader_only")]
    pub mapper: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
}

pub(super) fn leader_only() -> String {
    "leader_only".into()
}

fn is_leader_only(s: &String) -> bool {
    s == "leader_only"
}

/// Most slots per queue (credits a sender starts with).
pub const MAX_N_SLOTS: u64 = 1 << 16;
/// Largest slot, bytes (4 GiB): one chunk message.
pub const MAX_SLOT_SIZE: u64 = 1 << 32;

impl AlgoConfig {
    /// The receive queues of this configuration.
    pub fn queues(&self) -> QueueConfig {
        QueueConfig {
            buffer: self.buffer_kind,
            n_slots: self.n_slots,
            slot_size: self.slot_size,
        }
    }

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
            other => {
                return Err((
                    format!("unknown ccl field '{other}'"),
                    "algorithm, buffer_kind, n_slots, slot_size, chunks".into(),
                ));
            }
        }
        Ok(())
    }

    /// Sets `chunks` from text: `auto` or a number.
    pub fn set_chunks(&mut self, text: &str) -> Result<(), (String, String)> {
        let spec = match text.parse::<u64>() {
            Ok(k) => ChunksSpec::Number(k),
            Err(_) => ChunksSpec::Word(text.into()),
        };
        self.chunks = Chunks::try_from(&spec)?;
        Ok(())
    }

    /// Sets `buffer_kind` from its YAML name.
    pub fn set_buffer_kind(&mut self, name: &str) -> Result<(), (String, String)> {
        let Some(space) = Space::parse(name) else {
            return Err((
                format!("unknown buffer_kind '{name}'"),
                "tcm, sram or hbm".into(),
            ));
        };
        self.buffer_kind = space;
        Ok(())
    }
}

//! `configs/ccl.yaml`: defaults plus named algorithm entries.
//!
//! ```yaml
//! defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 65536, chunks: auto }
//! algorithms:
//!   ring_sram: { algorithm: ring, buffer_kind: sram }
//! ```
//! An entry inherits every field it omits from `defaults`.
//!
//! `file` holds the file as written, `algo_config` a resolved entry and the
//! checks of its fields, `pieces` the pipeline depth, `resolve` the
//! resolution of a whole file ([`CclConfig`]), `tune_space` the `autotune:`
//! grid. The loaders (`CclConfig::from_yaml`, `from_file`,
//! `embedded_default`) are in `crate::load`.
//!
//! Dependencies run one way: `config` names nothing else of this crate.
//! `algorithms` uses config's types (its kernels take [`Chunks`] and
//! [`PieceLimits`] through `KernelArgs`; the registry names [`AUTO`]); the
//! checks of an entry that need the registry reach `resolve` through its
//! `Registry` trait, which `crate::load` implements above both.

mod algo_config;
mod file;
mod pieces;
mod resolve;
mod tune_space;

pub use algo_config::{AUTO, AlgoConfig, MAPPERS, MAX_N_SLOTS, MAX_SLOT_SIZE, VALIDATORS};
pub use file::{CclFile, ChunksSpec, DEFAULT_CCL_YAML, EntrySpec, TuneSpaceSpec};
pub use pieces::{
    AUTO_MAX_PIECES, AUTO_MIN_PIECE_BYTES, AUTO_PIECES_PER_STAGE, Chunks, MAX_CHUNKS, PieceLimits,
};
pub(crate) use resolve::Registry;
pub use resolve::{CclConfig, MAX_ENTRY_NAME, RESERVED_ENTRY_NAMES};

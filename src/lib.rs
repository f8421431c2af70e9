//! kernbench: a data-oriented ECS simulator of a multi-chip AI accelerator.
//!
//! Layers (docs/ARCHITECTURE.md): `spec` (YAML → validated system) →
//! `topology` (nodes, links, routes, addresses) → `machine` (an engine world
//! with the hardware spawned) — on the `kernbench_systems` engine crate;
//! `spec`, `topology` and `names` live in the `kernbench_spec` crate.
pub mod autotune;
pub mod bench;
pub mod catalog;
pub mod ccl;
pub mod collective_run;
pub mod command_costs;
pub mod dist;
pub mod estimate;
pub mod gemm;
pub mod kernel;
pub mod machine;
pub mod memory_map;
pub mod nccl_table;
pub mod output;
pub mod progress;
pub mod report;
pub mod seeded;
pub mod sweep;
pub mod topo_report;
pub mod tp;
pub mod trace;
pub mod workload;

pub use kernbench_spec::{names, spec, topology};
pub use kernbench_systems as systems;

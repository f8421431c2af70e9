//! kernbench: a data-oriented ECS simulator of a multi-chip AI accelerator.
//!
//! Layers (docs/ARCHITECTURE.md): `spec` (YAML → validated system) →
//! `topology` (nodes, links, routes, addresses) → `machine` (an engine world
//! with the hardware spawned) — all on the `kernbench_systems` engine crate.
pub mod autotune;
pub mod bench;
pub mod catalog;
pub mod ccl;
pub mod collective_run;
pub mod dist;
pub mod estimate;
pub mod gemm;
pub mod kernel;
pub mod machine;
pub mod memory_map;
pub mod names;
pub mod nccl_table;
pub mod output;
pub mod progress;
pub mod report;
pub mod seeded;
pub mod spec;
pub mod sweep;
pub mod topo_report;
pub mod topology;
pub mod tp;
pub mod trace;
pub mod workload;

pub use kernbench_systems as systems;

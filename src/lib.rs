//! kernbench: a data-oriented ECS simulator of a multi-chip AI accelerator.
//!
//! This crate is the command line and a facade over the workspace's layers
//! (docs/ARCHITECTURE.md), lowest first: the engine (`kernbench_systems`),
//! the spec (`kernbench_spec`: names, spec, topology), the runtime
//! (`kernbench_runtime`: machine, kernels, reports), the collective library
//! (`kernbench_ccl`), the distributed runtime (`kernbench_dist`) and the
//! studies (`kernbench_studies`: sweep, autotune, TP, GEMM, bench). Each
//! module is re-exported under its own name.
pub use kernbench_ccl as ccl;
pub use kernbench_ccl::estimate;
pub use kernbench_dist as dist;
pub use kernbench_runtime::{
    kernel, machine, memory_map, output, progress, report, seeded, trace, workload,
};
pub use kernbench_spec::{names, spec, topology};
pub use kernbench_studies::{
    autotune, bench, catalog, collective_run, command_costs, ddp, gemm, nccl_table, ops, sweep,
    topo_report, tp, train, transformer, validate,
};
pub use kernbench_systems as systems;

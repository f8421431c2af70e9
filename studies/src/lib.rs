//! kernbench studies: what a user runs on the simulator — the collective
//! sweep and its results, autotuning, tensor-parallel and GEMM studies, the
//! bench harness, the topology report, and the cost of each command before
//! it starts.
pub mod autotune;
pub mod bench;
pub mod catalog;
pub mod collective_run;
pub mod command_costs;
pub mod ddp;
pub mod gemm;
pub mod nccl_table;
pub mod ops;
pub mod run_progress;
pub mod sweep;
pub mod topo_report;
pub mod tp;
pub mod train;
pub mod transformer;
pub mod validate;

//! kernbench runtime: a machine built from a system spec (an engine world
//! with the hardware spawned), its memory map, the kernel tracer that turns
//! Rust kernels into engine programs, workloads, reports, traces, and the
//! output, progress and seeded-data helpers every command shares.
pub mod kernel;
pub mod machine;
pub mod measured;
pub mod memory_map;
pub mod message_log;
pub mod output;
pub mod progress;
pub mod report;
pub mod seeded;
pub mod trace;
pub mod workload;

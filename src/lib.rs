//! kernbench: a data-oriented ECS simulator of a multi-chip AI accelerator.
pub mod spec;

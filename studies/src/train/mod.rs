//! A training step under DP × TP × PP (Megatron-LM's layout and
//! schedules): ranks laid out on the SIPs by a stated axis order
//! (`layout`), each pipeline stage's layers behind the [`Stage`] trait
//! (`stage`: the uniform GEMM stage; `transformer_stage`: GPT layers), the 1F1B or GPipe schedule with
//! activations passed by `isend`/`irecv` (`schedule`), gradients reduced
//! over the DP group in buckets as backward makes them (`dp`), and the
//! step's breakdown read from each rank's record of works (`breakdown`).
//! `step` runs it all; docs/model.md §Pipeline schedules has the closed
//! forms it meets.

pub mod breakdown;
pub mod dp;
pub mod layout;
pub mod schedule;
pub mod stage;
pub mod step;
pub mod study;
pub mod transformer_stage;

pub use breakdown::RankBreakdown;
pub use dp::{DP_REDUCES, DpReduce};
pub use layout::{AXIS_ORDERS, Axis, AxisOrder, Parallel};
pub use schedule::{SCHEDULES, Schedule};
pub use stage::{Stage, UniformShape, UniformStage};
pub use step::{
    MODELS, Model, ModelShape, Summary, TrainReport, TrainStep, train_step, write_trace,
};

//! The collective library: an algorithm contract, the centre-root hierarchical
//! all-reduce and its bandwidth-optimal successors.
//!
//! Participants are the pe0 of every cube of every SIP (the per-cube
//! data-parallel replica layout): participant `p = sip · cubes + cube`.
//! Each holds a vector of `elems` f16 in its cube's HBM at offset 0; a
//! collective works in place there (docs/model.md §Collectives gives the
//! layout of each collective). An [`Algorithm`] declares what it supports,
//! its IPCQ wiring and its kernel; a [`Communicator`] installs the wiring
//! once on a machine (like NCCL communicator creation), in a queue scope of
//! its own, and runs collectives on it. A communicator can also be
//! lane-wise: every lane of its group (one (cube, pe) of each SIP, a
//! [`Group::lane_of`]) wired and run as a collective of its own, all in one
//! scope — what a collective on a rank's sharded tensor runs.

pub mod algorithm;
pub mod algorithms;
pub mod bound;
pub mod collective;
pub mod communicator;
pub mod config;
pub mod cost;
pub mod error;
pub mod estimate;
pub mod fold;
pub mod group;
pub mod kernels;
mod load;
pub mod p2p;
pub mod placement;
pub mod verify;

pub use algorithm::{ANY_TOPOLOGY, Algorithm, Buffers, KernelArgs, LaneBuffer, Operand};
pub use collective::{Collective, Job, ReduceOp};
pub use communicator::{CollResult, Communicator};
pub use config::{AUTO, AlgoConfig, CclConfig, Chunks, PieceLimits};
pub use error::CclError;
pub use group::{Group, Lane};
pub use placement::Placement;

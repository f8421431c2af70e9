//! System spec: serde types, validation, the embedded default.
pub mod types;
pub use types::*;

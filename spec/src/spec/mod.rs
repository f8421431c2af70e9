//! System spec: serde types, validation, the embedded default.
pub mod error;
pub mod input;
pub mod kinds;
pub mod presets;
pub mod system;
pub mod types;
pub use error::SpecError;
pub use kinds::{KindParams, SipKinds};
pub use system::*;
pub use types::*;

//! System spec: serde types, validation, the embedded default.
pub mod error;
pub mod input;
pub mod kinds;
pub mod locate;
pub mod presets;
pub mod rules;
pub mod system;
pub mod types;
pub mod yaml_error;
pub use error::SpecError;
pub use kinds::{KindParams, SipKinds};
pub use locate::line_of;
pub use system::*;
pub use types::*;
pub use yaml_error::parse_yaml;

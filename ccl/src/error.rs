//! [`CclError`]: why a collective could not run, from an unsupported
//! combination to an engine error.

use kernbench_runtime::machine::{InstallError, LaunchError};
use kernbench_systems::RunError;

/// Why a collective could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CclError {
    #[error("algorithm '{algorithm}' does not support {what}; it supports {supported}")]
    Unsupported {
        /// The algorithm as the config names it (an alias stays as written).
        algorithm: String,
        what: String,
        supported: String,
    },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error(transparent)]
    Run(#[from] RunError),
}

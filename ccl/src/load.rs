//! Loading a ccl.yaml: [`CclConfig::from_yaml`], `from_file` and
//! `embedded_default`, which resolve the file (`config`) with the checks
//! that need the algorithm registry (`algorithms`). It sits above both, so
//! the dependency between them runs one way: `algorithms` uses config's
//! types, and `config` never names the registry (it asks through
//! `config::Registry`, implemented here).

use crate::algorithms;
use crate::config::{AUTO, AlgoConfig, CclConfig, DEFAULT_CCL_YAML, Registry};
use kernbench_spec::spec::SpecError;
use std::path::Path;

impl CclConfig {
    pub fn embedded_default() -> Self {
        Self::from_yaml(DEFAULT_CCL_YAML, "<embedded ccl.yaml>")
            .unwrap_or_else(|e| panic!("embedded ccl.yaml is invalid: {e}"))
    }

    pub fn from_file(path: &Path) -> Result<Self, SpecError> {
        let text = kernbench_spec::spec::input::read_config(path, "ccl config")?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    /// Resolves ccl.yaml `text`; `origin` names it in every refusal.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, SpecError> {
        Self::resolve(text, origin, &Registered)
    }
}

/// The algorithm registry as resolving a ccl.yaml asks it.
struct Registered;

impl Registry for Registered {
    fn allowed(&self) -> String {
        algorithms::allowed()
    }

    fn knows(&self, name: &str) -> bool {
        algorithms::find(name).is_ok()
    }

    /// Refuses a mapper the entry's algorithm cannot run: `all_pes` on an
    /// algorithm that runs on cube leaders only. Err is (problem, allowed).
    fn check_mapper(&self, name: &str, cfg: &AlgoConfig) -> Result<(), (String, String)> {
        if cfg.mapper != "all_pes" || cfg.algorithm == AUTO {
            return Ok(());
        }
        let Ok(algorithm) = algorithms::find(&cfg.algorithm) else {
            return Ok(()); // an unknown algorithm is refused by its own field
        };
        if algorithm.every_pe() {
            return Ok(());
        }
        let every_pe: Vec<&str> = algorithms::ALL
            .iter()
            .filter(|a| a.every_pe())
            .map(|a| a.name())
            .collect();
        Err((
            format!(
                "entry '{name}' runs algorithm '{}' with mapper all_pes, but {} runs on cube leaders only",
                cfg.algorithm, cfg.algorithm
            ),
            format!(
                "the mappers {} allows: leader_only; set mapper: leader_only on the entry, or use an algorithm that runs on every PE ({})",
                cfg.algorithm,
                every_pe.join(", ")
            ),
        ))
    }
}

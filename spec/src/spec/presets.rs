//! Named system presets (`configs/topologies/*.yaml`), embedded so that
//! `--preset NAME` works from any directory.

use super::{SpecError, System};

/// (name, YAML) of every preset, sorted by name.
pub const PRESETS: [(&str, &str); 5] = [
    (
        "mesh_16",
        include_str!("../../../configs/topologies/mesh_16.yaml"),
    ),
    (
        "ring_4096",
        include_str!("../../../configs/topologies/ring_4096.yaml"),
    ),
    (
        "ring_4096_lean",
        include_str!("../../../configs/topologies/ring_4096_lean.yaml"),
    ),
    (
        "torus_4096",
        include_str!("../../../configs/topologies/torus_4096.yaml"),
    ),
    (
        "torus_6_rect",
        include_str!("../../../configs/topologies/torus_6_rect.yaml"),
    ),
];

/// Loads a preset by name; an unknown name lists the known ones.
pub fn preset(name: &str) -> Result<System, SpecError> {
    match PRESETS.iter().find(|p| p.0 == name) {
        Some((n, yaml)) => System::from_yaml(yaml, &format!("configs/topologies/{n}.yaml")),
        None => Err(SpecError {
            file: "--preset".into(),
            path: name.into(),
            line: None,
            problem: format!(
                "no preset named '{name}'{}",
                crate::names::did_you_mean(name, PRESETS.map(|p| p.0))
            ),
            allowed: PRESETS.map(|p| p.0).join(", "),
        }),
    }
}

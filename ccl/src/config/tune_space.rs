//! The `autotune:` grid: the candidates `algorithm: auto` chooses among,
//! each named entry crossed with every axis the file gives.

use super::algo_config::{AUTO, AlgoConfig};
use super::file::TuneSpaceSpec;
use super::pieces::Chunks;

/// The `autotune:` grid: each named entry, with every given axis replacing
/// its field; a grid candidate is named `entry/buffer/n_slotsxslot_size/cK`.
/// Err is (path, problem, allowed).
pub(super) fn tune_space(
    space: &TuneSpaceSpec,
    entries: &[AlgoConfig],
) -> Result<Vec<AlgoConfig>, GridProblem> {
    let names = || {
        entries
            .iter()
            .filter(|e| e.algorithm != AUTO)
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if space.configs.is_empty() {
        return Err((
            "autotune.configs".into(),
            "no configs to choose among".into(),
            format!("entries of algorithms:, e.g. [{}]", names()),
        ));
    }
    let mut bases = Vec::new();
    for (i, name) in space.configs.iter().enumerate() {
        let Some(e) = entries
            .iter()
            .find(|e| &e.name == name && e.algorithm != AUTO)
        else {
            return Err((
                format!("autotune.configs[{i}]"),
                format!("'{name}' is not an entry of algorithms: (or is itself auto)"),
                names(),
            ));
        };
        bases.push(e.clone());
    }
    let gridded = space.buffer_kind.is_some()
        || space.n_slots.is_some()
        || space.slot_size.is_some()
        || space.chunks.is_some();
    let set = |field: &'static str| {
        move |c: &mut AlgoConfig, v: &u64| {
            c.set(field, *v)
                .map_err(|(p, a)| (format!("autotune.{field}"), p, a))
        }
    };
    let mut out = cross(bases, &space.buffer_kind, |c, k| {
        c.buffer_kind = *k;
        Ok(())
    })?;
    out = cross(out, &space.n_slots, set("n_slots"))?;
    out = cross(out, &space.slot_size, set("slot_size"))?;
    out = cross(out, &space.chunks, |c, spec| {
        c.chunks =
            Chunks::try_from(spec).map_err(|(p, a)| ("autotune.chunks".to_string(), p, a))?;
        Ok(())
    })?;
    if gridded {
        for c in &mut out {
            c.name = format!(
                "{}/{}/{}x{}/c{}",
                c.name,
                c.buffer_kind.name(),
                c.n_slots,
                c.slot_size,
                c.chunks
            );
        }
    }
    Ok(out)
}

/// (path, problem, allowed) of a bad `autotune:` value.
type GridProblem = (String, String, String);

/// Every config once per value of an axis (`apply` sets it), config-major;
/// the configs unchanged when the axis is not given.
fn cross<T>(
    configs: Vec<AlgoConfig>,
    values: &Option<Vec<T>>,
    apply: impl Fn(&mut AlgoConfig, &T) -> Result<(), GridProblem>,
) -> Result<Vec<AlgoConfig>, GridProblem> {
    let Some(values) = values else {
        return Ok(configs);
    };
    let mut out = Vec::with_capacity(configs.len() * values.len());
    for c in &configs {
        for v in values {
            let mut c = c.clone();
            apply(&mut c, v)?;
            out.push(c);
        }
    }
    Ok(out)
}

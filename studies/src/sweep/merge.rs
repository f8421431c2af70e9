//! `kernbench merge`: shards of one plan into one result set. Every input is
//! checked before anything is written: fingerprints must agree (shards
//! aside), and `--out` may not be an input, lie inside one, or hold anything.
//! A point held by several inputs (a full set and its shards, one shard
//! given twice) is written once, from the first input holding it.

use super::consolidate;
use super::fingerprint::{self, Fingerprint};
use super::results::Row;
use kernbench_runtime::output::{absolute, copy_file, foreign_entries, some_of, write_file};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a merge did.
#[derive(Debug)]
pub struct Merged {
    pub rows: Vec<Row>,
    pub files: usize,
    /// Warnings to show: missing shards or point indices.
    pub warnings: Vec<String>,
}

/// Checks the inputs; returns their fingerprints.
fn check_inputs(dirs: &[PathBuf], out: &Path) -> Result<Vec<Fingerprint>, String> {
    let out_abs = absolute(out);
    let mut prints = Vec::new();
    for d in dirs {
        if !d.is_dir() {
            return Err(format!(
                "input {}: no such result directory; allowed: directories written by `kernbench sweep --out`",
                d.display()
            ));
        }
        let abs = absolute(d);
        if out_abs.starts_with(&abs) {
            return Err(format!(
                "--out {} is the input {} or inside it; allowed: a new directory outside every input",
                out.display(),
                d.display()
            ));
        }
        let fp = Fingerprint::read(d)?.ok_or_else(|| {
            format!(
                "{} has no {}: it is not a kernbench result directory, or was written before fingerprints",
                d.display(),
                fingerprint::FILE
            )
        })?;
        if let Some(first) = prints.first()
            && let Some(diff) = fp.difference(first, false)
        {
            return Err(format!(
                "{} and {} come from different sweeps: {diff}; merge only shards of one sweep",
                d.display(),
                dirs[0].display()
            ));
        }
        prints.push(fp);
    }
    let held = foreign_entries(out, &[])?;
    if !held.is_empty() {
        return Err(format!(
            "--out {} already holds files ({}); they would be mixed with the merge; allowed: a new directory outside every input",
            out.display(),
            some_of(&held)
        ));
    }
    Ok(prints)
}

/// What the inputs' shards leave out or repeat: missing shards, or, when
/// one input holds all points, that the others add nothing.
fn coverage(dirs: &[PathBuf], prints: &[Fingerprint]) -> Vec<String> {
    let Some(full) = prints.iter().position(|p| p.shard.is_none()) else {
        return missing_shards(prints);
    };
    let others: Vec<String> = dirs
        .iter()
        .zip(prints)
        .enumerate()
        .filter(|&(i, _)| i != full)
        .map(|(_, (d, p))| format!("{} ({})", d.display(), fingerprint::show_shard(p.shard)))
        .collect();
    if others.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "{} holds all points of the plan, so {} add(s) no point: each point is written once, from the first input that holds it",
        dirs[full].display(),
        others.join(", ")
    )]
}

/// Shards missing from a set of shard fingerprints.
fn missing_shards(prints: &[Fingerprint]) -> Vec<String> {
    let shards: Vec<(usize, usize)> = prints.iter().filter_map(|p| p.shard).collect();
    let Some(&(_, n)) = shards.first() else {
        return Vec::new();
    };
    (1..=n)
        .filter(|k| !shards.contains(&(*k, n)))
        .map(|k| format!("shard {k}/{n} is missing"))
        .collect()
}

/// Each point file name of the inputs with the first input's file of that
/// name (a point's file name is its index and id).
fn point_sources(dirs: &[PathBuf]) -> Result<BTreeMap<String, PathBuf>, String> {
    let mut sources = BTreeMap::new();
    for d in dirs {
        let from = d.join("points");
        let entries = std::fs::read_dir(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("{}: {e}", from.display()))?
                .path();
            if path.extension().and_then(|e| e.to_str()) == Some("json") {
                let name = path.file_name().expect("a point file has a name");
                sources
                    .entry(name.to_string_lossy().into_owned())
                    .or_insert(path);
            }
        }
    }
    Ok(sources)
}

/// Merges `dirs` into `out`.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Merged, String> {
    let prints = check_inputs(dirs, out)?;
    let mut warnings = coverage(dirs, &prints);
    let sources = point_sources(dirs)?;
    let points = out.join("points");
    std::fs::create_dir_all(&points).map_err(|e| format!("{}: {e}", points.display()))?;
    for name in ["plan.yaml", "system.yaml", "ccl.yaml"] {
        let src = dirs[0].join(name);
        if src.exists() {
            copy_file(&src, &out.join(name))?;
        }
    }
    let mut merged = prints[0].clone();
    merged.shard = None;
    let json = serde_json::to_vec_pretty(&merged).expect("fingerprints serialize");
    write_file(&out.join(fingerprint::FILE), &json)?;
    for (name, from) in &sources {
        copy_file(from, &points.join(name))?;
    }
    let files = sources.len();
    let rows = consolidate(out)?;
    let gaps = rows
        .windows(2)
        .filter(|w| w[1].index != w[0].index + 1)
        .count();
    if gaps > 0 && warnings.is_empty() {
        warnings.push(format!(
            "{gaps} gap(s) in the point indices: some points of the plan are in none of the inputs"
        ));
    }
    Ok(Merged {
        rows,
        files,
        warnings,
    })
}

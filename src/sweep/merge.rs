//! `kernbench merge`: shards of one plan into one result set. Every input is
//! checked before anything is written: fingerprints must agree (shards
//! aside), and `--out` may not be an input, lie inside one, or hold results.

use super::fingerprint::{self, Fingerprint};
use super::results::{Row, consolidate, write_atomic};
use std::path::{Path, PathBuf};

/// What a merge did.
#[derive(Debug)]
pub struct Merged {
    pub rows: Vec<Row>,
    pub files: usize,
    /// Warnings to show: missing shards or point indices.
    pub warnings: Vec<String>,
}

fn canonical(p: &Path) -> Result<PathBuf, String> {
    p.canonicalize()
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// `p` made absolute through its nearest existing ancestor (so a new
/// `--out` inside an input is recognised).
fn absolute(p: &Path) -> Result<PathBuf, String> {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if cur.exists() {
            let mut abs = canonical(&cur)?;
            abs.extend(rest.iter().rev());
            return Ok(abs);
        }
        match (cur.file_name(), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                cur = if parent.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    parent.to_path_buf()
                };
            }
            _ => return Ok(p.to_path_buf()),
        }
    }
}

/// Checks the inputs; returns their fingerprints.
fn check_inputs(dirs: &[PathBuf], out: &Path) -> Result<Vec<Fingerprint>, String> {
    let out_abs = absolute(out)?;
    let mut prints = Vec::new();
    for d in dirs {
        if !d.is_dir() {
            return Err(format!(
                "input {}: no such result directory; allowed: directories written by `kernbench sweep --out`",
                d.display()
            ));
        }
        let abs = canonical(d)?;
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
    if out.join("points").exists() {
        return Err(format!(
            "--out {} already holds results; allowed: a new directory outside every input",
            out.display()
        ));
    }
    Ok(prints)
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

/// Merges `dirs` into `out`.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Merged, String> {
    let prints = check_inputs(dirs, out)?;
    let mut warnings = missing_shards(&prints);
    let points = out.join("points");
    std::fs::create_dir_all(&points).map_err(|e| format!("{}: {e}", points.display()))?;
    for name in ["plan.yaml", "system.yaml", "ccl.yaml"] {
        let src = dirs[0].join(name);
        if src.exists() {
            std::fs::copy(&src, out.join(name)).map_err(|e| format!("{}: {e}", src.display()))?;
        }
    }
    let mut merged = prints[0].clone();
    merged.shard = None;
    let json = serde_json::to_vec_pretty(&merged).expect("fingerprints serialize");
    let fp_path = out.join(fingerprint::FILE);
    write_atomic(&fp_path, &json).map_err(|e| e.to_string())?;
    let mut files = 0;
    for d in dirs {
        let from = d.join("points");
        let entries = std::fs::read_dir(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("{}: {e}", from.display()))?
                .path();
            if path.extension().and_then(|e| e.to_str()) == Some("json") {
                let to = points.join(path.file_name().expect("a point file has a name"));
                std::fs::copy(&path, &to).map_err(|e| format!("{}: {e}", path.display()))?;
                files += 1;
            }
        }
    }
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

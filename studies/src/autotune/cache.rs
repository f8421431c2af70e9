//! The decision cache: one JSON file per (system spec, candidate set,
//! collective, size bucket), named by the SHA-256 of that key and holding the
//! key itself, so a file copied from another spec, a truncated write or a
//! hand edit is detected and rebuilt, never trusted.

use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Decision;

/// Bumped whenever the timing model or the file layout changes, so older
/// decisions are rebuilt.
pub const CACHE_FORMAT: u32 = 2;

/// What a decision depends on, hashed into its file name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheKey {
    pub format: u32,
    /// kernbench's version: another simulator may time differently.
    pub version: String,
    /// SHA-256 of the system spec's YAML.
    pub spec: String,
    /// SHA-256 of the candidate configurations' JSON, in order.
    pub candidates: String,
    pub collective: String,
    /// The participants tuned for ([`super::group_key`]): the whole
    /// machine, or a process group's subgroup.
    pub group: String,
    pub bucket_bytes: u64,
}

impl CacheKey {
    /// The key of a bucket; `spec` and `candidates` are [`sha256`] digests
    /// of the spec's YAML and the candidates' JSON.
    pub fn new(spec: &str, candidates: &str, collective: &str, group: &str, bucket: u64) -> Self {
        Self {
            format: CACHE_FORMAT,
            version: env!("CARGO_PKG_VERSION").into(),
            spec: spec.into(),
            candidates: candidates.into(),
            collective: collective.into(),
            group: group.into(),
            bucket_bytes: bucket,
        }
    }

    /// The file name: the key's own hash.
    pub fn file_name(&self) -> String {
        let json = serde_json::to_string(self).expect("a cache key always serializes");
        format!("{}.json", &sha256(&json)[..32])
    }
}

/// The hex SHA-256 of `text`.
pub fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheRecord {
    key: CacheKey,
    decision: Decision,
}

/// What reading a cache file found.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    Hit(Decision),
    Missing,
    /// The file exists but cannot be trusted: why.
    Rejected(String),
}

/// A directory of decision files.
#[derive(Debug, Clone)]
pub struct Cache {
    pub dir: PathBuf,
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The decision stored for `key`, if its file is whole and is for `key`.
    pub fn get(&self, key: &CacheKey) -> Lookup {
        let path = self.path(key);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Lookup::Missing,
            Err(e) => return Lookup::Rejected(format!("{}: {e}", path.display())),
        };
        match serde_json::from_str::<CacheRecord>(&text) {
            Ok(entry) if entry.key == *key => Lookup::Hit(entry.decision),
            Ok(_) => Lookup::Rejected(format!(
                "{} is for another system spec, candidate set, collective, group or size",
                path.display()
            )),
            Err(e) => Lookup::Rejected(format!("{} is corrupt ({e})", path.display())),
        }
    }

    /// Stores a decision atomically ([`kernbench_runtime::output::write_file`]), so an
    /// interrupted tune leaves either the old file or the new one, never half
    /// of one.
    pub fn put(&self, key: &CacheKey, decision: &Decision) -> Result<(), String> {
        let path = self.path(key);
        let io = |e: std::io::Error| format!("writing the autotune cache {}: {e}", path.display());
        fs::create_dir_all(&self.dir).map_err(io)?;
        let entry = CacheRecord {
            key: key.clone(),
            decision: decision.clone(),
        };
        let json = serde_json::to_string_pretty(&entry).expect("a decision always serializes");
        kernbench_runtime::output::write_file(&path, json.as_bytes())
            .map_err(|e| format!("writing the autotune cache: {e}"))
    }
}

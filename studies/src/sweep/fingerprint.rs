//! What produced a result directory: hashes of the plan, the base system,
//! the ccl config and the kernbench version, in `fingerprint.json`. Resume
//! and merge refuse result sets whose fingerprints differ, so two
//! configurations never mix in one results.csv.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file in a result directory.
pub const FILE: &str = "fingerprint.json";

/// FNV-1a 64 of `bytes`: a stable hash (point ids and fingerprints).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h
}

fn hex(text: &str) -> String {
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// A shard for a message: `shard k/n`, or `all points`.
pub fn show_shard(shard: Option<(usize, usize)>) -> String {
    shard.map_or("all points".into(), |(k, n)| format!("shard {k}/{n}"))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub plan: String,
    pub system: String,
    pub ccl: String,
    pub version: String,
    /// Where the plan and ccl config came from (for messages only).
    pub plan_origin: String,
    pub ccl_origin: String,
    /// `k/n` when this directory holds one shard.
    pub shard: Option<(usize, usize)>,
}

impl Fingerprint {
    pub fn new(
        plan_text: &str,
        plan_origin: &str,
        system_yaml: &str,
        ccl_text: &str,
        ccl_origin: &str,
        shard: Option<(usize, usize)>,
    ) -> Self {
        Self {
            plan: hex(plan_text),
            system: hex(system_yaml),
            ccl: hex(ccl_text),
            version: env!("CARGO_PKG_VERSION").into(),
            plan_origin: plan_origin.into(),
            ccl_origin: ccl_origin.into(),
            shard,
        }
    }

    /// The first part that differs from `other` (shards compared only if
    /// `with_shard`), described for a message.
    pub fn difference(&self, other: &Fingerprint, with_shard: bool) -> Option<String> {
        let parts = [
            (
                "plan",
                &self.plan,
                &other.plan,
                &self.plan_origin,
                &other.plan_origin,
            ),
            (
                "system spec",
                &self.system,
                &other.system,
                &self.plan_origin,
                &other.plan_origin,
            ),
            (
                "ccl config",
                &self.ccl,
                &other.ccl,
                &self.ccl_origin,
                &other.ccl_origin,
            ),
            (
                "kernbench version",
                &self.version,
                &other.version,
                &self.version,
                &other.version,
            ),
        ];
        for (what, a, b, from_a, from_b) in parts {
            if a != b {
                return Some(format!(
                    "the {what} differs: hash {a} (from {from_a}) vs {b} (from {from_b})"
                ));
            }
        }
        (with_shard && self.shard != other.shard).then(|| {
            format!(
                "the shard differs: {} vs {}",
                show_shard(self.shard),
                show_shard(other.shard)
            )
        })
    }

    /// Reads `dir/fingerprint.json`; Ok(None) if there is none.
    pub fn read(dir: &Path) -> Result<Option<Fingerprint>, String> {
        let path = dir.join(FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{}: not a kernbench fingerprint ({e})", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn the_first_differing_part_is_named() {
        let a = Fingerprint::new("p", "plan.yaml", "s", "c", "ccl.yaml", Some((1, 2)));
        let mut b = Fingerprint::new("p", "plan.yaml", "s", "c2", "other.yaml", Some((2, 2)));
        let d = a.difference(&b, false).unwrap();
        assert!(d.starts_with("the ccl config differs: hash "), "{d}");
        assert!(
            d.contains("(from ccl.yaml)") && d.contains("(from other.yaml)"),
            "{d}"
        );
        b.ccl = a.ccl.clone();
        assert_eq!(a.difference(&b, false), None);
        assert_eq!(
            a.difference(&b, true).unwrap(),
            "the shard differs: shard 1/2 vs shard 2/2"
        );
    }
}

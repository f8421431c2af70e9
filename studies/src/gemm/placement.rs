//! Where a kernel computes on the cubes that hold its output: which PEs of
//! each cube. Collectives run on some PEs (pe0 of each cube leader for the
//! cube-leader mapper); compute placed on the others overlaps them, and
//! contends with them only on what the PEs share (memory ports, NoC,
//! links; docs/model.md §Streams).

use kernbench_dist::{Block, DistError, Tensor};

/// Which PEs of each cube holding a kernel's output compute it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Placement {
    /// The PEs holding the output's shards; a cube holding its block as
    /// one shard shares it among its first PEs (one per row or column, up
    /// to the cube's PEs).
    #[default]
    Owners,
    /// These PEs of each cube, in order, share its block (one per row or
    /// column, up to their number).
    Pes(Vec<u32>),
}

impl Placement {
    /// Every PE of a cube but pe0, where the cube-leader collectives run.
    pub fn off_leader(pes_per_cube: u32) -> Placement {
        Placement::Pes((1..pes_per_cube).collect())
    }

    /// Checks the PEs exist, are distinct and are not none.
    pub fn check(&self, pes_per_cube: u32) -> Result<(), DistError> {
        let Placement::Pes(pes) = self else {
            return Ok(());
        };
        let bad = |why: String| {
            Err(DistError::Config(format!(
                "placement on PEs {pes:?}: {why}; allowed: distinct PEs of 0..{pes_per_cube}, at least one (Placement::off_leader({pes_per_cube}) is every PE but pe0)"
            )))
        };
        if pes.is_empty() {
            return bad("no PE".into());
        }
        if let Some(p) = pes.iter().find(|&&p| p >= pes_per_cube) {
            return bad(format!("a cube has no PE {p}"));
        }
        if (1..pes.len()).any(|i| pes[..i].contains(&pes[i])) {
            return bad("a PE is named twice".into());
        }
        Ok(())
    }

    /// The (cube, PE) pairs that share `t`'s shards row-wise: on each
    /// cube holding a shard, [`Placement::sharing`] its rows.
    pub fn row_sharers(&self, t: &Tensor, pes_per_cube: u32) -> Vec<(u32, u32)> {
        let mut pes: Vec<(u32, u32)> = Vec::new();
        for s in &t.shards {
            for p in self.sharing(s.block.rows.1, pes_per_cube) {
                if !pes.contains(&(s.cube, p)) {
                    pes.push((s.cube, p));
                }
            }
        }
        pes
    }

    /// PE `pe`'s rows of `block` when the placement's PEs share its rows
    /// ([`Placement::sharing`]); None when `pe` takes no part.
    pub fn rows_of_pe(&self, block: Block, pes_per_cube: u32, pe: u32) -> Option<Block> {
        let pes = self.sharing(block.rows.1, pes_per_cube);
        let part = pes.iter().position(|&p| p == pe)?;
        Some(crate::tp::kernels::rows_of(
            block,
            pes.len() as u32,
            part as u32,
        ))
    }

    /// The PEs of a cube that share a block whose split side is `len`
    /// long: one per index, at most the placement's (a cube's for `Owners`).
    pub fn sharing(&self, len: usize, pes_per_cube: u32) -> Vec<u32> {
        let all: Vec<u32> = match self {
            Placement::Owners => (0..pes_per_cube).collect(),
            Placement::Pes(pes) => pes.clone(),
        };
        let n = all.len().min(len).max(1);
        all[..n].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_shares_a_block_among_its_pes() {
        assert_eq!(Placement::Owners.sharing(3, 8), vec![0, 1, 2]);
        assert_eq!(
            Placement::off_leader(8).sharing(100, 8),
            (1..8).collect::<Vec<_>>()
        );
        assert_eq!(Placement::off_leader(4).sharing(2, 4), vec![1, 2]);
        assert!(Placement::off_leader(8).check(8).is_ok());
    }

    #[test]
    fn a_bad_placement_names_the_pes_and_the_fix() {
        let e = Placement::Pes(vec![1, 9]).check(8).unwrap_err().to_string();
        assert_eq!(
            e,
            "placement on PEs [1, 9]: a cube has no PE 9; allowed: distinct PEs of 0..8, at least one (Placement::off_leader(8) is every PE but pe0)"
        );
        let e = Placement::Pes(vec![]).check(8).unwrap_err().to_string();
        assert!(e.starts_with("placement on PEs []: no PE;"), "{e}");
        let e = Placement::Pes(vec![2, 2]).check(8).unwrap_err().to_string();
        assert!(e.contains("a PE is named twice"), "{e}");
    }
}
